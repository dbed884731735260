"""The alert thresholds beside ``schedule=``: ``failures_before_alert`` and
``max_duration`` on ``locked_command``, ``locked_task`` and ``tslock run``, stored on the
name's ``Job`` row by its runs; refused at decoration (or as a usage error) when bad or
given without a schedule."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from tests.conftest import database_marks
from tslock_django import locked_command, locked_task
from tslock_django.decorators import InvalidJobArgument
from tslock_django.journal.models import Job

MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}

DATABASES = [
    pytest.param("default", marks=pytest.mark.django_db(databases=["default"], transaction=True)),
    pytest.param("postgres", marks=database_marks("postgres", "PostgreSQL")),
    pytest.param("mariadb", marks=database_marks("mariadb", "MariaDB")),
]


@pytest.fixture(params=DATABASES)
def using(request: pytest.FixtureRequest) -> Iterator[str]:
    alias = request.param
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL={"using": alias}):
        yield alias


def thresholds(using: str, name: str) -> tuple[int | None, float | None]:
    job = Job.objects.using(using).get(name=name)
    return job.failures_before_alert, job.max_duration


def test_a_task_stores_its_thresholds(using: str) -> None:
    @locked_task("1m", name="thresholds-task", schedule="1h", failures_before_alert=3, max_duration="20m")
    def task() -> str:
        return "ran"

    assert task() == "ran"
    assert thresholds(using, "thresholds-task") == (3, 1200.0)


def test_a_command_stores_its_thresholds(using: str) -> None:
    @locked_command(
        "1m", name="thresholds-command", schedule="0 3 * * *", failures_before_alert=2, max_duration=90
    )
    class Command(BaseCommand):
        def handle(self, *args: object, **options: object) -> None:
            self.stdout.write("ran")

    out = StringIO()
    call_command(Command(), stdout=out, stderr=StringIO())
    assert out.getvalue() == "ran\n"
    assert thresholds(using, "thresholds-command") == (2, 90.0)
    assert Command.tslock_schedule.max_duration == timedelta(seconds=90)  # type: ignore[attr-defined]


def test_without_thresholds_a_schedule_stores_the_defaults(using: str) -> None:
    @locked_task("1m", name="thresholds-default", schedule="1h")
    def task() -> None:
        pass

    task()
    assert thresholds(using, "thresholds-default") == (1, None)


def test_tslock_run_stores_its_thresholds(using: str) -> None:
    call_command(
        "tslock",
        "run",
        "thresholds-run",
        "--at-most-for",
        "1m",
        "--schedule",
        "1h",
        "--failures-before-alert",
        "4",
        "--max-duration",
        "5m",
        "--",
        sys.executable,
        "-c",
        "pass",
        stdout=StringIO(),
        stderr=StringIO(),
    )
    assert thresholds(using, "thresholds-run") == (4, 300.0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"failures_before_alert": 3},
            "failures_before_alert is given without a schedule; give schedule= too (e.g. schedule='1h')",
        ),
        ({"max_duration": "20m"}, "max_duration is given without a schedule; give schedule= too"),
        (
            {"schedule": "1h", "failures_before_alert": 0},
            "failures_before_alert of schedule is 0; give a whole number of failed runs in a row from 1",
        ),
        ({"schedule": "1h", "failures_before_alert": "3"}, "failures_before_alert of schedule is '3'"),
        ({"schedule": "1h", "failures_before_alert": True}, "failures_before_alert of schedule is True"),
        (
            {"schedule": "1h", "max_duration": "a while"},
            "max_duration of schedule: cannot read 'a while' as a duration",
        ),
        ({"schedule": "1h", "max_duration": 0}, "max_duration of schedule is 0; give a positive duration"),
    ],
)
def test_bad_thresholds_are_refused_at_decoration_in_one_line(
    arguments: dict[str, object], message: str
) -> None:
    for decorator in (locked_command, locked_task):
        with pytest.raises(InvalidJobArgument) as raised:
            decorator("1m", **arguments)  # type: ignore[operator]
        assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--failures-before-alert", "3"], "--failures-before-alert needs --schedule"),
        (["--max-duration", "5m"], "--max-duration needs --schedule"),
        (["--schedule", "1h", "--failures-before-alert", "0"], "'0' is not a whole number from 1"),
        (["--schedule", "1h", "--failures-before-alert", "two"], "'two' is not a whole number from 1"),
        (["--schedule", "1h", "--max-duration", "soon"], "cannot read 'soon' as a duration"),
        (["--schedule", "1h", "--max-duration", "0"], "'0' is no time at all; give a positive duration"),
    ],
)
def test_tslock_run_refuses_bad_thresholds_as_usage_errors(options: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("tslock", "run", "x", "--at-most-for", "1m", *options, "--", "true", stderr=StringIO())
