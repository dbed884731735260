// Where a name lives: its lock object (one per name) and the index shard that lists it
// in each layout (N shards, N from TSLOCK_INDEX_SHARDS, and TSLOCK_INDEX_SHARDS_PREVIOUS
// while the index is being moved to a new N). Shards are named so that two layouts
// never share an object.

import { ConfigError } from "./answers.js";
import { sha256, shown } from "./text.js";

// The name of the single index object of the first releases; with N = 1 shard it is still
// the one index, so a deployment upgraded without setting N keeps its listing.
const INDEX_OBJECT_NAME = "tslock-index";

const MAX_SHARDS = 256;

// The lock object of a name (created on first use).
export function lockObject(env, name) {
  return env.LOCKS.get(env.LOCKS.idFromName(name));
}

function shardCount(value, variable) {
  if (value === undefined || value === null || value === "") return null;
  const count = /^[0-9]{1,3}$/.test(String(value)) ? Number(value) : NaN;
  if (!(count >= 1 && count <= MAX_SHARDS)) {
    throw new ConfigError(`${variable} is ${shown(String(value))}; set a whole number from 1 to ${MAX_SHARDS} in wrangler.jsonc`);
  }
  return count;
}

// {current, previous}: the shard counts to report to (both, while a move is under way)
// and previous (or null), the layout listings read until the move is finished.
export function layouts(env) {
  const current = shardCount(env.TSLOCK_INDEX_SHARDS, "TSLOCK_INDEX_SHARDS") ?? 1;
  const previous = shardCount(env.TSLOCK_INDEX_SHARDS_PREVIOUS, "TSLOCK_INDEX_SHARDS_PREVIOUS");
  return { current, previous: previous === current ? null : previous };
}

function shardName(count, shard) {
  return count === 1 ? INDEX_OBJECT_NAME : `${INDEX_OBJECT_NAME}-${shard}-of-${count}`;
}

export function indexShard(env, count, shard) {
  return env.LOCK_INDEX.get(env.LOCK_INDEX.idFromName(shardName(count, shard)));
}

// The shard of a name: the first four bytes of SHA-256 of its UTF-8 form, mod N. Stable
// across releases and runtimes (never JS string hashing).
export async function shardOf(name, count) {
  if (count === 1) return 0;
  const digest = await sha256(name);
  return new DataView(digest.buffer).getUint32(0) % count;
}

export function allShards(env, count) {
  return Array.from({ length: count }, (_, shard) => indexShard(env, count, shard));
}
