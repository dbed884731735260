"""The run journal: ``tslock_run`` (one row per run of a job) and ``tslock_job`` (one row
per lock name: its last run, last success, schedule and run counts)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tslock_django", "0005_token_digest"),
    ]

    operations = [
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
                    models.Index(fields=["name", "-started_at", "-id"], name="tslock_run_name_started"),
                    models.Index(fields=["-started_at", "-id"], name="tslock_run_started"),
                ],
            },
        ),
    ]
