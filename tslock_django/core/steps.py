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

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

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
