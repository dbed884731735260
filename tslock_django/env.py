"""django-environ integration: ``Env().lock_provider_url("TSLOCK_URL")``.

(environ ships no type hints, hence the type: ignore on the subclass.)

Kept apart from ``conf`` so that importing tslock_django does not import environ.
"""

from __future__ import annotations

from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured
from django.views.decorators.debug import sensitive_variables

from .conf import URL_FORMS, invalid_url_entry, parse_provider_url
from .exceptions import InvalidLockProvider


class Env(environ.Env):  # type: ignore[misc]
    """``environ.Env`` with a reader for lock provider URLs."""

    @sensitive_variables("value", "default")
    def lock_provider_url(self, var: str = "TSLOCK_URL", default: Any = environ.Env.NOTSET) -> dict[str, Any]:
        """The ``TSLOCK_PROVIDERS`` entry described by the URL in ``var``.

        ``TSLOCK_PROVIDERS = {"default": env.lock_provider_url("TSLOCK_URL", default="db://default")}``

        A variable that is unset (without a default), empty or not a provider URL raises
        nothing here, in the settings module, where any error is a long traceback before
        Django can report it. It gives an entry that stands for the error instead
        (:func:`tslock_django.conf.invalid_url_entry`): every management command then
        stops at the system checks with one line, tslock.E008, naming the variable and
        the forms a URL takes, never the URL, which may hold a secret; a process that
        runs no checks gets the same message as an ``InvalidLockProvider`` when it first
        uses that provider.
        """
        try:
            value = self.str(var, default=default)
        except ImproperlyConfigured as err:  # unset without a default ("Set the ... variable")
            return invalid_url_entry(f"environment variable {var}: {err}; use one of {URL_FORMS}")
        try:
            return parse_provider_url(value)
        except InvalidLockProvider as err:
            return invalid_url_entry(f"environment variable {var}: {err}")
