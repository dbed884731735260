"""A management command that exits right after its run still delivers the run's end
ping (the sender gets a bounded time at interpreter exit); a monitor that refuses
connections changes neither the command's exit status nor its journal. Real processes."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.monitors.processes import migrated, outcomes, run_child
from tests.monitors.servers import HealthchecksServer

KEY = "exit-ping-key-0123456789"


def test_the_end_ping_goes_out_when_the_command_exits_right_after_its_run(tmp_path: Path) -> None:
    database = migrated(tmp_path)
    # Each answer takes 0.3 s: the end ping leaves the process only after the start ping's
    # answer, when the job is long over and the command is exiting.
    with HealthchecksServer(KEY, delay=0.3) as hc:
        monitors = {"healthchecks": {"url": hc.url, "ping_key": KEY}}
        ok = run_child(database, "journaled_job", "--shard", "exit", monitors=monitors)
        failed = run_child(database, "journaled_job", "--shard", "exit", "--fail", "broke", monitors=monitors)
        pings = list(hc.pings)
    assert ok.returncode == 0 and failed.returncode == 1, (ok.stderr, failed.stderr)
    assert [(ping.kind, ping.slug) for ping in pings] == [
        ("start", "journaled-exit"),
        ("success", "journaled-exit"),
        ("start", "journaled-exit"),
        ("fail", "journaled-exit"),
    ]
    assert pings[0].query["rid"] == pings[1].query["rid"] != pings[2].query["rid"] == pings[3].query["rid"]
    assert pings[0].query.get("create") == "1" and pings[2].query.get("create") == "1", (
        "each process asks for the check until one of its pings got through"
    )
    assert "create" not in pings[1].query
    assert pings[3].body == "CommandError: broke"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_monitor_that_refuses_connections_changes_no_exit_status_nor_journal(tmp_path: Path) -> None:
    database = migrated(tmp_path)
    down = {"healthchecks": {"url": f"http://127.0.0.1:{closed_port()}", "ping_key": KEY}}
    runs = [
        run_child(database, "journaled_job", "--shard", name, *extra, monitors=monitors)
        for monitors in (None, down)
        for name, extra in (("fine", ()), ("fails", ("--fail", "no")), ("exits", ("--exit", "4")))
    ]
    assert [done.returncode for done in runs] == [0, 1, 4, 0, 1, 4]
    assert [done.stdout for done in runs[:3]] == [done.stdout for done in runs[3:]]
    assert outcomes(database, "journaled-fine") == ["succeeded", "succeeded"]
    assert outcomes(database, "journaled-fails") == ["failed", "failed"]
    assert outcomes(database, "journaled-exits") == ["failed", "failed"]
    assert all(KEY not in done.stderr for done in runs)


def test_a_monitor_that_never_answers_holds_the_exit_for_the_budget_only(tmp_path: Path) -> None:
    """The end ping waits at most EXIT_BUDGET (2 s) at exit. Without the bound the
    process would wait for both pings' 5 s timeouts, 10 s; the bound here is generous
    for the process's own start and stays under that."""
    database = migrated(tmp_path)
    with HealthchecksServer(KEY, delay=30.0) as hc:
        started = time.monotonic()
        done = run_child(
            database,
            "journaled_job",
            "--shard",
            "stuck",
            monitors={"healthchecks": {"url": hc.url, "ping_key": KEY}},
        )
        elapsed = time.monotonic() - started
    assert done.returncode == 0 and done.stdout == "done\n"
    assert elapsed < 2.0 + 5.0, elapsed
    assert "monitor ping(s) were not sent within 2 s of exit; they are lost" in done.stderr
    assert KEY not in done.stderr
