"""A job's name as a monitor's slug.

Healthchecks takes slugs of ``a-z``, ``0-9``, ``-`` and ``_`` (its Pinging API
documentation); Sentry makes its monitor slugs of the same characters. A lock name made
of those is its own slug. Any other name is pinged under a slug made from it: lowercased,
each run of other characters (``.``, ``:``, spaces, ``{``, non-ASCII letters...) turned
into one ``-``, and ``-`` trimmed from both ends, so ``Report.Daily`` is ``report-daily``
and ``sync {42}`` is ``sync-42``. Two names can meet in one slug that way (``a.b`` and
``a:b``); ``tslock.W003`` names such names of ``TSLOCK_SCHEDULES``. A name with none of
the characters (``...``) has no slug and is not pinged (a warning says so, once).
"""

from __future__ import annotations

import re

_SLUG = re.compile(r"[a-z0-9_-]+")
_OTHERS = re.compile(r"[^a-z0-9_-]+")


def is_slug(name: str) -> bool:
    """Whether ``name`` is a valid slug as it is."""
    return _SLUG.fullmatch(name) is not None


def slug_of(name: str) -> str:
    """The slug a job named ``name`` is pinged under (see the module); ``""`` for a
    name that makes none."""
    if is_slug(name):
        return name
    return _OTHERS.sub("-", name.lower()).strip("-")
