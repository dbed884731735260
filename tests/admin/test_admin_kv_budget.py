"""The Locks page on Workers KV draws on one request allowance for admin views, so that
browsing (many users, many reloads) never spends more than a fixed share of the API
token's 1,200 requests per 5 minutes; when it is spent, the page says until when and
shows what it could read. Requests are counted by the fake KV namespace."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.utils import dateformat
from django.utils import timezone as django_timezone

from tests.admin.tslock_test_providers import FakeKVProvider, path_of
from tests.kv.fake import FakeKVTransport
from tslock_django import LockConfiguration
from tslock_django.admin import Selection
from tslock_django.conf import providers
from tslock_django.core.clock import MutableClock

pytestmark = pytest.mark.django_db

KV_TOKEN = "admin-budget-api-token-Zr4p"
START = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def clock() -> MutableClock:
    return MutableClock(START)


@pytest.fixture
def kv_options(clock: MutableClock) -> dict[str, Any]:
    """The OPTIONS of the "kv" provider; a test changes them before the first request."""
    return {
        "clock": clock,
        "account_id": "acc",
        "namespace_id": "ns",
        "api_token": KV_TOKEN,
        "acknowledge_advisory_lock": True,
    }


@pytest.fixture
def fake_kv(settings: Any, clock: MutableClock, kv_options: dict[str, Any]) -> Iterator[FakeKVTransport]:
    kv = FakeKVTransport(clock, account_id="acc", namespace_id="ns", api_token=KV_TOKEN)
    FakeKVProvider.fake = kv
    settings.TSLOCK_PROVIDERS = {"kv": {"BACKEND": path_of(FakeKVProvider), "OPTIONS": kv_options}}
    yield kv
    FakeKVProvider.fake = None


def fill_without_metadata(kv: FakeKVTransport, count: int) -> None:
    """Locks as @tslock/cloudflare-kv writes them: a value read each, so one view of a
    page spends the whole list_request_budget (10 requests)."""
    for i in range(count):
        data = {"lockUntil": 10**13, "lockedAt": 0, "lockedBy": "host:1", "token": f"t{i}"}
        kv.put_raw(f"tslock:job-{i:05}", json.dumps(data, separators=(",", ":")))


def page_text(response: Any) -> str:
    assert response.status_code == 200
    return unescape(response.content.decode())


def spent_message(until: datetime) -> str:
    shown = dateformat.format(django_timezone.localtime(until), "H:i T")
    return (
        "Lock provider 'kv': the Workers KV listing budget for admin views (120 requests per 5 "
        f"minutes, OPTIONS admin_request_budget) is spent until {shown}; showing what was read."
    )


def row_names(html: str) -> list[str]:
    return re.findall(r'<tr data-provider="[^"]*" data-name="([^"]*)"', html)


def test_many_admin_views_spend_at_most_the_budget(
    fake_kv: FakeKVTransport,
    clock: MutableClock,
    make_client: Callable[..., Client],
    locks_url: str,
) -> None:
    fill_without_metadata(fake_kv, 300)
    viewers = [make_client("view_lock") for _ in range(4)]
    fake_kv.reset_counts()
    # Four view-only users reload the page in turn every 6 s (past the 5 s listing
    # cache) for 4 minutes: 40 views, 400 requests without an allowance.
    texts = []
    for view in range(40):
        texts.append(page_text(viewers[view % 4].get(locks_url)))
        clock.advance(6)

    assert fake_kv.request_count() == 120
    message = spent_message(START + timedelta(minutes=5))
    assert message not in texts[11] and row_names(texts[11])
    assert all(message in text for text in texts[12:])


def test_a_spent_budget_shows_what_was_read(
    fake_kv: FakeKVTransport,
    clock: MutableClock,
    kv_options: dict[str, Any],
    viewer: Client,
    locks_url: str,
) -> None:
    kv_options["admin_request_budget"] = 15
    fill_without_metadata(fake_kv, 300)
    first = page_text(viewer.get(locks_url))
    assert len(row_names(first)) == 9
    next_url = unescape(re.search(r'<a href="([^"]*)" id="next-page"', first).group(1))  # type: ignore[union-attr]

    clock.advance(1)
    second = page_text(viewer.get(locks_url + next_url))

    until = dateformat.format(django_timezone.localtime(START + timedelta(minutes=5)), "H:i T")
    assert (
        "Lock provider 'kv': the Workers KV listing budget for admin views (15 requests per 5 "
        f"minutes, OPTIONS admin_request_budget) is spent until {until}; showing what was read."
    ) in second
    assert row_names(second) == [f"job-{i:05}" for i in range(9, 14)]
    assert 'id="next-page"' in second, "the walk can go on once the allowance renews"
    assert KV_TOKEN not in first + second


def test_every_admin_user_shares_the_allowance_and_release_is_not_limited(
    fake_kv: FakeKVTransport,
    clock: MutableClock,
    viewer: Client,
    releaser: Client,
    locks_url: str,
    release_url: str,
) -> None:
    fill_without_metadata(fake_kv, 300)
    held = providers["kv"].lock(LockConfiguration("a-held-job", "10m"))
    assert held is not None
    for _ in range(12):
        page_text(viewer.get(locks_url))
        clock.advance(6)
    message = spent_message(START + timedelta(minutes=5))

    # An operator who may release draws on the same allowance (it bounds what the admin
    # as a whole spends)...
    assert message in page_text(releaser.get(locks_url))
    # ...and can still release: a lock call, which never draws on it.
    fake_kv.reset_counts()
    posted = Selection("kv", "a-held-job", "fingerprint", held.record.token_fingerprint).encode()
    response = releaser.post(release_url, {"lock": [posted], "confirm": "yes"})
    assert response.status_code == 302
    assert fake_kv.requests == {"GET value": 1, "DELETE value": 1}
    assert fake_kv.get_raw("tslock:a-held-job") is None
