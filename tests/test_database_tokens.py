"""The database keeps a digest of the holder's token, never the token (issue 11, points 6
and 7): what a SQL log or a dump of the table shows cannot unlock or extend a holding
through the library, and tokens compare exactly on every database (MariaDB's default
collation folds case). SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connections
from django.test import override_settings

from tests.conftest import database_marks
from tslock_django import LockConfiguration
from tslock_django.core.records import fingerprint, token_digest
from tslock_django.models import Lock
from tslock_django.providers.database import DatabaseLockProvider

migration = importlib.import_module("tslock_django.migrations.0005_token_digest")


def config(name: str) -> LockConfiguration:
    return LockConfiguration(name=name, lock_at_most_for=timedelta(minutes=5))


def stored_token(using: str, name: str) -> str:
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT token FROM tslock_lock WHERE name = %s", [name])
        return str(cursor.fetchone()[0])


class TokenDigests:
    using = "default"

    @pytest.fixture
    def provider(self) -> Iterator[DatabaseLockProvider]:
        provider = DatabaseLockProvider(f"db-{self.using}", using=self.using)
        yield provider
        provider.close()

    def test_the_table_keeps_the_digest_and_listings_the_same_fingerprint(
        self, provider: DatabaseLockProvider
    ) -> None:
        held = provider.lock(config("digest"))
        assert held is not None and held.token
        assert stored_token(self.using, "digest") == token_digest(held.token) != held.token
        [listed] = provider.list_locks("digest")
        assert listed.token == "" and listed.token_fingerprint == fingerprint(held.token)
        # What the table shows is no key: neither as a token nor as its own digest.
        assert provider.force_unlock("digest", expected=stored_token(self.using, "digest")) is False
        assert held.unlock() is True

    def test_tokens_compare_exactly(self, provider: DatabaseLockProvider) -> None:
        held = provider.lock(config("exact"))
        assert held is not None
        for variant in (held.token.upper(), held.token.swapcase(), held.token + " ", " " + held.token):
            assert variant != held.token
            assert provider.force_unlock("exact", expected=variant) is False, variant
        assert provider.force_unlock("exact", expected=held.token) is True

    def test_sql_log_never_shows_the_token(
        self, provider: DatabaseLockProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        with override_settings(DEBUG=True), caplog.at_level(logging.DEBUG, logger="django.db.backends"):
            held = provider.lock(config("logged"))
            assert held is not None
            extended = held.extend(timedelta(minutes=6), timedelta(0))
            assert extended is not None
            assert extended.unlock() is True
            again = provider.lock(config("logged"))
            assert again is not None
            assert provider.force_unlock("logged", expected=again.token) is True
        logged = "\n".join(record.getMessage() for record in caplog.records)
        assert "tslock_lock" in logged  # the statements were logged
        for token in (held.token, again.token):
            assert token not in logged
        assert token_digest(held.token) in logged  # what is logged instead

    def test_migration_turns_raw_tokens_into_digests(self, provider: DatabaseLockProvider) -> None:
        # A row as an older release wrote it: the raw token (32 hex digits).
        now = datetime.now(tz=timezone.utc)
        raw = "0123456789abcdef0123456789abcdef"
        Lock.objects.using(self.using).create(
            name="old-holder",
            lock_until=now + timedelta(minutes=5),
            locked_at=now,
            locked_by="h:1",
            token=raw,
        )
        taken = provider.lock(config("new-holder"))
        assert taken is not None
        editor = SimpleNamespace(connection=connections[self.using])
        migration.digest_raw_tokens(apps, editor)
        migration.digest_raw_tokens(apps, editor)  # again: digests are left alone
        assert stored_token(self.using, "old-holder") == token_digest(raw)
        assert stored_token(self.using, "new-holder") == token_digest(taken.token)
        # The holder that was running across the upgrade still owns its lock.
        assert provider.force_unlock("old-holder", expected=raw) is True
        assert taken.unlock() is True


@pytest.mark.django_db(transaction=True)
class TestSQLite(TokenDigests):
    using = "default"


class TestPostgreSQL(TokenDigests):
    using = "postgres"
    pytestmark = database_marks("postgres", "PostgreSQL at 127.0.0.1:5432")


class TestMariaDB(TokenDigests):
    using = "mariadb"
    pytestmark = database_marks("mariadb", "MariaDB at 127.0.0.1:3306")
