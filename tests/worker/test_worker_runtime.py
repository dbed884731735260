"""LocalWorker and serve.mjs: the runtime in a per-user cache (never in the package),
paths taken from the caller, clear errors when something is missing, nothing left running."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
from argparse import ArgumentError, ArgumentParser
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.core.management.base import BaseCommand, CommandError

from tests.conftest import require_node
from tslock_django.cli import runtime as _runtime
from tslock_django.worker import runtime as worker_runtime
from tslock_django.worker.export import worker_modules
from tslock_django.worker.runtime import LocalWorker, WorkerRuntimeError

SOURCE = worker_runtime.WORKER_DIR
SHIPPED = (*worker_modules(), "serve.mjs", "package.json", "package-lock.json")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty per-user cache (XDG_CACHE_HOME) of this test's own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    return folder


def copy_package(root: Path) -> Path:
    """The worker folder as an installed wheel has it: the shipped files, no node_modules."""
    folder = root / "site-packages" / "tslock_django" / "worker"
    folder.mkdir(parents=True)
    for name in SHIPPED:
        shutil.copyfile(SOURCE / name, folder / name)
    return folder


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> Path:
    """A copy of the shipped worker folder without node_modules, as WORKER_DIR."""
    folder = copy_package(tmp_path)
    monkeypatch.setattr(worker_runtime, "WORKER_DIR", folder)
    return folder


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def fake_node(folder: Path, version: str) -> Path:
    """A `node` on PATH that prints ``version`` (and nothing else is on that PATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "node"
    script.write_text(f"#!/bin/sh\necho {version}\n")
    script.chmod(0o755)
    return folder


def command() -> BaseCommand:
    return BaseCommand(stdout=io.StringIO(), stderr=io.StringIO())


def out(cmd: BaseCommand) -> str:
    return cmd.stdout._out.getvalue()  # type: ignore[attr-defined, no-any-return]


def err(cmd: BaseCommand) -> str:
    return cmd.stderr._out.getvalue()  # type: ignore[attr-defined, no-any-return]


# -- where the runtime lives ----------------------------------------------------------------


def test_the_cache_folder_follows_xdg_and_the_lockfile(package: Path, cache: Path) -> None:
    folder = worker_runtime.runtime_dir()
    assert folder.parent == cache / "tslock-django" / "worker-runtime"
    assert len(folder.name) == 16
    (package / "package-lock.json").write_text('{"lockfileVersion": 3, "changed": true}')
    assert worker_runtime.runtime_dir() != folder, "a new lockfile gets a folder of its own"


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert worker_runtime.cache_root() == tmp_path / ".cache" / "tslock-django" / "worker-runtime"


def test_a_relative_persist_dir_is_taken_from_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    worker = LocalWorker(persist_dir="var/state")
    monkeypatch.chdir("/")
    assert worker.persist_dir == tmp_path / "var" / "state"


# -- missing or unfit prerequisites ------------------------------------------------------------


def test_missing_node_is_a_helpful_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tslock_django.worker.runtime.shutil.which", lambda name: None)
    with pytest.raises(WorkerRuntimeError, match=r"Node\.js is not installed.*20\.3 or newer.*nodejs\.org"):
        LocalWorker().start()


def test_an_old_node_is_named_with_its_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(fake_node(tmp_path / "bin", "v18.19.1")))
    with pytest.raises(WorkerRuntimeError, match=r"is 18\.19; .* needs Node\.js 20\.3 or newer") as caught:
        LocalWorker().start()
    assert str(tmp_path / "bin" / "node") in str(caught.value)


def test_missing_npm_names_what_to_install(
    package: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(fake_node(tmp_path / "bin", "v22.1.0")))
    with pytest.raises(WorkerRuntimeError, match=r"`npm` is not on PATH.*comes with Node\.js"):
        worker_runtime.install_runtime()


def test_missing_runtime_without_install_names_the_command(package: Path, node: str) -> None:
    with pytest.raises(WorkerRuntimeError) as caught:
        LocalWorker(install=False).start()
    message = str(caught.value)
    assert "python manage.py tslock runtime --install" in message
    assert str(worker_runtime.runtime_dir()) in message
    assert "make test" not in message and "npm ci --prefix" not in message, "clone-only advice"


def test_serve_without_the_runtime_prints_one_line_naming_the_command(package: Path, node: str) -> None:
    done = subprocess.run(
        [node, str(package / "serve.mjs")], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 3
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "python manage.py tslock runtime --install" in lines[0]
    assert str(worker_runtime.runtime_dir()) in lines[0], "it looks where Python installs"
    assert "ERR_MODULE_NOT_FOUND" not in done.stderr


def test_a_launcher_that_fails_shows_its_output(package: Path, node: str) -> None:
    (package / "node_modules" / "miniflare").mkdir(parents=True)
    (package / "node_modules" / "miniflare" / "package.json").write_text("{}")
    (package / "serve.mjs").write_text('console.error("workerd: glibc too old"); process.exit(3);\n')
    with pytest.raises(WorkerRuntimeError) as caught:
        LocalWorker(start_timeout=20).start()
    assert "exited with status 3" in str(caught.value)
    assert "glibc too old" in str(caught.value)


# -- the real install into the cache ------------------------------------------------------------


@pytest.fixture(scope="module")
def installed_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """One real install shared by the module: (package folder, cache). npm may use its own
    download cache, as a user's second install would."""
    require_node()
    root = tmp_path_factory.mktemp("installed")
    with pytest.MonkeyPatch.context() as patch:
        package = copy_package(root)
        patch.setattr(worker_runtime, "WORKER_DIR", package)
        patch.setenv("XDG_CACHE_HOME", str(root / "cache"))
        patch.setenv("npm_config_prefer_offline", "true")
        progress = io.StringIO()
        folder = LocalWorker.install_runtime(progress=progress)
        lines = progress.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tslock: installing the local Workers runtime")
        assert str(folder) in lines[0]
        yield package, root / "cache"
        worker_runtime.remove_runtimes()  # 165 MB: not for pytest's kept temporary folders


@pytest.fixture
def installed(installed_once: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(runtime folder, package folder, cache) of the module's install."""
    package, cache = installed_once
    monkeypatch.setattr(worker_runtime, "WORKER_DIR", package)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    folder = worker_runtime.find_runtime()
    assert folder is not None
    return folder, package, cache


def test_the_runtime_goes_to_the_cache_and_the_data_to_the_caller(
    installed: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, package, cache = installed
    assert folder == worker_runtime.runtime_dir()
    assert folder.is_relative_to(cache)
    assert not (package / "node_modules").exists()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name], "no scratch folder left"
    before = tree(package.parent.parent)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    with LocalWorker(persist_dir="var/worker-state", install=False) as worker:
        answer = httpx.post(
            worker.url + "/v1/acquire",
            headers={"Authorization": f"Bearer {worker.token}"},
            json={"name": "nightly", "lock_at_most_for_ms": 600_000},
        )
        assert answer.status_code == 200, answer.text
    assert any((project / "var" / "worker-state").rglob("*.sqlite")), "the data is under the caller"
    assert tree(package.parent.parent) == before, "nothing new next to the package"
    with LocalWorker(persist_dir=project / "var" / "worker-state", token=worker.token) as again:
        second = httpx.post(
            again.url + "/v1/acquire",
            headers={"Authorization": f"Bearer {again.token}"},
            json={"name": "nightly", "lock_at_most_for_ms": 600_000},
        )
    assert second.status_code == 200 and second.json()["acquired"] is False, "the state persisted"


def test_serve_started_by_hand_finds_the_cached_runtime(
    installed: tuple[Path, Path, Path], node: str
) -> None:
    folder, package, _cache = installed
    process = subprocess.Popen(
        [node, str(package / "serve.mjs")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=folder.parent,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
        assert process.stdout is not None
        process.stdout.close()
    assert first.startswith("READY http://127.0.0.1:"), first


def test_a_second_install_is_a_no_op(installed: tuple[Path, Path, Path]) -> None:
    progress = io.StringIO()
    assert worker_runtime.install_runtime(progress=progress) == installed[0]
    assert progress.getvalue() == ""


def test_the_checkouts_node_modules_win_over_the_cache(package: Path) -> None:
    (package / "node_modules" / "miniflare").mkdir(parents=True)
    (package / "node_modules" / "miniflare" / "package.json").write_text("{}")
    assert worker_runtime.find_runtime() == package


# -- tslock runtime --------------------------------------------------------------------------------


def test_tslock_runtime_says_where_it_would_install(package: Path, node: str) -> None:
    cmd = command()
    _runtime.handle(cmd)
    assert "is not installed" in out(cmd)
    assert "`python manage.py tslock runtime --install` puts it in " + str(
        worker_runtime.runtime_dir()
    ) in out(cmd)
    assert f"Node.js: {node}" in out(cmd)


def test_tslock_runtime_install_then_status_then_remove(
    package: Path, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("npm_config_prefer_offline", "true")
    cmd = command()
    _runtime.handle(cmd, install=True)
    folder = worker_runtime.runtime_dir()
    assert f"is installed in {folder}" in out(cmd)
    assert err(cmd).startswith("tslock: installing the local Workers runtime")
    status = command()
    _runtime.handle(status)
    assert f"is installed in {folder}" in out(status)
    removed = command()
    _runtime.handle(removed, remove=True)
    assert "Removed 1 runtime folder(s)" in out(removed)
    assert not folder.exists()
    assert worker_runtime.find_runtime() is None
    again = command()
    _runtime.handle(again, remove=True)
    assert "nothing to remove" in out(again)


def test_tslock_runtime_install_failure_is_a_command_error(
    package: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(fake_node(tmp_path / "bin", "v22.1.0")))
    with pytest.raises(CommandError, match="npm"):
        _runtime.handle(command(), install=True)


def test_install_and_remove_exclude_each_other() -> None:
    parser = ArgumentParser(prog="tslock runtime", exit_on_error=False)
    _runtime.add_arguments(parser)
    assert parser.parse_args(["--install"]).install is True
    with pytest.raises(ArgumentError, match="not allowed with argument --install"):
        parser.parse_args(["--install", "--remove"])


# -- stopping ---------------------------------------------------------------------------------------


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
