"""The ``ModelAdmin`` classes of the Locks and Runs pages: permissions and URLs; the
views live beside them (``locks_page``, ``release``, ``runs_page``).

Neither page is a queryset changelist. The ``Lock`` model anchors the Locks page in the
admin (its app section, its permissions, its LogEntry content type) while every row
comes from a provider's ``query()``; the ``Job`` model anchors the Runs page, whose rows
are read from the journal's tables a page at a time. So each ``ModelAdmin`` replaces the
changelist with a view of its own and keeps none of the add, change, delete or
per-object history views, which would show the database tables (raw tokens included)
instead.

Permissions (the same for both pages):
    ``tslock_django.view_lock`` to see the pages and the release history (being staff is
    not enough); ``tslock_django.release_lock`` as well to force-release, and to pause or
    resume a job on the Runs page.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import update_wrapper
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import models, transaction
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_POST

from . import locks_page, pause_action, release, runs_page

VIEW_PERMISSION = "tslock_django.view_lock"
RELEASE_PERMISSION = "tslock_django.release_lock"

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[models.Model]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


class TslockPageAdmin(_ModelAdmin):
    """What the Locks and Runs pages share: ``view_lock`` to view, nothing to add,
    change or delete, and views wrapped by the admin site outside any request
    transaction."""

    # -- permissions: view_lock specifically; nothing can be added, changed or deleted --

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.has_perm(VIEW_PERMISSION))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # -- URLs --------------------------------------------------------------------------

    def wrap(self, view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        """``view`` behind the admin site's login, outside request transactions."""

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

    def url(self, view: str) -> str:
        """The URL of one of this admin's views (``changelist``, ``history``, ...)."""
        info = self.opts.app_label, self.opts.model_name
        return reverse(f"{self.admin_site.name}:{info[0]}_{info[1]}_{view}")

    def sibling_url(self, model_name: str, view: str) -> str:
        """The URL of a view of the other page (``lock`` or ``job``) on this admin site,
        or ``""`` when this site does not register that page."""
        try:
            return reverse(f"{self.admin_site.name}:{self.opts.app_label}_{model_name}_{view}")
        except NoReverseMatch:
            return ""

    def base_context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        """The admin's template context for a page titled ``title``, plus ``extra``.

        The pages extend Django's own admin templates, which draw the breadcrumbs from
        this context: a page below the Locks or Runs page (``_subpage.html``) ends them
        with ``original``, the title unless ``extra`` names a shorter one.
        """
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "title": title,
            "original": title,
            "has_view_permission": self.has_view_permission(request),
            **extra,
        }


class LockAdmin(TslockPageAdmin):
    """The Locks page: records from every configured provider, with force release."""

    #: Rows per page: each provider is asked for this many records per page view.
    list_per_page = 100

    changelist_template = "admin/tslock_django/locks.html"
    confirmation_template = "admin/tslock_django/release_confirmation.html"
    history_template = "admin/tslock_django/release_history.html"
    bad_cursor_template = "admin/tslock_django/bad_cursor.html"

    def has_release_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request) and request.user.has_perm(RELEASE_PERMISSION)

    def get_urls(self) -> list[URLPattern]:
        # Only our own views: the default change/history views would read the database
        # table (and show its raw tokens) instead of the providers.
        base = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("", self.wrap(self.changelist_view), name=f"{base}_changelist"),
            path("release/", self.wrap(self.release_view), name=f"{base}_release"),
            path("history/", self.wrap(self.release_history_view), name=f"{base}_history"),
        ]

    def context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        """The admin's template context plus this admin's URLs and ``extra``."""
        return self.base_context(
            request,
            title,
            changelist_url=self.url("changelist"),
            release_url=self.url("release"),
            history_url=self.url("history"),
            runs_url=self.sibling_url("job", "changelist"),
            **extra,
        )

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


class RunsAdmin(TslockPageAdmin):
    """The Runs page: one row per journaled name (its last run, last success, next due
    time and status), and each name's history of runs."""

    #: Names per page on the Runs page, and runs per page of a history.
    list_per_page = 100

    changelist_template = "admin/tslock_django/runs.html"
    run_history_template = "admin/tslock_django/run_history.html"
    bad_cursor_template = "admin/tslock_django/bad_cursor.html"

    def get_urls(self) -> list[URLPattern]:
        base = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("", self.wrap(self.changelist_view), name=f"{base}_changelist"),
            path("history/", self.wrap(self.run_history_view), name=f"{base}_history"),
            path("pause/", self.wrap(self.pause_view), name=f"{base}_pause"),
        ]

    def has_pause_permission(self, request: HttpRequest) -> bool:
        """Pause and resume jobs: ``release_lock`` beside ``view_lock`` (a pause keeps a
        job from taking its lock, as a force release acts on one)."""
        return self.has_view_permission(request) and request.user.has_perm(RELEASE_PERMISSION)

    def context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return self.base_context(
            request,
            title,
            changelist_url=self.url("changelist"),
            runs_url=self.url("changelist"),
            locks_url=self.sibling_url("lock", "changelist"),
            pause_url=self.url("pause"),
            can_pause=self.has_pause_permission(request),
            **extra,
        )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """One page of names from the journal's ``Job`` table, by name."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return runs_page.render(self, request, extra_context)

    def run_history_view(self, request: HttpRequest) -> HttpResponse:
        """The runs of one name (``?name=``), newest first."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return runs_page.history(self, request)

    def pause_view(self, request: HttpRequest) -> HttpResponse:
        """POST ``name`` and ``action`` (``pause`` or ``resume``): set or clear its pause."""
        return csrf_protect(require_POST(self._pause))(request)

    def _pause(self, request: HttpRequest) -> HttpResponse:
        return pause_action.toggle(self, request)
