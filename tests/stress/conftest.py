"""Sizes of the multi-process contention tests.

``make test`` runs the CI size (8 processes). Larger runs:

- ``pytest --stress-size=large`` (16 processes, more rounds; the option is registered in
  tests/conftest.py, which pytest loads at start-up);
- or, from anywhere, ``TSLOCK_STRESS_PROCS=16 TSLOCK_STRESS_ROUNDS=100 pytest ...``
  (the environment wins over the option).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

SIZES = {"ci": (8, 20), "large": (16, 60)}


@dataclass(frozen=True)
class StressSize:
    processes: int
    rounds: int


@pytest.fixture(scope="session")
def stress_size(pytestconfig: pytest.Config) -> StressSize:
    processes, rounds = SIZES[pytestconfig.getoption("--stress-size")]
    processes = int(os.environ.get("TSLOCK_STRESS_PROCS", processes))
    rounds = int(os.environ.get("TSLOCK_STRESS_ROUNDS", rounds))
    return StressSize(processes, rounds)
