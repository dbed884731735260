"""TSLOCK_PROVIDERS, the providers handler and the provider URL form."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from tslock_django import InvalidLockProvider, TslockError, providers
from tslock_django.conf import DEFAULT_PROVIDERS, parse_provider_url, provider_settings
from tslock_django.env import Env
from tslock_django.providers.database import DatabaseLockProvider
from tslock_django.providers.memory import MemoryLockProvider

MEMORY = {"default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"}}


def test_unset_setting_means_the_database_provider_on_default() -> None:
    with override_settings():
        from django.conf import settings

        del settings.TSLOCK_PROVIDERS
        assert provider_settings() == DEFAULT_PROVIDERS
        provider = providers["default"]
        assert isinstance(provider, DatabaseLockProvider)
        assert provider.using == "default"
        assert provider.guarantee == "strong"


def test_instances_are_cached_and_reset_by_override_settings() -> None:
    first = providers["default"]
    assert providers["default"] is first
    with override_settings(TSLOCK_PROVIDERS=MEMORY):
        inside = providers["default"]
        assert isinstance(inside, MemoryLockProvider)
        assert providers.all() == [inside]
        assert "default" in providers and "nope" not in providers
    assert isinstance(providers["default"], DatabaseLockProvider)
    assert providers["default"] is not first, "the cache should have been dropped when the setting changed"


# Django warns about overriding DATABASES in tests; here that is the point.
@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_replacing_databases_rebuilds_the_providers(settings: Any) -> None:
    first = providers["default"]
    settings.DATABASES = {**settings.DATABASES}
    assert providers["default"] is not first
    again = providers["default"]
    assert providers["default"] is again, "unchanged settings keep the instance"


def test_configuration_errors_are_not_runtime_errors() -> None:
    assert issubclass(InvalidLockProvider, ImproperlyConfigured)
    assert not issubclass(InvalidLockProvider, TslockError)


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        ({"default": {"BACKEND": "tslock_django.providers.nothing.Here"}}, "could not be imported"),
        ({"default": {"BACKEND": "tslock_django.conf.ProviderHandler"}}, "not a LockProvider subclass"),
        ({"default": {"OPTIONS": {}}}, "needs 'BACKEND'"),
        ({"default": {"BACKEND": "x.Y", "TIMEOUT": 3}}, "unknown key(s) 'TIMEOUT'"),
        ({"default": {"BACKEND": "x.Y", "OPTIONS": []}}, "'OPTIONS'] must be a dict"),
        ({"default": "db://default"}, "must be a dict"),
        (["default"], "must be a dict of alias"),
        (
            {
                "default": {
                    "BACKEND": "tslock_django.providers.database.DatabaseLockProvider",
                    "OPTIONS": {"usin": "x"},
                }
            },
            "unknown OPTIONS key(s) 'usin' for DatabaseLockProvider; valid keys are use_db_time, using",
        ),
        (
            {
                "default": {
                    "BACKEND": "tslock_django.providers.database.DatabaseLockProvider",
                    "OPTIONS": {"using": "nope"},
                }
            },
            "'nope' is not a database alias",
        ),
        (
            {
                "default": {
                    "BACKEND": "tslock_django.providers.database.DatabaseLockProvider",
                    "OPTIONS": {"use_db_time": "maybe"},
                }
            },
            "must be true or false, got 'maybe'",
        ),
    ],
)
def test_bad_settings_say_what_is_wrong(setting: object, fragment: str) -> None:
    with override_settings(TSLOCK_PROVIDERS=setting), pytest.raises(InvalidLockProvider) as caught:
        providers["default"]
    assert fragment in str(caught.value)


def test_unknown_alias_names_the_configured_ones() -> None:
    with (
        override_settings(TSLOCK_PROVIDERS=MEMORY),
        pytest.raises(InvalidLockProvider, match=r"'edge'.*'default'"),
    ):
        providers["edge"]


def test_repr_hides_secret_options() -> None:
    class Secretive(MemoryLockProvider):
        default_options = {"token": "", "region": "eu"}
        secret_options = frozenset({"token"})

    text = repr(Secretive("edge", token="s3cr3t-value"))
    assert "s3cr3t-value" not in text
    assert "***" in text and "'eu'" in text


class TestProviderUrls:
    def test_db(self) -> None:
        assert parse_provider_url("db://") == {
            "BACKEND": "tslock_django.providers.database.DatabaseLockProvider",
            "OPTIONS": {"using": "default"},
        }
        assert parse_provider_url("db://replica?use_db_time=false")["OPTIONS"] == {
            "using": "replica",
            "use_db_time": "false",
        }

    def test_query_options_are_read_as_the_option_type(self) -> None:
        entry = parse_provider_url("db://default?use_db_time=no")
        provider = DatabaseLockProvider("x", **entry["OPTIONS"])
        assert provider.options["use_db_time"] is False

    def test_memory(self) -> None:
        assert parse_provider_url("memory://")["BACKEND"].endswith("MemoryLockProvider")

    def test_durable_objects(self) -> None:
        entry = parse_provider_url("cloudflare-do://tok%2Fen@locks.example.workers.dev/")
        assert entry["BACKEND"] == "tslock_django.providers.cloudflare_do.DurableObjectLockProvider"
        assert entry["OPTIONS"] == {"url": "https://locks.example.workers.dev", "token": "tok/en"}
        local = parse_provider_url("cloudflare-do+http://t@127.0.0.1:8787/base/?key_prefix=jobs:")
        assert local["OPTIONS"] == {"url": "http://127.0.0.1:8787/base", "token": "t", "key_prefix": "jobs:"}

    def test_workers_kv(self) -> None:
        entry = parse_provider_url("cloudflare-kv://acc123:api%40token@NsId42?acknowledge_advisory_lock=true")
        assert entry["BACKEND"] == "tslock_django.providers.cloudflare_kv.KVLockProvider"
        assert entry["OPTIONS"] == {
            "account_id": "acc123",
            "api_token": "api@token",
            "namespace_id": "NsId42",
            "acknowledge_advisory_lock": "true",
        }

    @pytest.mark.parametrize(
        ("url", "fragment"),
        [
            ("mongodb://secret@host/", "unknown lock provider URL scheme 'mongodb'"),
            ("rediss://:secret@/0", "rediss:// needs a host"),
            ("not a url", "(no '://' after the scheme); use one of db://ALIAS"),
            ("", "the lock provider URL is empty; use one of"),
            ("cloudflare-do://secret@host:port/", "the URL's port (a number from 0 to 65535) cannot be read"),
            ("redis://:secret@[::1/0", "the URL's host cannot be read"),
            ("secret-token:x@host://", "scheme (not repeated: 19 characters"),
            ("cloudflare_do://secret@host/", "'cloudflare_do' (did you mean 'cloudflare-do://'?)"),
            ("cloudflare-do://host.example/", "needs the Worker's bearer token"),
            ("cloudflare-kv://acc@ns", "needs the account id, API token and namespace id"),
            ("db://user:pw@default", "takes a database alias"),
        ],
    )
    def test_bad_urls_never_echo_the_url(self, url: str, fragment: str) -> None:
        with pytest.raises(InvalidLockProvider) as caught:
            parse_provider_url(url)
        assert fragment in str(caught.value)
        assert "secret" not in str(caught.value) and "pw" not in str(caught.value)

    def test_env_reader(self, monkeypatch: pytest.MonkeyPatch) -> None:
        env = Env()
        monkeypatch.setenv("TSLOCK_URL", "memory://")
        assert env.lock_provider_url("TSLOCK_URL")["BACKEND"].endswith("MemoryLockProvider")
        monkeypatch.delenv("TSLOCK_URL")
        assert env.lock_provider_url("TSLOCK_URL", default="db://other")["OPTIONS"] == {"using": "other"}

    @pytest.mark.parametrize(
        ("value", "fragment"),
        [
            (None, "environment variable TSLOCK_URL: Set the TSLOCK_URL environment variable; use one of"),
            ("ftp://hunter2@x", "environment variable TSLOCK_URL: unknown lock provider URL scheme 'ftp'"),
        ],
    )
    def test_env_reader_defers_a_bad_url_to_the_checks_and_the_handler(
        self, monkeypatch: pytest.MonkeyPatch, value: str | None, fragment: str
    ) -> None:
        """Raised in a settings module, the error would be a long traceback: the reader
        leaves an entry standing for it, which the checks report (tslock.E008, in
        tests/test_checks.py) and the handler refuses to build."""
        if value is None:
            monkeypatch.delenv("TSLOCK_URL", raising=False)
        else:
            monkeypatch.setenv("TSLOCK_URL", value)
        entry = Env().lock_provider_url("TSLOCK_URL")
        with override_settings(TSLOCK_PROVIDERS={"default": entry}):
            assert provider_settings()["default"] == entry, "a valid TSLOCK_PROVIDERS entry"
            with pytest.raises(InvalidLockProvider) as caught:
                providers["default"]
        assert str(caught.value).startswith(f"TSLOCK_PROVIDERS['default']: {fragment}")
        assert "hunter2" not in str(caught.value) and "hunter2" not in repr(entry)


def test_providers_is_the_handler_whatever_was_imported_first() -> None:
    """``tslock_django.providers`` is both the package of implementations and the
    handler; importing an implementation module first must not change that."""
    import subprocess
    import sys

    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='tests.settings'; django.setup();"
        "import tslock_django.providers.memory;"
        "from tslock_django import providers;"
        "print(type(providers['default']).__name__, 'default' in providers, len(providers.all()))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "DatabaseLockProvider True 1", result.stderr


def test_importing_the_package_stays_light() -> None:
    """Neither httpx nor the models are loaded by ``import tslock_django``."""
    import subprocess
    import sys

    code = (
        "import sys, tslock_django;"
        "print(sorted(m for m in ('httpx', 'django.db.models', 'environ') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
