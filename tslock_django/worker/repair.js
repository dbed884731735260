// How the index is repaired: the rebuild behind POST /v1/reindex (every lock object of
// a batch re-sends its record, to fill a new layout or mend a stale one), and each
// shard's reconciliation rounds, run from its alarm, for reports lost for good.

import { BadRequest } from "./answers.js";
import { allShards, layouts, lockObject } from "./layout.js";
import { compareNames } from "./text.js";

// Names per rebuild batch: when the call does not say, and the most it may ask for.
const REINDEX_BATCH = 25;
const MAX_REINDEX_BATCH = 500;

// Reconciliation, the index's repair path for a report lost for good (a lock object's
// alarm lost with its storage write, say): every RECONCILE_EVERY_MS a shard asks the
// lock objects of up to RECONCILE_BATCH entries that no report has confirmed for
// RECONCILE_AFTER_MS to send their record again; a full batch means more are due, and
// the next round follows after RECONCILE_SOON_MS.
export const RECONCILE_AFTER_MS = 60 * 60 * 1000;
export const RECONCILE_EVERY_MS = 15 * 60 * 1000;
const RECONCILE_SOON_MS = 10_000;
const RECONCILE_BATCH = 50;

// POST /v1/reindex {after, limit}: one batch of the rebuild that fills a new layout. It
// takes the next `limit` names (in code point order, after `after`) that either layout
// lists, and has each of their lock objects re-send its current record to the layouts it
// reports to. Answers {resent, next}; call again with after = next until next is null.
// Re-sending is idempotent (versions), so a batch can be repeated or the walk restarted.
export async function reindex(env, body) {
  const after = body.after ?? null;
  if (after !== null && typeof after !== "string") throw new BadRequest('"after" must be a name (a string) or null');
  const limit = body.limit ?? REINDEX_BATCH;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_REINDEX_BATCH) {
    throw new BadRequest(`"limit" must be a whole number from 1 to ${MAX_REINDEX_BATCH}`);
  }
  const { current, previous } = layouts(env);
  const shards = allShards(env, current);
  if (previous !== null) shards.push(...allShards(env, previous));
  const lists = await Promise.all(shards.map((shard) => shard.names(after, limit)));
  const names = [...new Set(lists.flat())].sort(compareNames).slice(0, limit);
  await Promise.all(names.map((name) => lockObject(env, name).resend()));
  const more = names.length === limit;
  return { resent: names.length, next: more ? names[names.length - 1] : null, layout: { current, previous } };
}

// Make sure shard `index` has a reconciliation alarm pending (once per object lifetime:
// the alarm re-arms itself).
export async function ensureReconciliation(index, now) {
  index.reconcileArmed = true;
  try {
    if ((await index.ctx.storage.getAlarm()) === null) {
      await index.ctx.storage.setAlarm(now + index.constructor.reconcileEveryMs);
    }
  } catch (err) {
    // The report itself is stored; the next one tries again.
    index.reconcileArmed = false;
    console.error("tslock worker: could not arm the index's reconciliation", String(err));
  }
}

// One reconciliation round of shard `index`: the lock objects of the entries longest
// unconfirmed are asked to send their record again; an entry whose lock object has no lock at all (never had one, or
// its storage was deleted) is an orphan and goes. The re-sent reports land through
// update() like any other (versions decide), so a stale entry is corrected and a right
// one confirmed.
export async function reconcileRound(index) {
  const now = Date.now();
  index.prune(now);
  const due = index.sql
    .exec(
      `SELECT name, updated_ms FROM locks INDEXED BY locks_unconfirmed
       WHERE record IS NOT NULL AND updated_ms < ? ORDER BY updated_ms LIMIT ?`,
      now - index.constructor.reconcileAfterMs,
      RECONCILE_BATCH,
    )
    .toArray();
  const found = await Promise.all(
    due.map(({ name }) =>
      lockObject(index.env, name)
        .resend()
        .catch((err) => {
          console.error("tslock worker: reconciliation could not reach the lock object of", name, String(err));
          return null;
        }),
    ),
  );
  const later = Date.now();
  due.forEach(({ name, updated_ms: seen }, i) => {
    // Only entries untouched since they were picked (no report landed meanwhile): an
    // orphan goes; the entry of an unreachable lock object is checked again after
    // RECONCILE_AFTER_MS, so it does not hold up the entries behind it.
    if (found[i] === false) index.sql.exec("DELETE FROM locks WHERE name = ? AND updated_ms = ?", name, seen);
    else if (found[i] === null) index.sql.exec("UPDATE locks SET updated_ms = ? WHERE name = ? AND updated_ms = ?", later, name, seen);
  });
  const full = due.length === RECONCILE_BATCH;
  await index.ctx.storage.setAlarm(later + (full ? RECONCILE_SOON_MS : index.constructor.reconcileEveryMs));
}
