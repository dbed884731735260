"""The request allowance for listings read on behalf of admin page views.

Browsing the admin must never take the jobs' share of the API token's 1,200 requests
per 5 minutes: listings read for admin views draw on one allowance per provider and
process (OPTIONS ``admin_request_budget`` per ``admin_budget_seconds``, default 120 per
300 s). When it is spent, a view gets what the cache still has and what it read before,
and the provider reports when the allowance renews. Lock calls and listings made for
anything else never draw on it. Requests are counted by the fake; time is the shared
MutableClock."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from tests.kv.fake import FakeKVTransport
from tslock_django.core.budget import AdminViewListing, RequestAllowance, admin_view_listing
from tslock_django.core.clock import MutableClock
from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.query import LockPage, LockQuery
from tslock_django.exceptions import InvalidLockProvider
from tslock_django.providers.cloudflare_kv import KVLockProvider

from .conftest import ACCOUNT_ID, API_TOKEN, NAMESPACE_ID, MakeProvider


def fill_without_metadata(kv: FakeKVTransport, count: int) -> None:
    """``count`` held locks as @tslock/cloudflare-kv writes them (no metadata), so each
    costs a value read: a listing page then spends its whole list_request_budget."""
    for i in range(count):
        data = {"lockUntil": 10**13, "lockedAt": 0, "lockedBy": "host:1", "token": f"t{i}"}
        kv.put_raw(f"tslock:job-{i:05}", json.dumps(data, separators=(",", ":")))


def admin_view(provider: KVLockProvider, cursor: str | None = None) -> tuple[LockPage, AdminViewListing]:
    """One page read as the admin reads it."""
    with admin_view_listing() as view:
        page = provider.query(LockQuery(cursor=cursor))
    return page, view


def test_admin_views_spend_at_most_the_default_budget(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    fill_without_metadata(kv, 300)
    kv.reset_counts()
    spent_views = []
    # A page reloaded every 6 s for 4 minutes: past the 5 s cache each time, 10 requests
    # a view, 400 in all without the allowance.
    for _ in range(40):
        _, view = admin_view(provider)
        if view.spent_budgets:
            spent_views.append(view.spent_budgets["kv"])
        clock.advance(6)
    assert kv.request_count() == 120
    assert len(spent_views) == 28
    first = spent_views[0]
    assert first.alias == "kv"
    assert "120 requests per 5 minutes" in first.budget and "admin_request_budget" in first.budget


def test_a_spent_budget_shows_what_was_read_and_goes_on_later(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(admin_request_budget=15)
    fill_without_metadata(kv, 300)
    started = clock.now()
    kv.reset_counts()

    first, view = admin_view(provider)
    assert kv.request_count() == 10 and not view.spent_budgets
    assert len(first.records) == 9 and first.next_cursor

    clock.advance(1)
    second, view = admin_view(provider, first.next_cursor)
    # 5 requests left: the list page is still cached, so 5 values are read.
    assert kv.request_count() == 15
    assert [r.name for r in second.records] == [f"job-{i:05}" for i in range(9, 14)]
    assert view.spent_budgets["kv"].until == started + timedelta(seconds=300)
    # The walk goes on from where the allowance stopped it.
    assert second.next_cursor
    assert not any("list_request_budget" in note for note in second.notes)

    clock.advance(1)
    third, view = admin_view(provider, second.next_cursor)
    assert kv.request_count() == 15, "a spent allowance sends nothing"
    assert third.records == [] and third.next_cursor is None
    assert not any("next page" in note for note in third.notes), "there is no next page"
    assert view.spent_budgets["kv"].until == started + timedelta(seconds=300)

    clock.set(started + timedelta(seconds=300))
    fourth, view = admin_view(provider, second.next_cursor)
    assert not view.spent_budgets, "renewed after the window"
    assert [r.name for r in fourth.records][:1] == ["job-00014"]


def test_cached_pages_are_still_shown_when_the_budget_is_spent(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(admin_request_budget=10)
    fill_without_metadata(kv, 300)
    first, _ = admin_view(provider)
    kv.reset_counts()

    again, view = admin_view(provider)  # within list_cache_seconds
    assert kv.request_count() == 0
    assert [r.name for r in again.records] == [r.name for r in first.records]
    assert not view.spent_budgets, "the cache answered everything: nothing was refused"


def test_lock_calls_never_draw_on_the_admin_budget(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(admin_request_budget=2)
    fill_without_metadata(kv, 30)
    _, view = admin_view(provider)
    assert view.spent_budgets, "the allowance is spent"

    kv.reset_counts()
    with admin_view_listing():  # even inside an admin view (a release does this)
        held = provider.lock(LockConfiguration("job-new", "5m"))
        assert held is not None
        clock.advance(1.1)
        extended = held.extend("5m")
        assert extended is not None
        clock.advance(1.1)
        assert extended.unlock() is True
        assert provider.force_unlock("job-00001", expected=None) is True
    assert kv.request_count() == 3 + 2 + 2 + 2


def test_listings_outside_admin_views_are_not_limited(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(admin_request_budget=2)
    fill_without_metadata(kv, 30)
    _, view = admin_view(provider)
    assert view.spent_budgets

    # manage.py tslock list, a health check, a script: bounded per page only.
    assert len(provider.list_locks()) == 30


def test_every_thread_draws_on_one_allowance_per_provider(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider(admin_request_budget=25, list_cache_seconds=0)
    fill_without_metadata(kv, 300)
    kv.reset_counts()
    barrier = threading.Barrier(8)

    def browse() -> None:
        barrier.wait()
        for _ in range(5):
            admin_view(provider)

    threads = [threading.Thread(target=browse) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert kv.request_count() == 25

    other = make_provider(alias="kv-other", admin_request_budget=25, list_cache_seconds=0)
    _, view = admin_view(other)
    assert not view.spent_budgets, "another provider has an allowance of its own"


def test_allowance_is_a_sliding_window(clock: MutableClock) -> None:
    allowance = RequestAllowance(3, 60, clock)
    assert allowance.renews_at() is None
    assert allowance.take() and allowance.take()
    clock.advance(30)
    assert allowance.take()
    assert not allowance.take()
    assert allowance.renews_at() == clock.now() + timedelta(seconds=30)
    clock.advance(30)  # the first two leave the window, the third stays
    assert allowance.take() and allowance.take()
    assert not allowance.take()
    assert allowance.describe() == "3 requests per minute"
    assert RequestAllowance(1, 90, clock).describe() == "1 request per 90 seconds"


def test_allowance_is_thread_safe(clock: MutableClock) -> None:
    allowance = RequestAllowance(50, 300, clock)
    granted: list[bool] = []
    barrier = threading.Barrier(8)

    def spend() -> None:
        barrier.wait()
        mine = [allowance.take() for _ in range(100)]
        granted.extend(mine)

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert granted.count(True) == 50


def test_admin_budget_options_are_validated() -> None:
    base: dict[str, Any] = {
        "account_id": ACCOUNT_ID,
        "namespace_id": NAMESPACE_ID,
        "api_token": API_TOKEN,
        "acknowledge_advisory_lock": True,
    }
    made = KVLockProvider("kv", **base)
    assert made.options["admin_request_budget"] == 120
    assert made.options["admin_budget_seconds"] == 300
    for key, bad in [
        ("admin_request_budget", 0),
        ("admin_request_budget", 1201),
        ("admin_request_budget", 2.5),
        ("admin_request_budget", True),
        ("admin_request_budget", "lots"),
        ("admin_budget_seconds", 0),
        ("admin_budget_seconds", 3601),
        ("admin_budget_seconds", True),
        ("admin_budget_seconds", float("nan")),
    ]:
        with pytest.raises(InvalidLockProvider, match=repr(key)) as caught:
            KVLockProvider("kv", **{**base, key: bad})
        assert API_TOKEN not in str(caught.value)
    # From a settings URL, numbers arrive as text.
    made = KVLockProvider("kv", **base, admin_request_budget="60", admin_budget_seconds="120")
    assert made.options["admin_request_budget"] == 60 and made.options["admin_budget_seconds"] == 120.0
