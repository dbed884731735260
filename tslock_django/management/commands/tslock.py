"""``manage.py tslock``: look at and repair locks from a shell, thin over the library.

This module only builds the subparsers from :data:`tslock_django.cli.SUBCOMMANDS` and
dispatches to the chosen one; each subcommand is a module of its own under
:mod:`tslock_django.cli`, which says what it does in full (and ``docs/reference/cli.md``
for users).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...cli import SUBCOMMANDS
from ...cli.arguments import MAX_BATCH, MAX_FENCING_TOKEN, accept_django_options, read_dashed_values

# Where these names lived before the subcommands had modules of their own; kept so
# that code importing them from here still works.
from ...cli.check import CHECK_PREFIX
from ...cli.list_locks import HEADER, PAGE_SIZE, STATE_CHOICES, STATE_LABELS
from ...cli.text import printable

__all__ = [
    "CHECK_PREFIX",
    "HEADER",
    "MAX_BATCH",
    "MAX_FENCING_TOKEN",
    "PAGE_SIZE",
    "STATE_CHOICES",
    "STATE_LABELS",
    "Command",
    "printable",
]


class Command(BaseCommand):
    help = "List, check and force-release tslock locks in every configured provider."

    # call_command(..., stdin=io.StringIO("yes\n")) answers release's confirmation in tests.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(
            dest="subcommand", metavar="{" + ",".join(SUBCOMMANDS) + "}", required=True
        )
        # CommandParser.add_subparsers passes called_from_command_line on, so a usage error
        # in a subcommand is a CommandError under call_command and a usage line in a shell.
        for name, subcommand in SUBCOMMANDS.items():
            subparser = sub.add_parser(name, help=subcommand.HELP)
            read_dashed_values(subparser)
            subcommand.add_arguments(subparser)
            accept_django_options(subparser)

    def handle(self, *args: Any, **options: Any) -> None:
        SUBCOMMANDS[options["subcommand"]].handle(self, **options)
