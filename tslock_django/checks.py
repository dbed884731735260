"""System checks (``manage.py check``), with stable ids. No network calls: the database
table check runs only with ``check --database``.

- tslock.E001: TSLOCK_PROVIDERS is malformed.
- tslock.E002: a BACKEND cannot be imported or is not a LockProvider.
- tslock.E003: a provider's OPTIONS are wrong (unknown key, missing key, bad value).
- tslock.E004: no "default" provider.
- tslock.E005: the Workers KV provider without acknowledge_advisory_lock=True.
- tslock.E006: keep-alive on a store that cannot extend that often (KV, lock_at_most_for < 2 s):
  for the commands loaded in the process (the running one) at every command start, and
  for every command of the project with ``check --deploy`` (which imports them all).
- tslock.E007: the database provider is configured but tslock_django's tables are not
  installed (app missing from INSTALLED_APPS, or, with --database, a table missing).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error, Tags, register

from .conf import DATABASE_BACKEND, KV_BACKEND, SETTING, backend_class, provider_settings
from .core.provider import TRUE_WORDS
from .exceptions import InvalidLockProvider

#: The database provider's tables: the locks, and the fencing mark that purge keeps.
TABLES = ("tslock_lock", "tslock_fence")


def _entries() -> tuple[dict[str, dict[str, Any]] | None, list[CheckMessage]]:
    try:
        return provider_settings(), []
    except InvalidLockProvider as err:
        return None, [Error(str(err), hint=f"See the README section on {SETTING}.", id="tslock.E001")]


@register()
def check_providers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every provider imports and accepts its OPTIONS; "default" exists."""
    entries, errors = _entries()
    if entries is None:
        return errors
    if "default" not in entries:
        errors.append(
            Error(
                f"{SETTING} has no 'default' provider",
                hint="lock() and @locked_command use 'default' unless told otherwise; add one, "
                "e.g. 'default': {'BACKEND': 'tslock_django.providers.database.DatabaseLockProvider'}.",
                id="tslock.E004",
            )
        )
    for alias, entry in entries.items():
        if entry["BACKEND"] == KV_BACKEND and not _acknowledged(
            entry["OPTIONS"].get("acknowledge_advisory_lock")
        ):
            errors.append(
                Error(
                    f"{SETTING}[{alias!r}] uses Workers KV without acknowledge_advisory_lock=True",
                    hint="Workers KV cannot guarantee one holder: two runs can overlap. Set OPTIONS "
                    "acknowledge_advisory_lock=True to accept that, or use the Durable Object provider.",
                    id="tslock.E005",
                )
            )
            continue
        try:
            cls = backend_class(alias, entry["BACKEND"])
        except InvalidLockProvider as err:
            errors.append(Error(str(err), id="tslock.E002"))
            continue
        try:
            cls(alias, **entry["OPTIONS"])
        except InvalidLockProvider as err:
            errors.append(Error(str(err), id="tslock.E003"))
        except (TypeError, ValueError) as err:
            errors.append(Error(f"{SETTING}[{alias!r}]: {err}", id="tslock.E003"))
    return errors


@register()
def check_database_app(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    entries, _ = _entries()
    if not entries or not any(e["BACKEND"] == DATABASE_BACKEND for e in entries.values()):
        return []
    if not apps.is_installed("tslock_django"):
        return [
            Error(
                "the database lock provider needs the tslock_lock table",
                hint="Add 'tslock_django' to INSTALLED_APPS and run 'manage.py migrate'.",
                id="tslock.E007",
            )
        ]
    return []


@register(Tags.database)
def check_database_table(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """With ``check --database ALIAS``: the table exists on the databases it is used on."""
    entries, _ = _entries()
    if not entries or not databases:
        return []
    from django.db import connections

    errors: list[CheckMessage] = []
    for alias, entry in entries.items():
        using = entry["OPTIONS"].get("using", "default")
        if entry["BACKEND"] != DATABASE_BACKEND or using not in databases:
            continue
        connection = connections[using]
        missing = [t for t in TABLES if t not in connection.introspection.table_names()]
        if not missing:
            continue
        # Before the first migrate the table is simply not there yet; Django's own
        # "unapplied migrations" notice covers that, and this check must not block
        # migrate (which runs database checks). Flag only a table that went missing.
        from django.db.migrations.recorder import MigrationRecorder

        recorder = MigrationRecorder(connection)
        if recorder.has_table() and recorder.migration_qs.filter(app="tslock_django").exists():
            errors.append(
                Error(
                    f"{SETTING}[{alias!r}]: table(s) {', '.join(missing)} missing in database {using!r} "
                    "although tslock_django's migrations are recorded as applied",
                    hint=f"Recreate it: 'manage.py migrate tslock_django zero --fake --skip-checks "
                    f"--database {using}' then "
                    f"'manage.py migrate tslock_django --skip-checks --database {using}'.",
                    id="tslock.E007",
                )
            )
    return errors


@register()
def check_keep_alive(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Decorated commands already loaded in this process (the running one among them)
    that ask for keep-alive on a store that cannot extend fast enough. Imports nothing:
    this runs at the start of every management command, and a command that is not
    decorated has not imported the decorator module, so there is nothing to look at."""
    decorators = sys.modules.get("tslock_django.decorators")
    if decorators is None:
        return []
    return _keep_alive_errors((_command_name(cls), cls) for cls in list(decorators.DECORATED))


@register(deploy=True)
def check_keep_alive_in_every_command(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``manage.py check --deploy``: the same check over every command of the project,
    which means importing each command module (and what it imports)."""
    from django.core.management import get_commands, load_command_class

    from .decorators import DECORATED

    # Django runs every ordinary check before the deployment ones, so check_keep_alive
    # has already reported the classes loaded until now: report only the others.
    loaded = set(DECORATED)
    commands = []
    for command, app in get_commands().items():
        if not isinstance(app, str) or app.startswith("django."):
            continue
        try:
            cls = type(load_command_class(app, command))
        except Exception:  # noqa: BLE001  a broken command is Django's to report, not ours
            continue
        commands.append((command, cls))
    return _keep_alive_errors((name, cls) for name, cls in commands if cls not in loaded)


def _command_name(cls: type) -> str:
    return cls.__module__.rpartition(".")[2]


def _keep_alive_errors(commands: Iterable[tuple[str, type]]) -> list[CheckMessage]:
    entries, _ = _entries()
    if not entries:
        return []
    errors: list[CheckMessage] = []
    for command, cls in commands:
        if not getattr(cls, "tslock_keep_alive", False):
            continue
        using, at_most = cls.tslock_using, cls.tslock_lock_at_most_for  # type: ignore[attr-defined]
        entry = entries.get(using)
        if entry is None:
            continue
        floor = _keep_alive_floor(entry["BACKEND"])
        if floor is not None and at_most < floor:
            errors.append(
                Error(
                    f"command {command!r} uses keep-alive on provider {using!r} with "
                    f"lock_at_most_for={at_most}, under the {floor} that store needs",
                    hint="Workers KV accepts one write per key per second: raise lock_at_most_for or "
                    "turn keep_alive off.",
                    id="tslock.E006",
                )
            )
    return errors


def _acknowledged(value: Any) -> bool:
    """The same reading of the flag as the provider's own option parsing."""
    return value is True or (isinstance(value, str) and value.strip().lower() in TRUE_WORDS)


def _keep_alive_floor(backend: str) -> Any:
    if backend != KV_BACKEND:
        return None
    try:
        return getattr(backend_class("", backend), "min_keep_alive_at_most_for", None)
    except InvalidLockProvider:
        return None
