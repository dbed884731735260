"""Force release from the admin: a confirmation page, a release conditional on the
holding the operator saw, a LogEntry and the ``lock_force_released`` signal (sent by
the provider); and the history of those releases."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import router, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse

from ..conf import providers
from ..core.provider import LockProvider
from ..listing import describe_failure
from ..models import Lock
from .rows import Selection

if TYPE_CHECKING:
    from .model_admins import LockAdmin

# Logged under the admin package's name, where operators (and the tests) look for it.
logger = logging.getLogger("tslock_django.admin")

PAGE_VAR = "p"


def release(admin: LockAdmin, request: HttpRequest) -> HttpResponse:
    """POST the selected rows: first a confirmation page, then (``confirm``) the release."""
    if not admin.has_release_permission(request):
        raise PermissionDenied
    selections: list[Selection] = []
    for raw in request.POST.getlist("lock"):
        try:
            selection = Selection.decode(raw)
        except ValueError:
            messages.error(request, "A selected lock could not be read; select it again.")
            return HttpResponseRedirect(admin.url("changelist"))
        problem = selection.problem()
        if problem:
            # Refused before any confirmation or store call; nothing else is released either.
            messages.error(
                request,
                f"Lock {selection.name!r} on provider {selection.alias!r} was not released: {problem}.",
            )
            return HttpResponseRedirect(admin.url("changelist"))
        if selection not in selections:
            selections.append(selection)
    if not selections:
        messages.warning(request, "Select at least one lock to release.")
        return HttpResponseRedirect(admin.url("changelist"))
    if request.POST.get("confirm") != "yes":
        return _confirmation(admin, request, selections)
    for selection in selections:
        release_one(request, selection)
    return HttpResponseRedirect(admin.url("changelist"))


def _confirmation(admin: LockAdmin, request: HttpRequest, selections: list[Selection]) -> HttpResponse:
    items = []
    for selection in selections:
        guarantee = ""
        try:
            guarantee = str(providers[selection.alias].guarantee)
        except Exception as err:  # noqa: BLE001  (shown on the page; the release would fail too)
            messages.error(request, describe_failure(selection.alias, err))
        items.append({"selection": selection, "guarantee": guarantee, "value": selection.encode()})
    context = admin.context(
        request,
        "Force-release locks?",
        items=items,
        any_fingerprint=any(s.condition == "fingerprint" for s in selections),
    )
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, admin.confirmation_template, context)


def release_one(request: HttpRequest, selection: Selection) -> None:
    """Release one selected lock and tell the operator how it went (a message each)."""
    alias, name = selection.alias, selection.name
    try:
        provider = providers[alias]
        released = _force_unlock(provider, selection)
    except ValueError as err:
        # e.g. a name over this store's limit: nothing was sent to the store.
        messages.error(request, f"Lock {name!r} on provider {alias!r} was not released: {err}")
        return
    except Exception as err:  # noqa: BLE001  (report per lock; release the others)
        messages.error(
            request, f"Lock {name!r} was not released. {describe_failure(alias, err, 'release it')}"
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
    _log_release(request, selection, change_message)
    logger.info(
        "tslock admin: user %s force-released lock %r on provider %r (%s)",
        request.user.get_username(),
        name,
        alias,
        selection.describe_condition(),
    )
    messages.success(request, change_message)


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


def _force_unlock(provider: LockProvider, selection: Selection) -> bool:
    # A fencing token is an int; a fingerprint is a str, which a store without fencing
    # tokens (Workers KV) accepts as ``expected``: it reads the holding, compares the
    # fingerprint of its token and deletes only on a match. That is one read and one
    # delete, and the read-then-delete window is the one every KV operation has.
    # Listing here first would page through every key that starts with the name.
    return provider.force_unlock(selection.name, expected=selection.value)


def history(admin: LockAdmin, request: HttpRequest) -> HttpResponse:
    """The LogEntries of force releases, newest first."""
    if not admin.has_view_permission(request):
        raise PermissionDenied
    content_type = ContentType.objects.get_for_model(Lock, for_concrete_model=False)
    entries = (
        LogEntry.objects.filter(content_type=content_type).select_related("user").order_by("-action_time")
    )
    page = Paginator(entries, admin.list_per_page).get_page(request.GET.get(PAGE_VAR))
    context = admin.context(request, "Lock release history", page=page, entries=page.object_list)
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, admin.history_template, context)
