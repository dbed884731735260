"""``tslock overdue``'s exit statuses (issue 31, item 10): 0 nothing late or failing, 1
some, 2 the journal could not be read: one line on stderr naming the database and the
cause, scrubbed, and nothing on stdout (not even with ``--json``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import override_settings

ROOT = Path(__file__).resolve().parents[2]
MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}


def test_overdue_exits_2_naming_the_database_when_the_journal_cannot_be_read(django_db_blocker: Any) -> None:
    out = StringIO()
    journal = {"using": "unreachable"}
    with override_settings(TSLOCK_PROVIDERS=MEMORY, TSLOCK_JOURNAL=journal), django_db_blocker.unblock():
        try:
            with pytest.raises(CommandError) as caught:
                call_command("tslock", "overdue", "--json", stdout=out)
        finally:
            connections["unreachable"].close()
    assert caught.value.returncode == 2 and out.getvalue() == ""
    message = str(caught.value)
    assert message.startswith("the journal could not be read from database 'unreachable': OperationalError")
    assert "\n" not in message


def test_overdue_exits_2_when_the_journal_is_off() -> None:
    with override_settings(TSLOCK_JOURNAL=None), pytest.raises(CommandError) as caught:
        call_command("tslock", "overdue", stdout=StringIO())
    assert caught.value.returncode == 2 and "the journal is off" in str(caught.value)


@pytest.mark.parametrize("journal", ["unreachable", "missing tables"])
def test_overdue_from_the_shell_exits_2_with_one_line_on_stderr(journal: str, tmp_path: Path) -> None:
    """As a cron monitor runs it: a journal that cannot be read is exit status 2 and one
    scrubbed line on stderr, not 1 (\"jobs are late\") and not an empty list."""
    password = "hunter2-journal-password"
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    url = (
        f"postgres://postgres:{password}@127.0.0.1:{closed}/nothing"
        if journal == "unreachable"
        else f"sqlite:///{tmp_path / 'never-migrated.sqlite3'}"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DATABASE_URL": url,
        "TSLOCK_URL": "memory://",
    }
    for argv in (["overdue"], ["overdue", "--json"]):
        done = subprocess.run(
            [sys.executable, "manage.py", "tslock", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        [line] = done.stderr.splitlines()
        assert line.startswith("CommandError: the journal could not be read from database 'default': ")
        cause = "OperationalError" if journal == "unreachable" else "no such table: tslock_job"
        assert cause in line and password not in line
