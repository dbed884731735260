"""Once: server-side routines for acquire and unlock (the PL/pgSQL functions
``tslock_acquire`` and ``tslock_unlock`` on PostgreSQL).

Acquire is now one plain statement on every database, and migration 0010 drops the
functions from databases where this migration created them. On a database migrated
afresh it creates nothing; it stays so that the graph of applied migrations is the same
everywhere.
"""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tslock_django", "0006_journal")]

    operations = [migrations.RunPython(migrations.RunPython.noop, migrations.RunPython.noop, elidable=False)]
