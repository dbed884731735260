"""``TSLOCK_ALERTS``: channels built once per settings value with stable keys, a
third-party channel class as BACKEND, each mistake a clear error and system check
``tslock.E011``, and every channel's secret hidden wherever the journal's text goes."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest
from django.test import override_settings

from tslock_django.alerts import EmailChannel, InvalidAlertChannel, Notice, SlackChannel, WebhookChannel
from tslock_django.alerts.configured import channel_key, configured_channels
from tslock_django.checks import check_alerts
from tslock_django.core.scrubbing import configured_secrets, hide_secrets

from .receivers import WebhookReceiver, http_server
from .test_channels import AT, notice

WEBHOOK = "tslock_django.alerts.WebhookChannel"
SLACK = "tslock_django.alerts.SlackChannel"
EMAIL = "tslock_django.alerts.EmailChannel"
HOOK = "https://hooks.slack.com/services/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"


class PagerChannel:
    """A third-party channel: a class with one method, built with its OPTIONS."""

    sent: list[tuple[str, Notice]] = []

    def __init__(self, service: str, urgency: str = "high") -> None:
        if urgency not in ("high", "low"):
            raise ValueError(f"urgency must be 'high' or 'low', got {urgency!r}")
        self.service = service

    def send(self, notice: Notice) -> None:
        PagerChannel.sent.append((self.service, notice))


class NoSend:
    """A class that is no channel."""


def the_setting(*entries: dict[str, object]) -> dict[str, object]:
    return {"channels": list(entries)}


@pytest.mark.parametrize("value", [None, {"channels": []}, {}])
def test_no_setting_and_no_channels_mean_no_channels(value: object) -> None:
    with override_settings(TSLOCK_ALERTS=value):
        assert configured_channels() == []
        assert check_alerts() == []


def test_channels_are_built_in_order_with_their_options() -> None:
    setting = the_setting(
        {"BACKEND": EMAIL, "OPTIONS": {"recipients": ["ops@example.com"]}},
        {"BACKEND": WEBHOOK, "OPTIONS": {"url": "https://alerts.example.com/in", "secret": "s3cret-value"}},
        {"BACKEND": SLACK, "OPTIONS": {"url": HOOK, "timeout": 2}},
        {"BACKEND": __name__ + ".PagerChannel", "OPTIONS": {"service": "billing"}},
    )
    with override_settings(TSLOCK_ALERTS=setting, ADMINS=[]):
        channels = [channel for _, channel in configured_channels()]
        assert check_alerts() == []
    assert [type(channel) for channel in channels] == [
        EmailChannel,
        WebhookChannel,
        SlackChannel,
        PagerChannel,
    ]
    assert channels[0].recipients == ("ops@example.com",)  # type: ignore[attr-defined]
    assert channels[2].timeout == 2  # type: ignore[attr-defined]


def test_a_third_party_channel_receives_the_notice() -> None:
    PagerChannel.sent.clear()
    setting = the_setting({"BACKEND": __name__ + ".PagerChannel", "OPTIONS": {"service": "billing"}})
    with override_settings(TSLOCK_ALERTS=setting):
        [(key, channel)] = configured_channels()
        channel.send(notice())
    assert key.startswith(__name__ + ".PagerChannel#")
    assert PagerChannel.sent == [("billing", notice())]


def test_keys_are_stable_and_change_with_the_destination_only() -> None:
    one = channel_key(WEBHOOK, {"url": "https://a.example.com/", "timeout": 2})
    assert one == channel_key(WEBHOOK, {"timeout": 2, "url": "https://a.example.com/"})  # key order
    # A new timeout is the same destination: what it took is not sent to it again.
    assert one == channel_key(WEBHOOK, {"url": "https://a.example.com/", "timeout": 3})
    assert one != channel_key(WEBHOOK, {"url": "https://b.example.com/", "timeout": 2})
    email = "tslock_django.alerts.EmailChannel"
    mail = channel_key(email, {"recipients": ["a@example.com", "b@example.com"]})
    assert mail == channel_key(email, {"recipients": ["b@example.com", "a@example.com"]})
    assert one != channel_key(SLACK, {"url": "https://a.example.com/", "timeout": 2})
    assert one.startswith(WEBHOOK + "#") and len(one.partition("#")[2]) == 12
    # The same in another process: nothing in it depends on this one (hash seeds, ids).
    code = (
        "from tslock_django.alerts.configured import channel_key\n"
        f"print(channel_key({WEBHOOK!r}, {{'url': 'https://a.example.com/', 'timeout': 2}}))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == one


def test_channels_are_built_once_per_settings_value() -> None:
    setting = the_setting({"BACKEND": WEBHOOK, "OPTIONS": {"url": "https://a.example.com/"}})
    with override_settings(TSLOCK_ALERTS=setting):
        first = configured_channels()
        assert configured_channels()[0][1] is first[0][1]
    with override_settings(
        TSLOCK_ALERTS=the_setting({"BACKEND": WEBHOOK, "OPTIONS": {"url": "https://b.example.com/"}})
    ):
        [(_, other)] = configured_channels()
        assert other is not first[0][1]
        assert other.url == "https://b.example.com/"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ([{"BACKEND": WEBHOOK}], "TSLOCK_ALERTS must be a dict like {'channels': ["),
        ({"channel": []}, "TSLOCK_ALERTS has an unknown key 'channel'; its one key is 'channels'"),
        ({"channels": {"BACKEND": WEBHOOK}}, "TSLOCK_ALERTS['channels'] must be a list"),
        ({"channels": [WEBHOOK]}, "TSLOCK_ALERTS['channels'][0] must be a dict with 'BACKEND'"),
        (
            {"channels": [{"BACKEND": WEBHOOK, "url": "https://a.example.com/"}]},
            "[0] has an unknown key 'url'",
        ),
        ({"channels": [{"OPTIONS": {}}]}, "TSLOCK_ALERTS['channels'][0]['BACKEND'] must be the dotted path"),
        ({"channels": [{"BACKEND": WEBHOOK, "OPTIONS": ["url"]}]}, "[0]['OPTIONS'] must be a dict"),
        (
            {
                "channels": [
                    {"BACKEND": EMAIL, "OPTIONS": {"recipients": ["a@example.com"]}},
                    {"BACKEND": "no.such.Channel"},
                ]
            },
            "TSLOCK_ALERTS['channels'][1]['BACKEND'] 'no.such.Channel' cannot be imported "
            "(ModuleNotFoundError",
        ),
        (
            {"channels": [{"BACKEND": __name__ + ".NoSend"}]},
            "[0]['BACKEND'] 'tests.alerts.test_configured.NoSend' is a class without a send method",
        ),
        ({"channels": [{"BACKEND": __name__ + ".HOOK"}]}, "is a str, not a class"),
        (
            {"channels": [{"BACKEND": WEBHOOK, "OPTIONS": {}}]},
            "[0]: WebhookChannel: the url option is required",
        ),
        (
            {
                "channels": [
                    {"BACKEND": __name__ + ".PagerChannel", "OPTIONS": {"service": "x", "urgency": "now"}}
                ]
            },
            "[0]: urgency must be 'high' or 'low', got 'now'",
        ),
        (
            {"channels": [{"BACKEND": __name__ + ".PagerChannel", "OPTIONS": {"servce": "x"}}]},
            "[0]: PagerChannel.__init__() got an unexpected keyword argument 'servce'",
        ),
        (
            {
                "channels": [
                    {"BACKEND": SLACK, "OPTIONS": {"url": HOOK}},
                    {"BACKEND": SLACK, "OPTIONS": {"url": HOOK}},
                ]
            },
            "TSLOCK_ALERTS['channels'][1] is the same channel as TSLOCK_ALERTS['channels'][0]",
        ),
    ],
)
def test_each_mistake_is_a_clear_error_and_check_e011(value: object, says: str) -> None:
    with override_settings(TSLOCK_ALERTS=value, ADMINS=[("Ops", "ops@example.com")]):
        with pytest.raises(InvalidAlertChannel) as caught:
            configured_channels()
        assert says in str(caught.value)
        [message] = check_alerts()
    assert message.id == "tslock.E011"
    assert says in message.msg
    assert "docs/reference/settings.md" in (message.hint or "")


def test_email_to_admins_without_admins_is_e011() -> None:
    with override_settings(TSLOCK_ALERTS=the_setting({"BACKEND": EMAIL}), ADMINS=[]):
        [message] = check_alerts()
    assert message.id == "tslock.E011"
    assert "ADMINS is empty" in message.msg
    with override_settings(
        TSLOCK_ALERTS=the_setting({"BACKEND": EMAIL}), ADMINS=[("Ops", "ops@example.com")]
    ):
        assert check_alerts() == []


def test_manage_py_check_reports_e011() -> None:
    code = (
        "import django, sys\n"
        "from django.conf import settings\n"
        "from django.core.management import call_command\n"
        "django.setup()\n"
        "settings.TSLOCK_ALERTS = {'channels': [\n"
        "    {'BACKEND': 'tslock_django.alerts.SlackChannel', 'OPTIONS': {'url': 'ftp://x'}}]}\n"
        "call_command('check')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
    )
    assert result.returncode != 0
    assert (
        "(tslock.E011) TSLOCK_ALERTS['channels'][0]: SlackChannel: url must be an https://" in result.stderr
    )


def test_every_channel_secret_is_hidden_in_the_journals_text() -> None:
    webhook_url = "https://user:url-pw-6180@alerts.example.com/in/route-77?token=query-tok-1123"
    setting = the_setting(
        {"BACKEND": WEBHOOK, "OPTIONS": {"url": webhook_url, "secret": "signing-secret-2236"}},
        {"BACKEND": SLACK, "OPTIONS": {"url": HOOK}},
    )
    secrets = [
        "url-pw-6180",
        "query-tok-1123",
        "signing-secret-2236",
        "Xy7aQ9sLkP3mN8bV2cR5tW1z",
        "/in/route-77",
    ]
    text = (
        f"failed posting to {webhook_url} and {HOOK}: echoed signing-secret-2236, "
        "token Xy7aQ9sLkP3mN8bV2cR5tW1z"
    )
    with override_settings(TSLOCK_ALERTS=setting):
        assert {"signing-secret-2236", "query-tok-1123", "url-pw-6180"} <= set(configured_secrets())
        shown = hide_secrets(text)
    for secret in secrets:
        assert secret not in shown, shown
    assert shown.startswith("failed posting to ***")  # the words around them are kept
    # With the setting gone, they are ordinary text again.
    assert "Xy7aQ9sLkP3mN8bV2cR5tW1z" in hide_secrets(text)


def test_a_third_party_channel_declares_its_secret_options() -> None:
    setting = the_setting(
        {"BACKEND": __name__ + ".DeclaringChannel", "OPTIONS": {"routing": "routing-key-8080"}}
    )
    with override_settings(TSLOCK_ALERTS=setting):
        assert hide_secrets("sent with routing-key-8080") == "sent with ***"


@dataclass
class DeclaringChannel:
    routing: str
    secret_options = frozenset({"routing"})

    def send(self, notice: Notice) -> None:
        pass


def test_a_webhook_configured_in_settings_delivers() -> None:
    receiver = WebhookReceiver(secret="shared-secret-1")
    with http_server(receiver) as base:
        setting = the_setting(
            {"BACKEND": WEBHOOK, "OPTIONS": {"url": base + "/in", "secret": "shared-secret-1"}}
        )
        with override_settings(TSLOCK_ALERTS=setting):
            for _, channel in configured_channels():
                channel.send(notice(at=AT))
    assert [got.signature_valid for got in receiver.received] == [True]


def test_importing_the_package_loads_neither_httpx_nor_the_mail_framework() -> None:
    code = (
        "import sys\n"
        "import tslock_django.alerts\n"
        "loaded = ('httpx', 'django.core.mail', 'tslock_django.alerts.posting')\n"
        "print(sorted(m for m in loaded if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


#: Module constants: the page shows the test's source around the failing line.
PAGE_SETTING = the_setting(
    {"BACKEND": SLACK, "OPTIONS": {"url": HOOK}},
    {
        "BACKEND": WEBHOOK,
        "OPTIONS": {"url": "https://a.example.com/in?token=query-tok-1123", "secret": "sig-4471"},
    },
)
PAGE_SECRETS = ("Xy7aQ9sLkP3mN8bV2cR5tW1z", "query-tok-1123", "sig-4471")


def test_the_debug_page_shows_no_channel_secret() -> None:
    from django.test import RequestFactory
    from django.views.debug import get_default_exception_reporter_filter, technical_500_response

    get_default_exception_reporter_filter.cache_clear()
    try:
        with override_settings(
            TSLOCK_ALERTS=PAGE_SETTING,
            DEFAULT_EXCEPTION_REPORTER_FILTER="tslock_django.reporting.TslockExceptionReporterFilter",
            DEBUG=True,
        ):
            hook = HOOK  # a frame's local, shown on the page

            try:
                raise RuntimeError(f"posting failed ({len(hook)})")
            except RuntimeError:
                page = technical_500_response(RequestFactory().get("/"), *sys.exc_info()).content.decode()
    finally:
        get_default_exception_reporter_filter.cache_clear()
    assert "TSLOCK_ALERTS" in page
    for secret in PAGE_SECRETS:
        assert secret not in page


@pytest.mark.parametrize(
    ("url", "secret", "kept", "origin"),
    [
        (
            HOOK,
            ["/services/T0TEAM001/B0HOOK002/Xy7aQ9sLkP3mN8bV2cR5tW1z", "Xy7aQ9sLkP3mN8bV2cR5tW1z"],
            "services",
            "https://hooks.slack.com",
        ),
        (
            "https://ops.example.com:8443/in?token=tok%2Fen-77",
            ["token=tok%2Fen-77", "tok/en-77", "tok%2Fen-77"],
            "token",
            "https://ops.example.com:8443",
        ),
        (
            "https://tslock:pw-998877@ops.example.com/",
            ["tslock:pw-998877", "pw-998877"],
            "tslock",
            "https://ops.example.com",
        ),
        ("https://ghp-token-0123456789abcdef@[::1]/", ["ghp-token-0123456789abcdef"], "::1", "https://[::1]"),
        ("https://ops.example.com/", [], "ops.example.com", "https://ops.example.com"),
    ],
)
def test_the_secret_parts_of_a_channel_url(url: str, secret: list[str], kept: str, origin: str) -> None:
    """What the scrubbing learns from a channel's URL: what can be a credential, and not
    the words around it (a user name "tslock" would mask the word everywhere); and the
    origin, all that messages show of it."""
    from tslock_django.core.scrubbing import url_origin, url_secrets

    found = url_secrets(url)
    assert set(secret) <= set(found)
    assert kept not in found
    assert url_origin(url) == origin
