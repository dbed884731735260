"""``tslock release NAME --provider A [--fencing-token N | --token T] [--yes]``.

Force-release one lock, conditional on the holding when a condition is given; an
unconditional release asks first on a terminal (or needs ``--yes``). Exit status 1 when
nothing was released.
"""

from __future__ import annotations

import sys
from argparse import ArgumentParser
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError

from ..exceptions import LockProviderError
from . import aliases
from .arguments import fencing_token

HELP = "Force-release a lock."


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("name", help="The lock name.")
    parser.add_argument("--provider", required=True, help="The provider alias holding the lock.")
    condition = parser.add_mutually_exclusive_group()
    condition.add_argument(
        "--fencing-token",
        type=fencing_token,
        help="Release only if the lock is still held with this fencing token.",
    )
    condition.add_argument(
        "--token",
        help="Release only if the lock is still held with this token (stores without fencing tokens).",
    )
    parser.add_argument(
        "--yes",
        action="store_true",
        help="Do not ask before an unconditional release.",
    )


def handle(
    command: BaseCommand,
    *,
    name: str,
    provider: str,
    fencing_token: int | None,
    token: str | None,
    yes: bool,
    stdin: TextIO | None = None,
    **_: Any,
) -> None:
    """Release ``name`` on ``provider``; ``stdin`` answers the confirmation (tests pass
    ``call_command(..., stdin=io.StringIO("yes\\n"))``).

    Raises:
        CommandError: an unknown alias, a refused condition, a store failure, an
            unconfirmed release, or nothing released (exit status 1).
    """
    aliases.selected(provider)  # an unknown alias: refused, naming the configured ones
    store = aliases.provider_named(provider)
    expected: int | str | None = fencing_token if fencing_token is not None else token
    if expected is None and not yes:
        _confirm_unconditional(command, stdin or sys.stdin, name, provider)
    try:
        released = store.force_unlock(name, expected=expected)
    except ValueError as err:
        raise CommandError(str(err)) from err
    except LockProviderError as err:
        raise CommandError(f"lock {name!r} was not released: {err}") from err
    if released:
        command.stdout.write(command.style.SUCCESS(f"Released lock {name!r} on provider {provider!r}."))
        return
    why = (
        "it is not held"
        if expected is None
        else "it is not held with that " + ("fencing token" if fencing_token is not None else "token")
    )
    raise CommandError(
        f"lock {name!r} on provider {provider!r} was not released: {why}",
        returncode=1,
    )


def _confirm_unconditional(command: BaseCommand, stdin: TextIO, name: str, provider: str) -> None:
    if not (hasattr(stdin, "isatty") and stdin.isatty()) and stdin is sys.stdin:
        raise CommandError(
            "an unconditional release needs --yes when there is no terminal to confirm on; "
            "or give --fencing-token N (or --token T) to release only the holding you saw"
        )
    command.stdout.write(
        f"Release lock {name!r} on provider {provider!r} whoever holds it now? "
        "The holder is not stopped and may still be running. Type 'yes' to continue: ",
        ending="",
    )
    command.stdout.flush()
    answer = stdin.readline().strip().lower()
    if answer != "yes":
        raise CommandError("not released: the release was not confirmed")
