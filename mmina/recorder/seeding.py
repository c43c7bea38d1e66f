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
the same). ``crypto.subtle`` keys are not seeded: a browser under evaluation needs reproducible
pages, not secrets, but nothing in it should be used for real credentials.

**Three schemes** (``episodes.random_seeding``; a replay uses its source episode's, so a store
recorded before replays exactly as it did). ``1`` (:data:`PER_EPISODE`, stores before schema
version 10): one stream per document for ``Math.random`` and one for ``crypto``, so what a draw
gets depends on how many draws the page made before it — on load order and timing: a replayed
notebook page drew other ids than its recording. ``2`` (:data:`PER_CALL_SITE`): a stream per place
a draw is called from, named by the calling stack (the page's own frames: script URL, function,
line and column), so a draw gets the same value whatever other scripts drew before it or in
which order they ran. What still differs: a place drawn from more or fewer times before (a poll
that ran once more), and the draws past :data:`TURN_BUDGET` in one turn, which continue the
turn's last stream without reading their stack (a replay's clock may run several timers in one
turn where the recording ran each in its own). Under schemes 1 and 2 Web Workers are not seeded.
``3`` (:data:`WORKERS_TOO`): scheme 2 in documents, and every Web Worker, dedicated or shared, seeded
the same way before its own code runs (``web_workers.py``), its place named by its kind, its
script's URL and how many workers of that URL its page (a shared worker: its context) started
before it; a ``blob:`` URL is named without its random part, in the worker's place and in its
calling frames, as the browser draws that part anew in every document.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from playwright.async_api import BrowserContext

from mmina.recorder.web_workers import unblobbed, worker_scripts

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


PER_EPISODE = 1
"""One stream per document for ``Math.random`` and one for ``crypto`` (:data:`SEEDED_RANDOM`)."""
PER_CALL_SITE = 2
"""A stream per turn's first calling stack (:data:`SEEDED_BY_CALL_SITE`), in documents only."""
WORKERS_TOO = 3
"""Scheme 2 in documents and in Web Workers (:meth:`Seeding.worker_script`)."""
RECORDED_SEEDING = WORKERS_TOO
"""The scheme a new recording uses (read at each episode: ``python -m bench --only realweb`` sets it to
compare the schemes, ``MMINA_REALWEB_SEEDING``)."""
STACK_DEPTH = 10
"""Frames of the calling stack that name a draw's place (V8's default ``Error.stackTraceLimit``)."""
TURN_BUDGET = 256
"""Draws in one turn that each read their place; later ones in the turn continue the last one's stream."""

SEEDED_BY_CALL_SITE = """(() => {
  const hash = (h, text) => {
    for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619) >>> 0;
    return h;
  };
  const base = hash((%(seed)d ^ 0x9E3779B9) >>> 0, %(place)s);
  const mulberry = (state) => () => {
    state = (state + 0x6D2B79F5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
  const capture = Error.captureStackTrace;
  const scripted = /^[a-z][a-z0-9+.-]*:[^0-9]/i;  // http://..., blob:...; not <anonymous>:1:2 nor :370:30
  const located = (frame) => {  // where a frame is, without the names a caller gives it ("[as onopen]")
    const open = frame.lastIndexOf("(");
    if (frame.endsWith(")") && open >= 0) return frame.slice(open + 1, -1);
    return frame.slice(frame.indexOf("at ") + 3);
  };
  const place = (entry) => {  // the caller's stack, whatever limit or formatter the page set
    const limit = Error.stackTraceLimit, format = Error.prepareStackTrace, holder = {};
    try {
      Error.stackTraceLimit = %(depth)d;
      Error.prepareStackTrace = undefined;
      capture(holder, entry);
      // a frame without a URL is the browser's own or an injected script's (the replay's clock, its sockets,
      // Playwright's evaluate): only the page's own scripts name the place
      const frames = String(holder.stack).split("\\n").slice(1).map(located);
      return frames.filter(at => scripted.test(at)).join("\\n")%(unblob)s;
    } catch (error) {
      return "";
    } finally {
      Error.stackTraceLimit = limit;
      Error.prepareStackTrace = format;
    }
  };
  const streams = new Map();  // a place's key -> its stream
  const last = [null, null];  // this turn's last stream: Math.random's, crypto's
  let drawn = 0;  // draws this turn
  const defer = %(defer)s;
  const endTurn = () => { drawn = 0; last[0] = last[1] = null; };
  const draw = (kind, entry) => {
    if (drawn++ === 0) defer(endTurn);
    if (drawn > %(budget)d && last[kind] !== null) return last[kind];
    const key = hash((base ^ kind) >>> 0, place(entry));
    let stream = streams.get(key);
    if (stream === undefined) streams.set(key, stream = mulberry(key));
    return last[kind] = stream;
  };
  Math.random = function random() {
    return draw(0, random)() / 4294967296;
  };
  if (typeof Crypto === "undefined") return;
  const native = Crypto.prototype.getRandomValues;
  Object.defineProperty(globalThis, "%(document)s", {value: native.call(crypto, new Uint32Array(2)).join("-")});
  const fill = (array, entry) => {
    const word = draw(1, entry);
    const bytes = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
    for (let i = 0; i < bytes.length; i += 4) {
      const value = word();
      for (let j = 0; j < 4 && i + j < bytes.length; j++) bytes[i + j] = (value >>> (8 * j)) & 255;
    }
    return array;
  };
  Crypto.prototype.getRandomValues = function getRandomValues(array) {
    if (!ArrayBuffer.isView(array) || array instanceof DataView || array instanceof Float32Array ||
        array instanceof Float64Array || array.byteLength > 65536) {
      return native.call(this, array);  // the browser's own error for what it refuses
    }
    return fill(array, getRandomValues);
  };
  if (Crypto.prototype.randomUUID) {
    Crypto.prototype.randomUUID = function randomUUID() {
      const b = fill(new Uint8Array(16), randomUUID);
      b[6] = (b[6] & 0x0f) | 0x40;
      b[8] = (b[8] & 0x3f) | 0x80;
      const hex = Array.from(b, x => x.toString(16).padStart(2, "0")).join("");
      return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
    };
  }
})();"""
"""Scheme 2: a mulberry32 stream per place a draw is called from — the episode's seed, the
document's place (URL and history length) and the calling stack (:data:`STACK_DEPTH` frames of
the page's own scripts, each by its location alone: script URL, line and column; frames of scripts
without a URL, such as the replay's clock and socket, left out),
``Math.random`` and ``crypto`` apart. Reading the stack costs microseconds, so after
:data:`TURN_BUDGET` draws in one turn (a task and its microtasks) the turn's last stream serves
the rest: a loop of a million draws costs what scheme 1 costs."""


DOCUMENT_PLACE = 'location.href + "#" + history.length'
"""A document's place (the same in a recording and its replay)."""
UNBLOBBED = r'.replace(/\bblob:([a-z][a-z0-9+.-]*:\/\/[^\s\/]+)\/[0-9a-f-]{36}/gi, "blob:$1")'
"""Drops the random part of ``blob:`` URLs from a worker's calling frames (scheme 3)."""
WORKER_DEFER = "(task) => Promise.resolve().then(task)"
"""A turn's end in a worker: its script runs before the worker's global scope is complete, where
``queueMicrotask`` is not defined yet (nor ``location``, whose mere reading crashed the renderer in
Chromium 156: the worker's place is named from outside)."""


@dataclass(frozen=True)
class Seeding:
    """How a context's ``Math.random`` and ``crypto`` are seeded: the seed and the scheme."""

    seed: int
    scheme: int

    @classmethod
    def of(cls, name: str, scheme: int | None) -> Seeding:
        """Seeded by a stable name (an episode id) with ``scheme`` (a store's value: None before
        schema version 10, scheme 1)."""
        return cls(seed_for(name), scheme or PER_EPISODE)

    def script(self) -> str:
        """The init script that seeds a document."""
        if self.scheme == PER_EPISODE:
            return SEEDED_RANDOM % {"seed": self.seed, "document": DOCUMENT_ID}
        return self._by_call_site(DOCUMENT_PLACE, "", "queueMicrotask.bind(globalThis)")

    def worker_script(self, kind: str, url: str, ordinal: int) -> str | None:
        """The script that seeds a Web Worker (``kind``: ``worker`` or ``shared_worker``) of
        script ``url``, the ``ordinal``-th of that URL its page (or context) started; None under
        schemes 1 and 2, which left workers unseeded."""
        if self.scheme < WORKERS_TOO:
            return None
        place = f"{kind} {unblobbed(url)}#{ordinal}"
        return self._by_call_site(json.dumps(place), UNBLOBBED, WORKER_DEFER)

    def _by_call_site(self, place: str, unblob: str, defer: str) -> str:
        names = {
            "seed": self.seed,
            "document": DOCUMENT_ID,
            "depth": STACK_DEPTH,
            "budget": TURN_BUDGET,
            "place": place,
            "unblob": unblob,
            "defer": defer,
        }
        return SEEDED_BY_CALL_SITE % names


def recording_seeding(name: str) -> Seeding:
    """A new recording's seeding: seeded by ``name`` (its episode id), scheme :data:`RECORDED_SEEDING`."""
    return Seeding(seed_for(name), RECORDED_SEEDING)


def seed_for(text: str) -> int:
    """A 32-bit seed derived from a stable name (an episode id)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


async def seed_random(context: BrowserContext, seeding: Seeding) -> None:
    """Seed ``Math.random`` and ``crypto`` in every document of ``context`` (before any page opens),
    and under scheme 3 in every Web Worker (``web_workers.py``)."""
    await context.add_init_script(seeding.script())
    if seeding.scheme >= WORKERS_TOO:
        worker_scripts(context).add(lambda start: seeding.worker_script(start.kind, start.url, start.ordinal))
