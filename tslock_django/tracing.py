"""OpenTelemetry: one span per journaled run, when ``opentelemetry-api`` is installed.

:class:`~tslock_django.guard.GuardedRun` calls :func:`begin` before it takes the lock, then
the :class:`RunSpan` methods that mirror the journal's recorder; while the job runs the
span is the current one, so the job's own spans are its children. What a span carries is in
``docs/reference/observability.md``. Its text is scrubbed like the journal's
(:func:`tslock_django.core.scrubbing.hide_secrets`), and the exception object is never
handed to the API (``record_exception`` would export its message unscrubbed). Where nothing
in the process has imported ``opentelemetry.trace`` no tracer can be set, so :func:`begin`
returns ``None`` without importing the API, whose import is costly at every command's start.
"""

from __future__ import annotations

import sys
import time
from typing import Any

_TRACER_NAME = "tslock_django"
#: The ``opentelemetry.trace`` module once seen imported; ``None`` before.
_trace: Any = None


def _api() -> Any:
    global _trace
    if _trace is None:
        # Looked up on every run until found: the project may set tracing up after tslock
        # was imported.
        _trace = sys.modules.get("opentelemetry.trace")
    return _trace


def begin(name: str, alias: str) -> RunSpan | None:
    """The span of a run about to ask for its lock, or ``None`` where the process does
    not use OpenTelemetry."""
    trace = _api()
    if not trace:
        return None
    return RunSpan(trace, name, alias)


class RunSpan:
    """One run's span. The methods mirror :class:`~tslock_django.journal.recorder.RunRecorder`'s;
    the OpenTelemetry API is built not to raise into its callers, so they do not guard."""

    def __init__(self, trace: Any, name: str, alias: str) -> None:
        self._trace = trace
        self.name = name
        self.alias = alias
        self._start_ns = time.time_ns()
        self._span: Any = None
        self._token: Any = None

    def _open(self) -> Any:
        tracer = self._trace.get_tracer(_TRACER_NAME)
        return tracer.start_span(
            f"tslock.run {self.name}",
            start_time=self._start_ns,
            attributes={"tslock.lock_name": self.name, "tslock.provider": self.alias},
        )

    def skipped(self, holder: Any | None) -> None:
        """Held elsewhere: a span that ends at once, outcome ``skipped``."""
        span = self._open()
        span.set_attribute("tslock.outcome", "skipped")
        held_by = getattr(holder, "locked_by", None)
        if held_by:
            from .core.scrubbing import hide_secrets

            span.set_attribute("tslock.held_by", hide_secrets(str(held_by)))
        span.end()

    def errored(self, err: BaseException) -> None:
        """The store failed: a span that ends at once, outcome ``error``, status error."""
        span = self._open()
        span.set_attribute("tslock.outcome", "error")
        _record_failure(self._trace, span, err)
        span.end()

    def started(self, held: Any) -> None:
        """The lock is ours: the span stays open and current while the job runs."""
        from opentelemetry import context

        span = self._span = self._open()
        fencing_token = getattr(held, "fencing_token", None)
        if fencing_token is not None:
            span.set_attribute("tslock.fencing_token", int(fencing_token))
        self._token = context.attach(self._trace.set_span_in_context(span))

    def finished(self, exc: BaseException | None = None, *, exit_status: int | None = None) -> None:
        """The job ended (and its lock was given back): outcome ``succeeded`` or
        ``failed``; the span ends and is no longer current."""
        span = self._span
        if span is None:
            return
        self._span = None
        failed = exc is not None or (exit_status is not None and exit_status != 0)
        span.set_attribute("tslock.outcome", "failed" if failed else "succeeded")
        if exit_status is not None:
            span.set_attribute("tslock.exit_status", exit_status)
        if failed:
            _record_failure(self._trace, span, exc, exit_status)
        if self._token is not None:
            from opentelemetry import context

            # The API logs (and does not raise) when it ends in another context than it
            # began in, e.g. after a thread hop.
            context.detach(self._token)
            self._token = None
        span.end()


def _record_failure(trace: Any, span: Any, exc: BaseException | None, exit_status: int | None = None) -> None:
    """The span's ``exception`` event (for ``exc``) and its error status, scrubbed."""
    from .core.scrubbing import hide_secrets
    from .journal.recorder import describe_failure, exception_message

    if exc is not None:
        kind = type(exc)
        message = exception_message(exc)
        shown = "(its message could not be read)" if message is None else hide_secrets(message)
        module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
        attributes = {
            "exception.type": module + kind.__qualname__,
            "exception.message": shown,
        }
        stacktrace = _stacktrace(exc)
        if stacktrace:
            attributes["exception.stacktrace"] = hide_secrets(stacktrace)
        span.add_event("exception", attributes)
    span.set_status(trace.Status(trace.StatusCode.ERROR, describe_failure(exc, exit_status=exit_status)))


def _stacktrace(exc: BaseException) -> str:
    import traceback

    try:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # noqa: BLE001 - a trace without its stack rather than a job that fails
        return ""
