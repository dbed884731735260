"""django-environ integration: ``Env().lock_provider_url("TSLOCK_URL")``.

(environ ships no type hints, hence the type: ignore on the subclass.)

Kept apart from ``conf`` so that importing tslock_django does not import environ.
"""

from __future__ import annotations

from typing import Any

import environ
from django.views.decorators.debug import sensitive_variables

from .conf import parse_provider_url
from .exceptions import InvalidLockProvider


class Env(environ.Env):  # type: ignore[misc]
    """``environ.Env`` with a reader for lock provider URLs."""

    @sensitive_variables("value", "default")
    def lock_provider_url(self, var: str = "TSLOCK_URL", default: Any = environ.Env.NOTSET) -> dict[str, Any]:
        """The ``TSLOCK_PROVIDERS`` entry described by the URL in ``var``.

        ``TSLOCK_PROVIDERS = {"default": env.lock_provider_url("TSLOCK_URL", default="db://default")}``

        Raises:
            ImproperlyConfigured: the variable is unset and has no default.
            InvalidLockProvider: the URL is not a valid provider URL (the message names
                the variable, never the URL, which may hold a token).
        """
        value = self.str(var, default=default)
        try:
            return parse_provider_url(value)
        except InvalidLockProvider as err:
            raise InvalidLockProvider(f"environment variable {var}: {err}") from None
