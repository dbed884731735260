"""The app's migrations stand alone (they import nothing of the package, whose code may
change after them), and migration 0010 drops the PL/pgSQL functions that 0007 used to
create on PostgreSQL."""

from __future__ import annotations

import ast
from pathlib import Path

from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from tests.conftest import database_marks
from tslock_django import LockConfiguration
from tslock_django.providers.database import DatabaseLockProvider

MIGRATIONS = Path(__file__).resolve().parent.parent / "tslock_django" / "migrations"
BEFORE = ("tslock_django", "0009_journal_long_names")
DROPPED = ("tslock_django", "0010_drop_lock_routines")


def test_no_migration_imports_the_package() -> None:
    for path in sorted(MIGRATIONS.glob("0*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                modules = [node.module or ""] if node.level == 0 else ["(relative)"]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                assert module.startswith(("__future__", "django", "typing", "hashlib")), (
                    f"{path.name} imports {module}"
                )


def migrate(target: tuple[str, str] | None) -> None:
    executor = MigrationExecutor(connections["postgres"])
    executor.migrate([target] if target else executor.loader.graph.leaf_nodes("tslock_django"))


def functions() -> list[str]:
    with connections["postgres"].cursor() as cursor:
        cursor.execute(
            "SELECT proname FROM pg_proc WHERE proname IN ('tslock_acquire', 'tslock_unlock') ORDER BY 1"
        )
        return [row[0] for row in cursor.fetchall()]


class TestPostgreSQL:
    pytestmark = database_marks("postgres", "PostgreSQL")

    def test_the_functions_0007_created_are_dropped_and_locking_goes_on(self) -> None:
        try:
            migrate(BEFORE)
            # What 0007 left on a database it ran on: the functions, by their signatures.
            with connections["postgres"].cursor() as cursor:
                for signature in (
                    "tslock_acquire(p_name varchar, p_for bigint, p_locked_by varchar, p_token varchar)",
                    "tslock_unlock(p_name varchar, p_token varchar, p_at_least bigint)",
                ):
                    cursor.execute(
                        f"CREATE FUNCTION {signature} RETURNS boolean LANGUAGE sql AS $$ SELECT true $$"
                    )
            assert functions() == ["tslock_acquire", "tslock_unlock"]
            migrate(DROPPED)
            assert functions() == []
            migrate(BEFORE)  # going back creates nothing
            assert functions() == []
        finally:
            migrate(None)
        provider = DatabaseLockProvider("db", using="postgres")
        held = provider.lock(LockConfiguration("migrations/after-0010", "1m"))
        assert held is not None and held.unlock() is True
