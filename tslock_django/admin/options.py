"""The ``ModelAdmin`` of the Locks page: permissions and URLs; the views live beside it.

The page is not a queryset: the ``Lock`` model only anchors it in the admin (its app
section, its permissions, its LogEntry content type), and every row comes from a
provider's ``query()``. So the ``ModelAdmin`` replaces the changelist with a view of
its own and keeps none of the add, change, delete or per-object history views, which
would show the database table (raw tokens included) instead of the stores.

Permissions:
    ``tslock_django.view_lock`` to see the page and the release history (being staff is
    not enough); ``tslock_django.release_lock`` as well to force-release.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import update_wrapper
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_POST

from ..models import Lock
from . import locks_page, release

VIEW_PERMISSION = "tslock_django.view_lock"
RELEASE_PERMISSION = "tslock_django.release_lock"

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Lock]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


class LockAdmin(_ModelAdmin):
    """The Locks page: records from every configured provider, with force release."""

    #: Rows per page: each provider is asked for this many records per page view.
    list_per_page = 100

    changelist_template = "admin/tslock_django/locks.html"
    confirmation_template = "admin/tslock_django/release_confirmation.html"
    history_template = "admin/tslock_django/release_history.html"
    bad_cursor_template = "admin/tslock_django/bad_cursor.html"

    # -- permissions: view_lock specifically; nothing can be added, changed or deleted --

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.has_perm(VIEW_PERMISSION))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_release_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request) and request.user.has_perm(RELEASE_PERMISSION)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # -- URLs --------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        # Only our own views: the default change/history views would read the database
        # table (and show its raw tokens) instead of the providers.
        def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            def wrapper(*args: Any, **kwargs: Any) -> HttpResponse:
                return self.admin_site.admin_view(view)(*args, **kwargs)

            wrapper.model_admin = self  # type: ignore[attr-defined]
            wrapper = update_wrapper(wrapper, view)
            # Under ATOMIC_REQUESTS a release would run inside the request's transaction,
            # where the database provider must use a second connection (and on SQLite,
            # with its single writer, refuse). These views read stores and release
            # locks; none of that belongs in a request transaction.
            for alias in settings.DATABASES:
                wrapper = transaction.non_atomic_requests(using=alias)(wrapper)
            return wrapper

        base = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("", wrap(self.changelist_view), name=f"{base}_changelist"),
            path("release/", wrap(self.release_view), name=f"{base}_release"),
            path("history/", wrap(self.release_history_view), name=f"{base}_history"),
        ]

    def url(self, view: str) -> str:
        """The URL of one of this admin's views (``changelist``, ``release``, ``history``)."""
        info = self.opts.app_label, self.opts.model_name
        return reverse(f"{self.admin_site.name}:{info[0]}_{info[1]}_{view}")

    def context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        """The admin's template context plus this admin's URLs and ``extra``."""
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "title": title,
            "changelist_url": self.url("changelist"),
            "release_url": self.url("release"),
            "history_url": self.url("history"),
            **extra,
        }

    # -- views ---------------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """GET only reads: one page of the merged listing of the providers."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return locks_page.render(self, request, extra_context)

    def release_view(self, request: HttpRequest) -> HttpResponse:
        """POST the selected rows: first a confirmation page, then (``confirm``) the release."""
        return csrf_protect(require_POST(self._release))(request)

    def _release(self, request: HttpRequest) -> HttpResponse:
        return release.release(self, request)

    def _release_one(self, request: HttpRequest, selection: Any) -> None:
        release.release_one(request, selection)

    def release_history_view(self, request: HttpRequest) -> HttpResponse:
        """The LogEntries of force releases, newest first."""
        return release.history(self, request)
