from typing import Any

from django.db import migrations


def code_point_names_on_postgresql(apps: Any, schema_editor: Any) -> None:
    """Names sort in Unicode code point order in every store (listings page by name).
    PostgreSQL sorts text by the database's collation, which is often a locale such as
    en_US.UTF-8 where "a_b", "aB" and "a-b" come in another order and punctuation is
    nearly ignored; the "C" collation compares UTF-8 bytes, which is code point order.
    (0001 gave MySQL and MariaDB a binary collation; SQLite compares bytes already.)

    With "C", the primary key's index also serves prefix ranges, so the extra
    ``varchar_pattern_ops`` index Django adds for LIKE on a varchar key only costs
    writes: it is dropped."""
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    schema_editor.execute('ALTER TABLE tslock_lock ALTER COLUMN name TYPE varchar(255) COLLATE "C"')
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = 'tslock_lock' AND indexdef LIKE '%%varchar_pattern_ops%%'"
        )
        redundant = [row[0] for row in cursor.fetchall()]
    for index in redundant:
        schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(index)}")


def database_collation_on_postgresql(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    schema_editor.execute('ALTER TABLE tslock_lock ALTER COLUMN name TYPE varchar(255) COLLATE "default"')
    schema_editor.execute("CREATE INDEX tslock_lock_name_like ON tslock_lock (name varchar_pattern_ops)")


class Migration(migrations.Migration):
    dependencies = [("tslock_django", "0001_initial")]

    operations = [
        migrations.RunPython(
            code_point_names_on_postgresql, database_collation_on_postgresql, elidable=False
        ),
    ]
