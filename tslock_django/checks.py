"""System checks (``manage.py check``), with stable ids ``tslock.E001`` to ``tslock.E012``
and ``tslock.W001`` to ``tslock.W003``, listed with what each means in
``docs/reference/checks.md``.

Django runs the untagged checks at the start of every management command, so they read
settings and build nothing: a built-in provider's OPTIONS are read by
:mod:`tslock_django.providers.store_options`, the code its constructor runs, without
importing the provider or its client library, and no connection is opened. A third-party
BACKEND is built (the only way to learn what it accepts). Importing every job module
(E010, W001) is too slow for that, so it runs only in ``manage.py check`` and ``tslock
check``; the database table check only with ``check --database``. Each hint that sends the
reader elsewhere names a documentation page through :func:`see`, and a test holds it to exist.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.views.decorators.debug import sensitive_variables

from .conf import (
    DATABASE_BACKEND,
    KV_BACKEND,
    SETTING,
    backend_class,
    invalid_url_error,
    provider_arguments,
    provider_settings,
)
from .core.options import TRUE_WORDS
from .exceptions import InvalidLockProvider

if TYPE_CHECKING:
    from .providers.store_options import StoreOptions

#: The database provider's tables: the locks, and the fencing mark that purge keeps.
TABLES = ("tslock_lock", "tslock_fence")


def _entries() -> tuple[dict[str, dict[str, Any]] | None, list[CheckMessage]]:
    try:
        return provider_settings(), []
    except InvalidLockProvider as err:
        return None, [Error(str(err), hint=see("reference/settings.md", SETTING), id="tslock.E001")]


def see(page: str, section: str | None = None) -> str:
    """A hint that sends the reader to ``page`` of the documentation (a path under
    ``docs/``), or to one ``section`` of it (its heading, without markup)."""
    where = f"docs/{page}" if section is None else f"the section {section} of docs/{page}"
    return f"See {where}."


@register()
def check_providers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every provider accepts its OPTIONS (a built-in one read without importing it, any
    other built); "default" exists."""
    # Imported here rather than with this module: a process that never runs the checks
    # (a web server's worker) does not load it, and its cost counts as the checks' own.
    from .providers.store_options import BUILT_IN

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
        unreadable = invalid_url_error(entry)
        if unreadable is not None:
            errors.append(Error(f"{SETTING}[{alias!r}]: {unreadable}", id="tslock.E008"))
            continue
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
        store = BUILT_IN.get(entry["BACKEND"])
        missing = store.missing_library(alias) if store is not None else None
        if missing is not None:
            errors.append(Error(missing, id="tslock.E002"))
        elif store is not None:
            errors.extend(_check_built_in(alias, store, entry["OPTIONS"]))
        else:
            errors.extend(_check_by_building(alias, entry["BACKEND"], entry["OPTIONS"]))
    return errors


@register(deploy=True)
def check_providers_by_building(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``manage.py check --deploy``: also build each built-in provider whose OPTIONS
    passed (building opens no connection). That imports its module and client library,
    which reports what only the library reads in the OPTIONS, such as redis-py and a
    Redis URL's query string (E003), and a library that is found but does not import
    (E002)."""
    from .providers.store_options import BUILT_IN

    entries, _ = _entries()
    if not entries:
        return []
    errors: list[CheckMessage] = []
    for alias, entry in entries.items():
        store = BUILT_IN.get(entry["BACKEND"])
        # Third-party providers were built by check_providers; a refused entry (E002,
        # E003, E005) has been reported by it already.
        if store is None or store.missing_library(alias) or _check_built_in(alias, store, entry["OPTIONS"]):
            continue
        errors.extend(_check_by_building(alias, entry["BACKEND"], entry["OPTIONS"]))
    return errors


@sensitive_variables("options", "rest")
def _check_built_in(alias: str, store: StoreOptions, options: dict[str, Any]) -> list[CheckMessage]:
    """A built-in store's OPTIONS, read by the code its constructor runs, without
    importing the provider's module (nor httpx, redis-py or a database driver)."""
    try:
        _, rest = provider_arguments(alias, store.provider, store.defaults, options)
        store.read(alias, rest)
    except InvalidLockProvider as err:
        return [Error(str(err), id="tslock.E003")]
    except (TypeError, ValueError) as err:
        # A value the checks did not foresee: a check must report, never crash the
        # command it runs before, and never quote what may be a secret.
        return [
            Error(f"{SETTING}[{alias!r}]: OPTIONS could not be read ({type(err).__name__})", id="tslock.E003")
        ]
    return []


@sensitive_variables("options", "rest")
def _check_by_building(alias: str, backend: str, options: dict[str, Any]) -> list[CheckMessage]:
    """Any other BACKEND: the only way to learn what it accepts is to import it and
    build it, as the handler would (no provider opens a connection when built)."""
    try:
        cls = backend_class(alias, backend)
    except InvalidLockProvider as err:
        return [Error(str(err), id="tslock.E002")]
    try:
        clock, rest = provider_arguments(alias, cls.__name__, cls.default_options, options)
        cls(alias, clock=clock, **rest)
    except InvalidLockProvider as err:
        return [Error(str(err), id="tslock.E003")]
    except (TypeError, ValueError) as err:
        return [Error(f"{SETTING}[{alias!r}]: {err}", id="tslock.E003")]
    return []


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
    # Known without importing the KV provider (and httpx), like its OPTIONS.
    from .providers.store_options import KV_MIN_KEEP_ALIVE_AT_MOST_FOR

    return KV_MIN_KEEP_ALIVE_AT_MOST_FOR


@register()
def check_journal(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``TSLOCK_JOURNAL`` and ``TSLOCK_SCHEDULES`` (tslock.E009): read from settings
    only, no database access."""
    from .journal.recorder import journal_database
    from .journal.status import schedules_from_settings

    errors: list[CheckMessage] = []
    readers = (("TSLOCK_JOURNAL", journal_database), ("TSLOCK_SCHEDULES", schedules_from_settings))
    for setting, read in readers:
        try:
            read()
        except ValueError as err:
            errors.append(Error(str(err), hint=see("reference/settings.md", setting), id="tslock.E009"))
    return errors


@register()
def check_monitors(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``TSLOCK_MONITORS`` (tslock.E012); with ``sentry``, sentry-sdk installed and
    initialised (tslock.W002); names of ``TSLOCK_SCHEDULES`` pinged under another slug,
    under one slug with another name, or under none (tslock.W003). No network calls."""
    from .monitors.config import SETTING, InvalidMonitors, read

    try:
        monitors = read(getattr(settings, SETTING, None))
    except InvalidMonitors as err:
        return [Error(str(err), hint=see("reference/settings.md", SETTING), id="tslock.E012")]
    if monitors is None:
        return []
    found: list[CheckMessage] = []
    if monitors.sentry:
        problem = _sentry_problem()
        if problem:
            found.append(CheckWarning(problem, hint=see("howto/monitors.md"), id="tslock.W002"))
    return found + _slug_warnings()


def _sentry_problem() -> str:
    """What keeps tslock's check-ins from Sentry, or ``""``: checked without importing
    the SDK (a project that uses it has imported it by now, to initialise it)."""
    import importlib.util

    sdk = sys.modules.get("sentry_sdk")
    if sdk is None and importlib.util.find_spec("sentry_sdk") is None:
        return (
            "TSLOCK_MONITORS has 'sentry' but sentry-sdk is not installed: install it "
            "(pip install 'tslock-django[sentry]') and call sentry_sdk.init(dsn=...) in settings"
        )
    get_client = getattr(sdk, "get_client", None)
    if get_client is None or not get_client().is_active():
        return (
            "TSLOCK_MONITORS has 'sentry' but sentry-sdk is not initialised in this process, so no "
            "check-in would be sent: call sentry_sdk.init(dsn=...) in settings (sentry-sdk 2 or later)"
        )
    return ""


def _slug_warnings() -> list[CheckMessage]:
    from .journal.status import schedules_from_settings
    from .monitors.slug import is_slug, slug_of

    try:
        names = list(schedules_from_settings())
    except ValueError:  # tslock.E009 reports it
        return []
    found: list[CheckMessage] = []
    by_slug: dict[str, list[str]] = {}
    for name in names:
        slug = slug_of(name)
        by_slug.setdefault(slug, []).append(name)
        if not slug:
            found.append(
                CheckWarning(
                    f"TSLOCK_SCHEDULES[{name!r}] makes no monitor slug, so its runs are not "
                    "pinged: give the job a name with a-z, 0-9, '-' or '_'",
                    id="tslock.W003",
                )
            )
        elif not is_slug(name):
            found.append(
                CheckWarning(
                    f"TSLOCK_SCHEDULES[{name!r}] is pinged to its monitors as {slug!r} (a slug "
                    "has only a-z, 0-9, '-' and '_')",
                    hint=see("howto/monitors.md"),
                    id="tslock.W003",
                )
            )
    for slug, sharing in by_slug.items():
        if slug and len(sharing) > 1:
            found.append(
                CheckWarning(
                    f"TSLOCK_SCHEDULES names {sorted(sharing)} are all pinged as {slug!r}, one "
                    "monitor for several jobs: rename all but one",
                    id="tslock.W003",
                )
            )
    return found


@register()
def check_alerts(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``TSLOCK_ALERTS`` (tslock.E011): its shape, each BACKEND imported and each channel
    built with its OPTIONS (a constructor reads them and opens no connection), and an
    email channel for ``ADMINS`` when ``ADMINS`` is empty (it would send nothing)."""
    from django.conf import settings

    configured = getattr(settings, "TSLOCK_ALERTS", None)
    if configured is None:
        return []  # the common case, without importing the channels at every command's start
    from .alerts.channels import EmailChannel
    from .alerts.configured import SETTING as ALERTS
    from .alerts.configured import build_channels
    from .alerts.errors import InvalidAlertChannel

    hint = see("reference/settings.md", ALERTS)
    try:
        channels = build_channels(configured)
    except InvalidAlertChannel as err:
        return [Error(str(err), hint=hint, id="tslock.E011")]
    errors: list[CheckMessage] = []
    for index, (_, channel) in enumerate(channels):
        if isinstance(channel, EmailChannel) and channel.recipients is None and not settings.ADMINS:
            errors.append(
                Error(
                    f"{ALERTS}['channels'][{index}]: an EmailChannel without recipients sends to "
                    "ADMINS, and ADMINS is empty, so no notice would reach anyone",
                    hint="Set ADMINS, or the channel's recipients option. " + hint,
                    id="tslock.E011",
                )
            )
    return errors


#: Django's ``check`` command: loaded in a process that runs ``manage.py check`` or
#: ``manage.py test`` (whose runner calls it), and not at the start of other commands.
CHECK_COMMAND = "django.core.management.commands.check"


@register()
def check_job_arguments(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Bad ``@locked_command`` and ``@locked_task`` arguments (tslock.E010), and job
    modules that fail to import otherwise (tslock.W001), when ``manage.py check`` runs.

    Importing every command and tasks module of the project costs what those modules
    import (milliseconds to seconds), where every other check costs under a millisecond
    at each command's start; and at a command's start that command has been imported
    already: a bad argument of its own has stopped it with the decorator's message
    before the checks. So the check looks only when Django's ``check`` command is what
    runs (``tslock check`` calls :func:`job_argument_messages` itself). Django gives a
    check no other way to tell ``check`` from a command's start: both run every check
    without a tag.
    """
    if CHECK_COMMAND not in sys.modules:
        return []
    return job_argument_messages(app_configs)


def job_argument_messages(app_configs: Iterable[Any] | None = None) -> list[CheckMessage]:
    """Import the job modules of ``app_configs`` (default: every installed app) and
    report each bad decorator argument (E010: the job and the decorator's one-line
    message) and each module that fails to import otherwise (W001)."""
    from django.core.checks import Warning as CheckWarning

    from .job_modules import find_problems

    messages: list[CheckMessage] = []
    for found in find_problems(app_configs):
        if found.bad_argument:
            messages.append(
                Error(
                    f"{found.job}: {found.problem}",
                    hint="Its module fails to import, so the job fails whenever it runs. "
                    + see("reference/durations.md"),
                    id="tslock.E010",
                )
            )
        else:
            messages.append(
                CheckWarning(
                    f"{found.job} could not be imported ({found.problem}), so its tslock "
                    "decorators were not checked",
                    hint=f"Run '{found.how_to_see}' to see why.",
                    id="tslock.W001",
                )
            )
    return messages
