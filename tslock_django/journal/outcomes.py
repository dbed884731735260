"""The outcomes of a run (no Django models here: the lock path imports this before
the app registry is ready)."""

from __future__ import annotations

RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
SKIPPED = "skipped"
ERROR = "error"
LOST = "lost"

#: Every outcome, in the order the journal's pages list them.
OUTCOMES = (RUNNING, SUCCEEDED, FAILED, SKIPPED, ERROR, LOST)
#: The outcomes of runs that ran the job (skips and store errors did not).
RAN = (RUNNING, SUCCEEDED, FAILED, LOST)
