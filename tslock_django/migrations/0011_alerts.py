"""The alerts' state (v4): a job's thresholds, its pause and the status last announced, on
``Job``; and ``Notification``, one row per change of a job's status until every channel has
it.

Like 0006, it makes only what is missing: the recovery that check tslock.E007 advises for
a dropped ``tslock_lock`` replays every migration of the app, and the journal's tables
(which it did not drop) are there already, with these columns.
"""

from typing import Any

from django.db import migrations, models

#: The columns this migration gives ``Job``.
JOB_FIELDS = (
    "failures_before_alert",
    "max_duration",
    "notified_at",
    "notified_status",
    "paused_at",
    "resumed_at",
)


def add_what_is_missing(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    job = apps.get_model("tslock_django", "Job")
    for name in JOB_FIELDS:
        field = job._meta.get_field(name)
        # Read again each time: on SQLite adding one column remakes the table from the
        # model, which brings every column of this migration at once.
        if field.column not in _columns(connection):
            schema_editor.add_field(job, field)
    if "tslock_notification" not in connection.introspection.table_names():
        schema_editor.create_model(apps.get_model("tslock_django", "Notification"))
        exact_names(schema_editor)


def exact_names(schema_editor: Any) -> None:
    """Names compare byte for byte, as the lock and journal names do (0006, 0009): MySQL
    and MariaDB would otherwise take "Report" and "report " for one job's notifications."""
    connection = schema_editor.connection
    if connection.vendor == "mysql":
        collation = "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"
        schema_editor.execute(
            "ALTER TABLE tslock_notification MODIFY name VARCHAR(750) "
            f"CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
        )
    elif connection.vendor == "postgresql":
        schema_editor.execute(
            'ALTER TABLE tslock_notification ALTER COLUMN name TYPE varchar(750) COLLATE "C"'
        )


def _columns(connection: Any) -> set[str]:
    with connection.cursor() as cursor:
        return {
            column.name for column in connection.introspection.get_table_description(cursor, "tslock_job")
        }


def remove_what_is_there(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if "tslock_notification" in connection.introspection.table_names():
        schema_editor.delete_model(apps.get_model("tslock_django", "Notification"))
    job = apps.get_model("tslock_django", "Job")
    for name in JOB_FIELDS:
        field = job._meta.get_field(name)
        if field.column in _columns(connection):
            schema_editor.remove_field(job, field)


class Migration(migrations.Migration):
    dependencies = [
        ("tslock_django", "0010_drop_lock_routines"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="job",
                    name="failures_before_alert",
                    field=models.PositiveIntegerField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="job",
                    name="max_duration",
                    field=models.FloatField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="job",
                    name="notified_at",
                    field=models.DateTimeField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="job",
                    name="notified_status",
                    field=models.CharField(blank=True, max_length=16),
                ),
                migrations.AddField(
                    model_name="job",
                    name="paused_at",
                    field=models.DateTimeField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="job",
                    name="resumed_at",
                    field=models.DateTimeField(blank=True, null=True),
                ),
                migrations.CreateModel(
                    name="Notification",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=750)),
                        ("status", models.CharField(max_length=16)),
                        ("previous", models.CharField(max_length=16)),
                        ("reason", models.TextField(blank=True)),
                        ("at", models.DateTimeField()),
                        ("last_started_at", models.DateTimeField(blank=True, null=True)),
                        ("last_success_at", models.DateTimeField(blank=True, null=True)),
                        ("delivered", models.JSONField(blank=True, default=list)),
                        ("sent_at", models.DateTimeField(blank=True, null=True)),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("last_error", models.TextField(blank=True)),
                    ],
                    options={
                        "verbose_name": "notification",
                        "verbose_name_plural": "notifications",
                        "db_table": "tslock_notification",
                        "default_permissions": (),
                        "indexes": [
                            models.Index(fields=["name", "-id"], name="tslock_notice_name"),
                            models.Index(fields=["sent_at", "id"], name="tslock_notice_unsent"),
                        ],
                    },
                ),
            ]
        ),
        migrations.RunPython(add_what_is_missing, remove_what_is_there, atomic=False, elidable=False),
    ]
