"""``Math.random`` seeded per episode, in a recording and in its replay alike.

A page that draws random numbers (an id, a shuffled list, a "lucky number") shows what it drew;
drawn from a generator seeded by the episode, the recording and its replay (which uses the
source episode's seed) draw the same numbers in the same order, where an unseeded recording
could never be reproduced. Each document restarts the sequence from the seed.
"""
from __future__ import annotations

import hashlib

from playwright.async_api import BrowserContext

SEEDED_RANDOM = """(() => {
  let state = %d >>> 0;
  Math.random = function random() {
    state = (state + 0x6D2B79F5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
})();"""
"""mulberry32, restarted from the same seed in every document."""


def seed_for(text: str) -> int:
    """A 32-bit seed derived from a stable name (an episode id)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


async def seed_random(context: BrowserContext, seed: int) -> None:
    """Seed ``Math.random`` in every document of ``context`` (before any page opens)."""
    await context.add_init_script(SEEDED_RANDOM % seed)
