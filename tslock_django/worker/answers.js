// Answers and request bodies: JSON replies, the errors the fetch handler turns into
// 400, 413 and 500 answers, and reading a body within MAX_BODY_BYTES.

// The largest valid request body is about 6.5 KiB (a 512-byte name and a 255-character
// locked_by, both \u-escaped as Python's json does): anything above this is refused unread.
export const MAX_BODY_BYTES = 16 * 1024;

export const JSON_HEADERS = { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" };

export function reply(status, body) {
  if (body.now_ms === undefined) body.now_ms = Date.now();
  return new Response(JSON.stringify(body), { status, headers: JSON_HEADERS });
}

// Bad input: answered 400 with the message.
export class BadRequest extends Error {}

// A request body past MAX_BODY_BYTES: answered 413.
export class TooLarge extends Error {}

// A Worker variable set to something unusable: answered 500 naming the variable.
export class ConfigError extends Error {}

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

export async function readJson(request) {
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

// An answer given without reading a small request body can make the runtime reset the
// connection, and the client's next request on it (keep-alive) then fails as a network
// error instead of getting its own answer; so such a body is read and dropped. Large or
// unsized ones are left alone: a refused caller gets no more of the Worker's time.
const DISCARDED_BODY_LIMIT = 64 * 1024;

export async function discardBody(request) {
  const size = Number(request.headers.get("content-length") || 0);
  if (size > 0 && size <= DISCARDED_BODY_LIMIT) {
    try {
      await request.arrayBuffer();
    } catch {
      // The client went away; nothing to answer.
    }
  }
}
