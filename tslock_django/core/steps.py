"""One protocol, two ways of waiting: providers write an operation once, as a generator
of the requests it needs, and run it with :func:`drive` (sync) or :func:`adrive`
(asyncio).

The generator yields each request (what to send), receives the answer (or, thrown in,
the error sending raised) and returns the operation's result. Every decision (what to
ask, what an answer means, which error it becomes) is in the generator; the sync and
async I/O at the edge only send and read. This is the "sans-I/O" shape of httpx's and
h11's protocol code, at the size of a lock protocol::

    def _acquire_steps(self, config):
        reply = yield Request(...)          # the sync or async edge sends it
        return self._read_acquire(reply)

    def _acquire(self, config):
        return drive(self._acquire_steps(config), self._send)

    async def _aacquire(self, config):
        return await adrive(self._acquire_steps(config), self._asend)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .configuration import LockConfiguration
    from .handle import SimpleLock
    from .records import LockRecord

Q = TypeVar("Q")
T = TypeVar("T")

#: An operation: yields requests of type ``Q``, receives their answers, returns ``T``.
Steps = Generator[Q, Any, T]


def drive(steps: Generator[Q, Any, T], send: Callable[[Q], Any]) -> T:
    """Run ``steps`` to its result, sending each request with ``send``. An error of
    ``send`` is thrown into the generator at the request that caused it."""
    try:
        request = next(steps)
        while True:
            try:
                answer = send(request)
            except BaseException as err:  # noqa: BLE001  (thrown into the operation, which decides)
                request = steps.throw(err)
            else:
                request = steps.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(steps: Generator[Q, Any, T], send: Callable[[Q], Awaitable[Any]]) -> T:
    """:func:`drive` for asyncio: each request is sent with ``await send(request)``.
    A cancellation while sending is thrown into the generator like any error (its
    ``finally`` clauses run) and then goes on."""
    try:
        request = next(steps)
        while True:
            try:
                answer = await send(request)
            except BaseException as err:  # noqa: BLE001  (thrown into the operation, which decides)
                request = steps.throw(err)
            else:
                request = steps.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class SteppedPrimitives:
    """Mixin for a provider whose primitives are written as steps
    (``_acquire_steps``, ``_unlock_steps``, ``_extend_steps``, ``_force_unlock_steps``):
    the sync primitives drive them with ``_send``, the async ones with ``_asend``. Put
    it before ``LockProvider`` in the bases."""

    if TYPE_CHECKING:

        def _send(self, request: Any) -> Any: ...
        def _asend(self, request: Any) -> Awaitable[Any]: ...
        def _acquire_steps(
            self, config: LockConfiguration
        ) -> Generator[Any, Any, SimpleLock | LockRecord | None]: ...
        def _unlock_steps(self, held: SimpleLock) -> Generator[Any, Any, bool]: ...
        def _extend_steps(
            self, held: SimpleLock, config: LockConfiguration
        ) -> Generator[Any, Any, SimpleLock | None]: ...
        def _force_unlock_steps(self, name: str, expected: int | str | None) -> Generator[Any, Any, bool]: ...

    def _acquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        return drive(self._acquire_steps(config), self._send)

    def _unlock(self, held: SimpleLock) -> bool:
        return drive(self._unlock_steps(held), self._send)

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        return drive(self._extend_steps(held, config), self._send)

    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        return drive(self._force_unlock_steps(name, expected), self._send)

    # The async primitives return adrive's coroutine itself (awaited by the caller as
    # an ``async def`` would be): a frame less to make, and to pass each answer through.

    def _aacquire(self, config: LockConfiguration) -> Coroutine[Any, Any, SimpleLock | LockRecord | None]:
        return adrive(self._acquire_steps(config), self._asend)

    def _aunlock(self, held: SimpleLock) -> Coroutine[Any, Any, bool]:
        return adrive(self._unlock_steps(held), self._asend)

    def _aextend(self, held: SimpleLock, config: LockConfiguration) -> Coroutine[Any, Any, SimpleLock | None]:
        return adrive(self._extend_steps(held, config), self._asend)

    def _aforce_unlock(self, name: str, expected: int | str | None) -> Coroutine[Any, Any, bool]:
        return adrive(self._force_unlock_steps(name, expected), self._asend)
