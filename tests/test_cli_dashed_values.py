"""``--at-most-for -5s``: a value after a space that starts with a dash and a digit is
read as the option's value, so the option says what is wrong with it, instead of
argparse's "expected one argument"."""

from __future__ import annotations

import argparse
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from tslock_django.cli.arguments import read_dashed_values

MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["run", "job", "--at-most-for", "-5s", "--", "true"], "--at-most-for"),
        (["run", "job", "--at-most-for", "5m", "--at-least-for", "-1h30m", "--", "true"], "--at-least-for"),
        (["purge", "--expired-for", "-5d"], "--expired-for"),
    ],
)
def test_a_negative_duration_after_a_space_is_refused_as_negative(argv: list[str], option: str) -> None:
    with override_settings(TSLOCK_PROVIDERS=MEMORY), pytest.raises(CommandError) as refused:
        call_command("tslock", *argv, stdout=StringIO(), stderr=StringIO())
    message = str(refused.value)
    assert f"argument {option}: " in message and "must not be negative" in message, message
    assert "expected one argument" not in message


def test_from_the_shell_it_is_a_usage_error_naming_the_problem() -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "tslock", "run", "job", "--at-most-for", "-5s", "--", "true"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "must not be negative, got '-5s'" in done.stderr
    assert "expected one argument" not in done.stderr


def test_the_programs_own_arguments_are_left_alone(capfd: pytest.CaptureFixture[str]) -> None:
    program = ["--", sys.executable, "-c", "import sys; print(sys.argv[1:])", "--at-most-for", "-5s"]
    with override_settings(TSLOCK_PROVIDERS=MEMORY):
        call_command(
            "tslock", "run", "job", "--at-most-for", "1m", *program, stdout=StringIO(), stderr=StringIO()
        )
    assert capfd.readouterr().out.strip() == "['--at-most-for', '-5s']"


def test_only_options_that_take_a_value_take_a_dashed_word() -> None:
    parser = argparse.ArgumentParser()
    read_dashed_values(parser)
    parser.add_argument("--at", metavar="D")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("name", nargs="?")
    parsed = parser.parse_args(["--at", "-5s", "--json", "-5"])
    assert (parsed.at, parsed.json, parsed.name) == ("-5s", True, "-5")
    assert parser.parse_args(["--at", "-.5s"]).at == "-.5s"
    assert parser.parse_args(["--at=-1h"]).at == "-1h"
