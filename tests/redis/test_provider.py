"""The Redis provider beyond the contract: options, one round trip per operation, the
holder in the acquire's answer, lock_at_least_for as a state, SCRIPT FLUSH, fencing
tokens across a restart that lost every key, the listing index, purge."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.checks import Error
from django.core.management import call_command
from django.test import override_settings

from tslock_django import LockConfiguration
from tslock_django.checks import check_providers
from tslock_django.conf import parse_provider_url, providers
from tslock_django.core.query import ALL_STATES, LockQuery
from tslock_django.exceptions import InvalidLockProvider, LockProviderError
from tslock_django.providers.redis import RedisLockProvider
from tslock_django.providers.redis import provider as redis_provider
from tslock_django.providers.store_options import DJANGO_REDIS_CACHE

from .conftest import LOCAL_URL, PASSWORD, MakeProvider, require_local_redis
from .server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
MEMORY = "tslock_django.providers.memory.MemoryLockProvider"


def config(name: str, at_most: str | float = "5m", at_least: str | float = 0) -> LockConfiguration:
    return LockConfiguration(name, at_most, at_least)


def commands_sent(provider: RedisLockProvider, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every command the provider's client sends from now on (``SCRIPT LOAD``
    as one)."""
    sent: list[str] = []
    client = provider.client()
    original = client.execute_command

    def counting(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return original(*args, **options)

    monkeypatch.setattr(client, "execute_command", counting)
    return sent


# -- options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "key", "fragment"),
    [
        ({}, "url", "exactly one of them"),
        ({"url": LOCAL_URL, "cache": "default"}, "url", "exactly one of them"),
        ({"url": f"http://:{PASSWORD}@host/"}, "url", "redis:// or rediss://"),
        ({"url": f"redis://:{PASSWORD}@host:99999/0"}, "url", "invalid port"),
        ({"url": f"redis://:{PASSWORD}@host/zero"}, "url", "database number"),
        ({"url": 6379}, "url", "must be a string"),
        ({"url": f"redis://:{PASSWORD}@host/0?socket_timeout=soon"}, "url", "could not be read"),
        ({"url": LOCAL_URL, "timeout": "soon"}, "timeout", "number of seconds"),
        ({"url": LOCAL_URL, "timeout": 0}, "timeout", "greater than 0"),
        ({"url": LOCAL_URL, "key_prefix": 5}, "key_prefix", "must be a string"),
        ({"cache": "nowhere"}, "cache", "must name a CACHES alias"),
        ({"cache": "default"}, "cache", "can share the connection of"),
    ],
)
def test_bad_options_are_refused_naming_the_option_never_the_password(
    options: dict[str, Any], key: str, fragment: str
) -> None:
    with pytest.raises(InvalidLockProvider) as caught:
        RedisLockProvider("jobs", **options)
    message = str(caught.value)
    assert f"TSLOCK_PROVIDERS['jobs'] OPTIONS[{key!r}]" in message
    assert fragment in message
    assert PASSWORD not in message


def test_timeout_belongs_to_the_url_form() -> None:
    shared = {"shared": {"BACKEND": DJANGO_REDIS_CACHE}}
    with (
        override_settings(CACHES=shared),
        pytest.raises(InvalidLockProvider, match="applies to OPTIONS\\['url'\\] only"),
    ):
        RedisLockProvider("jobs", cache="shared", timeout=2)


@pytest.mark.parametrize("backend", [DJANGO_REDIS_CACHE, "django_redis.cache.RedisCache"])
def test_a_shared_caches_retries_never_send_a_lock_write_twice(backend: str) -> None:
    # A cache may have redis-py retry a command after a lost connection; the provider
    # connects as the cache does, without that: the connection is cut after the acquire
    # was sent, and the acquire is not sent again.
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from .fake import FakeRedis
    from .test_hostile_server import handshake_or

    retries = {"retry": Retry(NoBackoff(), 3)}
    options = retries if backend == DJANGO_REDIS_CACHE else {"CONNECTION_POOL_KWARGS": retries}
    with FakeRedis(handshake_or(lambda command: b"")) as fake:
        caches = {"default": {"BACKEND": DJANGO_REDIS_CACHE, "LOCATION": fake.url()}}
        caches["shared"] = {"BACKEND": backend, "LOCATION": fake.url(), "OPTIONS": options}
        with override_settings(CACHES=caches):
            provider = RedisLockProvider("jobs", cache="shared")
            try:
                with pytest.raises(LockProviderError, match="could not talk to Redis"):
                    provider.lock(config("once"))
            finally:
                provider.close()
        with fake.mutex:
            sent = [command[0] for command in fake.commands if command[0].upper() == b"EVALSHA"]
    assert sent == [b"EVALSHA"], "the acquire went out more than once"


def test_repr_shows_where_but_not_the_password() -> None:
    provider = RedisLockProvider("jobs", url=f"redis://:{PASSWORD}@cache.internal:6380/2")
    shown = repr(provider)
    assert PASSWORD not in shown
    assert "cache.internal:6380/2" in shown and "***" in shown


def test_unknown_option_is_named() -> None:
    with pytest.raises(InvalidLockProvider, match="unknown OPTIONS key\\(s\\) 'password'"):
        RedisLockProvider("jobs", url=LOCAL_URL, password=PASSWORD)


def test_settings_url_builds_a_working_provider(key_prefix: str) -> None:
    require_local_redis()
    entry = parse_provider_url(f"{LOCAL_URL}?key_prefix={key_prefix}&timeout=2")
    assert entry["OPTIONS"] == {"url": LOCAL_URL, "key_prefix": key_prefix, "timeout": "2"}
    with override_settings(TSLOCK_PROVIDERS={"default": entry}):
        provider = providers["default"]
        assert isinstance(provider, RedisLockProvider) and provider.options["timeout"] == 2.0
        held = provider.lock(config("from-url"))
        assert held is not None and held.unlock()


def test_env_reads_a_redis_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from tslock_django.env import Env

    monkeypatch.setenv("TSLOCK_URL", f"rediss://:{PASSWORD}@cache.example:6380/1?timeout=2")
    entry = Env().lock_provider_url("TSLOCK_URL")
    assert entry["BACKEND"] == "tslock_django.providers.redis.RedisLockProvider"
    assert entry["OPTIONS"] == {"url": f"rediss://:{PASSWORD}@cache.example:6380/1", "timeout": "2"}
    monkeypatch.setenv("TSLOCK_URL", f"redis://:{PASSWORD}@/0")
    # A bad URL is left for the checks (tslock.E008) and the handler to report.
    bad = Env().lock_provider_url("TSLOCK_URL")
    needs_host = "TSLOCK_URL: redis:// needs a host"
    with (
        override_settings(TSLOCK_PROVIDERS={"default": bad}),
        pytest.raises(InvalidLockProvider, match=needs_host) as caught,
    ):
        providers["default"]
    assert PASSWORD not in str(caught.value) and PASSWORD not in repr(bad)


def test_redis_url_keeps_redis_py_options_in_the_url() -> None:
    entry = parse_provider_url(f"rediss://app:{PASSWORD}@h.example:6390/3?ssl_cert_reqs=none&key_prefix=a:")
    assert entry["OPTIONS"] == {
        "url": f"rediss://app:{PASSWORD}@h.example:6390/3?ssl_cert_reqs=none",
        "key_prefix": "a:",
    }


def test_system_check_reports_bad_options_without_the_password() -> None:
    bad = {
        "default": {"BACKEND": MEMORY},
        "cache": {
            "BACKEND": "tslock_django.providers.redis.RedisLockProvider",
            "OPTIONS": {"url": f"redis://:{PASSWORD}@host/db"},
        },
    }
    with override_settings(TSLOCK_PROVIDERS=bad):
        errors = check_providers()
    assert [e.id for e in errors] == ["tslock.E003"]
    assert isinstance(errors[0], Error) and "database number" in errors[0].msg
    assert PASSWORD not in errors[0].msg


def test_importing_tslock_django_does_not_import_redis_py() -> None:
    probe = (
        "import sys, django; django.setup()\n"
        "import tslock_django\n"
        "from tslock_django.providers.memory import MemoryLockProvider\n"
        "MemoryLockProvider('memory').lock(tslock_django.LockConfiguration('job', '1m'))\n"
        "from tslock_django.conf import parse_provider_url\n"
        "parse_provider_url('redis://127.0.0.1:6379/0')\n"
        "print('redis' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False"


# -- operations ------------------------------------------------------------------------


def test_every_operation_is_one_round_trip(
    make_provider: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = make_provider()
    warm = provider.lock(config("warm-up"))  # loads the scripts this test uses, if needed
    assert warm is not None
    warm.extend("1m").unlock()  # type: ignore[union-attr]
    provider.force_unlock("warm-up", expected=None)
    provider.query(LockQuery())
    sent = commands_sent(provider, monkeypatch)
    held = provider.lock(config("one-trip"))
    assert held is not None
    assert provider.lock(config("one-trip")) is None
    held = held.extend("2m")
    assert held is not None and held.unlock()
    provider.force_unlock("one-trip", expected=None)
    provider.query(LockQuery(states=ALL_STATES))
    assert sent == ["EVALSHA"] * 6


def client_id(provider: RedisLockProvider) -> int:
    """The Redis client id of the connection the provider's next command goes out on."""
    return int(provider.client().client_id())


def test_the_provider_keeps_its_connection_and_reconnects_when_redis_closed_it(
    make_provider: MakeProvider,
) -> None:
    provider = make_provider()
    assert provider.lock(config("kept")) is not None
    first = client_id(provider)
    assert provider.lock(config("kept-too")) is not None
    assert client_id(provider) == first, "one connection, kept between operations"
    admin = redis.Redis.from_url(LOCAL_URL)
    assert admin.client_kill_filter(_id=first) == 1
    admin.close()
    held = provider.lock(config("after-kill"))
    assert held is not None and held.unlock(), "connected again before sending, not a failure"
    assert client_id(provider) != first


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_does_not_use_its_parents_connection(make_provider: MakeProvider) -> None:
    provider = make_provider()
    assert provider.lock(config("parent")) is not None
    parent_id = client_id(provider)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the id its operations use, then leave at once
        status = 1
        try:
            held = provider.lock(config("child"))
            if held is not None and held.unlock():
                os.write(write_end, str(client_id(provider)).encode())
                status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read_end) as pipe:
        child_id = pipe.read()
    assert os.waitstatus_to_exitcode(status) == 0 and child_id
    assert int(child_id) != parent_id, "the child opened its own connection"
    held = provider.lock(config("parent-again"))
    assert held is not None and held.unlock()
    assert client_id(provider) == parent_id, "the parent's connection was left alone"


def test_a_skip_names_the_holder_from_the_same_answer(make_provider: MakeProvider) -> None:
    provider = make_provider()
    held = provider.lock(config("report"))
    assert held is not None
    attempt = provider.attempt(config("report"))
    assert attempt.held is None and attempt.holder is not None
    assert attempt.holder.locked_by == provider.locked_by
    assert attempt.holder.fencing_token == held.fencing_token
    assert attempt.holder.token == "", "the holder's token is the holder's secret"
    assert attempt.holder.token_fingerprint == held.record.token_fingerprint


def test_odd_names_and_holders_round_trip_through_every_answer(make_provider: MakeProvider) -> None:
    provider = make_provider()
    provider.locked_by = 'worker "7" | C:\\jobs \u00e9\U0001f512\n'
    name = 'quote" back\\slash |pipe| \u00e9\U0001f512'
    held = provider.lock(config(name, "5m", "1m"))
    assert held is not None and held.record.locked_by == provider.locked_by and held.name == name
    holder = provider.attempt(config(name)).holder
    assert holder is not None and (holder.name, holder.locked_by) == (name, provider.locked_by)
    extended = held.extend("6m", "1m")
    assert extended is not None and extended.record.locked_by == provider.locked_by
    assert extended.unlock() is True
    (listed,) = provider.list_locks()
    assert (listed.name, listed.locked_by, listed.released) == (name, provider.locked_by, True)
    assert provider.force_unlock(name, expected=None) is True
    assert provider.lock(config(name)) is not None


def test_unlock_keeps_the_record_released_until_the_at_least_deadline(make_provider: MakeProvider) -> None:
    provider = make_provider()
    held = provider.lock(config("nightly", "5m", "2m"))
    assert held is not None and held.unlock()
    (record,) = provider.query(LockQuery(states=frozenset({"at_least"}))).records
    assert record.released and record.name == "nightly"
    assert record.lock_until == held.lock_at_least_until
    assert provider.lock(config("nightly")) is None, "held for lock_at_least_for"
    assert provider.query(LockQuery(states=frozenset({"held"}))).records == []


def test_a_released_lock_without_at_least_is_free_at_once(make_provider: MakeProvider) -> None:
    provider = make_provider()
    held = provider.lock(config("quick"))
    assert held is not None and held.unlock()
    (record,) = provider.query(LockQuery(states=frozenset({"expired"}))).records
    assert record.released and record.fencing_token == held.fencing_token
    assert provider.lock(config("quick")) is not None


def test_script_flush_is_recovered_transparently(
    make_provider: MakeProvider, server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Redis of this test's own: SCRIPT FLUSH empties the whole server's script cache, so on
    # the shared local Redis another test process (pytest -n 2, a benchmark) could load the
    # script again between the flush and the unlock, or send one EVALSHA too many itself.
    provider = make_provider(url=server.url)
    first = provider.lock(config("flushed"))
    assert first is not None
    provider.client().script_flush()
    sent = commands_sent(provider, monkeypatch)
    assert first.unlock() is True
    assert sent == ["EVALSHA", "SCRIPT LOAD", "EVALSHA"], "NOSCRIPT: loaded again and run once more"
    again = provider.lock(config("flushed"))
    assert again is not None and again.fencing_token > first.fencing_token  # type: ignore[operator]


def test_a_record_written_by_something_else_is_a_store_failure(make_provider: MakeProvider) -> None:
    provider = make_provider()
    provider.client().hset(provider.options["key_prefix"] + "records", "foreign", "not json")
    with pytest.raises(LockProviderError, match="written by something else") as caught:
        provider.lock(config("foreign"))
    assert caught.value.alias == "redis"


def test_fencing_tokens_keep_growing_when_redis_restarts_and_forgets_everything(
    server: RedisServer,
) -> None:
    provider = RedisLockProvider("restarting", url=server.url)
    tokens = []
    for _ in range(3):
        held = provider.lock(config("invoices"))
        assert held is not None and held.fencing_token is not None
        tokens.append(held.fencing_token)
        held.unlock()
    server.restart()
    assert server.admin().dbsize() == 0, "the restart lost every key, counters included"
    held = provider.lock(config("invoices"))
    assert held is not None and held.fencing_token is not None
    tokens.append(held.fencing_token)
    assert tokens == sorted(set(tokens)), f"fencing tokens went back after the restart: {tokens}"
    provider.close()


def test_fencing_tokens_survive_purge(make_provider: MakeProvider) -> None:
    provider = make_provider()
    held = provider.lock(config("purged", 0.05))
    assert held is not None and held.fencing_token is not None
    time.sleep(0.1)
    assert provider.purge(timedelta(0)) == 1
    assert provider.list_locks() == []
    again = provider.lock(config("purged"))
    assert again is not None and again.fencing_token is not None
    assert again.fencing_token > held.fencing_token


def test_a_purged_name_continues_above_its_last_token_even_one_ahead_of_the_clock(
    make_provider: MakeProvider,
) -> None:
    # Tokens follow Redis's clock, so only a token ahead of it (a clock set back) shows
    # that the purge kept the name's last token rather than the clock covering for it.
    provider = make_provider()
    held = provider.lock(config("ahead", 0.05))
    assert held is not None and held.fencing_token is not None
    records = provider.options["key_prefix"] + "records"
    ahead = held.fencing_token + 10**12  # about 11 days past Redis's clock
    raw = provider.client().hget(records, "ahead").decode()
    provider.client().hset(records, "ahead", raw.replace(f'"f":"{held.fencing_token}"', f'"f":"{ahead}"'))
    time.sleep(0.1)
    assert provider.purge(timedelta(0)) == 1 and provider.list_locks() == []
    again = provider.lock(config("ahead"))
    assert again is not None and again.fencing_token == ahead + 1


# -- the index --------------------------------------------------------------------------


def index_snapshot(provider: RedisLockProvider) -> dict[str, Any]:
    client, prefix = provider.client(), provider.options["key_prefix"]
    records = {k.decode(): json.loads(v) for k, v in client.hgetall(prefix + "records").items()}
    return {
        "records": records,
        "by-name": {m.decode() for m in client.zrange(prefix + "by-name", 0, -1)},
        "by-lock-until": {
            m.decode(): int(s) for m, s in client.zrange(prefix + "by-lock-until", 0, -1, withscores=True)
        },
        "by-locked-at": {
            m.decode(): int(s) for m, s in client.zrange(prefix + "by-locked-at", 0, -1, withscores=True)
        },
    }


def test_the_scripts_keep_the_index_in_step_with_the_records(make_provider: MakeProvider) -> None:
    provider = make_provider()
    a = provider.lock(config("a", "5m", "1m"))
    b = provider.lock(config("b"))
    c = provider.lock(config("c", 0.05))
    assert a and b and c
    a.unlock()
    b = b.extend("9m")
    assert b is not None
    provider.force_unlock("b", expected=b.fencing_token)
    time.sleep(0.1)
    provider.purge(timedelta(0))
    snapshot = index_snapshot(provider)
    names = set(snapshot["records"])
    assert names == snapshot["by-name"] == set(snapshot["by-lock-until"]) == set(snapshot["by-locked-at"])
    for name, record in snapshot["records"].items():
        assert snapshot["by-lock-until"][name] == int(record["u"])
        assert snapshot["by-locked-at"][name] == int(record["a"])


def write_record(provider: RedisLockProvider, name: str, lock_until_us: int, locked_at_us: int) -> None:
    """A record written directly, to give several records the same score."""
    client, prefix = provider.client(), provider.options["key_prefix"]
    record = {"n": name, "u": str(lock_until_us), "a": str(locked_at_us), "l": str(locked_at_us), "b": "x",
              "t": "t" * 32, "f": "1", "r": 0}  # fmt: skip
    client.hset(prefix + "records", name, json.dumps(record))
    client.zadd(prefix + "by-name", {name: 0})
    client.zadd(prefix + "by-lock-until", {name: lock_until_us})
    client.zadd(prefix + "by-locked-at", {name: locked_at_us})


@pytest.mark.parametrize("descending", [False, True])
def test_time_order_breaks_ties_by_name_in_code_point_order(
    make_provider: MakeProvider, descending: bool
) -> None:
    provider = make_provider()
    now_us = int(provider.client().time()[0]) * 1_000_000
    names = ["b", "a", "Z", "é", "z", "ab", "\U0001f512"]
    for name in names:
        write_record(provider, name, now_us + 3_600_000_000, now_us)
    write_record(provider, "early", now_us + 60_000_000, now_us)
    query = LockQuery(order="lock_until", descending=descending, limit=2)
    walked = [r.name for page in provider.pages(query) for r in page.records]
    expected = ["early", *sorted(names)]
    assert walked == (expected[::-1] if descending else expected)


def test_search_folds_ascii_letters_only(make_provider: MakeProvider) -> None:
    provider = make_provider()
    for name in ("Report-É", "report-é", "REPORT-e"):
        assert provider.lock(config(name))
    found = {r.name for r in provider.query(LockQuery(search="report-")).records}
    assert found == {"Report-É", "report-é", "REPORT-e"}
    assert {r.name for r in provider.query(LockQuery(search="-é")).records} == {"report-é"}


def test_a_sparse_listing_stops_at_its_budget_and_goes_on_from_there(
    make_provider: MakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = make_provider()
    monkeypatch.setattr(redis_provider, "QUERY_BUDGET", 10)
    for i in range(25):
        assert provider.lock(config(f"old-{i:02}", 0.02))
    time.sleep(0.05)
    for name in ("new-a", "zz-new"):
        assert provider.lock(config(name))
    query = LockQuery(limit=2)
    pages = list(provider.pages(query))
    assert [r.name for p in pages for r in p.records] == ["new-a", "zz-new"]
    assert len(pages) > 1 and any(p.notes for p in pages), "the budget stopped a page and said so"
    everything = [r.name for p in provider.pages(LockQuery(states=ALL_STATES, limit=2)) for r in p.records]
    assert len(everything) == 27 and everything == sorted(everything)


def test_purge_deletes_only_records_expired_longer_than_asked(make_provider: MakeProvider) -> None:
    provider = make_provider()
    for i in range(7):
        assert provider.lock(config(f"gone-{i}", 0.02))
    held = provider.lock(config("held"))
    at_least = provider.lock(config("at-least", "5m", "5m"))
    assert held and at_least and at_least.unlock()
    time.sleep(0.05)
    assert provider.purge(timedelta(hours=1)) == 0
    assert provider.purge(timedelta(0), dry_run=True) == 7
    assert len(provider.list_locks()) == 9, "a dry run deletes nothing"
    assert provider.purge(timedelta(0), batch_size=3) == 7
    assert [r.name for r in provider.list_locks()] == ["at-least", "held"]
    with pytest.raises(ValueError, match="batch_size"):
        provider.purge(timedelta(0), batch_size=0)
    with pytest.raises(ValueError, match="negative"):
        provider.purge(timedelta(seconds=-1))


def test_tslock_list_shows_redis_locks(key_prefix: str) -> None:
    require_local_redis()
    entry = parse_provider_url(f"{LOCAL_URL}?key_prefix={key_prefix}")
    with override_settings(TSLOCK_PROVIDERS={"default": {"BACKEND": MEMORY}, "cache": entry}):
        held = providers["cache"].lock(config("nightly-report"))
        assert held is not None
        out = io.StringIO()
        call_command("tslock", "list", "--provider", "cache", "--json", stdout=out)
    (row,) = json.loads(out.getvalue())
    assert (row["provider"], row["name"], row["fencing_token"]) == (
        "cache",
        "nightly-report",
        held.fencing_token,
    )
    assert row["token_fingerprint"] == held.record.token_fingerprint and held.token not in out.getvalue()
