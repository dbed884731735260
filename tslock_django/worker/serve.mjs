// Runs the tslock Worker on the real Workers runtime (workerd, through Miniflare's Node
// API) on 127.0.0.1, for tests and the local demo. Offline; no Cloudflare account needed.
//
//   node serve.mjs [--persist DIR] [--token SECRET] [--port N] [--script FILE] [--vars JSON]
//                  [--runtime DIR]
//
// The bearer secret comes from --token or the TSLOCK_TOKEN environment variable; with
// neither, the Worker runs without one and answers 500 (as a deployment without the
// wrangler secret would). Prints exactly one line, "READY <url>", once requests can be
// served, and stops cleanly on SIGTERM or SIGINT. --script runs another entry module in
// place of index.js with the same bindings (tests use it to start an older release, or a
// wrapper importing ./index.js from a copy of the Worker's modules).
//
// Miniflare is looked up in --runtime DIR (a folder holding node_modules), then next to
// this file (a development checkout after `npm ci`), then in the per-user cache where
// `python manage.py tslock runtime --install` puts it. The cache folder is
// $XDG_CACHE_HOME/tslock-django/worker-runtime/<first 16 hex digits of the SHA-256 of
// package-lock.json> (~/.cache when XDG_CACHE_HOME is unset or relative): the same rule
// as tslock_django/worker/runtime.py.

import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

// Must not be newer than the bundled workerd build; the same date is in wrangler.jsonc.
const COMPATIBILITY_DATE = "2025-04-01";
const INSTALL_COMMAND = "python manage.py tslock runtime --install";

const here = dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({
  options: {
    persist: { type: "string" },
    token: { type: "string" },
    port: { type: "string", default: "0" },
    script: { type: "string" },
    // Worker variables as a JSON object of strings, as wrangler.jsonc's "vars" sets them.
    vars: { type: "string" },
    runtime: { type: "string" },
  },
});

function cacheFolder() {
  const base = process.env.XDG_CACHE_HOME;
  const root = base && isAbsolute(base) ? base : join(homedir(), ".cache");
  const digest = createHash("sha256").update(readFileSync(join(here, "package-lock.json"))).digest("hex");
  return join(root, "tslock-django", "worker-runtime", digest.slice(0, 16));
}

async function loadMiniflare() {
  const folders = values.runtime ? [resolve(values.runtime)] : [here, cacheFolder()];
  for (const folder of folders) {
    let entry;
    try {
      entry = createRequire(join(folder, "package.json")).resolve("miniflare");
    } catch (err) {
      if (err?.code === "MODULE_NOT_FOUND") continue;
      throw err;
    }
    return (await import(pathToFileURL(entry).href)).Miniflare;
  }
  // One line instead of Node's ERR_MODULE_NOT_FOUND stack: say what to run.
  console.error(
    `serve.mjs: the local Workers runtime (miniflare) is not installed (looked in ${folders.join(", ")}); ` +
      `install it with \`${INSTALL_COMMAND}\` (in a clone of tslock-django: \`npm ci --prefix tslock_django/worker\`)`,
  );
  process.exit(3);
}

const token = values.token ?? process.env.TSLOCK_TOKEN ?? "";
const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`serve.mjs: --port must be an integer from 0 to 65535, got ${values.port}`);
  process.exit(2);
}

const Miniflare = await loadMiniflare();
const script = values.script ? resolve(values.script) : join(here, "index.js");
const mf = new Miniflare({
  modules: true,
  // The entry module; Miniflare follows its relative imports (the Worker's other modules,
  // beside it) and loads each one, as wrangler does when it bundles them for a deploy.
  scriptPath: script,
  // Module names are paths from the script's folder; without this they are relative to
  // the working directory, and workerd refuses a "../" name when started from elsewhere.
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
