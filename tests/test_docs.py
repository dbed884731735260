"""The documentation's examples run as shown.

Pages under ``docs/`` mark the fenced blocks that must work with a MyST attribute line
just before the fence (invisible on the rendered page):

``{.run-settings}`` before a ```` ```python ```` block
    settings as a user writes them in ``settings.py``: executed in a namespace holding
    the test project's settings, then every setting the block sets is applied with
    ``override_settings`` and must pass tslock's system checks (``--deploy`` ones
    included, which build the providers) and build every configured provider.
``{.run-commands}`` before a ```` ```console ```` block
    ``$ python manage.py ...`` lines, run in order in a fresh process of the demo project
    on one temporary SQLite database (migrated), as a cron job would run them. Each must
    exit 0, or with the status its trailing ``# exit status N`` comment names. The lines
    below a command that do not start with ``$`` are its expected output: each must
    appear in what the command printed (stdout or stderr), ``...`` standing for any text.
``{.run-urls}`` before a ```` ```bash ```` block
    ``VARIABLE=URL`` lines: each URL must read as a provider entry
    (``parse_provider_url``) that the provider would accept.

Settings blocks read these environment variables, set here to harmless values:
``TSLOCK_DO_TOKEN``, ``CLOUDFLARE_KV_API_TOKEN``, ``REDIS_LOCK_URL``, ``TSLOCK_WEBHOOK_SECRET``,
``SLACK_WEBHOOK_URL``.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings

from tslock_django.conf import DATABASE_BACKEND, parse_provider_url, providers

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKERS = ("run-settings", "run-commands", "run-urls")
#: What the settings examples read from the environment.
EXAMPLE_ENVIRONMENT = {
    "TSLOCK_DO_TOKEN": "example-worker-token",
    "CLOUDFLARE_KV_API_TOKEN": "example-api-token",
    "REDIS_LOCK_URL": "redis://:example-password@127.0.0.1:6379/0",
    "TSLOCK_WEBHOOK_SECRET": "example-webhook-secret",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
}

_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)")
_ATTRS = re.compile(r"^\{([^}]*)\}\s*$")


@dataclass(frozen=True)
class Block:
    """One marked fenced block of a page."""

    marker: str
    language: str
    text: str
    page: str
    line: int

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def marked_blocks(root: Path = DOCS) -> list[Block]:
    """Every fenced block under ``root`` whose preceding line is ``{.run-...}``."""
    blocks = []
    for path in sorted(root.rglob("*.md")):
        lines = path.read_text(encoding="utf-8").splitlines()
        index = 0
        while index < len(lines):
            fence = _FENCE.match(lines[index])
            if not fence:
                index += 1
                continue
            ticks, language = fence.group(1), fence.group(2)
            end = index + 1
            while end < len(lines) and not lines[end].startswith(ticks):
                end += 1
            attrs = _ATTRS.match(lines[index - 1]) if index else None
            words = attrs.group(1).split() if attrs else []
            classes = {word[1:] for word in words if word.startswith(".")}
            for marker in sorted(classes.intersection(MARKERS)):
                blocks.append(
                    Block(
                        marker,
                        language,
                        "\n".join(lines[index + 1 : end]) + "\n",
                        str(path.relative_to(root.parent)),
                        index + 1,
                    )
                )
            index = end + 1
    return blocks


BLOCKS = marked_blocks()


def blocks_of(marker: str) -> list[Any]:
    return [pytest.param(block, id=str(block)) for block in BLOCKS if block.marker == marker]


# -- the extraction itself -----------------------------------------------------------


def test_marked_blocks_are_found_with_their_language(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text(
        "text\n\n{.run-commands}\n```console\n$ python manage.py check\n```\n\n"
        "```console\n$ not marked\n```\n\n{.run-settings}\n````python\nX = 1\n```\nY = 2\n````\n",
        encoding="utf-8",
    )
    found = marked_blocks(tmp_path)
    assert [(b.marker, b.language, b.text) for b in found] == [
        ("run-commands", "console", "$ python manage.py check\n"),
        ("run-settings", "python", "X = 1\n```\nY = 2\n"),
    ]


def test_the_docs_mark_examples_of_every_kind() -> None:
    # If a rename of the markers left every page unmarked, the tests below would pass
    # by running nothing.
    counts = {marker: sum(b.marker == marker for b in BLOCKS) for marker in MARKERS}
    assert counts["run-settings"] >= 8, counts
    assert counts["run-commands"] >= 8, counts
    assert counts["run-urls"] >= 1, counts


def test_marked_blocks_have_the_language_their_marker_runs() -> None:
    expected = {"run-settings": {"python"}, "run-commands": {"console"}, "run-urls": {"bash"}}
    wrong = [f"{b}: {b.marker} on {b.language!r}" for b in BLOCKS if b.language not in expected[b.marker]]
    assert not wrong


# -- settings ------------------------------------------------------------------------


def settings_namespace() -> dict[str, Any]:
    """The project's settings as module globals, as ``settings.py`` would see them: the
    names its settings module defines (reading every name of ``django.conf.settings``
    would also touch settings Django has deprecated, and warn)."""
    module = importlib.import_module(settings.SETTINGS_MODULE)
    return {name: value for name, value in vars(module).items() if name.isupper()}


def apply_settings_block(block: Block, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The settings a block sets (names in capitals that it assigned or changed)."""
    for name, value in EXAMPLE_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    namespace = settings_namespace()
    code = compile(block.text, str(block), "exec")
    exec(code, namespace)  # our own pages' examples
    assigned = {
        target.id
        for statement in ast.parse(block.text).body
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target])
        if isinstance(target, ast.Name)
    }
    return {name: namespace[name] for name in sorted(assigned) if name.isupper()}


def tslock_problems(**changed: Any) -> list[str]:
    with override_settings(**changed):
        messages = run_checks(include_deployment_checks=True, databases=None)
        problems = [f"{m.id}: {m.msg}" for m in messages if (m.id or "").startswith("tslock.")]
        if not problems:
            for alias in providers.aliases():
                providers[alias]  # builds it (no connection is opened)
    return problems


@pytest.mark.parametrize("block", blocks_of("run-settings"))
def test_settings_example_passes_the_checks_and_builds_its_providers(
    block: Block, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed = apply_settings_block(block, monkeypatch)
    assert changed, f"{block} sets no setting"
    assert tslock_problems(**changed) == []


def test_a_settings_example_with_a_mistake_fails_that_test(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check above can fail: the same machinery on a wrong example reports it.
    wrong = Block(
        "run-settings",
        "python",
        'TSLOCK_PROVIDERS = {"default": {"BACKEND": "tslock_django.providers.database.'
        'DatabaseLockProvider", "OPTIONS": {"usign": "default"}}}\n',
        "example.md",
        1,
    )
    problems = tslock_problems(**apply_settings_block(wrong, monkeypatch))
    assert problems and problems[0].startswith("tslock.E003") and "usign" in problems[0]


# -- URLs ----------------------------------------------------------------------------


@pytest.mark.parametrize("block", blocks_of("run-urls"))
def test_url_example_reads_as_a_provider_the_checks_accept(block: Block) -> None:
    lines = [line for line in block.text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines, f"{block} has no URL"
    for line in lines:
        variable, sep, url = line.partition("=")
        assert sep and variable.strip().isidentifier(), f"{block}: not VARIABLE=URL: {line!r}"
        entry = parse_provider_url(url.strip())
        # Beside the database provider as "default": the test project has a command with
        # a keep-alive too short for Workers KV on "default" (tslock.E006 would be right).
        configured = {"default": {"BACKEND": DATABASE_BACKEND}, "example": entry}
        assert tslock_problems(TSLOCK_PROVIDERS=configured) == [], line


# -- commands ------------------------------------------------------------------------


@dataclass
class Step:
    command: str
    status: int
    expected: list[str]


_STATUS = re.compile(r"\s+#\s*exit status (\d+)\b.*$")
_COMMENT = re.compile(r"\s+#.*$")


def steps(block: Block) -> list[Step]:
    found: list[Step] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            command = line[2:]
            wanted = _STATUS.search(command)
            command = _COMMENT.sub("", command).strip()
            found.append(Step(command, int(wanted.group(1)) if wanted else 0, []))
        elif line.strip():
            assert found, f"{block}: output before the first command: {line!r}"
            found[-1].expected.append(line.rstrip())
    return found


def printed(line: str, output: str) -> bool:
    """Whether the expected ``line`` (``...`` = any text) is in ``output``."""
    pattern = ".*?".join(re.escape(part) for part in line.split("..."))
    return re.search(pattern, output) is not None


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite database of the demo project, copied for every block."""
    database = tmp_path_factory.mktemp("docs") / "template.sqlite3"
    done = run(["python", "manage.py", "migrate", "--verbosity", "0"], database, database.parent)
    assert done.returncode == 0, done.stderr
    return database


def run(argv: list[str], database: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A documented command as a user would run it from the project folder: ``manage.py``
    is the demo project's, run in ``cwd`` (files it writes land there)."""
    assert argv[:2] == ["python", "manage.py"], f"only manage.py commands are runnable: {argv}"
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="testproject.settings",
        DATABASE_URL=f"sqlite:///{database}",
        TSLOCK_URL="db://default",
        PYTHONPATH=str(ROOT),
    )
    env.pop("TSLOCK_EDGE_URL", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *argv[2:]],
        cwd=cwd,
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize("block", blocks_of("run-commands"))
def test_command_example_runs_as_shown(block: Block, migrated: Path, tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    shutil.copy(migrated, database)
    work = tmp_path / "project"
    work.mkdir()
    planned = steps(block)
    assert planned, f"{block} has no command"
    for step in planned:
        done = run(shlex.split(step.command), database, work)
        output = done.stdout + done.stderr
        assert done.returncode == step.status, (
            f"{block}: `{step.command}` exited {done.returncode}, the page says {step.status}\n{output}"
        )
        missing = [line for line in step.expected if not printed(line, output)]
        assert not missing, f"{block}: `{step.command}` did not print {missing}\nit printed:\n{output}"


def test_a_command_example_checks_status_and_output() -> None:
    block = Block(
        "run-commands",
        "console",
        "$ python manage.py tslock overdue   # exit status 1 when late\nlate ... nightly\n",
        "example.md",
        1,
    )
    (step,) = steps(block)
    assert step.command == "python manage.py tslock overdue"
    assert (step.status, step.expected) == (1, ["late ... nightly"])
    assert printed("late ... nightly", "late     nightly: no success since ...")
    assert not printed("late ... nightly", "ok nightly")


# -- reference pages the code can contradict -----------------------------------------


def test_the_checks_page_lists_exactly_the_check_ids_the_code_reports() -> None:
    code = (ROOT / "tslock_django" / "checks.py").read_text(encoding="utf-8")
    in_code = set(re.findall(r'id="(tslock\.[EW]\d{3})"', code))
    page = (DOCS / "reference" / "checks.md").read_text(encoding="utf-8")
    on_page = set(re.findall(r"^\| `(tslock\.[EW]\d{3})` \|", page, flags=re.MULTILINE))
    assert in_code and on_page == in_code


def test_the_exit_status_pages_give_the_decorators_status_for_a_held_lock() -> None:
    from tslock_django.decorators import EXIT_LOCKED

    for page in ("reference/exit-statuses.md", "howto/cron-and-kubernetes.md"):
        text = (DOCS / page).read_text(encoding="utf-8")
        assert f"| {EXIT_LOCKED} | the lock is held" in text, page


def test_the_signals_page_lists_every_signal_the_library_sends() -> None:
    from django.dispatch import Signal

    from tslock_django import signals

    sent = {name for name, value in vars(signals).items() if isinstance(value, Signal)}
    page = (DOCS / "reference" / "signals.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(\w+)` \|", page, flags=re.MULTILINE))
    assert sent and listed == sent
