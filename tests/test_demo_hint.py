"""`make demo PROVIDER=edge` ends with shell lines for looking at the Worker's state. They
must work as printed: the Worker and the client share the secret through TSLOCK_TOKEN."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from testproject.run_demo import EDGE_HINT, VENV_PY
from tests.conftest import require_node

ROOT = Path(__file__).resolve().parent.parent

# What the last line (`tslock list --provider edge`) needs, checked without the listing
# itself: the secret in TSLOCK_EDGE_URL opens the Worker that `tslock runtime --serve` started.
PROBE = """
import os, sys, urllib.parse, urllib.request
url = urllib.parse.urlsplit(os.environ["TSLOCK_EDGE_URL"])
request = urllib.request.Request(
    f"http://{url.hostname}:{url.port}/v1/locks", headers={"Authorization": f"Bearer {url.username}"}
)
with urllib.request.urlopen(request, timeout=10) as answer:
    print("STATUS", answer.status)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_edge_hint_runs_as_printed(tmp_path: Path) -> None:
    require_node()
    commands = [line.strip() for line in EDGE_HINT.splitlines() if line.startswith("      ")]
    assert commands[-1] == f"{VENV_PY} manage.py tslock list --provider edge"
    assert any("TSLOCK_TOKEN" in line for line in commands), "the secret's variable is named"
    port = str(free_port())
    # As printed, but on a free port, with this interpreter, the state in a folder of the
    # test's own, and the server's output in a file, to wait for its "Local Worker:" line.
    script = ["set -e"] + [
        line.replace("8787", port)
        .replace(VENV_PY, sys.executable)
        .replace("var/worker-state", str(tmp_path / "state"))
        .replace(" &", f" > {tmp_path}/serve.log 2>&1 &")
        for line in commands[:-1]
    ]
    script.append(
        f"for i in $(seq 300); do grep -q 'Local Worker:' {tmp_path}/serve.log && break; sleep 0.1; done"
    )
    script.append(f"{sys.executable} -c '{PROBE}'")
    shell = subprocess.Popen(
        ["bash", "-c", "\n".join(script)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("TSLOCK_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the backgrounded Worker is stopped with the group
    )
    try:
        output, _ = shell.communicate(timeout=60)
    finally:
        os.killpg(shell.pid, signal.SIGTERM)
    assert "STATUS 200" in output, output + (tmp_path / "serve.log").read_text()
