"""The journal's ``name`` columns widen from 255 to 750 characters
(``journal.models.NAME_LENGTH``): Workers KV, Durable Objects and Redis accept names
longer than 255, and a run of such a name was never journaled (its job stayed ``new``
and never alerted).

The database side keeps the exact, byte-order comparison 0006 gave the columns. SQLite
does not enforce a ``varchar``'s length, so it has nothing to change. Going back, a name
longer than 255 characters is first rewritten to its 255-character stand-in
(``journal_name(name, 255)``), so the narrower column takes every row. Replayed (the
recovery check tslock.E007 advises), the widening changes nothing."""

import hashlib
from typing import Any

from django.db import migrations, models
from django.db.models.functions import Length

WIDE = 750
NARROW = 255


def widen(apps: Any, schema_editor: Any) -> None:
    _resize(schema_editor, WIDE)


def journal_name(name: str, length: int) -> str:
    """``journal.models.journal_name`` as it was when this migration was written (a
    migration must mean the same whatever the package beside it becomes): the name, or
    its beginning, "…" and its SHA-256 in hex, ``length`` characters in all."""
    if len(name) <= length:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{name[: length - len(digest) - 1]}\u2026{digest}"


def narrow(apps: Any, schema_editor: Any) -> None:
    for model_name in ("Job", "Run"):
        model = apps.get_model("tslock_django", model_name)
        rows = model.objects.using(schema_editor.connection.alias)
        # Only rows of names too long for the narrow column: none unless such a
        # name ran, so this reads nothing on most journals.
        long_names = rows.annotate(length=Length("name")).filter(length__gt=NARROW)
        for name in long_names.values_list("name", flat=True).distinct():
            rows.filter(name=name).update(name=journal_name(name, NARROW))
    _resize(schema_editor, NARROW)


def _resize(schema_editor: Any, length: int) -> None:
    connection = schema_editor.connection
    for table in ("tslock_job", "tslock_run"):
        if connection.vendor == "mysql":
            collation = "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"
            schema_editor.execute(
                f"ALTER TABLE {table} MODIFY name VARCHAR({length}) "
                f"CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
            )
        elif connection.vendor == "postgresql":
            schema_editor.execute(f'ALTER TABLE {table} ALTER COLUMN name TYPE varchar({length}) COLLATE "C"')


class Migration(migrations.Migration):
    dependencies = [("tslock_django", "0008_run_name_outcome")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="name",
                    field=models.CharField(max_length=WIDE, primary_key=True, serialize=False),
                ),
                migrations.AlterField(model_name="run", name="name", field=models.CharField(max_length=WIDE)),
            ],
            database_operations=[migrations.RunPython(widen, narrow, elidable=False)],
        )
    ]
