"""Channels of the tests' own, given as ``BACKEND`` as a third-party channel would be: a
class built with its ``OPTIONS`` as keyword arguments, with one method, ``send``."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict

from tslock_django.alerts import Notice

#: What each in-process ``Recording`` box was sent, in order.
RECEIVED: dict[str, list[Notice]] = defaultdict(list)
#: Boxes that refuse what they are sent (a channel that is down).
DOWN: set[str] = set()
#: Set to let every ``Hung`` channel return.
RELEASE = threading.Event()


class Recording:
    """Keeps what it is sent in :data:`RECEIVED`; raises while its box is in :data:`DOWN`."""

    def __init__(self, box: str = "main") -> None:
        self.box = box

    def send(self, notice: Notice) -> None:
        if self.box in DOWN:
            raise ConnectionRefusedError(f"[Errno 111] Connection refused (box {self.box})")
        RECEIVED[self.box].append(notice)


class Hung:
    """Never answers (until :data:`RELEASE` is set, at most a minute)."""

    def send(self, notice: Notice) -> None:
        RELEASE.wait(60)


class Appending:
    """Appends one line per notice to the file ``path`` (``id name previous status``),
    after ``delay`` seconds (to widen the window in which evaluators could overlap)."""

    def __init__(self, path: str, delay: float = 0.0) -> None:
        self.path = path
        self.delay = delay

    def send(self, notice: Notice) -> None:
        time.sleep(self.delay)
        line = f"{notice.id} {notice.name} {notice.previous} {notice.status} {os.getpid()}\n"
        with open(self.path, "a", encoding="utf-8") as out:  # O_APPEND: one write per line
            out.write(line)
