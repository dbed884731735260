"""KVLockProvider on the fake namespace with fresh reads: options, the stored format,
the TTL rule, and what acquire / unlock / extend / force_unlock / list_locks do."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from tests.kv.fake import FakeKVTransport
from tslock_django.core.clock import MutableClock
from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.query import ALL_STATES, LockQuery
from tslock_django.core.records import fingerprint
from tslock_django.exceptions import InvalidLockProvider, LockProviderError
from tslock_django.providers.cloudflare_kv import KVLockProvider, KVRecord, epoch_ms, expiration_ttl

from .conftest import ACCOUNT_ID, API_TOKEN, NAMESPACE_ID, MakeProvider


def config(name: str = "job", at_most: str = "5m", at_least: str | int = 0) -> LockConfiguration:
    return LockConfiguration(name, at_most, at_least)


# -- options ---------------------------------------------------------------------------


@pytest.mark.parametrize("given", [None, False, "false", "no", 1, 0.0])
def test_the_advisory_acknowledgement_must_be_exactly_true(given: object) -> None:
    options: dict[str, Any] = {"account_id": ACCOUNT_ID, "namespace_id": NAMESPACE_ID, "api_token": API_TOKEN}
    if given is not None:
        options["acknowledge_advisory_lock"] = given  # type: ignore[assignment]
    with pytest.raises(InvalidLockProvider) as caught:
        KVLockProvider("kv", **options)
    text = str(caught.value)
    assert "acknowledge_advisory_lock" in text and "must be True" in text
    assert "DurableObjectLockProvider" in text and "both acquire" in text
    assert API_TOKEN not in text


def test_the_acknowledgement_may_come_from_a_url_query_string(make_provider: MakeProvider) -> None:
    # The settings URL form carries ?acknowledge_advisory_lock=true as text.
    assert make_provider(acknowledge_advisory_lock="true").guarantee == "advisory"


def test_options_are_validated_with_messages_that_name_the_key() -> None:
    base: dict[str, Any] = {
        "account_id": ACCOUNT_ID,
        "namespace_id": NAMESPACE_ID,
        "api_token": API_TOKEN,
        "acknowledge_advisory_lock": True,
    }
    with pytest.raises(InvalidLockProvider, match="'region'"):
        KVLockProvider("kv", **base, region="eu")
    with pytest.raises(InvalidLockProvider, match="'api_token'"):
        KVLockProvider("kv", **{k: v for k, v in base.items() if k != "api_token"})
    for key, bad in [
        ("api_token", ""),
        ("account_id", None),
        ("confirm_write", "maybe"),
        ("confirm_write", 1),
        ("timeout", 0),
        ("timeout", True),
        ("base_url", "ftp://x"),
        ("key_prefix", 5),
        ("key_prefix", "p" * 512),
        ("list_request_budget", 1),
        ("list_request_budget", 1201),
        ("list_request_budget", 2.5),
        ("list_request_budget", True),
        ("list_request_budget", "many"),
        ("list_cache_seconds", -1),
        ("list_cache_seconds", 301),
        ("list_cache_seconds", False),
        ("list_cache_seconds", "soon"),
    ]:
        with pytest.raises(InvalidLockProvider, match=repr(key)):
            KVLockProvider("kv", **{**base, key: bad})
    # From a settings URL, numbers arrive as text.
    made = KVLockProvider("kv", **base, list_request_budget="25", list_cache_seconds="0")
    assert made.options["list_request_budget"] == 25 and made.options["list_cache_seconds"] == 0.0


def test_provider_states_its_guarantee_and_hides_the_token(make_provider: MakeProvider) -> None:
    provider = make_provider()
    assert provider.guarantee == "advisory"
    assert API_TOKEN not in repr(provider) and "'api_token': '***'" in repr(provider)
    assert API_TOKEN not in repr(provider.namespace)
    assert provider.min_keep_alive_at_most_for == timedelta(seconds=2)


def test_key_limit_counts_the_prefix(make_provider: MakeProvider) -> None:
    provider = make_provider()
    provider.validate_name("x" * (512 - len("tslock:")))
    with pytest.raises(ValueError, match="513 UTF-8 bytes"):
        provider.lock(config("x" * (513 - len("tslock:"))))
    with pytest.raises(ValueError, match="limit is 512"):
        provider.lock(config("é" * 253))  # 7 + 506 bytes
    bare = make_provider(key_prefix="")
    with pytest.raises(ValueError, match="Workers KV refuses"):
        bare.lock(config(".."))


# -- stored format -----------------------------------------------------------------------


def test_record_is_the_typescript_format_byte_for_byte(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    held = provider.lock(config("report", "90s"))
    assert held is not None
    now_ms = epoch_ms(clock.now())
    expected = (
        f'{{"lockUntil":{now_ms + 90_000},"lockedAt":{now_ms},'
        f'"lockedBy":{json.dumps(provider.locked_by)},"token":"{held.token}"}}'
    )
    assert kv.get_raw("tslock:report") == expected
    assert kv.metadata_of("tslock:report") == json.loads(expected)
    assert list(kv.metadata_of("tslock:report")) == ["lockUntil", "lockedAt", "lockedBy", "token"]
    assert held.fencing_token is None and held.record.fencing_token is None
    assert epoch_ms(held.record.lock_until) == now_ms + 90_000


@pytest.mark.parametrize(
    ("remaining_ms", "ttl"),
    [
        (0, 60),
        (1, 60),
        (58_999, 60),
        (59_000, 60),
        (59_999, 60),
        (60_000, 61),
        (300_000, 301),
        (300_999, 301),
    ],
)
def test_expiration_ttl_rule(remaining_ms: int, ttl: int) -> None:
    assert expiration_ttl(1_000_000 + remaining_ms, 1_000_000) == ttl


def test_ttl_sent_follows_the_rule(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    assert provider.lock(config("short", "10s")) is not None
    assert provider.lock(config("long", "10m")) is not None
    whole_now = clock.now().replace(microsecond=0)
    assert kv.expiration_of("tslock:short") == whole_now + timedelta(seconds=60)
    assert kv.expiration_of("tslock:long") == whole_now + timedelta(seconds=601)


def test_very_long_locked_by_falls_back_to_no_metadata(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider()
    provider.locked_by = "h" * 1100
    assert provider.lock(config()) is not None
    assert kv.metadata_of("tslock:job") is None
    [listed] = provider.list_locks()
    assert listed.locked_by == "h" * 1100


# -- acquire / unlock / extend ------------------------------------------------------------


def test_held_lock_is_skipped_with_the_holder_but_not_its_token(make_provider: MakeProvider) -> None:
    first, second = make_provider(), make_provider()
    held = first.lock(config())
    assert held is not None
    attempt = second.attempt(config())
    assert attempt.held is None and attempt.holder is not None
    assert attempt.holder.token == "" and attempt.holder.token_fingerprint == fingerprint(held.token)
    assert attempt.holder.locked_by == first.locked_by
    assert attempt.holder.lock_until == held.record.lock_until


def test_expired_lock_can_be_taken_over(make_provider: MakeProvider, clock: MutableClock) -> None:
    provider = make_provider()
    old = provider.lock(config(at_most="10s"))
    assert old is not None
    clock.advance("10s")  # lockUntil == now: expired
    new = provider.lock(config(at_most="10s"))
    assert new is not None and new.token != old.token
    assert old.unlock() is False  # not ours any more; nothing changed
    assert provider.lock(config()) is None


def test_unlock_deletes_when_at_least_has_passed(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    held = provider.lock(config(at_least="1s"))
    assert held is not None
    clock.advance("1s")
    assert held.unlock() is True
    assert kv.keys() == []


def test_unlock_before_at_least_keeps_the_lock_until_then(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    held = provider.lock(config(at_least="30s"))
    assert held is not None
    clock.advance("5s")
    assert held.unlock() is True
    stored = json.loads(kv.get_raw("tslock:job") or "")
    assert stored["lockUntil"] == epoch_ms(held.lock_at_least_until)
    assert stored["token"] == held.token
    assert list(stored) == ["lockUntil", "lockedAt", "lockedBy", "token"], "the TypeScript format"
    # Only the metadata, which TypeScript neither writes nor reads, says it was released.
    assert kv.metadata_of("tslock:job") == {**stored, "released": True}
    [listed] = provider.list_locks()
    assert listed.released and listed.state(clock.now()) == "held_for_at_least"
    assert provider.lock(config()) is None
    clock.advance("25s")
    assert provider.lock(config()) is not None


def test_unlock_of_an_expired_lock_changes_nothing(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    held = provider.lock(config(at_most="10s"))
    assert held is not None
    clock.advance("11s")
    before = kv.get_raw("tslock:job")
    kv.reset_counts()
    assert held.unlock() is False
    assert kv.get_raw("tslock:job") == before
    assert kv.requests == {"GET value": 1}


def test_extend_moves_lock_until_and_keeps_the_token(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    held = provider.lock(config(at_most="10s"))
    assert held is not None
    clock.advance("4s")
    longer = held.extend("1m", "20s")
    assert longer is not None and longer.token == held.token
    stored = json.loads(kv.get_raw("tslock:job") or "")
    assert stored["lockUntil"] == epoch_ms(clock.now()) + 60_000
    assert stored["lockedAt"] == epoch_ms(held.record.locked_at)
    assert longer.lock_at_least_until == longer.record.lock_until - timedelta(seconds=40)
    clock.advance("30s")  # past the original 10 s
    assert provider.lock(config()) is None


def test_extend_is_refused_after_expiry_or_takeover(make_provider: MakeProvider, clock: MutableClock) -> None:
    provider = make_provider()
    held = provider.lock(config(at_most="10s"))
    assert held is not None
    clock.advance("10s")
    assert held.extend("1m") is None
    other = provider.lock(config(at_most="10s"))
    assert other is not None
    clock.advance("1s")
    assert held.extend("1m") is None
    assert other.extend("1m") is not None


# -- force_unlock ---------------------------------------------------------------------------


def test_force_unlock_refuses_a_fencing_token(make_provider: MakeProvider, kv: FakeKVTransport) -> None:
    provider = make_provider()
    assert provider.lock(config()) is not None
    with pytest.raises(ValueError, match="no fencing tokens"):
        provider.force_unlock("job", expected=1)
    assert kv.keys() == ["tslock:job"]


def test_force_unlock_by_token_fingerprint_or_unconditionally(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    held = provider.lock(config())
    assert held is not None
    clock.advance("1s")
    assert provider.force_unlock("job", expected="someone-else") is False
    assert provider.force_unlock("job", expected=held.token) is True
    assert kv.keys() == []
    assert provider.force_unlock("job", expected=None) is False

    clock.advance("1s")
    held = provider.lock(config())
    assert held is not None
    clock.advance("1s")
    [listed] = provider.list_locks()
    assert provider.force_unlock("job", expected=listed.token_fingerprint) is True

    clock.advance("1s")
    assert provider.lock(config()) is not None
    clock.advance("1s")
    assert provider.force_unlock("job", expected=None) is True
    assert kv.keys() == []


# -- list_locks -------------------------------------------------------------------------------


def test_list_locks_strips_the_prefix_and_hides_tokens(
    make_provider: MakeProvider, kv: FakeKVTransport, clock: MutableClock
) -> None:
    provider = make_provider()
    tokens = {}
    for name in ["b/2", "a 1", "c?3", "report-x"]:
        held = provider.lock(config(name))
        assert held is not None
        tokens[name] = held.token
    kv.put_raw("other-app:thing", "not ours")
    records = provider.list_locks()
    assert [r.name for r in records] == ["a 1", "b/2", "c?3", "report-x"]
    for record in records:
        assert record.token == "" and record.token_fingerprint == fingerprint(tokens[record.name])
        assert record.provider == "kv" and record.fencing_token is None
        assert record.state(clock.now()) == "held"
    assert [r.name for r in provider.list_locks(prefix="report")] == ["report-x"]


def test_list_locks_needs_one_request_per_thousand_keys(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider()
    for i in range(2500):
        record = {"lockUntil": 1, "lockedAt": 0, "lockedBy": "h", "token": f"t{i}"}
        kv.put_raw(f"tslock:job-{i:05}", json.dumps(record), metadata=record)
    kv.reset_counts()
    assert len(provider.list_locks()) == 2500
    assert kv.requests == {"GET keys": 3}


def test_list_locks_shows_expired_records_until_kv_drops_them(
    make_provider: MakeProvider, clock: MutableClock
) -> None:
    provider = make_provider()
    assert provider.lock(config(at_most="10s")) is not None
    clock.advance("30s")
    [record] = provider.list_locks()
    assert record.state(clock.now()) == "expired"
    clock.advance("31s")  # past the 60 s TTL floor: KV dropped the key
    assert provider.list_locks() == []


@pytest.mark.parametrize(
    "stored",
    [
        "not json at all",
        '{"lockUntil":1,"lockedAt":0,"lockedBy":"h"}',
        '{"lockUntil":"1","lockedAt":0,"lockedBy":"h","token":"t"}',
        '{"lockUntil":1,"lockedAt":0,"lockedBy":"h","token":7}',
        "[1,2,3]",
    ],
)
def test_a_value_that_is_not_a_record_is_an_error_for_locking_and_an_unreadable_row_for_listing(
    make_provider: MakeProvider, kv: FakeKVTransport, stored: str
) -> None:
    provider = make_provider()
    kv.put_raw("tslock:job", stored)
    assert provider.lock(config("other")) is not None
    with pytest.raises(LockProviderError, match="'tslock:job'"):
        provider.lock(config())
    # The listing shows the rest, and the bad key as a row that says why (issue 11).
    page = provider.query(LockQuery(states=ALL_STATES))
    assert [r.name for r in page.records] == ["job", "other"]
    bad = page.records[0]
    assert "'tslock:job'" in bad.unreadable and bad.locked_by.startswith("unreadable: ")
    assert [r.name for r in provider.list_locks()] == ["job", "other"]
    assert kv.get_raw("tslock:job") == stored


def test_the_settings_url_builds_a_working_provider(kv: FakeKVTransport, clock: MutableClock) -> None:
    from tslock_django.conf import parse_provider_url

    entry = parse_provider_url(
        f"cloudflare-kv://{ACCOUNT_ID}:{API_TOKEN}@{NAMESPACE_ID}"
        "?acknowledge_advisory_lock=true&key_prefix=jobs:&confirm_write=false&timeout=2.5"
    )
    assert entry["BACKEND"] == "tslock_django.providers.cloudflare_kv.KVLockProvider"
    provider = KVLockProvider("kv", clock=clock, transport=kv, **entry["OPTIONS"])
    assert provider.options["confirm_write"] is False and provider.options["timeout"] == 2.5
    kv.reset_counts()
    assert provider.lock(config()) is not None
    assert kv.keys() == ["jobs:job"]
    assert kv.requests == {"GET value": 1, "PUT value": 1}
    assert API_TOKEN not in repr(provider)


# -- review fixes: close() then use, out-of-range times, token checks, repr ------------------


def test_the_provider_works_again_after_close(make_provider: MakeProvider, clock: MutableClock) -> None:
    provider = make_provider()
    held = provider.lock(config())
    assert held is not None
    provider.close()
    clock.advance("1s")
    # close() frees the connections only: LockProvider.close() promises reuse afterwards.
    assert held.unlock() is True
    clock.advance("1s")
    again = provider.lock(config())
    assert again is not None
    provider.close()
    provider.close()  # closing twice is harmless
    assert [r.name for r in provider.list_locks()] == ["job"]


def test_a_request_racing_close_is_a_provider_error(make_provider: MakeProvider) -> None:
    provider = make_provider()
    # What another thread's close() leaves behind for a request that already took the
    # client: httpx refuses to send on it with a RuntimeError.
    provider.namespace._http().close()
    with pytest.raises(LockProviderError, match="closed") as caught:
        provider.lock(config())
    assert caught.value.alias == "kv"
    assert API_TOKEN not in str(caught.value)


OUT_OF_RANGE_TIMES = [
    '"lockUntil":1e300,"lockedAt":0',
    '"lockUntil":100000000000000000,"lockedAt":0',
    '"lockUntil":253402300800000,"lockedAt":0',  # 10000-01-01, one millisecond past the range
    '"lockUntil":1000,"lockedAt":-1',
]


@pytest.mark.parametrize(
    ("times", "with_metadata"),
    [(times, with_metadata) for times in OUT_OF_RANGE_TIMES for with_metadata in (False, True)]
    # Python's json reads 1e400 as infinity; metadata is strict JSON, so only the value can hold it.
    + [('"lockUntil":1e400,"lockedAt":0', False)],
)
def test_times_a_datetime_cannot_hold_are_a_malformed_record_error(
    make_provider: MakeProvider, kv: FakeKVTransport, times: str, with_metadata: bool
) -> None:
    provider = make_provider()
    stored = "{" + times + ',"lockedBy":"h:1","token":"t"}'
    if with_metadata:
        kv.put_raw("tslock:job", stored, metadata=json.loads(stored))
    else:
        kv.put_raw("tslock:job", stored)
    # 1e400 is infinity to Python's json: refused as not finite before any range check.
    reason = "too large to be finite" if "1e400" in times else "1970 and year 9999"
    with pytest.raises(LockProviderError, match="'tslock:job'") as caught:
        provider.lock(config())
    assert reason in str(caught.value)
    page = provider.query(LockQuery(states=ALL_STATES))
    [row] = page.records
    assert row.name == "job" and "'tslock:job'" in row.unreadable and reason in row.unreadable


def test_the_last_representable_millisecond_is_still_a_record(
    make_provider: MakeProvider, kv: FakeKVTransport
) -> None:
    provider = make_provider()
    kv.put_raw("tslock:job", '{"lockUntil":253402300799999,"lockedAt":0,"lockedBy":"h:1","token":"t"}')
    [record] = provider.list_locks()
    assert record.lock_until.year == 9999
    assert provider.lock(config()) is None  # held until the end of year 9999


@pytest.mark.parametrize(
    "token",
    [
        API_TOKEN + "\n",
        API_TOKEN + "\r\n",
        "\t" + API_TOKEN,
        API_TOKEN[:5] + " " + API_TOKEN[5:],
        API_TOKEN[:5] + "\x00" + API_TOKEN[5:],
        API_TOKEN + "é",
        API_TOKEN + "\u00a0",  # a no-break space pasted from a web page
    ],
)
def test_an_api_token_that_cannot_travel_in_a_header_is_refused_without_echoing_it(token: str) -> None:
    with pytest.raises(InvalidLockProvider) as caught:
        KVLockProvider(
            "kv",
            account_id=ACCOUNT_ID,
            namespace_id=NAMESPACE_ID,
            api_token=token,
            acknowledge_advisory_lock=True,
        )
    text = str(caught.value)
    assert "'api_token'" in text and "printable ASCII" in text
    assert API_TOKEN[:8] not in text


def test_the_record_repr_hides_the_token() -> None:
    record = KVRecord(1000, 0, "h:1", "tok-" + API_TOKEN)
    assert API_TOKEN not in repr(record)
    assert "h:1" in repr(record)
    assert API_TOKEN in record.encode()  # the stored form still carries it


def test_both_cloudflare_providers_read_epoch_times_with_one_helper() -> None:
    from tslock_django.providers import cloudflare_do, cloudflare_kv, epoch

    assert cloudflare_kv.from_epoch_ms is epoch.from_epoch_ms
    assert cloudflare_do.from_epoch_ms is epoch.from_epoch_ms
    assert cloudflare_kv.epoch_ms is epoch.to_epoch_ms
    assert epoch.from_epoch_ms(epoch.MAX_EPOCH_MS).isoformat() == "9999-12-31T23:59:59.999000+00:00"
    assert epoch.to_epoch_ms(epoch.from_epoch_ms(1_700_000_000_123)) == 1_700_000_000_123
    for value in (-1, epoch.MAX_EPOCH_MS + 1, 10**300):
        with pytest.raises(ValueError, match="outside"):
            epoch.from_epoch_ms(value)
