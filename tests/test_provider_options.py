"""The OPTIONS of the built-in providers are read once, in ``providers.store_options``: the
system check (which does not build the provider) and the constructor (first use) refuse
the same settings with the same message."""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tslock_django import InvalidLockProvider, MutableClock
from tslock_django.checks import check_providers
from tslock_django.conf import ProviderHandler
from tslock_django.providers import store_options as options
from tslock_django.providers.database.provider import DIALECTS as _DIALECTS

DB = "tslock_django.providers.database.DatabaseLockProvider"
MEMORY = "tslock_django.providers.memory.MemoryLockProvider"
DO = "tslock_django.providers.cloudflare_do.DurableObjectLockProvider"
KV = "tslock_django.providers.cloudflare_kv.KVLockProvider"
REDIS = "tslock_django.providers.redis.RedisLockProvider"

GOOD = {
    DB: {},
    MEMORY: {},
    DO: {"url": "https://locks.example.com", "token": "t" * 32},
    KV: {"account_id": "a", "namespace_id": "n", "api_token": "t", "acknowledge_advisory_lock": True},
    REDIS: {"url": "redis://127.0.0.1:6379/0"},
}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "redis": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:6379/1",
    },
}

# (BACKEND, OPTIONS changed from GOOD, a piece of the message)
REFUSED = [
    (DB, {"colour": "red"}, "unknown OPTIONS key(s) 'colour'"),
    (DB, {"using": "nowhere"}, "'nowhere' is not a database alias"),
    (DB, {"use_db_time": "maybe"}, "must be true or false, got 'maybe'"),
    (DB, {"use_db_time": 1}, "must be True or False, got 1"),
    (DB, {"prepared_statements": True}, "unknown OPTIONS key(s) 'prepared_statements'"),
    (MEMORY, {"colour": "red"}, "valid keys are (none)"),
    (DO, {"token": None}, "needs OPTIONS 'token'"),
    (DO, {"url": "https://user:pw@locks.example.com"}, "must not contain credentials"),
    (DO, {"url": "ftp://locks.example.com"}, "must be an http(s) URL with a host"),
    (DO, {"url": "https://locks.example.com/?token=x"}, "must not have a query string"),
    (DO, {"url": "https://locks.example.com:99999"}, "has an invalid port"),
    (DO, {"url": "https://[::1/"}, "is not a valid URL"),
    (DO, {"url": "https://Sécret\uff20locks.example.com/"}, "is not a valid URL"),
    (DO, {"key_prefix": "jobs\ud800"}, "must be text that UTF-8 can encode"),
    (KV, {"key_prefix": "jobs\ud800"}, "must be text that UTF-8 can encode"),
    (REDIS, {"url": "redis://:Sécret@[::1:6379/0"}, "is not a valid URL"),
    (REDIS, {"key_prefix": "jobs\ud800"}, "must be text that UTF-8 can encode"),
    (DO, {"token": "two words"}, "printable ASCII without spaces"),
    (DO, {"key_prefix": "x" * 600}, "must be shorter than 512 UTF-8 bytes"),
    (DO, {"timeout": "soon"}, "must be a number, got 'soon'"),
    (DO, {"timeout": 0}, "must be greater than 0 seconds"),
    (DO, {"transport": object()}, "cannot contain 'transport'"),
    (KV, {"api_token": " "}, "must be a non-empty string from the Cloudflare dashboard"),
    (KV, {"confirm_write": "perhaps"}, "must be true or false, got 'perhaps'"),
    (KV, {"base_url": "api.cloudflare.com"}, "must be an http(s) URL such as"),
    (KV, {"timeout": -1}, "between 0 and 300, got -1"),
    (KV, {"list_request_budget": 1}, "from 2 to 1200"),
    (KV, {"list_cache_seconds": 301}, "from 0 (no cache) to 300"),
    (REDIS, {"url": "redis://127.0.0.1:6379/db"}, "not a database number"),
    (REDIS, {"url": "http://127.0.0.1:6379/0"}, "must be a redis:// or rediss:// URL"),
    (REDIS, {"url": 6379}, "must be a string URL, got int"),
    (REDIS, {"url": None}, "exactly one of them"),
    (REDIS, {"cache": "redis"}, "exactly one of them"),
    (REDIS, {"url": None, "cache": "nowhere"}, "must name a CACHES alias; 'nowhere' is not one"),
    (REDIS, {"url": None, "cache": "default"}, "whose BACKEND is 'django.core.cache.backends.locmem."),
    (REDIS, {"url": None, "cache": "redis", "timeout": 2}, "applies to OPTIONS['url'] only"),
    (REDIS, {"timeout": "soon"}, "must be a number of seconds, got 'soon'"),
    (REDIS, {"key_prefix": 3}, "must be a string, got int"),
    (REDIS, {"clock": "12:00"}, "must be a ClockProvider"),
]


def entry(backend: str, changes: dict[str, Any]) -> dict[str, Any]:
    given = {**GOOD[backend], **changes}
    return {"BACKEND": backend, "OPTIONS": {k: v for k, v in given.items() if v is not None}}


@pytest.mark.parametrize(("backend", "changes", "fragment"), REFUSED)
def test_the_check_and_the_constructor_refuse_alike(
    backend: str, changes: dict[str, Any], fragment: str
) -> None:
    setting = {"default": {"BACKEND": MEMORY}, "it": entry(backend, changes)}
    with override_settings(TSLOCK_PROVIDERS=setting, CACHES=CACHES):
        messages = check_providers()
        with pytest.raises(InvalidLockProvider) as built:
            ProviderHandler().create("it")
    assert [m.id for m in messages] == ["tslock.E003"]
    assert messages[0].msg == str(built.value)
    assert fragment in messages[0].msg
    assert messages[0].msg.startswith("TSLOCK_PROVIDERS['it']")
    assert "Sécret" not in messages[0].msg  # a URL that may hold a secret is never echoed


@pytest.mark.parametrize("backend", [DB, MEMORY, DO, KV, REDIS])
def test_good_options_pass_both(backend: str) -> None:
    setting = {"default": {"BACKEND": MEMORY}, "it": entry(backend, {"clock": MutableClock()})}
    with override_settings(TSLOCK_PROVIDERS=setting):
        assert check_providers() == []
        ProviderHandler().create("it").close()


def test_options_read_from_text_are_the_constructors_options() -> None:
    """A URL's query string gives text; the check reads it as the constructor does."""
    given = {"url": "redis://127.0.0.1:6379/0", "timeout": "2.5"}
    read = options.REDIS.read("it", given)
    built = ProviderHandler()
    with override_settings(TSLOCK_PROVIDERS={"it": {"BACKEND": REDIS, "OPTIONS": given}}):
        provider = built.create("it")
    expected = {"url": given["url"], "cache": None, "key_prefix": "tslock:", "timeout": 2.5}
    assert read == provider.options == expected
    from_url = {"use_db_time": "false"}
    assert options.DATABASE.read("it", from_url) == {"using": "default", "use_db_time": False}


def test_each_provider_declares_the_defaults_the_check_reads() -> None:
    for store in options.BUILT_IN.values():
        module, _, name = store.backend.rpartition(".")
        assert getattr(import_module(module), name).default_options is store.defaults


def test_the_vendors_the_check_accepts_are_those_with_sql() -> None:
    assert set(options.DATABASE_VENDORS) == set(_DIALECTS)


# Django's engines the tests can import (GeoDjango needs GDAL, Oracle needs oracledb).
@pytest.mark.parametrize(
    "engine", ["django.db.backends.sqlite3", "django.db.backends.postgresql", "django.db.backends.mysql"]
)
def test_the_vendor_read_from_an_engine_is_that_engines_vendor(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine.endswith("mysql") and "MySQLdb" not in sys.modules:
        # The MySQL engine imports MySQLdb; pymysql stands in for it, for this test only.
        pymysql = pytest.importorskip("pymysql", reason="pymysql (the test group's MySQL driver) is missing")
        monkeypatch.setitem(sys.modules, "MySQLdb", pymysql)
    wrapper = import_module(f"{engine}.base").DatabaseWrapper
    assert wrapper.vendor == options._ENGINE_VENDORS[engine]


def test_an_unsupported_database_is_refused_without_importing_its_driver() -> None:
    """The check reads the vendor from ENGINE; Oracle's driver is not even installed."""
    root = Path(__file__).resolve().parent.parent
    oracle = {"ENGINE": "django.db.backends.oracle", "NAME": "x"}
    providers = {"default": {"BACKEND": DB, "OPTIONS": {"using": "ora"}}}
    script = (
        "import sys, django\n"
        "from django.conf import settings\n"
        f"settings.DATABASES = {{**settings.DATABASES, 'ora': {oracle!r}}}\n"
        f"settings.TSLOCK_PROVIDERS = {providers!r}\n"
        "django.setup()\n"
        "from tslock_django.checks import check_providers\n"
        "print([m.msg for m in check_providers()])\n"
        "print('django.db.backends.oracle.base' in sys.modules, 'psycopg' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    messages, imported = done.stdout.strip().splitlines()[-2:]
    assert "OPTIONS['using'] = 'ora' is a oracle database; the database provider supports mysql" in messages
    assert imported == "False False"
