from typing import Any

from django.db import migrations, models


def exact_names_on_mysql(apps: Any, schema_editor: Any) -> None:
    """MySQL and MariaDB compare text case-insensitively and ignore trailing spaces by
    default, which would make "Report" and "report " one lock. A binary no-pad collation
    makes the primary key compare names exactly, as PostgreSQL and SQLite already do."""
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    collation = "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"
    schema_editor.execute(
        f"ALTER TABLE tslock_lock MODIFY name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
    )


class Migration(migrations.Migration):
    initial = True

    dependencies: list[tuple[str, str]] = []  # type: ignore[misc]

    operations = [
        migrations.CreateModel(
            name="Lock",
            fields=[
                ("name", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("lock_until", models.DateTimeField()),
                ("locked_at", models.DateTimeField()),
                ("locked_by", models.CharField(max_length=255)),
                ("token", models.CharField(blank=True, max_length=64)),
                ("fencing_token", models.BigIntegerField(default=0)),
            ],
            options={
                "verbose_name": "lock",
                "verbose_name_plural": "locks",
                "db_table": "tslock_lock",
                "permissions": [("release_lock", "Can force-release a lock")],
            },
        ),
        migrations.RunPython(exact_names_on_mysql, migrations.RunPython.noop, atomic=False, elidable=False),
    ]
