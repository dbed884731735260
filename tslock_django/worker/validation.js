// The fields of the lock routes' JSON bodies, checked: each function returns the value
// or throws BadRequest saying what is wrong and what is allowed.

import { BadRequest } from "./answers.js";
import { encoder } from "./text.js";

export const MAX_NAME_BYTES = 512;

const MAX_LOCKED_BY_CHARS = 255;

const MAX_TOKEN_CHARS = 256;

// About 100 years: keeps now + duration far inside the range of exact integers.
const MAX_DURATION_MS = 100 * 365 * 24 * 3600 * 1000;

const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;

export function requireName(body) {
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

export function requireDurations(body) {
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

export function requireToken(body) {
  const token = body.token;
  if (typeof token !== "string" || token.length === 0) {
    throw new BadRequest('"token" is required and must be a non-empty string');
  }
  if (token.length > MAX_TOKEN_CHARS) throw new BadRequest(`"token" is longer than ${MAX_TOKEN_CHARS} characters`);
  return token;
}

export function optionalLockedBy(body) {
  const lockedBy = body.locked_by ?? "";
  if (typeof lockedBy !== "string") throw new BadRequest('"locked_by" must be a string');
  // Count code points, as Python's len() does, so both sides agree on the limit.
  if ([...lockedBy].length > MAX_LOCKED_BY_CHARS) {
    throw new BadRequest(`"locked_by" is longer than ${MAX_LOCKED_BY_CHARS} characters`);
  }
  return lockedBy;
}

export function optionalExpectation(body) {
  const expected = {};
  if (body.fencing_token !== undefined && body.fencing_token !== null) {
    if (!Number.isInteger(body.fencing_token)) throw new BadRequest('"fencing_token" must be an integer');
    expected.fencingToken = body.fencing_token;
  }
  if (body.token !== undefined && body.token !== null) expected.token = requireToken(body);
  return expected;
}
