"""How a provider's OPTIONS are read, whatever the store: unknown keys refused, missing
ones named, text (from a URL's query string) read as the type of the default.

Kept apart from :mod:`tslock_django.core.provider` so that the system checks can read a
built-in provider's OPTIONS without importing that provider (see
:mod:`tslock_django.providers.store_options`); it imports nothing but the exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..exceptions import InvalidLockProvider

#: How option values given as text (URL query strings) spell true and false.
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})

#: Marks an option that has no default and must be given.
REQUIRED: Any = object()


def option_error(alias: str, key: str, problem: str) -> InvalidLockProvider:
    """The ``InvalidLockProvider`` for one option of provider ``alias``."""
    return InvalidLockProvider(f"TSLOCK_PROVIDERS[{alias!r}] OPTIONS[{key!r}] {problem}")


def resolve_options(
    alias: str, provider: str, defaults: Mapping[str, Any], given: Mapping[str, Any]
) -> dict[str, Any]:
    """``given`` over ``defaults``: every option, with text read as its default's type.

    Args:
        alias: the key in ``TSLOCK_PROVIDERS`` (for messages).
        provider: the provider's class name (for messages).
        defaults: the options the provider accepts; ``REQUIRED`` for those without a default.
        given: the OPTIONS from settings.

    Raises:
        InvalidLockProvider: an unknown key, a missing required one, or text that does
            not read as its default's type.
    """
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise InvalidLockProvider(
            f"TSLOCK_PROVIDERS[{alias!r}]: unknown OPTIONS key(s) {', '.join(map(repr, unknown))} "
            f"for {provider}; valid keys are {', '.join(sorted(defaults)) or '(none)'}"
        )
    resolved = {**defaults, **{k: _coerce(alias, k, v, defaults[k]) for k, v in given.items()}}
    missing = sorted(k for k, v in resolved.items() if v is REQUIRED)
    if missing:
        raise InvalidLockProvider(
            f"TSLOCK_PROVIDERS[{alias!r}]: {provider} needs OPTIONS {', '.join(map(repr, missing))}"
        )
    return resolved


def _coerce(alias: str, key: str, value: Any, default: Any) -> Any:
    # Options from a URL query string arrive as text; read them as the type of the
    # default so "?confirm_write=false" means False, not the truthy string "false".
    if not isinstance(value, str) or default is REQUIRED or isinstance(default, str) or default is None:
        return value
    if isinstance(default, bool):
        lowered = value.strip().lower()
        if lowered in TRUE_WORDS or lowered in FALSE_WORDS:
            return lowered in TRUE_WORDS
        raise option_error(alias, key, f"must be true or false, got {value!r}")
    if isinstance(default, (int, float)):
        try:
            return type(default)(value)
        except ValueError:
            raise option_error(alias, key, f"must be a number, got {value!r}") from None
    return value
