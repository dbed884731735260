"""``manage.py tslock``: list, release, check and worker."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.admin.tslock_test_providers import (
    MEMORY,
    FailingProvider,
    FailingPurgeProvider,
    FencelessMemoryProvider,
    SelfCleaningProvider,
    StaticProvider,
    path_of,
)
from tslock_django import LockConfiguration
from tslock_django.conf import providers
from tslock_django.core.clock import MutableClock
from tslock_django.core.provider import SimpleLock
from tslock_django.core.records import LockRecord
from tslock_django.signals import lock_force_released
from tslock_django.worker.export import worker_modules

ROOT = Path(__file__).resolve().parent.parent


def closed_port() -> int:
    """A free port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(*args: str, **options: Any) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("tslock", *args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def held(alias: str, name: str, at_most: str = "10m") -> SimpleLock:
    lock = providers[alias].lock(LockConfiguration(name, at_most))
    assert lock is not None
    return lock


def is_held(alias: str, name: str) -> bool:
    provider = providers[alias]
    return any(r.name == name and r.is_held(provider.clock.now()) for r in provider.list_locks(name))


@pytest.fixture
def two_stores(settings: Any) -> tuple[SimpleLock, SimpleLock]:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY, "kv": {"BACKEND": path_of(FencelessMemoryProvider)}}
    return held("a", "nightly-report"), held("kv", "invoices")


# -- list -----------------------------------------------------------------------------


def test_list_prints_a_table_without_tokens(two_stores: tuple[SimpleLock, SimpleLock]) -> None:
    report, invoices = two_stores
    out, _ = run("list")
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["PROVIDER", "NAME", "STATE"]
    assert any(line.startswith("a ") and "nightly-report" in line and " 1 " in line for line in lines)
    assert any(line.startswith("kv (advisory)") and "invoices" in line for line in lines)
    assert report.record.token_fingerprint in out
    assert report.token not in out and invoices.token not in out


def test_list_json_has_no_tokens(two_stores: tuple[SimpleLock, SimpleLock]) -> None:
    report, invoices = two_stores
    out, _ = run("list", "--json")
    rows = json.loads(out)
    assert [(r["provider"], r["name"], r["state"], r["guarantee"]) for r in rows] == [
        ("a", "nightly-report", "held", "strong"),
        ("kv", "invoices", "held", "advisory"),
    ]
    assert rows[0]["fencing_token"] == 1 and rows[1]["fencing_token"] is None
    assert rows[0]["token_fingerprint"] == report.record.token_fingerprint
    assert 0 < rows[0]["remaining_seconds"] <= 600
    assert all("token" not in r for r in rows)
    assert report.token not in out and invoices.token not in out


def test_list_filters_by_provider_and_prefix(two_stores: tuple[SimpleLock, SimpleLock]) -> None:
    held("a", "nightly-cleanup")
    held("a", "weekly")
    rows = json.loads(run("list", "--provider", "a", "--prefix", "nightly-", "--json")[0])
    assert [r["name"] for r in rows] == ["nightly-cleanup", "nightly-report"]


def test_list_empty(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY}
    assert run("list")[0].strip() == "No locks."
    assert json.loads(run("list", "--json")[0]) == []


def test_list_unknown_provider(two_stores: Any) -> None:
    with pytest.raises(CommandError, match=r"no lock provider 'nope'.*configured aliases: a, kv"):
        run("list", "--provider", "nope")


def test_list_reports_a_failing_provider_and_lists_the_others(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY, "bad": {"BACKEND": path_of(FailingProvider)}}
    held("a", "visible")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("tslock", "list", stdout=out, stderr=err)
    assert raised.value.returncode == 1
    assert "visible" in out.getvalue()
    assert "bad: lock provider 'bad': HTTP 401" in err.getvalue()


def test_list_with_nothing_from_the_providers_that_answered_says_the_listing_is_incomplete(
    settings: Any,
) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY, "bad": {"BACKEND": path_of(FailingProvider)}}
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="1 provider"):
        call_command("tslock", "list", stdout=out, stderr=err)
    assert "No locks." not in out.getvalue(), "a failed provider may hold locks"
    assert out.getvalue().splitlines() == [
        "No locks in the providers that answered; the listing is incomplete: "
        "could not list bad (the error is on stderr)."
    ]


def test_a_table_from_some_providers_says_it_is_incomplete(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY, "bad": {"BACKEND": path_of(FailingProvider)}}
    held("a", "visible")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError):
        call_command("tslock", "list", stdout=out, stderr=err)
    assert out.getvalue().splitlines()[-1] == (
        "The listing is incomplete: could not list bad (the error is on stderr)."
    )


# -- release ----------------------------------------------------------------------------


def test_release_with_fencing_token(two_stores: Any) -> None:
    sent: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        sent.append(kwargs)

    lock_force_released.connect(receiver)
    try:
        out, _ = run("release", "nightly-report", "--provider", "a", "--fencing-token", "1")
    finally:
        lock_force_released.disconnect(receiver)
    assert "Released lock 'nightly-report' on provider 'a'" in out
    assert not is_held("a", "nightly-report")
    assert [(s["name"], s["expected"], s["released"]) for s in sent] == [("nightly-report", 1, True)]


def test_release_with_a_stale_fencing_token_changes_nothing(two_stores: Any) -> None:
    with pytest.raises(CommandError, match="not released: it is not held with that fencing token") as raised:
        run("release", "nightly-report", "--provider", "a", "--fencing-token", "7")
    assert raised.value.returncode == 1
    assert is_held("a", "nightly-report")


def test_release_with_token(two_stores: tuple[SimpleLock, SimpleLock]) -> None:
    _, invoices = two_stores
    run("release", "invoices", "--provider", "kv", "--token", invoices.token)
    assert not is_held("kv", "invoices")


def test_release_fencing_token_on_a_store_without_them_is_a_command_error(two_stores: Any) -> None:
    with pytest.raises(CommandError, match="no fencing tokens"):
        run("release", "invoices", "--provider", "kv", "--fencing-token", "1")
    assert is_held("kv", "invoices")


def test_unconditional_release_asks_first(two_stores: Any) -> None:
    with pytest.raises(CommandError, match="not confirmed"):
        run("release", "nightly-report", "--provider", "a", stdin=io.StringIO("no\n"))
    assert is_held("a", "nightly-report")

    out, _ = run("release", "nightly-report", "--provider", "a", stdin=io.StringIO("yes\n"))
    assert "whoever holds it now?" in out
    assert not is_held("a", "nightly-report")


def test_unconditional_release_without_a_terminal_needs_yes(two_stores: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("yes\n"))  # not a tty: must not be read
    with pytest.raises(CommandError, match="needs --yes"):
        run("release", "nightly-report", "--provider", "a")
    assert is_held("a", "nightly-report")

    run("release", "nightly-report", "--provider", "a", "--yes")
    assert not is_held("a", "nightly-report")


def test_release_of_a_lock_not_held(settings: Any) -> None:
    clock = MutableClock()
    settings.TSLOCK_PROVIDERS = {"a": {**MEMORY, "OPTIONS": {"clock": clock}}}
    held("a", "short", at_most="1m")
    clock.advance("2m")
    with pytest.raises(CommandError, match=r"not released: it is not held$"):
        run("release", "short", "--provider", "a", "--yes")


def test_release_usage_errors(two_stores: Any) -> None:
    with pytest.raises(CommandError, match="--provider"):
        run("release", "nightly-report")
    with pytest.raises(CommandError, match="not allowed with argument"):
        run("release", "nightly-report", "--provider", "a", "--fencing-token", "1", "--token", "t")
    with pytest.raises(CommandError, match="no lock provider 'zz'"):
        run("release", "nightly-report", "--provider", "zz", "--yes")


def test_release_store_failure(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {"ro": {"BACKEND": path_of(FailingProvider)}}
    with pytest.raises(CommandError, match="'x' was not released: lock provider 'ro': this store refuses"):
        run("release", "x", "--provider", "ro", "--fencing-token", "1")


# -- check ------------------------------------------------------------------------------


def test_check_all_ok(two_stores: Any) -> None:
    out, _ = run("check")
    assert out.splitlines() == ["a: ok (strong)", "kv: ok (advisory)"]


def test_check_fails_with_status_1_naming_each_failure(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {
        "a": MEMORY,
        "bad": {"BACKEND": path_of(FailingProvider)},
        "bug": {"BACKEND": path_of(FailingProvider), "OPTIONS": {"failure": "bug"}},
        "conf": {"BACKEND": "no.such.Provider"},
    }
    out = io.StringIO()
    with pytest.raises(CommandError, match="3 of 4 lock provider") as raised:
        call_command("tslock", "check", stdout=out)
    assert raised.value.returncode == 1
    lines = out.getvalue().splitlines()
    assert lines[0] == "a: ok (strong)"
    assert lines[1].startswith("bad: FAILED: lock provider 'bad': HTTP 401")
    assert lines[2] == "bug: FAILED: RuntimeError"
    assert lines[3].startswith("conf: FAILED:") and "could not be imported" in lines[3]
    assert "super-secret-value" not in out.getvalue()


def test_check_exit_status_from_the_shell(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'x.sqlite3'}",
        "TSLOCK_URL": "memory://",
        "TSLOCK_EDGE_URL": f"cloudflare-do+http://secret-bearer@127.0.0.1:{closed_port()}/",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "tslock", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "default: ok" in result.stdout
    assert "edge: FAILED" in result.stdout
    assert "secret-bearer" not in result.stdout + result.stderr


# -- worker -----------------------------------------------------------------------------


def test_worker_writes_the_bundle(tmp_path: Path) -> None:
    out, _ = run("worker", "--output", str(tmp_path / "w"))
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == sorted(
        ["DEPLOY.md", *worker_modules(), "package.json", "wrangler.jsonc"]
    )
    assert "Wrote the Worker bundle" in out
    with pytest.raises(CommandError, match=r"exist"):
        run("worker", "--output", str(tmp_path / "w"))
    run("worker", "--output", str(tmp_path / "w"), "--overwrite", "--name", "my-locks")
    assert "my-locks" in (tmp_path / "w" / "wrangler.jsonc").read_text()


def test_worker_needs_output() -> None:
    with pytest.raises(CommandError, match="--output"):
        run("worker")


def test_a_subcommand_is_required() -> None:
    with pytest.raises(CommandError):
        run()


def test_configuration_errors_are_command_errors(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {"bad": {"BACKEND": "no.such.Provider"}}
    with pytest.raises(CommandError, match="could not be imported"):
        run("release", "x", "--provider", "bad", "--yes")
    settings.TSLOCK_PROVIDERS = ["not", "a", "dict"]
    with pytest.raises(CommandError, match="TSLOCK_PROVIDERS must be a dict"):
        run("list")


def test_list_shows_unreadable_times_as_unknown(settings: Any) -> None:
    naive = datetime(2030, 1, 1)
    odd = LockRecord("odd", lock_until=naive, locked_at=naive, locked_by="?")
    settings.TSLOCK_PROVIDERS = {"s": {"BACKEND": path_of(StaticProvider), "OPTIONS": {"records": [odd]}}}
    [row] = json.loads(run("list", "--json")[0])
    assert row["state"] == "unknown" and row["remaining_seconds"] is None
    table = run("list")[0].splitlines()[1].split()
    assert table[:3] == ["s", "odd", "unknown"]
    assert table[-4:] == ["-", "-", "-", "-"]


# -- list, streamed -------------------------------------------------------------------------


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Pages of 2 records, and a log of (alias, limit) for every query the stores answer."""
    from tslock_django.cli import list_locks as tslock
    from tslock_django.providers.memory import MemoryLockProvider

    monkeypatch.setattr(tslock, "PAGE_SIZE", 2)
    asked: list[tuple[str, int]] = []
    answer = MemoryLockProvider._query

    def logged(self: MemoryLockProvider, query: Any, after: Any) -> Any:
        asked.append((self.alias, query.limit))
        return answer(self, query, after)

    monkeypatch.setattr(MemoryLockProvider, "_query", logged)
    return asked


@pytest.fixture
def many(settings: Any) -> MutableClock:
    """Store "a" holds job-0..job-4 and an expired "old"; store "b" holds b-0..b-2."""
    clock = MutableClock()
    settings.TSLOCK_PROVIDERS = {"a": {**MEMORY, "OPTIONS": {"clock": clock}}, "b": MEMORY}
    held("a", "old", at_most="1m")
    clock.advance("2m")
    for i in range(5):
        held("a", f"job-{i}")
    for i in range(3):
        held("b", f"b-{i}")
    return clock


def test_list_reads_page_by_page(many: MutableClock, small_pages: list[tuple[str, int]]) -> None:
    out, _ = run("list")
    names = [line.split()[1] for line in out.splitlines()[1:]]
    assert names == ["job-0", "job-1", "job-2", "job-3", "job-4", "b-0", "b-1", "b-2"]
    assert small_pages == [("a", 2), ("a", 2), ("a", 2), ("b", 2), ("b", 2)]
    assert out.splitlines()[0].split()[:2] == ["PROVIDER", "NAME"]  # one header


def test_list_limit_stops_reading(many: MutableClock, small_pages: list[tuple[str, int]]) -> None:
    rows = json.loads(run("list", "--limit", "3", "--json")[0])
    assert [r["name"] for r in rows] == ["job-0", "job-1", "job-2"]
    assert small_pages == [("a", 2), ("a", 2)]  # the third record ends the reading
    rows = json.loads(run("list", "--limit", "6", "--json")[0])
    assert [r["name"] for r in rows] == ["job-0", "job-1", "job-2", "job-3", "job-4", "b-0"]


def test_list_json_is_one_valid_document_across_pages(
    many: MutableClock, small_pages: list[tuple[str, int]]
) -> None:
    out, _ = run("list", "--json")
    rows = json.loads(out)
    assert [(r["provider"], r["name"]) for r in rows] == [("a", f"job-{i}") for i in range(5)] + [
        ("b", f"b-{i}") for i in range(3)
    ]
    assert all(r["state"] == "held" for r in rows)


def test_list_current_by_default_all_or_state_on_request(many: MutableClock) -> None:
    def listed(*args: str) -> list[str]:
        return [r["name"] for r in json.loads(run("list", "--provider", "a", "--json", *args)[0])]

    assert "old" not in listed()
    assert listed("--all") == ["job-0", "job-1", "job-2", "job-3", "job-4", "old"]
    assert listed("--state", "expired") == ["old"]
    assert listed("--state", "all") == listed("--all")


def test_list_json_stays_valid_when_a_provider_fails(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY, "bad": {"BACKEND": path_of(FailingProvider)}, "c": MEMORY}
    held("a", "first")
    held("c", "last")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("tslock", "list", "--json", stdout=out, stderr=err)
    assert raised.value.returncode == 1
    assert [r["name"] for r in json.loads(out.getvalue())] == ["first", "last"]
    assert "bad: lock provider 'bad': HTTP 401" in err.getvalue()


def test_list_escapes_control_characters_in_the_table(settings: Any) -> None:
    now = datetime.now(tz=timezone.utc)
    forged = LockRecord(
        "evil\x1b[2J\x07name",
        lock_until=now + timedelta(minutes=5),
        locked_at=now,
        locked_by="host:1\nfake-row  held  forged\r\u202eback\\slash",
        fencing_token=1,
    )
    settings.TSLOCK_PROVIDERS = {"s": {"BACKEND": path_of(StaticProvider), "OPTIONS": {"records": [forged]}}}
    out, _ = run("list")
    lines = out.splitlines()
    assert len(lines) == 2  # the header and one row: the newline forged nothing
    for raw in ("\x1b", "\x07", "\r", "\u202e"):
        assert raw not in out
    assert "evil\\x1b[2J\\x07name" in lines[1]
    assert "host:1\\x0afake-row  held  forged\\x0d\\u202eback\\\\slash" in lines[1]
    # JSON keeps the exact strings (escaped by JSON itself).
    [row] = json.loads(run("list", "--json")[0])
    assert row["name"] == forged.name and row["locked_by"] == forged.locked_by


def test_list_usage_errors(many: MutableClock) -> None:
    with pytest.raises(CommandError, match="--limit: must be a whole number of at least 1"):
        run("list", "--limit", "0")
    with pytest.raises(CommandError, match="not allowed with argument"):
        run("list", "--all", "--state", "held")
    with pytest.raises(CommandError, match="invalid choice: 'gone'"):
        run("list", "--state", "gone")


# -- purge ---------------------------------------------------------------------------------


def test_purge_dry_run_counts_and_changes_nothing(many: MutableClock) -> None:
    many.advance("1h")  # "old" expired 61 minutes ago; job-* ten minutes locks expired 50 min ago
    out, _ = run("purge", "--expired-for", "55m", "--provider", "a", "--dry-run")
    assert out.splitlines() == ["a: would delete 1 record expired for more than 55m (dry run)"]
    assert [r.name for r in providers["a"].list_locks()][-1] == "old"

    out, _ = run("purge", "--expired-for", "PT30M")
    assert out.splitlines() == [
        "a: deleted 6 records expired for more than 30m",
        "b: deleted 0 records expired for more than 30m",
    ]
    assert providers["a"].list_locks() == []
    assert len(providers["b"].list_locks()) == 3  # b's locks use the real clock: still held


def test_purge_says_when_a_store_cleans_itself(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY, "kv": {"BACKEND": path_of(SelfCleaningProvider)}}
    out, _ = run("purge", "--expired-for", "30d")
    assert out.splitlines() == [
        "a: deleted 0 records expired for more than 30d",
        "kv: nothing to purge: Workers KV deletes each key when its expiration passes",
    ]


def test_purge_store_failure_is_exit_status_1(settings: Any) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY, "bad": {"BACKEND": path_of(FailingPurgeProvider)}}
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="1 provider") as raised:
        call_command("tslock", "purge", "--expired-for", "1d", stdout=out, stderr=err)
    assert raised.value.returncode == 1
    assert "a: deleted 0 records" in out.getvalue()
    assert "bad: purge failed: lock provider 'bad': HTTP 500" in err.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "purge needs --expired-for \\(lock records\\), --runs-older-than"),
        (["--expired-for", "soon"], r"cannot read 'soon' as a duration; use seconds"),
        (["--expired-for=-3d"], "must not be negative"),
        (["--expired-for", "30d", "--batch-size", "0"], "--batch-size: must be a whole number"),
        (["--expired-for", "30d", "--batch-size", "10001"], "--batch-size: must be at most 10,000"),
        (["--expired-for", "30d", "--provider", "zz"], "no lock provider 'zz'"),
    ],
)
def test_purge_usage_errors(settings: Any, args: list[str], message: str) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY}
    with pytest.raises(CommandError, match=message):
        run("purge", *args)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", "argument --expired-for: cannot read 'x' as a duration; use seconds"),
        ("-3d", "argument --expired-for: must not be negative, got '-3d'; use seconds"),
    ],
)
def test_a_bad_duration_names_its_option_once(settings: Any, value: str, message: str) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY}
    with pytest.raises(CommandError) as raised:
        run("purge", f"--expired-for={value}")
    assert str(raised.value).startswith(f"Error: {message}")
    assert str(raised.value).count("--expired-for") == 1


def test_check_is_one_small_query_per_provider(settings: Any, small_pages: list[tuple[str, int]]) -> None:
    settings.TSLOCK_PROVIDERS = {"a": MEMORY, "b": MEMORY}
    assert run("check")[0].splitlines() == ["a: ok (strong)", "b: ok (strong)"]
    assert small_pages == [("a", 1), ("b", 1)]


def test_runtime_says_where_the_local_workers_runtime_is() -> None:
    out, _ = run("runtime")
    assert "The local Workers runtime (miniflare " in out
    assert "Node.js: " in out


def test_runtime_install_and_remove_exclude_each_other() -> None:
    with pytest.raises(CommandError, match="not allowed with argument --install"):
        run("runtime", "--install", "--remove")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "9000"], "--port and --persist go with --serve"),
        (["--persist", "state"], "--port and --persist go with --serve"),
        (["--serve", "--port", "65536"], "argument --port: must be a whole number from 0 to 65535"),
        (["--serve", "--install"], "argument --install: not allowed with argument --serve"),
    ],
)
def test_runtime_serve_usage_errors(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run("runtime", *args)


def test_each_subcommand_is_a_module_of_its_own_and_the_old_names_still_import() -> None:
    from tslock_django.cli import SUBCOMMANDS
    from tslock_django.management.commands import tslock

    assert list(SUBCOMMANDS) == [
        "list",
        "release",
        "check",
        "purge",
        "reindex",
        "worker",
        "runtime",
        "run",
        "runs",
        "overdue",
        "pause",
        "resume",
    ]
    modules = {module.__name__ for module in SUBCOMMANDS.values()}
    assert len(modules) == len(SUBCOMMANDS)
    assert all(name.startswith("tslock_django.cli.") for name in modules)
    # What code may have imported from the command module before the split.
    assert {name: hasattr(tslock, name) for name in tslock.__all__} == dict.fromkeys(tslock.__all__, True)
    assert tslock.printable("\x1b[2J") == "\\x1b[2J"


def test_django_options_may_follow_the_subcommand(tmp_path: Any) -> None:
    # As after any other command: argparse used to refuse them after "list", "check" ...
    root = Path(__file__).resolve().parent.parent
    env = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "tslock",
            "worker",
            "--output",
            str(tmp_path / "w"),
            "--settings=no_such_settings",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "unrecognized arguments" not in done.stderr
    assert "No module named 'no_such_settings'" in done.stderr, "--settings after the subcommand is honoured"
    out, _ = run("worker", "--output", str(tmp_path / "v"), "-v", "2", "--no-color", "--traceback")
    assert (tmp_path / "v" / "index.js").is_file(), out
