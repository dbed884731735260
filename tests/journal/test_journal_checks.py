"""tslock.E009: the journal's settings are checked at every command's start."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tslock_django.checks import check_journal


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"TSLOCK_JOURNAL": "default"}, "TSLOCK_JOURNAL must be None"),
        ({"TSLOCK_JOURNAL": {"using": "nowhere"}}, "'nowhere', which is not in DATABASES"),
        ({"TSLOCK_JOURNAL": {"alias": "default"}}, "TSLOCK_JOURNAL must be None"),
        ({"TSLOCK_SCHEDULES": {"report": {"schedule": "0 3 * *"}}}, "has 4 fields"),
        ({"TSLOCK_SCHEDULES": ["report"]}, "TSLOCK_SCHEDULES must be a dict"),
    ],
)
def test_malformed_journal_settings_are_e009(settings: dict[str, object], words: str) -> None:
    with override_settings(**settings):
        [error] = check_journal()
    assert error.id == "tslock.E009" and words in error.msg


def test_good_journal_settings_pass() -> None:
    good = {"report": {"schedule": "0 3 * * *", "grace": "1h"}, "sync": {"schedule": "15m"}}
    with override_settings(TSLOCK_JOURNAL={"using": "default"}, TSLOCK_SCHEDULES=good):
        assert check_journal() == []
    with override_settings(TSLOCK_JOURNAL=None):
        assert check_journal() == []
