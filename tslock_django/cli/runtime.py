"""``manage.py tslock runtime``: the local Workers runtime (Miniflare and workerd) that
``LocalWorker`` and ``make demo PROVIDER=edge`` run the companion Worker on.

Without options it says whether the runtime is installed and where; ``--install`` puts it
into the per-user cache ahead of time (the first ``LocalWorker`` would otherwise do it);
``--remove`` deletes every runtime this user installed, which ``pip uninstall`` cannot
reach; ``--serve [--port N] [--persist DIR]`` runs the companion Worker on it in the
foreground, on 127.0.0.1:8787 by default, until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import tempfile
from argparse import ArgumentParser
from collections import deque
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..worker import runtime
from .arguments import port as port_number

HELP = (
    "Show, install (--install) or remove (--remove) the local Workers runtime, or run the Worker "
    "on it (--serve)."
)

#: Where ``--serve`` listens unless told otherwise: wrangler's port, and the one the
#: README's local URL (``cloudflare-do+http://TOKEN@127.0.0.1:8787/``) names.
DEFAULT_PORT = 8787

#: Seconds the Worker gets to stop after SIGTERM before its process group is killed.
STOP_GRACE = 10.0


def add_arguments(parser: ArgumentParser) -> None:
    """The subcommand's options: ``--install``, ``--remove`` or ``--serve`` (at most one),
    and ``--serve``'s ``--port`` and ``--persist``."""
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--install",
        action="store_true",
        help="Install the runtime into the per-user cache now (npm ci, about 165 MB, once).",
    )
    action.add_argument(
        "--remove",
        action="store_true",
        help="Delete every runtime this user installed (run it before `pip uninstall`).",
    )
    action.add_argument(
        "--serve",
        action="store_true",
        help="Run the companion Worker on the local runtime in the foreground until Ctrl-C, and print "
        "its TSLOCK_URL (installs the runtime first if needed).",
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=None,
        help=f"With --serve: the port on 127.0.0.1 (default {DEFAULT_PORT}; 0 picks a free one).",
    )
    parser.add_argument(
        "--persist",
        metavar="DIR",
        default=None,
        help="With --serve: keep the Durable Objects' state in DIR, so locks survive a restart "
        "(default: in memory, gone when it stops).",
    )


def handle(
    command: BaseCommand,
    *,
    install: bool = False,
    remove: bool = False,
    serve: bool = False,
    port: int | None = None,
    persist: str | None = None,
    **_: Any,
) -> None:
    """Run ``tslock runtime`` for ``command`` (its stdout, stderr and style).

    Raises:
        CommandError: Node.js or npm is missing or too old, the install failed, or the
            Worker could not start or stopped by itself.
    """
    if not serve and (port is not None or persist is not None):
        raise CommandError(
            "--port and --persist go with --serve: tslock runtime --serve [--port N] [--persist DIR]"
        )
    if serve:
        serve_worker(command, port=DEFAULT_PORT if port is None else port, persist=persist)
        return
    version = runtime.runtime_version()
    if remove:
        removed = runtime.remove_runtimes()
        root = runtime.cache_root()
        if removed:
            command.stdout.write(f"Removed {len(removed)} runtime folder(s) from {root}")
        else:
            command.stdout.write(f"No runtime installed in {root}; nothing to remove")
        if runtime.find_runtime() is not None:
            command.stdout.write(
                f"The development checkout's runtime in {runtime.WORKER_DIR / 'node_modules'} is "
                "left as it is"
            )
        return
    if install:
        already = runtime.find_runtime()
        try:
            folder = runtime.install_runtime(progress=command.stderr)
        except runtime.WorkerRuntimeError as err:
            raise CommandError(str(err)) from err
        verb = "is already installed" if already is not None else "is installed"
        command.stdout.write(
            command.style.SUCCESS(f"The local Workers runtime (miniflare {version}) {verb} in {folder}")
        )
        return
    found = runtime.find_runtime()
    if found is None:
        command.stdout.write(
            f"The local Workers runtime (miniflare {version}) is not installed; "
            f"`{runtime.INSTALL_COMMAND}` puts it in {runtime.runtime_dir()} (about 165 MB)"
        )
    else:
        command.stdout.write(f"The local Workers runtime (miniflare {version}) is installed in {found}")
    try:
        node = runtime.find_node()
    except runtime.WorkerRuntimeError as err:
        command.stderr.write(str(err))
    else:
        command.stdout.write(f"Node.js: {node}")


def serve_worker(command: BaseCommand, *, port: int = DEFAULT_PORT, persist: str | None = None) -> None:
    """Run the companion Worker on 127.0.0.1:``port`` until Ctrl-C (SIGINT), then stop the
    runtime's whole process group (node and workerd) and return.

    The bearer token is ``TSLOCK_TOKEN`` from the environment when set (then never
    printed), else a new random one, printed in the ``TSLOCK_URL`` line since there is
    no other way to learn it. The runtime gets a process group of its own, so stopping
    it cannot leave workerd holding the port.

    Raises:
        CommandError: Node.js or the runtime is missing and cannot be installed, the
            Worker did not start (the port is taken, ...), or it stopped by itself.
    """
    try:
        node = runtime.find_node()
        folder = runtime.install_runtime(progress=command.stderr)
    except runtime.WorkerRuntimeError as err:
        raise CommandError(str(err)) from err
    given = os.environ.get("TSLOCK_TOKEN", "")
    token = given or secrets.token_urlsafe(24)
    state = Path(os.path.abspath(persist)) if persist is not None else None
    argv = [node, str(runtime.WORKER_DIR / "serve.mjs"), "--runtime", str(folder), "--port", str(port)]
    if state is not None:
        try:
            state.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CommandError(f"--persist {persist}: cannot create that folder ({err})") from err
        argv += ["--persist", str(state)]
    command.stderr.write(f"Starting the tslock Worker on 127.0.0.1:{port} ...")
    # Miniflare keeps scratch files under $TMPDIR; this folder goes when the Worker stops.
    with tempfile.TemporaryDirectory(prefix="tslock-serve-") as scratch:
        env = {**os.environ, "TMPDIR": scratch, "TSLOCK_TOKEN": token}
        env.pop("NODE_OPTIONS", None)
        process = subprocess.Popen(
            argv,
            cwd=scratch,  # never the package folder, which may be read-only
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        interrupted = False
        # SIGTERM (a process manager) and SIGHUP (the terminal closed) stop it as Ctrl-C
        # does: dying by their default action would leave the Worker's group running.
        previous = _stop_on(signal.SIGTERM, signal.SIGHUP)
        try:
            url = _wait_until_ready(process, port)
            host = url.split("://", 1)[1]
            shown_token = "$TSLOCK_TOKEN" if given else token
            command.stdout.write(f"Local Worker: {url}")
            command.stdout.write(f"TSLOCK_URL=cloudflare-do+http://{shown_token}@{host}/")
            command.stdout.write(
                f"Durable Object state: in {state}"
                if state is not None
                else "Durable Object state: in memory (gone when it stops; --persist DIR keeps it)"
            )
            command.stdout.write("Press Ctrl-C to stop it.")
            command.stdout.flush()
            assert process.stdout is not None
            for line in process.stdout:  # the Worker's own output, as it comes
                command.stdout.write(line.rstrip("\n"))
                command.stdout.flush()
        except KeyboardInterrupt:
            interrupted = True
        finally:
            status = _stop(process)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if not interrupted:
            raise CommandError(f"the local Workers runtime stopped by itself (exit status {status})")
        command.stdout.write("Stopped the local Worker.")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_on(*signals: signal.Signals) -> dict[signal.Signals, Any]:
    """Make ``signals`` raise KeyboardInterrupt; return the handlers they had."""
    previous = {}
    for sig in signals:
        with contextlib.suppress(ValueError):  # only the main thread may set a handler
            previous[sig] = signal.signal(sig, _interrupt)
    return previous


def _wait_until_ready(process: subprocess.Popen[str], port: int) -> str:
    """The URL from serve.mjs's ``READY <url>`` line; CommandError with its output if it
    ends without one."""
    assert process.stdout is not None
    said: deque[str] = deque(maxlen=40)
    for line in process.stdout:
        if line.startswith("READY "):
            return line.split(" ", 1)[1].strip()
        said.append(line.rstrip("\n"))
    status = process.wait()
    if any("EADDRINUSE" in line or "ADDRESS_IN_USE" in line for line in said):
        raise CommandError(
            f"the local Workers runtime did not start: port {port} on 127.0.0.1 is in use; "
            "pick another with --port N (0: any free port)"
        )
    raise CommandError(
        f"the local Workers runtime did not start (exit status {status}). Its output:\n" + "\n".join(said)
    )


def _stop(process: subprocess.Popen[str]) -> int:
    """Stop the runtime's process group: SIGTERM (the Worker disposes of itself and
    exits), SIGKILL after STOP_GRACE seconds, and SIGKILL for any member left (workerd
    outliving node). A second Ctrl-C meanwhile is ignored, so the group is never left
    half-stopped. Returns node's exit status."""
    previous = None
    with contextlib.suppress(ValueError):  # only the main thread may set a handler
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _signal_group(process.pid, signal.SIGTERM)
        try:
            status = process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            status = process.wait(STOP_GRACE)
        # While any member lives the group id cannot be reused, so the group is ours.
        _signal_group(process.pid, signal.SIGKILL)
        if process.stdout is not None:
            process.stdout.close()
        return status
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)
