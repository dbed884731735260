"""Test-only providers for the admin and CLI tests, configured by dotted path in
``TSLOCK_PROVIDERS`` (use ``path_of(cls)``, which works under any pytest import mode)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from tslock_django.conf import MEMORY_BACKEND
from tslock_django.core.configuration import LockConfiguration
from tslock_django.core.provider import LockProvider, SimpleLock
from tslock_django.core.records import LockRecord
from tslock_django.exceptions import LockProviderError
from tslock_django.providers.memory import MemoryLockProvider

#: A TSLOCK_PROVIDERS entry for an in-process provider.
MEMORY: dict[str, Any] = {"BACKEND": MEMORY_BACKEND, "OPTIONS": {}}


def path_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class StaticProvider(LockProvider):
    """Lists the records given in OPTIONS["records"]; cannot lock, refuses writes."""

    default_options: ClassVar[dict[str, Any]] = {"records": ()}
    #: Aliases whose list_locks() ran, in order (tests clear it).
    calls: ClassVar[list[str]] = []

    def list_locks(self, prefix: str = "") -> list[LockRecord]:
        StaticProvider.calls.append(self.alias)
        return [r for r in self.options["records"] if r.name.startswith(prefix)]

    def _acquire(self, config: LockConfiguration) -> SimpleLock | LockRecord | None:
        raise NotImplementedError

    def _unlock(self, held: SimpleLock) -> bool:
        raise NotImplementedError

    def _extend(self, held: SimpleLock, config: LockConfiguration) -> SimpleLock | None:
        raise NotImplementedError

    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        raise LockProviderError("this store refuses writes (HTTP 403)", alias=self.alias, status_code=403)


class AdvisoryStaticProvider(StaticProvider):
    guarantee = "advisory"


class FailingProvider(StaticProvider):
    """``list_locks`` fails in the way OPTIONS["failure"] says."""

    default_options: ClassVar[dict[str, Any]] = {"failure": "store", "records": ()}

    def list_locks(self, prefix: str = "") -> Any:
        StaticProvider.calls.append(self.alias)
        failure = self.options["failure"]
        if failure == "store":
            raise LockProviderError(
                "HTTP 401 from the store: the token was refused", alias=self.alias, status_code=401
            )
        if failure == "bug":
            raise RuntimeError("boom with Bearer super-secret-value inside")
        if failure == "garbage":
            return [{"name": "not-a-record"}]
        raise AssertionError(failure)


class FencelessMemoryProvider(MemoryLockProvider):
    """An in-process stand-in for Workers KV: advisory, no fencing token in listings, and
    ``force_unlock`` takes a token or nothing (an int is a ValueError, as on KV)."""

    guarantee = "advisory"

    def list_locks(self, prefix: str = "") -> list[LockRecord]:
        return [replace(r, fencing_token=None) for r in super().list_locks(prefix)]

    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        if isinstance(expected, int):
            raise ValueError("Workers KV has no fencing tokens; release with the token (str) or None")
        return super()._force_unlock(name, expected)
