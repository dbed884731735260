// LockObject: one Durable Object per lock name, holding that lock's state in its SQLite
// storage. It takes, extends and releases the lock by its own clock, answers its caller,
// and reports the change to the index shard of its name afterwards (after the report
// delay, from its alarm, or at once), re-sending until the shard acknowledges it.

import { DurableObject } from "cloudflare:workers";

import { ConfigError } from "./answers.js";
import { indexShard, layouts, shardOf } from "./layout.js";
import { hex, newToken, sha256, shown } from "./text.js";

// A report that did not land is re-sent after 1 s, doubling up to 30 s.
const REPORT_RETRY_MS = 1000;
const REPORT_RETRY_MAX_MS = 30_000;

// The longest report delay allowed: a listing may be this far behind a change.
const MAX_REPORT_DELAY_MS = 60_000;

// How long a lock object waits before it reports a change (TSLOCK_REPORT_DELAY_MS), so
// that a burst of changes costs one report: 0 (report at once) when unset, as in the
// releases before the variable.
export function reportDelay(env) {
  const value = env.TSLOCK_REPORT_DELAY_MS;
  if (value === undefined || value === null || value === "") return 0;
  const delay = /^[0-9]{1,5}$/.test(String(value)) ? Number(value) : NaN;
  if (!(delay >= 0 && delay <= MAX_REPORT_DELAY_MS)) {
    throw new ConfigError(
      `TSLOCK_REPORT_DELAY_MS is ${shown(String(value))}; set a whole number of milliseconds from 0 to ${MAX_REPORT_DELAY_MS} in wrangler.jsonc`,
    );
  }
  return delay;
}

export class LockObject extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    // In memory only, for this object's lifetime (no storage write on the lock path for
    // them): when the pending alarm fires (undefined: not known), reports sent and not
    // yet answered, failed re-sends in a row, and the last version the index acknowledged
    // with whether it was a current lock. After a restart nothing is known to be
    // acknowledged, so the alarm re-sends the current version once: harmless, as
    // reports are idempotent.
    this.alarmAt = undefined;
    this.inFlight = 0;
    this.attempts = 0;
    this.indexHas = undefined;
    // One row (id = 1). token = '' means nobody holds the lock. fencing_token and
    // version only ever grow, across expiry and force-release alike.
    this.sql.exec(`CREATE TABLE IF NOT EXISTS lock_state (
      id INTEGER PRIMARY KEY CHECK (id = 1),
      name TEXT NOT NULL,
      locked_at_ms INTEGER NOT NULL DEFAULT 0,
      lock_until_ms INTEGER NOT NULL DEFAULT 0,
      at_least_until_ms INTEGER NOT NULL DEFAULT 0,
      locked_by TEXT NOT NULL DEFAULT '',
      fencing_token INTEGER NOT NULL DEFAULT 0,
      released INTEGER NOT NULL DEFAULT 0,
      token TEXT NOT NULL DEFAULT '',
      token_fingerprint TEXT NOT NULL DEFAULT '',
      version INTEGER NOT NULL DEFAULT 0
    )`);
  }

  load() {
    const rows = this.sql.exec("SELECT * FROM lock_state WHERE id = 1").toArray();
    return rows.length ? rows[0] : null;
  }

  save(state) {
    this.sql.exec(
      `INSERT INTO lock_state (id, name, locked_at_ms, lock_until_ms, at_least_until_ms, locked_by,
         fencing_token, released, token, token_fingerprint, version)
       VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO UPDATE SET name = excluded.name, locked_at_ms = excluded.locked_at_ms,
         lock_until_ms = excluded.lock_until_ms, at_least_until_ms = excluded.at_least_until_ms,
         locked_by = excluded.locked_by, fencing_token = excluded.fencing_token,
         released = excluded.released, token = excluded.token,
         token_fingerprint = excluded.token_fingerprint, version = excluded.version`,
      state.name,
      state.locked_at_ms,
      state.lock_until_ms,
      state.at_least_until_ms,
      state.locked_by,
      state.fencing_token,
      state.released ? 1 : 0,
      state.token,
      state.token_fingerprint,
      state.version,
    );
  }

  static isHeld(state, now) {
    return state !== null && state.token !== "" && state.lock_until_ms > now;
  }

  static record(state, withToken = false) {
    const record = {
      name: state.name,
      locked_at_ms: state.locked_at_ms,
      lock_until_ms: state.lock_until_ms,
      at_least_until_ms: state.at_least_until_ms,
      locked_by: state.locked_by,
      fencing_token: state.fencing_token,
      released: Boolean(state.released),
      token_fingerprint: state.token_fingerprint,
    };
    if (withToken) record.token = state.token;
    return record;
  }

  // Persist a change (synchronously, so it is atomic with the read that preceded it)
  // and answer: the index is told afterwards, without the answer waiting for it. With a
  // report delay (TSLOCK_REPORT_DELAY_MS) the alarm carries the report: it fires once
  // after a burst of changes and sends only the latest state, so a lock taken and
  // released within the delay costs the index nothing. Without one (or `atOnce`, for a
  // force release: the operator who released a stuck lock reloads the listing next and
  // must not see it still held) the report starts now. Either way, until the index acknowledges the current version an alarm is
  // pending, and it re-sends whatever did not land (the object evicted, the index
  // unreachable).
  async commit(state, now, { atOnce = false } = {}) {
    state.version += 1;
    if (state.lock_until_ms <= now) state.token = "";
    this.save(state);
    const delay = atOnce ? 0 : reportDelay(this.env);
    const wake = this.nextWake(state, now, delay);
    let armed = true;
    // An alarm already due sooner serves as well (the handler re-arms it): one alarm
    // write per burst instead of one per change.
    if (wake !== null && !(this.alarmAt > now && this.alarmAt <= wake)) {
      try {
        await this.ctx.storage.setAlarm(wake);
        this.alarmAt = wake;
      } catch (err) {
        this.alarmAt = undefined;
        armed = false;
        console.error("tslock worker: could not set the alarm of", state.name, err);
      }
    }
    // Started before the answer leaves but not awaited: the call is on its way to the
    // index before the caller can ask for a listing, and the answer does not wait for it.
    // Also the fallback when no alarm could be set to carry a delayed report.
    if (delay === 0 || !armed) this.report();
  }

  // When the alarm must fire for `state`: at its lock_until while it is current (the
  // index must learn that it ended), and sooner while the index lacks this version
  // (after the report delay, or the retry period when reports go at once).
  nextWake(state, now, delay) {
    const live = LockObject.isHeld(state, now);
    const deadline = live ? state.lock_until_ms : Infinity;
    if (this.settled(state, live)) return deadline === Infinity ? null : deadline;
    return Math.min(deadline, now + (delay > 0 ? delay : REPORT_RETRY_MS));
  }

  // Send the current version unless the index needs no report (see settled()).
  report() {
    const state = this.load();
    if (state === null) return;
    const live = LockObject.isHeld(state, Date.now());
    if (this.settled(state, live)) return;
    const version = state.version;
    this.inFlight += 1;
    this.deliver(state.name, version, live ? LockObject.record(state) : null)
      .then(
        () => this.noteAcknowledged(version, live),
        (err) => console.error("tslock worker: could not report to the index; the alarm re-sends:", state.name, String(err)),
      )
      .finally(() => {
        this.inFlight -= 1;
      });
  }

  // Whether the index already has what it needs of `state`: the current version, or, for
  // a lock that is not current, "no lock" acknowledged last (in this object's lifetime,
  // nothing since in flight): the index lists nothing for the name, and no older report
  // can land after that acknowledgement and win (versions).
  settled(state, live) {
    if (this.acknowledged(state)) return true;
    if (!live && this.inFlight === 0 && this.indexHas !== undefined && !this.indexHas.live) {
      this.noteAcknowledged(state.version, false);
      return true;
    }
    return false;
  }

  noteAcknowledged(version, live) {
    if (this.indexHas === undefined || version > this.indexHas.version) this.indexHas = { version, live };
    this.attempts = 0;
  }

  acknowledged(state) {
    return this.indexHas !== undefined && this.indexHas.version >= state.version;
  }

  // Send one version of the record (null: no current lock) to the shard that owns the
  // name in each layout it reports to (two while the index is being resharded).
  async deliver(name, version, record) {
    const { current, previous } = layouts(this.env);
    const counts = previous === null ? [current] : [current, previous];
    await Promise.all(
      counts.map(async (count) => indexShard(this.env, count, await shardOf(name, count)).update(name, version, record)),
    );
  }

  // The rebuild (POST /v1/reindex) asks for the current record again: an ended lock is
  // cleared first, as its alarm would; then the record goes to every layout in use.
  async resend() {
    const now = Date.now();
    const state = this.load();
    if (state === null) return false;
    if (state.token !== "" && state.lock_until_ms <= now) {
      state.version += 1;
      state.token = "";
      this.save(state);
    }
    const held = LockObject.isHeld(state, now);
    await this.send(state, held);
    return true;
  }

  // Deliver and note the acknowledgement, awaited (the alarm and the rebuild).
  async send(state, live) {
    this.inFlight += 1;
    try {
      await this.deliver(state.name, state.version, live ? LockObject.record(state) : null);
    } finally {
      this.inFlight -= 1;
    }
    this.noteAcknowledged(state.version, live);
  }

  async acquire(name, atMost, atLeast, lockedBy) {
    // The token and its digest are made first: awaiting the digest after reading the
    // state would let another request in between the check and the take.
    const token = newToken();
    const fingerprint = hex(await sha256(token)).slice(0, 8);
    const now = Date.now();
    const current = this.load();
    if (LockObject.isHeld(current, now)) {
      return { acquired: false, record: LockObject.record(current), now_ms: now };
    }
    // A name never locked before has never been reported: the index lists nothing for it.
    if (current === null && this.indexHas === undefined) this.indexHas = { version: 0, live: false };
    const state = {
      name,
      locked_at_ms: now,
      lock_until_ms: now + atMost,
      at_least_until_ms: now + atLeast,
      locked_by: lockedBy,
      fencing_token: (current ? current.fencing_token : 0) + 1,
      released: 0,
      token,
      token_fingerprint: fingerprint,
      version: current ? current.version : 0,
    };
    await this.commit(state, now);
    return { acquired: true, record: LockObject.record(state, true), now_ms: now };
  }

  async extend(name, token, atMost, atLeast) {
    const now = Date.now();
    const state = this.load();
    if (!LockObject.isHeld(state, now) || state.released || state.token !== token) {
      return { extended: false, now_ms: now };
    }
    state.lock_until_ms = now + atMost;
    state.at_least_until_ms = now + atLeast;
    await this.commit(state, now);
    return { extended: true, record: LockObject.record(state, true), now_ms: now };
  }

  async unlock(name, token) {
    const now = Date.now();
    const state = this.load();
    if (!LockObject.isHeld(state, now) || state.released || state.token !== token) {
      return { released: false, now_ms: now };
    }
    state.lock_until_ms = Math.max(now, state.at_least_until_ms);
    state.released = 1;
    await this.commit(state, now);
    return { released: true, now_ms: now };
  }

  async forceRelease(name, expected) {
    const now = Date.now();
    const state = this.load();
    if (!LockObject.isHeld(state, now)) return { released: false, now_ms: now };
    if (expected.fencingToken !== undefined && expected.fencingToken !== state.fencing_token) {
      return { released: false, now_ms: now };
    }
    if (expected.token !== undefined && expected.token !== state.token) {
      return { released: false, now_ms: now };
    }
    state.lock_until_ms = now;
    state.released = 1;
    await this.commit(state, now, { atOnce: true });
    return { released: true, now_ms: now };
  }

  // Fires at the lock's deadline, after the report delay, or while a report is
  // unacknowledged; sends the latest state if the index needs it and arms the next wake.
  async alarm() {
    this.alarmAt = undefined;
    const now = Date.now();
    const state = this.load();
    if (state === null) return;
    if (state.token !== "" && state.lock_until_ms <= now) {
      // Expired: clear the token; the index must learn that the lock ended.
      state.version += 1;
      state.token = "";
      this.save(state);
    }
    const held = LockObject.isHeld(state, now);
    if (!this.settled(state, held)) {
      try {
        await this.send(state, held);
      } catch (err) {
        this.attempts += 1;
        const retry = now + Math.min(REPORT_RETRY_MS * 2 ** Math.min(this.attempts, 5), REPORT_RETRY_MAX_MS);
        await this.setAlarmAt(held ? Math.min(state.lock_until_ms, retry) : retry);
        console.error("tslock worker: the index is still unreachable for", state.name, String(err));
        return;
      }
    }
    // What changed while the report was on its way (a commit then may have armed an
    // alarm this one must not push back), or the deadline of a lock still current.
    const later = Date.now();
    const wake = this.nextWake(this.load(), later, reportDelay(this.env));
    if (wake !== null && !(this.alarmAt > later && this.alarmAt <= wake)) await this.setAlarmAt(wake);
  }

  async setAlarmAt(when) {
    await this.ctx.storage.setAlarm(when);
    this.alarmAt = when;
  }
}
