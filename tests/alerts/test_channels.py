"""The built-in channels against real receivers: a webhook receiver that checks the
signature, Slack's incoming webhooks as documented, email through Django's locmem and
SMTP backends; and every way a send fails (refused, HTTP 500, a redirect, a receiver
that answers after 10 s or drips its answer), each a ``ChannelError`` within the
channel's timeout that repeats no secret, in its message, a log line or a ``repr``."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import smtplib
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core import mail
from django.test import override_settings

from tests import test_async_http_tls
from tslock_django.alerts import (
    ChannelError,
    EmailChannel,
    InvalidAlertChannel,
    Notice,
    SlackChannel,
    WebhookChannel,
)

from .receivers import (
    SlackReceiver,
    WebhookReceiver,
    answer_after,
    closed_port,
    drip_body,
    drip_head,
    hang_up,
    http_server,
    raw_server,
)

AT = datetime(2026, 12, 4, 8, 30, tzinfo=timezone.utc)
SECRET = "whsec-signing-7Kq2pLx9"
HOOK_PATH = "/services/T0TEAM001/B0HOOK002/Xy7aQ9sLkP3mN8bV2cR5tW1z"
#: A token in a webhook URL's query and a path: the URL's secret parts.
WEBHOOK_PATH = "/hooks/tslock-9f8e7d6c5b4a"
WEBHOOK_QUERY = "token=query-token-31415926"
#: Generous: the sends under test end at their 1 s timeout; this only tells "bounded"
#: from "held for the server's 10 s or for ever".
MARGIN = 3.0

#: The self-signed certificate for 127.0.0.1 of the TLS tests of the stores.
certificate = test_async_http_tls.certificate


def notice(**changes: object) -> Notice:
    base = Notice(
        name="nightly-export",
        status="failing",
        previous="ok",
        reason="the last run failed: ValueError: bad row 17",
        at=AT,
        last_started_at=AT - timedelta(minutes=5),
        last_success_at=AT - timedelta(days=1),
        id=17,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def secrets_of_webhook(base: str) -> tuple[str, ...]:
    return (SECRET, WEBHOOK_PATH, "query-token-31415926", base + WEBHOOK_PATH)


def assert_hides(text: str, secrets: tuple[str, ...]) -> None:
    for secret in secrets:
        assert secret not in text, f"{secret!r} shows in {text!r}"
        assert secret.strip("/") not in text


# -- webhook ----------------------------------------------------------------------------------


def test_a_signed_webhook_carries_the_notice_and_a_signature_the_receiver_verifies() -> None:
    receiver = WebhookReceiver(secret=SECRET)
    with http_server(receiver) as base:
        channel = WebhookChannel(url=f"{base}{WEBHOOK_PATH}?{WEBHOOK_QUERY}", secret=SECRET)
        channel.send(notice())
    [got] = receiver.received
    assert got.signature_valid is True
    assert got.path == f"{WEBHOOK_PATH}?{WEBHOOK_QUERY}"
    assert got.headers["content-type"] == "application/json"
    assert got.headers["x-tslock-notification-id"] == "17"
    assert json.loads(got.body) == {
        "name": "nightly-export",
        "status": "failing",
        "previous": "ok",
        "reason": "the last run failed: ValueError: bad row 17",
        "at": "2026-12-04T08:30:00+00:00",
        "last_started_at": "2026-12-04T08:25:00+00:00",
        "last_success_at": "2026-12-03T08:30:00+00:00",
    }
    # The signature is over the raw bytes: one more byte and it no longer matches.
    expected = hmac.new(SECRET.encode(), got.body + b" ", hashlib.sha256).hexdigest()
    assert got.headers["x-tslock-signature"] != f"sha256={expected}"


def test_a_receiver_with_another_secret_refuses_it_and_the_send_fails() -> None:
    receiver = WebhookReceiver(secret="the-receivers-own-secret")
    with http_server(receiver) as base:
        channel = WebhookChannel(url=f"{base}/hook", secret=SECRET)
        with pytest.raises(ChannelError, match="HTTP 401: bad signature") as caught:
            channel.send(notice())
    assert receiver.received[0].signature_valid is False
    assert caught.value.status_code == 401


def test_without_a_secret_or_an_id_no_such_header_is_sent() -> None:
    receiver = WebhookReceiver(status=200, answer=b"thanks")
    with http_server(receiver) as base:
        WebhookChannel(url=f"{base}/hook").send(notice(id=None, status="ok", previous="failing", reason=""))
    [got] = receiver.received
    assert "x-tslock-signature" not in got.headers
    assert "x-tslock-notification-id" not in got.headers
    assert json.loads(got.body)["status"] == "ok"


def test_the_same_notice_sent_twice_has_the_same_id_so_a_receiver_can_drop_the_repeat() -> None:
    receiver = WebhookReceiver(secret=SECRET)
    with http_server(receiver) as base:
        channel = WebhookChannel(url=f"{base}/hook", secret=SECRET)
        channel.send(notice())
        channel.send(notice())
    ids = [got.headers["x-tslock-notification-id"] for got in receiver.received]
    assert ids == ["17", "17"]
    assert receiver.received[0].body == receiver.received[1].body


def test_a_secret_in_the_reason_is_masked_in_what_is_sent() -> None:
    receiver = WebhookReceiver()
    with http_server(receiver) as base:
        WebhookChannel(url=f"{base}/hook").send(notice(reason="connect failed: password=hunter2-long"))
    assert json.loads(receiver.received[0].body)["reason"] == "connect failed: password=***"


def test_http_500_is_a_channel_error_naming_the_status_and_no_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # The receiver echoes what it got, the URL and the secret included.
    receiver = WebhookReceiver(status=500)
    with http_server(receiver) as base:
        url = f"{base}{WEBHOOK_PATH}?{WEBHOOK_QUERY}"
        receiver.answer = f"boom at {url} with {SECRET}".encode()
        channel = WebhookChannel(url=url, secret=SECRET)
        with pytest.raises(ChannelError) as caught:
            channel.send(notice())
    message = str(caught.value)
    assert message.startswith(f"webhook at {base}: HTTP 500: boom at ")
    assert caught.value.status_code == 500
    assert caught.value.__cause__ is None
    assert_hides(message, secrets_of_webhook(base))
    assert_hides(repr(channel), secrets_of_webhook(base))


@pytest.mark.parametrize("in_a_loop", [False, True])
def test_no_log_line_shows_the_urls_secrets(caplog: pytest.LogCaptureFixture, in_a_loop: bool) -> None:
    """httpx logs each request's URL at INFO; the channel's secrets are masked there
    (this channel is not in TSLOCK_ALERTS: the send's own secrets are known)."""
    caplog.set_level(logging.DEBUG)
    receiver = WebhookReceiver(status=500, answer=b"no")
    with http_server(receiver) as base:
        channel = WebhookChannel(url=f"{base}{WEBHOOK_PATH}?{WEBHOOK_QUERY}", secret=SECRET)

        async def from_a_loop() -> None:
            channel.send(notice())

        with pytest.raises(ChannelError):
            asyncio.run(from_a_loop()) if in_a_loop else channel.send(notice())
    lines = [record.getMessage() for record in caplog.records]
    assert any(line.startswith(f"HTTP Request: POST {base}") for line in lines), lines
    for line in lines:
        assert_hides(line, secrets_of_webhook(base))


def test_a_redirect_is_not_followed() -> None:
    receiver = WebhookReceiver(status=302, extra_headers={"Location": "http://127.0.0.1:9/elsewhere"})
    with (
        http_server(receiver) as base,
        pytest.raises(ChannelError, match="HTTP 302, a redirect, which is not followed") as caught,
    ):
        WebhookChannel(url=f"{base}/hook").send(notice())
    assert len(receiver.received) == 1
    assert "elsewhere" not in str(caught.value)


def test_connection_refused_is_a_channel_error_without_the_urls_secrets() -> None:
    base = f"http://127.0.0.1:{closed_port()}"
    channel = WebhookChannel(url=f"{base}{WEBHOOK_PATH}?{WEBHOOK_QUERY}", secret=SECRET)
    with pytest.raises(ChannelError, match=r"could not connect \(ConnectError") as caught:
        channel.send(notice())
    assert str(caught.value).startswith(f"webhook at {base}: ")
    assert caught.value.status_code is None
    assert_hides(str(caught.value), secrets_of_webhook(base))


@pytest.mark.parametrize(
    ("behaviour", "name"),
    [(answer_after(10), "answers after 10 s"), (drip_body, "drips its body"), (drip_head, "drips its head")],
)
def test_a_slow_receiver_fails_the_send_within_its_timeout(behaviour: object, name: str) -> None:
    with raw_server(behaviour) as base:  # type: ignore[arg-type]
        channel = WebhookChannel(url=f"{base}{WEBHOOK_PATH}", secret=SECRET, timeout=1)
        started = time.monotonic()
        with pytest.raises(ChannelError, match=r"no answer within 1 s, the timeout option") as caught:
            channel.send(notice())
        took = time.monotonic() - started
    assert took < 1 + MARGIN, f"a receiver that {name} held the send for {took:.1f} s"
    assert_hides(str(caught.value), secrets_of_webhook(base))


def test_a_receiver_that_hangs_up_is_a_failed_exchange() -> None:
    with raw_server(hang_up) as base:
        channel = WebhookChannel(url=f"{base}{WEBHOOK_PATH}?{WEBHOOK_QUERY}", secret=SECRET)
        with pytest.raises(ChannelError, match=r"the exchange failed \(RemoteProtocolError: ") as caught:
            channel.send(notice())
    assert caught.value.status_code is None
    assert_hides(str(caught.value), secrets_of_webhook(base))


def test_a_send_leaves_the_callers_event_loop_as_it_was() -> None:
    """Code that set an event loop for its thread (and reads it back later) still has it
    after a channel sent a notice (``asyncio.run`` would have cleared it)."""
    receiver = WebhookReceiver()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        with http_server(receiver) as base:
            WebhookChannel(url=f"{base}/hook").send(notice())
        assert asyncio.get_event_loop_policy().get_event_loop() is loop
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert len(receiver.received) == 1


def test_a_timeout_from_a_running_event_loop_is_the_same_error() -> None:
    with raw_server(answer_after(10)) as base:
        channel = WebhookChannel(url=f"{base}/hook", timeout=1)

        async def job_end() -> None:
            channel.send(notice())

        started = time.monotonic()
        with pytest.raises(ChannelError, match="no answer within 1 s"):
            asyncio.run(job_end())
    assert time.monotonic() - started < 1 + MARGIN


def test_a_long_answer_is_read_only_to_its_start() -> None:
    receiver = WebhookReceiver(status=503, answer=b"overloaded " + b"x" * 1_000_000)
    with (
        http_server(receiver) as base,
        pytest.raises(ChannelError, match=r"HTTP 503: overloaded x+\.\.\.$") as caught,
    ):
        WebhookChannel(url=f"{base}/hook").send(notice())
    assert len(str(caught.value)) < 300


def test_a_channel_called_from_a_running_event_loop_still_sends() -> None:
    receiver = WebhookReceiver()
    with http_server(receiver) as base:
        channel = WebhookChannel(url=f"{base}/hook")

        async def job_end() -> None:
            channel.send(notice())

        asyncio.run(job_end())
    assert len(receiver.received) == 1


def test_a_receiver_whose_certificate_is_not_trusted_is_not_sent_the_notice(
    certificate: tuple[Path, Path],
) -> None:
    receiver = WebhookReceiver()
    with http_server(receiver, tls=certificate) as base:
        channel = WebhookChannel(url=f"{base}{WEBHOOK_PATH}", secret=SECRET)
        with pytest.raises(
            ChannelError, match=r"could not connect \(ConnectError: .*CERTIFICATE_VERIFY_FAILED"
        ):
            channel.send(notice())
    assert receiver.received == []


def test_a_certificate_trusted_through_ssl_cert_file_is_accepted(certificate: tuple[Path, Path]) -> None:
    """httpx's own TLS settings, environment included: a private CA is trusted by
    pointing SSL_CERT_FILE at it (here, in a fresh process, since the settings are read
    once per process)."""
    receiver = WebhookReceiver(secret=SECRET)
    with http_server(receiver, tls=certificate) as base:
        code = (
            "import django; django.setup()\n"
            "from tests.alerts.test_channels import notice, SECRET\n"
            "from tslock_django.alerts import WebhookChannel\n"
            f"WebhookChannel(url={base + '/in'!r}, secret=SECRET).send(notice())\n"
        )
        env = {**os.environ, "SSL_CERT_FILE": str(certificate[0]), "DJANGO_SETTINGS_MODULE": "tests.settings"}
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert [got.signature_valid for got in receiver.received] == [True]


# -- Slack --------------------------------------------------------------------------------------


def test_slack_gets_a_text_naming_the_job_the_status_and_the_reason() -> None:
    slack = SlackReceiver(hooks={HOOK_PATH: "active"})
    with http_server(slack) as base:
        SlackChannel(url=base + HOOK_PATH).send(notice(reason="exit status 3 <see log> & retry"))
        SlackChannel(url=base + HOOK_PATH).send(notice(status="ok", previous="failing", reason=""))
    assert slack.messages == [
        {"text": "nightly-export is failing (was ok): exit status 3 &lt;see log&gt; &amp; retry"},
        {"text": "nightly-export is ok again (was failing)"},
    ]


@pytest.mark.parametrize(
    ("state", "status", "says"),
    [
        ("removed", 404, "HTTP 404: no_service: the webhook is disabled, removed or mistyped"),
        ("archived", 410, "HTTP 410: channel_is_archived: the webhook's channel is archived"),
        ("rate_limited", 429, "HTTP 429: rate_limited: rate limited; retried at the next evaluation"),
    ],
)
def test_slack_refusing_a_hook_is_an_error_that_says_why(state: str, status: int, says: str) -> None:
    slack = SlackReceiver(hooks={HOOK_PATH: state})
    with http_server(slack) as base:
        channel = SlackChannel(url=base + HOOK_PATH)
        with pytest.raises(ChannelError) as caught:
            channel.send(notice())
    assert str(caught.value).startswith(f"Slack at {base}: {says}")
    assert caught.value.status_code == status
    assert_hides(str(caught.value) + repr(channel), (HOOK_PATH, "Xy7aQ9sLkP3mN8bV2cR5tW1z"))


def test_slack_redirecting_is_not_followed() -> None:
    receiver = WebhookReceiver(status=301, extra_headers={"Location": "https://hooks.slack.com/elsewhere"})
    with (
        http_server(receiver) as base,
        pytest.raises(ChannelError, match="HTTP 301, a redirect, which is not followed") as caught,
    ):
        SlackChannel(url=base + HOOK_PATH).send(notice())
    assert len(receiver.received) == 1
    assert caught.value.status_code == 301


def test_slack_says_invalid_payload_for_a_body_it_cannot_read() -> None:
    # What Slack answers a message without text: the receiver follows Slack's docs, and
    # the channel's error says so.
    slack = SlackReceiver(hooks={HOOK_PATH: "active"})
    with http_server(slack) as base:
        channel = SlackChannel(url=base + HOOK_PATH)
        original = SlackChannel.text
        try:
            SlackChannel.text = staticmethod(lambda notice: "")  # type: ignore[method-assign,assignment]
            with pytest.raises(
                ChannelError, match="HTTP 400: invalid_payload: Slack could not read the message"
            ):
                channel.send(notice())
        finally:
            SlackChannel.text = original  # type: ignore[method-assign]
    assert slack.messages == []


# -- email --------------------------------------------------------------------------------------

LOCMEM = "django.core.mail.backends.locmem.EmailBackend"


@override_settings(
    EMAIL_BACKEND=LOCMEM,
    ADMINS=[("Ops", "ops@example.com"), ("On call", "oncall@example.com")],
    SERVER_EMAIL="tslock@example.com",
    EMAIL_SUBJECT_PREFIX="[Site] ",
    TIME_ZONE="Europe/Berlin",
)
def test_email_goes_to_admins_with_the_job_and_status_in_the_subject() -> None:
    mail.outbox = []
    EmailChannel().send(notice())
    [message] = mail.outbox
    assert message.subject == "[Site] nightly-export is failing (was ok)"
    assert message.to == ["ops@example.com", "oncall@example.com"]
    assert message.from_email == "tslock@example.com"
    assert "Reason: the last run failed: ValueError: bad row 17" in message.body
    assert "Seen at: 2026-12-04 09:30:00+01:00" in message.body  # in TIME_ZONE
    assert "Last started: 2026-12-04 09:25:00+01:00" in message.body
    assert "Last success: 2026-12-03 09:30:00+01:00" in message.body
    assert "Notification 17" in message.body


@override_settings(
    EMAIL_BACKEND=LOCMEM, ADMINS=[], SERVER_EMAIL="tslock@example.com", EMAIL_SUBJECT_PREFIX="[Site] "
)
def test_email_to_recipients_uses_send_mail_from_server_email() -> None:
    mail.outbox = []
    EmailChannel(recipients=["team@example.com"]).send(notice(status="running_long", last_success_at=None))
    [message] = mail.outbox
    assert message.subject == "[Site] nightly-export is running long (was ok)"
    assert message.to == ["team@example.com"]
    assert message.from_email == "tslock@example.com"
    assert "Last success: never" in message.body


@override_settings(EMAIL_BACKEND=LOCMEM, ADMINS=[])
def test_email_to_admins_without_admins_fails_rather_than_sending_nothing() -> None:
    mail.outbox = []
    with pytest.raises(ChannelError, match="ADMINS is empty"):
        EmailChannel().send(notice())
    assert mail.outbox == []


def test_an_smtp_server_that_refuses_is_a_channel_error_without_its_password() -> None:
    port = closed_port()
    with (
        override_settings(
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=port,
            EMAIL_HOST_USER="tslock",
            EMAIL_HOST_PASSWORD="smtp-password-2718",
        ),
        pytest.raises(ChannelError, match=r"email: not sent \(ConnectionRefusedError") as caught,
    ):
        EmailChannel(recipients=["team@example.com"]).send(notice())
    assert "smtp-password-2718" not in str(caught.value)


def test_an_smtp_server_that_never_greets_fails_within_the_timeout() -> None:
    """The timeout reaches Django's SMTP backend: without it, smtplib would wait for
    the greeting for ever (or EMAIL_TIMEOUT, unset here)."""
    with (
        raw_server_greeting_never() as port,
        override_settings(
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=port,
        ),
    ):
        started = time.monotonic()
        with pytest.raises(ChannelError, match=r"email: not sent \((TimeoutError|SMTPServerDisconnected)"):
            EmailChannel(recipients=["team@example.com"], timeout=1).send(notice())
        took = time.monotonic() - started
    assert took < 1 + MARGIN, f"a silent SMTP server held the send for {took:.1f} s"
    assert smtplib.SMTP  # the backend under test


class raw_server_greeting_never:
    """An SMTP port that accepts connections and never says a word."""

    def __enter__(self) -> int:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()
        self.conns: list[socket.socket] = []

        def accept() -> None:
            while not self.stop.is_set():
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    return
                self.conns.append(conn)

        threading.Thread(target=accept, daemon=True).start()
        return int(self.listener.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.listener.close()
        for conn in self.conns:
            conn.close()


# -- options ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: WebhookChannel(), "the url option is required"),
        (
            lambda: WebhookChannel(url="ftp://files.example.com/x"),
            "url must be an https:// (or http://) URL; got a ftp: URL",
        ),
        (lambda: WebhookChannel(url="hooks.example.com/x"), "url must be an https:// (or http://) URL"),
        (
            lambda: SlackChannel(url=urlsplit("https://hooks.slack.com/x")),
            "url must be text, an https:// URL; got a SplitResult (read it with env.str(), not env.url())",
        ),
        (lambda: WebhookChannel(url="https:///path-only"), "url has no host"),
        (lambda: WebhookChannel(url="https://h.example.com/a b"), "url holds spaces or control characters"),
        (lambda: WebhookChannel(url="https://h.example.com:port/"), "not a URL that can be read"),
        (lambda: WebhookChannel(url="https://h.example.com/", secret=""), "secret is empty"),
        (lambda: WebhookChannel(url="https://h.example.com/", secret=123), "secret must be text"),
        (
            lambda: WebhookChannel(url="https://h.example.com/", secrett="x"),
            "unknown option 'secrett' (did you mean 'secret'?); the options are: url, secret, timeout",
        ),
        (
            lambda: WebhookChannel(url="https://h.example.com/", timeout=0),
            "timeout must be a number of seconds above 0",
        ),
        (lambda: WebhookChannel(url="https://h.example.com/", timeout="5s"), "got '5s'"),
        (lambda: WebhookChannel(url="https://h.example.com/", timeout=float("nan")), "got nan"),
        (lambda: WebhookChannel(url="https://h.example.com/", timeout=float("inf")), "got inf"),
        (lambda: WebhookChannel(url="https://h.example.com/", timeout=True), "got True"),
        (lambda: WebhookChannel(url="https://h.example.com/", timeout=600), "at most 60"),
        (lambda: SlackChannel(url="https://hooks.slack.com/x", channel="#ops"), "unknown option 'channel'"),
        (lambda: EmailChannel(recipients="ops@example.com"), "recipients must be a list of addresses"),
        (lambda: EmailChannel(recipients=[]), "recipients is empty; leave it out to send to ADMINS"),
        (lambda: EmailChannel(recipients=["ops"]), "recipients holds 'ops', which is not an email address"),
    ],
)
def test_bad_options_are_refused_when_the_channel_is_built(build: object, says: str) -> None:
    with pytest.raises(InvalidAlertChannel) as caught:
        build()  # type: ignore[operator]
    assert says in str(caught.value)


def test_a_url_is_never_quoted_in_an_option_error() -> None:
    with pytest.raises(InvalidAlertChannel) as caught:
        WebhookChannel(url="gopher://user:pw-123456@h.example.com/secret-path-4242?token=t0k3n")
    assert_hides(str(caught.value), ("pw-123456", "secret-path-4242", "t0k3n"))


def test_reprs_show_the_receiver_but_no_secret() -> None:
    webhook = WebhookChannel(
        url=f"https://user:pw-123456@hooks.example.com{WEBHOOK_PATH}?{WEBHOOK_QUERY}", secret=SECRET
    )
    slack = SlackChannel(url="https://hooks.slack.com" + HOOK_PATH, timeout=2)
    assert repr(webhook) == "WebhookChannel(url='https://hooks.example.com/***', signed=True, timeout=5)"
    assert repr(slack) == "SlackChannel(url='https://hooks.slack.com/***', timeout=2)"
    assert repr(EmailChannel()) == "EmailChannel(to='ADMINS', timeout=5)"
    assert repr(EmailChannel(recipients=["a@example.com"])) == "EmailChannel(to=['a@example.com'], timeout=5)"
