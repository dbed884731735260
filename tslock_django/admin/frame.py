"""What Django's own ``admin/change_list.html`` reads to draw the Locks and Runs pages.

The pages extend that template and fill only the blocks whose content is ours (the
search bar, the table, the page links, the object tools), so the breadcrumbs, the
layout of the table beside the filter panel and the filter panel itself are each
Django version's own markup. The template reads them from a ``cl`` (a ``ChangeList``
in Django's own pages); our rows do not come from a queryset, so ``cl`` is a
:class:`ListFrame` that carries only what the frame asks of it, and each filter is a
:class:`ListFilter` rendered by Django's ``admin/filter.html``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ListFilter:
    """One filter of the panel beside the table, in the shape Django's
    ``admin_list_filter`` tag renders: a title (shown as "By <title>") and choices.

    Args:
        title: what is filtered on, lower case ("provider", "status").
        options: ``(label, selected, link)`` for each choice, ``link`` a query string.
    """

    title: str
    options: tuple[tuple[str, bool, str], ...]
    template: str = "admin/filter.html"

    @classmethod
    def of(cls, title: str, choices: Iterable[dict[str, Any]]) -> ListFilter:
        """A filter from the pages' own choice dicts (``label``, ``selected``, ``url``)."""
        return cls(title, tuple((c["label"], bool(c["selected"]), c["url"]) for c in choices))

    def choices(self, changelist: Any) -> list[dict[str, Any]]:
        """The choices as ``admin/filter.html`` reads them."""
        return [
            {"display": label, "selected": selected, "query_string": link}
            for label, selected, link in self.options
        ]


@dataclass(frozen=True)
class ListFrame:
    """The ``cl`` of Django's ``admin/change_list.html`` for a page whose rows are ours:
    the model's options (for the breadcrumbs) and the filter panel. There is no formset,
    no facets and no date hierarchy."""

    opts: Any
    filter_specs: list[ListFilter] = field(default_factory=list)
    formset: None = None
    date_hierarchy: None = None
    is_popup: bool = False
    is_facets_optional: bool = False
    add_facets: bool = False
    has_active_filters: bool = False

    @property
    def has_filters(self) -> bool:
        return bool(self.filter_specs)
