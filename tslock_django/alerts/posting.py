"""Posting a notice to an HTTP receiver within one deadline: the webhook and Slack
channels' one way out.

The whole exchange (connecting, sending, the answer's head and the first bytes of its
body) is bounded by the channel's ``timeout``, not each wait: a receiver that drips
its answer a byte at a time cannot hold a job. asyncio can end an await at a deadline,
where sync httpx can only bound each read (encode/httpx#1450), so the exchange runs on
an event loop of its own (in a thread of its own when the caller's thread runs one).
Only the first :data:`MAX_ANSWER_BYTES` of an answer are read: a receiver's answer says
"ok" or names an error, and the rest is not worth waiting for. Redirects are not
followed: the answer to a POST says where the receiver moved, and following it would
send the notice somewhere the settings do not name.

httpx is imported here and only here, when a notice is first posted. httpx logs each
request's URL (at INFO, to the ``httpx`` logger), and a Slack hook's URL is its
credential: loading this module adds a filter to that logger which masks, in its
records, the secrets of the request being posted and every configured secret
(``core.scrubbing.hide_secrets``). It costs nothing while INFO is off for ``httpx``, as
it is by default.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import ssl
import threading
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from ..core import decode
from ..core.scrubbing import cut, hide_secrets, scrub, url_origin
from .errors import ChannelError

#: The most of an answer's body that is read (its start: an error's name or message).
MAX_ANSWER_BYTES = 4096


#: The secrets of the request being posted in this context (a send's thread and loop).
_posting_secrets: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "posting_secrets", default=()
)


class HideSecretsInRecords(logging.Filter):
    """Masks, in the message and arguments of each record it passes, the secrets of the
    request being posted and the configured ones (see the module's docstring); drops
    nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = _hidden(str(record.msg))
        if isinstance(record.args, tuple):
            record.args = tuple(_hidden(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: _hidden(value) for key, value in record.args.items()}
        return True


def _hidden(arg: object) -> object:
    # Numbers stay numbers, for the message's %d.
    if isinstance(arg, (int, float)):
        return arg
    return hide_secrets(scrub(str(arg), _posting_secrets.get()))


def _hide_secrets_in_httpx_log() -> None:
    logger = logging.getLogger("httpx")
    if not any(isinstance(existing, HideSecretsInRecords) for existing in logger.filters):
        logger.addFilter(HideSecretsInRecords())


_hide_secrets_in_httpx_log()


@dataclass(frozen=True)
class Reply:
    """The receiver's answer: its status and the start of its body as text."""

    status_code: int
    text: str

    @property
    def is_success(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status_code < 300


def post(
    what: str, url: str, body: bytes, headers: dict[str, str], *, timeout: float, secrets: Iterable[str]
) -> Reply:
    """POST ``body`` to ``url`` and return the answer, whatever its status, within
    ``timeout`` seconds in all.

    Args:
        what: names the channel in error messages ("webhook", "Slack").
        secrets: what no message may repeat (the URL's secret parts, a signing secret).

    Raises:
        ChannelError: no answer: the receiver could not be reached, the request could
            not be sent, or the deadline passed. The message names the receiver by its
            origin (``https://host``) and the failure by its class.
    """
    secrets = tuple(secrets)
    where = f"{what} at {url_origin(url)}"
    token = _posting_secrets.set(secrets)
    try:
        return _run(_exchange(url, body, headers, timeout))
    except (TimeoutError, asyncio.TimeoutError, httpx.TimeoutException) as err:
        raise ChannelError(
            f"{where}: no answer within {timeout:g} s, the timeout option ({type(err).__name__})"
        ) from None
    except (httpx.ConnectError, OSError) as err:  # OSError: what an older httpx lets through (TLS)
        raise ChannelError(
            f"{where}: could not connect ({type(err).__name__}: {_said(err, secrets)})"
        ) from None
    except httpx.HTTPError as err:
        raise ChannelError(
            f"{where}: the exchange failed ({type(err).__name__}: {_said(err, secrets)})"
        ) from None
    finally:
        _posting_secrets.reset(token)


def _said(err: Exception, secrets: tuple[str, ...]) -> str:
    # httpx's texts may quote the request's URL; the receiver's may echo anything.
    # Chained exceptions are dropped (``from None``) for the same reason: their texts
    # and frames hold the URL.
    return cut(decode.visible(scrub(str(err), secrets)), 200) or "no detail"


@functools.cache
def _tls() -> ssl.SSLContext:
    """httpx's default TLS settings, made once: a client makes them anew otherwise, and
    loading the certificate store is most of a send's time (30 of 35 ms, 2026-12-04)."""
    return httpx.create_ssl_context()


async def _exchange(url: str, body: bytes, headers: dict[str, str], timeout: float) -> Reply:
    async def exchange() -> Reply:
        async with (
            httpx.AsyncClient(follow_redirects=False, timeout=timeout, verify=_tls()) as client,
            client.stream("POST", url, content=body, headers=headers) as response,
        ):
            kept = b""
            async for chunk in response.aiter_raw():
                kept += chunk[: MAX_ANSWER_BYTES - len(kept)]
                if len(kept) >= MAX_ANSWER_BYTES:
                    break  # the rest is not read: leaving the block closes the connection
            encoded = response.headers.get("Content-Encoding", "identity").strip().lower() != "identity"
            text = "(an encoded answer)" if encoded else kept.decode("utf-8", "replace")
            return Reply(response.status_code, text)

    return await asyncio.wait_for(exchange(), timeout)


def _run(exchange: Coroutine[Any, Any, Reply]) -> Reply:
    """Run the exchange's coroutine to its end on a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _on_a_new_loop(exchange)
    # This thread runs a loop (a channel called from async code): a second loop cannot
    # run here, and the caller's loop is blocked by this sync call anyway.
    outcome: list[Reply | BaseException] = []

    def run() -> None:
        try:
            outcome.append(_on_a_new_loop(exchange))
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(err)

    # With this context: the log filter reads the request's secrets from it.
    context = contextvars.copy_context()
    worker = threading.Thread(target=context.run, args=(run,), name="tslock-alert-post", daemon=True)
    worker.start()
    worker.join()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _on_a_new_loop(exchange: Coroutine[Any, Any, Reply]) -> Reply:
    # Not asyncio.run: it would leave this thread with no current event loop afterwards
    # (code that set one, and reads it with get_event_loop(), would lose it) and install
    # its own SIGINT handler meanwhile. A loop of our own touches neither.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(exchange)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
