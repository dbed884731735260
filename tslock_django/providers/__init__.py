"""Lock stores, and the handler over the configured ones.

This package holds the provider implementations (``providers.database``,
``providers.memory``, ``providers.cloudflare_do``, ``providers.cloudflare_kv``,
``providers.redis``), what the built-in ones accept in OPTIONS (``providers.store_options``,
read by the system checks without importing the implementations), and is also the
handler that ``TSLOCK_PROVIDERS`` configures, shaped like Django's ``caches``::

    from tslock_django import providers

    providers["default"]          # the provider configured as "default" (built once)
    providers.get("edge")         # the same, for type checkers
    providers.all()               # every configured provider

One name for both avoids a trap: a package attribute named like a subpackage is
replaced by the subpackage as soon as anything imports it. Implementation modules are
imported only when configured: the Cloudflare ones pull in httpx, which a
database-only project never needs to load.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.provider import LockProvider


def get(alias: str = "default") -> LockProvider:
    """The provider configured under ``alias`` (built on first use, then shared).

    Raises:
        InvalidLockProvider: unknown alias, or a bad BACKEND/OPTIONS for it.
    """
    from ..conf import providers as handler

    return handler[alias]


def all() -> list[LockProvider]:  # mirrors django.core.cache.caches.all()
    """Every configured provider, in settings order."""
    from ..conf import providers as handler

    return handler.all()


def aliases() -> list[str]:
    """The configured aliases, in settings order."""
    from ..conf import providers as handler

    return handler.aliases()


def reset() -> None:
    """Close and forget every built provider (done for you when settings change)."""
    from ..conf import providers as handler

    handler.reset()


class _ProviderPackage(ModuleType):
    """Lets ``providers["alias"]`` and ``"alias" in providers`` work on this module."""

    def __getitem__(self, alias: str) -> LockProvider:
        return get(alias)

    def __contains__(self, alias: object) -> bool:
        return alias in aliases()


sys.modules[__name__].__class__ = _ProviderPackage
