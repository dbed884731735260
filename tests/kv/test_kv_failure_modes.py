"""The failure modes of an advisory lock on Workers KV, reproduced with the fake.

Each test shows what happens, so the README's table is backed by something that runs:
these are not bugs to fix but the reasons to choose Durable Objects when an overlapping
run would be harmful.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.kv.fake import FakeKVTransport
from tslock_django.core.clock import MutableClock
from tslock_django.core.configuration import LockConfiguration
from tslock_django.exceptions import LockProviderError, LockRateLimited
from tslock_django.providers.cloudflare_kv import KVLockProvider

from .conftest import API_TOKEN, MakeProvider


def config(at_most: str = "5m", at_least: str | int = 0) -> LockConfiguration:
    return LockConfiguration("nightly-report", at_most, at_least)


KEY = "tslock:nightly-report"


def test_two_cached_misses_give_two_holders(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    kv.location("eu", cache_ttl=60)
    kv.location("us", cache_ttl=60)
    eu, us = make_provider("eu"), make_provider("us")
    # Both locations looked at the free key within the last minute (an earlier run, a
    # check): each caches "missing".
    assert eu.namespace.get(KEY) is None and us.namespace.get(KEY) is None

    first = eu.lock(config())
    clock.advance(1.1)  # the second PUT needs a second between writes, else it is a 429
    second = us.lock(config())

    assert first is not None and second is not None, "both callers acquired: no mutual exclusion"
    assert first.token != second.token
    # confirm_write did not help: each location re-read its own write.
    stored = json.loads(kv.get_raw(KEY) or "")
    assert stored["token"] == second.token


def test_without_caching_the_confirm_read_catches_an_overwrite(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    # For contrast: with fresh reads the second caller sees the first record.
    eu, us = make_provider("eu"), make_provider("us")
    assert eu.lock(config()) is not None
    clock.advance(1.1)
    assert us.lock(config()) is None


def test_a_delayed_delete_makes_another_location_skip(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    kv.location("us", delete_delay=10)
    eu, us = make_provider("eu"), make_provider("us")
    held = eu.lock(config())
    assert held is not None
    clock.advance(1.1)
    assert held.unlock() is True
    assert kv.get_raw(KEY) is None  # deleted at the origin

    attempt = us.attempt(config())
    assert attempt.held is None, "the other location still sees the released record and skips"
    assert attempt.holder is not None and attempt.holder.locked_by == eu.locked_by
    clock.advance(10)
    assert us.lock(config()) is not None


def test_a_stale_token_copy_makes_unlock_delete_a_newer_holder(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    kv.location("eu", cache_ttl=60)
    first_runner, operator, second_runner, third_runner = (
        make_provider("eu"),
        make_provider("us"),
        make_provider("us"),
        make_provider("asia"),
    )
    first = first_runner.lock(config())
    assert first is not None
    clock.advance(1.1)
    # An operator releases the lock (it looked stuck), and a new run takes it.
    assert operator.force_unlock("nightly-report", expected=None) is True
    clock.advance(1.1)
    second = second_runner.lock(config())
    assert second is not None
    clock.advance(1.1)

    # The first run finishes. Its location still caches the first record, so the token
    # check passes and the DELETE removes the second run's record.
    assert first.unlock() is True
    assert kv.get_raw(KEY) is None, "the newer holder's record was deleted"
    clock.advance(1.1)
    third = third_runner.lock(config())
    assert third is not None, "a third run now overlaps the second"


def test_the_ttl_floor_keeps_the_key_but_lock_until_decides(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    held = provider.lock(config(at_most="10s"))
    assert held is not None
    assert kv.expiration_of(KEY) == clock.now().replace(microsecond=0) + timedelta(seconds=60)
    clock.advance(10)
    assert kv.get_raw(KEY) is not None, "KV keeps the key for at least 60 s"
    successor = provider.lock(config(at_most="10s"))
    assert successor is not None, "acquire compares lockUntil, not the key's existence"
    clock.advance(61)
    assert kv.get_raw(KEY) is None, "KV dropped the key on its own clock"


def test_a_second_write_within_a_second_is_rate_limited_not_held(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    held = provider.lock(config())
    assert held is not None
    with pytest.raises(LockRateLimited) as caught:
        held.unlock()  # same instant as the acquiring PUT
    assert caught.value.status_code == 429
    assert kv.get_raw(KEY) is not None, "the refused DELETE left the lock in place"

    # Another caller taking over an expired sub-second lock: an error, never "held".
    short = make_provider()
    assert short.lock(LockConfiguration("blink", "500ms")) is not None
    clock.advance(0.6)
    with pytest.raises(LockRateLimited):
        short.lock(LockConfiguration("blink", "500ms"))


def test_keep_alive_under_two_seconds_collides_with_the_write_limit(
    make_provider: MakeProvider, clock: MutableClock
) -> None:
    provider = make_provider()
    at_most = timedelta(seconds=1.5)
    assert at_most < KVLockProvider.min_keep_alive_at_most_for
    held = provider.lock(LockConfiguration("tick", at_most))
    assert held is not None
    clock.advance(at_most / 2)  # the keep-alive's period
    with pytest.raises(LockRateLimited):
        held.extend(at_most)
    # At the documented minimum the period is a full second: the extension goes through.
    slow = provider.lock(LockConfiguration("tock", KVLockProvider.min_keep_alive_at_most_for))
    assert slow is not None
    clock.advance(KVLockProvider.min_keep_alive_at_most_for / 2)
    assert slow.extend(KVLockProvider.min_keep_alive_at_most_for) is not None


@pytest.mark.parametrize("fault", ["5xx", "timeout", "malformed"])
@pytest.mark.parametrize(
    ("step", "method", "after"), [("read", "GET", 0), ("write", "PUT", 0), ("confirm", "GET", 1)]
)
def test_store_failures_are_errors_not_held_and_never_show_the_token(
    make_provider: MakeProvider, kv: FakeKVTransport, fault: str, step: str, method: str, after: int
) -> None:
    provider = make_provider()
    if fault == "5xx":
        kv.fail_next(503, method=method, after=after)
    elif fault == "timeout":
        kv.timeout_next(method=method, after=after)
    else:
        kv.malformed_next(method=method, after=after)
    with pytest.raises(LockProviderError) as caught:
        provider.lock(config())
    error = caught.value
    assert not isinstance(error, LockRateLimited)
    for text in (str(error), repr(error), repr(provider), str(error.__cause__ or "")):
        assert API_TOKEN not in text
    assert kv.default._faults == [], f"the {step} step did not meet the injected fault"


def test_an_unknown_namespace_is_an_error_naming_the_code(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider()
    kv.namespace_exists = False
    for call in (
        lambda: provider.lock(config()),
        provider.list_locks,
        lambda: provider.force_unlock("x", expected=None),
    ):
        with pytest.raises(LockProviderError) as caught:
            call()
        assert "10013" in str(caught.value) and caught.value.status_code == 404
        assert API_TOKEN not in str(caught.value)


def test_a_write_whose_answer_was_lost_leaves_an_orphan_until_lock_until(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    kv.timeout_next(method="PUT", after_write=True)
    with pytest.raises(LockProviderError, match="did not answer in time"):
        provider.lock(config(at_most="30s"))
    # Nothing is retried, so the landed write holds the lock for its lockUntil.
    assert kv.requests["PUT value"] == 1
    assert provider.lock(config(at_most="30s")) is None
    clock.advance(30)
    assert provider.lock(config(at_most="30s")) is not None


def test_an_unlock_that_fails_leaves_the_lock_to_expire(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    held = provider.lock(config(at_most="20s"))
    assert held is not None
    clock.advance(1.1)
    kv.fail_next(500, method="DELETE")
    with pytest.raises(LockProviderError):
        held.unlock()
    assert provider.lock(config()) is None
    clock.advance(20)
    assert provider.lock(config()) is not None
