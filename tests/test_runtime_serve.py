"""``manage.py tslock runtime --serve``: the local Worker for someone who installed the wheel,
run as a user would, in a process of its own, and stopped as a user would."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.conftest import CI, ROOT, require_node
from tslock_django import LockConfiguration
from tslock_django.conf import parse_provider_url
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider
from tslock_django.worker.runtime import find_runtime

#: A guard against a hung process, not a measurement: starting takes seconds.
PATIENCE = 120


@pytest.fixture
def runtime_installed() -> None:
    require_node()
    if find_runtime() is None and not CI:
        pytest.skip("the local Workers runtime is not installed (make npm, or tslock runtime --install)")


def ctrl_c_as_in_a_terminal() -> None:
    """In the child, before it runs: SIGINT back to its default action. A shell without job
    control starts background commands with SIGINT ignored, and a Python started so never
    turns SIGINT into KeyboardInterrupt: a test run started that way would wait PATIENCE
    seconds for a command deaf to the Ctrl-C the test sends (a terminal always delivers it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_serving(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], queue.Queue[str | None]]:
    """The command started; its stdout read line by line into the queue (``None`` at the
    end), its stderr into ``tmp_path / "stderr"``."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "TSLOCK_URL": "memory://",
    }
    for name in ("TSLOCK_EDGE_URL", "TSLOCK_TOKEN"):
        env.pop(name, None)
    process = subprocess.Popen(
        # Port 0: a free one, so that parallel runs never meet on 8787.
        [sys.executable, "manage.py", "tslock", "runtime", "--serve", "--port", "0", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "stderr").open("w"),
        text=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return process, lines


def the_rest(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> list[str]:
    """Every line still to come, once the process has ended."""
    process.wait(timeout=PATIENCE)
    rest = []
    while (line := lines.get(timeout=PATIENCE)) is not None:
        rest.append(line)
    return rest


def line_starting(lines: queue.Queue[str | None], prefix: str) -> str:
    while True:
        line = lines.get(timeout=PATIENCE)
        if line is None:
            lines.put(None)  # the end stays the end for the_rest()
            raise AssertionError(f"the output ended before a line starting with {prefix!r}")
        if line.startswith(prefix):
            return line[len(prefix) :]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_serve_prints_a_working_url_and_stops_cleanly(
    runtime_installed: None, tmp_path: Path, stop: signal.Signals
) -> None:
    process, lines = start_serving(tmp_path, "--persist", str(tmp_path / "state"))
    try:
        url = line_starting(lines, "Local Worker: ")
        tslock_url = line_starting(lines, "TSLOCK_URL=")
        health = httpx.get(f"{url}/v1/health", timeout=30)
        assert health.status_code == 200 and health.json()["ok"] is True
        # The printed TSLOCK_URL (with the token it generated) is one the provider accepts.
        options = parse_provider_url(tslock_url)["OPTIONS"]
        assert options["url"] == url
        store = DurableObjectLockProvider("served", **options)
        taken = store.lock(LockConfiguration("served-job", "1m"))
        assert taken is not None
        taken.unlock()
        store.close()
    finally:
        process.send_signal(stop)
        rest = the_rest(process, lines)
    err = (tmp_path / "stderr").read_text()
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert rest[-1:] == ["Stopped the local Worker."], rest
    assert any((tmp_path / "state").iterdir()), "--persist keeps the state in the folder given"
    # The runtime's process group went with it: nothing answers on the port any more.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/v1/health", timeout=30)


def test_a_taken_port_is_one_clear_error(runtime_installed: None, tmp_path: Path) -> None:
    first, lines = start_serving(tmp_path)
    try:
        port = line_starting(lines, "Local Worker: ").rsplit(":", 1)[1]
        second = subprocess.run(
            [sys.executable, "manage.py", "tslock", "runtime", "--serve", "--port", port],
            cwd=ROOT,
            env={
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "testproject.settings",
                "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
                "TSLOCK_URL": "memory://",
            },
            capture_output=True,
            text=True,
            timeout=PATIENCE,
        )
    finally:
        first.send_signal(signal.SIGINT)
        the_rest(first, lines)
    assert second.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use; pick another with --port N" in second.stderr
    assert "Traceback" not in second.stderr
