"""A provider that cannot be built, reached or read shows one error; the others still render."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from tests.admin.tslock_test_providers import MEMORY, FailingProvider, path_of
from tslock_django import LockConfiguration
from tslock_django.conf import DURABLE_OBJECT_BACKEND, providers

pytestmark = pytest.mark.django_db


def closed_port() -> int:
    """A port nobody listens on: bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def errors(response: Any) -> list[str]:
    return [m.message for m in get_messages(response.wsgi_request) if m.level_tag == "error"]


def failing(failure: str) -> dict[str, Any]:
    return {"BACKEND": path_of(FailingProvider), "OPTIONS": {"failure": failure}}


def render_with(settings: Any, client: Client, url: str, **extra: dict[str, Any]) -> tuple[Any, str]:
    """Render the page with the ``extra`` providers next to a healthy memory provider "ok"
    that holds the lock "still-visible"."""
    settings.TSLOCK_PROVIDERS = {**extra, "ok": MEMORY}
    assert providers["ok"].lock(LockConfiguration("still-visible", "10m")) is not None
    response = client.get(url)
    return response, response.content.decode()


def test_unreachable_durable_object_worker(settings: Any, admin_client: Client, locks_url: str) -> None:
    secret = "do-bearer-secret-123"
    edge = {
        "BACKEND": DURABLE_OBJECT_BACKEND,
        "OPTIONS": {"url": f"http://127.0.0.1:{closed_port()}", "token": secret, "timeout": 2.0},
    }
    response, html = render_with(settings, admin_client, locks_url, edge=edge)
    assert response.status_code == 200
    assert "still-visible" in html
    [message] = errors(response)
    assert "'edge'" in message
    assert secret not in message and secret not in html


def test_store_error_names_alias_and_cause(settings: Any, admin_client: Client, locks_url: str) -> None:
    response, html = render_with(settings, admin_client, locks_url, kv=failing("store"))
    assert response.status_code == 200
    assert "still-visible" in html
    assert errors(response) == [
        "Lock provider 'kv' could not be read: HTTP 401 from the store: the token was refused"
    ]


def test_a_provider_bug_is_reported_by_type_only(
    settings: Any, admin_client: Client, locks_url: str, caplog: Any
) -> None:
    response, html = render_with(settings, admin_client, locks_url, buggy=failing("bug"))
    assert response.status_code == 200
    assert "still-visible" in html
    [message] = errors(response)
    assert "'buggy'" in message and "RuntimeError" in message
    assert "super-secret-value" not in html


def test_garbage_answer(settings: Any, admin_client: Client, locks_url: str) -> None:
    response, html = render_with(settings, admin_client, locks_url, odd=failing("garbage"))
    assert response.status_code == 200
    assert "still-visible" in html
    assert "not-a-record" not in html
    assert errors(response) == [
        "Lock provider 'odd' could not be read: answered something that is not a list of lock records"
    ]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"BACKEND": "no.such.Provider"}, "could not be imported"),
        (
            {"BACKEND": DURABLE_OBJECT_BACKEND, "OPTIONS": {"url": "http://x", "token": "t", "tokn": 1}},
            "'tokn'",
        ),
    ],
)
def test_misconfigured_provider(
    settings: Any, admin_client: Client, locks_url: str, entry: Any, expected: str
) -> None:
    response, html = render_with(settings, admin_client, locks_url, broken=entry)
    assert response.status_code == 200
    assert "still-visible" in html
    [message] = errors(response)
    assert message.startswith("Lock provider 'broken' is not configured correctly:")
    assert expected in message


def test_every_failing_provider_gets_its_own_message(
    settings: Any, admin_client: Client, locks_url: str
) -> None:
    response, _ = render_with(settings, admin_client, locks_url, a=failing("store"), b=failing("garbage"))
    assert [m.split(":")[0] for m in errors(response)] == [
        "Lock provider 'a' could not be read",
        "Lock provider 'b' could not be read",
    ]
