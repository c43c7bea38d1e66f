"""An endpoint's faults are the endpoint's: calls held through its outages, and only as many in
flight as it takes.

One :class:`EndpointGate` per endpoint and process, on the model client's event loop, is shared
by every call to that endpoint (``mmina.models.model_client``). It does two things:

* **Outages.** A call that failed for the endpoint's sake once its client's own retries were
  spent (no connection, a timeout of an attempt, 5xx, 429) does not fail: the endpoint is marked
  down and the call waits and tries again, with backoff (1 s doubling to ``MAX_BACKOFF_S``),
  or at once when another call got an answer. Calls that start while it is down wait the same
  way instead of adding to the storm. The endpoint gets ``patience_s`` from the moment it went
  down (``--endpoint-patience``); then every call waiting on it fails with
  :class:`EndpointUnavailable`, which a run takes as the signal to stop cleanly (its episode is
  not stored; ``--resume`` records it later). With no patience (0) a call fails as before.
* **Rate limits.** Every 429 an attempt gets (the client's own retries included) halves how
  many calls may be in flight (never below 1); every answer adds back ``1/limit`` (additive
  increase, multiplicative decrease, as TCP does), until the limit is lifted altogether. So a
  run at ``--concurrency 64`` against a server that serves 8 settles near 8 instead of failing.

Each call keeps a :class:`Tally` (retries, 429s, seconds waited) that goes with its reply to its
step and the run's summary; the gate keeps the same counts for the endpoint, and its outages.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from mmina.errors import MminaError

FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
CEILING = 256.0
"""A limit grown back past this many calls in flight is lifted (the endpoint limits no more)."""


class EndpointUnavailable(MminaError):
    """The endpoint did not answer for the run's whole patience: not the agent's failure."""

    infrastructure = True


@dataclass
class Tally:
    """What one call went through at its endpoint (for its step and the run's summary)."""

    retries: int = 0
    limited: int = 0
    waited_s: float = 0.0
    backoff_s: float = FIRST_BACKOFF_S
    answers_seen: int | None = None
    """The gate's count of answers when this call last failed (None: it has not failed)."""
    own: bool = False
    """Whether its last failure was the request's own: the endpoint answered other calls since it
    failed before (see :meth:`EndpointGate.failed`)."""


@dataclass
class EndpointGate:
    """The shared state of one endpoint (see the module)."""

    patience_s: float
    limit: float = math.inf
    in_flight: int = 0
    down_since: float | None = None
    outages: int = 0
    answers: int = 0
    """Answers to any call so far (a call failing again after others were answered failed on its own)."""
    totals: Tally = field(default_factory=Tally)
    _changed: asyncio.Condition | None = None

    @property
    def changed(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """A place among the calls in flight (as many as the limit allows)."""
        async with self.changed:
            await self.changed.wait_for(self._has_room)
            self.in_flight += 1
        try:
            yield
        finally:
            async with self.changed:
                self.in_flight -= 1
                self.changed.notify_all()

    def _has_room(self) -> bool:
        return self.limit == math.inf or self.in_flight < max(1, int(self.limit))

    async def ready(self, tally: Tally, what: str) -> None:
        """Return when a call may go to the endpoint: at once while it is up; while it is down,
        after this call's backoff or as soon as another call got an answer. Raises
        :class:`EndpointUnavailable` once the endpoint has been down for the whole patience."""
        loop = asyncio.get_running_loop()
        if self.down_since is None:
            return
        left = self.down_since + self.patience_s - loop.time()
        if left <= 0:
            raise EndpointUnavailable(
                f"{what} gave no answer for {self.patience_s:g} s (--endpoint-patience)"
            )
        started = loop.time()
        async with self.changed:
            try:
                await asyncio.wait_for(
                    self.changed.wait_for(lambda: self.down_since is None), min(tally.backoff_s, left)
                )
            except TimeoutError:
                pass  # this call's turn to try again
        waited = loop.time() - started
        tally.waited_s += waited
        self.totals.waited_s += waited
        tally.backoff_s = min(tally.backoff_s * 2, MAX_BACKOFF_S)

    def failed(self, tally: Tally, limited: bool) -> bool:
        """A call failed for the endpoint's sake (``limited``: it was refused with 429); whether it
        should wait and try again. Not without patience, and not when it failed before and the
        endpoint answered other calls since: then the failure is this request's own (a prompt
        that makes the server fail), which waiting does not mend. A 429 always waits."""
        tally.retries += 1
        self.totals.retries += 1
        own = tally.own = tally.answers_seen is not None and self.answers > tally.answers_seen and not limited
        tally.answers_seen = self.answers
        if self.patience_s <= 0 or own:
            return False
        if self.down_since is None:
            self.down_since = asyncio.get_running_loop().time()
            self.outages += 1
        return True

    def attempted(self, tally: Tally, status: int) -> None:
        """One attempt's outcome as the HTTP client saw it: each 429 or 5xx counts as a retry (the
        client retries it; a call that fails for good counts once more, in :meth:`failed`), each
        429 halves the limit, each answer grows it back and ends an outage."""
        if 200 <= status < 300:
            self._answered()
            return
        if status != 429 and status < 500:
            return
        tally.retries += 1
        self.totals.retries += 1
        if status == 429:
            tally.limited += 1
            self.totals.limited += 1
            self.limit = max(1.0, min(self.limit, max(self.in_flight, 1)) / 2)

    def _answered(self) -> None:
        self.answers += 1
        if self.limit != math.inf:
            self.limit = self.limit + 1 / self.limit
            if self.limit > CEILING:
                self.limit = math.inf
        if self.down_since is not None:
            self.down_since = None
            asyncio.get_running_loop().create_task(self._wake())

    async def _wake(self) -> None:
        async with self.changed:
            self.changed.notify_all()


_GATES: dict[tuple[str, float], EndpointGate] = {}


def gate_for(endpoint: str, patience_s: float) -> EndpointGate:
    """The gate of ``endpoint`` in this process (one per patience: a judge and an agent at the
    same endpoint may have different ones). Called on the model client's event loop only."""
    return _GATES.setdefault((endpoint, patience_s), EndpointGate(patience_s))
