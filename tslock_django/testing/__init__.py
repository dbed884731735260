"""The provider contract suites, shipped so that a third-party provider can prove it
keeps tslock's contract: ``ProviderContract`` and ``StrongProviderContract`` (pytest test
classes, with their async cases in :mod:`.acontract`).

This package holds only what users' own tests import; it needs pytest, so nothing else in
``tslock_django`` imports it (the fakes of this repository's own tests live in ``tests/``).
"""

from .contract import ProviderContract, StrongProviderContract

__all__ = ["ProviderContract", "StrongProviderContract"]
