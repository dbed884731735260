"""Run the companion Worker on the real Workers runtime (workerd via Miniflare) locally.

For tests, benchmarks and the demo::

    with LocalWorker() as worker:
        provider = DurableObjectLockProvider(url=worker.url, token=worker.token)

Needs Node.js >= 20 and the Worker's npm packages: ``npm ci --prefix tslock_django/worker``
(``make test`` runs it). :class:`LocalWorker` runs ``npm ci`` itself when
``node_modules`` is missing and ``install=True`` (the default).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

WORKER_DIR = Path(__file__).resolve().parent.parent / "worker"


class WorkerRuntimeError(RuntimeError):
    """The local Workers runtime could not be installed, started or stopped."""


class LocalWorker:
    """The tslock Worker on 127.0.0.1 (a free port), in a process group of its own.

    Args:
        token: the Worker's ``TSLOCK_TOKEN``; a random one by default. ``""`` starts the
            Worker without a secret (it then answers 500, like a deployment that lacks it).
        persist_dir: keep Durable Object state in this folder (it survives
            :meth:`restart` and new ``LocalWorker`` instances); in memory by default.
        start_timeout: seconds to wait for the ``READY`` line.
        install: run ``npm ci`` when ``node_modules`` is missing.
        script: run this Worker module instead of the shipped ``index.js``, with the
            same bindings (tests start an older release of the Worker this way).
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
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
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
        node = self._node()
        self._ensure_packages()
        if self._tmpdir is None:
            # Miniflare keeps scratch state under $TMPDIR/miniflare-*; give it a folder we remove.
            self._tmpdir = tempfile.TemporaryDirectory(prefix="tslock-worker-")
        env = {**os.environ, "TMPDIR": self._tmpdir.name, "TSLOCK_TOKEN": self.token}
        env.pop("NODE_OPTIONS", None)
        command = [node, str(WORKER_DIR / "serve.mjs")]
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
            cwd=WORKER_DIR,
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
    def _node() -> str:
        node = shutil.which("node")
        if node is None:
            raise WorkerRuntimeError(
                "Node.js is not installed (no `node` on PATH); the local Workers runtime needs "
                "Node.js 20 or newer: https://nodejs.org/"
            )
        return node

    def _ensure_packages(self) -> None:
        if (WORKER_DIR / "node_modules" / "miniflare").is_dir():
            return
        if not self.install:
            raise WorkerRuntimeError(
                f"the Worker's npm packages are missing ({WORKER_DIR / 'node_modules'}); "
                "run `npm ci --prefix tslock_django/worker` (or `make test`)"
            )
        npm = shutil.which("npm")
        if npm is None:
            raise WorkerRuntimeError(
                "the Worker's npm packages are missing and `npm` is not on PATH; install Node.js "
                "(with npm) and run `npm ci --prefix tslock_django/worker`"
            )
        # The lockfile pins the exact runtime; an installed wheel may not carry it, and then
        # package.json's exact miniflare pin is the best there is.
        verb = "ci" if (WORKER_DIR / "package-lock.json").is_file() else "install"
        started = time.monotonic()
        result = subprocess.run(
            [npm, verb, "--no-audit", "--no-fund"],
            cwd=WORKER_DIR,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise WorkerRuntimeError(
                f"`npm {verb}` in {WORKER_DIR} failed after {time.monotonic() - started:.0f} s "
                f"(status {result.returncode}):\n{result.stderr[-2000:]}"
            )
