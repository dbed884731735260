"""The duration grammar and LockConfiguration's validation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tslock_django import LockConfiguration
from tslock_django.core.durations import parse_duration, to_milliseconds


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (timedelta(minutes=5), timedelta(minutes=5)),
        (30, timedelta(seconds=30)),
        (0.5, timedelta(milliseconds=500)),
        ("30", timedelta(seconds=30)),
        (" 2.5 ", timedelta(seconds=2.5)),
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1m30s250ms", timedelta(minutes=1, seconds=30, milliseconds=250)),
        ("PT5M", timedelta(minutes=5)),
        ("pt0.5s", timedelta(milliseconds=500)),
        ("P1DT2H", timedelta(days=1, hours=2)),
        ("P2D", timedelta(days=2)),
        (0, timedelta(0)),
    ],
)
def test_accepted_forms(given: object, expected: timedelta) -> None:
    assert parse_duration(given, field="lock_at_most_for") == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("5 minutes", "cannot read '5 minutes'"),
        ("PT", "cannot read 'PT'"),
        ("P", "cannot read 'P'"),
        ("P1DT", "cannot read 'P1DT'"),
        ("", "cannot read ''"),
        ("5x", "cannot read '5x'"),
        ("m5", "cannot read 'm5'"),
        (-1, "must not be negative"),
        ("-5m", "must not be negative"),
        (timedelta(seconds=-1), "must not be negative"),
        (float("inf"), "finite"),
        (float("nan"), "finite"),
        (True, "bool"),
        (None, "must be a duration"),
        ([5], "must be a duration"),
    ],
)
def test_rejected_forms_name_the_field_and_the_grammar(given: object, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(given, field="lock_at_most_for")  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("lock_at_most_for")
    assert fragment in message
    assert '"30s"' in message, "the message should show what would be right"


def test_milliseconds_round_down() -> None:
    assert to_milliseconds(timedelta(seconds=1.2345)) == 1234


class TestLockConfiguration:
    def test_durations_are_parsed_and_frozen(self) -> None:
        config = LockConfiguration("job", "10m", "PT1M")
        assert config.lock_at_most_for == timedelta(minutes=10)
        assert config.lock_at_least_for == timedelta(minutes=1)
        with pytest.raises(AttributeError):
            config.name = "other"  # type: ignore[misc]

    @pytest.mark.parametrize(
        ("args", "fragment"),
        [
            (("", "1m"), "must not be empty"),
            ((None, "1m"), "must be a string"),
            (("a\nb", "1m"), "control character"),
            (("tab\there", "1m"), "control character"),
            (("bad\ud800", "1m"), "surrogate"),
            (("job", 0), "lock_at_most_for must be positive"),
            (("job", "-1s"), "lock_at_most_for must not be negative"),
            (("job", "1m", "2m"), "must not be longer than lock_at_most_for"),
            (("job", "1m", "soon"), "lock_at_least_for: cannot read 'soon'"),
        ],
    )
    def test_bad_input_is_a_value_error_that_says_what_is_wrong(
        self, args: tuple[object, ...], fragment: str
    ) -> None:
        with pytest.raises(ValueError, match=fragment):
            LockConfiguration(*args)  # type: ignore[arg-type]

    def test_durations_over_a_century_are_refused(self) -> None:
        assert LockConfiguration("job", "36500d").lock_at_most_for == timedelta(days=36500)
        with pytest.raises(ValueError, match="lock_at_most_for must be at most 36500 days"):
            LockConfiguration("job", "36501d")
