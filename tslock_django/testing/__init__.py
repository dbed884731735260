"""Test support that ships with the package, so third-party providers can prove they
keep the same contract: ``ProviderContract`` and ``StrongProviderContract`` (pytest
test classes), ``kv_fake`` (an in-process Workers KV REST API) and ``worker_runtime``
(the companion Worker on the local Workers runtime).

The contract classes are imported on first use: they need pytest, which the demo's use
of ``worker_runtime`` must not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .contract import ProviderContract, StrongProviderContract

__all__ = ["ProviderContract", "StrongProviderContract"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import contract

        return getattr(contract, name)
    raise AttributeError(f"module 'tslock_django.testing' has no attribute {name!r}")
