// Text and bytes every module of the Worker shares: UTF-8, SHA-256 digests, random
// tokens, the code point order names sort in, and how a value is quoted in an error.

export const encoder = new TextEncoder();

export async function sha256(text) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(text)));
}

export function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function newToken() {
  return hex(crypto.getRandomValues(new Uint8Array(16)));
}

// Names in code point order (SQLite's order for TEXT): JS "<" compares UTF-16 units,
// which puts U+E000..U+FFFF above astral characters. At the first differing unit, move
// the surrogates above the rest of the BMP and compare.
export function compareNames(a, b) {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codeUnitRank(x) - codeUnitRank(y);
  }
  return a.length - b.length;
}

function codeUnitRank(unit) {
  if (unit >= 0xe000) return unit - 0x800;
  if (unit >= 0xd800) return unit + 0x2000;
  return unit;
}

// A value as an error message quotes it: JSON-escaped, cut after 40 characters.
export function shown(text) {
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}...` : text);
}
