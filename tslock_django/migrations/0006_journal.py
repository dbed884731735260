"""The run journal: ``tslock_run`` (one row per run of a job) and ``tslock_job`` (one row
per lock name: its last run, last success, schedule and run counts)."""

from typing import Any

from django.db import migrations, models


def create_the_journal(apps: Any, schema_editor: Any) -> None:
    """The two tables, where they are missing. They may be there already: the recovery
    that check tslock.E007 advises for a dropped tslock_lock replays every migration of
    the app, and the journal (which it did not drop) must survive it whole."""
    existing = schema_editor.connection.introspection.table_names()
    created = []
    for model_name in ("Job", "Run"):
        model = apps.get_model("tslock_django", model_name)
        if model._meta.db_table not in existing:
            schema_editor.create_model(model)
            created.append(model._meta.db_table)
    # Only the tables made here: a table that was there has its names set already, and
    # 0009 may have widened them since (setting 255 again would fail on a long name).
    exact_names(schema_editor, created)


def drop_the_journal(apps: Any, schema_editor: Any) -> None:
    existing = schema_editor.connection.introspection.table_names()
    for model_name in ("Run", "Job"):
        model = apps.get_model("tslock_django", model_name)
        if model._meta.db_table in existing:
            schema_editor.delete_model(model)


def exact_names(schema_editor: Any, tables: Any = ("tslock_job", "tslock_run")) -> None:
    """Job names compare as the lock names do (0001, 0002): byte for byte. MySQL and
    MariaDB would otherwise make "Report" and "report " one job; PostgreSQL would sort
    the Runs page by a locale instead of code points."""
    connection = schema_editor.connection
    for table in tables:
        if connection.vendor == "mysql":
            collation = "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"
            schema_editor.execute(
                f"ALTER TABLE {table} MODIFY name VARCHAR(255) "
                f"CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
            )
        elif connection.vendor == "postgresql":
            schema_editor.execute(f'ALTER TABLE {table} ALTER COLUMN name TYPE varchar(255) COLLATE "C"')


class Migration(migrations.Migration):
    dependencies = [
        ("tslock_django", "0005_token_digest"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Job",
                    fields=[
                        ("name", models.CharField(max_length=255, primary_key=True, serialize=False)),
                        ("provider", models.CharField(blank=True, max_length=100)),
                        ("first_seen_at", models.DateTimeField()),
                        ("schedule", models.CharField(blank=True, max_length=100)),
                        ("grace", models.FloatField(blank=True, null=True)),
                        ("last_run_id", models.BigIntegerField(blank=True, null=True)),
                        ("last_outcome", models.CharField(blank=True, max_length=16)),
                        ("last_started_at", models.DateTimeField(blank=True, null=True)),
                        ("last_finished_at", models.DateTimeField(blank=True, null=True)),
                        ("last_duration", models.FloatField(blank=True, null=True)),
                        ("last_deadline", models.DateTimeField(blank=True, null=True)),
                        ("last_detail", models.TextField(blank=True)),
                        ("last_success_at", models.DateTimeField(blank=True, null=True)),
                        ("last_success_run_id", models.BigIntegerField(blank=True, null=True)),
                        ("last_success_duration", models.FloatField(blank=True, null=True)),
                        ("last_attempt_at", models.DateTimeField(blank=True, null=True)),
                        ("last_attempt_outcome", models.CharField(blank=True, max_length=16)),
                        ("runs_succeeded", models.BigIntegerField(default=0)),
                        ("runs_failed", models.BigIntegerField(default=0)),
                        ("runs_skipped", models.BigIntegerField(default=0)),
                        ("runs_error", models.BigIntegerField(default=0)),
                        ("runs_lost", models.BigIntegerField(default=0)),
                    ],
                    options={
                        "verbose_name": "job",
                        "verbose_name_plural": "runs",
                        "db_table": "tslock_job",
                        "default_permissions": ("view",),
                    },
                ),
                migrations.CreateModel(
                    name="Run",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=255)),
                        ("provider", models.CharField(max_length=100)),
                        (
                            "outcome",
                            models.CharField(
                                choices=[
                                    ("running", "running"),
                                    ("succeeded", "succeeded"),
                                    ("failed", "failed"),
                                    ("skipped", "skipped"),
                                    ("error", "error"),
                                    ("lost", "lost"),
                                ],
                                max_length=16,
                            ),
                        ),
                        ("started_at", models.DateTimeField()),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("duration", models.FloatField(blank=True, null=True)),
                        ("host", models.CharField(blank=True, max_length=255)),
                        ("pid", models.IntegerField(blank=True, null=True)),
                        ("locked_by", models.CharField(blank=True, max_length=255)),
                        ("fencing_token", models.BigIntegerField(blank=True, null=True)),
                        ("held_by", models.CharField(blank=True, max_length=255)),
                        ("detail", models.TextField(blank=True)),
                        ("deadline", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "verbose_name": "run",
                        "verbose_name_plural": "runs",
                        "db_table": "tslock_run",
                        "default_permissions": (),
                        "indexes": [
                            models.Index(
                                fields=["name", "-started_at", "-id"], name="tslock_run_name_started"
                            ),
                            models.Index(fields=["-started_at", "-id"], name="tslock_run_started"),
                        ],
                    },
                ),
            ]
        ),
        migrations.RunPython(create_the_journal, drop_the_journal, atomic=False, elidable=False),
    ]
