"""A bad ``@locked_command`` / ``@locked_task`` argument is found by ``manage.py check``
and ``tslock check`` (tslock.E010), before cron or a worker first imports the job.

tests/badjobs holds the jobs: five commands and a task with bad arguments, a good
command, and a command that fails to import for a reason of its own (tslock.W001).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.test import override_settings

from tslock_django import locked_command, locked_task
from tslock_django.checks import CHECK_COMMAND, check_job_arguments, job_argument_messages
from tslock_django.decorators import InvalidJobArgument

ROOT = Path(__file__).resolve().parent.parent
MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}


def decorator_message(decorator: Any, *args: Any, **kwargs: Any) -> str:
    """The one-line message the decorator raises for these arguments."""
    with pytest.raises(ValueError) as raised:
        decorator(*args, **kwargs)
    return str(raised.value)


#: What the check must say for each bad job of tests/badjobs: the job, then the
#: decorator's own message, which names the argument.
EXPECTED = {
    "command 'badjobs: bad_duration'": decorator_message(locked_command, lock_at_most_for="5 minutes"),
    "command 'badjobs: bad_schedule'": decorator_message(locked_command, "5m", schedule="every hour"),
    "command 'badjobs: bad_tz'": decorator_message(
        locked_command, "5m", schedule="30 2 * * *", tz="Europe/Berlín"
    ),
    "task 'tests.badjobs.tasks.Reports.nightly'": decorator_message(
        locked_task, "10m", schedule="1h", grace="soon"
    ),
    "command 'badjobs: bad_failures'": decorator_message(
        locked_command, "5m", schedule="1h", failures_before_alert=0
    ),
    "command 'badjobs: bad_max_duration'": decorator_message(
        locked_command, "5m", schedule="1h", max_duration="a while"
    ),
}


def manage(*argv: str) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGV`` in a fresh process of tests.settings with tests.badjobs installed
    and an in-memory lock store."""
    script = (
        "import sys\n"
        "from django.conf import settings\n"
        "settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, 'tests.badjobs']\n"
        f"settings.TSLOCK_PROVIDERS = {MEMORY!r}\n"
        "from django.core.management import execute_from_command_line\n"
        "execute_from_command_line(['manage.py', *sys.argv[1:]])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script, *argv],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_each_message_names_the_argument() -> None:
    words = ["lock_at_most_for", "schedule", "tz", "grace", "failures_before_alert", "max_duration"]
    for message, word in zip(EXPECTED.values(), words, strict=True):
        assert message.startswith(word) and "\n" not in message


def test_manage_py_check_names_each_job_and_argument_in_one_line() -> None:
    done = manage("check")
    assert done.returncode == 1, done.stderr
    for job, message in EXPECTED.items():
        assert f"(tslock.E010) {job}: {message}\n" in done.stderr
    assert done.stderr.count("tslock.E010") == 6, done.stderr
    assert "Traceback" not in done.stderr
    # The good command is not reported; the broken one is named by its exception's
    # class, and its message (which may hold anything) is not quoted.
    assert "fine_job" not in done.stderr
    assert (
        "(tslock.W001) command 'badjobs: broken_import' could not be imported (LookupError), "
        "so its tslock decorators were not checked"
    ) in done.stderr
    assert "Run 'python manage.py help broken_import' to see why." in done.stderr
    assert "hunter2" not in done.stderr


def test_the_command_itself_still_fails_at_import_with_that_message() -> None:
    """The decorator still refuses when the job's module is imported (fail fast)."""
    done = manage("bad_duration")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    message = EXPECTED["command 'badjobs: bad_duration'"]
    assert last == f"tslock_django.decorators.InvalidJobArgument: {message}"


def test_tslock_check_reports_the_jobs_too() -> None:
    done = manage("tslock", "check")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == "default: ok (strong)"
    for job, message in EXPECTED.items():
        assert f"jobs: FAILED: {job}: {message}" in lines
    assert any(line.startswith("jobs: warning: command 'badjobs: broken_import'") for line in lines)
    assert done.stderr.strip() == "CommandError: 6 job(s) have a bad decorator argument (tslock.E010)"


def installed_with_badjobs() -> Any:
    return override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, "tests.badjobs"])


def test_the_check_runs_when_the_check_command_is_loaded_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """At other commands' starts the check imports nothing (they must stay fast)."""
    with installed_with_badjobs():
        monkeypatch.delitem(sys.modules, CHECK_COMMAND, raising=False)
        assert check_job_arguments() == []
        import django.core.management.commands.check  # noqa: F401  (what `manage.py check` loads)

        assert [m.id for m in check_job_arguments()] == ["tslock.E010"] * 5 + ["tslock.W001", "tslock.E010"]


def test_the_check_looks_only_at_the_apps_it_is_given() -> None:
    with installed_with_badjobs():
        assert job_argument_messages([apps.get_app_config("lockapp")]) == []
        found = job_argument_messages([apps.get_app_config("badjobs")])
    assert {m.msg.partition(": ")[0] for m in found if m.id == "tslock.E010"} == {
        "command 'badjobs",
        "task 'tests.badjobs.tasks.Reports.nightly'",
    }


def test_a_bad_argument_is_an_invalid_job_argument_and_still_a_value_error() -> None:
    with pytest.raises(InvalidJobArgument, match=r"^lock_at_most_for: cannot read '5 minutes'"):
        locked_command("5 minutes")
    with pytest.raises(InvalidJobArgument, match=r"^on_locked must be 'skip' or 'raise'"):
        locked_task("1m", on_locked="wait")  # type: ignore[arg-type]
    with pytest.raises(InvalidJobArgument, match="refers to 'tenant'"):

        @locked_task("1m", name="sync-{tenant}")
        def sync(account: int) -> None: ...

    assert issubclass(InvalidJobArgument, ValueError)
