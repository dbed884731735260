// The companion Worker of tslock-django: named, time-bounded locks (ShedLock style)
// kept in Cloudflare Durable Objects.
//
// One LockObject per lock name holds that lock's state in its SQLite storage. A Durable
// Object handles one event at a time and every read-compare-write in LockObject
// (lock_object.js) is synchronous SQL, so no two requests can both see a lock as free:
// that is the whole correctness argument, no quorum or transaction needed. Deadlines come from the object's own clock;
// clients send durations only.
//
// Durable Objects cannot be enumerated, so each LockObject reports every change to the
// index: N LockIndex objects (shards, N = the TSLOCK_INDEX_SHARDS variable), the shard of
// a name chosen by a hash of it. A report is tagged with a per-name version so that a
// late or reordered one never overwrites a newer one. The lock object answers its caller
// without waiting for the index: it reports TSLOCK_REPORT_DELAY_MS after a change, from
// its alarm, sending only the latest state (so a lock taken and released within the
// delay costs the index nothing), or at once when the delay is 0 (unset) and for a force
// release. It records which version the index acknowledged and its alarm re-sends a
// report that did not land; each shard also reconciles, asking the lock objects of
// entries no report has confirmed for an hour to send their record again (see
// "Staleness" below). GET /v1/locks asks every shard for one page (each reads at most
// limit + 1 rows along an index; a search or state filter skips non-matching entries on
// the way) and merges them.
//
// Staleness: a listing shows what the index holds, filtered by lock_until at one instant
// taken before the shards are read (the answer's now_ms), so it never shows a lock that
// had ended at that instant. A change (taken, released, extended)
// shows once its report lands: the report delay plus a few milliseconds after the answer
// (a force release: a few milliseconds). A report that fails is re-sent by the lock
// object's alarm after 1 s, then after 2, 4, 8, 16 and every 30 s while the index stays
// unreachable; so with the index reachable a listing is at most about the delay plus 1 s
// behind a lost report, and the Worker never reports a lock as held past its lock_until.
// An entry whose reports stopped altogether (its lock object's alarm lost) is corrected
// by reconciliation within about RECONCILE_AFTER_MS + RECONCILE_EVERY_MS.
//
// Wire protocol v1 (JSON in and out, names only ever in the JSON body or query string):
//   GET  /v1/health                          no auth
//   POST /v1/acquire       {name, lock_at_most_for_ms, lock_at_least_for_ms?, locked_by?}
//   POST /v1/extend        {name, token, lock_at_most_for_ms, lock_at_least_for_ms?}
//   POST /v1/unlock        {name, token}
//   POST /v1/force-release {name, fencing_token?, token?}
//   GET  /v1/locks?prefix=&search=&search_skip=&states=&order=&desc=&limit=&after_key=&after_name=
//   POST /v1/reindex       {after?, limit?}  re-send a batch of lock objects' records (resharding)
// Every request but GET /v1/health needs "Authorization: Bearer <TSLOCK_TOKEN>" (a wrangler
// secret), checked before anything else: an unauthenticated caller learns nothing but 401.
// Request bodies are at most MAX_BODY_BYTES (413 beyond, before any parsing).
//
// GET /v1/locks lists the current locks (the index keeps no expired ones), one page:
//   prefix      names starting with it, exactly (default: all)
//   search      names containing it; ASCII letters match either case, every other
//               character (% _ \ included) only itself
//   search_skip the number of leading code points of each name that search ignores
//               (a client's key prefix, which its users do not see); default 0
//   states      comma list of held (a holder has it) and at_least (released by its
//               holder, kept for lock_at_least_for); default both. "expired" is refused
//               with 400: ended locks leave the index.
//   order       name | lock_until | locked_at (ties broken by name); default name
//   desc        0 | 1: reverse the order, the name tie-breaker too; default 0
//   limit       1..1000 records; default 1000
//   after_key, after_name
//               continue strictly after this position (the previous page's last
//               record): after_name is its name, after_key its sort key, which is the
//               name again for order=name and epoch milliseconds for the time orders.
//               after_name "" with a time key means "after every name at that key".
// Answer: {locks: [record without token, ...], more: bool, now_ms}, now_ms being the
// instant the whole page is as of (every record in it is current then). Names compare in
// code point order (SQLite compares TEXT as UTF-8 bytes). The older form of the route,
// ?prefix=&limit=&cursor= answering {locks, cursor}, still works for order=name, so an
// app of the previous release keeps listing while the Worker is redeployed first.
//
// The modules (plain ES modules, no build step; wrangler bundles them from this one):
//   index.js        this entry: the fetch handler's error answers and the exports
//                   wrangler.jsonc names (the default handler, LockObject, LockIndex)
//   router.js       authentication and the routes
//   lock_object.js  LockObject, one per lock name, and its reports to the index
//   index_shard.js  LockIndex, one shard of the index: its table, reports and pages
//   listing.js      GET /v1/locks: parameters, the merge across shards, the answer
//   repair.js       the rebuild (POST /v1/reindex) and the shards' reconciliation
//   layout.js       which objects a name lives in (lock object, shard per layout)
//   validation.js   the checks of the lock routes' fields
//   answers.js      JSON answers, the error types and bounded request bodies
//   text.js         UTF-8, digests, tokens, the code point order of names

import { BadRequest, ConfigError, MAX_BODY_BYTES, TooLarge, reply } from "./answers.js";
import { route } from "./router.js";

export { LockIndex } from "./index_shard.js";
export { LockObject } from "./lock_object.js";

export default {
  async fetch(request, env) {
    try {
      return await route(request, env);
    } catch (err) {
      if (err instanceof BadRequest) return reply(400, { error: err.message });
      if (err instanceof TooLarge) {
        return reply(413, { error: `the request body is larger than ${MAX_BODY_BYTES} bytes; tslock requests are small JSON objects` });
      }
      if (err instanceof ConfigError) return reply(500, { error: err.message });
      console.error("tslock worker: unexpected error", err && err.stack ? err.stack : err);
      return reply(500, { error: "internal error in the tslock Worker; see its logs" });
    }
  },
};
