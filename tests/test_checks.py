"""System checks: each misconfiguration gets its stable id."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import Error
from django.test import override_settings

from tslock_django.checks import check_database_app, check_database_table, check_keep_alive, check_providers

DB = "tslock_django.providers.database.DatabaseLockProvider"
KV = "tslock_django.providers.cloudflare_kv.KVLockProvider"


def ids(messages: list[Error]) -> list[str]:
    return [m.id for m in messages]  # type: ignore[misc]


def test_a_good_configuration_passes() -> None:
    assert check_providers() == []
    assert check_database_app() == []
    assert check_keep_alive() == []


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ({"default": "db://"}, "tslock.E001"),
        ({"default": {"BACKEND": "no.such.Provider"}}, "tslock.E002"),
        ({"default": {"BACKEND": DB, "OPTIONS": {"colour": "red"}}}, "tslock.E003"),
        ({"jobs": {"BACKEND": DB}}, "tslock.E004"),
        (
            {"default": {"BACKEND": DB}, "kv": {"BACKEND": KV, "OPTIONS": {"account_id": "a"}}},
            "tslock.E005",
        ),
    ],
)
def test_each_misconfiguration_has_its_id(setting: object, expected: str) -> None:
    with override_settings(TSLOCK_PROVIDERS=setting):
        assert expected in ids(check_providers())


def test_database_provider_without_the_app_is_reported() -> None:
    with override_settings(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"]):
        assert ids(check_database_app()) == ["tslock.E007"]


def test_table_check_needs_database_access_and_passes_when_migrated(db: None) -> None:
    assert check_database_table(databases=None) == []
    assert check_database_table(databases=["default"]) == []


@pytest.mark.django_db(transaction=True)
def test_a_dropped_table_is_reported() -> None:
    from django.db import connection

    from tslock_django.models import Lock

    with connection.schema_editor() as editor:
        editor.alter_db_table(Lock, "tslock_lock", "tslock_lock_moved")
    try:
        messages = check_database_table(databases=["default"])
    finally:
        with connection.schema_editor() as editor:
            editor.alter_db_table(Lock, "tslock_lock_moved", "tslock_lock")
    assert ids(messages) == ["tslock.E007"]
    assert "tslock_lock missing" in messages[0].msg
    assert "migrate tslock_django" in (messages[0].hint or "")


@pytest.mark.django_db(transaction=True)
def test_a_dropped_fencing_mark_table_is_reported() -> None:
    """Without tslock_fence the first lock of every new name would fail in the store."""
    from django.db import connection

    from tslock_django.models import FencingMark

    with connection.schema_editor() as editor:
        editor.alter_db_table(FencingMark, "tslock_fence", "tslock_fence_moved")
    try:
        messages = check_database_table(databases=["default"])
    finally:
        with connection.schema_editor() as editor:
            editor.alter_db_table(FencingMark, "tslock_fence_moved", "tslock_fence")
    assert ids(messages) == ["tslock.E007"]
    assert "tslock_fence missing" in messages[0].msg


def test_manage_py_check_reports_the_id(tmp_path: Path) -> None:
    """The whole path a user sees: `manage.py check` with a bad TSLOCK_URL."""
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=root,
        env={
            "PATH": "/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "TSLOCK_URL": "db://?colour=red",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "tslock.E003" in result.stderr
    assert "unknown OPTIONS key(s) 'colour'" in result.stderr


def test_keep_alive_on_workers_kv_with_a_short_lock_is_reported() -> None:
    kv = {
        "BACKEND": KV,
        "OPTIONS": {
            "account_id": "a",
            "namespace_id": "n",
            "api_token": "t",
            "acknowledge_advisory_lock": True,
        },
    }
    with override_settings(TSLOCK_PROVIDERS={"default": kv}):
        messages = check_keep_alive()
    # tests/lockapp's locked_keepalive asks for keep-alive with lock_at_most_for=0.4s.
    assert ids(messages) == ["tslock.E006"]
    assert "'locked_keepalive'" in messages[0].msg and "0:00:00.400000" in messages[0].msg
    with override_settings(TSLOCK_PROVIDERS={"default": {**kv, "BACKEND": DB, "OPTIONS": {}}}):
        assert check_keep_alive() == []


@pytest.mark.parametrize("flag", ["true", "1", "yes", "on", True])
def test_the_acknowledgement_reads_like_the_option(flag: object) -> None:
    kv = {
        "BACKEND": KV,
        "OPTIONS": {
            "account_id": "a",
            "namespace_id": "n",
            "api_token": "t",
            "acknowledge_advisory_lock": flag,
        },
    }
    with override_settings(TSLOCK_PROVIDERS={"default": {"BACKEND": DB}, "kv": kv}):
        assert check_providers() == []
