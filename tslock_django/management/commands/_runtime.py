"""``manage.py tslock runtime``: the local Workers runtime (Miniflare and workerd) that
``LocalWorker`` and ``make demo PROVIDER=edge`` run the companion Worker on.

Without options it says whether the runtime is installed and where; ``--install`` puts it
into the per-user cache ahead of time (the first ``LocalWorker`` would otherwise do it);
``--remove`` deletes every runtime this user installed, which ``pip uninstall`` cannot
reach. The module name starts with an underscore so Django does not take it for a command
of its own: ``tslock.py`` adds it as a subcommand.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...testing import worker_runtime as runtime

HELP = "Show, install (--install) or remove (--remove) the local Workers runtime."


def add_arguments(parser: ArgumentParser) -> None:
    """The subcommand's options: ``--install`` or ``--remove`` (at most one)."""
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--install",
        action="store_true",
        help="Install the runtime into the per-user cache now (npm ci, about 165 MB, once).",
    )
    action.add_argument(
        "--remove",
        action="store_true",
        help="Delete every runtime this user installed (run it before `pip uninstall`).",
    )


def handle(command: BaseCommand, *, install: bool = False, remove: bool = False, **_: Any) -> None:
    """Run ``tslock runtime`` for ``command`` (its stdout, stderr and style).

    Raises:
        CommandError: Node.js or npm is missing or too old, or the install failed.
    """
    version = runtime.runtime_version()
    if remove:
        removed = runtime.remove_runtimes()
        root = runtime.cache_root()
        if removed:
            command.stdout.write(f"Removed {len(removed)} runtime folder(s) from {root}")
        else:
            command.stdout.write(f"No runtime installed in {root}; nothing to remove")
        if runtime.find_runtime() is not None:
            command.stdout.write(
                f"The development checkout's runtime in {runtime.WORKER_DIR / 'node_modules'} is "
                "left as it is"
            )
        return
    if install:
        already = runtime.find_runtime()
        try:
            folder = runtime.install_runtime(progress=command.stderr)
        except runtime.WorkerRuntimeError as err:
            raise CommandError(str(err)) from err
        verb = "is already installed" if already is not None else "is installed"
        command.stdout.write(
            command.style.SUCCESS(f"The local Workers runtime (miniflare {version}) {verb} in {folder}")
        )
        return
    found = runtime.find_runtime()
    if found is None:
        command.stdout.write(
            f"The local Workers runtime (miniflare {version}) is not installed; "
            f"`{runtime.INSTALL_COMMAND}` puts it in {runtime.runtime_dir()} (about 165 MB)"
        )
    else:
        command.stdout.write(f"The local Workers runtime (miniflare {version}) is installed in {found}")
    try:
        node = runtime.find_node()
    except runtime.WorkerRuntimeError as err:
        command.stderr.write(str(err))
    else:
        command.stdout.write(f"Node.js: {node}")
