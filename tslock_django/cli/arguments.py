"""What the subcommands' options accept: argparse types that refuse a bad value with a
message saying what would be right, and Django's own options after a subcommand."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ..core.durations import parse_duration

#: The largest fencing token any store keeps: a signed 64-bit integer (the database's
#: BIGINT, Redis's integers, the Worker's safe range is smaller and refuses the rest).
MAX_FENCING_TOKEN = 2**63 - 1

#: The largest --batch-size of purge: one purge transaction must stay short.
MAX_BATCH = 10_000


def positive(text: str) -> int:
    """A whole number of at least 1 (``--limit``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def fencing_token(text: str) -> int:
    """A fencing token as ``tslock list`` shows it: 0 to :data:`MAX_FENCING_TOKEN`."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_FENCING_TOKEN:
        # A usage error here, not an OverflowError from the database driver later.
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 0 to {MAX_FENCING_TOKEN} (the FENCING column of "
            f"'tslock list'), got {text!r}"
        )
    return value


def batch_size(text: str) -> int:
    """Records per purge transaction or request: 1 to :data:`MAX_BATCH`."""
    value = positive(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_BATCH:,} (one short transaction), got {text!r}"
        )
    return value


def duration(text: str) -> timedelta:
    """A duration in the grammar of :mod:`tslock_django.core.durations` (``30d``)."""
    try:
        # No field name: argparse puts "argument --expired-for: " before the message.
        return parse_duration(text, field="")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).lstrip(": ")) from None


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 0 to 65535 (0: any free port), got {text!r}"
        )
    return value


def accept_django_options(parser: argparse.ArgumentParser) -> None:
    """Let Django's own options (``--settings``, ``-v`` ...) follow the subcommand too, as
    they may after any other command: Django reads ``--settings`` and ``--pythonpath``
    wherever they are, but argparse refuses what a subcommand does not declare. Given
    here, they take effect as if given before the subcommand; not given, they leave the
    values from before it alone (SUPPRESS)."""
    hidden = argparse.SUPPRESS
    parser.add_argument("-v", "--verbosity", type=int, choices=[0, 1, 2, 3], default=hidden, help=hidden)
    parser.add_argument("--settings", default=hidden, help=hidden)
    parser.add_argument("--pythonpath", default=hidden, help=hidden)
    for flag in ("--traceback", "--no-color", "--force-color", "--skip-checks"):
        parser.add_argument(flag, action="store_true", default=hidden, help=hidden)


#: A value that argparse would take for an option: a dash then a digit (``-5s``,
#: ``-1h30m``, ``-.5s``). argparse reads only plain negative numbers (``-5``) as values.
_DASHED_VALUE = re.compile(r"-\.?\d")


def read_dashed_values(parser: argparse.ArgumentParser) -> None:
    """Read the word after an option that takes a value as that value when it starts
    with a dash and a digit: ``--at-most-for -5s`` as ``--at-most-for=-5s``.

    argparse takes ``-5s`` for an unknown option and stops with "expected one argument",
    which does not say what is wrong; read as the value, the option's type says it
    (a duration must not be negative). Words after ``--`` are left alone. Call it on a
    subcommand's parser before its options are added: it notes, as each is added, which
    options take one value (not flags such as ``--json``, before a name like ``-5``).
    """
    valued: set[str] = set()
    add_argument = parser.add_argument
    parse_known_args = parser.parse_known_args

    def add(*args: Any, **kwargs: Any) -> argparse.Action:
        action = add_argument(*args, **kwargs)
        if action.option_strings and action.nargs is None:
            valued.update(action.option_strings)
        return action

    def parse(
        args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        return parse_known_args(
            _attach_dashed_values(sys.argv[1:] if args is None else args, valued), namespace
        )

    parser.add_argument = add  # type: ignore[method-assign]
    parser.parse_known_args = parse  # type: ignore[method-assign,assignment]


def _attach_dashed_values(words: Sequence[str], valued: set[str]) -> list[str]:
    attached: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            attached.extend(words[index:])
            break
        following = words[index + 1] if index + 1 < len(words) else ""
        if word in valued and _DASHED_VALUE.match(following):
            attached.append(f"{word}={following}")
            index += 2
        else:
            attached.append(word)
            index += 1
    return attached
