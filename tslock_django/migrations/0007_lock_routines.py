"""Server-side routines for acquire and unlock, where the vendor's module writes some
(``Dialect.create_routines``): on PostgreSQL the PL/pgSQL functions ``tslock_acquire``
and ``tslock_unlock`` in the lock table's schema.

Sent as plain SQL, acquire's upsert is parsed and planned on every call; a PL/pgSQL
function keeps its statements' plans for the session, and the provider sends one short
``SELECT`` of the function instead. Nothing here is a named client-side statement, so a
transaction-pooling PgBouncer can hand the session to any client. The provider uses the
plain statements (with a warning) until this migration has run.

Replayed (the recovery check tslock.E007 advises), it replaces the functions; reversed,
it drops them, and the provider goes back to the plain statements.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from tslock_django.providers.database import routines

    routines.install(schema_editor)


def remove(apps: Any, schema_editor: Any) -> None:
    from tslock_django.providers.database import routines

    routines.remove(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("tslock_django", "0006_journal")]

    operations = [migrations.RunPython(install, remove, elidable=False)]
