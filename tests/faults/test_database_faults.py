"""Database faults: a connection killed during acquire, the table missing, a holder
killed with SIGKILL. Each is a LockProviderError (or, for the dead holder, a lock that
frees at lock_until and not before)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.conftest import database_marks, run_manage
from tslock_django import LockConfiguration, LockProviderError
from tslock_django.models import Lock
from tslock_django.providers.database import DatabaseLockProvider

ROOT = Path(__file__).resolve().parents[2]
SERVERS = [
    pytest.param("default", "SQLite", marks=database_marks("default", "SQLite"), id="sqlite"),
    pytest.param("postgres", "PostgreSQL", marks=database_marks("postgres", "PostgreSQL"), id="postgres"),
    pytest.param("mariadb", "MariaDB", marks=database_marks("mariadb", "MariaDB"), id="mariadb"),
]


@pytest.mark.parametrize(("alias", "server"), [SERVERS[1]])
def test_connection_killed_during_acquire_is_a_provider_error(alias: str, server: str) -> None:
    """The acquiring UPDATE waits on a row lock; the server then terminates its backend."""
    import psycopg

    provider = DatabaseLockProvider("pg", using=alias)
    name = f"killed-{uuid.uuid4().hex[:8]}"
    config = LockConfiguration(name, "2s")
    first = provider.lock(config)  # the row exists, so acquire is the conditional UPDATE
    assert first is not None and first.unlock()
    time.sleep(0.05)
    params = connections[alias].get_connection_params()
    dsn = {k: params[k] for k in ("host", "port", "user", "dbname") if k in params}
    outcome: dict[str, Any] = {}

    def acquire() -> None:
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                outcome["pid"] = cursor.fetchone()[0]
            outcome["result"] = provider.lock(config)
        except Exception as err:  # noqa: BLE001 - the test inspects whatever was raised
            outcome["error"] = err
        finally:
            connections[alias].close()

    with psycopg.connect(**dsn) as blocker, psycopg.connect(**dsn, autocommit=True) as killer:
        blocker.execute("SELECT 1 FROM tslock_lock WHERE name = %s FOR UPDATE", [name])
        thread = threading.Thread(target=acquire)
        thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            waiting = killer.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                [outcome.get("pid", -1)],
            ).fetchone()
            if waiting and waiting[0]:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the acquire never waited on the row lock")
        killer.execute("SELECT pg_terminate_backend(%s)", [outcome["pid"]])
        thread.join(10)
        blocker.rollback()
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), LockProviderError), outcome
    assert "lock provider 'pg'" in str(outcome["error"])
    # The killed UPDATE never committed: the lock is free at once (long before lock_at_most_for).
    held = provider.lock(config)
    assert held is not None, "the terminated acquire left the lock held"
    assert held.fencing_token == first.fencing_token + 1


@pytest.mark.parametrize(("alias", "server"), SERVERS)
def test_missing_table_is_a_provider_error(alias: str, server: str) -> None:
    provider = DatabaseLockProvider("db", using=alias)
    config = LockConfiguration(f"table-{uuid.uuid4().hex[:8]}", "2s")
    with connections[alias].schema_editor() as editor:
        editor.alter_db_table(Lock, "tslock_lock", "tslock_lock_moved")
    try:
        with pytest.raises(LockProviderError, match="lock provider 'db'"):
            provider.lock(config)
        with pytest.raises(LockProviderError):
            provider.list_locks()
    finally:
        with connections[alias].schema_editor() as editor:
            editor.alter_db_table(Lock, "tslock_lock_moved", "tslock_lock")
    assert provider.lock(config) is not None, "the provider recovers once the table is back"


def test_decorated_command_with_the_table_dropped_fails_closed(tmp_path: Path) -> None:
    database = tmp_path / "jobs.sqlite3"
    assert run_manage(database, "migrate", "--verbosity", "0").returncode == 0
    with sqlite3.connect(database) as raw:
        raw.execute("DROP TABLE tslock_lock")
    done = run_manage(database, "demo_report", "--seconds", "0")
    assert done.returncode == 1
    assert "ran:" not in done.stdout
    assert "lock provider 'default'" in done.stderr and "did not run" in done.stderr, done.stderr
    assert "tslock_lock" in done.stderr, "the message should name what is missing"
    # Bring the table back as check tslock.E007 advises; E007 is itself an error of the
    # database checks that migrate runs, so the advice only works with --skip-checks.
    back = ["--skip-checks", "--verbosity", "0"]
    assert run_manage(database, "migrate", "tslock_django", "zero", "--fake", *back).returncode == 0
    assert run_manage(database, "migrate", *back).returncode == 0
    again = run_manage(database, "demo_report", "--seconds", "0")
    assert again.returncode == 0 and again.stdout.startswith("ran:"), again.stderr


@pytest.mark.parametrize(("alias", "server"), SERVERS)
def test_killed_holder_blocks_others_until_lock_at_most_for_only(alias: str, server: str) -> None:
    settings = connections[alias].settings_dict
    database = {k: settings[k] for k in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")}
    name = f"crash-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    # `with` closes the pipes once the holder is gone (it waits for it, too).
    with subprocess.Popen(
        [sys.executable, "-m", "tests.faults.crash_holder", json.dumps(database), name, "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None
            line = holder.stdout.readline().split()
            assert line[:1] == ["HELD"], holder.stderr.read() if holder.stderr else line
            fencing, lock_until = int(line[1]), datetime.fromisoformat(line[2])
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
    provider = DatabaseLockProvider("db", using=alias)
    config = LockConfiguration(name, "1m")
    attempts, held = 0, None
    deadline = time.monotonic() + 15
    while held is None and time.monotonic() < deadline:
        attempt = provider.attempt(config)
        held = attempt.held
        if held is None:
            attempts += 1
            assert attempt.holder is None or attempt.holder.fencing_token == fencing
            time.sleep(0.1)
    assert attempts > 0, "the dead holder's lock was free at once: it should block until lock_until"
    assert held is not None, "the dead holder's lock never expired"
    assert held.fencing_token == fencing + 1
    # The store's own clock granted it, and not before the dead holder's lock_until.
    assert held.record.locked_at >= lock_until
