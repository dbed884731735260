"""The admin's Locks and Runs pages: the ``ModelAdmin`` classes and
their URLs in ``model_admins``, the Locks page in ``locks_page``, force release and its
history in ``release``, what a Locks row shows in ``rows``, the Runs page and a name's
history of runs in ``runs_page``. Importing this package registers both pages."""

from __future__ import annotations

from django.contrib import admin

from ..core.human import format_remaining
from ..models import Job, Lock
from .model_admins import RELEASE_PERMISSION, VIEW_PERMISSION, LockAdmin, RunsAdmin
from .rows import STATES, LockRow, Selection, make_row

admin.site.register(Lock, LockAdmin)
admin.site.register(Job, RunsAdmin)

__all__ = [
    "RELEASE_PERMISSION",
    "STATES",
    "VIEW_PERMISSION",
    "LockAdmin",
    "LockRow",
    "RunsAdmin",
    "Selection",
    "format_remaining",
    "make_row",
]
