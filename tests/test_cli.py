"""``manage.py tslock``: list, release, check and worker."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.admin.tslock_test_providers import (
    MEMORY,
    FailingProvider,
    FencelessMemoryProvider,
    StaticProvider,
    path_of,
)
from tslock_django import LockConfiguration
from tslock_django.conf import providers
from tslock_django.core.clock import MutableClock
from tslock_django.core.provider import SimpleLock
from tslock_django.core.records import LockRecord
from tslock_django.signals import lock_force_released

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
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["DEPLOY.md", "index.js", "wrangler.jsonc"]
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
