"""Store the SHA-256 of each holder's token instead of the token.

From this release the database provider writes ``sha256(token)`` (64 lowercase hex
digits) into ``tslock_lock.token`` and compares digests; the holder keeps the raw token
in its handle. Rows written by an older release still hold a raw token (32 hex digits):
this migration replaces each by its digest, so a holder that was running across the
upgrade can still release or extend with the token it has.

Reversing keeps the digests: an older release would then fail to release or extend the
locks held at that moment (they end at their ``lock_until``), which is safe.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import migrations

#: Length of a hex SHA-256, which no raw token of an older release has.
DIGEST_LENGTH = 64


#: Rows read per step: a table with a million names must not be loaded at once.
BATCH = 1000


def digest_raw_tokens(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("tslock_django", "Lock")
    rows = model.objects.using(schema_editor.connection.alias)
    after = None
    while True:
        # Keyset steps over the primary key; only rows that still hold a token.
        batch = rows.exclude(token="").order_by("name")
        if after is not None:
            batch = batch.filter(name__gt=after)
        found = list(batch.values_list("name", "token")[:BATCH])
        if not found:
            return
        for name, token in found:
            if len(token) == DIGEST_LENGTH:
                continue  # already a digest (a migration replayed on a kept table)
            digest = hashlib.sha256(token.encode()).hexdigest()
            # Conditional on the old value: a lock taken meanwhile is left as its writer wrote it.
            rows.filter(name=name, token=token).update(token=digest)
        after = found[-1][0]


class Migration(migrations.Migration):
    dependencies = [("tslock_django", "0004_fencingmark")]

    operations = [migrations.RunPython(digest_raw_tokens, migrations.RunPython.noop, elidable=False)]
