"""``tslock runs`` shows the provider column when runs can differ in it."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings

from tslock_django.journal.models import Run

MEMORY = {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}


@pytest.fixture(autouse=True)
def journal_on(db: None) -> Iterator[None]:
    with override_settings(TSLOCK_PROVIDERS={"default": MEMORY}, TSLOCK_JOURNAL={"using": "default"}):
        call_command("journaled_job", "--shard", "one", stdout=StringIO())
        yield


def runs_table() -> str:
    out = StringIO()
    call_command("tslock", "runs", "journaled-one", stdout=out)
    return out.getvalue()


def test_one_provider_configured_shows_no_provider_column() -> None:
    (line,) = runs_table().splitlines()
    assert "  journaled-one  succeeded  " in line


def test_more_than_one_provider_configured_shows_it() -> None:
    with override_settings(TSLOCK_PROVIDERS={"default": MEMORY, "edge": MEMORY}):
        (line,) = runs_table().splitlines()
    assert "  journaled-one  default  succeeded  " in line


def test_a_run_on_a_provider_no_longer_configured_shows_it() -> None:
    Run.objects.filter(name="journaled-one").update(provider="old")
    (line,) = runs_table().splitlines()
    assert "  journaled-one  old  succeeded  " in line
