"""The Runs page's Pause and Resume buttons: a POST (CSRF-checked) that sets or clears a
job's pause (:mod:`tslock_django.journal.pausing`), says what happened in a message,
writes a LogEntry (who paused what, when), and goes back to the page it came from.

Permission: ``tslock_django.release_lock`` beside ``view_lock``, the permission that
already lets an operator act on a job's lock (a pause keeps the job from taking it)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, router, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme

from ..journal import pausing
from ..journal.models import Job, journal_name
from ..journal.recorder import journal_database

if TYPE_CHECKING:
    from .model_admins import RunsAdmin

logger = logging.getLogger("tslock_django.admin")

#: The POST's fields: ``pause=NAME`` or ``resume=NAME`` (the button pressed, so the Runs
#: page's one change-list form carries a button per row), and where to go back to.
ACTIONS = {"pause": pausing.pause, "resume": pausing.resume}
NEXT_FIELD = "next"


def toggle(admin: RunsAdmin, request: HttpRequest) -> HttpResponse:
    """Pause or resume the posted name, then redirect back to the page it came from."""
    if not admin.has_pause_permission(request):
        raise PermissionDenied
    back = _back(admin, request)
    pressed = [(action, request.POST[action]) for action in ACTIONS if request.POST.get(action)]
    if len(pressed) != 1:
        messages.error(
            request, "The pause request named no job or no action; use the Pause and Resume buttons."
        )
        return HttpResponseRedirect(back)
    [(action, name)] = pressed
    try:
        using = journal_database()
    except ValueError as err:
        messages.error(request, f"The journal's settings are not valid: {err}")
        return HttpResponseRedirect(back)
    if using is None:
        messages.error(request, "The journal is off (TSLOCK_JOURNAL = None), so no job can be paused.")
        return HttpResponseRedirect(back)
    try:
        done = ACTIONS[action](using, name)
    except DatabaseError as err:
        logger.warning("the Runs page could not %s %r: %s", action, name, type(err).__name__)
        messages.error(
            request,
            f"Could not {action} {name}: the journal (database {using!r}) failed: {type(err).__name__}.",
        )
        return HttpResponseRedirect(back)
    if done.changed:
        _log(request, name, "Paused" if action == "pause" else "Resumed")
    messages.success(request, done.describe())
    return HttpResponseRedirect(back)


def _back(admin: RunsAdmin, request: HttpRequest) -> str:
    """The page the button was on (its filters and position), or the Runs page."""
    wanted = request.POST.get(NEXT_FIELD, "")
    safe = url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return wanted if wanted and safe else admin.url("changelist")


def _log(request: HttpRequest, name: str, what: str) -> None:
    """The admin's history entry of a pause or resume; a failure to write it is logged,
    the pause itself stands."""
    try:
        user_pk = request.user.pk
        if user_pk is None:  # admin_view admits logged-in users only
            raise ValueError("the request has no logged-in user")
        # A savepoint, so a failed insert leaves an ATOMIC_REQUESTS transaction usable.
        with transaction.atomic(using=router.db_for_write(LogEntry)):
            # objects.create works on every supported Django (log_action is deprecated from 5.1).
            LogEntry.objects.create(
                user_id=user_pk,
                content_type_id=ContentType.objects.get_for_model(Job).pk,
                object_id=journal_name(name),
                object_repr=name[:200],
                action_flag=CHANGE,
                change_message=what,
            )
    except Exception:  # the pause happened; only its history entry is missing
        logger.exception("tslock admin: %s %r, but the admin history entry could not be written", what, name)
