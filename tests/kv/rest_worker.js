// Test-only Worker: the Cloudflare KV REST API path shape in front of a real KV binding.
//
// Miniflare runs the real Workers KV implementation but does not serve the Cloudflare
// REST API. This Worker translates the few REST calls the Python client makes
// (GET/PUT/DELETE .../values/{key}, GET .../keys) into binding calls and answers with
// Cloudflare's JSON envelope, so the Python client can be tested end to end.
// Bindings: KV (the namespace), ACCOUNT_ID, NAMESPACE_ID, API_TOKEN (plain text vars).

const ROUTE = /^\/client\/v4\/accounts\/([^/]+)\/storage\/kv\/namespaces\/([^/]+)\/(?:(keys)|values\/([^/]*))$/;

function envelope(result, extra = {}) {
  return Response.json({ success: true, errors: [], messages: [], result, ...extra });
}

function failure(status, code, message) {
  return Response.json({ success: false, errors: [{ code, message }], messages: [], result: null }, { status });
}

// The binding throws errors such as "KV PUT failed: 400 Invalid expiration_ttl of 30. ...":
// keep the status and the text, as the REST API would answer them.
function fromBindingError(err) {
  const match = /failed: (\d{3}) (.*)$/s.exec(String(err && err.message));
  if (match) return failure(Number(match[1]), 10000 + Number(match[1]), match[2]);
  return failure(500, 10001, String(err && err.message));
}

async function handle(request, env) {
  const url = new URL(request.url);
  const route = ROUTE.exec(url.pathname);
  if (!route) return failure(404, 7003, "No route for that URI");
  if (request.headers.get("Authorization") !== `Bearer ${env.API_TOKEN}`) {
    return failure(401, 10000, "Authentication error");
  }
  if (decodeURIComponent(route[1]) !== env.ACCOUNT_ID || decodeURIComponent(route[2]) !== env.NAMESPACE_ID) {
    return failure(404, 10013, "namespace not found");
  }
  if (route[3]) {
    if (request.method !== "GET") return failure(405, 10000, "method not allowed");
    const limit = Number(url.searchParams.get("limit") ?? "1000");
    if (!Number.isInteger(limit) || limit < 10 || limit > 1000) {
      return failure(400, 10021, `Invalid key_count_limit of ${url.searchParams.get("limit")}`);
    }
    const listed = await env.KV.list({
      prefix: url.searchParams.get("prefix") ?? undefined,
      cursor: url.searchParams.get("cursor") || undefined,
      limit,
    });
    const result = listed.keys.map((k) => {
      const item = { name: k.name };
      if (k.expiration !== undefined) item.expiration = k.expiration;
      if (k.metadata !== undefined && k.metadata !== null) item.metadata = k.metadata;
      return item;
    });
    const cursor = listed.list_complete ? "" : listed.cursor;
    return envelope(result, { result_info: { count: result.length, cursor } });
  }
  const key = decodeURIComponent(route[4]);
  if (request.method === "GET") {
    const value = await env.KV.get(key, "arrayBuffer");
    if (value === null) return failure(404, 10009, "get: 'key not found'");
    return new Response(value, { headers: { "content-type": "application/octet-stream" } });
  }
  if (request.method === "DELETE") {
    await env.KV.delete(key);
    return envelope(null);
  }
  if (request.method === "PUT") {
    const options = {};
    const ttl = url.searchParams.get("expiration_ttl");
    if (ttl !== null) options.expirationTtl = Number(ttl);
    let value;
    if ((request.headers.get("content-type") ?? "").startsWith("multipart/form-data")) {
      const form = await request.formData();
      value = form.get("value");
      if (value === null) return failure(400, 10021, "multipart body without a 'value' part");
      if (typeof value !== "string") value = await value.arrayBuffer();
      const metadata = form.get("metadata");
      if (metadata !== null) {
        try {
          options.metadata = JSON.parse(typeof metadata === "string" ? metadata : await metadata.text());
        } catch {
          return failure(400, 10021, "metadata is not valid JSON");
        }
      }
    } else {
      value = await request.arrayBuffer();
    }
    await env.KV.put(key, value, options);
    return envelope({});
  }
  return failure(405, 10000, "method not allowed");
}

export default {
  async fetch(request, env) {
    try {
      return await handle(request, env);
    } catch (err) {
      return fromBindingError(err);
    }
  },
};
