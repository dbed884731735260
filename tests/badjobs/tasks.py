"""Tasks as Celery's autodiscovery finds them: the second one has a bad grace."""

from __future__ import annotations

from tslock_django import locked_task


@locked_task("10m", schedule="1h")
def sync_prices() -> None:
    """Good arguments."""


class Reports:
    @staticmethod
    @locked_task(
        "10m",
        schedule="1h",
        grace="soon",
    )
    def nightly() -> None:
        """grace is not a duration."""
