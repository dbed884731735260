"""Force release: POST with CSRF, a confirmation page, a condition on the holding shown,
a LogEntry and the ``lock_force_released`` signal."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.admin import site as admin_site
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages import get_messages
from django.contrib.messages.storage.cookie import CookieStorage
from django.db import DatabaseError
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from tests.admin.tslock_test_providers import (
    MEMORY,
    FakeKVProvider,
    FencelessMemoryProvider,
    StaticProvider,
    path_of,
)
from tests.kv.fake import FakeKVTransport
from tslock_django import LockConfiguration
from tslock_django.admin import Selection
from tslock_django.conf import DATABASE_BACKEND, MEMORY_BACKEND, providers
from tslock_django.core.clock import MutableClock
from tslock_django.core.provider import LockProvider, SimpleLock
from tslock_django.models import Lock
from tslock_django.signals import lock_force_released

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock() -> MutableClock:
    return MutableClock()


@pytest.fixture
def memory(settings: Any, clock: MutableClock) -> Any:
    settings.TSLOCK_PROVIDERS = {"mem": {"BACKEND": MEMORY_BACKEND, "OPTIONS": {"clock": clock}}}
    return providers["mem"]


@pytest.fixture
def force_released() -> Iterator[list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        sent.append(kwargs)

    lock_force_released.connect(receiver)
    yield sent
    lock_force_released.disconnect(receiver)


def messages_of(response: Any, level: str) -> list[str]:
    return [m.message for m in get_messages(response.wsgi_request) if m.level_tag == level]


def held(provider: LockProvider, name: str, at_most: str = "10m") -> SimpleLock:
    lock = provider.lock(LockConfiguration(name, at_most))
    assert lock is not None
    return lock


def selected(lock: SimpleLock, alias: str = "mem") -> str:
    return Selection(alias, lock.name, "fencing", lock.fencing_token or 0).encode()


def state_of(provider: Any, name: str) -> str:
    [record] = [r for r in provider.list_locks(name) if r.name == name]
    return str(record.state(provider.clock.now()))


def release_entries() -> list[LogEntry]:
    return list(LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(Lock)))


def test_post_shows_a_confirmation_and_releases_nothing(
    memory: Any, releaser: Client, release_url: str
) -> None:
    lock = held(memory, "nightly-report")
    response = releaser.post(release_url, {"lock": [selected(lock)]})
    html = response.content.decode()
    assert response.status_code == 200
    assert "Force-release locks?" in html
    assert "nightly-report" in html and "fencing token 1" in html
    assert 'name="confirm" value="yes"' in html
    assert lock.token not in html
    assert state_of(memory, "nightly-report") == "held"
    assert release_entries() == []


def test_confirmed_release_logs_signals_and_redirects(
    memory: Any,
    releaser: Client,
    release_url: str,
    locks_url: str,
    force_released: list[dict[str, Any]],
    caplog: Any,
) -> None:
    lock = held(memory, "nightly-report")
    other = held(memory, "untouched")
    with caplog.at_level(logging.DEBUG):
        response = releaser.post(release_url, {"lock": [selected(lock)], "confirm": "yes"})

    assert response.status_code == 302 and response["Location"] == locks_url
    assert state_of(memory, "nightly-report") == "expired"
    assert state_of(memory, "untouched") == "held"
    [entry] = release_entries()
    assert entry.object_id == "mem:nightly-report"
    assert entry.user.username == response.wsgi_request.user.username
    assert "fencing token 1" in entry.get_change_message()
    assert [(s["alias"], s["name"], s["expected"], s["released"]) for s in force_released] == [
        ("mem", "nightly-report", 1, True)
    ]
    assert messages_of(response, "success")
    for secret in (lock.token, other.token):
        assert secret not in caplog.text
        assert secret not in entry.change_message
    # The page afterwards lists it as expired (when expired locks are asked for).
    assert 'data-name="nightly-report"' not in releaser.get(locks_url).content.decode()
    page = releaser.get(locks_url, {"state": "all"}).content.decode()
    row = page[page.index('data-name="nightly-report"') :].split("</tr>")[0]
    assert ">expired<" in row
    # The admin index lists it under "Recent actions" (as text: there is no change page).
    index = releaser.get(reverse("admin:index"))
    assert index.status_code == 200
    assert "mem:nightly-report" in index.content.decode()


def test_history_page_lists_releases(
    memory: Any, releaser: Client, release_url: str, history_url: str
) -> None:
    lock = held(memory, "<b>bold</b>")
    releaser.post(release_url, {"lock": [selected(lock)], "confirm": "yes"})
    html = releaser.get(history_url).content.decode()
    assert "mem:&lt;b&gt;bold&lt;/b&gt;" in html
    assert "<b>bold</b>" not in html


def test_lock_that_changed_hands_is_not_released(
    memory: Any, clock: MutableClock, releaser: Client, release_url: str, force_released: list[dict[str, Any]]
) -> None:
    seen = held(memory, "report", at_most="1m")
    clock.advance("2m")  # the holder died; someone else took the lock
    successor = held(memory, "report")
    assert successor.fencing_token == 2

    response = releaser.post(release_url, {"lock": [selected(seen)], "confirm": "yes"}, follow=True)

    assert state_of(memory, "report") == "held"
    assert release_entries() == []
    [warning] = messages_of(response, "warning")
    assert "'report'" in warning and "not released" in warning and "fencing token 1" in warning
    assert [s["released"] for s in force_released] == [False]


def test_release_needs_release_lock(
    memory: Any, viewer: Client, make_client: Callable[..., Client], release_url: str
) -> None:
    lock = held(memory, "report")
    for client in (viewer, make_client("release_lock")):  # view alone; release without view
        assert client.post(release_url, {"lock": [selected(lock)], "confirm": "yes"}).status_code == 403
    assert state_of(memory, "report") == "held"


def test_get_changes_nothing(memory: Any, admin_client: Client, release_url: str) -> None:
    lock = held(memory, "report")
    response = admin_client.get(release_url, {"lock": selected(lock), "confirm": "yes"})
    assert response.status_code == 405
    assert state_of(memory, "report") == "held"


def test_csrf_is_enforced(memory: Any, make_client: Callable[..., Client], release_url: str) -> None:
    lock = held(memory, "report")
    client = make_client("view_lock", "release_lock", enforce_csrf_checks=True)
    assert client.post(release_url, {"lock": [selected(lock)], "confirm": "yes"}).status_code == 403
    assert state_of(memory, "report") == "held"


def test_confirmation_page_carries_a_csrf_token(
    memory: Any, make_client: Callable[..., Client], locks_url: str
) -> None:
    held(memory, "report")
    client = make_client("view_lock", "release_lock", enforce_csrf_checks=True)
    html = client.get(locks_url).content.decode()
    assert 'name="csrfmiddlewaretoken"' in html


@pytest.mark.parametrize(
    "value", ["garbage", '["mem", "report", "fencing", "1"]', '["mem", "report", "none", null]', "[1,2]"]
)
def test_tampered_selection_releases_nothing(
    memory: Any, releaser: Client, release_url: str, value: str
) -> None:
    held(memory, "report")
    response = releaser.post(release_url, {"lock": [value], "confirm": "yes"}, follow=True)
    assert state_of(memory, "report") == "held"
    assert messages_of(response, "error") == ["A selected lock could not be read; select it again."]


def test_empty_selection_warns(memory: Any, releaser: Client, release_url: str) -> None:
    response = releaser.post(release_url, {"confirm": "yes"}, follow=True)
    assert messages_of(response, "warning") == ["Select at least one lock to release."]


def test_store_failure_during_release_is_a_message_not_a_500(
    settings: Any, releaser: Client, release_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"ro": {"BACKEND": path_of(StaticProvider), "OPTIONS": {}}}
    value = Selection("ro", "report", "fencing", 3).encode()
    response = releaser.post(release_url, {"lock": [value], "confirm": "yes"}, follow=True)
    assert response.status_code == 200
    [error] = messages_of(response, "error")
    assert "'report'" in error and "'ro'" in error and "HTTP 403" in error
    assert release_entries() == []


def test_unknown_alias_is_an_error_message(memory: Any, releaser: Client, release_url: str) -> None:
    value = Selection("gone", "report", "fencing", 3).encode()
    response = releaser.post(release_url, {"lock": [value], "confirm": "yes"}, follow=True)
    assert response.status_code == 200
    [error] = messages_of(response, "error")
    assert "'gone'" in error


# -- stores without fencing tokens (Workers KV) --------------------------------------


@pytest.fixture
def fenceless(settings: Any, clock: MutableClock) -> Any:
    settings.TSLOCK_PROVIDERS = {
        "kv": {"BACKEND": path_of(FencelessMemoryProvider), "OPTIONS": {"clock": clock}}
    }
    return providers["kv"]


def by_fingerprint(provider: Any, name: str) -> str:
    [record] = provider.list_locks(name)
    assert record.fencing_token is None
    return Selection("kv", name, "fingerprint", record.token_fingerprint).encode()


def test_fenceless_rows_are_released_by_fingerprint_with_a_warning(
    fenceless: Any, releaser: Client, release_url: str, locks_url: str
) -> None:
    held(fenceless, "kv-job")
    page = releaser.get(locks_url).content.decode()
    assert "&quot;fingerprint&quot;" in page
    value = by_fingerprint(fenceless, "kv-job")

    confirmation = releaser.post(release_url, {"lock": [value]}).content.decode()
    assert "token fingerprint" in confirmation
    assert "cannot release conditionally in one step" in confirmation

    releaser.post(release_url, {"lock": [value], "confirm": "yes"})
    assert state_of(fenceless, "kv-job") == "expired"
    [entry] = release_entries()
    assert entry.object_id == "kv:kv-job"


def test_fenceless_lock_that_changed_hands_is_not_released(
    fenceless: Any, clock: MutableClock, releaser: Client, release_url: str
) -> None:
    held(fenceless, "kv-job", at_most="1m")
    value = by_fingerprint(fenceless, "kv-job")
    clock.advance("2m")
    held(fenceless, "kv-job")  # a new holder with a new token

    response = releaser.post(release_url, {"lock": [value], "confirm": "yes"}, follow=True)

    assert state_of(fenceless, "kv-job") == "held"
    assert release_entries() == []
    assert messages_of(response, "warning")


# -- the database provider --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_database_provider_release(
    settings: Any, releaser: Client, release_url: str, locks_url: str, force_released: list[dict[str, Any]]
) -> None:
    settings.TSLOCK_PROVIDERS = {"default": {"BACKEND": DATABASE_BACKEND}, "mem": MEMORY}
    db_lock = held(providers["default"], "db-job")
    held(providers["mem"], "mem-job")

    html = releaser.get(locks_url).content.decode()
    assert 'data-provider="default" data-name="db-job"' in html
    assert 'data-provider="mem" data-name="mem-job"' in html
    assert db_lock.token not in html

    releaser.post(release_url, {"lock": [selected(db_lock, "default")], "confirm": "yes"})

    [record] = providers["default"].list_locks("db-job")
    assert record.released  # the token is gone and lock_until moved to the store's "now"
    assert record.state(timezone.now() + timedelta(seconds=1)) == "expired"
    assert [e.object_id for e in release_entries()] == ["default:db-job"]
    assert [(s["alias"], s["released"]) for s in force_released] == [("default", True)]
    assert state_of(providers["mem"], "mem-job") == "held"


@pytest.mark.django_db(transaction=True)
def test_database_provider_release_under_atomic_requests(
    settings: Any, monkeypatch: pytest.MonkeyPatch, releaser: Client, release_url: str
) -> None:
    """A request transaction would make the SQLite provider refuse the release (one
    writer); the admin's views run outside it."""
    from django.db import connections

    monkeypatch.setitem(connections["default"].settings_dict, "ATOMIC_REQUESTS", True)
    settings.TSLOCK_PROVIDERS = {"default": {"BACKEND": DATABASE_BACKEND}}
    db_lock = held(providers["default"], "db-job")

    response = releaser.post(
        release_url, {"lock": [selected(db_lock, "default")], "confirm": "yes"}, follow=True
    )

    assert messages_of(response, "error") == []
    [record] = providers["default"].list_locks("db-job")
    assert record.released


def test_confirmation_names_a_provider_that_cannot_be_built(
    settings: Any, releaser: Client, release_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"bad": {"BACKEND": "no.such.Provider"}}
    value = Selection("bad", "report", "fencing", 3).encode()
    response = releaser.post(release_url, {"lock": [value]})
    assert response.status_code == 200
    assert "report" in response.content.decode()
    [error] = messages_of(response, "error")
    assert error.startswith("Lock provider 'bad' is not configured correctly")


def test_a_name_the_store_rejects_is_an_error_message(
    memory: Any, releaser: Client, release_url: str
) -> None:
    value = Selection("mem", "x" * 2000, "fencing", 1).encode()
    response = releaser.post(release_url, {"lock": [value], "confirm": "yes"}, follow=True)
    [error] = messages_of(response, "error")
    assert "too long" in error
    assert release_entries() == []


# -- review fixes: KV release by fingerprint in the store; the history entry ------------------


def test_fenceless_release_hands_the_fingerprint_to_the_store_without_listing(
    fenceless: Any, releaser: Client, release_url: str
) -> None:
    held(fenceless, "kv-job")
    held(fenceless, "other-job")
    value = by_fingerprint(fenceless, "kv-job")
    FencelessMemoryProvider.calls.clear()

    # No follow: the Locks page the redirect leads to lists the store, which is fine there.
    response = releaser.post(release_url, {"lock": [value], "confirm": "yes"})

    assert FencelessMemoryProvider.calls == [("force_unlock", "kv-job")]
    assert messages_of(response, "success")
    assert state_of(fenceless, "kv-job") == "expired"
    assert state_of(fenceless, "other-job") == "held"


KV_TOKEN = "admin-kv-api-token-Q7mw"


@pytest.fixture
def fake_kv(settings: Any, clock: MutableClock) -> Iterator[FakeKVTransport]:
    kv = FakeKVTransport(clock, account_id="acc", namespace_id="ns", api_token=KV_TOKEN)
    FakeKVProvider.fake = kv
    settings.TSLOCK_PROVIDERS = {
        "kv": {
            "BACKEND": path_of(FakeKVProvider),
            "OPTIONS": {
                "clock": clock,
                "account_id": "acc",
                "namespace_id": "ns",
                "api_token": KV_TOKEN,
                "acknowledge_advisory_lock": True,
            },
        }
    }
    yield kv
    FakeKVProvider.fake = None


def test_kv_release_from_the_admin_is_one_read_and_one_delete(
    fake_kv: FakeKVTransport, clock: MutableClock, releaser: Client, release_url: str
) -> None:
    provider = providers["kv"]
    held(provider, "kv-job")
    value = by_fingerprint(provider, "kv-job")
    clock.advance("2s")  # KV takes one write per key per second
    fake_kv.reset_counts()

    response = releaser.post(release_url, {"lock": [value], "confirm": "yes"})

    assert fake_kv.requests == {"GET value": 1, "DELETE value": 1}
    assert fake_kv.keys() == []
    assert messages_of(response, "success")
    [entry] = release_entries()
    assert entry.object_id == "kv:kv-job"
    assert response.status_code == 302


def test_kv_lock_that_changed_hands_is_not_released_from_the_admin(
    fake_kv: FakeKVTransport, clock: MutableClock, releaser: Client, release_url: str
) -> None:
    provider = providers["kv"]
    held(provider, "kv-job", at_most="1m")
    value = by_fingerprint(provider, "kv-job")
    clock.advance("2m")
    successor = held(provider, "kv-job")
    clock.advance("2s")
    fake_kv.reset_counts()

    response = releaser.post(release_url, {"lock": [value], "confirm": "yes"})

    assert fake_kv.requests == {"GET value": 1}  # read, compare, nothing deleted
    assert fake_kv.keys() == ["tslock:kv-job"]
    assert successor.token in (fake_kv.get_raw("tslock:kv-job") or "")
    [warning] = messages_of(response, "warning")
    assert "'kv-job'" in warning and "not released" in warning
    assert release_entries() == []


def test_a_history_entry_that_cannot_be_written_does_not_hide_the_release(
    memory: Any, releaser: Client, release_url: str, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    lock = held(memory, "report")

    def broken(**kwargs: Any) -> None:
        raise DatabaseError("the history table is read-only")

    monkeypatch.setattr(LogEntry.objects, "create", broken)
    with caplog.at_level(logging.ERROR, logger="tslock_django.admin"):
        response = releaser.post(release_url, {"lock": [selected(lock)], "confirm": "yes"}, follow=True)

    assert response.status_code == 200
    assert state_of(memory, "report") == "expired"
    [success] = messages_of(response, "success")
    assert "'report'" in success
    assert "history entry could not be written" in caplog.text
    assert lock.token not in caplog.text


def test_a_user_pk_that_is_not_an_integer_goes_into_the_history_as_is(
    memory: Any, rf: RequestFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A project with a UUID primary key on its user model: the pk is passed on unchanged.
    lock = held(memory, "report")
    created: list[dict[str, Any]] = []
    monkeypatch.setattr(LogEntry.objects, "create", lambda **kwargs: created.append(kwargs))
    user_pk = uuid.UUID("4b4f7c1e-0d1f-4d56-9a43-1f0d8a6a2c11")
    request = rf.post("/admin/tslock_django/lock/release/")
    request.user = SimpleNamespace(pk=user_pk, get_username=lambda: "uuid-user")  # type: ignore[assignment]
    request._messages = CookieStorage(request)  # type: ignore[attr-defined]

    admin_site._registry[Lock]._release_one(  # type: ignore[attr-defined]
        request, Selection("mem", "report", "fencing", lock.fencing_token or 0)
    )

    assert [kwargs["user_id"] for kwargs in created] == [user_pk]
    assert created[0]["object_id"] == "mem:report"
    assert state_of(memory, "report") == "expired"
    assert [m.level_tag for m in request._messages] == ["success"]  # type: ignore[attr-defined]


def test_kv_on_the_locks_page_follows_name_order_and_is_left_out_of_time_orders(
    fake_kv: FakeKVTransport, clock: MutableClock, settings: Any, admin_client: Client, locks_url: str
) -> None:
    # Needs the Workers KV provider's query() (the KV branch of the listing issue).
    settings.TSLOCK_PROVIDERS = {**settings.TSLOCK_PROVIDERS, "mem": {**MEMORY, "OPTIONS": {"clock": clock}}}
    held(providers["kv"], "b-kv")
    held(providers["mem"], "a-mem")
    held(providers["mem"], "c-mem")
    fake_kv.reset_counts()

    by_name = admin_client.get(locks_url).content.decode()
    again = admin_client.get(locks_url).content.decode()
    by_deadline = admin_client.get(locks_url, {"o": "lock_until"}).content.decode()

    assert re.findall(r'data-name="([^"]*)"', by_name) == ["a-mem", "b-kv", "c-mem"]
    assert re.findall(r'data-name="([^"]*)"', again) == ["a-mem", "b-kv", "c-mem"]
    assert fake_kv.requests.get("GET keys", 0) == 1  # the second view came from the listing cache
    assert re.findall(r'data-name="([^"]*)"', by_deadline) == ["a-mem", "c-mem"]
    assert "Lock provider &#x27;kv&#x27; cannot sort by lock until" in by_deadline
