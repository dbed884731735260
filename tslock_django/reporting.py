"""An exception reporter filter that keeps lock provider secrets off Django's error pages.

Django's technical 500 page and the error e-mails to ``ADMINS`` show settings,
``request.META`` (often the process environment) and every frame's local variables, and
its default filter hides values by their *name* only, which misses a provider URL such as
``TSLOCK_URL=cloudflare-kv://ACCOUNT:TOKEN@NAMESPACE``. :class:`TslockExceptionReporterFilter`
also hides what tslock's settings make secret, wherever it shows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.views.debug import SafeExceptionReporterFilter

from .core.scrubbing import channel_secrets, provider_secrets, scrub

#: ``scheme://user:password@`` -> ``scheme://***@``.
_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.\-]*://)[^/@\s'\"]+@", re.IGNORECASE)


class TslockExceptionReporterFilter(SafeExceptionReporterFilter):
    """``SafeExceptionReporterFilter`` that also hides provider URLs and the secrets in
    ``TSLOCK_PROVIDERS``. Use it as ``DEFAULT_EXCEPTION_REPORTER_FILTER =
    "tslock_django.reporting.TslockExceptionReporterFilter"``.

    On top of Django's rules it:

    - hides the variables named by ``provider_url_variables`` (``TSLOCK_URL``,
      ``TSLOCK_*_URL``) wherever they show: settings, ``META``, frames;
    - masks the user and password of every URL it shows (``scheme://***@host``), so a
      ``redis://:password@host`` or a provider URL under any other name does not show either;
    - hides, in every value it shows (text, bytes, and the ``repr`` of any other object),
      the secrets configured in ``TSLOCK_PROVIDERS``, whatever variable holds them, in any
      escaped form (``tslock_django.core.scrubbing.scrub``): the OPTIONS whose names
      Django hides, such as ``token`` and ``api_token``; the password of every URL among
      the OPTIONS, as written and decoded (``p%40ss`` and ``p@ss``); and the passwords of
      the ``CACHES`` entry a Redis provider's ``cache`` option names, so the password
      redis-py holds while it connects (``auth_args``) does not show either; and the
      secrets of the ``TSLOCK_ALERTS`` channels (a Slack hook's URL, a webhook's secret);
    - applies ``@sensitive_variables`` also when ``DEBUG = True``: Django skips it then,
      but a DEBUG page is often seen by more people than the settings file.
    """

    #: Names (settings, environment variables, frame variables) whose value is hidden
    #: whole. A subclass can add the names a project uses for its provider URLs.
    provider_url_variables = re.compile(r"^TSLOCK(_[A-Z0-9]+)*_URL$", re.IGNORECASE)

    def is_active(self, request: HttpRequest | None) -> bool:
        # Django turns the filter off when DEBUG is True; provider secrets stay hidden then too.
        return True

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        if isinstance(key, str) and self.provider_url_variables.search(key):
            return self.cleansed_substitute
        # Django walks dicts, lists and tuples (calling this for each item); the rest
        # is masked here.
        return self._mask(super().cleanse_setting(key, value))

    def cleanse_special_types(self, request: HttpRequest | None, value: Any) -> Any:
        value = super().cleanse_special_types(request, value)
        # A frame's variable, whatever its type: the same rules as settings.
        return self.cleanse_setting("", dict(value) if isinstance(value, Mapping) else value)

    def get_traceback_frame_variables(self, request: HttpRequest | None, tb_frame: Any) -> Any:
        cleansed = dict(super().get_traceback_frame_variables(request, tb_frame))
        for name in cleansed:
            if self.provider_url_variables.search(name):
                cleansed[name] = self.cleansed_substitute
        return cleansed.items()

    def _mask(self, value: Any) -> Any:
        """``value`` (a leaf: Django walks the containers) without secrets: text
        masked; another object replaced, only when its ``repr`` shows a secret, by one
        that shows that ``repr`` masked (the page shows a value through its ``repr``)."""
        if isinstance(value, str):
            return self._mask_text(value)
        if value is None or isinstance(value, (bool, int, float, dict, list, tuple)):
            return value
        try:
            shown = repr(value)
        except Exception:  # noqa: BLE001  (Django shows its own note for an unprintable value)
            return value
        masked = self._mask_text(shown)
        return value if masked == shown else _Masked(masked)

    def _mask_text(self, text: str) -> str:
        return scrub(_USERINFO.sub(r"\g<scheme>***@", text), self._configured_secrets())

    def _configured_secrets(self) -> list[str]:
        """The secrets ``TSLOCK_PROVIDERS`` configures: its OPTIONS values whose names
        Django hides, the passwords of the URLs among its OPTIONS, and those of the
        ``CACHES`` entries its ``cache`` options name; and those of ``TSLOCK_ALERTS``'s
        channels (a webhook's secret, the secret parts of their URLs)."""
        configured = getattr(settings, "TSLOCK_PROVIDERS", None)
        found = provider_secrets(configured, getattr(settings, "CACHES", None), self.hidden_settings)
        return found + channel_secrets(getattr(settings, "TSLOCK_ALERTS", None), self.hidden_settings)


class _Masked:
    """Shows a masked ``repr`` in the place of a value whose own showed a secret."""

    __slots__ = ("_shown",)

    def __init__(self, shown: str) -> None:
        self._shown = shown

    def __repr__(self) -> str:
        return self._shown
