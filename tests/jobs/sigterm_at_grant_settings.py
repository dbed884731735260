"""The demo project, with a receiver of ``lock_acquired`` that sends SIGTERM to this very
process: the signal arrives at the moment the store has granted the lock, before the
program starts (the window in which a runner used to die holding the lock, unjournaled)."""

from __future__ import annotations

import os
import signal
from typing import Any

from testproject.settings import *  # noqa: F403
from tslock_django import signals as tslock_signals


def _terminate_at_grant(**kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGTERM)


tslock_signals.lock_acquired.connect(_terminate_at_grant, weak=False)
