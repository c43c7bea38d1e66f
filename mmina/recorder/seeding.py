"""``Math.random`` and ``crypto.getRandomValues`` seeded per episode, in a recording and in
its replay alike.

A page that draws random numbers (an id, a shuffled list, a "lucky number", a request id from
``crypto.randomUUID()``) shows and sends what it drew; drawn from generators seeded by the
episode, the recording and its replay (which uses the source episode's seed) draw the same
numbers in the same order, where an unseeded recording could never be reproduced. Each document
restarts the sequences from the seed; ``crypto``'s also depends on the document's URL and
history length (the same in the replay), so that two pages of an episode do not send the same
``crypto.randomUUID()`` (an idempotency key, a request id) to a live server (a URL holding a
secret is replayed redacted, so its page draws other ids). It is a stream of its own, so
``Math.random`` draws what it drew before ``crypto`` was seeded (stores recorded then replay
the same). Web Workers and ``crypto.subtle`` keys are not seeded: a browser under evaluation
needs reproducible pages, not secrets, but nothing in it should be used for real credentials.
"""
from __future__ import annotations

import hashlib

from playwright.async_api import BrowserContext

DOCUMENT_ID = "__mminaDocument"
"""A global naming the document, drawn unseeded before ``crypto`` is seeded: mmina's own
scripts tell documents apart by it (every document of an episode draws the same seeded ids)."""

SEEDED_RANDOM = """(() => {
  let state = %(seed)d >>> 0;
  Math.random = function random() {
    state = (state + 0x6D2B79F5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  if (typeof Crypto === "undefined") return;
  let drawn = (state ^ 0x9E3779B9) >>> 0;
  const place = location.href + "#" + history.length;  // the same in a recording and its replay
  for (let i = 0; i < place.length; i++) drawn = Math.imul(drawn ^ place.charCodeAt(i), 16777619) >>> 0;
  const word = () => {
    drawn = (drawn + 0x6D2B79F5) >>> 0;
    let t = drawn;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
  const native = Crypto.prototype.getRandomValues;
  Object.defineProperty(globalThis, "%(document)s", {value: native.call(crypto, new Uint32Array(2)).join("-")});
  const getRandomValues = function getRandomValues(array) {
    if (!ArrayBuffer.isView(array) || array instanceof DataView || array instanceof Float32Array ||
        array instanceof Float64Array || array.byteLength > 65536) {
      return native.call(this, array);  // the browser's own error for what it refuses
    }
    const bytes = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
    for (let i = 0; i < bytes.length; i += 4) {
      const value = word();
      for (let j = 0; j < 4 && i + j < bytes.length; j++) bytes[i + j] = (value >>> (8 * j)) & 255;
    }
    return array;
  };
  Crypto.prototype.getRandomValues = getRandomValues;
  if (Crypto.prototype.randomUUID) {
    Crypto.prototype.randomUUID = function randomUUID() {
      const b = getRandomValues.call(this, new Uint8Array(16));
      b[6] = (b[6] & 0x0f) | 0x40;
      b[8] = (b[8] & 0x3f) | 0x80;
      const hex = Array.from(b, x => x.toString(16).padStart(2, "0")).join("");
      return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
    };
  }
})();"""
"""mulberry32, restarted from the same seed in every document: one stream for ``Math.random``
(unchanged since stores were first seeded) and one for ``crypto.getRandomValues`` and
``crypto.randomUUID`` (a version-4 UUID from 16 drawn bytes)."""


def seed_for(text: str) -> int:
    """A 32-bit seed derived from a stable name (an episode id)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


async def seed_random(context: BrowserContext, seed: int) -> None:
    """Seed ``Math.random`` and ``crypto`` in every document of ``context`` (before any page opens)."""
    await context.add_init_script(SEEDED_RANDOM % {"seed": seed, "document": DOCUMENT_ID})
