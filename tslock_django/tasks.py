"""``locked_task``: a function that a scheduler or task queue calls, run under its lock.

Place it *under* the framework's own decorator, so the lock is taken where the function
runs (the worker), not where it is sent::

    @shared_task                       # Celery; or django.tasks' @task, huey, APScheduler
    @locked_task("10m", name="sync-{account_id}")
    def sync(account_id: int) -> None: ...

The wrapper is a plain module-level function carrying the original's ``__module__``,
``__qualname__``, ``__name__`` and signature (``functools.wraps``), so frameworks that
import a task by its dotted path (Celery, django-tasks) find it, and the task objects
they build pickle as they would without it. Everything it needs is decided when the
module is imported and kept in one immutable :class:`_Policy`; a call shares no state
with another call.
"""

from __future__ import annotations

import functools
import inspect
import logging
import string
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar

from .core.configuration import LockConfiguration
from .core.durations import DurationLike
from .decorators import declared_schedule, did_not_run, invalid_job_argument
from .exceptions import LockHeld
from .guard import GuardedRun
from .journal.schedules import Schedule

P = ParamSpec("P")
T = TypeVar("T")

TaskName = str | Callable[[Mapping[str, Any]], str] | None

logger = logging.getLogger("tslock_django")


@dataclass(frozen=True)
class _Policy:
    """What ``locked_task`` was given, checked once at decoration."""

    lock_at_most_for: DurationLike
    lock_at_least_for: DurationLike
    name: TaskName
    using: str
    keep_alive: bool
    on_locked: str
    schedule: Schedule | None


def locked_task(
    lock_at_most_for: DurationLike,
    lock_at_least_for: DurationLike = 0,
    *,
    name: TaskName = None,
    using: str = "default",
    keep_alive: bool = False,
    on_locked: Literal["skip", "raise"] = "skip",
    schedule: object = None,
    grace: DurationLike | None = None,
    tz: str | None = None,
    failures_before_alert: int | None = None,
    max_duration: DurationLike | None = None,
) -> Callable[[Callable[P, T]], Callable[P, T | None]]:
    """Decorate a function so that each call runs only while holding its lock.

    Args:
        lock_at_most_for: the safety net for a worker that dies (duration grammar).
        lock_at_least_for: minimum hold time, also after the function returns early
            (set it near the schedule's period to run once per period across workers).
        name: the lock name: the function's dotted path (``module.qualname``) by
            default; a format string over the call's arguments, defaults applied
            (``"sync-{account_id}"``); or a callable taking those arguments as a mapping.
        using: the provider alias.
        keep_alive: extend the lock every ``lock_at_most_for / 2`` while the function runs.
        on_locked: held elsewhere: ``"skip"`` (the call returns ``None``, the task
            succeeds) or ``"raise"`` (:class:`LockHeld`, for queues that retry).
        schedule, grace, tz: how often the task should run, for ``tslock overdue`` and
            the Runs page, and the zone a cron schedule is read in (as for ``locked_command``).
        failures_before_alert, max_duration: the alert thresholds (as for
            ``locked_command``; they need ``schedule``).

    Every call is journaled: started, then succeeded or failed; skipped (held elsewhere,
    or paused by ``tslock pause``: a skip, logged as paused); error.

    A coroutine function (``async def``, which django.tasks runs, as do async schedulers)
    gives a coroutine function that holds the lock until the coroutine has finished,
    through the provider's async methods, as :class:`~tslock_django.alock` does.

    Raises:
        ValueError: (``InvalidJobArgument``) at decoration, that is at import: bad
            durations, ``on_locked``, ``schedule``, ``grace``, ``tz``,
            ``failures_before_alert`` or ``max_duration``, or a name template naming
            an argument the function does not take. ``manage.py check`` reports it ahead
            of time (tslock.E010) for the ``tasks`` module of each installed app.
        TypeError: at decoration: not a function, or an async generator function (its
            body runs as it is iterated, after the call has returned).

    The decorated function raises, per call:
        LockHeld: held elsewhere and ``on_locked="raise"`` (``JobPaused`` when the job is paused).
        LockProviderError, InvalidLockProvider: the store failed; the function did not run.
        ValueError: the name cannot be made from the arguments.
    """
    # Validate everything now, so a typo fails at import, not in a worker at 3 a.m.
    with invalid_job_argument():
        if on_locked not in ("skip", "raise"):
            raise ValueError(f"on_locked must be 'skip' or 'raise', got {on_locked!r}")
        LockConfiguration("probe", lock_at_most_for, lock_at_least_for)
        if name is not None and not (isinstance(name, str) or callable(name)):
            raise ValueError(f"name must be a string, a format string or a callable, got {name!r}")
        policy = _Policy(
            lock_at_most_for=lock_at_most_for,
            lock_at_least_for=lock_at_least_for,
            name=name,
            using=using,
            keep_alive=keep_alive,
            on_locked=on_locked,
            schedule=declared_schedule(
                schedule, grace, tz, failures_before_alert=failures_before_alert, max_duration=max_duration
            ),
        )

    def decorate(func: Callable[P, T]) -> Callable[P, T | None]:
        if not inspect.isfunction(func):
            raise TypeError(f"@locked_task decorates a function, not {func!r}")
        if inspect.isasyncgenfunction(func):
            raise TypeError(
                f"@locked_task cannot hold a lock around {func.__qualname__}: it is an async "
                "generator, whose body runs only as it is iterated, after the call returns"
            )
        signature = inspect.signature(func)
        if isinstance(name, str):
            with invalid_job_argument():
                _check_template(name, signature, func)

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def awrapper(*args: P.args, **kwargs: P.kwargs) -> T | None:
                return await _acall(policy, func, signature, args, kwargs)  # type: ignore[arg-type]

            awrapper.tslock_policy = policy  # type: ignore[attr-defined]
            return awrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T | None:
            return _call(policy, func, signature, args, kwargs)

        wrapper.tslock_policy = policy  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _run(
    policy: _Policy,
    func: Callable[..., Any],
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> GuardedRun:
    """The guarded run of one call: its lock name made from the call's arguments."""
    lock_name = task_lock_name(policy.name, func, signature, args, kwargs)
    config = LockConfiguration(lock_name, policy.lock_at_most_for, policy.lock_at_least_for)
    return GuardedRun(config, policy.using, keep_alive=policy.keep_alive, schedule=policy.schedule)


def _skipped(policy: _Policy, func: Callable[..., Any], refused: LockHeld) -> None:
    """A call that found its lock held: re-raise for ``on_locked="raise"``, else say so."""
    if policy.on_locked == "raise":
        raise refused
    logger.info("skipped: %s", did_not_run(refused, func.__qualname__))


def _call(
    policy: _Policy,
    func: Callable[..., T],
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> T | None:
    run = _run(policy, func, signature, args, kwargs)
    try:
        run.enter()
    except LockHeld as refused:
        _skipped(policy, func, refused)
        return None
    return run.call(func, *args, **kwargs)


async def _acall(
    policy: _Policy,
    func: Callable[..., Awaitable[T]],
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> T | None:
    """``_call`` for a coroutine function: the lock through the provider's async
    methods, held until the coroutine has finished (or was cancelled)."""
    run = _run(policy, func, signature, args, kwargs)
    try:
        await run.aenter()
    except LockHeld as refused:
        _skipped(policy, func, refused)
        return None
    try:
        result = await func(*args, **kwargs)
    except BaseException as exc:
        await run.aexit(exc)
        raise
    await run.aexit()
    return result


def task_lock_name(
    spec: TaskName,
    func: Callable[..., Any],
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str:
    """The lock name of one call: the dotted path, or ``spec`` over the bound arguments.

    Raises:
        TypeError: the arguments do not fit the function (as calling it would).
        ValueError: the template names an argument the call does not have, or the
            callable returned something other than a string.
    """
    if spec is None:
        return f"{func.__module__}.{func.__qualname__}"
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(arguments.pop(parameter.name, {}))
    if callable(spec):
        result = spec(arguments)
        if not isinstance(result, str):
            raise ValueError(
                f"the lock name callable of {func.__qualname__} returned {result!r}, not a string"
            )
        return result
    try:
        return spec.format_map(arguments)
    except (KeyError, IndexError, AttributeError) as err:
        raise ValueError(
            f"lock name template {spec!r} of {func.__qualname__} refers to {err}, which this call does "
            f"not have; its arguments are {', '.join(arguments) or '(none)'}"
        ) from None


def _check_template(template: str, signature: inspect.Signature, func: Callable[..., Any]) -> None:
    """Refuse, at import, a template naming an argument the function cannot receive."""
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as err:
        raise ValueError(f"lock name template {template!r} of {func.__qualname__}: {err}") from None
    kinds = {p.kind for p in signature.parameters.values()}
    if inspect.Parameter.VAR_KEYWORD in kinds:
        return  # any name may arrive as a keyword
    names = [
        p.name
        for p in signature.parameters.values()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    for field in fields:
        root = field.split(".", 1)[0].split("[", 1)[0]
        if root not in names:
            raise ValueError(
                f"lock name template {template!r} of {func.__qualname__} refers to {root!r}, which is "
                f"not an argument of it; its arguments are {', '.join(names) or '(none)'}"
            )
