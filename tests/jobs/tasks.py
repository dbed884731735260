"""Plain functions under ``@locked_task``, importable by path (pickling, workers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tslock_django import assert_locked, locked_task


@locked_task("1m")
def by_path(path: str) -> str:
    """Appends a line to ``path`` while holding the lock named by its dotted path."""
    assert_locked()
    with open(path, "a") as file:
        file.write("ran\n")
    return "ran"


@locked_task("1m", name="sync-{account_id}-{region}", schedule="1h", grace="10m")
def by_template(account_id: int, region: str = "eu") -> str:
    return f"synced {account_id} in {region}"


def _shard(arguments: Mapping[str, Any]) -> str:
    return f"shard-{arguments['number'] % 4}"


@locked_task("1m", name=_shard)
def by_callable(number: int) -> int:
    return number


@locked_task("1m", name="any-{tenant}")
def by_keywords(**options: Any) -> dict[str, Any]:
    return options


@locked_task("1m", on_locked="raise")
def raising() -> str:
    return "ran"


@locked_task("1m")
def failing() -> None:
    raise RuntimeError("the upstream API said no")


@locked_task("1m", using="broken")
def on_a_broken_store(path: str) -> None:
    with open(path, "a") as file:
        file.write("ran\n")


@locked_task("1m", name="async-{path}")
async def coroutine(path: str, pause: float = 0.0) -> str:
    """``by_path`` as a coroutine function: the lock is held while it awaits."""
    import asyncio

    assert_locked()
    await asyncio.sleep(pause)
    with open(path, "a") as file:
        file.write("ran\n")
    return "ran"


@locked_task("1m", on_locked="raise")
async def coroutine_raising() -> str:
    return "ran"


@locked_task("1m")
async def coroutine_failing() -> None:
    raise RuntimeError("the upstream API said no, asynchronously")
