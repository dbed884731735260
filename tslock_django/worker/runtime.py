"""Run the companion Worker on the real Workers runtime (workerd via Miniflare) locally.

``tslock runtime --serve``, the demo, tests and benchmarks run the Worker with it::

    with LocalWorker() as worker:
        provider = DurableObjectLockProvider(url=worker.url, token=worker.token)

Needs Node.js 20 or newer. The runtime itself (Miniflare and workerd, pinned by the
package's ``package-lock.json``; about 165 MB) is installed once per user, never into
site-packages, in ``$XDG_CACHE_HOME/tslock-django/worker-runtime/<lockfile hash>/``
(``~/.cache`` when ``XDG_CACHE_HOME`` is unset). :class:`LocalWorker` installs it on first
use; ``python manage.py tslock runtime --install`` or :func:`install_runtime` does it ahead
of time, and ``tslock runtime --remove`` deletes it. A development checkout that ran
``npm ci --prefix tslock_django/worker`` uses those ``node_modules`` instead.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Protocol

WORKER_DIR = Path(__file__).resolve().parent

#: The oldest Node.js the pinned Miniflare runs on.
MIN_NODE = (20, 3)

#: What a user runs to install the runtime ahead of time (named in every error about it).
INSTALL_COMMAND = "python manage.py tslock runtime --install"

NODE_DOWNLOAD = "https://nodejs.org/en/download"


class ProgressStream(Protocol):
    """Where the install's progress line goes: a text stream (``sys.stderr``, a command's
    ``self.stderr``)."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> object: ...


class WorkerRuntimeError(RuntimeError):
    """The local Workers runtime could not be installed, started or stopped."""


# -- where the runtime lives ------------------------------------------------------------


def cache_root() -> Path:
    """The folder holding every installed runtime of this user.

    ``$XDG_CACHE_HOME/tslock-django/worker-runtime``; ``~/.cache`` stands in for an unset or
    relative ``XDG_CACHE_HOME`` (the XDG rule; serve.mjs applies the same one).
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "tslock-django" / "worker-runtime"


def lockfile_hash() -> str:
    """The first 16 hex digits of the SHA-256 of the shipped ``package-lock.json``.

    A new lockfile (a new Miniflare) gets a new folder, so an upgrade never runs on a
    stale runtime and two installed versions of the package never share one.
    """
    return hashlib.sha256((WORKER_DIR / "package-lock.json").read_bytes()).hexdigest()[:16]


def runtime_dir() -> Path:
    """The folder (holding ``node_modules``) where this package's runtime is installed."""
    return cache_root() / lockfile_hash()


def runtime_version() -> str:
    """The pinned Miniflare version, e.g. ``"4.20260426.0"``."""
    package = json.loads((WORKER_DIR / "package.json").read_text(encoding="utf-8"))
    return str(package["devDependencies"]["miniflare"])


def _has_runtime(folder: Path) -> bool:
    return (folder / "node_modules" / "miniflare" / "package.json").is_file()


def find_runtime() -> Path | None:
    """The folder whose ``node_modules`` hold the runtime, or ``None`` when not installed.

    A development checkout's own ``tslock_django/worker/node_modules`` (from ``npm ci``)
    wins over the per-user cache.
    """
    for folder in (WORKER_DIR, runtime_dir()):
        if _has_runtime(folder):
            return folder
    return None


# -- prerequisites ----------------------------------------------------------------------


def find_node() -> str:
    """The path of a Node.js new enough for the runtime.

    Raises:
        WorkerRuntimeError: no ``node`` on PATH, or one older than 20.3.
    """
    node = shutil.which("node")
    if node is None:
        raise WorkerRuntimeError(
            "Node.js is not installed (no `node` on PATH); the local Workers runtime needs "
            f"Node.js {MIN_NODE[0]}.{MIN_NODE[1]} or newer: install it ({NODE_DOWNLOAD}) and "
            "make sure `node` is on PATH"
        )
    version = _node_version(node)
    if version < MIN_NODE:
        found = ".".join(str(part) for part in version) if version != (0, 0) else "an unknown version"
        raise WorkerRuntimeError(
            f"Node.js at {node} is {found}; the local Workers runtime needs Node.js "
            f"{MIN_NODE[0]}.{MIN_NODE[1]} or newer: install a newer one ({NODE_DOWNLOAD}) and put it "
            "first on PATH"
        )
    return node


@functools.lru_cache(maxsize=8)
def _node_version(node: str) -> tuple[int, int]:
    # `node --version` prints e.g. "v20.20.2"; anything else counts as too old to trust.
    try:
        result = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return (0, 0)
    match = re.match(r"v(\d+)\.(\d+)", result.stdout.strip())
    return (int(match[1]), int(match[2])) if match else (0, 0)


def install_runtime(*, progress: ProgressStream | None = None) -> Path:
    """Install the pinned runtime into the per-user cache unless it is there already.

    Runs ``npm ci`` against the shipped ``package-lock.json`` in a scratch folder next to
    the target and renames it into place when complete, so an interrupted or concurrent
    install never leaves a half-filled runtime where :func:`find_runtime` looks.

    Args:
        progress: where the one progress line goes while npm runs (``sys.stderr`` by
            default).

    Returns:
        The folder holding ``node_modules`` (a development checkout's own, when present).

    Raises:
        WorkerRuntimeError: Node.js or npm is missing or too old, or ``npm ci`` failed.
    """
    found = find_runtime()
    if found is not None:
        return found
    find_node()
    npm = shutil.which("npm")
    if npm is None:
        raise WorkerRuntimeError(
            "`npm` is not on PATH; installing the local Workers runtime needs npm, which comes "
            f"with Node.js ({NODE_DOWNLOAD}; on Debian and Ubuntu also `apt-get install npm`)"
        )
    target = runtime_dir()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.partial-", dir=target.parent))
    except OSError as err:
        raise WorkerRuntimeError(
            f"cannot create {target.parent} for the local Workers runtime ({err}); set "
            "XDG_CACHE_HOME to a writable folder"
        ) from err
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(WORKER_DIR / name, staging / name)
        out = sys.stderr if progress is None else progress
        out.write(
            f"tslock: installing the local Workers runtime (miniflare {runtime_version()}, about "
            f"165 MB) into {target} with `npm ci`; this happens once\n"
        )
        out.flush()
        started = time.monotonic()
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=staging,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise WorkerRuntimeError(
                f"`npm ci` for the local Workers runtime failed after "
                f"{time.monotonic() - started:.0f} s (status {result.returncode}):\n"
                f"{(result.stderr or result.stdout)[-2000:]}"
            )
        try:
            staging.rename(target)
        except OSError:
            # Another process finished the same install first: use its copy.
            if not _has_runtime(target):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def remove_runtimes() -> list[Path]:
    """Delete every runtime this user installed (all lockfile versions); return them.

    ``pip uninstall`` cannot reach the per-user cache: run this (``tslock runtime
    --remove``) first. A development checkout's ``node_modules`` are left alone.
    """
    root = cache_root()
    removed = sorted(root.iterdir()) if root.is_dir() else []
    if root.is_dir():
        shutil.rmtree(root)
    return removed


class LocalWorker:
    """The tslock Worker on 127.0.0.1 (a free port), in a process group of its own.

    Args:
        token: the Worker's ``TSLOCK_TOKEN``; a random one by default. ``""`` starts the
            Worker without a secret (it then answers 500, like a deployment that lacks it).
        persist_dir: keep Durable Object state in this folder (it survives
            :meth:`restart` and new ``LocalWorker`` instances); in memory by default. A
            relative path is taken from the current working directory when the
            ``LocalWorker`` is created.
        start_timeout: seconds to wait for the ``READY`` line.
        install: install the runtime into the per-user cache when it is missing (see
            :meth:`install_runtime`); with ``False`` a missing runtime is an error.
        script: run this entry module instead of the shipped ``index.js``, with the
            same bindings; the modules it imports are loaded from beside it (tests start
            an older release of the Worker this way, or a wrapper that imports
            ``./index.js`` from a copy made by
            :func:`tslock_django.worker.export.copy_worker_modules`).
        variables: Worker variables (wrangler.jsonc's ``vars``), e.g.
            ``{"TSLOCK_INDEX_SHARDS": "16"}``; changing them takes a :meth:`restart`.

    Attributes:
        url: the base URL (``http://127.0.0.1:PORT``), set while running.
        token: the bearer secret.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        persist_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 30.0,
        install: bool = True,
        script: str | os.PathLike[str] | None = None,
        variables: dict[str, str] | None = None,
    ) -> None:
        self.token = secrets.token_urlsafe(24) if token is None else token
        # Absolute now: the runtime runs in a scratch folder, and a relative path there
        # would put the data somewhere the caller never looks.
        self.persist_dir = Path(os.path.abspath(persist_dir)) if persist_dir is not None else None
        self.start_timeout = start_timeout
        self.install = install
        self.script = Path(script).resolve() if script is not None else None
        self.variables = dict(variables or {})
        self.url = ""
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._output: collections.deque[str] = collections.deque(maxlen=200)

    def __repr__(self) -> str:
        state = self.url or "stopped"
        return f"<LocalWorker {state}>"

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> LocalWorker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the runtime and wait until it serves requests."""
        if self._process is not None:
            raise WorkerRuntimeError("this LocalWorker is already running")
        node = find_node()
        runtime = self._runtime()
        if self._tmpdir is None:
            # Miniflare keeps scratch state under $TMPDIR/miniflare-*; give it a folder we remove.
            self._tmpdir = tempfile.TemporaryDirectory(prefix="tslock-worker-")
        env = {**os.environ, "TMPDIR": self._tmpdir.name, "TSLOCK_TOKEN": self.token}
        env.pop("NODE_OPTIONS", None)
        command = [node, str(WORKER_DIR / "serve.mjs"), "--runtime", str(runtime)]
        if self.persist_dir is not None:
            self.persist_dir.mkdir(parents=True, exist_ok=True)
            command += ["--persist", str(self.persist_dir)]
        if self.script is not None:
            command += ["--script", str(self.script)]
        if self.variables:
            command += ["--vars", json.dumps(self.variables)]
        self._output.clear()
        process = subprocess.Popen(
            command,
            # Never the package folder: it may be read-only, and nothing may land there.
            cwd=self._tmpdir.name,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            # Its own process group: stopping the group also stops workerd, which
            # would otherwise keep running (and hold the port) if node died alone.
            start_new_session=True,
        )
        self._process = process
        ready = threading.Event()
        reader = threading.Thread(target=self._read_output, args=(process, ready), daemon=True)
        reader.start()
        self._reader = reader
        output_ended = ready.wait(self.start_timeout)
        if not self.url:
            exited = process.poll()
            if output_ended and exited is None:
                # The output ended without READY: the launcher is exiting; get its status.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    exited = process.wait(5)
            self.stop()
            if exited is not None:
                status = f"it exited with status {exited}"
            elif output_ended:
                status = "it closed its output without printing READY"
            else:
                status = f"no READY line within {self.start_timeout:g} s"
            raise WorkerRuntimeError(
                f"the local Workers runtime did not start ({status}). Its output:\n" + self.output()
            )

    def _read_output(self, process: subprocess.Popen[str], ready: threading.Event) -> None:
        # Drains the pipe for the process's whole life so a chatty Worker never blocks.
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip("\n")
            if not ready.is_set() and line.startswith("READY "):
                self.url = line.split(" ", 1)[1].strip()
                ready.set()
                continue
            self._output.append(line)
        ready.set()

    def output(self) -> str:
        """The runtime's recent output (its last 200 lines, READY excluded)."""
        return "\n".join(self._output)

    def stop(self, grace: float = 5.0) -> None:
        """Stop the process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
        process, self._process = self._process, None
        self.url = ""
        if process is not None:
            self._signal_group(process, signal.SIGTERM)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal_group(process, signal.SIGKILL)
                process.wait(grace)
            # workerd may outlive node by a moment. While any member is alive the group id
            # cannot be reused, so a group that still answers is ours: make sure it is gone.
            if self._group_alive(process):
                self._signal_group(process, signal.SIGKILL)
            # The reader ends at end-of-file once the group is gone; only then close the pipe.
            if self._reader is not None:
                self._reader.join(grace)
                self._reader = None
            if process.stdout is not None:
                process.stdout.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    @staticmethod
    def _signal_group(process: subprocess.Popen[str], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)

    @staticmethod
    def _group_alive(process: subprocess.Popen[str]) -> bool:
        try:
            os.killpg(process.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def restart(self) -> None:
        """Stop and start again (a new port; state is kept only with ``persist_dir``)."""
        self.stop()
        self.start()

    # -- prerequisites ---------------------------------------------------------------

    @staticmethod
    def install_runtime(*, progress: ProgressStream | None = None) -> Path:
        """Install the runtime ahead of time (see :func:`install_runtime`); return its folder."""
        return install_runtime(progress=progress)

    def _runtime(self) -> Path:
        found = find_runtime()
        if found is not None:
            return found
        if not self.install:
            raise WorkerRuntimeError(
                f"the local Workers runtime (miniflare {runtime_version()}) is not installed "
                f"(looked in {runtime_dir()}); install it with `{INSTALL_COMMAND}` or "
                "LocalWorker.install_runtime(), or pass install=True"
            )
        return install_runtime()
