"""Acquisitions per second under contention, on one database server (its own process).

Usage: ``BENCH_DB=postgres python -m bench.contention PROCESSES SECONDS ROUNDS`` (for
example ``1,4,8,16 1.5 2``) prints one JSON object.

For each number of processes, both on one lock name (they contend: one holds, the
others are refused) and on a name each (they only share the table), every process
tries lock-then-unlock in a loop for ``SECONDS``; the cell reports the acquisitions
(granted attempts) per second of all processes together, and the attempts per second.
Contenders, each process with its own connection in autocommit mode:

- ``tslock``: ``DatabaseLockProvider.lock()`` then ``SimpleLock.unlock()``; an attempt
  is one statement, granted or refused;
- ``django-db-mutex``: ``with db_mutex(...)``: its expired-lock sweep, an ``INSERT`` in
  a transaction (a refusal is its unique violation, rolled back), and when granted an
  existence check and a ``DELETE``. On MariaDB these deadlock under contention; such
  attempts count as lost (``errors_per_s``), not as a failure of the benchmark.

The processes are forked once Django is set up, meet at a barrier, and only then start
the clock, so neither start-up nor connecting is measured. Rounds alternate the
contenders (tslock first in even rounds, last in odd ones) and a cell reports the median.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import statistics
import sys
import time
from typing import Any

import django

CONTENDERS = ("tslock", "django-db-mutex")
MODES = ("one name", "distinct names")


def attempt_loop(contender: str, name: str, seconds: float) -> tuple[int, int, int]:
    """Lock-then-unlock ``name`` until ``seconds`` have passed: (granted, attempts,
    attempts that failed with a database error)."""
    granted = attempts = errors = 0
    if contender == "tslock":
        from tslock_django import LockConfiguration
        from tslock_django.providers.database import DatabaseLockProvider

        provider = DatabaseLockProvider("bench", using="default")
        config = LockConfiguration(name, "1m")
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            attempts += 1
            held = provider.lock(config)
            if held is not None:
                granted += 1
                if not held.unlock():
                    raise RuntimeError("tslock: a granted lock could not be released")
    else:
        from db_mutex.db_mutex import db_mutex
        from db_mutex.exceptions import DBMutexError
        from django.db import DatabaseError

        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            attempts += 1
            try:
                with db_mutex(name):
                    granted += 1
            except DBMutexError:
                pass
            except DatabaseError:
                # On MariaDB its INSERT and its expired-lock sweep deadlock under
                # contention; the attempt is lost, as its caller would see it.
                errors += 1
    return granted, attempts, errors


def worker(contender: str, name: str, seconds: float, start: Any, results: Any) -> None:
    from django.db import connection

    connection.ensure_connection()  # connect before the clock starts
    start.wait()
    try:
        results.put(attempt_loop(contender, name, seconds))
    finally:
        connection.close()


def cell(contender: str, mode: str, processes: int, seconds: float) -> dict[str, float]:
    """One run of ``processes`` processes: acquisitions and attempts per second."""
    from django.db import connections

    connections.close_all()  # a forked child must not share the parent's connection
    context = multiprocessing.get_context("fork")
    start = context.Barrier(processes + 1)
    results = context.Queue()
    workers = [
        context.Process(
            target=worker,
            args=(
                contender,
                "contention" if mode == "one name" else f"contention-{i}",
                seconds,
                start,
                results,
            ),
        )
        for i in range(processes)
    ]
    for process in workers:
        process.start()
    start.wait(timeout=120)
    try:
        # Read before joining: a process that put a result waits until it is read.
        outcomes = [results.get(timeout=seconds + 60) for _ in workers]
    except queue.Empty:
        codes = [process.exitcode for process in workers]
        raise RuntimeError(f"{contender}: a worker process gave no result (exit codes {codes})") from None
    for process in workers:
        process.join(timeout=60)
    # Every process loops for ``seconds`` from the moment the barrier lets them go.
    granted, attempts, errors = (sum(counts) for counts in zip(*outcomes, strict=True))
    return {
        "acquisitions_per_s": granted / seconds,
        "attempts_per_s": attempts / seconds,
        "errors_per_s": errors / seconds,
    }


def main(counts: list[int], seconds: float, rounds: int) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from django.db import connection

    from bench.dbbench import server_version

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        version = server_version(connection)
        cells: list[dict[str, Any]] = []
        for mode in MODES:
            for processes in counts:
                runs: dict[str, list[dict[str, float]]] = {name: [] for name in CONTENDERS}
                for round_ in range(rounds):
                    order = CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]
                    for contender in order:
                        runs[contender].append(cell(contender, mode, processes, seconds))
                medians = {
                    name: {key: statistics.median(run[key] for run in done) for key in done[0]}
                    for name, done in runs.items()
                }
                mutex = medians["django-db-mutex"]["acquisitions_per_s"]
                cells.append(
                    {
                        "mode": mode,
                        "processes": processes,
                        "results": medians,
                        "tslock_over_db_mutex": (
                            medians["tslock"]["acquisitions_per_s"] / mutex if mutex else None
                        ),
                    }
                )
        return {
            "server": connection.vendor,
            "version": version,
            "unit": "acquisitions per second (all processes), median of rounds",
            "seconds_per_run": seconds,
            "rounds": rounds,
            "cells": cells,
        }
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)


def targets(report: dict[str, Any] | None) -> dict[str, Any]:
    """16 processes on one name: tslock at least twice django-db-mutex's acquisitions."""
    found: dict[str, Any] = {}
    for server, data in (report or {}).items():
        for entry in data["cells"]:
            if entry["mode"] == "one name" and entry["processes"] == 16 and entry["tslock_over_db_mutex"]:
                ratio = entry["tslock_over_db_mutex"]
                found[f"contention on {server}: 16 processes on one name, tslock >= 2x django-db-mutex"] = {
                    "value": round(ratio, 3),
                    "bound": ">= 2",
                    "met": ratio >= 2,
                }
    return found


def render(report: dict[str, Any] | None) -> list[str]:
    if not report:
        return []
    lines = [
        "",
        "contention: lock+unlock attempts in a loop per process; acquisitions/s of all processes "
        "(median of rounds)",
        f"{'server':<10} {'names':<15} {'procs':>5} {'tslock':>8} {'db-mutex':>9} {'tslock/x':>9} "
        f"{'tslock tries/s':>15} {'db-mutex errors/s':>18}",
    ]
    for server, data in report.items():
        for entry in data["cells"]:
            mine, theirs = entry["results"]["tslock"], entry["results"]["django-db-mutex"]
            ratio = entry["tslock_over_db_mutex"]
            lines.append(
                f"{server:<10} {entry['mode']:<15} {entry['processes']:>5} "
                f"{mine['acquisitions_per_s']:>8.0f} {theirs['acquisitions_per_s']:>9.0f} "
                f"{'' if ratio is None else f'{ratio:.2f}x':>9} {mine['attempts_per_s']:>15.0f} "
                f"{theirs['errors_per_s']:>18.0f}"
            )
    return lines


if __name__ == "__main__":
    counts = [int(n) for n in sys.argv[1].split(",")]
    print(json.dumps(main(counts, float(sys.argv[2]), int(sys.argv[3]))))
