"""tslock_django: named, time-bounded locks for Django management commands and jobs.

ShedLock's semantics: a job whose lock is held elsewhere is skipped,
``lock_at_most_for`` frees the lock of a holder that died, ``lock_at_least_for`` keeps
it held for a minimum time against clock skew. Providers are configured in
``TSLOCK_PROVIDERS``; see the README.

Public names are imported lazily, so ``import tslock_django`` is cheap and never loads
models or httpx.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import providers
    from .alocking import alock
    from .core.clock import ClockProvider, MutableClock, SystemClock
    from .core.configuration import LockConfiguration
    from .core.executor import HeldLock, LockingTaskExecutor, TaskResult, assert_locked, current_lock
    from .core.provider import LockProvider, SimpleLock
    from .core.query import ListingSupport, LockPage, LockQuery
    from .core.records import ListedRecord, LockRecord, UnreadableRecord
    from .decorators import locked_command
    from .exceptions import (
        InvalidCursor,
        InvalidLockProvider,
        JobPaused,
        LockHeld,
        LockProviderError,
        LockRateLimited,
        StaleLockHandle,
        TslockError,
        UnsupportedQuery,
    )
    from .locking import lock
    from .tasks import locked_task

__version__ = "0.3.0"

_EXPORTS = {
    "providers": ".providers",
    "ClockProvider": ".core.clock",
    "MutableClock": ".core.clock",
    "SystemClock": ".core.clock",
    "LockConfiguration": ".core.configuration",
    "HeldLock": ".core.executor",
    "LockingTaskExecutor": ".core.executor",
    "TaskResult": ".core.executor",
    "assert_locked": ".core.executor",
    "current_lock": ".core.executor",
    "LockProvider": ".core.provider",
    "SimpleLock": ".core.provider",
    "ListingSupport": ".core.query",
    "LockPage": ".core.query",
    "LockQuery": ".core.query",
    "LockRecord": ".core.records",
    "ListedRecord": ".core.records",
    "UnreadableRecord": ".core.records",
    "locked_command": ".decorators",
    "InvalidCursor": ".exceptions",
    "InvalidLockProvider": ".exceptions",
    "JobPaused": ".exceptions",
    "LockHeld": ".exceptions",
    "LockProviderError": ".exceptions",
    "LockRateLimited": ".exceptions",
    "StaleLockHandle": ".exceptions",
    "TslockError": ".exceptions",
    "UnsupportedQuery": ".exceptions",
    "lock": ".locking",
    "alock": ".alocking",
    "locked_task": ".tasks",
}

__all__ = [
    "ClockProvider",
    "HeldLock",
    "InvalidCursor",
    "InvalidLockProvider",
    "JobPaused",
    "ListedRecord",
    "ListingSupport",
    "LockConfiguration",
    "LockHeld",
    "LockPage",
    "LockProvider",
    "LockProviderError",
    "LockQuery",
    "LockRateLimited",
    "LockRecord",
    "LockingTaskExecutor",
    "MutableClock",
    "SimpleLock",
    "StaleLockHandle",
    "SystemClock",
    "TaskResult",
    "TslockError",
    "UnreadableRecord",
    "UnsupportedQuery",
    "alock",
    "assert_locked",
    "current_lock",
    "lock",
    "locked_command",
    "locked_task",
    "providers",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tslock_django' has no attribute {name!r}")
    imported = import_module(module, __name__)
    # "providers" is the package itself (see providers/__init__.py).
    value = imported if name == "providers" else getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
