"""DurableObjectLockProvider.reindex() against answers the real Worker never gives (the
real Worker's rebuild is tested in tests/worker/test_worker_shards.py): a Worker that
keeps answering the same position must not keep the walk going for ever, and a
malformed batch is a LockProviderError, never a crash."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tslock_django.exceptions import LockProviderError
from tslock_django.providers.cloudflare_do import DurableObjectLockProvider

TOKEN = "s3cret-worker-token-0123456789"


def provider(answers: list[dict[str, Any]], seen: list[Any]) -> DurableObjectLockProvider:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=answers[min(len(seen), len(answers)) - 1])

    return DurableObjectLockProvider(
        "edge", url="https://locks.example.com", token=TOKEN, transport=httpx.MockTransport(handle)
    )


def test_the_walk_follows_next_until_null_and_counts() -> None:
    seen: list[Any] = []
    answers = [{"resent": 2, "next": "b"}, {"resent": 2, "next": "d"}, {"resent": 1, "next": None}]
    progress: list[tuple[int, str | None]] = []
    total = provider(answers, seen).reindex(batch_size=2, progress=lambda n, last: progress.append((n, last)))
    assert total == 5
    assert [body["after"] for body in seen] == [None, "b", "d"]
    assert all(body["limit"] == 2 for body in seen)
    assert progress == [(2, "b"), (4, "d"), (5, None)]


def test_a_worker_repeating_its_position_is_refused() -> None:
    seen: list[Any] = []
    with pytest.raises(LockProviderError, match="did not move past the previous batch") as caught:
        provider([{"resent": 1, "next": "a"}], seen).reindex(batch_size=1)
    assert len(seen) == 2
    assert caught.value.alias == "edge"


@pytest.mark.parametrize(
    "answer",
    [{"resent": "1", "next": None}, {"resent": 9, "next": None}, {"resent": 1, "next": 5}, {"next": None}],
)
def test_a_malformed_batch_is_a_provider_error(answer: dict[str, Any]) -> None:
    with pytest.raises(LockProviderError, match="cannot use") as caught:
        provider([answer], []).reindex(batch_size=2)
    assert TOKEN not in str(caught.value)


@pytest.mark.parametrize("size", [0, 501, "25", True])
def test_the_batch_size_is_checked_first(size: Any) -> None:
    seen: list[Any] = []
    with pytest.raises(ValueError, match="from 1 to 500"):
        provider([], seen).reindex(batch_size=size)
    assert seen == []
