// BENCH ONLY (never exported, never deployed): the shipped Worker plus one route that
// fills the index directly, so a listing can be measured at 50,000 locks without taking
// 50,000 locks through 50,000 lock objects (which takes many minutes locally).
//
// POST /bench/fill {shards, rows: [record, ...]} (with the bearer token) hands each
// record to the shard that owns its name, through the same LockIndex.update() a lock
// object's report calls, version 1. What differs from real use: no lock object exists
// for these names, and a shard receives many records in one call instead of one per
// report. The listing path (GET /v1/locks, its merge and the index's SQL) is unchanged.
import worker, { LockIndex as ShippedIndex, LockObject } from "./index.js";

export { LockObject };

export class LockIndex extends ShippedIndex {
  async benchFill(rows) {
    for (const record of rows) await this.update(record.name, 1, record);
    return rows.length;
  }
}

async function shardOf(name, count) {
  if (count === 1) return 0;
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(name)));
  return new DataView(digest.buffer).getUint32(0) % count;
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname !== "/bench/fill") return worker.fetch(request, env);
    if (request.headers.get("authorization") !== `Bearer ${env.TSLOCK_TOKEN}`) return new Response("no", { status: 401 });
    const { shards, rows } = await request.json();
    const groups = new Map();
    for (const record of rows) {
      const shard = await shardOf(record.name, shards);
      if (!groups.has(shard)) groups.set(shard, []);
      groups.get(shard).push(record);
    }
    const objectName = (shard) => (shards === 1 ? "tslock-index" : `tslock-index-${shard}-of-${shards}`);
    const done = await Promise.all(
      [...groups].map(([shard, group]) => env.LOCK_INDEX.get(env.LOCK_INDEX.idFromName(objectName(shard))).benchFill(group)),
    );
    return Response.json({ filled: done.reduce((a, b) => a + b, 0) });
  },
};
