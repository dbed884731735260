"""``manage.py tslock``: look at and repair locks from a shell, thin over the library.

Subcommands (each in a module of its own under :mod:`tslock_django.cli`, which says
what it does in full):
    ``list [--provider A] [--prefix P] [--all | --state S] [--limit N] [--json]``: the
        current locks of every configured provider (or one), page by page.
    ``release NAME --provider A [--fencing-token N | --token T] [--yes]``: force-release
        a lock, conditional on the holding when a condition is given.
    ``check``: one harmless query per provider, and every job module imported; exit
        status 1 if a provider fails or a job has a bad decorator argument.
    ``purge [--expired-for 30d] [--runs-older-than 90d] [--provider A] [--dry-run]
        [--batch-size N]``: delete the lock records that expired longer ago than that, and
        the journal's runs older than that.
    ``reindex [--provider A] [--batch-size N]``: rebuild the Durable Object Worker's index.
    ``worker --output DIR [--overwrite] [--name NAME]``: write the companion Worker bundle.
    ``runtime [--install | --remove | --serve [--port N] [--persist DIR]]``: the local
        Workers runtime, and the Worker served on it.
    ``run NAME --at-most-for D [...] -- PROGRAM [ARGS...]``: run any program under a lock,
        journaled (cron lines, Kubernetes CronJobs); exits with the program's status.
    ``runs [NAME] [--outcome O] [--limit N] [--json]``: the journal's runs, newest first.
    ``overdue [--json]``: scheduled jobs that are late, failing or new; exit status 1
        when any is late or failing, 2 when the journal cannot be read.

This module only builds the subparsers from :data:`tslock_django.cli.SUBCOMMANDS` and
dispatches to the chosen one.
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
