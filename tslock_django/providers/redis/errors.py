"""What a Redis failure means, in words an operator can act on, and keeping the
password and lock tokens out of the errors that carry it."""

from __future__ import annotations

from collections.abc import Callable

import redis


def scrub_chain(err: BaseException, scrub: Callable[[str], str]) -> None:
    """``scrub`` the texts of ``err`` and of the errors it was raised from (their
    ``args``, from which their messages are made), in place: a cause's text is shown
    too (by Django's error page, by ``logging`` with the traceback)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.args = tuple(scrub(arg) if isinstance(arg, str) else arg for arg in current.args)
        current = current.__cause__ or current.__context__


def explain(
    err: redis.RedisError, detail: str, *, password_missing: bool, records: str, key_prefix: str
) -> str:
    """What ``err`` (its scrubbed text ``detail``) means and what to check."""
    refused = ("WRONGPASS", "NOAUTH", "invalid password", "invalid username-password")
    if isinstance(err, redis.AuthenticationError) or any(code in detail for code in refused):
        if password_missing:
            return f"Redis refused the credentials ({detail}); it needs a password and the URL has none"
        return f"Redis refused the credentials ({detail}); check the user and password in the URL"
    if isinstance(err, redis.TimeoutError):
        return f"Redis did not answer in time ({detail}); is the server up and not overloaded?"
    if isinstance(err, redis.ReadOnlyError) or "READONLY" in detail:
        return (
            f"the server is a read-only replica ({detail}); point the provider at the primary "
            "(locks are written there)"
        )
    if isinstance(err, redis.ConnectionError):
        return f"could not talk to Redis ({detail}); is the server up and the URL right?"
    if "not one tslock wrote" in str(err):  # the full text: detail may be cut short
        # A script met a value under this lock's name that is not a record (see
        # readable() in scripts): nobody can be said to hold it or not.
        return (
            f"Redis holds a value for this lock in {records!r} that was written by something "
            "else (not a tslock record), so whether it is held cannot be told and nothing was "
            "changed; delete that field of the hash (HDEL) or use another key_prefix"
        )
    if "Error compiling script" in detail:
        # Redis before 7 cannot read the scripts' "#!lua" first line.
        return f"Redis refused the lock script ({detail}); the Redis provider needs Redis 7 or later"
    if "user_script" in detail:
        return (
            f"a tslock script failed in Redis ({detail}); were keys under key_prefix "
            f"{key_prefix!r} written by something else? Use another key_prefix"
        )
    return f"Redis answered an error ({detail})"
