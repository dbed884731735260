"""The subcommands of ``manage.py tslock``, one module each.

Every module holds one subcommand: ``HELP`` (its line in ``tslock --help``),
``add_arguments(parser)`` (its options, on the subparser) and
``handle(command, **options)`` (run for the ``tslock`` command instance, whose stdout,
stderr and style it writes to; errors are ``CommandError``). :data:`SUBCOMMANDS` is the
one table ``tslock_django.management.commands.tslock`` reads: a new subcommand is a new
module and a line here. Shared pieces: :mod:`.arguments` (option types),
:mod:`.aliases` (which providers a subcommand acts on), :mod:`.text` (printing what a
store holds).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any, Protocol

from . import (
    check,
    list_locks,
    overdue,
    pause,
    purge,
    reindex,
    release,
    resume,
    run,
    runs,
    runtime,
    worker,
)


class Subcommand(Protocol):
    """What a subcommand module provides (modules satisfy it structurally): ``handle``
    takes the ``tslock`` command and the parsed options as keywords."""

    HELP: str

    def add_arguments(self, parser: ArgumentParser) -> None: ...

    # Any signature: each module's handle() names the options it reads.
    def handle(self, *args: Any, **kwargs: Any) -> None: ...


#: Name -> module, in the order ``tslock --help`` lists them.
SUBCOMMANDS: dict[str, Subcommand] = {
    "list": list_locks,
    "release": release,
    "check": check,
    "purge": purge,
    "reindex": reindex,
    "worker": worker,
    "runtime": runtime,
    "run": run,
    "runs": runs,
    "overdue": overdue,
    "pause": pause,
    "resume": resume,
}
