"""Fixtures for the admin tests: users with exactly the permissions a test needs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse


@pytest.fixture
def locks_url() -> str:
    return reverse("admin:tslock_django_lock_changelist")


@pytest.fixture
def release_url() -> str:
    return reverse("admin:tslock_django_lock_release")


@pytest.fixture
def history_url() -> str:
    return reverse("admin:tslock_django_lock_history")


@pytest.fixture
def make_client(django_user_model: Any) -> Callable[..., Client]:
    """``make_client("view_lock", "release_lock", staff=True)``: a logged-in client."""

    def make(*codenames: str, staff: bool = True, superuser: bool = False, **client_kwargs: Any) -> Client:
        user = django_user_model.objects.create_user(
            username=f"user{django_user_model.objects.count()}",
            password="pw-for-tests",
            is_staff=staff,
            is_superuser=superuser,
        )
        for codename in codenames:
            user.user_permissions.add(
                Permission.objects.get(codename=codename, content_type__app_label="tslock_django")
            )
        client = Client(**client_kwargs)
        client.force_login(user)
        return client

    return make


@pytest.fixture
def viewer(make_client: Callable[..., Client]) -> Client:
    return make_client("view_lock")


@pytest.fixture
def releaser(make_client: Callable[..., Client]) -> Client:
    return make_client("view_lock", "release_lock")
