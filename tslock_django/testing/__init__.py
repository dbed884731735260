"""Test support that ships with the package, so third-party providers can prove they
keep the same contract: ``ProviderContract`` and ``StrongProviderContract``."""

from .contract import ProviderContract, StrongProviderContract

__all__ = ["ProviderContract", "StrongProviderContract"]
