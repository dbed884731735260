"""``tslock worker --output DIR [--overwrite] [--name NAME]``: write the companion
Cloudflare Worker bundle (``index.js``, ``wrangler.jsonc``, ``package.json``,
``DEPLOY.md``) for the Durable Object provider."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

HELP = "Write the Cloudflare Worker bundle for the Durable Object provider."


def add_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("--output", required=True, help="The directory to write to.")
    parser.add_argument("--overwrite", action="store_true", help="Replace files that already exist.")
    parser.add_argument(
        "--name", dest="worker_name", default="tslock", help="The Worker's name in wrangler.jsonc."
    )


def handle(command: BaseCommand, *, output: str, overwrite: bool, worker_name: str, **_: Any) -> None:
    """The files written, one per line.

    Raises:
        CommandError: a file exists (without ``overwrite``), a bad name, or the folder
            cannot be written.
    """
    # Imported here: the bundle writer is only needed by this subcommand.
    from ..worker.export import write_worker_bundle

    try:
        written = write_worker_bundle(output, worker_name=worker_name, overwrite=overwrite)
    except (OSError, ValueError) as err:
        raise CommandError(str(err)) from err
    command.stdout.write(command.style.SUCCESS(f"Wrote the Worker bundle to {output}"))
    for path in written:
        command.stdout.write(f"  {path}")
