"""The providers a subcommand acts on, looked up as ``--provider`` names them; a
configuration error or an unknown alias is a ``CommandError`` (one line, exit status 1)."""

from __future__ import annotations

from django.core.management.base import CommandError

from ..conf import providers
from ..core.provider import LockProvider
from ..exceptions import InvalidLockProvider


def provider_named(alias: str) -> LockProvider:
    """The configured provider ``alias``, built on first use."""
    try:
        return providers[alias]
    except InvalidLockProvider as err:
        raise CommandError(str(err)) from err


def selected(only: str | None) -> list[str]:
    """Every configured alias, in settings order, or just ``only`` (which must be one)."""
    try:
        configured = providers.aliases()
    except InvalidLockProvider as err:
        raise CommandError(str(err)) from err
    if only is None:
        return configured
    if only not in configured:
        known = ", ".join(configured) or "(none)"
        raise CommandError(f"no lock provider {only!r} in TSLOCK_PROVIDERS; configured aliases: {known}")
    return [only]
