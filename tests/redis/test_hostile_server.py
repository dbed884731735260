"""A server at the configured URL that is not a well-behaved Redis (issue 19): one that
echoes what it was sent in its errors (a hostile server, or a proxy in front of Redis),
and one whose answers redis-py or the provider cannot read. Every operation is then a
``LockProviderError`` that names the alias, keeps the cause, and holds neither the
password (as written in the URL or decoded) nor a lock token the provider sent."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis

from tslock_django import LockConfiguration
from tslock_django.core.provider import SimpleLock
from tslock_django.core.query import LockQuery
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.redis import RedisLockProvider

from .fake import Command, FakeRedis, bulk, echo, ok

#: The password as written in the URL (percent-encoded, one letter needlessly so) and
#: as redis-py sends it.
WRITTEN = "p%40ss%2Fw0rd%3A%53ecret7"
DECODED = "p@ss/w0rd:Secret7"
CONFIG = LockConfiguration("nightly-report", "5m")
#: A valid answer of the acquire script: "locked_at|fencing".
ACQUIRED = bulk(b"1700000000000000|5")


def handshake_or(answer: Callable[[Command], bytes]) -> Callable[[Command], bytes]:
    """``answer`` for the lock scripts; ``+OK`` for what redis-py sends on connecting."""

    def reply(command: Command) -> bytes:
        if command[0].upper() == b"HELLO":
            return b"%1\r\n$5\r\nproto\r\n:3\r\n"  # RESP3's map, asked for with ?protocol=3
        if command[0].upper() in (b"AUTH", b"CLIENT", b"SELECT", b"PING"):
            return b"+OK\r\n"
        return answer(command)

    return reply


@pytest.fixture
def fake() -> Iterator[FakeRedis]:
    with FakeRedis() as running:
        yield running


@pytest.fixture
def make() -> Iterator[Callable[..., RedisLockProvider]]:
    made: list[RedisLockProvider] = []

    def build(url: str) -> RedisLockProvider:
        provider = RedisLockProvider("jobs", url=url, timeout=5)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        provider.close()


def hold(fake: FakeRedis, provider: RedisLockProvider) -> SimpleLock:
    """A handle of ``provider`` on the fake (which answers this one acquire as Redis would)."""
    previous = fake.answer
    fake.answer = handshake_or(lambda command: ACQUIRED)
    try:
        held = provider.lock(CONFIG)
    finally:
        fake.answer = previous
    assert held is not None
    return held


def every_operation(
    provider: RedisLockProvider, held: SimpleLock | None = None
) -> dict[str, Callable[[], object]]:
    operations: dict[str, Callable[[], object]] = {
        "acquire": lambda: provider.lock(CONFIG),
        "force release": lambda: provider.force_unlock(CONFIG.name, expected=None),
        "list": lambda: provider.query(LockQuery()),
        "purge": lambda: provider.purge(timedelta(days=1)),
    }
    if held is not None:
        operations["unlock"] = held.unlock
        operations["extend"] = lambda: held.extend("5m")
    return operations


def store_failure(operation: Callable[[], object]) -> LockProviderError:
    with pytest.raises(LockProviderError) as caught:
        outcome = operation()
        pytest.fail(f"answered {outcome!r} where the server's answer makes no sense")  # pragma: no cover
    error = caught.value
    assert error.alias == "jobs" and str(error).startswith("lock provider 'jobs': ")
    return error


def shown(error: BaseException) -> str:
    """Every text an error page or a log line shows for ``error``: its message and those
    of its causes."""
    texts: list[str] = []
    current: BaseException | None = error
    while current is not None:
        texts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "\n".join(texts)


def test_an_echoed_password_is_in_no_error_in_either_form(
    fake: FakeRedis, make: Callable[..., RedisLockProvider]
) -> None:
    provider = make(fake.url(f":{WRITTEN}"))
    for operation, call in every_operation(provider).items():
        error = store_failure(call)
        assert "Redis answered an error" in str(error) and "AUTH" in str(error), (operation, str(error))
        assert isinstance(error.__cause__, redis.ResponseError), operation  # the cause is kept
        text = shown(error)
        assert WRITTEN not in text and DECODED not in text, (operation, text)
    assert fake.received(DECODED.encode()), "the server did get the password (and echoed it)"


def test_a_password_given_in_the_query_string_is_scrubbed_too(
    fake: FakeRedis, make: Callable[..., RedisLockProvider]
) -> None:
    # redis-py also reads ?password=; the provider must know it is the password.
    provider = make(fake.url(query=f"password={WRITTEN}"))
    error = store_failure(lambda: provider.lock(CONFIG))
    assert fake.received(DECODED.encode())
    assert WRITTEN not in shown(error) and DECODED not in shown(error)


def test_an_echoed_lock_token_is_in_no_error(fake: FakeRedis, make: Callable[..., RedisLockProvider]) -> None:
    provider = make(fake.url(f":{WRITTEN}"))
    fake.answer = handshake_or(echo)
    first, second = hold(fake, provider), hold(fake, provider)
    tokens = {first.token, second.token}
    calls: dict[str, Callable[[], Any]] = {
        "acquire": lambda: provider.lock(CONFIG),
        "unlock": first.unlock,
        "extend": lambda: second.extend("5m"),
        "force release by token": lambda: provider.force_unlock(CONFIG.name, expected=first.token),
    }
    for operation, call in calls.items():
        before = len(fake.commands)
        error = store_failure(call)
        assert "Redis answered an error" in str(error) and "EVALSHA" in str(error), (operation, str(error))
        with fake.mutex:
            sent = {word.decode() for command in fake.commands[before:] for word in command}
        echoed = {word for word in sent if re.fullmatch("[0-9a-f]{32}", word)}
        assert echoed, f"{operation}: no token was sent"  # the acquire's is a new one
        text = shown(error)
        for token in tokens | echoed:
            assert token not in text, (operation, token, text)
    assert fake.received(first.token.encode()) and fake.received(second.token.encode())


@pytest.mark.parametrize(
    ("answer", "query"),
    [
        (ok, "protocol=3"),  # HELLO answered +OK: redis-py raises AttributeError
        (handshake_or(ok), ""),  # every script answered +OK
        (handshake_or(lambda command: b"*3\r\n:1\r\n:2\r\n:3\r\n"), ""),  # an array of the wrong shape
        (handshake_or(lambda command: b":-7\r\n"), ""),  # a number where none belongs
    ],
    ids=["hello-ok", "ok", "short-array", "number"],
)
def test_an_answer_nobody_can_read_is_a_store_error_naming_the_alias(
    fake: FakeRedis, make: Callable[..., RedisLockProvider], answer: Callable[[Command], bytes], query: str
) -> None:
    provider = make(fake.url(query=query))
    held = hold(fake, provider)
    provider.close()  # the next operation connects again, and meets the answers below
    fake.answer = answer
    for operation, call in every_operation(provider, held).items():
        error = store_failure(call)
        assert "Redis" in str(error), (operation, str(error))
    if query:
        # redis-py itself failed on HELLO: the first operation's cause says so (the next
        # ones meet the +OK answers to the scripts).
        error = store_failure(lambda: RedisLockProvider("jobs", url=fake.url(query=query)).lock(CONFIG))
        assert "(AttributeError: " in str(error) and isinstance(error.__cause__, AttributeError)
