"""TSLOCK_MONITORS read with clear errors, its system checks (tslock.E012, W002, W003),
the slug a job's name is pinged under, and the ping key as a configured secret."""

from __future__ import annotations

import sys

import pytest
from django.test import override_settings

from tslock_django.checks import check_monitors
from tslock_django.core.scrubbing import configured_secrets, hide_secrets
from tslock_django.monitors.config import Healthchecks, InvalidMonitors, read
from tslock_django.monitors.slug import slug_of

KEY = "settings-ping-key-0123456789"
HC = {"url": "https://hc.example.com/", "ping_key": KEY}


def test_either_monitor_or_both_are_read() -> None:
    both = read({"healthchecks": HC, "sentry": {}})
    assert both is not None and both.sentry
    assert both.healthchecks == Healthchecks(url="https://hc.example.com", ping_key=KEY)
    only_sentry = read({"sentry": {}})
    assert only_sentry is not None and only_sentry.healthchecks is None
    assert read(None) is None and read({}) is None


def test_the_ping_key_stays_out_of_the_repr() -> None:
    found = read({"healthchecks": HC})
    assert found is not None and KEY not in repr(found)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["healthchecks"], "TSLOCK_MONITORS must be a dict such as"),
        ({"cronitor": {}}, "unknown monitors ['cronitor']; the monitors are 'healthchecks', 'sentry'"),
        ({"sentry": None}, "TSLOCK_MONITORS['sentry'] must be a dict of its options"),
        ({"sentry": {"dsn": "x"}}, "TSLOCK_MONITORS['sentry'] has unknown options ['dsn']; it takes none"),
        ({"healthchecks": {**HC, "uuid": "x"}}, "unknown options ['uuid']; it takes 'url', 'ping_key'"),
        ({"healthchecks": {"ping_key": KEY}}, "['url'] must be the root of a Healthchecks instance"),
        ({"healthchecks": {**HC, "url": "hc.example.com"}}, "is not an http(s) URL"),
        ({"healthchecks": {**HC, "url": "https://hc.example.com/?a=1"}}, "no query"),
        ({"healthchecks": {**HC, "url": "https://u:pw@hc.example.com"}}, "carries credentials"),
        ({"healthchecks": {"url": "https://hc.example.com"}}, "['ping_key'] must be the project's ping key"),
        ({"healthchecks": {**HC, "ping_key": " "}}, "got an empty text"),
        ({"healthchecks": {**HC, "ping_key": "a/b c"}}, "'-' and '_'), got a text with other"),
        ({"healthchecks": {**HC, "ping_key": 42}}, "got int"),
    ],
)
def test_a_malformed_setting_says_what_is_wrong_and_what_is_right(value: object, message: str) -> None:
    with pytest.raises(InvalidMonitors) as raised:
        read(value)
    assert message in str(raised.value)
    with override_settings(TSLOCK_MONITORS=value):
        [error] = check_monitors()
    assert error.id == "tslock.E012" and message in error.msg


def test_the_check_is_quiet_for_a_good_setting_or_none() -> None:
    with override_settings(TSLOCK_MONITORS={"healthchecks": HC}):
        assert check_monitors() == []
    with override_settings(TSLOCK_MONITORS=None):
        assert check_monitors() == []


def test_sentry_without_an_initialised_sdk_is_a_warning() -> None:
    # This process has sentry-sdk installed (the test group) and never initialises it.
    with override_settings(TSLOCK_MONITORS={"sentry": {}}):
        [warning] = check_monitors()
    assert warning.id == "tslock.W002" and "not initialised" in warning.msg
    assert "sentry_sdk.init(dsn=...)" in warning.msg


def test_sentry_without_the_sdk_installed_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None in sys.modules makes the package absent for importlib, as if not installed.
    monkeypatch.setitem(sys.modules, "sentry_sdk", None)
    with override_settings(TSLOCK_MONITORS={"sentry": {}}):
        [warning] = check_monitors()
    assert warning.id == "tslock.W002" and "sentry-sdk is not installed" in warning.msg


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("nightly-report_2", "nightly-report_2"),
        ("Report.Daily", "report-daily"),
        ("sync {42}", "sync-42"),
        ("--edge--", "--edge--"),
        ("é-clair", "clair"),
        ("...", ""),
    ],
)
def test_a_name_is_its_own_slug_or_is_made_one(name: str, slug: str) -> None:
    assert slug_of(name) == slug


def test_scheduled_names_pinged_under_another_slug_or_one_slug_are_warned_of() -> None:
    schedules = {
        "ok-name": {"schedule": "1h"},
        "Report.Daily": {"schedule": "1h"},
        "report:daily": {"schedule": "1h"},
        "***": {"schedule": "1h"},
    }
    with override_settings(TSLOCK_MONITORS={"healthchecks": HC}, TSLOCK_SCHEDULES=schedules):
        messages = [warning.msg for warning in check_monitors()]
    assert all("ok-name" not in message for message in messages)
    assert "TSLOCK_SCHEDULES['Report.Daily'] is pinged to its monitors as 'report-daily'" in messages[0]
    assert "TSLOCK_SCHEDULES['***'] makes no monitor slug, so its runs are not pinged" in messages[2]
    assert "TSLOCK_SCHEDULES['report:daily'] is pinged to its monitors as 'report-daily'" in messages[1]
    assert "names ['Report.Daily', 'report:daily'] are all pinged as 'report-daily'" in messages[3]
    assert len(messages) == 4
    with override_settings(TSLOCK_MONITORS=None, TSLOCK_SCHEDULES=schedules):
        assert check_monitors() == [], "without monitors no slug matters"


def test_the_ping_key_is_a_configured_secret() -> None:
    with override_settings(TSLOCK_MONITORS={"healthchecks": HC}):
        assert KEY in configured_secrets()
        assert hide_secrets(f"GET /ping/{KEY}/job failed") == "GET /ping/***/job failed"
    with override_settings(TSLOCK_MONITORS={"healthchecks": {**HC, "url": "https://u:hc-url-pass@h"}}):
        assert "hc-url-pass" in configured_secrets()


@pytest.mark.parametrize(
    "url",
    [
        "https://user:hunter2-secret@hc.example.com/?token=qs-secret",
        "https://user:hunter2-secret@hc.example.com:notaport/",
        "ftp://user:hunter2-secret@hc.example.com/",
        "https://hc.example.com/?token=qs-secret",
    ],
)
def test_a_malformed_url_is_quoted_without_its_credentials_or_query(url: str) -> None:
    with pytest.raises(InvalidMonitors) as raised:
        read({"healthchecks": {**HC, "url": url}})
    text = str(raised.value)
    assert "hunter2-secret" not in text and "qs-secret" not in text, text
    assert "hc.example.com" in text or "not a URL" in text
