// LockIndex: one shard of the index; the current locks of the names it owns, for listing.
//
// Every lock object reports to the shard that owns its name through update(), and
// query() answers one sorted page of this shard's rows (at most limit + 1, read along
// an index), which listing.js merges with the other shards' pages by (key, name).
// Reconciliation, run from the alarm, lives in repair.js.

import { DurableObject } from "cloudflare:workers";

import { ORDER_COLUMNS } from "./listing.js";
import { RECONCILE_AFTER_MS, RECONCILE_EVERY_MS, ensureReconciliation, reconcileRound } from "./repair.js";

// Tombstones (names whose lock ended) keep their version this long so that a report
// delayed in flight cannot bring a finished lock back; then they are pruned.
const TOMBSTONE_KEEP_MS = 10 * 60 * 1000;
const PRUNE_BATCH = 500;

// What the table needs beyond the first release's shape, and how to fill it from the
// record JSON that release stored (an index upgrades itself when it starts).
const ADDED_COLUMNS = {
  locked_at_ms: "coalesce(json_extract(record, '$.locked_at_ms'), 0)",
  released: "coalesce(json_extract(record, '$.released'), 0)",
};

export class LockIndex extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    ctx.storage.transactionSync(() => this.migrate());
    this.lastPrune = 0;
    // Whether this object's lifetime has made sure a reconciliation alarm is pending.
    this.reconcileArmed = false;
  }

  // The timings of reconciliation (see RECONCILE_*); a test fixture shortens them.
  static reconcileAfterMs = RECONCILE_AFTER_MS;
  static reconcileEveryMs = RECONCILE_EVERY_MS;

  // One row per name that had a lock recently. A live row holds the record as JSON plus
  // the columns queries filter and sort on. A row whose lock ended is a tombstone
  // (record NULL, lock_until_ms 0): its version is kept for a while so that an older
  // report arriving late is recognised and ignored.
  migrate() {
    this.sql.exec(`CREATE TABLE IF NOT EXISTS locks (
      name TEXT PRIMARY KEY,
      version INTEGER NOT NULL,
      lock_until_ms INTEGER NOT NULL,
      record TEXT,
      updated_ms INTEGER NOT NULL,
      locked_at_ms INTEGER NOT NULL DEFAULT 0,
      released INTEGER NOT NULL DEFAULT 0
    )`);
    const present = new Set(this.sql.exec("PRAGMA table_info(locks)").toArray().map((c) => c.name));
    const missing = Object.keys(ADDED_COLUMNS).filter((column) => !present.has(column));
    if (missing.length) {
      for (const column of missing) {
        this.sql.exec(`ALTER TABLE locks ADD COLUMN ${column} INTEGER NOT NULL DEFAULT 0`);
      }
      const fill = missing.map((column) => `${column} = ${ADDED_COLUMNS[column]}`).join(", ");
      this.sql.exec(`UPDATE locks SET ${fill} WHERE record IS NOT NULL AND json_valid(record)`);
      // The first release left lock_until_ms in place when it pruned a row to a tombstone.
      this.sql.exec("UPDATE locks SET lock_until_ms = 0 WHERE record IS NULL");
    }
    this.sql.exec("CREATE INDEX IF NOT EXISTS locks_by_lock_until ON locks (lock_until_ms, name)");
    this.sql.exec("CREATE INDEX IF NOT EXISTS locks_by_locked_at ON locks (locked_at_ms, name)");
    // Pruning finds old tombstones through this (only tombstones are in it), and
    // reconciliation the live entries that have gone longest without a report.
    this.sql.exec("CREATE INDEX IF NOT EXISTS locks_tombstones ON locks (updated_ms) WHERE record IS NULL");
    this.sql.exec("CREATE INDEX IF NOT EXISTS locks_unconfirmed ON locks (updated_ms) WHERE record IS NOT NULL");
  }

  // One statement, so the lock path pays for one write whatever the listing needs. A
  // report of the version already stored is a confirmation (reconciliation, a rebuild):
  // it rewrites the same record and marks the entry as confirmed now.
  async update(name, version, record) {
    const now = Date.now();
    const live = record !== null && record.lock_until_ms > now;
    this.sql.exec(
      `INSERT INTO locks (name, version, lock_until_ms, locked_at_ms, released, record, updated_ms)
       VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (name) DO UPDATE SET version = excluded.version,
         lock_until_ms = excluded.lock_until_ms, locked_at_ms = excluded.locked_at_ms,
         released = excluded.released, record = excluded.record, updated_ms = excluded.updated_ms
       WHERE excluded.version >= locks.version`,
      name,
      version,
      live ? record.lock_until_ms : 0,
      live ? record.locked_at_ms : 0,
      live && record.released ? 1 : 0,
      live ? JSON.stringify(record) : null,
      now,
    );
    this.prune(now);
    if (!this.reconcileArmed) await ensureReconciliation(this, now);
    return true;
  }

  // One reconciliation round (repair.js): the alarm a shard keeps pending.
  async alarm() {
    await reconcileRound(this);
  }

  // Up to `limit` names after `after` (code point order) with a record, for the rebuild.
  async names(after, limit) {
    const rows = after === null
      ? this.sql.exec("SELECT name FROM locks WHERE record IS NOT NULL ORDER BY name LIMIT ?", limit)
      : this.sql.exec("SELECT name FROM locks WHERE name > ? AND record IS NOT NULL ORDER BY name LIMIT ?", after, limit);
    return rows.toArray().map((row) => row.name);
  }

  // Ended locks become tombstones; old tombstones go. At most once a minute and at most
  // PRUNE_BATCH rows per statement, each a range of an index (lock_until: ended rows sit
  // between 0 and now; the partial tombstone index by updated_ms). A full batch means
  // more is left: the next request prunes again instead of waiting a minute.
  prune(now) {
    if (now - this.lastPrune < 60_000) return;
    let full = false;
    for (const { sql, args } of LockIndex.pruneStatements(now)) {
      full = this.sql.exec(sql, ...args).rowsWritten >= PRUNE_BATCH || full;
    }
    if (!full) this.lastPrune = now;
  }

  static pruneStatements(now) {
    return [
      {
        sql: `UPDATE locks SET record = NULL, lock_until_ms = 0, locked_at_ms = 0, released = 0, updated_ms = ?
              WHERE name IN (SELECT name FROM locks INDEXED BY locks_by_lock_until
                             WHERE lock_until_ms > 0 AND lock_until_ms <= ? LIMIT ?)`,
        args: [now, now, PRUNE_BATCH],
      },
      {
        sql: `DELETE FROM locks WHERE name IN (SELECT name FROM locks INDEXED BY locks_tombstones
              WHERE record IS NULL AND updated_ms < ? LIMIT ?)`,
        args: [now - TOMBSTONE_KEEP_MS, PRUNE_BATCH],
      },
    ];
  }

  // One page of a query made by parseListing(): rows {name, key, record (JSON text)} in
  // the query's order, at most query.limit, and whether more follow, as of query.at (the
  // instant queryLayout() took for every shard of the page; this shard's clock when
  // absent), which the answer's now_ms repeats. Every condition is a range or a filter
  // on an index walked in order: a prefix is name >= prefix AND name < upper, never an
  // open range to the end of the table.
  async query(query) {
    const now = Date.now();
    const at = Number.isSafeInteger(query.at) ? query.at : now;
    // Never past the page's instant: a row pruned here must be one the page leaves out.
    this.prune(Math.min(now, at));
    const { sql, args } = this.statement(query, at);
    const rows = this.sql.exec(sql, ...args).toArray();
    const more = rows.length > query.limit;
    return { rows: more ? rows.slice(0, query.limit) : rows, more, now_ms: at };
  }

  // The SELECT of query() as of `now`: {sql, args}.
  statement(query, now) {
    // Rows past lock_until_ms are expired or tombstones (0): never listed.
    const where = ["lock_until_ms > ?", "record IS NOT NULL"];
    const args = [now];
    if (query.held !== query.atLeast) {
      where.push("released = ?");
      args.push(query.atLeast ? 1 : 0);
    }
    if (query.prefix !== "") {
      where.push("name >= ?");
      args.push(query.prefix);
      if (query.upper !== null) {
        where.push("name < ?");
        args.push(query.upper);
      }
    }
    if (query.search !== "") {
      // instr() takes the text literally (no LIKE metacharacters); lower() folds ASCII
      // only; substr() counts code points, as search_skip does.
      where.push("instr(lower(substr(name, ?)), ?) > 0");
      args.push(query.searchSkip + 1, query.search);
    }
    const column = ORDER_COLUMNS[query.order];
    const direction = query.desc ? "DESC" : "ASC";
    const beyond = query.desc ? "<" : ">";
    if (query.after !== null) {
      if (column === null) {
        where.push(`name ${beyond} ?`);
        args.push(query.after.name);
      } else {
        where.push(`(${column}, name) ${beyond} (?, ?)`);
        args.push(query.after.key, query.after.name);
      }
    }
    const sortKey = column ?? "name";
    // A time order walks its own index from where the page starts, filtering names on
    // the way (the index holds them); left alone, SQLite prefers the name range of a
    // prefix and sorts all of it, which is every row for a client with a key prefix
    // (measured on 50,000 rows: 31 ms a page that way, 0.15 ms this way).
    const source = column === null ? "" : `INDEXED BY locks_by_${query.order}`;
    const orderBy = column === null ? `name ${direction}` : `${column} ${direction}, name ${direction}`;
    return {
      sql: `SELECT name, ${sortKey} AS key, record FROM locks ${source} WHERE ${where.join(" AND ")}
            ORDER BY ${orderBy} LIMIT ?`,
      args: [...args, query.limit + 1],
    };
  }
}
