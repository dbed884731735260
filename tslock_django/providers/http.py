"""What the HTTP providers share: one pooled httpx client per provider, requests whose
answers are streamed within a size limit and a deadline, and the rule that every
transport failure becomes a ``LockProviderError`` that names the store and the cause but
never the credentials.

httpx is imported here and only here, so ``import tslock_django`` stays free of it
until a Cloudflare provider is configured.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..core import decode
from ..core.scrubbing import cut, scrub
from ..exceptions import LockProviderError, LockRateLimited

#: Seconds an idle connection is kept for reuse: well under the servers' own idle limit.
#: workerd closes a connection idle for 5 s, httpx's default expiry; with both at 5 s a
#: request sent on a connection as the server closes it fails with "Server disconnected
#: without sending a response", a store failure that cannot safely be retried (the
#: acquire may have been granted). Seen on CI with 50 threads on the local Worker.
KEEPALIVE_EXPIRY = 3.0

#: As many idle keep-alive connections as open ones. With fewer (httpx keeps 20 by
#: default), httpcore 1.0.x can close an idle connection it has just handed to a waiting
#: thread when more threads than that share one provider, and the request fails with
#: EBADF (encode/httpcore#1110); seen here with 50 threads on one provider.
POOL_LIMITS = httpx.Limits(
    max_connections=100, max_keepalive_connections=100, keepalive_expiry=KEEPALIVE_EXPIRY
)

#: The largest answer read, decoded (16 MiB): a listing page of 1,000 keys with their
#: metadata is about 1.5 MB. Larger answers are refused as they arrive.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: The deepest nesting parsed in an answer (an envelope around records).
MAX_BODY_DEPTH = 32


class PooledClient:
    """One keep-alive ``httpx.Client`` shared by every thread of a provider, opened on
    first use and again after :meth:`close`, so that ``close()`` frees connections without
    leaving the provider unusable. Credentials go in ``headers`` only, never in the URL,
    so httpx's own error messages (which quote the URL) cannot leak them.

    Send requests with :meth:`send`: it bounds the answer's size and the request's
    duration by ``timeout``."""

    def __init__(
        self,
        *,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        # Only gzip is asked for: it is the one encoding decoded here within the size
        # limit (see _Body).
        headers = {"Accept-Encoding": "gzip", **headers}
        self.timeout = timeout
        self._settings = {"base_url": base_url, "headers": headers, "timeout": httpx.Timeout(timeout)}
        self._transport = transport
        self._client: httpx.Client | None = None
        self._mutex = threading.Lock()

    def get(self) -> httpx.Client:
        """The client, opened if there is none (call inside ``transport_errors``)."""
        client = self._client
        if client is None:
            with self._mutex:
                client = self._client
                if client is None:
                    client = httpx.Client(
                        **self._settings,  # type: ignore[arg-type]
                        transport=self._transport,
                        limits=POOL_LIMITS,
                        follow_redirects=False,
                    )
                    self._client = client
        return client

    def close(self) -> None:
        """Close the pooled connections; the next :meth:`get` opens a new client."""
        with self._mutex:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def send(
        self,
        alias: str,
        what: str,
        method: str,
        url: str,
        *,
        secrets: Iterable[str] = (),
        max_bytes: int | None = None,
        **kwargs: Any,
    ) -> Answer:
        """Send one request and read its whole answer, within bounds.

        The answer is streamed and refused as soon as it passes ``max_bytes`` (default
        :data:`MAX_BODY_BYTES`), decoded, or once ``timeout`` seconds have passed since
        the request began (checked between the pieces of the answer; each connect, write
        and read waits at most ``timeout``). A server sending its headers a byte at a
        time can still hold a request longer: httpx has no whole-request timeout
        (encode/httpx#1450); the asyncio edge has one. The answer's connection is back in
        the pool when this returns, or closed if the answer was cut short.

        Args:
            alias, what: name the provider and the operation in error messages.
            secrets: what no error message may repeat (see :func:`transport_errors`).
            kwargs: passed to ``httpx.Client.stream`` (``json``, ``params``, ...).

        Raises:
            LockProviderError: the store could not be reached, did not answer in time,
                or answered more than ``max_bytes`` or something undecodable.
        """
        limit = MAX_BODY_BYTES if max_bytes is None else max_bytes
        deadline = time.monotonic() + self.timeout
        # The client's timeout is the whole of what is left: the deadline starts here.
        # (The block's second part runs inside the first: opening a client can fail.)
        with (
            transport_errors(alias, what, secrets, timeout=self.timeout),
            self.get().stream(method, url, **kwargs) as response,
        ):
            try:
                body = _Body(response, limit, deadline)
                if body.streamed:
                    for chunk in response.iter_raw():
                        body.feed(chunk)
                return body.answer()
            except _Refused as err:
                # Leaving the block closes the connection: draining a hostile answer
                # would defeat the bounds.
                raise refused(alias, what, response, err) from None

    def send_request(self, request: Request) -> Answer:
        """:meth:`send` for a :class:`Request` (the sync edge of a provider's steps)."""
        return self.send(
            request.alias,
            request.what,
            request.method,
            request.url,
            secrets=request.secrets,
            max_bytes=request.max_bytes,
            **request.options,
        )


@dataclass(frozen=True)
class Request:
    """One request of a provider's steps (see ``core.steps``): what the sync and the
    asyncio edge send alike (see :meth:`PooledClient.send` for the fields)."""

    alias: str
    what: str
    method: str
    url: str
    secrets: tuple[str, ...] = ()
    max_bytes: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer:
    """An answer read to its end within bounds: what a provider's steps receive.

    ``content`` is the body, gzip undone; ``headers`` are as the server sent them."""

    status_code: int
    headers: httpx.Headers
    content: bytes

    @property
    def is_success(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status_code < 300


def refused(alias: str, what: str, response: httpx.Response, err: Exception) -> LockProviderError:
    """The error for an answer the provider would not read to its end."""
    status = response.status_code
    return LockProviderError(f"{what}: HTTP {status}: {err}", alias=alias, status_code=status)


# -- reading an answer within bounds --------------------------------------------------------


class _Refused(Exception):
    """An answer the provider will not read further (the text says why)."""


#: The most one decoded piece of an answer holds, so a compressed answer is checked
#: against the size limit every 64 KiB however well it compresses.
PIECE_BYTES = 64 * 1024


def _in_memory(response: httpx.Response) -> bytes | None:
    """The body of a response a transport answered from memory (tests, fakes): read and
    decoded already, its stream cannot be read again. ``None`` for a streamed answer."""
    try:
        return response.content
    except httpx.ResponseNotRead:
        return None


class _Body:
    """An answer's body collected as it arrives, the one set of rules for the sync and
    the asyncio send: gzip undone in pieces of at most PIECE_BYTES (httpx decodes each
    network read whole, and 64 KiB of gzip can hold 64 MiB, so the raw stream is read),
    refused past ``max_bytes``, cut off at ``deadline`` (a ``ReadTimeout``: httpx bounds
    each read, not the whole answer).

    An answer a transport gave from memory is taken whole here (``streamed`` is then
    false); feed a streamed one its raw chunks, then take :meth:`answer`."""

    def __init__(self, response: httpx.Response, max_bytes: int, deadline: float) -> None:
        self.response, self.max_bytes, self.deadline = response, max_bytes, deadline
        self.pieces: list[bytes] = []
        self.size = 0
        self.received = False
        self.inflater: Any = None
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and "Content-Encoding" not in response.headers and int(declared) > max_bytes:
            raise _Refused(_too_large(max_bytes))
        content = _in_memory(response)
        self.streamed = content is None
        if content is not None:
            self.feed(content)
            return
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding not in ("", "identity"):
            raise _Refused(
                f"the answer is encoded as {cut(decode.visible(encoding), 40)!r}; the provider asks for "
                "gzip or no encoding"
            )

    def feed(self, chunk: bytes) -> None:
        """Take the next raw chunk of the answer."""
        if time.monotonic() > self.deadline:
            raise httpx.ReadTimeout("the request's deadline has passed", request=self.response.request)
        inflater = self.inflater
        if inflater is None:
            for start in range(0, len(chunk), PIECE_BYTES):
                self._add(chunk[start : start + PIECE_BYTES])
            return
        # Read to the end of the stream, not of the gzip data: a response left unfinished
        # would close its connection instead of returning it to the pool.
        self.received = self.received or bool(chunk)
        data = chunk
        try:
            while data:
                if inflater.eof:
                    raise _Refused("the answer holds bytes after the end of its gzip data")
                piece = inflater.decompress(data, PIECE_BYTES)
                data = inflater.unconsumed_tail or inflater.unused_data
                if piece:
                    self._add(piece)
        except zlib.error:
            raise _Refused("the answer's gzip encoding is broken") from None

    def _add(self, piece: bytes) -> None:
        self.size += len(piece)
        if self.size > self.max_bytes:
            raise _Refused(_too_large(self.max_bytes))
        self.pieces.append(piece)

    def answer(self) -> Answer:
        """The answer, once the whole stream was fed."""
        inflater = self.inflater
        if inflater is not None:
            try:
                rest = inflater.flush()
            except zlib.error:
                raise _Refused("the answer's gzip encoding is broken") from None
            if self.received and not inflater.eof:
                raise _Refused("the answer's gzip data ends early")
            if rest:
                self._add(rest)
        response = self.response
        return Answer(response.status_code, response.headers, b"".join(self.pieces))


def _too_large(max_bytes: int) -> str:
    return (
        f"the answer is larger than {max_bytes:,} bytes, the most the provider reads; "
        "check that the URL points at the store"
    )


@contextmanager
def transport_errors(
    alias: str, what: str, secrets: Iterable[str] = (), *, timeout: float | None = None
) -> Iterator[None]:
    """Turn httpx failures inside the block into ``LockProviderError``.

    ``what`` says which operation failed ("acquire 'job'"); the message keeps the
    exception's class name, which says enough (timeout, refused, reset) without
    repeating request details. Create the client inside the block too: building its
    headers can fail, and so can a client that another thread has just closed.
    ``secrets`` (the credential, the lock token sent) are scrubbed from any text of the
    server's that the message repeats: a protocol error quotes the status line it
    could not parse, and a hostile server can put the request's header there.
    ``timeout`` (seconds), when given, is named in the message of a timeout.
    """
    try:
        yield
    except httpx.TimeoutException as err:
        limit = "" if timeout is None else f"timed out after {timeout:g} s, the timeout option; "
        raise LockProviderError(
            f"{what}: the store did not answer in time ({limit}{type(err).__name__})", alias=alias
        ) from err
    except (httpx.LocalProtocolError, UnicodeEncodeError) as err:
        # Raised while the request is being built or written, mostly for a header value
        # the HTTP library refuses. Its text quotes the offending header, and the only
        # header we fill from settings is Authorization, so the text is never repeated.
        raise LockProviderError(
            f"{what}: the request could not be sent because a header value is invalid "
            f"({type(err).__name__}); check the token for whitespace, line breaks or non-ASCII characters",
            alias=alias,
        ) from err
    except httpx.HTTPError as err:
        raise LockProviderError(
            f"{what}: could not reach the store ({type(err).__name__}: {_safe(err, secrets)})", alias=alias
        ) from err
    except OSError as err:
        # What older httpx releases (0.25, with its httpcore) let through unwrapped from
        # the connection, e.g. ssl.SSLCertVerificationError: a failure of the store's
        # connection all the same.
        raise LockProviderError(
            f"{what}: could not reach the store ({type(err).__name__}: {_safe(err, secrets)})", alias=alias
        ) from err
    except RuntimeError as err:
        # httpx refuses to send on a closed client. The providers open a new client after
        # close(), so this only reaches a request that raced close() in another thread.
        # A RuntimeError is still a failure to talk to the store, never "held".
        if "closed" in str(err):
            problem = "the provider's HTTP client was closed meanwhile; the next call opens a new one"
        else:
            problem = "the HTTP client failed"
        raise LockProviderError(f"{what}: {problem} ({type(err).__name__})", alias=alias) from err


def _safe(err: Exception, secrets: Iterable[str]) -> str:
    # httpx messages may include the request URL (our URLs carry no secrets: tokens
    # travel in headers) and what the server sent (which may echo them). Scrubbed, then
    # capped so that a proxy's HTML does not flood logs.
    return cut(decode.visible(scrub(str(err), secrets)), 200)


def error_for_status(
    alias: str, what: str, response: Answer, detail: str = "", secrets: Iterable[str] = ()
) -> LockProviderError:
    """The ``LockProviderError`` (``LockRateLimited`` for 429) for an unexpected answer.

    ``detail`` is what the server said about it (its error message); every form of
    ``secrets`` in it is masked before it is cut to length (see
    :func:`tslock_django.core.scrubbing.scrub`)."""
    cls = LockRateLimited if response.status_code == 429 else LockProviderError
    hint = {
        401: "the store refused the credentials; check the token",
        403: "the token lacks permission for this resource",
        429: "rate limited by the store; retry later",
    }.get(response.status_code, "")
    parts = [f"{what}: HTTP {response.status_code}"]
    detail = cut(decode.visible(scrub(detail, secrets)), 300)
    if detail:
        parts.append(detail)
    if hint:
        parts.append(hint)
    return cls("; ".join(parts), alias=alias, status_code=response.status_code)


def parse_json(response: Answer, *, mark_bad_numbers: bool = False) -> Any:
    """The JSON value of an answer's body, through the bounded decoder.

    Args:
        mark_bad_numbers: a number too long or not finite becomes a
            :class:`~tslock_django.core.decode.BadNumber` (a listing page, where it
            makes one record unreadable) instead of failing the whole answer.

    Raises:
        Unreadable: too large, too deep, a number too long (see above), or not JSON.
    """
    return decode.load_json(
        response.content,
        max_bytes=MAX_BODY_BYTES,
        max_depth=MAX_BODY_DEPTH,
        mark_bad_numbers=mark_bad_numbers,
    )


def json_body(alias: str, what: str, response: Answer, *, mark_bad_numbers: bool = False) -> Any:
    """The parsed JSON body, or ``LockProviderError`` if it is not JSON the provider
    can read (see :func:`parse_json`)."""
    try:
        return parse_json(response, mark_bad_numbers=mark_bad_numbers)
    except decode.Unreadable as err:
        raise LockProviderError(
            f"{what}: HTTP {response.status_code} with a body the provider cannot read ({err})",
            alias=alias,
            status_code=response.status_code,
        ) from err
