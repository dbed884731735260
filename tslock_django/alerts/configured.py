"""The channels ``TSLOCK_ALERTS`` configures, built once per settings value.

``TSLOCK_ALERTS = {"channels": [{"BACKEND": "dotted.path.Class", "OPTIONS": {...}}]}``:
each BACKEND is a class with a ``send(notice)`` method, built with its OPTIONS as
keyword arguments. Each channel has a stable key (:func:`channel_key`), the same in
every process and across restarts while its entry is unchanged, by which the evaluator
remembers which channels have taken a notice.

Like ``TSLOCK_PROVIDERS``, the setting is read on first use, never at import, and the
channels are built again when it is another object (``override_settings``, Django's
``setting_changed``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from ..core.scrubbing import hide_secrets
from .errors import InvalidAlertChannel
from .notice import Channel

SETTING = "TSLOCK_ALERTS"
_ENTRY_KEYS = ("BACKEND", "OPTIONS")

# (the setting's object they were built from, the channels)
_built: tuple[object, list[tuple[str, Channel]]] | None = None
_mutex = threading.Lock()
_listening = False


def configured_channels() -> list[tuple[str, Channel]]:
    """Every configured channel with its key, in settings order; ``[]`` when
    ``TSLOCK_ALERTS`` is unset or has no channels.

    Raises:
        InvalidAlertChannel: the setting is malformed, a BACKEND does not import or is
            not a channel class, or a channel refuses its OPTIONS (the message names
            the entry: ``TSLOCK_ALERTS['channels'][1]``).
    """
    global _built
    _listen()
    current = getattr(settings, SETTING, None)
    built = _built
    if built is not None and built[0] is current:
        return list(built[1])
    with _mutex:
        built = _built
        if built is None or built[0] is not current:
            built = (current, build_channels(current))
            _built = built
    return list(built[1])


def build_channels(configured: object) -> list[tuple[str, Channel]]:
    """The channels of a ``TSLOCK_ALERTS`` value, built (no network: a channel's
    constructor only reads its OPTIONS). What :func:`configured_channels` and the system
    check call.

    Raises:
        InvalidAlertChannel: as :func:`configured_channels`.
    """
    built: list[tuple[str, Channel]] = []
    seen: dict[str, int] = {}
    for index, backend, options in channel_entries(configured):
        where = f"{SETTING}['channels'][{index}]"
        cls = channel_class(where, backend)
        try:
            channel = cls(**options)
        except (InvalidAlertChannel, TypeError, ValueError) as err:
            # A third-party channel's message may quote an option's value.
            raise InvalidAlertChannel(f"{where}: {hide_secrets(str(err))}") from None
        key = channel_key(backend, options)
        if key in seen:
            raise InvalidAlertChannel(
                f"{where} is the same channel as {SETTING}['channels'][{seen[key]}] (same BACKEND and "
                "OPTIONS): every notice would go to it twice; remove one"
            )
        seen[key] = index
        built.append((key, channel))
    return built


def channel_entries(configured: object) -> list[tuple[int, str, dict[str, Any]]]:
    """``(index, BACKEND, OPTIONS)`` of each entry of a ``TSLOCK_ALERTS`` value, its shape
    checked (nothing imported).

    Raises:
        InvalidAlertChannel: the value is not ``{"channels": [{"BACKEND": ..., "OPTIONS": {...}}]}``.
    """
    if configured is None:
        return []
    example = "{'channels': [{'BACKEND': 'tslock_django.alerts.EmailChannel', 'OPTIONS': {}}]}"
    if not isinstance(configured, Mapping):
        raise InvalidAlertChannel(
            f"{SETTING} must be a dict like {example}; got a {type(configured).__name__}"
        )
    unknown = [key for key in configured if key != "channels"]
    if unknown:
        raise InvalidAlertChannel(
            f"{SETTING} has an unknown key {str(unknown[0])!r}; its one key is 'channels', e.g. {example}"
        )
    channels = configured.get("channels", [])
    if not isinstance(channels, (list, tuple)):
        raise InvalidAlertChannel(
            f"{SETTING}['channels'] must be a list of {{'BACKEND': ..., 'OPTIONS': {{...}}}} dicts; "
            f"got a {type(channels).__name__}"
        )
    entries: list[tuple[int, str, dict[str, Any]]] = []
    for index, entry in enumerate(channels):
        where = f"{SETTING}['channels'][{index}]"
        if not isinstance(entry, Mapping):
            raise InvalidAlertChannel(
                f"{where} must be a dict with 'BACKEND' (a dotted path) and optional 'OPTIONS'; "
                f"got a {type(entry).__name__}"
            )
        extra = [key for key in entry if key not in _ENTRY_KEYS]
        if extra:
            raise InvalidAlertChannel(
                f"{where} has an unknown key {str(extra[0])!r}; an entry has 'BACKEND' and 'OPTIONS' "
                "(the channel's own settings go in OPTIONS)"
            )
        backend = entry.get("BACKEND")
        if not isinstance(backend, str) or not backend.strip():
            raise InvalidAlertChannel(
                f"{where}['BACKEND'] must be the dotted path of a channel class, "
                "e.g. 'tslock_django.alerts.WebhookChannel'"
            )
        options = entry.get("OPTIONS", {})
        if options is None:
            options = {}
        if not isinstance(options, Mapping) or not all(isinstance(key, str) for key in options):
            raise InvalidAlertChannel(
                f"{where}['OPTIONS'] must be a dict of option names to values; got a {type(options).__name__}"
            )
        entries.append((index, backend.strip(), dict(options)))
    return entries


def channel_class(where: str, backend: str) -> type[Any]:
    """The class a BACKEND names.

    Raises:
        InvalidAlertChannel: it does not import, or is not a class with a ``send`` method.
    """
    try:
        cls = import_string(backend)
    except ImportError as err:
        raise InvalidAlertChannel(
            f"{where}['BACKEND'] {backend!r} cannot be imported ({type(err).__name__}: {err}); "
            "give the dotted path of a channel class, e.g. 'tslock_django.alerts.SlackChannel'"
        ) from None
    if not isinstance(cls, type) or not callable(getattr(cls, "send", None)):
        what = (
            "a class without a send method"
            if isinstance(cls, type)
            else f"a {type(cls).__name__}, not a class"
        )
        raise InvalidAlertChannel(
            f"{where}['BACKEND'] {backend!r} is {what}; a channel is a class whose send(notice) "
            "method delivers a notice and raises when it could not"
        )
    return cls


#: OPTIONS that change how a channel sends, not where: left out of its key.
NOT_DESTINATION = frozenset({"timeout"})


def channel_key(backend: str, options: Mapping[str, Any]) -> str:
    """A channel's stable key: ``BACKEND#<digest>``, where the digest is the first 12 hex
    digits of the SHA-256 of its OPTIONS as JSON with sorted keys, lists of texts sorted,
    and ``timeout`` left out. The same destination gives the same key in every process,
    whatever the order of its recipients or its timeout (a notice it took is not sent to
    it again after such a change); another destination is another channel, one that has
    taken nothing yet. Values JSON cannot hold are written with ``str()``."""
    destination = {
        name: sorted(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value
        for name, value in options.items()
        if name not in NOT_DESTINATION
    }
    text = json.dumps(destination, sort_keys=True, separators=(",", ":"), default=str)
    return f"{backend}#{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}"


def _listen() -> None:
    # django.test's signal, once something (a test runner) has imported it: importing
    # it here would cost every command's start.
    global _listening
    if _listening or "django.test.signals" not in sys.modules:
        return
    from django.test.signals import setting_changed

    setting_changed.connect(_on_setting_changed, dispatch_uid="tslock_django.alerts.configured.reset")
    _listening = True


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    global _built
    if setting == SETTING:
        _built = None
