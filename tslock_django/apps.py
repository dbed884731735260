from typing import Any

from django.apps import AppConfig
from django.conf import settings


class TslockConfig(AppConfig):
    name = "tslock_django"
    verbose_name = "Locks (tslock)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .signals import run_journaled

        # The alerts evaluate a job's status at the end of each of its journaled runs.
        run_journaled.connect(_after_run, dispatch_uid="tslock_alerts_after_run")


def _after_run(**kwargs: Any) -> None:
    """Hand a run's end to the alerts, loading them only where ``TSLOCK_ALERTS`` is set
    (every command's start would otherwise pay for importing them)."""
    if getattr(settings, "TSLOCK_ALERTS", None):
        from .alerts.after_run import after_run

        after_run(**kwargs)
