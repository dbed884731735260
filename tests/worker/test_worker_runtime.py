"""LocalWorker: clear errors when something is missing, and nothing left running."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tslock_django.testing import worker_runtime
from tslock_django.testing.worker_runtime import LocalWorker, WorkerRuntimeError


def test_missing_node_is_a_helpful_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tslock_django.testing.worker_runtime.shutil.which", lambda name: None)
    with pytest.raises(WorkerRuntimeError, match=r"Node\.js is not installed"):
        LocalWorker().start()


def test_missing_packages_without_install_say_how_to_get_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, node: str
) -> None:
    monkeypatch.setattr(worker_runtime, "WORKER_DIR", tmp_path)
    with pytest.raises(WorkerRuntimeError, match="npm ci --prefix tslock_django/worker"):
        LocalWorker(install=False).start()


def test_a_launcher_that_fails_shows_its_output(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, node: str
) -> None:
    (tmp_path / "node_modules" / "miniflare").mkdir(parents=True)
    (tmp_path / "serve.mjs").write_text('console.error("workerd: glibc too old"); process.exit(3);\n')
    monkeypatch.setattr(worker_runtime, "WORKER_DIR", tmp_path)
    with pytest.raises(WorkerRuntimeError) as caught:
        LocalWorker(start_timeout=20).start()
    assert "exited with status 3" in str(caught.value)
    assert "glibc too old" in str(caught.value)


def live_members_of_group(pgid: int) -> list[int]:
    """Processes of a process group that are still running (zombies waiting for the init
    process to reap them are not running)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # Fields after the command (which is in parentheses and may hold spaces).
        state, _ppid, group = text.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="needs Linux /proc to inspect process groups"
)
def test_stop_leaves_no_process_and_no_scratch_folder(node: str) -> None:
    worker = LocalWorker()
    worker.start()
    assert worker._process is not None and worker._tmpdir is not None
    pid = worker._process.pid
    scratch = Path(worker._tmpdir.name)
    assert httpx.get(worker.url + "/v1/health").status_code == 200
    worker.stop()
    assert live_members_of_group(pid) == []
    assert not scratch.exists()
    assert worker.url == ""
    assert repr(worker) == "<LocalWorker stopped>"
