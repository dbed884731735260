"""What goes wrong with a channel: its configuration (:class:`InvalidAlertChannel`, found
when it is built or by the system check) or a send (:class:`ChannelError`, found when a
notice is sent, and tried again at the next evaluation)."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from ..exceptions import TslockError


class InvalidAlertChannel(ImproperlyConfigured):
    """``TSLOCK_ALERTS`` or a channel's OPTIONS are wrong: the message names the entry or
    the option, what it holds and what would be right."""


class ChannelError(TslockError):
    """A channel did not take a notice: it could not be reached, refused it, or did not
    answer in time. The message says which and never repeats a secret (a webhook's
    secret, a URL's path, query or password).

    Attributes:
        status_code: the HTTP status the receiver answered, or ``None`` when there was
            no answer (a connection failure, a timeout) or the channel is not HTTP.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
