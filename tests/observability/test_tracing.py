"""One OpenTelemetry span per journaled run, recorded by the real SDK's in-memory exporter."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.test.utils import override_settings

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.admin.tslock_test_providers import MEMORY
from tests.observability.stores import BROKEN
from tslock_django import LockConfiguration, lock, tracing
from tslock_django.conf import providers
from tslock_django.exceptions import LockProviderError


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Spans go to an in-memory exporter of a provider of this test's own (the global
    provider is left alone: it can be set once per process)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer", lambda name, *args, **kwargs: provider.get_tracer(name))
    with override_settings(TSLOCK_PROVIDERS={"default": MEMORY, "broken": BROKEN}):
        yield exporter


def only(exporter: InMemorySpanExporter) -> Any:
    found = exporter.get_finished_spans()
    assert len(found) == 1, [s.name for s in found]
    return found[0]


def test_a_successful_run_is_one_span_with_its_lock_and_fencing_token(spans: InMemorySpanExporter) -> None:
    call_command("locked_job", shard="t")
    span = only(spans)
    assert span.name == "tslock.run job-t"
    assert dict(span.attributes) == {
        "tslock.lock_name": "job-t",
        "tslock.provider": "default",
        "tslock.outcome": "succeeded",
        "tslock.fencing_token": 1,
    }
    assert span.status.status_code is StatusCode.UNSET


def test_a_failed_run_is_an_error_span_with_the_exception(spans: InMemorySpanExporter) -> None:
    with pytest.raises(RuntimeError):
        call_command("locked_job", shard="f", explode=True)
    span = only(spans)
    assert span.attributes["tslock.outcome"] == "failed"
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]
    assert span.events[0].attributes["exception.message"] == "the job failed"


def test_skips_and_store_errors_are_spans_too(spans: InMemorySpanExporter) -> None:
    held = providers["default"].lock(LockConfiguration("job-s", "5m"))
    assert held is not None
    call_command("locked_job", shard="s")  # skipped: held above
    span = only(spans)
    assert span.attributes["tslock.outcome"] == "skipped"
    spans.clear()
    with pytest.raises(LockProviderError), lock("on-a-broken-store", "1m", using="broken", journal=True):
        pass
    span = only(spans)
    assert span.attributes["tslock.outcome"] == "error"
    assert span.attributes["tslock.provider"] == "broken"
    assert span.status.status_code is StatusCode.ERROR


EDGE_TOKEN = "edge-token-that-the-journal-masks"


def everything_exported(span: Any) -> str:
    """Every text of a finished span that an exporter sends."""
    texts = [span.name, span.status.description or "", *map(str, span.attributes.values())]
    for event in span.events:
        texts += [event.name, *map(str, event.attributes.values())]
    return "\n".join(texts)


def test_a_failed_runs_span_carries_the_scrubbed_message_never_the_exception(
    spans: InMemorySpanExporter,
) -> None:
    edge = {
        "BACKEND": "tslock_django.providers.cloudflare_do.DurableObjectLockProvider",
        "OPTIONS": {"url": "http://127.0.0.1:9", "token": EDGE_TOKEN},
    }
    secrets = ("Pg-pass-4417", "hunter2-pw", EDGE_TOKEN)

    @lock("leaky", "1m", journal=True)
    def job() -> None:
        raise RuntimeError(f"postgres://app:Pg-pass-4417@db failed; password=hunter2-pw; token {EDGE_TOKEN}")

    with override_settings(TSLOCK_PROVIDERS={"default": MEMORY, "edge": edge}), pytest.raises(RuntimeError):
        job()
    span = only(spans)
    exported = everything_exported(span)
    for secret in secrets:
        assert secret not in exported
    [event] = span.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"] == "postgres://app:***@db failed; password=***; token ***"
    assert (
        event.attributes["exception.stacktrace"]
        .rstrip()
        .endswith("RuntimeError: postgres://app:***@db failed; password=***; token ***")
    )
    assert span.status.description == "RuntimeError: postgres://app:***@db failed; password=***; token ***"


class Unprintable(Exception):
    def __str__(self) -> str:
        raise AttributeError("no message here")


def test_an_unprintable_exception_is_traced_by_its_class_and_reaches_the_caller(
    spans: InMemorySpanExporter,
) -> None:
    raised = Unprintable()

    @lock("unprintable", "1m", journal=True)
    def job() -> None:
        raise raised

    with pytest.raises(Unprintable) as caught:
        job()
    assert caught.value is raised
    [event] = only(spans).events
    assert event.attributes["exception.type"] == f"{__name__}.Unprintable"
    assert event.attributes["exception.message"] == "(its message could not be read)"


def test_the_jobs_own_spans_are_children_of_the_run(spans: InMemorySpanExporter) -> None:
    with lock("parent", "1m", journal=True), trace.get_tracer("the.job").start_as_current_span("query"):
        pass
    child, run = spans.get_finished_spans()
    assert run.name == "tslock.run parent"
    assert child.parent is not None and child.parent.span_id == run.context.span_id
    # Outside the run, the run's span is no longer current.
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_lock_without_journal_makes_no_span(spans: InMemorySpanExporter) -> None:
    with lock("hot-path", "1m"):
        pass
    assert spans.get_finished_spans() == ()


def test_where_nothing_imported_opentelemetry_nothing_is_traced_or_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Installed but not used by the project (or not installed): no span, and the run
    does not import the API (about 7 ms of a command's start)."""
    monkeypatch.setattr(tracing, "_trace", None)
    for module in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, module)
    assert tracing.begin("any", "default") is None
    with override_settings(TSLOCK_PROVIDERS={"default": MEMORY}):
        call_command("locked_job", shard="no-otel")
    assert "opentelemetry.trace" not in sys.modules
    assert tracing._trace is None
