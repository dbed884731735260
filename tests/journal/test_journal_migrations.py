"""Migration 0008 (the index on ``tslock_run (name, outcome)``) on SQLite, PostgreSQL and
MariaDB: it goes back and forward keeping the journal's rows, and replayed over a
journal that has the index (the recovery check tslock.E007 advises) it changes nothing."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from tests.conftest import database_marks
from tslock_django.journal import outcomes
from tslock_django.journal.models import Run

INDEX = "tslock_run_name_outcome"
BEFORE = ("tslock_django", "0007_lock_routines")
WITH_INDEX = ("tslock_django", "0008_run_name_outcome")


def migrate(using: str, target: tuple[str, str] | None) -> None:
    executor = MigrationExecutor(connections[using])
    executor.migrate([target] if target else executor.loader.graph.leaf_nodes("tslock_django"))


def indexes(using: str) -> dict[str, list[str]]:
    connection = connections[using]
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, "tslock_run")
    return {name: info["columns"] for name, info in found.items() if info["index"]}


@pytest.mark.parametrize(
    "using",
    [
        pytest.param("default", marks=pytest.mark.django_db(databases=["default"], transaction=True)),
        pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL")),
        pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB")),
    ],
)
def test_the_index_migration_goes_back_forward_and_replays(using: str) -> None:
    Run.objects.using(using).create(
        name="kept", provider="default", outcome=outcomes.SUCCEEDED, started_at=datetime.now(timezone.utc)
    )
    assert indexes(using)[INDEX] == ["name", "outcome"]
    try:
        migrate(using, BEFORE)
        assert INDEX not in indexes(using)
        migrate(using, WITH_INDEX)
        assert indexes(using)[INDEX] == ["name", "outcome"]
        executor = MigrationExecutor(connections[using])
        migration = executor.loader.get_migration(*WITH_INDEX)
        state = executor.loader.project_state(BEFORE)
        with connections[using].schema_editor() as editor:
            migration.apply(state, editor)  # as a replay after check tslock.E007's recovery
        assert indexes(using)[INDEX] == ["name", "outcome"]
    finally:
        migrate(using, None)
    assert list(Run.objects.using(using).values_list("name", flat=True)) == ["kept"]
