"""Every statement of the lock protocol, written once per provider from its dialect."""

from __future__ import annotations

from dataclasses import dataclass

from .carried import carried_fencing
from .dialect import Dialect, Upsert
from .tables import FENCE_TABLE, TABLE


@dataclass(frozen=True)
class Statements:
    """Every statement the provider runs, written once per provider: the text depends
    only on the vendor and on whose clock decides. Where "now" is the caller's clock it
    is a parameter, and the parameter lists below follow the placeholders in order."""

    acquire: str
    #: The parameters of ``acquire`` in order, by name (see ``DatabaseLockProvider``).
    acquire_slots: tuple[str, ...]
    #: The conditional ``UPDATE`` that takes an existing, free row (no ``RETURNING``),
    #: and its parameters in order, by name.
    take: str
    take_slots: tuple[str, ...]
    #: ``take``, returning ``taken`` where the server can.
    acquire_update: str
    #: ``take``, its grant carried in the reply's ``LAST_INSERT_ID`` (see ``carried``),
    #: where the dialect can; parameters as ``take``'s.
    take_carried: str | None
    acquire_insert: str
    read_back: str
    read: str
    unlock: str
    unlock_slots: tuple[str, ...]
    #: ``unlock`` for a holding without ``lock_at_least_for`` (the default): its
    #: deadline is "now" itself. Parameters [now, name, token, now].
    release: str
    extend: str
    extend_read_back: str
    force_unlock: str
    columns: str

    @classmethod
    def build(
        cls, dialect: Dialect, use_db_time: bool, *, table: str = TABLE, fence: str = FENCE_TABLE
    ) -> Statements:
        """The statements of ``dialect``; ``table`` and ``fence`` name the two tables
        (schema-qualified where a routine's body is written from these statements)."""
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
        mark = f"(SELECT mark FROM {fence} WHERE id = 1{dialect.share_lock})"
        first_token = f"COALESCE({mark}, 0) + 1"
        fields = "name, lock_until, locked_at, locked_by, token, fencing_token"
        values = f"VALUES (%s, {until}, {now}, %s, %s, {first_token})"
        # The upsert: a new name is inserted; an existing row is taken over only where
        # it has expired by the "now" this statement proposed (its locked_at), and is
        # otherwise written back as it is, so RETURNING always gives the row as it now
        # stands (ours, or the holder's, read under the row lock: never an older
        # version). lock_until is assigned last: MySQL evaluates the assignments in
        # order and would see its new value in the conditions after it.
        current, proposed = dialect.current, dialect.proposed
        expired = f"{current('lock_until')} <= {proposed('locked_at')}"
        takeover = {
            "fencing_token": f"{current('fencing_token')} + 1",
            "locked_at": proposed("locked_at"),
            "locked_by": proposed("locked_by"),
            "token": proposed("token"),
            "lock_until": proposed("lock_until"),
        }
        assignments = ", ".join(
            f"{column} = CASE WHEN {expired} THEN {value} ELSE {current(column)} END"
            for column, value in takeover.items()
        )
        acquire, acquire_slots = dialect.acquire(
            Upsert(
                head=f"INSERT INTO {table}{dialect.upsert_alias} ({fields})",
                table=table,
                values=("%s", until, now, "%s", "%s", first_token),
                conflict=f"{dialect.on_conflict_update} {assignments} RETURNING {columns}",
                now=now,
                columns=columns,
            )
        )

        # Takes the row of a name that exists and is free; a held row stays untouched.
        def taking(fencing: str) -> str:
            return (
                f"UPDATE {table} SET lock_until = {until}, locked_at = {now}, locked_by = %s, token = %s, "
                f"fencing_token = {fencing} WHERE name = %s AND lock_until <= {now}"
            )

        take = taking("fencing_token + 1")
        take_carried = None
        if dialect.carries_take:
            take_carried = taking(carried_fencing("fencing_token", epoch(now) if use_db_time else None))
        insert = f"INSERT INTO {table} ({fields}) {values}"
        if dialect.update_returning:
            insert += " ON CONFLICT (name) DO NOTHING" + returning
        extend = (
            f"UPDATE {table} SET lock_until = {dialect.extend_deadline(until)} "
            f"WHERE name = %s AND token = %s AND lock_until > {now}"
        )
        if dialect.update_returning:
            extend += f" RETURNING {epoch('lock_until')}"
        return cls(
            # [acquire_slots]; returns `columns`
            acquire=acquire,
            acquire_slots=acquire_slots,
            take=take,
            take_slots=("until", "now", "locked_by", "token", "name", "now"),
            acquire_update=take + returning,
            take_carried=take_carried,
            # [name, until, now, locked_by, token]
            acquire_insert=insert,
            # [name, token]: where an UPDATE returns nothing
            read_back=f"SELECT {taken} FROM {table} WHERE name = %s AND token = %s",
            # [name]
            read=f"SELECT {columns} FROM {table} WHERE name = %s",
            unlock_slots=("at_least", "now", "name", "token", "now"),
            unlock=(
                f"UPDATE {table} SET lock_until = {dialect.later(instant, now)}, token = '' "
                f"WHERE name = %s AND token = %s AND lock_until > {now}"
            ),
            release=(
                f"UPDATE {table} SET lock_until = {now}, token = '' "
                f"WHERE name = %s AND token = %s AND lock_until > {now}"
            ),
            # [until, name, token, now]
            extend=extend,
            # [name, token]: SQLite before 3.35
            extend_read_back=f"SELECT {epoch('lock_until')} FROM {table} WHERE name = %s AND token = %s",
            # [now, name, now] + [fencing token or token]
            force_unlock=(
                f"UPDATE {table} SET lock_until = {now}, token = '' WHERE name = %s AND lock_until > {now}"
            ),
            columns=columns,
        )
