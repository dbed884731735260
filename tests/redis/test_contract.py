"""The provider contract (query cases included) on the machine's Redis: through a URL,
and through the connection of a Django cache (Django's RedisCache and django-redis)."""

from __future__ import annotations

from typing import Any

import pytest

from tslock_django.providers.redis import RedisLockProvider
from tslock_django.testing import StrongProviderContract

from .conftest import LOCAL_URL, MakeProvider, require_local_redis


class TestRedisContract(StrongProviderContract):
    @pytest.fixture
    def provider(self, make_provider: MakeProvider) -> RedisLockProvider:
        return make_provider()  # type: ignore[no-any-return]


def cache_settings(backend: str) -> dict[str, Any]:
    return {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "shared": {"BACKEND": backend, "LOCATION": LOCAL_URL},
    }


class TestRedisThroughDjangoCacheContract(StrongProviderContract):
    backend = "django.core.cache.backends.redis.RedisCache"

    @pytest.fixture
    def provider(self, make_provider: MakeProvider, settings: Any) -> RedisLockProvider:
        require_local_redis()
        settings.CACHES = cache_settings(self.backend)
        return make_provider(cache="shared")  # type: ignore[no-any-return]


class TestRedisThroughDjangoRedisContract(TestRedisThroughDjangoCacheContract):
    backend = "django_redis.cache.RedisCache"
