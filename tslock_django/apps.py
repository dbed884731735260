from django.apps import AppConfig


class TslockConfig(AppConfig):
    name = "tslock_django"
    verbose_name = "Locks (tslock)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .alerts.after_run import after_run
        from .signals import run_journaled

        # The alerts evaluate a job's status at the end of each of its journaled runs.
        run_journaled.connect(after_run, dispatch_uid="tslock_alerts_after_run")
