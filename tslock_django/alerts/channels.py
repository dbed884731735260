"""The built-in channels: email (Django's ``mail_admins``, or ``send_mail`` to given
recipients), a webhook (a signed JSON POST) and Slack (an incoming webhook).

Each checks its OPTIONS when it is built, so a wrong setting is a system check's error
at start-up rather than a lost notice later; each ``send`` has a deadline (the
``timeout`` option) and raises :class:`~tslock_django.alerts.ChannelError`, whose
message never repeats a secret, when the notice was not taken. Nothing here is imported
by a send that did not happen: the mail framework and httpx load on first use.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from ..core import decode
from ..core.scrubbing import MASK, cut, hide_secrets, scrub, url_origin, url_secrets
from .errors import ChannelError, InvalidAlertChannel
from .notice import Notice

#: Seconds a send may take when the ``timeout`` option is not given, and the most it may
#: be given: a channel is called at the end of a job's run, which it must not hold long.
DEFAULT_TIMEOUT = 5.0
MAX_TIMEOUT = 60.0

#: What the HTTP channels send as their ``User-Agent``.
USER_AGENT = "tslock-django"

#: A scheme quoted in an error: a short word (a longer text in its place may be a secret
#: written where the scheme goes).
_SCHEME_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,19}")

# -- the text a person reads -------------------------------------------------------------------


def headline(notice: Notice) -> str:
    """One line naming the job and its new and previous status: an email's subject, the
    start of a Slack message. ``nightly-export is failing (was ok)``."""
    status, previous = _word(notice.status), _word(notice.previous)
    state = "ok again" if notice.status == "ok" else status
    # One line whatever the name holds: a line break in a subject is refused by the
    # mail framework, and would start a new line in a chat message.
    return " ".join(f"{notice.name} is {state} (was {previous})".split())


def describe(notice: Notice) -> str:
    """An email's body: the headline, why, and when (in ``TIME_ZONE``)."""
    lines = [
        headline(notice) + ".",
        "",
        f"Reason: {hide_secrets(notice.reason)}",
        f"Seen at: {_when(notice.at)}",
        f"Last started: {_when(notice.last_started_at)}",
        f"Last success: {_when(notice.last_success_at)}",
    ]
    if notice.id is not None:
        lines += ["", f"Notification {notice.id} of tslock-django."]
    return "\n".join(lines) + "\n"


def _word(status: str) -> str:
    return status.replace("_", " ")


def _when(value: datetime | None) -> str:
    if value is None:
        return "never"
    from django.utils import timezone

    return timezone.localtime(value).isoformat(sep=" ", timespec="seconds")


# -- OPTIONS ----------------------------------------------------------------------------------


def refuse_unknown(channel: str, unknown: Mapping[str, object], known: Iterable[str]) -> None:
    """Raise for OPTIONS a channel does not have, naming the closest known one.

    Raises:
        InvalidAlertChannel: ``unknown`` is not empty.
    """
    if not unknown:
        return
    import difflib  # only for a mistake

    known = list(known)
    name = str(next(iter(unknown)))
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise InvalidAlertChannel(
        f"{channel}: unknown option {name!r}{hint}; the options are: {', '.join(known)}"
    )


def read_timeout(channel: str, value: object) -> float:
    """The ``timeout`` option: seconds, more than 0 and at most :data:`MAX_TIMEOUT`.

    Raises:
        InvalidAlertChannel: anything else.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_TIMEOUT:
        return float(value)  # (NaN fails the comparison, infinity the bound)
    shown = repr(value) if isinstance(value, (int, float, str)) else f"a {type(value).__name__}"
    raise InvalidAlertChannel(
        f"{channel}: timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:g} "
        f"(e.g. 5); got {cut(shown, 40)}"
    )


def read_http_url(channel: str, value: object) -> str:
    """The ``url`` option: an ``http://`` or ``https://`` URL with a host. An error never
    quotes the URL: its path or query may be the credential.

    Raises:
        InvalidAlertChannel: missing, not text, or not such a URL.
    """
    if value is None:
        raise InvalidAlertChannel(f"{channel}: the url option is required: the receiver's https:// URL")
    if not isinstance(value, str):
        # django-environ's env.url() gives a urllib ParseResult.
        hint = " (read it with env.str(), not env.url())" if hasattr(value, "geturl") else ""
        raise InvalidAlertChannel(
            f"{channel}: url must be text, an https:// URL; got a {type(value).__name__}{hint}"
        )
    if not value.isprintable() or any(ch.isspace() for ch in value):
        raise InvalidAlertChannel(f"{channel}: url holds spaces or control characters; give the URL alone")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - a port that is not a number raises here, not at the first send
    except ValueError:
        raise InvalidAlertChannel(
            f"{channel}: url is not a URL that can be read (a bad port or bracket)"
        ) from None
    if parts.scheme.lower() not in ("http", "https"):
        scheme = parts.scheme if _SCHEME_WORD.fullmatch(parts.scheme) else ""
        got = f"; got a {scheme}: URL" if scheme else ""
        raise InvalidAlertChannel(f"{channel}: url must be an https:// (or http://) URL{got}")
    if not parts.hostname:
        raise InvalidAlertChannel(f"{channel}: url has no host; give the whole URL, https://host/path")
    return value


def shown_url(url: str) -> str:
    """What a ``repr`` shows of a URL: its origin, and ``/***`` for the rest if any."""
    parts = urlsplit(url)
    rest = parts.path not in ("", "/") or parts.query or parts.fragment
    return url_origin(url) + (f"/{MASK}" if rest else "/")


# -- the channels -----------------------------------------------------------------------------


class EmailChannel:
    """Email through Django's mail framework (``EMAIL_BACKEND``).

    Without ``recipients``, to ``ADMINS`` with ``mail_admins`` (from ``SERVER_EMAIL``,
    subject prefixed with ``EMAIL_SUBJECT_PREFIX``); with them, the same message to
    those addresses with ``send_mail``. The subject names the job and its status
    (``nightly-export is failing (was ok)``); the body says why, and when (in
    ``TIME_ZONE``).

    Args:
        recipients: addresses to send to instead of ``ADMINS``.
        timeout: seconds each wait on the mail server may take, given to the backend
            when it accepts a ``timeout`` (Django's SMTP backend does); default 5.

    Raises:
        InvalidAlertChannel: an unknown option or a bad value.
    """

    def __init__(
        self,
        recipients: list[str] | tuple[str, ...] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        **unknown: object,
    ) -> None:
        refuse_unknown("EmailChannel", unknown, ("recipients", "timeout"))
        self.recipients = None if recipients is None else self._addresses(recipients)
        self.timeout = read_timeout("EmailChannel", timeout)

    @staticmethod
    def _addresses(recipients: object) -> tuple[str, ...]:
        if isinstance(recipients, str) or not isinstance(recipients, (list, tuple)):
            raise InvalidAlertChannel(
                "EmailChannel: recipients must be a list of addresses, e.g. ['ops@example.com']; "
                f"got a {type(recipients).__name__}"
            )
        if not recipients:
            raise InvalidAlertChannel(
                "EmailChannel: recipients is empty; leave it out to send to ADMINS, or name an address"
            )
        for address in recipients:
            if (
                not isinstance(address, str)
                or "@" not in address
                or any(ch.isspace() for ch in address.strip())
            ):
                shown = (
                    cut(decode.visible(address), 60) if isinstance(address, str) else type(address).__name__
                )
                raise InvalidAlertChannel(
                    f"EmailChannel: recipients holds {shown!r}, which is not an email address (name@domain)"
                )
        return tuple(address.strip() for address in recipients)

    def __repr__(self) -> str:
        to = "ADMINS" if self.recipients is None else list(self.recipients)
        return f"EmailChannel(to={to!r}, timeout={self.timeout:g})"

    def send(self, notice: Notice) -> None:
        """Send the notice as one email.

        Raises:
            ChannelError: the mail backend failed (the message names its exception's
                class), or there is no one to send to (``ADMINS`` is empty).
        """
        from django.conf import settings
        from django.core import mail

        subject, body = headline(notice), describe(notice)
        if self.recipients is None and not settings.ADMINS:
            # mail_admins would return quietly, and the notice would count as sent.
            raise ChannelError(
                "email: ADMINS is empty, so mail_admins sends nothing; set ADMINS or recipients"
            )
        try:
            connection = self._connection()
            if self.recipients is None:
                mail.mail_admins(subject, body, fail_silently=False, connection=connection)
            else:
                mail.send_mail(
                    f"{settings.EMAIL_SUBJECT_PREFIX}{subject}",
                    body,
                    settings.SERVER_EMAIL,
                    list(self.recipients),
                    fail_silently=False,
                    connection=connection,
                )
        except Exception as err:  # noqa: BLE001 - any backend's failure is the channel's
            password = getattr(settings, "EMAIL_HOST_PASSWORD", "") or ""
            said = cut(decode.visible(hide_secrets(scrub(str(err), [password]))), 200) or "no detail"
            # Not chained: the cause's text is the unscrubbed one.
            raise ChannelError(f"email: not sent ({type(err).__name__}: {said})") from None

    def _connection(self) -> Any:
        """A connection of ``EMAIL_BACKEND``, given the timeout where its constructor
        takes one (the SMTP backend's bounds each wait on the server)."""
        from django.conf import settings
        from django.core import mail
        from django.utils.module_loading import import_string

        backend = import_string(settings.EMAIL_BACKEND)
        try:
            takes_timeout = "timeout" in inspect.signature(backend).parameters
        except (TypeError, ValueError):  # a signature Python cannot read: give nothing extra
            takes_timeout = False
        options: dict[str, Any] = {"timeout": self.timeout} if takes_timeout else {}
        return mail.get_connection(fail_silently=False, **options)


class WebhookChannel:
    """A JSON POST of :meth:`Notice.as_json() <tslock_django.alerts.Notice.as_json>` to
    ``url`` (its ``reason`` scrubbed of secrets once more).

    With ``secret``, the header ``X-Tslock-Signature: sha256=<hex>`` carries the
    HMAC-SHA256 of the raw body with the secret, so the receiver can tell the notice
    came from here; ``X-Tslock-Notification-Id`` carries the notice's id (the same for
    every attempt), so it can drop a repeat. Redirects are not followed; any answer but
    2xx is a failure.

    Args:
        url: the receiver, ``https://`` (or ``http://``).
        secret: the shared secret the receiver checks the signature with.
        timeout: seconds the whole exchange may take; default 5.

    Raises:
        InvalidAlertChannel: an unknown option or a bad value.
    """

    #: OPTIONS whose values are secrets (see ``core.scrubbing.channel_secrets``).
    secret_options = frozenset({"url", "secret"})

    def __init__(
        self,
        url: str | None = None,
        *,
        secret: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        **unknown: object,
    ) -> None:
        refuse_unknown("WebhookChannel", unknown, ("url", "secret", "timeout"))
        self.url = read_http_url("WebhookChannel", url)
        if secret is not None and not isinstance(secret, str):
            raise InvalidAlertChannel(f"WebhookChannel: secret must be text; got a {type(secret).__name__}")
        if secret is not None and not secret.strip():
            raise InvalidAlertChannel(
                "WebhookChannel: secret is empty; give the shared secret the receiver checks the "
                "signature with, or leave secret out to send unsigned"
            )
        self._secret = secret
        self.timeout = read_timeout("WebhookChannel", timeout)
        self._secrets = (*url_secrets(self.url), *([secret] if secret else []))

    def __repr__(self) -> str:
        signed = self._secret is not None
        return f"WebhookChannel(url={shown_url(self.url)!r}, signed={signed}, timeout={self.timeout:g})"

    def body(self, notice: Notice) -> bytes:
        """The raw body sent (and signed): the notice's JSON, its reason scrubbed."""
        payload = notice.as_json()
        payload["reason"] = hide_secrets(payload["reason"])
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def send(self, notice: Notice) -> None:
        """POST the notice.

        Raises:
            ChannelError: no answer within ``timeout``, or one that is not 2xx (its
                status and the start of its text, scrubbed).
        """
        from .posting import post

        body = self.body(notice)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Accept-Encoding": "identity",
        }
        if self._secret is not None:
            digest = hmac.new(self._secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
            headers["X-Tslock-Signature"] = f"sha256={digest}"
        if notice.id is not None:
            headers["X-Tslock-Notification-Id"] = str(notice.id)
        reply = post("webhook", self.url, body, headers, timeout=self.timeout, secrets=self._secrets)
        if reply.is_success:
            return
        where = f"webhook at {url_origin(self.url)}: HTTP {reply.status_code}"
        if 300 <= reply.status_code < 400:
            raise ChannelError(
                f"{where}, a redirect, which is not followed; set url to where the receiver is now",
                status_code=reply.status_code,
            )
        said = _answer_text(reply.text, self._secrets)
        raise ChannelError(f"{where}{': ' + said if said else ''}", status_code=reply.status_code)


#: What Slack's incoming webhooks answer for a message they refuse (their docs' list),
#: and what to do about it.
SLACK_ERRORS = {
    "invalid_payload": "Slack could not read the message",
    "no_service": "the webhook is disabled, removed or mistyped; make a new one and set url to it",
    "no_service_id": "the URL is incomplete; copy the whole webhook URL",
    "no_team": "the workspace is gone or the URL is mistyped",
    "team_disabled": "the workspace is disabled",
    "invalid_token": "the webhook's token is no longer valid; make a new webhook",
    "channel_not_found": "the webhook's channel no longer exists",
    "channel_is_archived": "the webhook's channel is archived",
    "action_prohibited": "an admin has restricted posting to the webhook's channel",
    "posting_to_general_channel_denied": "only admins may post to the webhook's channel",
    "user_not_found": "the webhook's user no longer exists",
}


class SlackChannel:
    """A message to a Slack channel through an incoming webhook: JSON ``{"text": ...}``
    naming the job, its status and why.

    Slack answers ``200 ok``, or 400/403/404/410 with an error's name as plain text
    (``invalid_payload``, ``no_service``...); the error says which and what to do.

    Args:
        url: the incoming webhook's URL (``https://hooks.slack.com/services/...``): the
            URL is the credential, so no message or ``repr`` shows its path.
        timeout: seconds the whole exchange may take; default 5.

    Raises:
        InvalidAlertChannel: an unknown option or a bad value.
    """

    secret_options = frozenset({"url"})

    def __init__(
        self, url: str | None = None, *, timeout: float = DEFAULT_TIMEOUT, **unknown: object
    ) -> None:
        refuse_unknown("SlackChannel", unknown, ("url", "timeout"))
        self.url = read_http_url("SlackChannel", url)
        self.timeout = read_timeout("SlackChannel", timeout)
        self._secrets = tuple(url_secrets(self.url))

    def __repr__(self) -> str:
        return f"SlackChannel(url={shown_url(self.url)!r}, timeout={self.timeout:g})"

    @staticmethod
    def text(notice: Notice) -> str:
        """The message: the headline and the reason, with Slack's three control
        characters escaped as its docs ask (``&``, ``<``, ``>``)."""
        text = f"{headline(notice)}: {hide_secrets(notice.reason)}" if notice.reason else headline(notice)
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    def send(self, notice: Notice) -> None:
        """Post the message.

        Raises:
            ChannelError: no answer within ``timeout``, or Slack refused the message
                (the status, Slack's error name, and what it means).
        """
        from .posting import post

        body = json.dumps({"text": self.text(notice)}, ensure_ascii=False).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Accept-Encoding": "identity",
        }
        reply = post("Slack", self.url, body, headers, timeout=self.timeout, secrets=self._secrets)
        if reply.is_success:
            return
        where = f"Slack at {url_origin(self.url)}: HTTP {reply.status_code}"
        if 300 <= reply.status_code < 400:
            raise ChannelError(
                f"{where}, a redirect, which is not followed; check the webhook URL",
                status_code=reply.status_code,
            )
        said = _answer_text(reply.text, self._secrets)
        meaning = SLACK_ERRORS.get(said) or (
            "rate limited; retried at the next evaluation" if reply.status_code == 429 else ""
        )
        parts = [where, said, meaning]
        raise ChannelError(": ".join(part for part in parts if part), status_code=reply.status_code)


def _answer_text(text: str, secrets: Iterable[str]) -> str:
    """The start of a receiver's answer as an error may repeat it: without the
    channel's secrets (a receiver may echo the request), on one line, short."""
    return cut(decode.visible(" ".join(hide_secrets(scrub(text, secrets)).split())), 200)
