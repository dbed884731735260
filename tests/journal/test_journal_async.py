"""Async runs in the journal: ``alock(..., journal=True)`` and locked coroutine functions
are recorded like sync runs (succeeded, failed, skipped, and a cancelled run), through
the same GuardedRun steps."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from tslock_django import LockConfiguration, LockHeld, alock, lock, providers
from tslock_django.journal import outcomes
from tslock_django.journal.models import Run

MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}

pytestmark = [
    pytest.mark.django_db(databases=["default"], transaction=True),
    pytest.mark.filterwarnings("error::ResourceWarning"),
]


def outcomes_of(name: str) -> list[str]:
    return [r.outcome for r in Run.objects.filter(name=name).order_by("id")]


def run(main) -> None:  # type: ignore[no-untyped-def]
    async def wrapped() -> None:
        try:
            await main()
        finally:
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    asyncio.run(wrapped())


def test_async_runs_are_journaled_like_sync_ones() -> None:
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}):

        @lock("async-decorated", "1m", journal=True)
        async def explode() -> None:
            raise ValueError("no")

        async def main() -> None:
            async with alock("async-block", "1m", journal=True) as held:
                assert held.fencing_token == 1
            with pytest.raises(ValueError):
                await explode()
            other = await providers["default"].alock(LockConfiguration("async-block", "1m"))
            assert other is not None
            with pytest.raises(LockHeld):
                async with alock("async-block", "1m", journal=True):
                    pytest.fail("the block must not run")
            async with alock("not-journaled", "1m"):
                pass

        run(main)
    assert outcomes_of("async-block") == [outcomes.SUCCEEDED, outcomes.SKIPPED]
    [failed] = Run.objects.filter(name="async-decorated")
    assert failed.outcome == outcomes.FAILED and failed.detail == "ValueError: no"
    assert not Run.objects.filter(name="not-journaled").exists()


def test_a_cancelled_async_run_ends_in_the_journal_and_releases() -> None:
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": "default"}):

        async def main() -> None:
            entered = asyncio.Event()

            async def job() -> None:
                async with alock("cancelled-run", "1m", journal=True):
                    entered.set()
                    await asyncio.Event().wait()

            task = asyncio.create_task(job())
            await entered.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await providers["default"].alock(LockConfiguration("cancelled-run", "1m")) is not None

        run(main)
        [row] = Run.objects.filter(name="cancelled-run")
    assert row.outcome == outcomes.FAILED and "CancelledError" in row.detail
    assert row.finished_at is not None
