"""Small asyncio helpers shared by the async lock path.

Two things the async path needs and asyncio does not give directly:

- :func:`finish`: let an operation on the store run to its end even when the task
  awaiting it is cancelled (once or repeatedly), then pass the cancellation on. A lock
  the store granted, or a release already sent, must not be dropped half-way: the lock
  would stay held until ``lock_at_most_for`` with nobody holding it.
- :func:`in_thread`: run a blocking call in a worker thread, for providers without
  native async I/O.
- :func:`on_loop_shutdown`: close a provider's async clients on their loop when it
  shuts down, whether or not ``aclose()`` was called.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def finish(operation: Awaitable[T]) -> T:
    """Await ``operation`` to its end, shielded from cancellation of the caller.

    If the caller is cancelled meanwhile (even several times), the operation still
    completes and :class:`asyncio.CancelledError` is raised afterwards, so the
    cancellation is delayed, never lost (the operation's own error, if it failed, is
    the cancellation's ``__cause__``).
    """
    task = asyncio.ensure_future(operation)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # the operation itself was cancelled (the loop is closing)
                raise
            cancelled = True
    if cancelled:
        # The operation's own error (if any) is kept as the cause, not lost.
        raise asyncio.CancelledError from task.exception()
    return task.result()


async def in_thread(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``func(*args, **kwargs)`` in a worker thread of the loop's default executor,
    with this task's context variables (like :func:`asyncio.to_thread`)."""
    return await asyncio.to_thread(functools.partial(func, *args, **kwargs))


async def on_loop_shutdown(callback: Callable[[], Awaitable[None]]) -> AsyncGenerator[None, None]:
    """Have ``await callback()`` run when the running loop shuts down, on that loop.

    ``asyncio.run`` (and other runners) close every suspended async generator before
    closing the loop; the generator returned here is one, whose ``finally`` awaits
    ``callback``. Keep a reference to it for as long as the callback should stay armed;
    a client opened on a loop is thus closed on it even if nobody calls ``aclose()``
    (no "unclosed" ResourceWarning at exit). Close the generator (``await
    gen.aclose()``) to disarm it after closing by other means.
    """

    async def watch() -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            await callback()

    watcher = watch()
    await watcher.__anext__()  # registers it with the loop's async generator hooks
    return watcher
