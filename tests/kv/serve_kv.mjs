// Start rest_worker.js under Miniflare on 127.0.0.1 with a free port and print
// "READY <url>" once it answers. Stops cleanly on SIGTERM / SIGINT.
//
// Usage: node serve_kv.mjs <dir with node_modules/miniflare> <account_id> <namespace_id> <api_token>
// Run it in its own process group and signal the group: workerd is a child process.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const [packageDir, accountId, namespaceId, apiToken] = process.argv.slice(2);
if (!packageDir || !accountId || !namespaceId || !apiToken) {
  console.error("usage: node serve_kv.mjs <package dir> <account_id> <namespace_id> <api_token>");
  process.exit(2);
}
const require = createRequire(join(resolve(packageDir), "package.json"));
const { Miniflare } = require("miniflare");
const here = dirname(fileURLToPath(import.meta.url));

const mf = new Miniflare({
  modules: true,
  script: readFileSync(join(here, "rest_worker.js"), "utf8"),
  compatibilityDate: "2025-04-01",
  kvNamespaces: ["KV"],
  kvPersist: false,
  bindings: { ACCOUNT_ID: accountId, NAMESPACE_ID: namespaceId, API_TOKEN: apiToken },
  host: "127.0.0.1",
  port: 0,
  cf: false,
});

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  try {
    await mf.dispose();
  } finally {
    process.exit(0);
  }
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);

const url = await mf.ready;
console.log(`READY ${url.href.replace(/\/$/, "")}`);
