"""The asyncio counterparts of ``take`` and ``give_back`` (see ``executor``).

Only the waiting differs: the store is asked through the provider's async methods and
polls sleep with ``asyncio.sleep``. Re-entrancy, the keep-alive check, the poll rhythm,
the bookkeeping of what this task holds and the release rules are ``executor``'s own
functions, so ``alock`` and ``lock`` behave alike.
"""

from __future__ import annotations

import asyncio
import time

from .configuration import LockConfiguration
from .durations import DurationLike
from .executor import HeldLock, Polls, already_held, forget, hold
from .provider import Attempt, LockProvider


async def aacquire(
    provider: LockProvider, config: LockConfiguration, *, wait: DurationLike | None = None
) -> tuple[Attempt, float]:
    """:func:`~tslock_django.core.executor.acquire` for asyncio code: the same polls,
    with ``asyncio.sleep`` between them. Cancelled, it leaves no lock behind (see
    :meth:`LockProvider.aattempt`)."""
    polls = Polls(wait)
    while True:
        sent = time.monotonic()
        attempt = await provider.aattempt(config)
        pause = polls.pause_after(attempt)
        if pause is None:
            return attempt, sent
        await asyncio.sleep(pause)


async def atake(
    provider: LockProvider,
    config: LockConfiguration,
    *,
    keep_alive: bool = False,
    wait: DurationLike | None = None,
) -> tuple[HeldLock, bool]:
    """:func:`~tslock_django.core.executor.take` for asyncio code; keep-alive runs as a
    task of the running loop.

    Raises:
        LockHeld: someone else holds it, after ``wait``.
        LockProviderError: the store failed.
        ValueError: keep-alive on a store that cannot extend that often.
    """
    existing = already_held(provider, config, keep_alive)
    if existing is not None:
        return existing, False
    if not wait:
        # One attempt (the polls of ``aacquire`` would stop after it): awaited from
        # here, a coroutine less to make and to resume while the store answers.
        sent = time.monotonic()
        attempt = await provider.aattempt(config)
    else:
        attempt, sent = await aacquire(provider, config, wait=wait)
    return hold(attempt, config, sent, keep_alive="task" if keep_alive else False), True


async def agive_back(held: HeldLock, acquired: bool) -> None:
    """:func:`~tslock_django.core.executor.give_back` for asyncio code. The release
    runs to its end even if the task is cancelled meanwhile (the cancellation is raised
    afterwards)."""
    if not acquired:
        return
    try:
        forget(held)
    finally:
        await held.arelease()
