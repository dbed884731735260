"""The background sender: pings leave in order on one thread, a full queue drops the
oldest and says so once, and waiting for it is bounded."""

from __future__ import annotations

import logging
import threading

import pytest

from tslock_django.monitors.sender import Sender


def test_pings_are_sent_in_order_off_the_callers_thread() -> None:
    seen: list[tuple[int, str]] = []
    sender = Sender()
    for number in range(5):
        sender.put(lambda number=number: seen.append((number, threading.current_thread().name)))
    assert sender.drain(5)
    assert [number for number, _ in seen] == [0, 1, 2, 3, 4]
    assert {thread for _, thread in seen} == {"tslock-monitors"}


def test_a_full_queue_drops_the_oldest_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tslock_django")
    gate, seen = threading.Event(), []
    sender = Sender(limit=2)
    sender.put(lambda: gate.wait(5))  # holds the thread: what follows waits in the queue
    assert not sender.drain(0.2), "a ping in flight: not drained"
    for number in range(5):
        sender.put(lambda number=number: seen.append(number))
    gate.set()
    assert sender.drain(5)
    assert seen == [3, 4], "the newest two were kept"
    told = [record.getMessage() for record in caplog.records if "queue is full" in record.getMessage()]
    assert len(told) == 1 and "the oldest are dropped" in told[0]


def test_a_ping_that_raises_does_not_stop_the_next(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="tslock_django")
    seen: list[str] = []
    sender = Sender()

    def broken() -> None:
        raise RuntimeError("secret-looking text that is not logged")

    sender.put(broken)
    sender.put(lambda: seen.append("next"))
    assert sender.drain(5) and seen == ["next"]
    [told] = [record.getMessage() for record in caplog.records if "unexpectedly" in record.getMessage()]
    assert "RuntimeError" in told and "secret-looking" not in told
