"""What the HTTP providers share: one pooled httpx client per provider and the rule
that every transport failure becomes a ``LockProviderError`` that names the store and
the cause but never the credentials.

httpx is imported here and only here, so ``import tslock_django`` stays free of it
until a Cloudflare provider is configured.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from ..core import decode
from ..core.secrets import cut, scrub
from ..exceptions import LockProviderError, LockRateLimited

#: As many idle keep-alive connections as open ones. With fewer (httpx keeps 20 by
#: default), httpcore 1.0.x can close an idle connection it has just handed to a waiting
#: thread when more threads than that share one provider, and the request fails with
#: EBADF (encode/httpcore#1110); seen here with 50 threads on one provider.
POOL_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)


class PooledClient:
    """One keep-alive ``httpx.Client`` shared by every thread of a provider, opened on
    first use and again after :meth:`close`, so that ``close()`` frees connections without
    leaving the provider unusable. Credentials go in ``headers`` only, never in the URL,
    so httpx's own error messages (which quote the URL) cannot leak them."""

    def __init__(
        self,
        *,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
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
                    client = self._client = httpx.Client(
                        **self._settings,  # type: ignore[arg-type]
                        transport=self._transport,
                        limits=POOL_LIMITS,
                        follow_redirects=False,
                    )
        return client

    def close(self) -> None:
        """Close the pooled connections; the next :meth:`get` opens a new client."""
        with self._mutex:
            client, self._client = self._client, None
        if client is not None:
            client.close()


@contextmanager
def transport_errors(alias: str, what: str, secrets: Iterable[str] = ()) -> Iterator[None]:
    """Turn httpx failures inside the block into ``LockProviderError``.

    ``what`` says which operation failed ("acquire 'job'"); the message keeps the
    exception's class name, which says enough (timeout, refused, reset) without
    repeating request details. Create the client inside the block too: building its
    headers can fail, and so can a client that another thread has just closed.
    ``secrets`` (the credential, the lock token sent) are scrubbed from any text of the
    server's that the message repeats: a protocol error quotes the status line it
    could not parse, and a hostile server can put the request's header there.
    """
    try:
        yield
    except httpx.TimeoutException as err:
        raise LockProviderError(
            f"{what}: the store did not answer in time ({type(err).__name__})", alias=alias
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
    alias: str, what: str, response: httpx.Response, detail: str = "", secrets: Iterable[str] = ()
) -> LockProviderError:
    """The ``LockProviderError`` (``LockRateLimited`` for 429) for an unexpected answer.

    ``detail`` is what the server said about it (its error message); every form of
    ``secrets`` in it is masked before it is cut to length (see
    :func:`tslock_django.core.secrets.scrub`)."""
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


#: The largest answer body parsed: a listing page of 1,000 keys with their metadata is
#: about 1.5 MB.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: The deepest nesting parsed in an answer (an envelope around records).
MAX_BODY_DEPTH = 32


def parse_json(response: httpx.Response, *, mark_bad_numbers: bool = False) -> Any:
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


def json_body(alias: str, what: str, response: httpx.Response, *, mark_bad_numbers: bool = False) -> Any:
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
