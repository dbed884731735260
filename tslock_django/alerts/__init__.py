"""Telling someone: notices of a job's status changes, and the channels they go through
(``TSLOCK_ALERTS``)."""

from __future__ import annotations

from .notice import Channel, Notice

__all__ = ["Channel", "Notice"]
