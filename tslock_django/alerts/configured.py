"""The channels ``TSLOCK_ALERTS`` configures.

TODO(lead): a stand-in for the evaluator's branch only. The channels branch owns this
module (with the built-in channels, OPTIONS checks, caching and the system checks); on
merge keep that branch's version. The evaluator needs only
:func:`configured_channels` with this signature.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings
from django.utils.module_loading import import_string

from .notice import Channel


def configured_channels() -> list[tuple[str, Channel]]:
    """Each channel of ``TSLOCK_ALERTS["channels"]``, built from its ``BACKEND`` with its
    ``OPTIONS`` as keyword arguments, with a key that names it from one evaluation to
    the next (its place and its ``BACKEND``).

    Raises:
        ValueError: ``TSLOCK_ALERTS`` is not ``{"channels": [{"BACKEND": ..., "OPTIONS": {...}}]}``.
    """
    configured = getattr(settings, "TSLOCK_ALERTS", None) or {}
    if not isinstance(configured, Mapping):
        raise ValueError(f"TSLOCK_ALERTS must be a dict such as {{'channels': [...]}}, got {configured!r}")
    found: list[tuple[str, Channel]] = []
    for place, entry in enumerate(configured.get("channels") or []):
        if not isinstance(entry, Mapping) or "BACKEND" not in entry:
            raise ValueError(f"TSLOCK_ALERTS['channels'][{place}] needs a 'BACKEND' (a dotted class path)")
        backend = str(entry["BACKEND"])
        found.append((f"{place}:{backend}", import_string(backend)(**dict(entry.get("OPTIONS") or {}))))
    return found
