"""The recording's time in a replay: one position on the recorded timeline, shared by the page
clock, the router and the pacer.

A replay that is slower than its recording somewhere (a large script served late on a loaded
machine, a page that parses it slower) must not show the page a later time than the recording's
page saw: a dashboard stamps "Last updated 12:04:31" when its data arrives, a table prints
"5 seconds ago" when it renders. So a paced replay keeps a position τ on the recorded timeline
(seconds since the recorded episode's start) that runs at the speed of real time **up to a
cap**: the earliest recorded moment the replay has not reached yet —

* the recorded arrival of a response the page is waiting for (:meth:`Timeline.hold`, lifted once
  the page has it),
* the moment of the next recorded observation (held until it is taken),
* the moment the recording's page asked for the next request the replay's page has not asked
  for yet (:meth:`Timeline.expect`, :meth:`Timeline.arrived`): a page slower to parse a script
  than the recording's asks later, and its time waits for it.

Where the replay is late, τ stands at the cap (the page's clock stands still, timers included)
until the replay catches up; then τ goes on from there. τ never goes backwards, and never passes
a moment the replay has not reached, so at every delivery and observation the page reads the
time the recording's page read then (to the milliseconds the browser takes to hand it over).

The page's clock follows τ (``mmina.replayer.page_clock``); the router holds each response until
τ reaches its recorded arrival (``ArchiveRouter``); the pacer sends each action when τ reaches its
recorded moment and takes each observation at its recorded moment (``mmina.replayer.pace``).

A cap holds τ for a bounded time of real time once τ reached it: ``CAP_MAX_S`` for a response or
an observation (a caller that failed before lifting it must not freeze the page for good), and
``EXPECTED_MAX_S`` for a request the page has not asked for (one the replay's page never makes
must not hold the replay long). τ then goes on from the cap (no jump).

What the page waits for that is due just past a request's cap (by at most ``GRACE_S``) may be
what makes it ask — its own timer set a few milliseconds later on τ than the recording's, an
answer recorded as arriving a millisecond after the page asked for the next hop of a redirect —
so it still comes while τ stands there: the page's clock runs such a timer
(``mmina.replayer.page_clock``), and :meth:`Timeline.reach` with a ``grace`` (the router's hold
of an answer) ends once τ has stood there ``GRACE_STOOD_S``. Without that, τ stood
``EXPECTED_MAX_S`` each time, and the endpoint's later requests held nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

CAP_MAX_S = 30.0
"""A response's or an observation's cap holds τ for at most this long in real time."""
EXPECTED_MAX_S = 2.0
"""A request the page has not asked for holds τ at its recorded moment for at most this long."""
GRACE_S = 0.1
"""What the page waits for that is due at most this long past the recorded moment of a request it
has not asked for yet still comes while τ stands there (a timer, a held response): it may be what
makes the page ask (see the module)."""
GRACE_STOOD_S = 0.2
"""... once τ has stood there this long in real time (a page merely slower to ask than the
recording's has asked by then, mostly, and its response comes at its own moment)."""
POLL_S = 0.02
"""How often a wait whose target lies past a cap held by someone else looks again."""


@dataclass
class _Cap:
    at: float
    """The recorded moment τ may not pass (seconds since the recorded start)."""
    limit: float
    """How long (real seconds) it holds τ once τ reached it."""
    reached: float | None = None
    """When (real time) τ reached it."""
    awaited: bool = False
    """A response the page's loading waits on (a document, script, style or image): until the page
    has it, a ``yields`` cap before its moment holds τ no longer."""
    yields: bool = False
    """Holds nothing while the page waits for an ``awaited`` response held for a later moment (the
    page may need that one first: a request it has not asked for yet, an action's dispatch that
    waits for the navigation it started)."""
    window: bool = False
    """The end of the replayed input's window (an action's dispatch): until it is lifted, no request
    expected before it holds τ — the page asks for them as the replayed input reaches it, and the
    input's own cap bounds the page's time meanwhile."""
    keys: bool = False
    """A ``window`` whose input goes on with keys (typing): not lifted with the page's data (the
    later keys must reach the page at the recorded time, see ``ArchiveRouter._resume``)."""
    releasing: bool = False
    """Its lift is under way (:meth:`Timeline.lifted_state`): it still holds τ, but what a page is
    told leaves it out."""


class Timeline:
    """The position on one recorded episode's timeline (see the module); safe from any thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._at = 0.0
        """τ at the anchor."""
        self._anchor = clock()
        """The real time of the anchor."""
        self._caps: dict[Hashable, _Cap] = {}
        self._expected: list[tuple[float, Hashable, Hashable]] = []
        """Recorded requests the page has not asked for yet: (recorded moment, key, group), by moment."""
        self._expecting: _Cap | None = None
        self._astray = False
        """A request the page was expected to ask for reached its limit unasked: the page left the
        recorded path, and nothing holds τ until it asks for a recorded request again."""
        self.version = 0
        """Counts the changes of the caps and jumps, so a page can tell newer news from older."""
        self._lowered: list[Callable[[], None]] = []
        self._changed: list[Callable[[], None]] = []
        self.stalled_s = 0.0
        """Real seconds τ stood still at a cap (how much slower than the recording the replay was)."""

    def begin(self) -> None:
        """τ is 0 now (the replayed episode starts, as the recorded one's start was taken)."""
        with self._lock:
            self._at, self._anchor = 0.0, self._clock()

    def now(self) -> float:
        """τ at this moment."""
        with self._lock:
            return self._advance(self._clock())

    def stood_still(self) -> float:
        """Real seconds τ has stood still at a cap so far (``stalled_s`` brought up to this moment):
        how much later than the recording's page the replay's page is at anything timed on its
        clock since then."""
        with self._lock:
            self._advance(self._clock())
            return self.stalled_s

    def cap(self) -> float:
        """The moment τ may not pass now (``math.inf``: none)."""
        with self._lock:
            self._advance(self._clock())
            return self._binding()[0]

    def state(self) -> tuple[float, float, int]:
        """(τ, cap, version) read together, for a page's clock (the cap left out of a lift under way)."""
        with self._lock:
            at = self._advance(self._clock())
            return at, self._binding(page=True)[0], self.version

    def lifted_state(self, *keys: Hashable) -> tuple[float, float, int, tuple[Hashable, float] | None]:
        """(τ, cap, version) as :meth:`state` reads them and :meth:`asked_next` once ``keys``' caps are
        lifted, τ standing still until then: what a page may be told before the lift. From now on
        their lift is under way: they hold τ until :meth:`lift`, but what any page is told leaves them
        out, under a newer version — news read meanwhile (a page's question answered, a lower cap
        pushed) would otherwise tell a page that took this news, under the same version, that its
        time stands at them again (a page busy with the response it was just handed hears no more
        until its work is done: it worked at a standing clock)."""
        with self._lock:
            at = self._advance(self._clock())
            caps = [cap for key in keys if (cap := self._caps.get(key)) is not None and not cap.releasing]
            for cap in caps:
                cap.releasing = True
            self.version += bool(caps)
            return at, self._binding(page=True)[0], self.version, self._asked_next(page=True)

    def inputs(self) -> list[Hashable]:
        """The input holds in place (``window`` caps: an action's replayed input not dispatched yet)
        that the page's data may lift: not one of keys."""
        with self._lock:
            return [key for key, cap in self._caps.items() if cap.window and not cap.keys]

    def asked_next(self) -> tuple[Hashable, float] | None:
        """Where the cap is the moment the recording's page asked for a request the page has not
        asked for yet: that request's group (its endpoint) and the cap once it is asked for, so a
        page may go on at once when it asks (a page that renders right after asking reads the time
        the recording's did, not the cap until the router heard it)."""
        with self._lock:
            self._advance(self._clock())
            return self._asked_next(page=True)

    def standing_at(self, key: Hashable) -> bool:
        """Whether τ stands at ``key``'s cap now (it reached it, and it holds)."""
        with self._lock:
            self._advance(self._clock())
            cap = self._caps.get(key)
            return cap is not None and cap.reached is not None and self._binding()[1] is cap

    def held_at(self, kind: str) -> float | None:
        """The earliest moment a cap of ``kind`` (its key's first item: ``observe``) holds τ at, if any."""
        with self._lock:
            return min(
                (c.at for key, c in self._caps.items() if isinstance(key, tuple) and key[:1] == (kind,)),
                default=None,
            )

    def on_lowered(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from whichever thread lowered it) when the cap comes down: a page
        whose clock runs up to the cap it knows must hear of a lower one at once."""
        self._lowered.append(listener)

    def on_changed(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from whichever thread) when a cap was lifted or a request arrived: a
        page standing at its cap hears at once that it may go on, not at its next look."""
        self._changed.append(listener)

    def hold(
        self,
        key: Hashable,
        at: float | None = None,
        limit: float = CAP_MAX_S,
        *,
        awaited: bool = False,
        yields: bool = False,
        window: bool = False,
        keys: bool = False,
    ) -> None:
        """τ may not pass ``at`` (None: where τ is now, read under the same lock, so it stands still
        from here) until :meth:`lift` ``(key)`` (or ``limit`` real seconds after it reached it);
        replaces ``key``'s cap. ``awaited``: it is a response the page's loading waits on, so no
        request expected before it holds τ meanwhile (see :meth:`expect`), nor a cap that
        ``yields`` (one that holds nothing while the page waits for such a response held for later);
        ``window``: no request expected before it holds τ meanwhile, ``keys``: its input types (see
        :class:`_Cap`)."""
        with self._lock:
            before = self._known()
            now = self._advance(self._clock())
            self._caps[key] = _Cap(
                now if at is None else at, limit, awaited=awaited, yields=yields, window=window, keys=keys
            )
            self.version += 1
            after = self._known()
            lowered = after[0] < before[0] or after[1] < before[1]
        if lowered:
            self._tell(self._lowered)

    @staticmethod
    def _tell(listeners: list[Callable[[], None]]) -> None:
        for listener in listeners:
            listener()

    def lift(self, key: Hashable) -> bool:
        """``key``'s cap no longer holds (its response reached the page, its observation was taken);
        whether τ stood at it (the page's clock stands there too, until it hears of this)."""
        with self._lock:
            self._advance(self._clock())
            cap = self._caps.pop(key, None)
            if cap is not None:
                self.version += 1
        if cap is not None:
            self._tell(self._changed)
        return cap is not None and cap.reached is not None

    def expect(self, requests: Iterable[tuple[Hashable, float, Hashable]]) -> None:
        """The recorded requests ``(key, moment asked, group)`` the page is expected to ask for
        (see the module). One that reaches its limit unasked takes its group with it (the page
        does not ask for that endpoint as the recording's did: its later repeats hold nothing),
        and until the page asks for a recorded request again, no other holds τ (a page that left
        the recorded path costs ``EXPECTED_MAX_S`` once, not once per request it does not make).

        Nor does one while the page waits for an ``awaited`` response held for a later moment: the
        browser may not ask before it has that one — a request on a document's or a stylesheet's
        content that the recording's page asked for as the body streamed in (a replay hands a body
        over whole, at the end of its recorded exchange), one behind a parser-blocking script, an
        image Chromium's scheduler holds back while styles and scripts load. Held there, τ never
        reached the held response's moment, and the page's time stood ``EXPECTED_MAX_S`` at every
        page of a server that streams its documents (Trac: 2 s at each of its six pages)."""
        with self._lock:
            self._expected = sorted(
                ((at, key, group) for key, at, group in requests), key=lambda item: item[0]
            )
            self._expecting = None
            self.version += 1

    def arrived(self, key: Hashable) -> None:
        """The page asked for the recorded request ``key``: it holds τ no longer."""
        with self._lock:
            self._advance(self._clock())
            index = next((i for i, (_at, k, _group) in enumerate(self._expected) if k == key), None)
            if index is None:
                return
            if self._astray:  # back on the recorded path: what it skipped meanwhile holds nothing
                del self._expected[:index]
                index, self._astray = 0, False
            del self._expected[index]
            if index == 0:
                self._expecting = None
            self.version += 1
        self._tell(self._changed)

    def advance_to(self, at: float) -> None:
        """τ jumps to ``at`` if it is behind (never backwards)."""
        with self._lock:
            self._advance(self._clock())
            jumped = at > self._at
            if jumped:
                self._at = at
                self.version += 1
        if jumped:
            self._tell(self._changed)

    def wait_until(self, at: float, sleep: Callable[[float], None] = time.sleep, grace: float = 0.0) -> None:
        """Block until τ reaches ``at`` (every cap ends: this ends); ``grace``: see :meth:`reach`."""
        while (left := self._left(at, grace)) > 0:
            sleep(left)

    async def reach(self, at: float, grace: float = 0.0) -> None:
        """Wait on the running event loop until τ reaches ``at``, or (``grace`` > 0) until τ has
        stood for ``GRACE_STOOD_S`` at the recorded moment of a request the page has not asked for
        yet that lies at most ``grace`` before ``at`` (``GRACE_S``: what the page waits for may be
        what makes it ask: the recording's timings put a redirect's next hop a millisecond before
        the hop before it ended)."""
        while (left := self._left(at, grace)) > 0:
            await asyncio.sleep(left)

    def _left(self, at: float, grace: float = 0.0) -> float:
        """How long to sleep before looking again whether τ reached ``at`` (0: it did, or stands
        within ``grace`` of it at a request's moment: see :meth:`reach`)."""
        with self._lock:
            real = self._clock()
            position = self._advance(real)
            cap, binding = self._binding()
            standing = (
                binding is not None
                and binding is self._expecting
                and binding.reached is not None
                and real - binding.reached >= GRACE_STOOD_S
            )
        if position >= at or (standing and at - cap <= grace):
            return 0.0
        return at - position if cap >= at else POLL_S

    # ------------------------------------------------------------ under the lock

    def _binding(self, page: bool = False) -> tuple[float, _Cap | None]:
        """The lowest cap ahead of τ (``math.inf``, None: none) and what it is: a moment τ has
        passed already (a response asked for late, an observation whose page needed time past
        the one before) holds nothing. ``page``: as a page is told it (a cap whose lift is under
        way left out)."""
        expecting = None if self._astray else self._first_expected()
        if expecting is not None and any(c.window and c.at > expecting.at for c in self._caps.values()):
            expecting = None  # asked for as the replayed input reaches it (see _Cap.window)
        awaited = max((c.at for c in self._caps.values() if c.awaited), default=-math.inf)
        caps = [
            c
            for c in (*self._caps.values(), *([expecting] if expecting else []))
            if c.at >= self._at
            and not (c.yields and awaited > c.at)  # the page may need that one first
            and not (page and c.releasing)
        ]
        lowest = min(caps, key=lambda c: c.at, default=None)
        return (lowest.at, lowest) if lowest is not None else (math.inf, None)

    def _known(self) -> tuple[float, float]:
        """What a page may know of the caps: the binding one, and how far it may run on what it
        knows — where the binding one is a request the page has not asked for, the cap after it (its
        own asking lifts it there: a new cap below that one is news too, although the binding one
        may stay or even rise, as when the new cap is an input's window)."""
        asked = self._asked_next(page=True)
        binding = self._binding(page=True)[0]
        return binding, asked[1] if asked is not None else binding

    def _asked_next(self, page: bool = False) -> tuple[Hashable, float] | None:
        _at, binding = self._binding(page)
        if binding is None or binding is not self._expecting:
            return None
        first = self._expected.pop(0)
        self._expecting = None
        try:
            return first[2], self._binding(page)[0]
        finally:
            self._expected.insert(0, first)
            self._expecting = binding

    def _first_expected(self) -> _Cap | None:
        """The cap of the first recorded request not asked for yet, if it lies ahead of τ (one
        behind it, passed while τ jumped, waited elsewhere or went on past it while it yielded,
        holds nothing)."""
        if self._expecting is not None and self._expecting.at < self._at:
            self._expecting = None
        if self._expecting is None:
            index = bisect.bisect_left([item[0] for item in self._expected], self._at)
            del self._expected[:index]
            if self._expected:
                self._expecting = _Cap(self._expected[0][0], EXPECTED_MAX_S, yields=True)
        return self._expecting

    def _advance(self, real: float) -> float:
        """Bring the anchor to ``real``: τ ran from it, stood at each cap it reached until the cap
        ended (a lift, or its limit), and went on from there; τ now."""
        while True:
            cap, holding = self._binding()
            ran = self._at + max(0.0, real - self._anchor)
            if ran < cap or holding is None:
                self._at, self._anchor = ran, real
                return ran
            if holding.reached is None:
                holding.reached = self._anchor + max(0.0, cap - self._at)
            ends = holding.reached + holding.limit
            stood_from = max(self._anchor, holding.reached)
            self._at = max(self._at, cap)
            if ends > real:
                self.stalled_s += max(0.0, real - stood_from)
                self._anchor = real
                return self._at
            self.stalled_s += max(0.0, ends - stood_from)
            self._anchor = ends
            self._drop(holding)

    def _drop(self, cap: _Cap) -> None:
        """``cap`` reached its limit: it holds no longer."""
        if cap is self._expecting:
            group = self._expected[0][2]
            self._expected = [item for item in self._expected if item[2] != group]
            self._expecting, self._astray = None, True
        else:
            self._caps = {k: c for k, c in self._caps.items() if c is not cap}
        self.version += 1
