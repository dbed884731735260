"""System checks: each misconfiguration gets its stable id."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest
from django.conf import settings
from django.core.checks import Error
from django.test import override_settings

from tslock_django.checks import (
    check_database_app,
    check_database_table,
    check_keep_alive,
    check_providers,
    check_providers_by_building,
)
from tslock_django.conf import invalid_url_entry

DB = "tslock_django.providers.database.DatabaseLockProvider"
KV = "tslock_django.providers.cloudflare_kv.KVLockProvider"
MEMORY = "tslock_django.providers.memory.MemoryLockProvider"


def ids(messages: list[Error]) -> list[str]:
    return [m.id for m in messages]  # type: ignore[misc]


def test_a_good_configuration_passes() -> None:
    assert check_providers() == []
    assert check_database_app() == []
    assert check_keep_alive() == []


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ({"default": "db://"}, "tslock.E001"),
        ({"default": {"BACKEND": "no.such.Provider"}}, "tslock.E002"),
        ({"default": {"BACKEND": DB, "OPTIONS": {"colour": "red"}}}, "tslock.E003"),
        ({"jobs": {"BACKEND": DB}}, "tslock.E004"),
        (
            {"default": {"BACKEND": DB}, "kv": {"BACKEND": KV, "OPTIONS": {"account_id": "a"}}},
            "tslock.E005",
        ),
    ],
)
def test_each_misconfiguration_has_its_id(setting: object, expected: str) -> None:
    with override_settings(TSLOCK_PROVIDERS=setting):
        assert expected in ids(check_providers())


def test_a_provider_url_the_reader_could_not_read_is_e008_and_nothing_else() -> None:
    entry = invalid_url_entry("environment variable TSLOCK_URL: the lock provider URL is empty")
    with override_settings(TSLOCK_PROVIDERS={"default": entry, "b": {"BACKEND": MEMORY}}):
        messages = check_providers() + check_providers_by_building() + check_database_app()
    assert ids(messages) == ["tslock.E008"]
    assert messages[0].msg == (
        "TSLOCK_PROVIDERS['default']: environment variable TSLOCK_URL: the lock provider URL is empty"
    )


def test_database_provider_without_the_app_is_reported() -> None:
    with override_settings(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"]):
        assert ids(check_database_app()) == ["tslock.E007"]


def test_table_check_needs_database_access_and_passes_when_migrated(db: None) -> None:
    assert check_database_table(databases=None) == []
    assert check_database_table(databases=["default"]) == []


@pytest.mark.django_db(transaction=True)
def test_a_dropped_table_is_reported() -> None:
    from django.db import connection

    from tslock_django.models import Lock

    with connection.schema_editor() as editor:
        editor.alter_db_table(Lock, "tslock_lock", "tslock_lock_moved")
    try:
        messages = check_database_table(databases=["default"])
    finally:
        with connection.schema_editor() as editor:
            editor.alter_db_table(Lock, "tslock_lock_moved", "tslock_lock")
    assert ids(messages) == ["tslock.E007"]
    assert "tslock_lock missing" in messages[0].msg
    assert "migrate tslock_django" in (messages[0].hint or "")


@pytest.mark.django_db(transaction=True)
def test_a_dropped_fencing_mark_table_is_reported() -> None:
    """Without tslock_fence the first lock of every new name would fail in the store."""
    from django.db import connection

    from tslock_django.models import FencingMark

    with connection.schema_editor() as editor:
        editor.alter_db_table(FencingMark, "tslock_fence", "tslock_fence_moved")
    try:
        messages = check_database_table(databases=["default"])
    finally:
        with connection.schema_editor() as editor:
            editor.alter_db_table(FencingMark, "tslock_fence_moved", "tslock_fence")
    assert ids(messages) == ["tslock.E007"]
    assert "tslock_fence missing" in messages[0].msg


def test_manage_py_check_reports_the_id(tmp_path: Path) -> None:
    """The whole path a user sees: `manage.py check` with a bad TSLOCK_URL."""
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=root,
        env={
            "PATH": "/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "TSLOCK_URL": "db://?colour=red",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "tslock.E003" in result.stderr
    assert "unknown OPTIONS key(s) 'colour'" in result.stderr


KV_PROVIDER = {
    "BACKEND": KV,
    "OPTIONS": {"account_id": "a", "namespace_id": "n", "api_token": "t", "acknowledge_advisory_lock": True},
}


def test_keep_alive_on_workers_kv_with_a_short_lock_is_reported_for_a_loaded_command() -> None:
    # Django imports the command it runs before the checks: that is what this import does.
    import_module("tests.lockapp.management.commands.locked_keepalive")
    with override_settings(TSLOCK_PROVIDERS={"default": KV_PROVIDER}):
        messages = check_keep_alive()
    # tests/lockapp's locked_keepalive asks for keep-alive with lock_at_most_for=0.4s.
    assert ids(messages) == ["tslock.E006"]
    assert "'locked_keepalive'" in messages[0].msg and "0:00:00.400000" in messages[0].msg
    with override_settings(TSLOCK_PROVIDERS={"default": {**KV_PROVIDER, "BACKEND": DB, "OPTIONS": {}}}):
        assert check_keep_alive() == []


def test_check_deploy_imports_every_command_and_reports_each_once(tmp_path: Path) -> None:
    """In a fresh process nothing is loaded: the ordinary check finds nothing, and
    `check --deploy` imports every command and reports the bad one exactly once."""
    root = Path(__file__).resolve().parent.parent
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    script = (
        "import django, sys; django.setup()\n"
        "from django.core.checks import run_checks\n"
        "from django.test.utils import override_settings\n"
        f"kv = {KV_PROVIDER!r}\n"
        "with override_settings(TSLOCK_PROVIDERS={'default': kv}):\n"
        "    plain = [m.id for m in run_checks() if m.id == 'tslock.E006']\n"
        "    deploy = [m.id for m in run_checks(include_deployment_checks=True) if m.id == 'tslock.E006']\n"
        "print(plain, deploy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[] ['tslock.E006']"


def run_check(expression: str, *options: str, providers: object = None) -> tuple[int, str, str]:
    """``manage.py check OPTIONS`` in a fresh process (tests.settings, with
    ``TSLOCK_PROVIDERS = providers`` unless ``None``), then ``expression`` evaluated there
    (``sys`` imported): the exit status, stderr and the value printed."""
    script = (
        "import sys\n"
        "from django.conf import settings\n"
        + ("" if providers is None else f"settings.TSLOCK_PROVIDERS = {providers!r}\n")
        + "from django.core.management import execute_from_command_line\n"
        "try:\n"
        f"    execute_from_command_line(['manage.py', 'check', *{list(options)!r}])\n"
        "    status = 0\n"
        "except SystemExit as exit:\n"
        "    status = exit.code\n"
        f"print('VALUE', {expression})\n"
        "sys.exit(status)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parent.parent,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    value = result.stdout.strip().splitlines()[-1].removeprefix("VALUE ") if result.stdout.strip() else ""
    return result.returncode, result.stderr, value


def after_a_check(expression: str) -> str:
    """``manage.py check`` in a fresh process (tests.settings), then ``expression`` printed
    there (``sys`` imported)."""
    status, stderr, value = run_check(expression)
    assert status == 0, stderr
    return value


def after_a_command_start(expression: str) -> str:
    """A command's start in a fresh process (tests.settings): a command with Django's
    default ``requires_system_checks`` run as ``manage.py`` runs it, which runs every
    check first; then ``expression`` printed there (``sys`` imported)."""
    script = (
        "import sys, django\n"
        "django.setup()\n"
        "from django.core.management import call_command\n"
        "from django.core.management.base import BaseCommand\n"
        "class Command(BaseCommand):\n"
        "    def handle(self, *args, **options): pass\n"
        "call_command(Command(), skip_checks=False)\n"
        f"print('VALUE', {expression})\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parent.parent,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1].removeprefix("VALUE ")


PROJECT_COMMANDS = (
    "sorted(m for m in sys.modules if '.management.commands.' in m and not m.startswith('django.'))"
)


def test_a_plain_command_imports_no_other_command_module_because_of_tslock() -> None:
    """tslock's checks run at every command start; they must not import the project's
    commands (and everything those import), which Django itself never does.
    tests.settings installs tests.lockapp, whose commands are locked."""
    assert after_a_command_start(PROJECT_COMMANDS) == "[]"
    assert after_a_command_start("'tslock_django.job_modules' in sys.modules") == "False"


def test_manage_py_check_imports_every_project_command_to_check_its_decorators() -> None:
    """`manage.py check` does (tslock.E010): the project's commands, not Django's or tslock's."""
    loaded = ast.literal_eval(after_a_check(PROJECT_COMMANDS))
    assert "tests.lockapp.management.commands.locked_job" in loaded
    assert "testproject.demo.management.commands.demo_report" in loaded
    assert "tslock_django.management.commands.tslock" not in loaded


@pytest.mark.parametrize("flag", ["true", "1", "yes", "on", True])
def test_the_acknowledgement_reads_like_the_option(flag: object) -> None:
    kv = {
        "BACKEND": KV,
        "OPTIONS": {
            "account_id": "a",
            "namespace_id": "n",
            "api_token": "t",
            "acknowledge_advisory_lock": flag,
        },
    }
    with override_settings(TSLOCK_PROVIDERS={"default": {"BACKEND": DB}, "kv": kv}):
        assert check_providers() == []


def test_a_command_start_does_not_import_django_test_because_of_tslock() -> None:
    """django.test (where Django's setting_changed signal lives) costs a command's start
    more than all of tslock; providers listen to it only once something else imported it."""
    imported = after_a_check("sorted(m for m in ('django.test', 'django.test.signals') if m in sys.modules)")
    assert imported == "[]"


#: One provider of every kind of store, each one as a project would configure it.
EVERY_KIND = {
    "default": {"BACKEND": DB},
    "elsewhere": {"BACKEND": DB, "OPTIONS": {"using": "unreachable"}},  # PostgreSQL: psycopg
    "edge": {
        "BACKEND": "tslock_django.providers.cloudflare_do.DurableObjectLockProvider",
        "OPTIONS": {"url": "https://locks.example.com", "token": "t" * 32},
    },
    "kv": KV_PROVIDER,
    "redis": {
        "BACKEND": "tslock_django.providers.redis.RedisLockProvider",
        "OPTIONS": {"url": "redis://127.0.0.1:6379/0"},
    },
}
#: What a command's start must not import because of tslock's checks: the provider
#: modules and the libraries they import (httpx, redis-py, PostgreSQL's driver).
NOT_AT_START = (
    "tslock_django.providers.database",
    "tslock_django.providers.cloudflare_do",
    "tslock_django.providers.cloudflare_kv",
    "tslock_django.providers.redis",
    "httpx",
    "redis",
    "psycopg",
)
IMPORTED = f"sorted(m for m in {NOT_AT_START!r} if m in sys.modules)"


@functools.cache
def imported_by_django_itself() -> frozenset[str]:
    """Which of NOT_AT_START ``manage.py check`` imports with tslock configured to
    need none of them (one memory provider): Django's own checks may load database
    backends (Django 6.1's field checks import every configured backend, psycopg among
    them), and that is no cost of tslock's."""
    status, stderr, imported = run_check(IMPORTED, providers={"default": {"BACKEND": MEMORY}})
    assert status == 0, stderr
    found = frozenset(ast.literal_eval(imported))
    assert not any(m.startswith("tslock_django") for m in found), found
    return found


def beyond_django(imported: str) -> list[str]:
    """The modules of ``imported`` (IMPORTED's value) that Django alone does not load."""
    return sorted(set(ast.literal_eval(imported)) - imported_by_django_itself())


#: A URL the settings allow and redis-py refuses (socket_timeout is not a number).
ODD_REDIS_URL = "redis://127.0.0.1:6379/0?socket_timeout=soon"


def test_a_plain_command_imports_no_provider_module_with_every_kind_of_store() -> None:
    """The checks at a command's start read OPTIONS from settings; they build no
    provider, so a command that is not decorated loads no store's code."""
    status, stderr, imported = run_check(IMPORTED, providers=EVERY_KIND)
    assert status == 0, stderr
    assert beyond_django(imported) == []


def test_manage_py_check_reports_bad_options_of_every_store_without_importing_it() -> None:
    bad = {
        "default": {"BACKEND": DB, "OPTIONS": {"colour": "red"}},
        "elsewhere": {"BACKEND": DB, "OPTIONS": {"using": "nowhere"}},
        "edge": {**EVERY_KIND["edge"], "OPTIONS": {"url": "https://user:pw@locks.example.com", "token": "t"}},
        "kv": {**KV_PROVIDER, "OPTIONS": {**KV_PROVIDER["OPTIONS"], "timeout": -1}},
        "redis": {**EVERY_KIND["redis"], "OPTIONS": {"url": "redis://:Secret7@127.0.0.1/db"}},
    }
    status, stderr, imported = run_check(IMPORTED, providers=bad)
    assert status == 1
    assert stderr.count("tslock.E003") == 5, stderr
    for fragment in (
        "TSLOCK_PROVIDERS['default']: unknown OPTIONS key(s) 'colour' for DatabaseLockProvider",
        "TSLOCK_PROVIDERS['elsewhere'] OPTIONS['using'] = 'nowhere' is not a database alias",
        "TSLOCK_PROVIDERS['edge'] OPTIONS['url'] must not contain credentials",
        "TSLOCK_PROVIDERS['kv'] OPTIONS['timeout'] must be a number of seconds between 0 and 300",
        "TSLOCK_PROVIDERS['redis'] OPTIONS['url'] has a path that is not a database number",
    ):
        assert fragment in stderr
    assert "Secret7" not in stderr
    assert beyond_django(imported) == []


def test_check_deploy_builds_the_built_in_providers() -> None:
    """What only a store's client library can tell waits for `check --deploy`, which
    builds each provider (no connection opens): redis-py's reading of a URL's query."""
    odd = {"default": {"BACKEND": DB}, "redis": {**EVERY_KIND["redis"], "OPTIONS": {"url": ODD_REDIS_URL}}}
    status, stderr, imported = run_check(IMPORTED, providers=odd)
    assert status == 0, stderr
    assert beyond_django(imported) == []
    status, stderr, imported = run_check(IMPORTED, "--deploy", providers=odd)
    assert status == 1
    assert stderr.count("tslock.E003") == 1, stderr
    assert "OPTIONS['url'] could not be read by redis-py" in stderr
    assert "tslock_django.providers.redis" in imported


@pytest.mark.parametrize(
    ("kind", "module", "extra"),
    [("redis", "redis", "redis"), ("edge", "httpx", "cloudflare"), ("kv", "httpx", "cloudflare")],
)
def test_a_missing_client_library_is_reported_at_every_start_without_importing_it(
    monkeypatch: pytest.MonkeyPatch, kind: str, module: str, extra: str
) -> None:
    import importlib.util

    from tslock_django.providers import store_options as options

    found = importlib.util.find_spec
    # As if the library were not installed: it is looked up, never imported (and not
    # through the per-process answer, which must not keep this test's pretence either).
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else found(name, *a)
    )
    monkeypatch.setattr(options, "_installed", options._installed.__wrapped__)
    with override_settings(TSLOCK_PROVIDERS={"default": {"BACKEND": DB}, "x": EVERY_KIND[kind]}):
        messages = check_providers()
        assert ids(messages) == ["tslock.E002"]
        assert f"needs {module}, which is not installed" in messages[0].msg
        assert f"pip install 'tslock-django[{extra}]'" in messages[0].msg
        # check --deploy does not build it to say the same again.
        assert check_providers_by_building() == []


def test_check_deploy_reports_a_client_library_that_does_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found on the path, yet its import fails (sys.modules[name] = None makes it raise).
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.delitem(sys.modules, "tslock_django.providers.redis", raising=False)
    monkeypatch.setattr(
        "tslock_django.providers.store_options.StoreOptions.missing_library", lambda self, alias: None
    )
    with override_settings(TSLOCK_PROVIDERS={"default": EVERY_KIND["redis"]}):
        assert check_providers() == []
        messages = check_providers_by_building()
    assert ids(messages) == ["tslock.E002"]
    assert "pip install 'tslock-django[redis]'" in messages[0].msg


def test_check_deploy_does_not_report_refused_options_twice() -> None:
    bad = {"default": {"BACKEND": DB, "OPTIONS": {"colour": "red"}}, "kv": {"BACKEND": KV}}
    with override_settings(TSLOCK_PROVIDERS=bad):
        assert ids(check_providers()) == ["tslock.E003", "tslock.E005"]
        assert check_providers_by_building() == []


@pytest.mark.parametrize(
    "url",
    [
        "redis//nohost",
        "foo://x",
        "",
        "cloudflare-do://@host/",
        "cloudflare-do://hunter2-token@host:port/",
        "hunter2-token:x@host://",
    ],
)
def test_a_malformed_tslock_url_fails_a_command_with_one_line_not_a_traceback(
    tmp_path: Path, url: str
) -> None:
    """The settings module reads TSLOCK_URL; a bad value used to raise there, a traceback
    of some 40 lines before Django could say anything."""
    root = Path(__file__).resolve().parent.parent
    for command in (["check"], ["tslock", "list"]):
        result = subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=root,
            env={
                "PATH": "/usr/bin:/bin",
                "DJANGO_SETTINGS_MODULE": "testproject.settings",
                "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
                "TSLOCK_URL": url,
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        about = [line for line in result.stderr.splitlines() if "TSLOCK_URL" in line]
        assert len(about) == 1, result.stderr
        assert about[0].startswith(
            "?: (tslock.E008) TSLOCK_PROVIDERS['default']: environment variable TSLOCK_URL"
        )
        # The expected form: all of them, or the one of the scheme that was given.
        assert "cloudflare-do://TOKEN@HOST/" in about[0]
        assert "hunter2" not in result.stdout + result.stderr


# -- hints that send the reader to the documentation ---------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs"
_SEE = re.compile(r"See (?:the section (?P<section>\S+) of )?docs/(?P<page>[\w/.-]+?\.md)\.")


def headings(page: Path) -> set[str]:
    """A Markdown page's headings, as read: without the #s and the code marks."""
    found = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            found.add(line.lstrip("#").strip().replace("`", ""))
    return found


def hint_target_exists(hint: str) -> bool:
    """Whether ``hint`` sends the reader to a docs page (and section) that exists."""
    where = _SEE.search(hint)
    if where is None:
        return False
    page = DOCS / where["page"]
    return page.is_file() and (where["section"] is None or where["section"] in headings(page))


def test_a_hint_target_that_does_not_exist_is_caught() -> None:
    assert hint_target_exists("See the section TSLOCK_PROVIDERS of docs/reference/settings.md.")
    assert hint_target_exists("See docs/reference/durations.md.")
    assert not hint_target_exists("See the README section on TSLOCK_PROVIDERS.")
    assert not hint_target_exists("See docs/reference/nowhere.md.")
    assert not hint_target_exists("See the section TSLOCK_NOTHING of docs/reference/settings.md.")


def test_each_hint_that_points_elsewhere_points_at_a_docs_page_that_exists() -> None:
    """E001 and E009 used to send the reader to README sections that do not exist."""
    from tslock_django.checks import check_journal, job_argument_messages

    with override_settings(TSLOCK_PROVIDERS={"default": "db://"}):
        messages = check_providers()
    with override_settings(TSLOCK_JOURNAL="default"):
        messages += check_journal()
    with override_settings(TSLOCK_SCHEDULES={"report": {"schedule": "0 3 * *"}}):
        messages += check_journal()
    with override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, "tests.badjobs"]):
        messages += [m for m in job_argument_messages() if m.id == "tslock.E010"]
    assert sorted(set(ids(messages))) == ["tslock.E001", "tslock.E009", "tslock.E010"]
    for message in messages:
        assert hint_target_exists(message.hint or ""), (message.id, message.hint)
    assert "the section TSLOCK_SCHEDULES of" in (messages[2].hint or "")


def test_no_hint_of_the_checks_names_a_page_that_does_not_exist() -> None:
    """Every hint in checks.py, read from its source: a page it names through see() is a
    docs page (its sections are checked above, where the messages are made), and no
    hint sends the reader to the README."""
    source = (Path(__file__).resolve().parent.parent / "tslock_django" / "checks.py").read_text(
        encoding="utf-8"
    )
    tree = ast.parse(source)
    pages = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "see"
        and isinstance(node.args[0], ast.Constant)
    ]
    assert len(pages) >= 3
    for page in pages:
        assert (DOCS / page).is_file(), page
    hints = [
        ast.unparse(keyword.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg == "hint"
    ]
    assert hints and not [h for h in hints if "README" in h]
