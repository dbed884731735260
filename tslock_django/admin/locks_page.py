"""The Locks page: one table across providers, read one page at a time.

A thin view over :class:`~tslock_django.listing.MergedListing`: it turns the query
string into a :class:`~tslock_django.core.query.LockQuery` (search, provider and state
filters, order), asks for the page the ``cursor`` parameter points to and renders it.
Nothing here reads more than a page per provider, and every read is marked as made
for an admin page view (:func:`~tslock_django.core.budget.admin_view_listing`): a store
behind a rate-limited API (Workers KV) then draws on its allowance for admin views, and
the page says when that allowance is spent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, QueryDict
from django.template.response import TemplateResponse
from django.utils import dateformat, timezone
from django.utils.http import urlencode

from ..conf import providers
from ..core.budget import BudgetSpent, admin_view_listing
from ..core.query import ALL_STATES, CURRENT_STATES, MAX_LIMIT, LockQuery
from ..exceptions import InvalidCursor, InvalidLockProvider
from ..listing import MergedListing, MergedPage
from .frame import ListFilter, ListFrame
from .rows import LockRow, make_row

if TYPE_CHECKING:
    from .model_admins import LockAdmin

logger = logging.getLogger("tslock_django.admin")

# Query-string parameters, named like the admin's own changelist ones where there is one.
SEARCH_VAR = "q"
PROVIDER_VAR = "provider"
STATE_VAR = "state"
ORDER_VAR = "o"
CURSOR_VAR = "cursor"

#: State filter value -> (label, states asked for); "" is the default.
STATE_FILTERS: dict[str, tuple[str, frozenset[str]]] = {
    "": ("Current (held and at-least)", CURRENT_STATES),
    "held": ("Held", frozenset({"held"})),
    "at_least": ("Held for at-least", frozenset({"at_least"})),
    "expired": ("Expired", frozenset({"expired"})),
    "all": ("All, expired too", ALL_STATES),
}

#: (column id, header, sortable) in display order. Only the orders every store can
#: keep an index for are sortable; the others would need every record read.
COLUMNS: list[tuple[str, str, bool]] = [
    ("provider", "Provider", False),
    ("name", "Name", True),
    ("locked_by", "Held by", False),
    ("locked_at", "Locked at", True),
    ("lock_until", "Lock until", True),
    ("remaining", "Remaining", False),
    ("state", "State", False),
    ("fencing_token", "Fencing token", False),
    ("fingerprint", "Token fingerprint", False),
]
SORTABLE = frozenset(column for column, _, sortable in COLUMNS if sortable)
DEFAULT_ORDER = "name"


@dataclass(frozen=True)
class Filters:
    """The page's query-string parameters, each checked (unknown values fall back to
    the default rather than erroring: they come from hand-edited or old links)."""

    search: str
    provider: str
    state: str
    order: str  # a column id, "-" in front when descending
    cursor: str

    @classmethod
    def from_query(cls, params: QueryDict, aliases: list[str]) -> Filters:
        provider = params.get(PROVIDER_VAR, "")
        state = params.get(STATE_VAR, "")
        order = params.get(ORDER_VAR, "")
        return cls(
            search=params.get(SEARCH_VAR, "").strip(),
            provider=provider if provider in aliases else "",
            state=state if state in STATE_FILTERS else "",
            order=order if order.lstrip("-") in SORTABLE else DEFAULT_ORDER,
            cursor=params.get(CURSOR_VAR, ""),
        )

    @property
    def column(self) -> str:
        return self.order.lstrip("-")

    @property
    def descending(self) -> bool:
        return self.order.startswith("-")

    def query(self, limit: int) -> LockQuery:
        return LockQuery(
            search=self.search,
            states=STATE_FILTERS[self.state][1],
            order=self.column,
            descending=self.descending,
            limit=limit,
        )

    def link(self, **changes: str) -> str:
        """This page's URL with ``changes``; a changed filter starts from the first page."""
        values = {
            SEARCH_VAR: self.search,
            PROVIDER_VAR: self.provider,
            STATE_VAR: self.state,
            ORDER_VAR: "" if self.order == DEFAULT_ORDER else self.order,
        }
        values.update(changes)
        return "?" + urlencode({k: v for k, v in values.items() if v})


def render(admin: LockAdmin, request: HttpRequest, extra_context: Mapping[str, Any] | None) -> HttpResponse:
    """The Locks page for ``request`` (the caller checked the view permission)."""
    try:
        aliases = providers.aliases()
    except InvalidLockProvider as err:
        messages.error(request, f"TSLOCK_PROVIDERS is not configured correctly: {err}")
        aliases = []
    filters = Filters.from_query(request.GET, aliases)
    # A provider filter also saves the round trips to the other stores.
    listed = [filters.provider] if filters.provider else aliases
    # The merged listing keeps pages under the stores' limit whatever list_per_page says.
    listing = MergedListing(listed, filters.query(min(admin.list_per_page, MAX_LIMIT - 1)))
    try:
        with admin_view_listing() as view:
            page = listing.page(filters.cursor or None)
    except InvalidCursor as err:
        return _bad_cursor(admin, request, filters, str(err))
    for error in page.errors:
        messages.error(request, error)
    for spent in view.spent_budgets.values():
        messages.warning(request, _spent_message(spent))

    now = timezone.now()
    guarantees = {}
    for alias in {row.alias for row in page.rows}:
        guarantees[alias] = str(providers[alias].guarantee)
    rows = [make_row(row.alias, guarantees[row.alias], row.record, now) for row in page.rows]
    rows = _with_runs_links(admin, rows)
    provider_choices = [
        {"label": "All", "selected": not filters.provider, "url": filters.link(provider="")}
    ] + [
        {"label": alias, "selected": alias == filters.provider, "url": filters.link(provider=alias)}
        for alias in aliases
    ]
    state_choices = [
        {"label": label, "selected": value == filters.state, "url": filters.link(state=value)}
        for value, (label, _) in STATE_FILTERS.items()
    ]
    context = admin.context(
        request,
        "Locks",
        cl=ListFrame(
            admin.opts, [ListFilter.of("provider", provider_choices), ListFilter.of("state", state_choices)]
        ),
        rows=rows,
        headers=_headers(filters),
        query=filters.search,
        search_var=SEARCH_VAR,
        # The search form keeps the filters and the order, and starts from the first page.
        hidden_params=[(k, v) for k, v in QueryDict(filters.link()[1:]).items() if k != SEARCH_VAR],
        count=_count(page, listed),
        notes=page.notes,
        next_url=filters.link(cursor=page.next_cursor) if page.next_cursor else "",
        previous_url=filters.link(cursor=page.previous_cursor) if page.previous_cursor else "",
        first_url=filters.link() if not page.at_start else "",
        backward_blocked=page.backward_blocked,
        has_release_permission=admin.has_release_permission(request),
        now=timezone.localtime(now),
        # The table has eleven columns; the app sidebar would push the last ones out of view.
        is_nav_sidebar_enabled=False,
        **(extra_context or {}),
    )
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, admin.changelist_template, context)


def _with_runs_links(admin: LockAdmin, rows: list[LockRow]) -> list[LockRow]:
    """Link each row whose name the journal has runs of to its history on the Runs
    page: one query for the page's names (their ``Job`` rows, by primary key). The
    journal is the project's database, not the stores: if it cannot be read, the Locks
    page still renders, without the links."""
    from ..journal.models import Job, journal_name
    from ..journal.recorder import journal_database

    # A name too long for the journal's column is journaled under its stand-in.
    names = {journal_name(row.record.name) for row in rows if row.record.name}
    if not names or not admin.sibling_url("job", "history"):
        return rows
    try:
        using = journal_database()
        if using is None:
            return rows
        journaled = set(Job.objects.using(using).filter(name__in=names).values_list("name", flat=True))
        history = admin.sibling_url("job", "history")
    except (ValueError, DatabaseError) as err:
        logger.warning("the Locks page could not link to the journal: %s", type(err).__name__)
        return rows
    return [
        replace(row, runs_url=f"{history}?{urlencode({'name': journal_name(row.record.name)})}")
        if journal_name(row.record.name) in journaled
        else row
        for row in rows
    ]


def _spent_message(spent: BudgetSpent) -> str:
    until = dateformat.format(timezone.localtime(spent.until), "H:i T")
    return f"Lock provider {spent.alias!r}: {spent.budget} is spent until {until}; showing what was read."


def _headers(filters: Filters) -> list[dict[str, Any]]:
    headers = []
    for column, label, sortable in COLUMNS:
        here = filters.column == column
        descending = here and filters.descending
        url = ""
        if sortable:
            # A sorted column's link reverses it; another column's sorts ascending.
            url = filters.link(o=("" if descending else "-") + column if here else column)
        headers.append(
            {
                "id": column,
                "label": label,
                "sortable": sortable,
                "sorted": here,
                "descending": descending,
                "url": url,
            }
        )
    return headers


def _count(page: MergedPage, listed: list[str]) -> str:
    """ "12 locks", or the counts that the stores gave ("db: 12; kv: not counted"), or
    nothing: never a number the stores did not give."""
    if page.total is not None:
        return f"{page.total} lock{'' if page.total == 1 else 's'}"
    known = [(alias, page.totals.get(alias)) for alias in listed if alias in page.totals]
    if not any(total is not None for _, total in known):
        return ""
    return "; ".join(f"{alias}: {'not counted' if total is None else total}" for alias, total in known)


def _bad_cursor(admin: LockAdmin, request: HttpRequest, filters: Filters, problem: str) -> HttpResponse:
    context = admin.context(request, "Page link not valid", problem=problem, first_url=filters.link())
    request.current_app = admin.admin_site.name
    return TemplateResponse(request, admin.bad_cursor_template, context, status=400)
