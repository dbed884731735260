"""The journal's scrubber: every secret the settings configure, and every value that
looks like a secret, masked; the exception's class and the rest of the text kept."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tslock_django.core.scrubbing import MIN_SECRET_CHARS, configured_secrets, hide_secrets

# (text, what it shows after scrubbing, the secret that must be gone)
SECRET_LOOKING = [
    (
        "OperationalError: connection to postgres://app:Pg-pass-4417@db.internal:5432/app failed",
        "OperationalError: connection to postgres://app:***@db.internal:5432/app failed",
        "Pg-pass-4417",
    ),
    ("redis://:r3d/is@pw@cache:6379/0 refused", "redis://:***@cache:6379/0 refused", "r3d/is@pw"),
    (
        "HTTP 401; sent Authorization: Bearer eyJhbGciOi.J9x.sig back",
        "HTTP 401; sent Authorization: Bearer *** back",
        "eyJhbGciOi",
    ),
    (
        "headers {'Authorization': 'Basic dXNlcjpwYXNzd29yZA==', 'Accept': 'json'}",
        "headers {'Authorization': 'Basic ***', 'Accept': 'json'}",
        "dXNlcjpwYXNzd29yZA",
    ),
    ('{"authorization": "Token 9f8e7d6c5b4a"}', '{"authorization": "Token ***"}', "9f8e7d6c5b4a"),
    ("the proxy echoed Bearer abc123DEF456ghi", "the proxy echoed Bearer ***", "abc123DEF456ghi"),
    ("dsn host=db password=hunter2-pw user=app", "dsn host=db password=*** user=app", "hunter2-pw"),
    ("PASSWD: hunter2-pw; retry", "PASSWD: ***; retry", "hunter2-pw"),
    ('{"api_key": "k-123456", "user": "app"}', '{"api_key": "***", "user": "app"}', "k-123456"),
    ("GET /x?apikey=AKIA1234&region=eu", "GET /x?apikey=***&region=eu", "AKIA1234"),
    ("oauth access_token=t0k3n-value expired", "oauth access_token=*** expired", "t0k3n-value"),
    ("client_secret = s3cr3t-v4lue next", "client_secret = *** next", "s3cr3t-v4lue"),
    ("{'token': 'it\\'s-a-token'}", "{'token': '***'}", "a-token"),
    ('{\\"password\\": \\"inner-pw\\"}', '{\\"password\\": \\"***\\"}', "inner-pw"),
]


@pytest.mark.parametrize(("text", "shown", "secret"), SECRET_LOOKING)
def test_values_that_look_like_secrets_are_masked_and_the_rest_is_kept(
    text: str, shown: str, secret: str
) -> None:
    assert hide_secrets(text) == shown
    assert secret not in hide_secrets(text)


def test_prose_and_fencing_tokens_are_not_taken_for_secrets() -> None:
    text = "ValueError: Basic authentication failed for user app; fencing_token=42; 3 tokens left"
    assert hide_secrets(text) == text


def test_every_secret_the_settings_configure_is_masked_wherever_it_appears() -> None:
    edge = {
        "BACKEND": "tslock_django.providers.cloudflare_do.DurableObjectLockProvider",
        "OPTIONS": {"url": "https://locks.example", "token": "edge-token-5150", "key_prefix": "tslock:"},
    }
    cache = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://:cache-pw-8080@h:6379",
    }
    with override_settings(
        TSLOCK_PROVIDERS={
            "default": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
            "edge": edge,
        },
        CACHES={"default": cache},
        SECRET_KEY="django-secret-key-of-this-test",
    ):
        found = set(configured_secrets())
        assert {"edge-token-5150", "cache-pw-8080", "django-secret-key-of-this-test"} <= found
        # DATABASES["unreachable"]["PASSWORD"] in tests/settings.py
        assert "unreachable-db-password" in found
        assert "tslock:" not in found, "a key prefix is no secret"
        text = (
            "RuntimeError: edge-token-5150 / cache-pw-8080 / django-secret-key-of-this-test"
            ' / unreachable-db-password / {"t": "edge-token-5150"} / tslock: kept'
        )
        assert hide_secrets(text) == 'RuntimeError: *** / *** / *** / *** / {"t": "***"} / tslock: kept'
    # The settings changed back: the secret of the test's settings is no longer one.
    assert hide_secrets("edge-token-5150") == "edge-token-5150"


def test_a_configured_secret_shorter_than_the_minimum_is_not_masked_in_free_text() -> None:
    short = "x" * (MIN_SECRET_CHARS - 1)
    with override_settings(SECRET_KEY=short):
        assert short not in configured_secrets()
        assert hide_secrets(f"job {short} done") == f"job {short} done"
        # A pattern still finds it where it is said to be a password.
        assert hide_secrets(f"password={short}") == "password=***"


def test_an_empty_secret_key_is_nothing_to_hide_not_an_error() -> None:
    # Django refuses to read an empty SECRET_KEY; a job that fails must still be described.
    with override_settings(SECRET_KEY=""):
        assert hide_secrets("ValueError: password=abc123") == "ValueError: password=***"


class DeclaresItsSecret:
    """A third-party provider whose secret option has a name no pattern knows."""

    secret_options = frozenset({"dsn"})


def test_an_option_a_provider_declares_secret_is_masked_whatever_its_name() -> None:
    backend = f"{__name__}.{DeclaresItsSecret.__qualname__}"
    third = {"BACKEND": backend, "OPTIONS": {"dsn": "opaque-blob-7781"}}
    with override_settings(TSLOCK_PROVIDERS={"third": third}):
        assert "opaque-blob-7781" in configured_secrets()
        assert hide_secrets("could not use opaque-blob-7781") == "could not use ***"
