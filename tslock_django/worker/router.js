// The front door: every request is authenticated (the bearer secret, compared in
// constant time) before anything else, its body and fields checked, and handed to the
// lock object of its name, the listing or the rebuild.

import { discardBody, readJson, reply } from "./answers.js";
import { layouts, lockObject } from "./layout.js";
import { listingReply, parseListing, queryLayout } from "./listing.js";
import { reportDelay } from "./lock_object.js";
import { reindex } from "./repair.js";
import { sha256 } from "./text.js";
import { optionalExpectation, optionalLockedBy, requireDurations, requireName, requireToken } from "./validation.js";

const PROTOCOL_VERSION = 1;

const ROUTES = {
  "/v1/health": "GET",
  "/v1/acquire": "POST",
  "/v1/extend": "POST",
  "/v1/unlock": "POST",
  "/v1/force-release": "POST",
  "/v1/locks": "GET",
  "/v1/reindex": "POST",
};

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

export async function route(request, env) {
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
