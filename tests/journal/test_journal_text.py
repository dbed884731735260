"""What the journal keeps of a run's text: no secret where it is stored or shown, text
that no database can hold replaced instead of costing the run its row, the job's own
exception untouched, and one warning line for a missed write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from tests.admin.journal_rows import job, run
from tests.conftest import database_marks
from tslock_django import LockConfiguration, lock, providers
from tslock_django.journal import outcomes
from tslock_django.journal.models import Job, Run

ROOT = Path(__file__).resolve().parents[2]
EDGE_TOKEN = "edge-token-of-the-journal-text-tests"
PROVIDERS = {
    "default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
    "edge": {
        "BACKEND": "tslock_django.providers.cloudflare_do.DurableObjectLockProvider",
        "OPTIONS": {"url": "http://127.0.0.1:9", "token": EDGE_TOKEN, "timeout": 1},
    },
}
# A failure quoting every kind of secret issue 31 found in the journal.
SECRETS = {
    "url password": "Pg-pass-4417",
    "DATABASES password": "unreachable-db-password",  # tests/settings.py
    "bearer": "eyJhbGciOiJIUzI1NiJ9.e30.c2ln",
    "provider token": EDGE_TOKEN,
    "password pair": "hunter2-pw",
}
FAILURE = (
    f"could not reach postgres://app:{SECRETS['url password']}@db.internal:5432/app"
    f" (password {SECRETS['DATABASES password']!r}) with Authorization: Bearer {SECRETS['bearer']};"
    f" token {SECRETS['provider token']}; dsn password={SECRETS['password pair']} user=app"
)
SCRUBBED = (
    "could not reach postgres://app:***@db.internal:5432/app (password '***') with Authorization: Bearer ***;"
    " token ***; dsn password=*** user=app"
)

DATABASES = [
    pytest.param("default", marks=pytest.mark.django_db(databases=["default"], transaction=True)),
    pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL")),
    pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB")),
]


@pytest.fixture(params=DATABASES)
def using(request: pytest.FixtureRequest) -> Iterator[str]:
    alias = request.param
    with override_settings(TSLOCK_PROVIDERS=PROVIDERS, TSLOCK_JOURNAL={"using": alias}):
        yield alias


def tslock(*args: str) -> str:
    out = StringIO()
    try:
        call_command("tslock", *args, stdout=out, stderr=StringIO())
    except CommandError as err:  # tslock overdue exits 1 when a job is failing
        assert err.returncode == 1, err
    return out.getvalue()


def assert_no_secret(text: str) -> None:
    for kind, secret in SECRETS.items():
        assert secret not in text, f"the {kind} shows in {text!r}"


def test_a_failures_detail_and_everything_that_shows_it_hide_every_secret(using: str) -> None:
    with pytest.raises(CommandError):
        call_command(
            "journaled_job", "--shard", "leak", "--fail", FAILURE, stdout=StringIO(), stderr=StringIO()
        )
    [row] = Run.objects.using(using).filter(name="journaled-leak")
    assert row.outcome == outcomes.FAILED
    assert row.detail == f"CommandError: {SCRUBBED}", "the class and the rest of the message are kept"
    assert Job.objects.using(using).get(name="journaled-leak").last_detail == row.detail
    for shown in (
        tslock("runs", "journaled-leak"),
        tslock("runs", "--json"),
        tslock("overdue"),
        tslock("overdue", "--json"),
    ):
        assert "***" in shown
        assert_no_secret(shown)


@pytest.mark.django_db
def test_rows_an_older_release_wrote_unscrubbed_are_shown_scrubbed() -> None:
    raw = f"RuntimeError: {FAILURE}"
    job("old-leak", schedule="1h", outcome=outcomes.FAILED, started=timedelta(minutes=1), detail=raw)
    run("old-leak", outcome=outcomes.FAILED, detail=raw, held_by=f"web:1 token={SECRETS['password pair']}")
    with override_settings(TSLOCK_PROVIDERS=PROVIDERS, TSLOCK_JOURNAL={"using": "default"}):
        text, as_json = tslock("runs", "old-leak"), tslock("runs", "--json", "old-leak")
        overdue, overdue_json = tslock("overdue"), tslock("overdue", "--json")
    assert f"RuntimeError: {SCRUBBED}" in text
    assert json.loads(as_json)[0]["detail"] == f"RuntimeError: {SCRUBBED}"
    assert json.loads(as_json)[0]["held_by"] == "web:1 token=***"
    assert f"RuntimeError: {SCRUBBED}" in overdue
    assert json.loads(overdue_json)[0]["reason"].endswith(f"RuntimeError: {SCRUBBED}")
    for shown in (text, as_json, overdue, overdue_json):
        assert_no_secret(shown)


def test_text_no_database_can_hold_is_replaced_and_the_run_is_still_recorded(using: str) -> None:
    # A file name that is not UTF-8 (a lone surrogate, as os.fsdecode makes it) and a NUL.
    file_name = os.fsdecode(b"report-\xff.csv")

    @lock("unstorable", "1m", journal=True)
    def job() -> None:
        raise OSError(f"cannot open '{file_name}': bad byte \x00 here")

    with pytest.raises(OSError, match="cannot open"):
        job()
    [row] = Run.objects.using(using).filter(name="unstorable")
    assert row.outcome == outcomes.FAILED, "not left running (and read as lost)"
    assert row.detail == "OSError: cannot open 'report-\ufffd.csv': bad byte \ufffd here"


def test_a_holder_no_database_can_hold_is_replaced_in_started_and_skipped_rows(using: str) -> None:
    store = providers["default"]
    store.locked_by = "web\x00:" + os.fsdecode(b"\xfe")  # a store's text is anyone's text
    with lock("odd-holder", "1m", journal=True):
        pass
    holder = store.lock(LockConfiguration("odd-holder", "1m"))
    assert holder is not None
    with pytest.raises(Exception, match="held"), lock("odd-holder", "1m", journal=True, on_locked="raise"):
        pass
    started, skipped = Run.objects.using(using).filter(name="odd-holder").order_by("id")
    assert (started.outcome, started.locked_by) == (outcomes.SUCCEEDED, "web\ufffd:\ufffd")
    assert (skipped.outcome, skipped.held_by) == (outcomes.SKIPPED, "web\ufffd:\ufffd")


class Unprintable(Exception):
    """An exception whose message cannot be read (its __str__ itself fails)."""

    def __str__(self) -> str:
        raise AttributeError("'Unprintable' object has no attribute 'message'")


def test_an_unprintable_exception_reaches_the_caller_unchanged_and_is_described_by_its_class(
    using: str,
) -> None:
    raised = Unprintable()

    @lock("unprintable", "1m", journal=True)
    def job() -> None:
        raise raised

    with pytest.raises(Unprintable) as caught:
        job()
    assert caught.value is raised, "the job's own exception, not one of the journal's"
    [row] = Run.objects.using(using).filter(name="unprintable")
    assert row.outcome == outcomes.FAILED
    assert row.detail == "Unprintable (its message could not be read)"


# LOGGING as projects write it: none (Python's last resort prints warnings on stderr), a
# console handler on stderr (the demo project's), a file (the line must still reach stderr).
CONSOLE = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"tslock_django": {"handlers": ["console"], "level": "WARNING"}},
}


def logging_to_a_file(path: Path) -> dict[str, object]:
    return {
        "version": 1,
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(path)}},
        "root": {"handlers": ["file"], "level": "WARNING"},
    }


@pytest.mark.parametrize("logging", ["none", "console", "file"])
def test_one_warning_line_per_missed_write_whatever_logging_says(tmp_path: Path, logging: str) -> None:
    # A project of the fewest settings and a journal whose table was never made.
    database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "db")}
    memory = {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}
    log_file = tmp_path / "log.txt"
    configured = {
        "none": "",
        "console": f"LOGGING = {CONSOLE!r}",
        "file": f"LOGGING = {logging_to_a_file(log_file)!r}",
    }
    (tmp_path / "bare_settings.py").write_text(
        textwrap.dedent(
            f"""
            SECRET_KEY = "a-key-for-a-project-without-logging"
            INSTALLED_APPS = [
                "django.contrib.contenttypes", "django.contrib.auth", "tslock_django", "tests.lockapp"
            ]
            DATABASES = {{"default": {database!r}}}
            TSLOCK_PROVIDERS = {{"default": {memory!r}}}
            USE_TZ = True
            """
        )
        + configured[logging]
        + "\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bare_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "journaled_job", "--shard", "bare"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    warnings = [line for line in done.stderr.splitlines() if "the journal missed this run" in line]
    assert len(warnings) == 1, done.stderr
    if logging == "file":
        assert "the journal missed this run" in log_file.read_text(), "and logged where LOGGING says"
