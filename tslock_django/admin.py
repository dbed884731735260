"""The admin's Locks page: the current records of every configured provider, and force release.

The page is not a queryset: the ``Lock`` model only anchors it in the admin (its app
section, its permissions, its LogEntry content type), and every row comes from a
provider's ``list_locks()``. So the ``ModelAdmin`` replaces the changelist with a view of
its own and keeps none of the add, change, delete or per-object history views, which
would show the database table (raw tokens included) instead of the stores.

Permissions:
    ``tslock_django.view_lock`` to see the page and the release history (being staff is
    not enough); ``tslock_django.release_lock`` as well to force-release.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import update_wrapper
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import router, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_POST

from .conf import providers
from .core.provider import LockProvider
from .core.records import LockRecord
from .exceptions import InvalidLockProvider, LockProviderError
from .models import Lock

logger = logging.getLogger(__name__)

VIEW_PERMISSION = "tslock_django.view_lock"
RELEASE_PERMISSION = "tslock_django.release_lock"

#: The states a row can be in; "unknown" is a record whose times cannot be read.
STATES: dict[str, str] = {
    "held": "held",
    "held_for_at_least": "held for at-least",
    "expired": "expired",
    "unknown": "unknown",
}

# Query-string parameters, named like the admin's own changelist ones.
SEARCH_VAR = "q"
PROVIDER_VAR = "provider"
STATE_VAR = "state"
ORDER_VAR = "o"
PAGE_VAR = "p"

#: (column id, header) in display order; every column is sortable.
COLUMNS: list[tuple[str, str]] = [
    ("provider", "Provider"),
    ("name", "Name"),
    ("locked_by", "Held by"),
    ("locked_at", "Locked at"),
    ("lock_until", "Lock until"),
    ("remaining", "Remaining"),
    ("state", "State"),
    ("fencing_token", "Fencing token"),
    ("fingerprint", "Token fingerprint"),
]


# -- rows ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """One lock picked for release, and the holding it must still be in.

    ``condition`` is ``"fencing"`` (``value`` is the fencing token, an int) or
    ``"fingerprint"`` (``value`` is the token fingerprint, a str, for stores without a
    fencing token: the store re-reads the holding and compares fingerprints itself).
    """

    alias: str
    name: str
    condition: str
    value: int | str

    def encode(self) -> str:
        return json.dumps([self.alias, self.name, self.condition, self.value], ensure_ascii=False)

    @classmethod
    def decode(cls, raw: str) -> Selection:
        """Parse a checkbox value; ``ValueError`` for anything this page did not write."""
        try:
            alias, name, condition, value = json.loads(raw)
        except (TypeError, ValueError) as err:
            raise ValueError("not a lock selection") from err
        valid = (
            isinstance(alias, str)
            and isinstance(name, str)
            and name
            and (
                (condition == "fencing" and isinstance(value, int) and not isinstance(value, bool))
                or (condition == "fingerprint" and isinstance(value, str) and value)
            )
        )
        if not valid:
            raise ValueError("not a lock selection")
        return cls(alias, name, condition, value)

    @property
    def object_id(self) -> str:
        """The LogEntry object id: ``alias:name``."""
        return f"{self.alias}:{self.name}"

    def describe_condition(self) -> str:
        if self.condition == "fencing":
            return f"fencing token {self.value}"
        return f"token fingerprint {self.value}"


@dataclass(frozen=True)
class LockRow:
    """A record as the page shows it, with everything computed against one ``now``."""

    alias: str
    guarantee: str
    record: LockRecord
    state: str
    locked_at: datetime | None  # aware; None when unreadable
    lock_until: datetime | None
    remaining: timedelta | None
    progress: int | None  # percent of [locked_at, lock_until] elapsed, 0..100
    overdue: bool
    selection: Selection | None  # None: nothing to release conditionally on

    # Converted only for the rows of the shown page: localtime() on every record of a
    # 10,000-lock listing was most of the page's render time.
    @property
    def locked_at_local(self) -> datetime | None:
        return timezone.localtime(self.locked_at) if self.locked_at else None

    @property
    def lock_until_local(self) -> datetime | None:
        return timezone.localtime(self.lock_until) if self.lock_until else None

    @property
    def state_label(self) -> str:
        return STATES[self.state]

    @property
    def remaining_label(self) -> str:
        return format_remaining(self.remaining)

    @property
    def advisory(self) -> bool:
        return self.guarantee == "advisory"

    @property
    def selection_value(self) -> str:
        return self.selection.encode() if self.selection else ""


def _aware(value: Any) -> datetime | None:
    if isinstance(value, datetime) and timezone.is_aware(value):
        return value
    return None


def make_row(alias: str, guarantee: str, record: LockRecord, now: datetime) -> LockRow:
    """Compute what the page shows for one record."""
    locked_at, lock_until = _aware(record.locked_at), _aware(record.lock_until)
    if locked_at is None or lock_until is None:
        # A store that answered a record without readable times: show it, but claim nothing.
        return LockRow(alias, guarantee, record, "unknown", None, None, None, None, False, None)
    state = record.state(now)
    remaining = lock_until - now
    span = (lock_until - locked_at).total_seconds()
    elapsed = (now - locked_at).total_seconds()
    progress = int(max(0.0, min(1.0, elapsed / span)) * 100) if span > 0 else 100
    selection: Selection | None = None
    fencing = record.fencing_token
    if isinstance(fencing, int) and not isinstance(fencing, bool):
        selection = Selection(alias, record.name, "fencing", fencing)
    elif record.token_fingerprint:
        selection = Selection(alias, record.name, "fingerprint", record.token_fingerprint)
    return LockRow(
        alias=alias,
        guarantee=guarantee,
        record=record,
        state=state,
        locked_at=locked_at,
        lock_until=lock_until,
        remaining=remaining,
        progress=progress,
        overdue=now >= lock_until,
        selection=selection,
    )


def format_remaining(remaining: timedelta | None) -> str:
    """``"4m 12s"``, ``"overdue 3s"`` or ``"-"``: two units are enough to read a deadline."""
    if remaining is None:
        return "-"
    seconds = int(remaining.total_seconds())
    prefix = "" if seconds > 0 else "overdue "
    seconds = abs(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return prefix + " ".join(parts)


def _sort_key(column: str, order: Sequence[str]) -> Callable[[LockRow], tuple[Any, ...]]:
    position = {alias: i for i, alias in enumerate(order)}
    state_rank = {state: i for i, state in enumerate(STATES)}
    getters: dict[str, Callable[[LockRow], Any]] = {
        "provider": lambda r: position.get(r.alias, len(position)),
        "name": lambda r: r.record.name,
        "locked_by": lambda r: str(r.record.locked_by),
        "locked_at": lambda r: r.locked_at,
        "lock_until": lambda r: r.lock_until,
        "remaining": lambda r: r.remaining,
        "state": lambda r: state_rank[r.state],
        "fencing_token": lambda r: (
            r.selection.value if r.selection and r.selection.condition == "fencing" else None
        ),
        "fingerprint": lambda r: r.record.token_fingerprint or None,
    }
    get = getters[column]

    def key(row: LockRow) -> tuple[Any, ...]:
        value = get(row)
        # Missing values sort last; the name breaks ties so the order is stable across reloads.
        return (
            value is None,
            value if value is not None else 0,
            row.record.name,
            row.alias,
        )

    return key


def collect_rows(request: HttpRequest, aliases: Sequence[str], now: datetime) -> list[LockRow]:
    """List every provider in ``aliases``; a failing one becomes an error message, not a 500."""
    rows: list[LockRow] = []
    for alias in aliases:
        try:
            provider = providers[alias]
            records = provider.list_locks()
            if not isinstance(records, (list, tuple)) or not all(isinstance(r, LockRecord) for r in records):
                raise LockProviderError("answered something that is not a list of lock records", alias=alias)
            guarantee = str(provider.guarantee)
            rows.extend(make_row(alias, guarantee, record, now) for record in records)
        except Exception as err:  # noqa: BLE001  (one broken store must not hide the others)
            messages.error(request, describe_failure(alias, err))
    return rows


def describe_failure(alias: str, err: BaseException, failed_to: str = "be read") -> str:
    """One line for an operator: "Lock provider 'x' could not <failed_to>: ...".

    ``LockProviderError`` and ``InvalidLockProvider`` messages are written not to hold
    secrets; any other exception is a bug of the provider, whose text we do not trust,
    so only its type is shown and the traceback goes to the log."""
    if isinstance(err, InvalidLockProvider):
        return f"Lock provider {alias!r} is not configured correctly: {err}"
    if isinstance(err, LockProviderError):
        text = str(err)
        # The error usually starts with "lock provider 'alias': "; do not say it twice.
        prefix = f"lock provider {alias!r}: "
        text = text.removeprefix(prefix)
        return f"Lock provider {alias!r} could not {failed_to}: {text}"
    logger.error("tslock admin: lock provider %r could not %s", alias, failed_to, exc_info=err)
    return (
        f"Lock provider {alias!r} could not {failed_to}: unexpected {type(err).__name__} "
        "(details in the server log)"
    )


# -- the ModelAdmin ----------------------------------------------------------------------


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Lock]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


@admin.register(Lock)
class LockAdmin(_ModelAdmin):
    """The Locks page: records from every configured provider, with force release."""

    #: Rows per page; 10,000 locks must not render as one page.
    list_per_page = 100

    changelist_template = "admin/tslock_django/locks.html"
    confirmation_template = "admin/tslock_django/release_confirmation.html"
    history_template = "admin/tslock_django/release_history.html"

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

    def _url(self, view: str) -> str:
        info = self.opts.app_label, self.opts.model_name
        return reverse(f"{self.admin_site.name}:{info[0]}_{info[1]}_{view}")

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "title": title,
            "changelist_url": self._url("changelist"),
            "release_url": self._url("release"),
            "history_url": self._url("history"),
            **extra,
        }

    # -- the Locks page ------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """GET only reads: every configured provider's ``list_locks()``, filtered, sorted, paged."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        params = request.GET
        try:
            all_aliases = providers.aliases()
        except InvalidLockProvider as err:
            messages.error(request, f"TSLOCK_PROVIDERS is not configured correctly: {err}")
            all_aliases = []
        provider_filter = params.get(PROVIDER_VAR, "")
        if provider_filter and provider_filter not in all_aliases:
            provider_filter = ""
        state_filter = params.get(STATE_VAR, "")
        if state_filter not in STATES:
            state_filter = ""
        query = params.get(SEARCH_VAR, "").strip()
        order = params.get(ORDER_VAR, "")
        column = order.lstrip("-")
        if column not in dict(COLUMNS):
            order, column = "", ""

        now = timezone.now()
        # A provider filter also saves the round trips to the other stores.
        listed = [provider_filter] if provider_filter else all_aliases
        rows = collect_rows(request, listed, now)
        total = len(rows)
        if query:
            folded = query.casefold()
            rows = [r for r in rows if folded in r.record.name.casefold()]
        if state_filter:
            rows = [r for r in rows if r.state == state_filter]
        # Default order: providers as in settings, then names (the tie-breaker of every key).
        rows.sort(
            key=_sort_key(column or "provider", all_aliases),
            reverse=order.startswith("-"),
        )

        paginator = Paginator(rows, self.list_per_page)
        page = paginator.get_page(params.get(PAGE_VAR))

        def link(**changes: str) -> str:
            merged = {k: v for k, v in params.dict().items() if k != PAGE_VAR}
            merged.update(changes)
            return "?" + urlencode({k: v for k, v in merged.items() if v})

        headers = []
        for col, label in COLUMNS:
            sorted_here = column == col
            descending = sorted_here and order.startswith("-")
            headers.append(
                {
                    "id": col,
                    "label": label,
                    "sorted": sorted_here,
                    "descending": descending,
                    "url": link(**{ORDER_VAR: ("" if descending else "-") + col if sorted_here else col}),
                }
            )
        provider_choices = [
            {
                "label": "All",
                "selected": not provider_filter,
                "url": link(**{PROVIDER_VAR: ""}),
            }
        ]
        provider_choices += [
            {
                "label": alias,
                "selected": alias == provider_filter,
                "url": link(**{PROVIDER_VAR: alias}),
            }
            for alias in all_aliases
        ]
        state_choices = [
            {
                "label": "All",
                "selected": not state_filter,
                "url": link(**{STATE_VAR: ""}),
            }
        ]
        state_choices += [
            {
                "label": label,
                "selected": state == state_filter,
                "url": link(**{STATE_VAR: state}),
            }
            for state, label in STATES.items()
        ]
        page_links = []
        for number in paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1):
            if not isinstance(number, int):  # the ellipsis between page numbers
                page_links.append({"label": number, "url": "", "current": False})
            else:
                page_links.append(
                    {
                        "label": number,
                        "url": link(**{PAGE_VAR: str(number)}),
                        "current": number == page.number,
                    }
                )

        context = self._context(
            request,
            "Locks",
            rows=page.object_list,
            page=page,
            paginator=paginator,
            page_links=page_links,
            result_count=len(rows),
            total_count=total,
            headers=headers,
            query=query,
            search_var=SEARCH_VAR,
            hidden_params=[(k, v) for k, v in params.dict().items() if k not in (SEARCH_VAR, PAGE_VAR)],
            provider_choices=provider_choices,
            state_choices=state_choices,
            has_release_permission=self.has_release_permission(request),
            now=timezone.localtime(now),
            # The table has eleven columns; the app sidebar would push the last ones out of view.
            is_nav_sidebar_enabled=False,
            **(extra_context or {}),
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.changelist_template, context)

    # -- force release --------------------------------------------------------------------

    def release_view(self, request: HttpRequest) -> HttpResponse:
        """POST the selected rows: first a confirmation page, then (``confirm``) the release."""
        return csrf_protect(require_POST(self._release))(request)

    def _release(self, request: HttpRequest) -> HttpResponse:
        if not self.has_release_permission(request):
            raise PermissionDenied
        selections: list[Selection] = []
        for raw in request.POST.getlist("lock"):
            try:
                selection = Selection.decode(raw)
            except ValueError:
                messages.error(request, "A selected lock could not be read; select it again.")
                return HttpResponseRedirect(self._url("changelist"))
            if selection not in selections:
                selections.append(selection)
        if not selections:
            messages.warning(request, "Select at least one lock to release.")
            return HttpResponseRedirect(self._url("changelist"))
        if request.POST.get("confirm") != "yes":
            return self._confirmation(request, selections)
        for selection in selections:
            self._release_one(request, selection)
        return HttpResponseRedirect(self._url("changelist"))

    def _confirmation(self, request: HttpRequest, selections: list[Selection]) -> HttpResponse:
        items = []
        for selection in selections:
            guarantee = ""
            try:
                guarantee = str(providers[selection.alias].guarantee)
            except Exception as err:  # noqa: BLE001  (shown on the page; the release would fail too)
                messages.error(request, describe_failure(selection.alias, err))
            items.append(
                {
                    "selection": selection,
                    "guarantee": guarantee,
                    "value": selection.encode(),
                }
            )
        context = self._context(
            request,
            "Force-release locks?",
            items=items,
            any_fingerprint=any(s.condition == "fingerprint" for s in selections),
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.confirmation_template, context)

    def _release_one(self, request: HttpRequest, selection: Selection) -> None:
        alias, name = selection.alias, selection.name
        try:
            provider = providers[alias]
            released = self._force_unlock(provider, selection)
        except ValueError as err:
            # e.g. a name over this store's limit: nothing was sent to the store.
            messages.error(request, f"Lock {name!r} on provider {alias!r} was not released: {err}")
            return
        except Exception as err:  # noqa: BLE001  (report per lock; release the others)
            messages.error(
                request,
                f"Lock {name!r} was not released. {describe_failure(alias, err, 'release it')}",
            )
            return
        if not released:
            messages.warning(
                request,
                f"Lock {name!r} on provider {alias!r} was not released: it is no longer held with "
                f"{selection.describe_condition()} (it changed hands, was released or expired meanwhile).",
            )
            return
        change_message = (
            f"Force-released lock {name!r} on provider {alias!r} held with {selection.describe_condition()}."
        )
        self._log_release(request, selection, change_message)
        logger.info(
            "tslock admin: user %s force-released lock %r on provider %r (%s)",
            request.user.get_username(),
            name,
            alias,
            selection.describe_condition(),
        )
        messages.success(request, change_message)

    @staticmethod
    def _log_release(request: HttpRequest, selection: Selection, change_message: str) -> None:
        """Record a done release in the admin history; a failure is logged, not raised,
        because the lock is already released and the operator must be told so."""
        try:
            user_pk = request.user.pk
            if user_pk is None:  # admin_view admits logged-in users only
                raise ValueError("the request has no logged-in user")
            # A savepoint, so that a failed insert does not break a surrounding
            # ATOMIC_REQUESTS transaction for the rest of the request.
            with transaction.atomic(using=router.db_for_write(LogEntry)):
                # objects.create works on every supported Django (log_action is deprecated
                # from 5.1 on); the pk goes in as it is, whatever its type (int, UUID, str).
                LogEntry.objects.create(
                    user_id=user_pk,
                    content_type_id=ContentType.objects.get_for_model(Lock, for_concrete_model=False).pk,
                    object_id=selection.object_id,
                    object_repr=selection.object_id[:200],
                    action_flag=CHANGE,
                    change_message=change_message,
                )
        except Exception:  # the release happened; only its history entry is missing
            logger.exception(
                "tslock admin: lock %r on provider %r was released, but the admin history entry "
                "could not be written",
                selection.name,
                selection.alias,
            )

    @staticmethod
    def _force_unlock(provider: LockProvider, selection: Selection) -> bool:
        # A fencing token is an int; a fingerprint is a str, which a store without fencing
        # tokens (Workers KV) accepts as ``expected``: it reads the holding, compares the
        # fingerprint of its token and deletes only on a match. That is one read and one
        # delete, and the read-then-delete window is the one every KV operation has.
        # Listing here first would page through every key that starts with the name.
        return provider.force_unlock(selection.name, expected=selection.value)

    # -- release history ------------------------------------------------------------------

    def release_history_view(self, request: HttpRequest) -> HttpResponse:
        """The LogEntries of force releases, newest first."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        content_type = ContentType.objects.get_for_model(Lock, for_concrete_model=False)
        entries = (
            LogEntry.objects.filter(content_type=content_type).select_related("user").order_by("-action_time")
        )
        page = Paginator(entries, self.list_per_page).get_page(request.GET.get(PAGE_VAR))
        context = self._context(request, "Lock release history", page=page, entries=page.object_list)
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.history_template, context)
