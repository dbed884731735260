"""The project's job modules, imported ahead of time to find bad decorator arguments.

A bad argument of ``@locked_command`` or ``@locked_task`` raises
:class:`~tslock_django.decorators.InvalidJobArgument` when the decorator runs, which is
when its module is imported: for a job, when cron or a worker first runs it.
``manage.py check`` and ``tslock check`` import those modules first, as
``manage.py help COMMAND``, a worker or Celery's ``autodiscover_tasks`` would:

- the module of every management command of the installed apps, the one
  ``manage.py NAME`` runs for each name (Django's own and tslock's are left out);
- the ``tasks`` module of each installed app, which Celery's autodiscovery imports and
  where ``django.tasks`` projects keep their tasks.

Importing is all that happens: no command is built or run, no task is called. A module
that fails to import for another reason is found too (its decorators could not be read),
named by the exception's class only, since its message may hold anything.
"""

from __future__ import annotations

import ast
import sysconfig
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from django.apps import AppConfig, apps
from django.utils.module_loading import module_has_submodule

#: tslock's own code, and Python's: the frames of a traceback that are not the project's.
_LIBRARY = Path(__file__).resolve().parent
_PYTHON = {Path(sysconfig.get_paths()[name]).resolve() for name in ("stdlib", "platstdlib")}
#: Installed packages, which may live under Python's own folder (no virtualenv).
_INSTALLED = {Path(sysconfig.get_paths()[name]).resolve() for name in ("purelib", "platlib")}


@dataclass(frozen=True)
class Finding:
    """One job module that cannot be imported.

    Attributes:
        job: what it is, as a person names it: ``command 'app_label: name'``, or
            ``task 'app.tasks.function'`` (``tasks module 'app.tasks'`` when the task
            could not be told).
        problem: the decorator's one-line message for a bad argument, else the class of
            the exception the import raised.
        bad_argument: whether the import failed on a bad decorator argument.
        how_to_see: a shell command that imports the module and shows its traceback.
    """

    job: str
    problem: str
    bad_argument: bool
    how_to_see: str


def find_problems(app_configs: Iterable[AppConfig] | None = None) -> list[Finding]:
    """Import every command module and ``tasks`` module of ``app_configs`` (default: the
    installed apps) and return what failed: the commands by name, then the tasks
    modules in INSTALLED_APPS order."""
    from .decorators import InvalidJobArgument

    chosen = [c for c in (apps.get_app_configs() if app_configs is None else app_configs) if _has_jobs(c)]
    found: list[Finding] = []
    for label, command, module in _command_modules(chosen):
        how = f"python manage.py help {command}"
        try:
            import_module(module)
        except InvalidJobArgument as err:
            found.append(Finding(f"command '{label}: {command}'", str(err), True, how))
        except Exception as err:  # noqa: BLE001  a check reports; it never stops the command it runs in
            found.append(Finding(f"command '{label}: {command}'", type(err).__name__, False, how))
    for config in chosen:
        module = f"{config.name}.tasks"
        if not module_has_submodule(config.module, "tasks"):
            continue
        how = f'python manage.py shell -c "import {module}"'
        try:
            import_module(module)
        except InvalidJobArgument as err:
            found.append(Finding(_task_named(err, module), str(err), True, how))
        except Exception as err:  # noqa: BLE001
            found.append(Finding(f"tasks module '{module}'", type(err).__name__, False, how))
    return found


def _has_jobs(config: AppConfig) -> bool:
    """Django's own apps hold no job of the project's, nor does tslock (its ``tasks``
    module is the decorator, its one command the ``tslock`` CLI)."""
    return not config.name.startswith("django.") and config.name != "tslock_django"


def _command_modules(configs: list[AppConfig]) -> Iterator[tuple[str, str, str]]:
    """``(app_label, command, module)`` of each command that ``manage.py`` would run
    from one of ``configs``: when two apps have a command of the same name, Django runs
    the one of the app listed first in INSTALLED_APPS, and only that one is imported."""
    from django.core.management import get_commands

    labels = {config.name: config.label for config in configs}
    for command, app in sorted(get_commands().items()):
        if isinstance(app, str) and app in labels:
            yield labels[app], command, f"{app}.management.commands.{command}"


def _task_named(err: BaseException, module: str) -> str:
    """The task whose decorator raised ``err`` while ``module`` was imported: the
    function decorated on the line of the project's code that called the decorator."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if _project_code(f.filename)]
    where = frames[-1] if frames else None
    if where is None or where.lineno is None:
        return f"tasks module '{module}'"
    function = _decorated_at(where.filename, where.lineno)
    if function is None:
        return f"task in '{module}' ({where.filename}, line {where.lineno})"
    spec = find_spec(module)
    if spec is not None and spec.origin is not None and _same_file(where.filename, spec.origin):
        return f"task '{module}.{function}'"
    # The decorator is in a module that the tasks module imports.
    return f"task '{function}' ({where.filename}, line {where.lineno})"


def _same_file(one: str, other: str) -> bool:
    try:
        return Path(one).resolve() == Path(other).resolve()
    except (OSError, ValueError):
        return False


def _project_code(filename: str) -> bool:
    """Whether a traceback's frame is the project's code: not tslock's own, nor Python's
    (the import machinery, contextlib)."""
    if filename.startswith("<"):
        return False
    try:
        path = Path(filename).resolve()
    except (OSError, ValueError):
        return False
    if path.is_relative_to(_LIBRARY):
        return False
    python = any(path.is_relative_to(place) for place in _PYTHON)
    return not python or any(path.is_relative_to(place) for place in _INSTALLED)


def _decorated_at(filename: str, line: int) -> str | None:
    """The qualified name of the function or class whose decorators span ``line`` of
    ``filename``, read from its source (``None`` when no decorator is there)."""
    try:
        tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None

    def visit(node: Any, prefix: str) -> str | None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if any(d.lineno <= line <= (d.end_lineno or d.lineno) for d in child.decorator_list):
                    return name
                found = visit(child, f"{name}." if isinstance(child, ast.ClassDef) else f"{name}.<locals>.")
            elif isinstance(child, ast.stmt):
                found = visit(child, prefix)  # under an if, a try, a with
            else:
                continue
            if found is not None:
                return found
        return None

    return visit(tree, "")
