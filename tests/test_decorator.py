"""@locked_command: run, skip, fail, fail closed, per-argument names and the added options."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from tests.conftest import start_manage
from tests.lockapp.management.commands import locked_job, locked_keepalive
from tslock_django import LockConfiguration, LockProviderError, locked_command, providers
from tslock_django.decorators import EXIT_LOCKED
from tslock_django.providers.memory import MemoryLockProvider

ROOT = Path(__file__).resolve().parent.parent
MEMORY = {
    "default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
    "second": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
    "broken": {"BACKEND": "tests.test_decorator.BrokenStore"},
}


class BrokenStore(MemoryLockProvider):
    """A store that fails on every acquire, as an unreachable one does."""

    def _acquire(self, config: LockConfiguration) -> None:
        raise LockProviderError("connection refused", alias=self.alias)


@pytest.fixture(autouse=True)
def memory_providers() -> Iterator[None]:
    locked_job.CALLS.clear()
    with override_settings(TSLOCK_PROVIDERS=MEMORY):
        yield


def run(*args: str, **options: object) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def hold(name: str, alias: str = "default") -> None:
    assert providers[alias].lock(LockConfiguration(name, "1m")) is not None


def test_runs_under_the_lock_and_releases_it() -> None:
    out, err = run("locked_job", "--shard", "x")
    assert out == "ran shard x\n" and err == ""
    assert locked_job.CALLS[0]["fencing_token"] == 1
    run("locked_job", "--shard", "x")
    assert locked_job.CALLS[1]["fencing_token"] == 2, "the first run released its lock"


def test_skips_with_one_line_naming_lock_holder_and_time() -> None:
    hold("job-x")
    out, err = run("locked_job", "--shard", "x")
    assert out == ""
    assert locked_job.CALLS == []
    lines = err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("skipped: lock 'job-x' is held by ")
    assert " until 20" in lines[0] and lines[0].endswith("locked_job did not run")


def test_per_argument_names_are_independent_locks() -> None:
    hold("job-x")
    out, _ = run("locked_job", "--shard", "y")
    assert out == "ran shard y\n"


def test_on_locked_fail_raises_with_the_tempfail_status() -> None:
    hold("strict")
    with pytest.raises(CommandError) as caught:
        run("locked_strict")
    assert caught.value.returncode == EXIT_LOCKED
    assert "lock 'strict' is held by" in str(caught.value)


def test_store_failure_fails_closed_naming_the_provider() -> None:
    with pytest.raises(CommandError) as caught:
        run("locked_job", "--lock-provider", "broken")
    assert locked_job.CALLS == []
    assert "lock provider 'broken': connection refused" in str(caught.value)
    assert "did not run" in str(caught.value)
    assert not isinstance(caught.value, type(None)) and caught.value.returncode == 1


def test_lock_is_released_when_handle_raises() -> None:
    with pytest.raises(RuntimeError, match="the job failed"):
        run("locked_job", "--explode")
    assert providers["default"].lock(LockConfiguration("job-a", "1m")) is not None


def test_nested_call_of_the_same_lock_is_reentrant() -> None:
    run("locked_job", "--nested")
    assert [c["fencing_token"] for c in locked_job.CALLS] == [1, 1]


def test_provider_and_duration_overrides() -> None:
    hold("job-a")
    out, _ = run(
        "locked_job", "--lock-provider", "second", "--lock-at-most-for", "PT2M", "--lock-at-least-for", "1m"
    )
    assert out == "ran shard a\n"
    listed = providers["second"].list_locks()
    assert [(r.name, r.state(r.locked_at)) for r in listed] == [("job-a", "held_for_at_least")]
    assert listed[0].lock_until - listed[0].locked_at == __import__("datetime").timedelta(minutes=1)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--lock-at-most-for", "soon"], "lock_at_most_for: cannot read 'soon'"),
        (["--lock-at-least-for", "2m"], "must not be longer than lock_at_most_for"),
        (["--lock-wait", "2h"], "--lock-wait 2h is more than this command allows (at most 1h)"),
        (["--lock-wait", "-1"], "--lock-wait must not be negative"),
        (["--lock-provider", "nope"], "no lock provider 'nope'"),
    ],
)
def test_bad_options_are_command_errors(args: list[str], fragment: str) -> None:
    with pytest.raises(CommandError, match=__import__("re").escape(fragment)):
        run("locked_job", *args)
    assert locked_job.CALLS == []


def test_lock_wait_waits_for_the_holder() -> None:
    held = providers["default"].lock(LockConfiguration("job-a", "1m"))
    assert held is not None
    __import__("threading").Timer(0.3, held.unlock).start()
    out, _ = run("locked_job", "--lock-wait", "5")
    assert out == "ran shard a\n"


def test_keep_alive_keeps_a_short_lock_for_a_long_job() -> None:
    locked_keepalive.SEEN.clear()
    run("locked_keepalive", "--seconds", "1.0")
    held = locked_keepalive.SEEN[0]
    assert not held.lost.is_set()
    assert held.record.lock_until > held.handle.record.locked_at + held.lock_at_most_for, "never extended"


def test_decorating_something_else_or_bad_arguments_fails_early() -> None:
    with pytest.raises(TypeError, match="BaseCommand subclass"):
        locked_command("1m")(object)  # type: ignore[type-var]
    with pytest.raises(ValueError, match="lock_at_most_for"):
        locked_command("forever")
    with pytest.raises(ValueError, match="on_locked"):
        locked_command("1m", on_locked="wait")  # type: ignore[arg-type]

    @locked_command("1m", name="job-{missing}")
    class Command(BaseCommand):
        def handle(self, *args: object, **options: object) -> None:
            pass

    with pytest.raises(CommandError, match="refers to 'missing' which is not an option"):
        call_command(Command())


def test_real_processes_exit_statuses(tmp_path: Path) -> None:
    """Two real processes on one SQLite file: one runs, one skips with status 0; an
    unmigrated database is a store failure with status 1 and the command not run."""
    unmigrated = start_manage(tmp_path / "jobs.sqlite3", "demo_report", "--seconds", "0")
    out, err = unmigrated.communicate(timeout=60)
    assert unmigrated.returncode == 1
    assert "lock provider 'default'" in err and "did not run" in err
    assert "ran:" not in out

    migrate = start_manage(tmp_path / "jobs.sqlite3", "migrate", "--verbosity", "0")
    migrate.communicate(timeout=120)  # (reads and closes its pipes)
    assert migrate.returncode == 0
    first = start_manage(tmp_path / "jobs.sqlite3", "demo_report", "--seconds", "3")
    assert first.stdout is not None and first.stdout.readline().startswith("ran:")
    second = start_manage(tmp_path / "jobs.sqlite3", "demo_report", "--seconds", "0")
    out2, err2 = second.communicate(timeout=60)
    first.communicate(timeout=60)
    assert (first.returncode, second.returncode) == (0, 0)
    assert out2 == ""
    assert err2.startswith("skipped: lock 'demo_report' is held by ")
