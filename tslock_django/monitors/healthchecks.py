"""Pings to a Healthchecks instance (healthchecks.io or self-hosted), by its Pinging API.

``<url>/ping/<ping_key>/<slug>/start?rid=<uuid>`` when a run starts,
``<url>/ping/<ping_key>/<slug>?rid=<uuid>`` when it succeeds and
``<url>/ping/<ping_key>/<slug>/fail?rid=<uuid>`` when it fails, errs or is lost, one run
id per run (Healthchecks pairs a start with its end by it and shows the run's duration).
The first ping of a slug in a process asks Healthchecks to create the check if it has
none (``create=1``: it answers ``201 Created`` then, ``200 OK`` otherwise); once a ping
got through, the slug's check exists. A failure ping carries the run's detail (scrubbed,
at most :data:`BODY_LIMIT` characters) as its body, which Healthchecks shows with the ping.

Sent with the standard library's ``urllib.request``, imported in the sender's thread:
Django has already loaded its HTTP layer (``http.client``), so it costs a few
milliseconds where httpx's import costs tens (issue 34: a command's start-up at most
1.05x with monitors); it honours the usual proxy variables. Every ping has a
:data:`TIMEOUT`.
"""

from __future__ import annotations

import threading
from urllib.parse import quote, urlencode

from ..core.scrubbing import cut, hide_secrets, scrub
from .config import Healthchecks
from .sender import forget_warning, warn_once

#: Seconds a ping may take (connecting and the answer); it is never the job's time.
TIMEOUT = 5.0
#: The most characters of a failure ping's body.
BODY_LIMIT = 1000
#: The path after the slug, by kind of ping.
SUFFIXES = {"start": "/start", "success": "", "fail": "/fail"}


class HealthchecksPinger:
    """Sends one instance's pings; remembers which slugs exist (got a ping through)."""

    def __init__(self, options: Healthchecks) -> None:
        self.options = options
        self._known: set[str] = set()
        self._mutex = threading.Lock()
        # Failures are logged once per instance until a ping gets through again.
        self._warning = f"healthchecks:{options.url}"

    def url(self, slug: str, kind: str, rid: str) -> str:
        """The ping's URL; with ``create=1`` while no ping of ``slug`` got through."""
        with self._mutex:
            create = slug not in self._known
        query = {"rid": rid, **({"create": "1"} if create else {})}
        key = quote(self.options.ping_key, safe="")
        return f"{self.options.url}/ping/{key}/{slug}{SUFFIXES[kind]}?{urlencode(query)}"

    def ping(self, slug: str, kind: str, rid: str, body: str = "") -> None:
        """Send one ping (``kind``: start, success or fail); a failure is logged (once
        until a ping gets through again), never raised."""
        # Imported here, in the sender's thread: a job's own thread never pays for it.
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            self.url(slug, kind, rid),
            data=self._body(body).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "text/plain; charset=utf-8", "User-Agent": "tslock-django"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                response.read(1024)
        except urllib.error.HTTPError as err:
            self._failed(slug, kind, f"HTTP {err.code} {err.reason}")
            err.close()
            return
        except (OSError, ValueError) as err:  # URLError, a timeout, a refused connection
            reason = getattr(err, "reason", None) or err
            self._failed(slug, kind, f"{type(err).__name__}: {reason}")
            return
        with self._mutex:
            self._known.add(slug)
        forget_warning(self._warning)

    def _body(self, detail: str) -> str:
        return cut(scrub(hide_secrets(detail), [self.options.ping_key]), BODY_LIMIT) if detail else ""

    def _failed(self, slug: str, kind: str, reason: str) -> None:
        shown = cut(scrub(hide_secrets(reason), [self.options.ping_key]), 300)
        warn_once(
            self._warning,
            "tslock: the healthchecks %s ping of %r did not get through (%s); the job was not affected "
            "(further failures are not logged until a ping gets through)",
            kind,
            slug,
            shown,
        )
