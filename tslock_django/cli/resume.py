"""``tslock resume NAME``: let a paused job run again (the other half of
:mod:`tslock_django.cli.pause`, which says what a pause does)."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand

from ..journal import pausing
from . import pause

HELP = "Resume a paused job: its next run takes the lock as usual."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pause.add_arguments(parser, verb="resume")


def handle(command: BaseCommand, **options: Any) -> None:
    """Clear ``NAME``'s pause; exit status 2 when the journal is off or failed."""
    pause.change(command, "resume", pausing.resume, options)
