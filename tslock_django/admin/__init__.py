"""The admin's Locks page (see :mod:`.options`): the ``ModelAdmin`` and its URLs in
``options``, the page in ``locks_page``, force release and its history in ``release``,
what a row shows in ``rows``. Importing this package registers the page."""

from __future__ import annotations

from django.contrib import admin

from ..core.human import format_remaining
from ..models import Lock
from .options import RELEASE_PERMISSION, VIEW_PERMISSION, LockAdmin
from .rows import STATES, LockRow, Selection, make_row

admin.site.register(Lock, LockAdmin)

__all__ = [
    "RELEASE_PERMISSION",
    "STATES",
    "VIEW_PERMISSION",
    "LockAdmin",
    "LockRow",
    "Selection",
    "format_remaining",
    "make_row",
]
