"""Shared fixtures."""

from __future__ import annotations

import os

import pytest
from django.conf import settings

CI = bool(os.environ.get("CI"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stress-size",
        choices=["ci", "large"],
        default="ci",
        help="size of the multi-process contention tests in tests/stress: ci (8 processes) or large (16)",
    )


def database_marks(alias: str, server: str) -> list[pytest.MarkDecorator]:
    """Marks for tests on one database server: transactional, and skipped with a reason
    when the server is absent (never under CI, where tests/settings.py always adds it)."""
    available = alias in settings.DATABASES
    return [
        pytest.mark.skipif(not available, reason=f"{server} is not reachable here (required when CI is set)"),
        pytest.mark.django_db(databases=[alias] if available else [], transaction=True),
    ]
