"""Telling someone: notices of a job's status changes, and the channels they go through
(``TSLOCK_ALERTS``).

Importing this package loads neither httpx nor the mail framework: the channels load
them when they first send.
"""

from __future__ import annotations

from .channels import EmailChannel, SlackChannel, WebhookChannel
from .configured import configured_channels
from .errors import ChannelError, InvalidAlertChannel
from .notice import NOTIFIED_STATUSES, Channel, Notice

__all__ = [
    "NOTIFIED_STATUSES",
    "Channel",
    "ChannelError",
    "EmailChannel",
    "InvalidAlertChannel",
    "Notice",
    "SlackChannel",
    "WebhookChannel",
    "configured_channels",
]
