"""The recorded order of what reached the page and what the agent observed, kept in a replay.

A recording's page received things unasked while the agent looked at it — a socket's push, a
long-poll's or a held fetch's response, a stream's next chunk — and each came either before an
observation read the page or after it. Equal delays in the replay do not keep that order when the two
were tenths of a second apart (a loaded machine shifts the observation or the push a little,
and a timer's line then shows one reading early or late). The recorded timestamps say which
came first, so a replay keeps the order explicitly:

* a delivery recorded after observation *k* read the page is **held** until the replay has
  taken observation *k* (:meth:`Turns.turn`);
* observation *k* is **taken only after** every delivery recorded before it read the page has
  reached the page (:meth:`Turns.awaited`; the pacer waits for them, then for the page to show
  them).

An observation's moment is when its tree read saw the page: the read's start
(``steps.started_at``) plus ``mmina.replayer.pace.SNAPSHOT_S``. Each delivery has a *slot*: the
number of recorded observations before it (slot 0: before the first). A delivery of slot *s*
waits for the replay's observation *s − 1*, and observation *s* waits for every delivery of slot
*s* or lower that is on its way. What is on its way is what the replay knows it will deliver
(:meth:`Turns.expect`: a socket's next message, a response it holds, a stream's next chunk) with
the moment it expects to; a delivery overdue by more than ``OVERDUE_S`` *of the page's time* is
not waited for (a stream the page abandoned), and nothing is waited for past the observation's
own bound (the pacer's).

**Overdue on the page's time.** A paced replay's page time (τ, ``mmina.replayer.timeline``)
stands still wherever the replay is slower than its recording — a response served late, an
observation waiting at its moment for what the recording's page had by then — and what the page
times from its clock (a stream's next chunk) comes that much later on the machine's clock. So
how late a delivery is counts the machine's seconds since it was due *less* those in which τ
stood still since its due moment was reckoned (:attr:`Expected.stood`, against the stall account
``Turns`` is given: ``Timeline.stood_still``): a loaded replay whose stream reaches the page over
3 s where it took 0.3 s is waited for, as its page's time stood still meanwhile (an observation
waiting for it holds τ at its moment, so while it waits the chunk grows no later), while a
stream the page abandoned is given up on once the page's time has run ``OVERDUE_S`` past it.
Without a timeline the page's time is the machine's, and lateness is counted on it.

**A request asked earlier than recorded.** A fetch's or XHR's answer has the slot it arrived in
when recorded, but is never held for more observations after the moment the replay's page asks
than the recorded exchange spanned (asked and answered before the same observation: none). A
replay's page may ask in an earlier turn than the recording's did: the archive answers repeats
first in, first out, so a page that asks more often than recorded — one the back-forward cache
restored when recorded and that the replay loads again — is handed the answers of later turns.
Held for those turns, the page would be observed still waiting for them (a shop's stock line "?"
for the rest of the episode); answered as promptly as recorded, it shows what the recording
showed. An answer is never moved later than its recorded slot, so a replay that asks late keeps
the recorded order.

The two sides run on different threads: deliveries on the browser's event loop, observations
on the episode's thread. Waits are bounded on both sides (``TURN_MAX_S``), so a replay that
stops observing (an error) never holds the page's traffic for long.
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace

OVERDUE_S = 2.0
"""A delivery this late on the page's time is not coming (a stream the page abandoned):
observations stop waiting for it (see the module)."""
TURN_MAX_S = 60.0
"""No delivery is held longer than this for an observation (an episode that stopped observing)."""


@dataclass(frozen=True)
class Expected:
    """A delivery on its way: its slot, when (``time.monotonic()``) it is due, and when the
    recording received it (wall-clock seconds, if known)."""

    slot: int
    due: float
    recorded: float | None = None
    on_page: bool = False
    """It waits for something the page has not said yet (a socket's reply to a page message):
    ``due`` is only when the page is given up on, and the page's own work may have to run first."""
    stood: float | None = None
    """How long the page's time had stood still when ``due`` was reckoned (``Turns.stood``;
    None: when it was expected): its lateness leaves out the page's standing since."""


class Turns:
    """The order of one replayed episode's deliveries and observations (see the module)."""

    def __init__(self, observed_at: Sequence[float], stood: Callable[[], float] | None = None) -> None:
        self._observed = sorted(observed_at)
        """When each recorded observation read the page (wall-clock seconds, as the recording's traffic is timed)."""
        self._stood = stood
        """How long the page's time has stood still so far (real seconds: ``Timeline.stood_still``;
        None: it never stands, the page's time is the machine's)."""
        self.taken = 0
        """Observations the replay has taken."""
        self._lock = threading.Lock()
        self._expected: dict[Hashable, Expected] = {}
        self.delivered_at: float | None = None
        """When the last delivery since the last observation reached the page (``time.monotonic()``)."""
        self.recorded_gap: float | None = None
        """How long the recording's page had between that delivery and the next observation (None: unknown)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[asyncio.Event] = set()
        self._listeners: list[Callable[[], None]] = []

    def stood(self) -> float:
        """How long the page's time has stood still so far (real seconds; 0 without a timeline)."""
        return self._stood() if self._stood is not None else 0.0

    def late(self, expected: Expected, now: float, stood: float | None = None) -> float:
        """How late ``expected`` is at ``now`` (``time.monotonic()``) on the page's time: the
        seconds since it was due, less those the page's time stood still since it was reckoned
        (``stood``: :meth:`stood` read already)."""
        since = 0.0 if expected.stood is None else (self.stood() if stood is None else stood) - expected.stood
        return now - expected.due - max(0.0, since)

    def slot(self, recorded_at: float) -> int:
        """The slot of a delivery recorded at ``recorded_at`` (wall-clock seconds)."""
        return bisect.bisect_right(self._observed, recorded_at)

    def answer_slot(self, asked_at: float | None, arrived_at: float) -> int:
        """The slot of a response the replay's page asks for now, recorded as asked at ``asked_at``
        and received at ``arrived_at`` (wall-clock seconds): its recorded slot, but never more
        observations after the replay's present than it spanned when recorded (see the module)."""
        recorded = self.slot(arrived_at)
        if asked_at is None:
            return recorded
        return min(recorded, self.taken + recorded - self.slot(asked_at))

    # ------------------------------------------------------------ the browser's loop

    async def turn(self, slot: int) -> None:
        """Return once a delivery of ``slot`` may reach the page (at most ``TURN_MAX_S`` later)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        deadline = loop.time() + TURN_MAX_S
        while self.taken < slot and loop.time() < deadline:
            event = asyncio.Event()
            self._waiting.add(event)  # before the next look at ``taken``: a wake-up cannot be missed
            try:
                await asyncio.wait_for(event.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                return
            finally:
                self._waiting.discard(event)

    def may_deliver(self, slot: int) -> bool:
        """Whether a delivery of ``slot`` may reach the page now."""
        return slot <= self.taken

    def on_turn(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` on the browser's loop whenever an observation was taken (a socket's
        player then looks whether its next message may go)."""
        self._loop = asyncio.get_running_loop()
        self._listeners.append(listener)

    def expect(
        self,
        key: Hashable,
        slot: int,
        due: float,
        recorded: float | None = None,
        on_page: bool = False,
        stood: float | None = None,
    ) -> None:
        """A delivery (``key``: its source) is on its way, due at ``due`` (received by the recording
        at ``recorded``; ``on_page``: once the page has said something; ``stood``: the page's
        standing when ``due`` was reckoned, default now; see :class:`Expected`); replaces the
        source's last."""
        expected = self._stamped(Expected(slot, due, recorded, on_page, stood))
        with self._lock:
            self._expected[key] = expected

    def _stamped(self, expected: Expected) -> Expected:
        """``expected`` with its ``stood`` read now if it has none (outside the lock: the timeline
        takes its own)."""
        return expected if expected.stood is not None else replace(expected, stood=self.stood())

    def delivered(
        self, key: Hashable, now: float, more: Expected | None = None, recorded: float | None = None
    ) -> None:
        """``key``'s delivery reached the page at ``now``; ``more``: its source's next one, if any;
        ``recorded``: when the recording received it (default: as expected)."""
        more = self._stamped(more) if more is not None else None
        with self._lock:
            expected = self._expected.pop(key, None)
            if more is not None:
                self._expected[key] = more
            recorded = recorded if recorded is not None else expected.recorded if expected else None
            self.delivered_at = now
            self.recorded_gap = (
                self._observed[self.taken] - recorded
                if recorded is not None and self.taken < len(self._observed)
                else None
            )

    def dropped(self, key: Hashable) -> None:
        """``key`` will deliver nothing more (its socket closed, its stream was cancelled)."""
        with self._lock:
            self._expected.pop(key, None)

    # ------------------------------------------------------------ the episode's thread

    def awaited(self, index: int, now: float, until: float) -> float | None:
        """When the next delivery observation ``index`` must wait for is due (None: nothing to
        wait for): one of its slot or lower, due by ``until`` and not overdue (late by more than
        ``OVERDUE_S`` on the page's time, see the module)."""
        return min((e.due for e in self._awaited(index, now, until)), default=None)

    def awaits_page(self, index: int, now: float, until: float) -> bool:
        """Whether a delivery observation ``index`` waits for (see :meth:`awaited`) waits for the
        page to say something first (``Expected.on_page``)."""
        return any(e.on_page for e in self._awaited(index, now, until))

    def _awaited(self, index: int, now: float, until: float) -> list[Expected]:
        with self._lock:
            due = [e for e in self._expected.values() if e.slot <= index and e.due <= until]
        stood = self.stood()
        return [e for e in due if self.late(e, now, stood) <= OVERDUE_S]

    def observed(self, index: int) -> None:
        """The replay took observation ``index``: deliveries of the next slot may go."""
        with self._lock:
            self.taken = max(self.taken, index + 1)
            self.delivered_at = self.recorded_gap = None
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._wake)
            except RuntimeError:
                pass  # the loop was closed meanwhile: nothing waits on it any more

    def _wake(self) -> None:
        for event in list(self._waiting):
            event.set()
        for listener in self._listeners:
            listener()
