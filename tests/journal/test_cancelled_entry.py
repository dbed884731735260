"""A cancelled async acquire leaves no lock behind, journal on or off.

Each case cancels ``alock(..., journal=True)`` (and a locked coroutine task under
``asyncio.wait_for``) at a random point between the call and the body: while the store
answers, while the journal writes the ``running`` row, while keep-alive starts. Afterwards
the lock must be free, no keep-alive task may be left extending it, and no journal row
may be left ``running``: a run whose lock was granted but whose body never started
reads ``error``. On the memory provider, the database (SQLite and PostgreSQL) and Redis.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.test import override_settings

from tslock_django import LockConfiguration, alock, locked_task, providers
from tslock_django.journal import outcomes
from tslock_django.journal.models import Job, Run

DATABASES = [alias for alias in ("default", "postgres") if alias in settings.DATABASES]
pytestmark = [pytest.mark.django_db(databases=DATABASES, transaction=True)]

#: Cancellations per store; the defect this pins left the lock held in about a quarter
#: of random cancellations on the memory provider.
ROUNDS = 60


def _stores() -> dict[str, dict[str, object]]:
    from tests.redis.conftest import LOCAL_URL

    return {
        "memory": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
        "sqlite": {
            "BACKEND": "tslock_django.providers.database.DatabaseLockProvider",
            "OPTIONS": {"using": "default"},
        },
        "postgres": {
            "BACKEND": "tslock_django.providers.database.DatabaseLockProvider",
            "OPTIONS": {"using": "postgres"},
        },
        "redis": {
            "BACKEND": "tslock_django.providers.redis.RedisLockProvider",
            "OPTIONS": {"url": LOCAL_URL, "key_prefix": f"tslock-test-cancel-{uuid.uuid4().hex[:8]}:"},
        },
    }


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[str]:
    alias = request.param
    if alias == "postgres" and alias not in settings.DATABASES:
        pytest.skip(reason="PostgreSQL is not reachable at 127.0.0.1:5432 (required when CI is set)")
    if alias == "redis":
        from tests.redis.conftest import require_local_redis

        require_local_redis()
    journal = {"using": "default"}
    with override_settings(TSLOCK_PROVIDERS={"default": _stores()[alias]}, TSLOCK_JOURNAL=journal):
        yield alias


async def _is_free(name: str) -> bool:
    held = await providers["default"].alock(LockConfiguration(name, "1m"))
    if held is None:
        return False
    await held.aunlock()
    return True


async def _settle() -> None:
    """Let tasks the cancelled one left behind show themselves (a keep-alive task
    would still be pending after these passes of the loop)."""
    for _ in range(5):
        await asyncio.sleep(0)


def _left_running(name: str) -> int:
    return Run.objects.filter(name=name, outcome=outcomes.RUNNING).count()


def _run(main) -> None:  # type: ignore[no-untyped-def]
    problems: list[str] = []

    async def wrapped() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, c: problems.append(str(c.get("message"))))
        try:
            await main()
        finally:
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    asyncio.run(wrapped())
    assert not problems, problems


@pytest.mark.parametrize("keep_alive", [False, True], ids=["plain", "keep-alive"])
def test_a_cancelled_alock_leaves_no_lock_keep_alive_or_running_row(store: str, keep_alive: bool) -> None:
    rng = random.Random(f"{store}-{keep_alive}")  # the same points on every run
    names: list[str] = []

    async def main() -> None:
        entered = 0
        for round_ in range(ROUNDS):
            name = f"cancel-{store}-{keep_alive}-{round_}"
            names.append(name)
            body_ran = asyncio.Event()

            async def job(name: str = name, body_ran: asyncio.Event = body_ran) -> None:
                async with alock(name, "1m", journal=True, keep_alive=keep_alive):
                    body_ran.set()
                    await asyncio.Event().wait()

            task = asyncio.create_task(job())
            # Cancel after a random number of loop passes (hitting the awaits before
            # the store's answer, inside it, and in the journal's write), or after a
            # short random time (the journal's and the database's threads).
            if rng.random() < 0.5:
                for _ in range(rng.randrange(0, 12)):
                    await asyncio.sleep(0)
            else:
                await asyncio.sleep(rng.uniform(0, 0.004))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            entered += body_ran.is_set()
            await _settle()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            assert not others, f"round {round_}: tasks left behind: {others}"
            assert await _is_free(name), f"round {round_}: the cancelled acquire left {name!r} held"
        # The rounds must have cancelled some entries before the body, or they test nothing.
        assert entered < ROUNDS

    _run(main)
    assert [n for n in names if _left_running(n)] == []
    for run in Run.objects.filter(name__in=names, outcome=outcomes.ERROR).exclude(held_by__gt=""):
        assert "did not start" in run.detail or run.detail.startswith("CancelledError")


def test_a_run_cancelled_after_its_grant_reads_error_and_its_lock_is_free(store: str) -> None:
    """Cancelled while the journal writes the ``running`` row (the window the defect
    had): that write completes, then the run is undone."""
    from tslock_django.journal import recorder

    started = recorder.RunRecorder.started
    writing = asyncio.Event()
    loop_box: list[asyncio.AbstractEventLoop] = []

    def slow_started(self: recorder.RunRecorder, held: object) -> None:
        loop_box[0].call_soon_threadsafe(writing.set)
        import time

        time.sleep(0.2)  # the row's write, slowed so that the cancellation lands inside it
        started(self, held)

    async def main() -> None:
        loop_box.append(asyncio.get_running_loop())

        async def job() -> None:
            async with alock("cancelled-in-write", "1m", journal=True, keep_alive=True):
                pytest.fail("the body must not run")

        task = asyncio.create_task(job())
        await writing.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _settle()
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
        assert await _is_free("cancelled-in-write")

    recorder.RunRecorder.started = slow_started  # type: ignore[method-assign]
    try:
        _run(main)
    finally:
        recorder.RunRecorder.started = started  # type: ignore[method-assign]
    [run] = Run.objects.filter(name="cancelled-in-write")
    assert run.outcome == outcomes.ERROR
    assert run.detail.startswith("the job did not start: CancelledError")
    job = Job.objects.get(name="cancelled-in-write")
    assert (job.last_outcome, job.runs_error, job.runs_succeeded) == (outcomes.ERROR, 1, 0)


@locked_task("10m", name="cancelled-task")
async def slow_task() -> None:
    await asyncio.sleep(30)


@override_settings(
    TSLOCK_PROVIDERS={"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}},
    TSLOCK_JOURNAL={"using": "default"},
)
def test_async_locked_tasks_under_wait_for_leave_no_lock() -> None:
    """The task path enters through the same steps as ``alock``, fuzzed above on
    every store; here under ``asyncio.wait_for``, as a task queue cancels it."""
    rng = random.Random("wait_for")

    async def main() -> None:
        for round_ in range(ROUNDS):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(slow_task(), timeout=rng.uniform(0, 0.003))
            await _settle()
            assert await _is_free("cancelled-task"), f"round {round_}: the task's lock is still held"

    _run(main)
    assert _left_running("cancelled-task") == 0


def test_async_keep_alive_keeps_the_journals_deadline_ahead_of_a_long_run() -> None:
    """A 5 s async job under a 2 s ``lock_at_most_for`` with keep-alive: its row must
    read ``running`` (not past its deadline, so not ``lost``) throughout, and
    ``succeeded`` afterwards; the extensions are written without the ORM on the loop."""
    from datetime import datetime, timezone

    from tslock_django.journal.recorder import from_db
    from tslock_django.journal.status import outcome_now

    seen: list[str] = []
    memory = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}

    def read() -> str:
        run = Run.objects.get(name="long-async")
        return outcome_now(run.outcome, from_db(run.deadline), datetime.now(timezone.utc))

    async def main() -> None:
        async with alock("long-async", "2s", journal=True, keep_alive=True):
            loop = asyncio.get_running_loop()
            ends = loop.time() + 5
            while loop.time() < ends:
                seen.append(await sync_to_async(read, thread_sensitive=True)())
                await asyncio.sleep(0.25)

    with override_settings(TSLOCK_PROVIDERS=memory, TSLOCK_JOURNAL={"using": "default"}):
        _run(main)
    assert len(seen) >= 10
    assert set(seen) == {outcomes.RUNNING}, seen
    [run] = Run.objects.filter(name="long-async")
    assert run.outcome == outcomes.SUCCEEDED
