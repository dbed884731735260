"""A store that fails every acquire, for the observability tests."""

from __future__ import annotations

from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.provider import SimpleLock
from tslock_django.core.records import LockRecord
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.memory import MemoryLockProvider


class BrokenStore(MemoryLockProvider):
    """Lists like the memory store; every acquire fails as a store would (HTTP 503)."""

    def _acquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        raise LockProviderError("HTTP 503 from the store", alias=self.alias, status_code=503)


BROKEN = {"BACKEND": f"{BrokenStore.__module__}.{BrokenStore.__qualname__}", "OPTIONS": {}}
