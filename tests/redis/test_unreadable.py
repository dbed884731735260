"""Values in the Redis provider's keys that tslock did not write (issue 11, part 4).

Garbage is written straight into the real Redis under this test's key_prefix: into the
``records`` hash field of a name the indexes list, as a broken writer or an attacker
with access to the database would. A listing shows each such value as one unreadable
row and the rest of the page as usual, and pages on past it; locking, unlocking,
extending and releasing the name are a ``LockProviderError`` that says what is wrong,
never "held by someone else" nor a raw Python exception.
"""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from tslock_django import LockConfiguration
from tslock_django.admin.rows import UNREADABLE_RELEASE_REFUSED, make_row
from tslock_django.core.query import ALL_STATES, LockQuery
from tslock_django.core.records import LockRecord, UnreadableRecord
from tslock_django.exceptions import LockHeld, LockProviderError
from tslock_django.providers.redis import RedisLockProvider

from .conftest import LOCAL_URL, MakeProvider, require_local_redis

NOW_US = int(datetime.now(tz=timezone.utc).timestamp() * 1_000_000)


def record_json(name: str, **changes: Any) -> str:
    """A record in the layout the scripts write, with ``changes`` (None removes a field)."""
    record: dict[str, Any] = {
        "u": str(NOW_US + 3_600_000_000),
        "r": 0,
        "l": str(NOW_US),
        "a": str(NOW_US),
        "f": "7",
        "t": "t" * 32,
        "n": name,
        "b": "host:1",
    }
    record.update(changes)
    return json.dumps({k: v for k, v in record.items() if v is not None}, separators=(",", ":"))


#: name -> (the stored value, words the unreadable row's reason must hold).
GARBAGE: dict[str, tuple[str, str]] = {
    "not-json": ("\x00\x01 not json", "not JSON"),
    "deep": ("[" * 30_000 + "]" * 30_000, "nests 30000 levels deep"),
    "huge": (record_json("huge", b="h" * 200_000), "more than the 65,536 a lock record can be"),
    "digits": (record_json("digits", u="9" * 5000), "more than 40 digits"),
    "number-time": (record_json("number-time", u=NOW_US + 1), "not a string of digits"),
    "text-state": (record_json("text-state", r="0"), "wrong type"),
    "no-holder": (record_json("no-holder", b=None), "'b' is missing"),
    "other-name": (record_json("someone-else"), "names another lock"),
    "array": ("[1, 2, 3]", "not a JSON object"),
}


def write_garbage(provider: RedisLockProvider, name: str, value: str) -> None:
    """Overwrite the record of ``name`` (taken first, so every index lists it)."""
    assert provider.lock(LockConfiguration(name, "1h")) is not None
    provider.client().hset(provider.options["key_prefix"] + "records", name, value)


def settings_entry(provider: RedisLockProvider) -> dict[str, Any]:
    return {
        "BACKEND": "tslock_django.providers.redis.RedisLockProvider",
        "OPTIONS": {"url": LOCAL_URL, "key_prefix": provider.options["key_prefix"]},
    }


@pytest.mark.parametrize("order", ["name", "lock_until", "locked_at"])
@pytest.mark.parametrize("descending", [False, True])
def test_each_bad_record_is_one_unreadable_row_and_the_walk_goes_past_it(
    make_provider: MakeProvider, order: str, descending: bool
) -> None:
    provider = make_provider()
    good = ["a-good", "m-good", "z-good"]
    for name in good:
        assert provider.lock(LockConfiguration(name, "2h")) is not None
    for name, (value, _) in GARBAGE.items():
        write_garbage(provider, name, value)
    # Two rows a page: every page boundary falls next to a bad record somewhere.
    query = LockQuery(order=order, descending=descending, limit=2)
    rows = [record for page in provider.pages(query) for record in page.records]
    names = [row.name for row in rows]
    assert sorted(names) == sorted([*good, *GARBAGE]), "each listed once, none lost"
    by_name = {row.name: row for row in rows}
    for name, (_, reason) in GARBAGE.items():
        row = by_name[name]
        assert isinstance(row, UnreadableRecord) and reason in row.reason, (name, row.reason)
        assert "records" in row.reason and "HDEL" in row.reason  # where it is and what to do
        assert len(row.reason) <= UnreadableRecord.max_reason_chars + 40
        assert row.state(datetime.now(tz=timezone.utc)) == "unknown"
    for name in good:
        assert isinstance(by_name[name], LockRecord) and by_name[name].locked_by  # untouched
    if order == "name":
        assert names == sorted(names, reverse=descending)


def test_unreadable_rows_show_whatever_states_are_asked_for(make_provider: MakeProvider) -> None:
    provider = make_provider()
    write_garbage(provider, "bad", "not json")
    for states in ({"held"}, {"at_least"}, {"expired"}, ALL_STATES):
        (row,) = provider.query(LockQuery(states=frozenset(states))).records
        assert isinstance(row, UnreadableRecord) and row.name == "bad"


@pytest.mark.parametrize("name", list(GARBAGE))
def test_locking_a_name_whose_record_is_garbage_is_a_store_error_never_held(
    make_provider: MakeProvider, name: str
) -> None:
    provider = make_provider()
    handle = provider.lock(LockConfiguration(name, "1h"))
    assert handle is not None
    provider.client().hset(provider.options["key_prefix"] + "records", name, GARBAGE[name][0])
    # operation -> (the call, the words its error starts with)
    operations = {
        "lock": (lambda: provider.lock(LockConfiguration(name, "1h")), "acquire"),
        "attempt": (lambda: provider.attempt(LockConfiguration(name, "1h")), "acquire"),
        "unlock": (handle.unlock, "unlock"),
        "extend": (lambda: handle.extend("2h"), "extend"),
        "force_unlock": (lambda: provider.force_unlock(name, expected=None), "force-release"),
        "force_unlock by fencing": (lambda: provider.force_unlock(name, expected=7), "force-release"),
    }
    stored = provider.client().hget(provider.options["key_prefix"] + "records", name)
    for operation, (call, verb) in operations.items():
        try:
            outcome = call()
        except LockProviderError as err:
            message = str(err)
            assert message.startswith(f"lock provider 'redis': {verb} '{name}': "), (operation, message)
            assert "written by something else" in message and "HDEL" in message, (operation, message)
            assert f"'{name}'" in message and "key_prefix" in message and len(message) < 1000
            assert err.alias == "redis"
        except LockHeld:
            pytest.fail(f"{operation}: a value that is not a record was reported as held")
        else:
            pytest.fail(f"{operation}: answered {outcome!r} for a value that is not a record")
    assert provider.client().hget(provider.options["key_prefix"] + "records", name) == stored, "untouched"


@pytest.mark.django_db
def test_the_admin_and_tslock_list_show_the_unreadable_row_and_the_good_ones(
    make_provider: MakeProvider, admin_client: Client
) -> None:
    provider = make_provider()
    assert provider.lock(LockConfiguration("good-job", "1h")) is not None
    write_garbage(provider, "bad-job", "\x1b[2J<script>alert(1)</script>")
    with override_settings(TSLOCK_PROVIDERS={"redis": settings_entry(provider)}):
        page = admin_client.get(reverse("admin:tslock_django_lock_changelist"))
        out, err = io.StringIO(), io.StringIO()
        call_command("tslock", "list", stdout=out, stderr=err)
        as_json = io.StringIO()
        call_command("tslock", "list", "--json", stdout=as_json)
    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-name="good-job"' in html and 'data-name="bad-job"' in html
    assert ">unknown<" in html and "unreadable: a field of" in html
    assert "<script>alert(1)" not in html  # nothing of the value, escaped or not
    # The unreadable row has no checkbox: it cannot be released from the admin.
    assert html.count('name="lock"') == 1 and "cannot be released here" in html
    lines = {line.split()[1]: line for line in out.getvalue().splitlines()[1:]}
    assert set(lines) == {"bad-job", "good-job"}
    assert " unknown " in lines["bad-job"] and "unreadable: a field of" in lines["bad-job"]
    assert " held " in lines["good-job"] and "\x1b" not in out.getvalue() and err.getvalue() == ""
    rows = {row["name"]: row for row in json.loads(as_json.getvalue())}
    bad = rows["bad-job"]
    assert bad["state"] == "unknown" and bad["locked_by"] is None and "not JSON" in bad["unreadable"]
    assert bad["locked_at"] is None and bad["lock_until"] is None and bad["remaining_seconds"] is None
    assert rows["good-job"]["unreadable"] is None and rows["good-job"]["state"] == "held"


def test_the_admin_row_of_an_unreadable_record_is_not_releasable(make_provider: MakeProvider) -> None:
    provider = make_provider()
    write_garbage(provider, "bad", "not json")
    (record,) = provider.query(LockQuery()).records
    row = make_row("redis", "strong", record, datetime.now(tz=timezone.utc))
    assert row.state == "unknown" and row.state_label == "unknown"
    assert row.selection is None and row.selection_value == ""
    assert row.release_refused == UNREADABLE_RELEASE_REFUSED
    assert (row.locked_at, row.lock_until, row.remaining, row.progress) == (None, None, None, None)


@pytest.mark.django_db
def test_a_release_posted_for_an_unreadable_name_is_refused_by_the_store(
    make_provider: MakeProvider, admin_client: Client
) -> None:
    provider = make_provider()
    write_garbage(provider, "bad", "not json")
    raw = provider.client().hget(provider.options["key_prefix"] + "records", "bad")
    # An edited form: the page never offers this selection.
    selection = json.dumps(["redis", "bad", "fencing", 1])
    with override_settings(TSLOCK_PROVIDERS={"redis": settings_entry(provider)}):
        answer = admin_client.post(
            reverse("admin:tslock_django_lock_release"), {"lock": selection, "confirm": "yes"}, follow=True
        )
    shown = [str(m) for m in answer.context["messages"]]
    assert any("was not released" in m and "written by something else" in m for m in shown), shown
    assert provider.client().hget(provider.options["key_prefix"] + "records", "bad") == raw, "untouched"


def test_tslock_check_passes_and_names_an_unreadable_value_under_its_prefix(
    make_provider: MakeProvider,
) -> None:
    require_local_redis()
    provider = make_provider()
    write_garbage(provider, "__tslock_check__/x", "not json")
    with override_settings(TSLOCK_PROVIDERS={"redis": settings_entry(provider)}):
        out = io.StringIO()
        call_command("tslock", "check", stdout=out)  # no CommandError: the store answered
    text = out.getvalue()
    assert "redis: ok" in text and "warning: __tslock_check__/x: unreadable: a field of" in text


def test_a_name_and_holder_written_with_escapes_take_the_full_check_and_still_work(
    make_provider: MakeProvider,
) -> None:
    # The scripts compare the name's JSON and scan locked_by for escapes at fixed
    # places; JSON with escapes goes to a full decode, which must accept tslock's own.
    provider = make_provider()
    provider.locked_by = 'host "a"\\b\n'
    name = 'quote"back\\slash/é'
    held = provider.lock(LockConfiguration(name, "1h"))
    assert held is not None
    attempt = provider.attempt(LockConfiguration(name, "1h"))  # held, not an error
    assert attempt.held is None and attempt.holder is not None
    assert attempt.holder.locked_by == 'host "a"\\b\n'
    extended = held.extend("2h")
    assert extended is not None and extended.unlock()
    again = provider.lock(LockConfiguration(name, "1h"))
    assert again is not None and provider.force_unlock(name, expected=again.fencing_token)
    (row,) = provider.query(LockQuery(states=ALL_STATES)).records
    assert isinstance(row, LockRecord) and row.name == name


#: Index entries whose name is not UTF-8 (issue 19), one sorting among the good names
#: and one after every name (0xFF), each with a record that would otherwise be readable.
NOT_UTF8 = (b"m-bad-\xc3(", b"\xff\xfe-bad")


def write_index_entry(provider: RedisLockProvider, raw_name: bytes) -> None:
    """A record and index entries under a name that is not UTF-8, as another writer of
    the same keys could leave them."""
    prefix = str(provider.options["key_prefix"])
    client = provider.client()
    client.hset(prefix + "records", raw_name, record_json("x").encode())
    client.zadd(prefix + "by-name", {raw_name: 0})
    client.zadd(prefix + "by-lock-until", {raw_name: NOW_US + 3_600_000_000})
    client.zadd(prefix + "by-locked-at", {raw_name: NOW_US})


@pytest.mark.parametrize("order", ["name", "lock_until", "locked_at"])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("limit", [1, 2])
def test_an_index_name_that_is_not_utf8_is_one_unreadable_row_and_hides_nothing(
    make_provider: MakeProvider, order: str, descending: bool, limit: int
) -> None:
    provider = make_provider()
    good = ["a-good", "m-good", "z-good"]
    for name in good:
        assert provider.lock(LockConfiguration(name, "2h")) is not None
    for raw_name in NOT_UTF8:
        write_index_entry(provider, raw_name)
    query = LockQuery(order=order, descending=descending, limit=limit)
    pages = list(provider.pages(query))
    rows = [record for page in pages for record in page.records]
    readable = [row.name for row in rows if isinstance(row, LockRecord)]
    unreadable = [row for row in rows if isinstance(row, UnreadableRecord)]
    assert sorted(readable) == good, "every readable lock is listed, once"
    assert len(unreadable) == len(NOT_UTF8), "one row per bad index entry"
    for row in unreadable:
        assert row.name == "" and "not UTF-8" in row.reason and "HDEL" in row.reason, row
    # The cursors past a bad entry lead back too: the previous pages, from the last one,
    # are the same pages in reverse.
    back: list[list[str]] = []
    cursor = pages[-1].previous_cursor
    while cursor is not None:
        page = provider.query(LockQuery(order=order, descending=descending, limit=limit, cursor=cursor))
        back.append([row.name for row in page.records])
        cursor = page.previous_cursor
    assert back[::-1] == [[row.name for row in page.records] for page in pages[:-1]]


def test_list_locks_shows_the_locks_beside_an_index_name_that_is_not_utf8(
    make_provider: MakeProvider,
) -> None:
    provider = make_provider()
    assert provider.lock(LockConfiguration("nightly", "1h")) is not None
    write_index_entry(provider, NOT_UTF8[1])
    listed = provider.list_locks()
    assert [row.name for row in listed if isinstance(row, LockRecord)] == ["nightly"]
    assert [type(row) for row in listed].count(UnreadableRecord) == 1
