"""A fencing token that no store can hold (below 0, or past a signed 64-bit integer) is
refused where it enters the library, as a ``ValueError`` that says which range is
accepted, and a release posted from the admin with one is answered with that message:
never a driver's ``OverflowError``, a 500, or a release."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.messages import get_messages
from django.test import Client

from tests.conftest import database_marks
from tslock_django import LockConfiguration
from tslock_django.admin import Selection
from tslock_django.conf import DATABASE_BACKEND, providers

SERVERS = [
    pytest.param("default", marks=database_marks("default", "SQLite"), id="sqlite"),
    pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL at 127.0.0.1:5432"), id="postgres"),
    pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB at 127.0.0.1:3306"), id="mariadb"),
]


def with_users(alias: str, server: str) -> list[pytest.MarkDecorator]:
    """``database_marks`` plus the ``default`` database, where the admin keeps its users,
    sessions and LogEntries."""
    skip, _ = database_marks(alias, server)
    available = alias in settings.DATABASES
    return [
        skip,
        pytest.mark.django_db(databases=["default", alias] if available else ["default"], transaction=True),
    ]


ADMIN_SERVERS = [
    pytest.param("default", marks=with_users("default", "SQLite"), id="sqlite"),
    pytest.param("postgres", marks=with_users("postgres", "PostgreSQL at 127.0.0.1:5432"), id="postgres"),
    pytest.param("mariadb", marks=with_users("mariadb", "MariaDB at 127.0.0.1:3306"), id="mariadb"),
]

#: A signed 64-bit integer: the BIGINT column, Redis integers.
MAX_FENCING_TOKEN = 2**63 - 1
OUT_OF_RANGE = [10**23, MAX_FENCING_TOKEN + 1, -1]


@pytest.fixture
def database(request: pytest.FixtureRequest, settings: Any) -> str:
    """Every provider in TSLOCK_PROVIDERS is the database provider on the server under test."""
    using = request.param
    settings.TSLOCK_PROVIDERS = {"default": {"BACKEND": DATABASE_BACKEND, "OPTIONS": {"using": using}}}
    return str(using)


@pytest.mark.parametrize("database", SERVERS, indirect=True)
@pytest.mark.parametrize("token", OUT_OF_RANGE)
def test_force_unlock_refuses_a_fencing_token_out_of_range(database: str, token: int) -> None:
    provider = providers["default"]
    held = provider.lock(LockConfiguration("range/job", "10m"))
    assert held is not None

    with pytest.raises(ValueError, match=r"out of range") as raised:
        provider.force_unlock("range/job", expected=token)

    message = str(raised.value)
    assert f"from 0 to {MAX_FENCING_TOKEN}" in message
    assert "range/job" in message
    # Nothing was released: the holder can still unlock its own lock.
    assert held.unlock() is True


@pytest.mark.parametrize("database", SERVERS, indirect=True)
def test_force_unlock_accepts_the_ends_of_the_range(database: str) -> None:
    provider = providers["default"]
    held = provider.lock(LockConfiguration("range/ends", "10m"))
    assert held is not None
    # In range but not the holding: nothing matches, and nothing is raised.
    assert provider.force_unlock("range/ends", expected=MAX_FENCING_TOKEN) is False
    assert provider.force_unlock("range/ends", expected=0) is False
    assert provider.force_unlock("range/ends", expected=held.fencing_token) is True


@pytest.mark.parametrize("database", ADMIN_SERVERS, indirect=True)
@pytest.mark.parametrize("confirm", ["", "yes"], ids=["confirmation", "confirmed"])
def test_admin_release_with_a_fencing_token_out_of_range_says_so(
    database: str, confirm: str, make_client: Any, release_url: str, locks_url: str
) -> None:
    releaser: Client = make_client("view_lock", "release_lock")
    provider = providers["default"]
    held = provider.lock(LockConfiguration("range/admin", "10m"))
    assert held is not None
    # An edited form: the page only ever writes tokens the store gave it.
    posted = Selection("default", "range/admin", "fencing", 10**23).encode()

    response = releaser.post(release_url, {"lock": [posted], "confirm": confirm})

    assert response.status_code == 302
    assert response["Location"] == locks_url
    errors = [m.message for m in get_messages(response.wsgi_request) if m.level_tag == "error"]
    assert len(errors) == 1, errors
    assert "out of range" in errors[0] and f"from 0 to {MAX_FENCING_TOKEN}" in errors[0]
    assert not LogEntry.objects.exists()
    assert held.unlock() is True, "the lock was released"
