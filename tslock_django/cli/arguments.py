"""What the subcommands' options accept: argparse types that refuse a bad value with a
message saying what would be right, and Django's own options after a subcommand."""

from __future__ import annotations

import argparse
from datetime import timedelta

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
