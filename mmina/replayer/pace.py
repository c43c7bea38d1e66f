"""The recorded pace: a replay gives the page the time it had in the recording.

A recording's page lives through the agent's thinking: between an observation and the action
the agent then chose, the page goes on (a loading bar ends, a toast goes, a timer updates a
line, a socket pushes a result). A replay whose stored actions come at once would act and
observe on a page that had no time, and see transient states the recording never saw — or
miss those it saw. So a replay of stored actions (:class:`PacedSteps`) keeps the recorded
timeline of each episode, measured from the episode's start (before its context opens, in
the recording and the replay alike):

* **an action** is sent no earlier than it was sent in the recording (``steps.acted_at``):
  the page gets the agent's thinking time, with its clock running. Not waited for: ``stop``,
  which does nothing to the page, and a thinking time during which the recorded page was
  *idle* — no request started from the observation to the action, in an episode without
  sockets or streams (nothing arrives unasked) — so a server-rendered site replays faster than
  it was recorded; what an idle page still does by itself (a toast going away) is waited for
  by the next observation, as below;
* **an observation** is taken as soon as the page shows what the recording observed (URL and
  accessibility tree as fidelity compares them), and never later than the recorded moment
  plus ``MARGIN_S`` (a page that is late by more, or never shows that state, is observed then
  as it is) — unless the page still has requests in flight then: a replay serves a page's
  many scripts slower than a live server on a loaded machine, so it waits for them, up to
  ``LOADING_MAX_S`` more. A page that is not there yet is read again every ``POLL_S``.

In an episode with a WebSocket, the timeline is kept from the moment the page opens its first
socket (``PacedSteps.socket_opened``), not from the episode's start: a server's timers count from
there, and a page that loads slower or faster than it did would otherwise see a timer's push a
step early or late.

A replay that runs late (a loaded machine) never waits to catch up the recording: the waits
only ever shorten what is left of the recorded interval, so a replay takes about as long as its
recording and no longer (``python -m bench --only realweb`` prints the ratio). Stores recorded
before schema version 7 have no ``acted_at``: their replays keep no pace (as before).
"""
from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from mmina.actions import Action, ActionKind
from mmina.errors import MminaError
from mmina.recorder.har import CHUNKS_HEADER
from mmina.replayer.archive import same_page
from mmina.replayer.fidelity import tree_change

MARGIN_S = 0.5
"""How much later than recorded an observation may wait for the recorded state to show."""
LOADING_MAX_S = 5.0
"""Past that, how much longer it still waits while the page has requests in flight (a replay
slower to serve a page's scripts than the live site was, on a loaded machine)."""
POLL_S = 0.1
"""How often a page not yet in its recorded state is read again."""


class Page(Protocol):
    """What pacing reads of the page (``EpisodeBrowser`` has it)."""

    @property
    def url(self) -> str: ...

    @property
    def loading(self) -> bool: ...

    def tree(self) -> tuple[str, list[Any]]: ...


@dataclass(frozen=True)
class RecordedStep:
    """One recorded step's moments (seconds after the episode's start) and what it observed."""

    observed: float
    acted: float | None
    url: str
    tree_text: str
    idle: bool = False
    """The recorded page was idle while the agent thought (see the module)."""


@dataclass(frozen=True)
class RecordedPace:
    """The timeline of one recorded episode (see the module)."""

    steps: tuple[RecordedStep, ...]
    socket_opened: float | None = None
    """When the episode's first WebSocket opened (seconds after its start), if it had one."""

    @classmethod
    def of(cls, episode_started: datetime, rows: Sequence[Mapping[str, Any]],
           requests: Sequence[Mapping[str, Any]] = ()) -> RecordedPace | None:
        """The pace of an episode's step rows and its ``requests`` rows; None for a store that
        kept none (before schema 7)."""
        if not rows or all(r.get("acted_at") is None for r in rows):
            return None
        pushed = any(_unasked(r) for r in requests)
        started = sorted(r["started_at"] for r in requests if r.get("started_at"))
        sockets = sorted(r["started_at"] for r in requests if r.get("status") == 101 and r.get("started_at"))
        return cls(tuple(RecordedStep(_seconds(episode_started, r["started_at"]),
                                      _seconds(episode_started, r["acted_at"]) if r.get("acted_at") else None,
                                      r.get("url") or "", r.get("tree_text") or "",
                                      not pushed and _quiet(started, r["started_at"], r.get("acted_at")))
                         for r in rows), _seconds(episode_started, sockets[0]) if sockets else None)


def _seconds(start: datetime, moment: datetime) -> float:
    return (moment - start).total_seconds()


def _unasked(request: Mapping[str, Any]) -> bool:
    """A socket or a stream: what comes over it comes unasked, at any time."""
    headers = {h["name"].lower() for h in request.get("response_headers") or ()}
    return (request.get("status") == 101 or str(request.get("url", "")).startswith(("ws:", "wss:"))
            or "event-stream" in (request.get("mime_type") or "") or CHUNKS_HEADER in headers)


def _quiet(started: Sequence[datetime], since: datetime, until: datetime | None) -> bool:
    """No request started from ``since`` to ``until``."""
    return until is not None and bisect.bisect_left(started, since) == bisect.bisect_right(started, until)


class PacedSteps:
    """Holds a replayed episode to its recording's pace (the ``pacer`` of ``EpisodeRecorder``)."""

    def __init__(self, recorded: RecordedPace, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.recorded, self._clock, self._sleep = recorded, clock, sleep
        self._start = clock()
        self._anchored = False

    def begin(self) -> None:
        """The episode starts now (called before its context opens, as ``episodes.started_at`` is taken)."""
        self._start = self._clock()

    def socket_opened(self) -> None:
        """The page opened its first WebSocket now (any thread): from now on the recorded timeline
        is kept from that moment, as the server's timers count from it (a page that loaded slower
        or faster than recorded would otherwise see a timer's push a step early or late)."""
        if self.recorded.socket_opened is not None and not self._anchored:
            self._anchored = True
            self._start = self._clock() - self.recorded.socket_opened

    def before_action(self, step_index: int, action: Action) -> None:
        """Wait until the recorded action's moment (none for steps past the recording, nor for
        ``stop``, which does nothing to the page: the answer is given at once)."""
        step = self._step(step_index)
        if step is not None and step.acted is not None and action.kind is not ActionKind.STOP and not step.idle:
            self._wait(self._start + step.acted - self._clock())

    def before_observe(self, page: Page, step_index: int) -> None:
        """Wait until the page shows the recorded observation, or its moment plus ``MARGIN_S``
        (plus up to ``LOADING_MAX_S`` while the page is still loading something)."""
        step = self._step(step_index)
        if step is None:
            return
        until = self._start + step.observed + MARGIN_S
        while not self._shows(page, step):
            now = self._clock()
            if now >= until + LOADING_MAX_S or (now >= until and not page.loading):
                return
            self._wait(POLL_S if now >= until else min(POLL_S, until - now))

    def _step(self, step_index: int) -> RecordedStep | None:
        return self.recorded.steps[step_index] if step_index < len(self.recorded.steps) else None

    @staticmethod
    def _shows(page: Page, step: RecordedStep) -> bool:
        """Whether the page is in the recorded state (as fidelity compares it; a page that cannot
        be read now is not)."""
        if not same_page(step.url, page.url):
            return False
        try:
            text, _elements = page.tree()
        except MminaError:
            raise  # past a deadline, or the browser gone: the episode's own error
        except Exception:  # noqa: BLE001 - a page mid-navigation: not there yet, read again
            return False
        return not tree_change(step.tree_text, text)

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._sleep(seconds)
