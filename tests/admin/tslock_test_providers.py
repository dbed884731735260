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
from tslock_django.providers.cloudflare_kv import KVLockProvider
from tslock_django.providers.memory import MemoryLockProvider
from tslock_django.testing.kv_fake import FakeKVTransport

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
    ``force_unlock`` takes the holder's token, its fingerprint or nothing (an int is a
    ValueError), as ``KVLockProvider`` does."""

    guarantee = "advisory"
    #: (method, name) of every list_locks / force_unlock call, so tests can see what the admin asked.
    calls: ClassVar[list[tuple[str, str]]] = []

    def list_locks(self, prefix: str = "") -> list[LockRecord]:
        FencelessMemoryProvider.calls.append(("list_locks", prefix))
        return [replace(r, fencing_token=None) for r in super().list_locks(prefix)]

    def _force_unlock(self, name: str, expected: int | str | None) -> bool:
        FencelessMemoryProvider.calls.append(("force_unlock", name))
        if isinstance(expected, int):
            raise ValueError("Workers KV has no fencing tokens; release with the token (str) or None")
        current = self._records.get(name)
        if isinstance(expected, str) and current is not None and expected == current.token_fingerprint:
            # KV compares the fingerprint too; the memory provider only knows raw tokens.
            expected = current.token
        return super()._force_unlock(name, expected)


class FakeKVProvider(KVLockProvider):
    """``KVLockProvider`` on the fake namespace in ``FakeKVProvider.fake`` (set by a fixture):
    ``transport`` cannot be given through TSLOCK_PROVIDERS, so the class supplies it."""

    fake: ClassVar[FakeKVTransport | None] = None

    def __init__(self, alias: str = "default", **kwargs: Any) -> None:
        super().__init__(alias, transport=FakeKVProvider.fake, **kwargs)
