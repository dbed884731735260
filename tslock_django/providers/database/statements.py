"""Every statement of the lock protocol, written once per provider from its dialect."""

from __future__ import annotations

from dataclasses import dataclass

from .dialect import Dialect, Proposal
from .tables import FENCE_TABLE, TABLE


@dataclass(frozen=True)
class Statements:
    """Every statement the provider runs, written once per provider: the text depends
    only on the vendor and on whose clock decides. Where "now" is the caller's clock it
    is a parameter; the comments give each statement's parameters in order."""

    #: [name, until, now, locked_by, token] (+ [name, now] where the dialect
    #: ``looks_first``); returns ``columns`` of the row granted (MariaDB: or held).
    acquire: str
    #: ShedLock's steps, where acquire cannot be one statement: take an existing free
    #: row [until, now, locked_by, token, name, now], insert a new name [as acquire],
    #: read back what was written [name, token], read the holder [name].
    take: str
    insert: str
    read_back: str
    read: str
    #: [at_least, now, name, token, now]
    unlock: str
    #: ``unlock`` for a holding without ``lock_at_least_for`` (the default): its
    #: deadline is "now" itself. [now, name, token, now]
    release: str
    #: [until, name, token, now]
    extend: str
    #: [name, token]: where an UPDATE returns nothing and extend sets no LAST_INSERT_ID.
    extend_read_back: str
    #: [now, name, now] + [fencing token or token]
    force_unlock: str
    columns: str

    @classmethod
    def build(cls, dialect: Dialect, use_db_time: bool) -> Statements:
        epoch = dialect.epoch_us
        now = dialect.now() if use_db_time else dialect.instant()
        until = dialect.plus(dialect.now()) if use_db_time else dialect.instant()
        instant = dialect.instant()
        columns = f"name, {epoch('lock_until')}, {epoch('locked_at')}, locked_by, token, fencing_token"
        taken = f"{epoch('locked_at')}, {epoch('lock_until')}, fencing_token"
        returning = f" RETURNING {taken}" if dialect.update_returning else ""
        # A name new to the table starts above every fencing token purge() deleted. The
        # mark must be the one a concurrent purge commits, not an older one in this
        # statement's snapshot: on MySQL the read takes a shared lock, which waits for
        # the purge that holds the mark's row from before it deletes a row until it
        # commits the raised mark; PostgreSQL's acquire waits for the purge's table
        # lock before taking its snapshot (PostgreSQL.purge_lock); SQLite has one
        # writer at a time. No row (a `manage.py flush` empties both tables) means
        # nothing was purged since.
        mark = f"(SELECT mark FROM {FENCE_TABLE} WHERE id = 1{dialect.share_lock})"
        fields = "name, lock_until, locked_at, locked_by, token, fencing_token"
        values = f"%s, {until}, {now}, %s, %s, COALESCE({mark}, 0) + 1"
        insert = f"INSERT INTO {TABLE} ({fields}) VALUES ({values})"
        if dialect.update_returning:
            insert += " ON CONFLICT (name) DO NOTHING" + returning
        extend = (
            f"UPDATE {TABLE} SET lock_until = {dialect.extend_deadline(until)} "
            f"WHERE name = %s AND token = %s AND lock_until > {now}"
        )
        if dialect.update_returning:
            extend += f" RETURNING {epoch('lock_until')}"
        proposal = Proposal(table=TABLE, fields=fields, values=values, columns=columns, now=now)
        return cls(
            acquire=dialect.acquire(proposal),
            take=(
                f"UPDATE {TABLE} SET lock_until = {until}, locked_at = {now}, locked_by = %s, token = %s, "
                f"fencing_token = fencing_token + 1 WHERE name = %s AND lock_until <= {now}{returning}"
            ),
            insert=insert,
            read_back=f"SELECT {taken} FROM {TABLE} WHERE name = %s AND token = %s",
            read=f"SELECT {columns} FROM {TABLE} WHERE name = %s",
            unlock=(
                f"UPDATE {TABLE} SET lock_until = {dialect.later(instant, now)}, token = '' "
                f"WHERE name = %s AND token = %s AND lock_until > {now}"
            ),
            release=(
                f"UPDATE {TABLE} SET lock_until = {now}, token = '' "
                f"WHERE name = %s AND token = %s AND lock_until > {now}"
            ),
            extend=extend,
            extend_read_back=f"SELECT {epoch('lock_until')} FROM {TABLE} WHERE name = %s AND token = %s",
            force_unlock=(
                f"UPDATE {TABLE} SET lock_until = {now}, token = '' WHERE name = %s AND lock_until > {now}"
            ),
            columns=columns,
        )
