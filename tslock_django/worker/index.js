// The companion Worker of tslock-django: named, time-bounded locks (ShedLock style)
// kept in Cloudflare Durable Objects.
//
// One LockObject per lock name holds that lock's state in its SQLite storage. A Durable
// Object handles one event at a time and every read-compare-write below is synchronous
// SQL, so no two requests can both see a lock as free: that is the whole correctness
// argument, no quorum or transaction needed. Deadlines come from the object's own clock;
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

import { DurableObject } from "cloudflare:workers";

const PROTOCOL_VERSION = 1;
const MAX_NAME_BYTES = 512;
const MAX_LOCKED_BY_CHARS = 255;
const MAX_TOKEN_CHARS = 256;
// About 100 years: keeps now + duration far inside the range of exact integers.
const MAX_DURATION_MS = 100 * 365 * 24 * 3600 * 1000;
const MAX_PAGE = 1000;
// The name of the single index object of the first releases; with N = 1 shard it is still
// the one index, so a deployment upgraded without setting N keeps its listing.
const INDEX_OBJECT_NAME = "tslock-index";
const MAX_SHARDS = 256;
// The largest valid request body is about 6.5 KiB (a 512-byte name and a 255-character
// locked_by, both \u-escaped as Python's json does): anything above this is refused unread.
const MAX_BODY_BYTES = 16 * 1024;
// A report that did not land is re-sent after 1 s, doubling up to 30 s.
const REPORT_RETRY_MS = 1000;
const REPORT_RETRY_MAX_MS = 30_000;
// The longest report delay allowed: a listing may be this far behind a change.
const MAX_REPORT_DELAY_MS = 60_000;
const REINDEX_BATCH = 25;
const MAX_REINDEX_BATCH = 500;
// Tombstones (names whose lock ended) keep their version this long so that a report
// delayed in flight cannot bring a finished lock back; then they are pruned.
const TOMBSTONE_KEEP_MS = 10 * 60 * 1000;
const PRUNE_BATCH = 500;
// Reconciliation, the index's repair path for a report lost for good (a lock object's
// alarm lost with its storage write, say): every RECONCILE_EVERY_MS a shard asks the
// lock objects of up to RECONCILE_BATCH entries that no report has confirmed for
// RECONCILE_AFTER_MS to send their record again; a full batch means more are due, and
// the next round follows after RECONCILE_SOON_MS.
const RECONCILE_AFTER_MS = 60 * 60 * 1000;
const RECONCILE_EVERY_MS = 15 * 60 * 1000;
const RECONCILE_SOON_MS = 10_000;
const RECONCILE_BATCH = 50;

const encoder = new TextEncoder();

// ---------------------------------------------------------------------------------
// Answers and input checks

const JSON_HEADERS = { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" };

function reply(status, body) {
  if (body.now_ms === undefined) body.now_ms = Date.now();
  return new Response(JSON.stringify(body), { status, headers: JSON_HEADERS });
}

class BadRequest extends Error {}

const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;

function requireName(body) {
  const name = body.name;
  if (typeof name !== "string") throw new BadRequest('"name" is required and must be a string');
  if (name.length === 0) throw new BadRequest('"name" must not be empty');
  // The same rule as the Python library: control characters break log lines, pages
  // and terminals, so no caller (Python or another client) can create such a lock.
  if (CONTROL_CHARACTER.test(name)) {
    throw new BadRequest('"name" contains a control character (U+0000-U+001F or U+007F); use printable text');
  }
  const size = encoder.encode(name).length;
  if (size > MAX_NAME_BYTES) {
    throw new BadRequest(`"name" is ${size} UTF-8 bytes; the limit is ${MAX_NAME_BYTES}`);
  }
  return name;
}

function requireDurations(body) {
  const atMost = body.lock_at_most_for_ms;
  if (atMost === undefined || atMost === null) {
    throw new BadRequest('"lock_at_most_for_ms" is required (a positive integer of milliseconds)');
  }
  if (!Number.isInteger(atMost)) {
    throw new BadRequest('"lock_at_most_for_ms" must be an integer number of milliseconds');
  }
  if (atMost <= 0) throw new BadRequest('"lock_at_most_for_ms" must be greater than 0');
  if (atMost > MAX_DURATION_MS) {
    throw new BadRequest(`"lock_at_most_for_ms" must be at most ${MAX_DURATION_MS}`);
  }
  const atLeast = body.lock_at_least_for_ms ?? 0;
  if (!Number.isInteger(atLeast)) {
    throw new BadRequest('"lock_at_least_for_ms" must be an integer number of milliseconds');
  }
  if (atLeast < 0) throw new BadRequest('"lock_at_least_for_ms" must not be negative');
  if (atLeast > atMost) {
    throw new BadRequest('"lock_at_least_for_ms" must not be greater than "lock_at_most_for_ms"');
  }
  return { atMost, atLeast };
}

function requireToken(body) {
  const token = body.token;
  if (typeof token !== "string" || token.length === 0) {
    throw new BadRequest('"token" is required and must be a non-empty string');
  }
  if (token.length > MAX_TOKEN_CHARS) throw new BadRequest(`"token" is longer than ${MAX_TOKEN_CHARS} characters`);
  return token;
}

function optionalLockedBy(body) {
  const lockedBy = body.locked_by ?? "";
  if (typeof lockedBy !== "string") throw new BadRequest('"locked_by" must be a string');
  // Count code points, as Python's len() does, so both sides agree on the limit.
  if ([...lockedBy].length > MAX_LOCKED_BY_CHARS) {
    throw new BadRequest(`"locked_by" is longer than ${MAX_LOCKED_BY_CHARS} characters`);
  }
  return lockedBy;
}

function optionalExpectation(body) {
  const expected = {};
  if (body.fencing_token !== undefined && body.fencing_token !== null) {
    if (!Number.isInteger(body.fencing_token)) throw new BadRequest('"fencing_token" must be an integer');
    expected.fencingToken = body.fencing_token;
  }
  if (body.token !== undefined && body.token !== null) expected.token = requireToken(body);
  return expected;
}

class TooLarge extends Error {}

// The body as text, refused with TooLarge past MAX_BODY_BYTES: by its Content-Length
// before reading anything, and by counting while reading (the header may be absent, as
// with chunked uploads, or wrong).
async function readBody(request) {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > MAX_BODY_BYTES) throw new TooLarge();
  if (request.body === null) return "";
  const reader = request.body.getReader();
  const chunks = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_BODY_BYTES) {
      await reader.cancel().catch(() => {});
      throw new TooLarge();
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, at);
    at += chunk.byteLength;
  }
  return new TextDecoder().decode(bytes);
}

async function readJson(request) {
  const text = await readBody(request);
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    throw new BadRequest("the request body is not valid JSON");
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw new BadRequest("the request body must be a JSON object");
  }
  return body;
}

// ---------------------------------------------------------------------------------
// Listing queries: GET /v1/locks parameters, checked here, answered by LockIndex.query().

const LISTING_PARAMETERS = [
  "prefix", "search", "search_skip", "states", "order", "desc", "limit", "after_key", "after_name", "cursor",
];
const LISTING_STATES = ["held", "at_least"];
// The column each order sorts by before the name tie-breaker (null: the name alone).
const ORDER_COLUMNS = { name: null, lock_until: "lock_until_ms", locked_at: "locked_at_ms" };
const TIME_KEY = /^-?[0-9]{1,16}$/;

function shown(text) {
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}...` : text);
}

function boundedText(params, key) {
  const value = params.get(key) ?? "";
  const size = encoder.encode(value).length;
  if (size > MAX_NAME_BYTES) {
    throw new BadRequest(`"${key}" is ${size} UTF-8 bytes; names are at most ${MAX_NAME_BYTES}, so it can match nothing`);
  }
  return value;
}

// The smallest string above every string that starts with `prefix`: the prefix with its
// last code point raised by one (code points, not UTF-16 units, so an astral character
// is one step; the surrogate block is skipped, UTF-8 cannot hold it). Trailing U+10FFFF
// cannot be raised and are dropped first; null when nothing is left, and then every
// name >= prefix starts with it anyway.
function prefixUpperBound(prefix) {
  const points = Array.from(prefix, (c) => c.codePointAt(0));
  while (points.length && points[points.length - 1] === 0x10ffff) points.pop();
  if (points.length === 0) return null;
  let last = points.pop() + 1;
  if (last >= 0xd800 && last <= 0xdfff) last = 0xe000;
  points.push(last);
  return String.fromCodePoint(...points);
}

// ASCII letters only, as the Python side folds (and as SQLite's lower() does).
function foldAscii(text) {
  return text.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
}

// The query as LockIndex.query() takes it; BadRequest says what is wrong and what is allowed.
function parseListing(params) {
  for (const key of new Set(params.keys())) {
    if (!LISTING_PARAMETERS.includes(key)) {
      throw new BadRequest(`unknown parameter ${shown(key)}; GET /v1/locks takes ${LISTING_PARAMETERS.join(", ")}`);
    }
    if (params.getAll(key).length > 1) throw new BadRequest(`"${key}" is given more than once`);
  }
  const prefix = boundedText(params, "prefix");
  const search = boundedText(params, "search");
  const rawSkip = params.get("search_skip") ?? "0";
  const searchSkip = /^[0-9]{1,3}$/.test(rawSkip) ? Number(rawSkip) : NaN;
  if (!(searchSkip <= MAX_NAME_BYTES)) {
    throw new BadRequest(`"search_skip" is ${shown(rawSkip)}; give a whole number of code points from 0 to ${MAX_NAME_BYTES}`);
  }

  const wanted = (params.get("states") ?? LISTING_STATES.join(",")).split(",").map((s) => s.trim());
  for (const state of wanted) {
    if (state === "expired") {
      throw new BadRequest('"states" cannot include expired: ended locks leave the index; choose from held, at_least');
    }
    if (!LISTING_STATES.includes(state)) {
      throw new BadRequest(`"states" has ${shown(state)}; give a comma list of held, at_least`);
    }
  }

  const order = params.get("order") ?? "name";
  if (!Object.hasOwn(ORDER_COLUMNS, order)) {
    throw new BadRequest(`"order" is ${shown(order)}; choose from ${Object.keys(ORDER_COLUMNS).join(", ")}`);
  }
  const desc = params.get("desc") ?? "0";
  if (desc !== "0" && desc !== "1") throw new BadRequest(`"desc" is ${shown(desc)}; use 0 (ascending) or 1 (descending)`);

  let limit = MAX_PAGE;
  const rawLimit = params.get("limit");
  if (rawLimit !== null && rawLimit !== "") {
    limit = /^[0-9]{1,5}$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!(limit >= 1 && limit <= MAX_PAGE)) {
      throw new BadRequest(`"limit" is ${shown(rawLimit)}; give a whole number from 1 to ${MAX_PAGE}`);
    }
  }

  return {
    prefix,
    upper: prefix === "" ? null : prefixUpperBound(prefix),
    search: foldAscii(search),
    searchSkip,
    held: wanted.includes("held"),
    atLeast: wanted.includes("at_least"),
    order,
    desc: desc === "1",
    limit,
    after: parseAfter(params, order),
  };
}

function parseAfter(params, order) {
  const key = params.get("after_key");
  const name = params.get("after_name");
  const cursor = params.get("cursor");
  if (cursor !== null && cursor !== "") {
    if (key !== null || name !== null) throw new BadRequest('give either "cursor" or "after_key" and "after_name", not both');
    if (order !== "name") throw new BadRequest('"cursor" pages by name only; for other orders use "after_key" and "after_name"');
    let after;
    try {
      after = decodeCursor(cursor);
    } catch {
      throw new BadRequest('"cursor" is not a cursor this Worker returned');
    }
    return { key: after, name: after };
  }
  if (key === null && name === null) return null;
  if (key === null || name === null) {
    throw new BadRequest('"after_key" and "after_name" go together: the sort key and the name of the last record read');
  }
  if (encoder.encode(name).length > MAX_NAME_BYTES) throw new BadRequest(`"after_name" is longer than ${MAX_NAME_BYTES} UTF-8 bytes`);
  if (order === "name") {
    if (key !== name) throw new BadRequest('with order=name, "after_key" is the name: the same as "after_name"');
    return { key: name, name };
  }
  const ms = TIME_KEY.test(key) ? Number(key) : NaN;
  if (!Number.isSafeInteger(ms)) {
    throw new BadRequest(`with order=${order}, "after_key" is epoch milliseconds (a whole number); got ${shown(key)}`);
  }
  return { key: ms, name };
}

async function sha256(text) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function newToken() {
  return hex(crypto.getRandomValues(new Uint8Array(16)));
}

// Comparing digests (always 32 bytes) hides the secret's length as well as its content.
async function sameSecret(given, expected) {
  const [a, b] = await Promise.all([sha256(given), sha256(expected)]);
  if (crypto.subtle.timingSafeEqual) return crypto.subtle.timingSafeEqual(a, b);
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

async function checkAuth(request, env) {
  const secret = env.TSLOCK_TOKEN;
  if (typeof secret !== "string" || secret.length === 0) {
    return reply(500, {
      error: "the Worker has no TSLOCK_TOKEN secret; set it with `npx wrangler secret put TSLOCK_TOKEN`",
    });
  }
  const header = request.headers.get("authorization") || "";
  const match = /^Bearer\s+(.+)$/i.exec(header);
  if (!match || !(await sameSecret(match[1].trim(), secret))) {
    return reply(401, { error: "missing or wrong bearer token" });
  }
  return null;
}

// ---------------------------------------------------------------------------------
// The fetch handler: authenticate, validate, hand the request to the right object.

const ROUTES = {
  "/v1/health": "GET",
  "/v1/acquire": "POST",
  "/v1/extend": "POST",
  "/v1/unlock": "POST",
  "/v1/force-release": "POST",
  "/v1/locks": "GET",
  "/v1/reindex": "POST",
};

function lockObject(env, name) {
  return env.LOCKS.get(env.LOCKS.idFromName(name));
}

// ---------------------------------------------------------------------------------
// The index layout: N shards, named so that two layouts never share an object.

class ConfigError extends Error {}

function shardCount(value, variable) {
  if (value === undefined || value === null || value === "") return null;
  const count = /^[0-9]{1,3}$/.test(String(value)) ? Number(value) : NaN;
  if (!(count >= 1 && count <= MAX_SHARDS)) {
    throw new ConfigError(`${variable} is ${shown(String(value))}; set a whole number from 1 to ${MAX_SHARDS} in wrangler.jsonc`);
  }
  return count;
}

// How long a lock object waits before it reports a change (TSLOCK_REPORT_DELAY_MS), so
// that a burst of changes costs one report: 0 (report at once) when unset, as in the
// releases before the variable.
function reportDelay(env) {
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

// {current, previous}: the shard counts to report to (both, while a move is under way)
// and previous (or null), the layout listings read until the move is finished.
function layouts(env) {
  const current = shardCount(env.TSLOCK_INDEX_SHARDS, "TSLOCK_INDEX_SHARDS") ?? 1;
  const previous = shardCount(env.TSLOCK_INDEX_SHARDS_PREVIOUS, "TSLOCK_INDEX_SHARDS_PREVIOUS");
  return { current, previous: previous === current ? null : previous };
}

function shardName(count, shard) {
  return count === 1 ? INDEX_OBJECT_NAME : `${INDEX_OBJECT_NAME}-${shard}-of-${count}`;
}

function indexShard(env, count, shard) {
  return env.LOCK_INDEX.get(env.LOCK_INDEX.idFromName(shardName(count, shard)));
}

// The shard of a name: the first four bytes of SHA-256 of its UTF-8 form, mod N. Stable
// across releases and runtimes (never JS string hashing).
async function shardOf(name, count) {
  if (count === 1) return 0;
  const digest = await sha256(name);
  return new DataView(digest.buffer).getUint32(0) % count;
}

function allShards(env, count) {
  return Array.from({ length: count }, (_, shard) => indexShard(env, count, shard));
}

// Names in code point order (SQLite's order for TEXT): JS "<" compares UTF-16 units,
// which puts U+E000..U+FFFF above astral characters. At the first differing unit, move
// the surrogates above the rest of the BMP and compare.
function compareNames(a, b) {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codeUnitRank(x) - codeUnitRank(y);
  }
  return a.length - b.length;
}

function codeUnitRank(unit) {
  if (unit >= 0xe000) return unit - 0x800;
  if (unit >= 0xd800) return unit + 0x2000;
  return unit;
}

// One page from the shards of a layout. Names spread evenly over the shards, so a page
// of `limit` holds about limit / N rows of each: every shard is first asked for a share
// (twice that, plus a margin), not for limit + 1. A shard whose share ends inside the
// page (all its rows were used and it has more) is asked again after its last row for a
// full page; so the page is exact, and usually costs one call per shard reading about
// two pages' worth of rows in all instead of N pages.
//
// The page is as of one instant, taken here before any shard is asked: every shard
// keeps the locks still current at that instant and the answer carries it as now_ms.
// (Each shard reading at its own clock, a lock ending between two shard reads came back
// from the earlier one in a page dated by the later one, at which it had ended.)
async function queryLayout(env, count, baseQuery) {
  const query = { ...baseQuery, at: Date.now() };
  const shards = allShards(env, count);
  if (count === 1) return shards[0].query(query);
  const timeOrder = ORDER_COLUMNS[query.order] !== null;
  const sign = query.desc ? -1 : 1;
  const compare = (a, b) => sign * ((timeOrder && a.key !== b.key ? a.key - b.key : 0) || compareNames(a.name, b.name));
  const share = Math.min(query.limit, Math.ceil((2 * (query.limit + 1)) / count) + 8);
  const parts = await Promise.all(shards.map((shard) => shard.query({ ...query, limit: share })));
  for (;;) {
    const rows = parts.flatMap((part) => part.rows).sort(compare);
    const boundary = rows.length > query.limit ? rows[query.limit] : null;
    const short = parts
      .map((part, index) => ({ part, index }))
      .filter(({ part }) => {
        if (!part.more) return false;
        const last = part.rows[part.rows.length - 1];
        return boundary === null || compare(last, boundary) <= 0;
      });
    if (short.length === 0) {
      const more = rows.length > query.limit || parts.some((part) => part.more);
      return { rows: rows.slice(0, query.limit), more, now_ms: query.at };
    }
    await Promise.all(
      short.map(async ({ part, index }) => {
        const last = part.rows[part.rows.length - 1];
        const next = await shards[index].query({ ...query, after: { key: last.key, name: last.name } });
        parts[index] = { rows: [...part.rows, ...next.rows], more: next.more };
      }),
    );
  }
}

// An answer given without reading a small request body can make the runtime reset the
// connection, and the client's next request on it (keep-alive) then fails as a network
// error instead of getting its own answer; so such a body is read and dropped. Large or
// unsized ones are left alone: a refused caller gets no more of the Worker's time.
const DISCARDED_BODY_LIMIT = 64 * 1024;

async function discardBody(request) {
  const size = Number(request.headers.get("content-length") || 0);
  if (size > 0 && size <= DISCARDED_BODY_LIMIT) {
    try {
      await request.arrayBuffer();
    } catch {
      // The client went away; nothing to answer.
    }
  }
}

async function route(request, env) {
  const url = new URL(request.url);
  const method = ROUTES[url.pathname];
  if (url.pathname === "/v1/health" && request.method === "GET") {
    return reply(200, { ok: true, version: PROTOCOL_VERSION });
  }
  // The token first: without it, every route, method and body gets the same 401.
  const refused = await checkAuth(request, env);
  if (refused) {
    await discardBody(request);
    return refused;
  }
  if (method === undefined) {
    await discardBody(request);
    return reply(404, { error: `no route ${url.pathname}` });
  }
  if (request.method !== method) {
    await discardBody(request);
    const answer = reply(405, { error: `${url.pathname} accepts ${method} only` });
    answer.headers.set("allow", method);
    return answer;
  }

  if (url.pathname === "/v1/locks") {
    await discardBody(request);
    const query = parseListing(url.searchParams);
    const { current, previous } = layouts(env);
    // While a move is under way the previous layout is the complete one.
    return listingReply(query, await queryLayout(env, previous ?? current, query));
  }

  // A misconfigured Worker answers 500 naming the variable before it touches a lock.
  layouts(env);
  reportDelay(env);
  const body = await readJson(request);
  if (url.pathname === "/v1/reindex") return reply(200, await reindex(env, body));
  const name = requireName(body);
  const stub = lockObject(env, name);
  switch (url.pathname) {
    case "/v1/acquire": {
      const { atMost, atLeast } = requireDurations(body);
      return reply(200, await stub.acquire(name, atMost, atLeast, optionalLockedBy(body)));
    }
    case "/v1/extend": {
      const token = requireToken(body);
      const { atMost, atLeast } = requireDurations(body);
      return reply(200, await stub.extend(name, token, atMost, atLeast));
    }
    case "/v1/unlock":
      return reply(200, await stub.unlock(name, requireToken(body)));
    case "/v1/force-release":
      return reply(200, await stub.forceRelease(name, optionalExpectation(body)));
  }
  return reply(404, { error: `no route ${url.pathname}` });
}

// POST /v1/reindex {after, limit}: one batch of the rebuild that fills a new layout. It
// takes the next `limit` names (in code point order, after `after`) that either layout
// lists, and has each of their lock objects re-send its current record to the layouts it
// reports to. Answers {resent, next}; call again with after = next until next is null.
// Re-sending is idempotent (versions), so a batch can be repeated or the walk restarted.
async function reindex(env, body) {
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

// The index hands back each record as the JSON text it stored: joined, not parsed and
// serialised again, which is most of the work of a 1,000-record page otherwise.
function listingReply(query, page) {
  const parts = [`{"locks":[${page.rows.map((row) => row.record).join(",")}]`, `"more":${page.more}`];
  if (query.order === "name") {
    // For apps of the previous release, which page with ?cursor=.
    const last = page.rows[page.rows.length - 1];
    parts.push(`"cursor":${page.more && last ? JSON.stringify(encodeCursor(last.name)) : "null"}`);
  }
  parts.push(`"now_ms":${page.now_ms}}`);
  return new Response(parts.join(","), { status: 200, headers: JSON_HEADERS });
}

// Cursors (the older paging form) are the last name of the previous page, base64url-encoded
// so that any name (with "&", "/", "%" or any Unicode) travels safely in a query string.
function encodeCursor(name) {
  let binary = "";
  for (const byte of encoder.encode(name)) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function decodeCursor(cursor) {
  const binary = atob(cursor.replaceAll("-", "+").replaceAll("_", "/"));
  const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
}

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

// ---------------------------------------------------------------------------------
// LockObject: one per lock name.

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

// ---------------------------------------------------------------------------------
// LockIndex: one shard of the index; the current locks of the names it owns, for listing.
//
// Every lock object reports to the shard that owns its name through update(), and
// query() answers one sorted page of this shard's rows (at most limit + 1, read along
// an index), which the fetch handler merges with the other shards' pages by (key, name).

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
    if (!this.reconcileArmed) await this.armReconciliation(now);
    return true;
  }

  // Make sure a reconciliation alarm is pending (once per object lifetime: the alarm
  // re-arms itself).
  async armReconciliation(now) {
    this.reconcileArmed = true;
    try {
      if ((await this.ctx.storage.getAlarm()) === null) {
        await this.ctx.storage.setAlarm(now + this.constructor.reconcileEveryMs);
      }
    } catch (err) {
      // The report itself is stored; the next one tries again.
      this.reconcileArmed = false;
      console.error("tslock worker: could not arm the index's reconciliation", String(err));
    }
  }

  // Reconciliation: the lock objects of the entries longest unconfirmed are asked to send
  // their record again; an entry whose lock object has no lock at all (never had one, or
  // its storage was deleted) is an orphan and goes. The re-sent reports land through
  // update() like any other (versions decide), so a stale entry is corrected and a right
  // one confirmed.
  async alarm() {
    const now = Date.now();
    this.prune(now);
    const due = this.sql
      .exec(
        `SELECT name, updated_ms FROM locks INDEXED BY locks_unconfirmed
         WHERE record IS NOT NULL AND updated_ms < ? ORDER BY updated_ms LIMIT ?`,
        now - this.constructor.reconcileAfterMs,
        RECONCILE_BATCH,
      )
      .toArray();
    const found = await Promise.all(
      due.map(({ name }) =>
        lockObject(this.env, name)
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
      if (found[i] === false) this.sql.exec("DELETE FROM locks WHERE name = ? AND updated_ms = ?", name, seen);
      else if (found[i] === null) this.sql.exec("UPDATE locks SET updated_ms = ? WHERE name = ? AND updated_ms = ?", later, name, seen);
    });
    const full = due.length === RECONCILE_BATCH;
    await this.ctx.storage.setAlarm(later + (full ? RECONCILE_SOON_MS : this.constructor.reconcileEveryMs));
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
  // instant the fetch handler took for every shard of the page; this shard's clock when
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
