from django.apps import AppConfig


class TslockConfig(AppConfig):
    name = "tslock_django"
    verbose_name = "Locks (tslock)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
