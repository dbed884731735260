"""The shared provider contract, run against the Durable Objects provider on the real
Workers runtime (fixtures ``provider`` and ``advance`` come from this folder's conftest)."""

from __future__ import annotations

from tslock_django.testing import StrongProviderContract


class TestDurableObjectContract(StrongProviderContract):
    # The object's clock is real: "short" must outlast a few round trips on a loaded
    # machine (other suites run in parallel under make test), so one second.
    short = 1.0

    def thread_finished(self) -> None:
        # No database connections to close: every call is one HTTP request.
        pass
