// Runs the tslock Worker on the real Workers runtime (workerd, through Miniflare's Node
// API) on 127.0.0.1, for tests and the local demo. Offline; no Cloudflare account needed.
//
//   node serve.mjs [--persist DIR] [--token SECRET] [--port N] [--script FILE] [--vars JSON]
//
// The bearer secret comes from --token or the TSLOCK_TOKEN environment variable; with
// neither, the Worker runs without one and answers 500 (as a deployment without the
// wrangler secret would). Prints exactly one line, "READY <url>", once requests can be
// served, and stops cleanly on SIGTERM or SIGINT. --script runs another Worker module in
// place of index.js with the same bindings (tests use it to start an older release).

import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";

// Must not be newer than the bundled workerd build; the same date is in wrangler.jsonc.
const COMPATIBILITY_DATE = "2025-04-01";

const here = dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({
  options: {
    persist: { type: "string" },
    token: { type: "string" },
    port: { type: "string", default: "0" },
    script: { type: "string" },
    // Worker variables as a JSON object of strings, as wrangler.jsonc's "vars" sets them.
    vars: { type: "string" },
  },
});

const token = values.token ?? process.env.TSLOCK_TOKEN ?? "";
const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`serve.mjs: --port must be an integer from 0 to 65535, got ${values.port}`);
  process.exit(2);
}

const script = values.script ? resolve(values.script) : join(here, "index.js");
const mf = new Miniflare({
  modules: true,
  scriptPath: script,
  // Module names are paths from here; a --script elsewhere must not need "..".
  modulesRoot: dirname(script),
  // As wrangler does: every .js module of the Worker is an ES module.
  modulesRules: [{ type: "ESModule", include: ["**/*.js"] }],
  compatibilityDate: COMPATIBILITY_DATE,
  // Without this Miniflare fetches request.cf data from Cloudflare at start-up.
  cf: false,
  host: "127.0.0.1",
  port,
  bindings: { ...(values.vars ? JSON.parse(values.vars) : {}), ...(token ? { TSLOCK_TOKEN: token } : {}) },
  durableObjects: {
    LOCKS: { className: "LockObject", useSQLite: true },
    LOCK_INDEX: { className: "LockIndex", useSQLite: true },
  },
  durableObjectsPersist: values.persist ? values.persist : false,
});

let stopping = false;
async function stop(signal) {
  if (stopping) return;
  stopping = true;
  try {
    await mf.dispose();
  } catch (err) {
    console.error(`serve.mjs: error while stopping after ${signal}:`, err);
    process.exit(1);
  }
  process.exit(0);
}
process.on("SIGTERM", () => stop("SIGTERM"));
process.on("SIGINT", () => stop("SIGINT"));

try {
  const url = await mf.ready;
  process.stdout.write(`READY ${url.href.replace(/\/$/, "")}\n`);
} catch (err) {
  console.error("serve.mjs: the Workers runtime did not start:", err);
  process.exit(1);
}
