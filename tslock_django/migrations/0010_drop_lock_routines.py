"""Drop the PL/pgSQL functions ``tslock_acquire`` and ``tslock_unlock`` that migration
0007 used to create on PostgreSQL: acquire and unlock are plain statements now (see
``docs/explanation/database.md``). The functions lived in the schema of the lock table;
where they are not there, this changes nothing. Reversed, it creates nothing: no
version of the provider that runs with this migration's predecessors needs them (one
that found them missing used the plain statements).

The SQL is written here, not taken from the package: a migration must mean the same
whatever the code beside it becomes.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

#: The schema of the lock table, quoted: where 0007 created the functions.
SCHEMA = (
    "SELECT quote_ident(n.nspname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.oid = 'tslock_lock'::regclass"
)
DROP = (
    "DROP FUNCTION IF EXISTS {schema}.tslock_acquire(varchar, bigint, varchar, varchar)",
    "DROP FUNCTION IF EXISTS {schema}.tslock_unlock(varchar, varchar, bigint)",
)


def drop(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(SCHEMA)
        schema = cursor.fetchone()[0]
    for sql in DROP:
        schema_editor.execute(sql.format(schema=schema), params=None)


class Migration(migrations.Migration):
    dependencies = [("tslock_django", "0009_journal_long_names")]

    operations = [migrations.RunPython(drop, migrations.RunPython.noop, elidable=False)]
