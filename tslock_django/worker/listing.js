// GET /v1/locks: the query's parameters checked (parseListing), one page read from every
// shard of a layout and merged in order as of one instant (queryLayout), and the answer
// written (listingReply), with the cursors of the older paging form. Each shard answers
// its part in LockIndex.query() (index_shard.js).

import { BadRequest, JSON_HEADERS } from "./answers.js";
import { allShards } from "./layout.js";
import { compareNames, encoder, shown } from "./text.js";
import { MAX_NAME_BYTES } from "./validation.js";

const MAX_PAGE = 1000;

const LISTING_PARAMETERS = [
  "prefix", "search", "search_skip", "states", "order", "desc", "limit", "after_key", "after_name", "cursor",
];

const LISTING_STATES = ["held", "at_least"];

// The column each order sorts by before the name tie-breaker (null: the name alone).
export const ORDER_COLUMNS = { name: null, lock_until: "lock_until_ms", locked_at: "locked_at_ms" };

const TIME_KEY = /^-?[0-9]{1,16}$/;

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
export function parseListing(params) {
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
export async function queryLayout(env, count, baseQuery) {
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

// The index hands back each record as the JSON text it stored: joined, not parsed and
// serialised again, which is most of the work of a 1,000-record page otherwise.
export function listingReply(query, page) {
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
