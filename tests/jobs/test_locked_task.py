"""``locked_task`` in-process: names, skips, failures, the journal, what fails at
decoration, and what frameworks need of the function (its path, signature, pickling)."""

from __future__ import annotations

import asyncio
import inspect
import pickle
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from tests.jobs import tasks
from tests.test_decorator import BrokenStore  # noqa: F401  (the BACKEND below names it)
from tslock_django import LockConfiguration, LockHeld, LockProviderError, locked_task, providers
from tslock_django.journal.models import Job, Run

STORES = {
    "default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
    "broken": {"BACKEND": "tests.test_decorator.BrokenStore"},
}


@pytest.fixture
def journal() -> Iterator[None]:
    with override_settings(TSLOCK_PROVIDERS=STORES, TSLOCK_JOURNAL={"using": "default"}):
        yield


def outcomes(name: str) -> list[str]:
    return list(Run.objects.filter(name=name).order_by("id").values_list("outcome", flat=True))


def hold(name: str) -> None:
    """Hold ``name`` as another worker would (straight from the store, not this thread's)."""
    assert providers["default"].lock(LockConfiguration(name, "1m")) is not None


pytestmark = pytest.mark.django_db(transaction=True)


def test_the_default_name_is_the_dotted_path_and_the_body_runs_locked(journal: None, tmp_path: Path) -> None:
    path = tmp_path / "ran"
    assert tasks.by_path(str(path)) == "ran"
    assert path.read_text() == "ran\n"
    assert outcomes("tests.jobs.tasks.by_path") == ["succeeded"]


def test_a_held_lock_skips_returns_none_and_journals_the_holder(journal: None, tmp_path: Path) -> None:
    hold("tests.jobs.tasks.by_path")
    path = tmp_path / "ran"
    assert tasks.by_path(str(path)) is None
    assert not path.exists()
    [run] = Run.objects.filter(name="tests.jobs.tasks.by_path")
    assert run.outcome == "skipped" and run.held_by


def test_on_locked_raise_raises_lock_held(journal: None) -> None:
    hold("tests.jobs.tasks.raising")
    with pytest.raises(LockHeld) as raised:
        tasks.raising()
    assert raised.value.name == "tests.jobs.tasks.raising"
    assert outcomes("tests.jobs.tasks.raising") == ["skipped"]


def test_a_template_names_the_lock_from_the_bound_arguments_with_defaults(journal: None) -> None:
    assert tasks.by_template(7) == "synced 7 in eu"
    assert tasks.by_template(account_id=8, region="us") == "synced 8 in us"
    assert outcomes("sync-7-eu") == ["succeeded"] and outcomes("sync-8-us") == ["succeeded"]
    job = Job.objects.get(name="sync-7-eu")
    assert (job.schedule, job.grace) == ("1h", 600.0)


def test_a_callable_names_the_lock_from_the_bound_arguments(journal: None) -> None:
    assert tasks.by_callable(9) == 9
    assert outcomes("shard-1") == ["succeeded"]


def test_a_template_over_keywords_fails_per_call_naming_the_arguments(journal: None) -> None:
    assert tasks.by_keywords(tenant="acme") == {"tenant": "acme"}
    assert outcomes("any-acme") == ["succeeded"]
    with pytest.raises(ValueError, match=r"'any-\{tenant\}' of by_keywords refers to 'tenant'.*are other"):
        tasks.by_keywords(other=1)


def test_a_failure_is_journaled_reraised_and_the_lock_released(journal: None) -> None:
    with pytest.raises(RuntimeError, match="the upstream API said no"):
        tasks.failing()
    [run] = Run.objects.filter(name="tests.jobs.tasks.failing")
    assert run.outcome == "failed" and run.detail == "RuntimeError: the upstream API said no"
    [record] = providers["default"].list_locks(prefix="tests.jobs.tasks.failing")
    assert record.released


def test_a_store_that_fails_raises_and_the_body_does_not_run(journal: None, tmp_path: Path) -> None:
    path = tmp_path / "ran"
    with pytest.raises(LockProviderError):
        tasks.on_a_broken_store(str(path))
    assert not path.exists()
    assert outcomes("tests.jobs.tasks.on_a_broken_store") == ["error"]


def test_the_wrapper_keeps_the_path_signature_and_pickles_by_reference() -> None:
    for func in (tasks.by_path, tasks.by_template):
        assert func.__module__ == "tests.jobs.tasks"
        assert func.__qualname__ == func.__name__
        assert inspect.isfunction(func) and "<locals>" not in func.__qualname__
        assert pickle.loads(pickle.dumps(func)) is func
    assert str(inspect.signature(tasks.by_template)) == "(account_id: 'int', region: 'str' = 'eu') -> 'str'"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lock_at_most_for": "soon"}, "lock_at_most_for"),
        ({"lock_at_most_for": "1m", "lock_at_least_for": "1h"}, "lock_at_least_for"),
        ({"lock_at_most_for": "1m", "on_locked": "fail"}, "on_locked must be 'skip' or 'raise'"),
        ({"lock_at_most_for": "1m", "grace": "5m"}, "grace is given without a schedule"),
        ({"lock_at_most_for": "1m", "schedule": "daily"}, "not a schedule"),
        ({"lock_at_most_for": "1m", "schedule": "0 3 * *"}, "has 4 fields"),
        ({"lock_at_most_for": "1m", "name": 42}, "name must be"),
    ],
)
def test_bad_arguments_fail_at_decoration(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        locked_task(**kwargs)  # type: ignore[arg-type]


def test_a_template_naming_a_missing_argument_fails_at_decoration_with_both_names() -> None:
    decorate = locked_task("1m", name="sync-{acount_id}")
    with pytest.raises(ValueError) as raised:

        @decorate
        def sync(account_id: int, region: str = "eu") -> None: ...

    message = str(raised.value)
    assert "'sync-{acount_id}'" in message and "'acount_id'" in message
    assert "account_id, region" in message


def test_async_generators_and_non_functions_are_refused() -> None:
    async def stream() -> AsyncIterator[int]:
        yield 1

    with pytest.raises(TypeError, match="async generator"):
        locked_task("1m")(stream)
    with pytest.raises(TypeError, match="decorates a function"):
        locked_task("1m")(print)  # type: ignore[arg-type]


def test_calls_share_no_state(journal: None) -> None:
    """Each call takes and gives back its own lock: the same name twice in a row runs twice."""
    assert tasks.by_callable(1) == 1
    assert tasks.by_callable(5) == 5  # shard-1 again, after the first released it
    assert outcomes("shard-1") == ["succeeded", "succeeded"]


def test_a_coroutine_function_holds_its_lock_until_the_coroutine_has_finished(
    journal: None, tmp_path: Path
) -> None:
    path = tmp_path / "ran"
    assert inspect.iscoroutinefunction(tasks.coroutine)
    name = f"async-{path}"

    async def twice_at_once() -> list[str | None]:
        first = asyncio.ensure_future(tasks.coroutine(str(path), pause=0.2))
        await asyncio.sleep(0.05)  # the first holds the lock and awaits inside it
        second = await tasks.coroutine(str(path))
        return [await first, second]

    assert asyncio.run(twice_at_once()) == ["ran", None]
    assert path.read_text() == "ran\n"
    assert outcomes(name) == ["succeeded", "skipped"]  # the first row is written first, ends later
    assert providers["default"].lock(LockConfiguration(name, "1m")) is not None  # given back


def test_a_coroutine_function_raises_lock_held_and_journals_a_failure(journal: None) -> None:
    hold("tests.jobs.tasks.coroutine_raising")
    with pytest.raises(LockHeld):
        asyncio.run(tasks.coroutine_raising())
    with pytest.raises(RuntimeError, match="asynchronously"):
        asyncio.run(tasks.coroutine_failing())
    [failed] = Run.objects.filter(name="tests.jobs.tasks.coroutine_failing")
    assert (
        failed.outcome == "failed"
        and failed.detail == "RuntimeError: the upstream API said no, asynchronously"
    )
    assert (
        providers["default"].lock(LockConfiguration("tests.jobs.tasks.coroutine_failing", "1m")) is not None
    )


def test_a_cancelled_coroutine_gives_its_lock_back(journal: None, tmp_path: Path) -> None:
    path = tmp_path / "ran"
    name = f"async-{path}"

    async def cancel_it() -> None:
        running = asyncio.ensure_future(tasks.coroutine(str(path), pause=10))
        await asyncio.sleep(0.05)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(cancel_it())
    assert not path.exists()
    assert providers["default"].lock(LockConfiguration(name, "1m")) is not None
    assert outcomes(name) == ["failed"]
