"""Every name a provider accepts is journaled (issue 31, item 7): Workers KV, Durable
Objects, Redis and memory take names longer than 255 characters, and a run of one was
never journaled (its job was ``new`` for ever). Names up to 750 characters are journaled
as they are, longer ones under a stand-in; migration 0009 widens the columns and goes
back on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings

from tests.conftest import database_marks
from tslock_django import lock
from tslock_django.journal import outcomes
from tslock_django.journal.models import NAME_LENGTH, Job, Run, journal_name

MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}
DATABASES = [
    pytest.param("default", marks=pytest.mark.django_db(databases=["default"], transaction=True)),
    pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL")),
    pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB")),
]
#: 500 characters, 511 UTF-8 bytes: within Workers KV's 512 with an empty prefix, Redis's and memory's 1,024.
LONG = "nightly-report/" + "é" * 11 + "x" * 474
#: 1,000 characters: only Redis and memory take it, the journal keeps a stand-in.
LONGER = "y" * 1000
NARROW = ("tslock_django", "0008_run_name_outcome")
WIDE = ("tslock_django", "0009_journal_long_names")


def tslock(*args: str) -> str:
    out = StringIO()
    call_command("tslock", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def migrate(using: str, target: tuple[str, str] | None) -> None:
    executor = MigrationExecutor(connections[using])
    executor.migrate([target] if target else executor.loader.graph.leaf_nodes("tslock_django"))


@pytest.mark.parametrize("using", DATABASES)
def test_a_long_name_is_journaled_and_shows_in_runs_and_overdue(using: str) -> None:
    assert len(LONG) == 500 and len(LONG.encode()) == 511
    schedules = {LONG: {"schedule": "1h", "grace": "1m"}, LONGER: {"schedule": "1h", "grace": "1m"}}
    with override_settings(
        TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": using}, TSLOCK_SCHEDULES=schedules
    ):
        for name in (LONG, LONGER):
            with lock(name, "1m", journal=True):
                pass
        [row] = json.loads(tslock("runs", LONG, "--json"))
        assert row["name"] == LONG and row["outcome"] == outcomes.SUCCEEDED
        [longer] = json.loads(tslock("runs", LONGER, "--json"))
        assert longer["name"] == journal_name(LONGER) and longer["outcome"] == outcomes.SUCCEEDED
        assert Job.objects.using(using).get(name=LONG).last_outcome == outcomes.SUCCEEDED
        # Two hours on, both are late: they are journaled, so they can alert.
        Job.objects.using(using).update(last_success_at=datetime.now(timezone.utc) - timedelta(hours=2))
        out = StringIO()
        with pytest.raises(CommandError) as caught:
            call_command("tslock", "overdue", "--json", stdout=out)
    assert caught.value.returncode == 1
    found = {r["name"]: r["status"] for r in json.loads(out.getvalue())}
    assert found == {LONG: "late", journal_name(LONGER): "late"}


def test_a_stand_in_fits_the_column_and_tells_names_apart() -> None:
    stand_in = journal_name(LONGER)
    assert len(stand_in) == NAME_LENGTH and stand_in.startswith("y" * 600)
    assert journal_name(LONGER[:-1] + "z") != stand_in
    assert journal_name(LONG) == LONG
    assert len(journal_name(LONGER, 255)) == 255


@pytest.mark.parametrize("using", DATABASES)
def test_the_wide_names_migration_goes_back_and_forward(using: str) -> None:
    now = datetime.now(timezone.utc)
    for name in ("short", LONG):
        Job.objects.using(using).create(name=name, first_seen_at=now, last_outcome=outcomes.SUCCEEDED)
        Run.objects.using(using).create(
            name=name, provider="default", outcome=outcomes.SUCCEEDED, started_at=now
        )
    try:
        migrate(using, NARROW)
        narrowed = journal_name(LONG, 255)
        for table in ("tslock_job", "tslock_run"):
            with connections[using].cursor() as cursor:
                cursor.execute(f"SELECT name FROM {table} ORDER BY name")
                assert [r[0] for r in cursor.fetchall()] == sorted(["short", narrowed])
        migrate(using, WIDE)
        migrate(using, WIDE)  # already applied: nothing to do
        executor = MigrationExecutor(connections[using])
        migration = executor.loader.get_migration(*WIDE)
        with connections[using].schema_editor() as editor:
            migration.apply(executor.loader.project_state(NARROW), editor)  # replayed (check tslock.E007)
    finally:
        migrate(using, None)
    Run.objects.using(using).create(name=LONG, provider="default", outcome=outcomes.SUCCEEDED, started_at=now)
    assert Run.objects.using(using).filter(name=LONG).count() == 1


@pytest.mark.skipif(
    "mariadb" not in settings.DATABASES, reason="MariaDB is not reachable (required when CI is set)"
)
def test_the_wide_job_key_raises_no_mariadb_warning_and_migrations_see_a_plain_charfield() -> None:
    """Django warns (mysql.W003) about unique CharFields over 255 characters on MySQL
    backends: shown at every migrate and check of a project on MariaDB. The key is sized
    for the 3,072-byte keys of today's row formats, so the package's field leaves that
    one warning out, and nothing else."""
    from django.db import models

    from tslock_django.journal.models import Job

    key = Job._meta.get_field("name")
    assert [found.id for found in key.check(databases=["mariadb"])] == []
    plain = models.CharField(max_length=key.max_length, primary_key=True)
    plain.set_attributes_from_name("name")
    plain.model = Job
    assert [found.id for found in plain.check(databases=["mariadb"])] == ["mysql.W003"]
    assert key.deconstruct()[1] == "django.db.models.CharField"
