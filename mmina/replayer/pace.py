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
* **an action's input** (``steps.dispatch_ms``) takes the page, on the timeline, no more time
  than the recording's did: τ is held at the input's recorded end until the replayed input is
  dispatched (:meth:`PacedSteps._hold_dispatch`), so a debounce the last key restarts ends where
  it ended when recorded however slower the replay types;
* **an observation** is taken as soon as the page shows what the recording observed (URL and
  accessibility tree as fidelity compares them), and never later than the recorded moment
  plus ``MARGIN_S`` (a page that is late by more, or never shows that state, is observed then
  as it is) — unless the page still has requests in flight then: a replay serves a page's
  many scripts slower than a live server on a loaded machine, so it waits for them, up to
  ``LOADING_MAX_S`` more. A page that is not there yet is read again every ``POLL_S``.

**In the recording's time.** Every replay of stored actions keeps a ``Timeline``
(``mmina.replayer.timeline``): its moments are then positions τ on the recorded timeline, not
real seconds since the start. An action is sent when τ reaches its recorded moment — also after
an idle page, whose clock shows it; an observation is taken with τ standing at its recorded
moment (each observation holds τ until it is taken), so waiting there for late deliveries costs
the page no time; only a page that still does not show the recorded state then gets up to
``MARGIN_S`` of its own work (see :meth:`PacedSteps._observe_on_timeline`). The rules below
without a timeline are what a replay did before.

**The order of deliveries and observations.** Equal delays do not keep a push and an
observation that were tenths of a second apart in the recording in their order (a loaded
machine shifts one a little). The recorded timestamps say which came first, so the replay
keeps it explicitly (``mmina.replayer.turns``): before an observation, the pacer waits for every
delivery the recording's page received before that observation read the page (a socket's message, a
held response, a stream's chunk) and then for the page to show the recorded state, after the last
of them at most as long as the recording's page had between the two plus ``MARGIN_S`` (a delivery
on time adds nothing to the observation's moment; waiting longer lets the page's own timers run
past what the recording saw: a toast's close); deliveries the recording received after it read the page are held by
the router until the replay's observation is taken (``after_observe``).

**Frozen animations.** A recording whose agent thought longer than the freeze delay had its
pages' animations frozen (``steps.frozen_ms``, ``mmina.recorder.freezing``) until it acted: a
toast whose ``animationend`` removes it stayed that much longer. A replay's pace wait freezes
them as long, ending at the action as it did (:meth:`PacedSteps.before_action`).

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
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from mmina.actions.grammar import Action, ActionKind
from mmina.errors import MminaError
from mmina.recorder.har import CHUNKS_HEADER
from mmina.replayer.archive import same_page
from mmina.replayer.fidelity import tree_change
from mmina.replayer.timeline import Timeline
from mmina.replayer.turns import Turns

MARGIN_S = 0.5
"""How much later than recorded an observation may wait for the recorded state to show."""
LOADING_MAX_S = 5.0
"""Past that, how much longer it still waits while the page has requests in flight (a replay
slower to serve a page's scripts than the live site was, on a loaded machine)."""
POLL_S = 0.1
"""How often a page not yet in its recorded state is read again."""
RENDER_S = 1.0
"""After the last delivery an observation waited for, how long the page may take to show it when
the recording's time between the two is unknown (else: that time plus ``MARGIN_S``)."""
FROZEN_RENDER_S = 0.3
"""On the timeline, how long a page whose time stands still at an observation's moment may take
to render what reached it (after the moment, or the last delivery it waited for)."""
DELIVERY_POLL_S = 0.01
"""How often an observation waiting for a delivery due now looks again."""
SNAPSHOT_S = 0.002
"""How long after an observation began its tree read saw the page: the accessibility snapshot is
one task in the page, run as soon as the page's event loop takes it, so it reads the page as it
was at the read's start, however long the read then takes (measured beside a bench and two
burners: the page's own clock, ticking every millisecond into the tree, read 1-4 ms past the
read's start at the median, at most 60 ms, against reads of 50-700 ms; docs/replay.md). A
recorded read that took less counts whole."""


class Page(Protocol):
    """What pacing reads of the page (``EpisodeBrowser`` has it)."""

    @property
    def url(self) -> str: ...

    @property
    def loading(self) -> bool: ...

    def tree(self) -> tuple[str, list[Any]]: ...

    def thinking(self, freeze_after: float | None) -> AbstractContextManager[dict[str, float]]: ...


@dataclass(frozen=True, kw_only=True)
class RecordedStep:
    """One recorded step's moments (seconds after the episode's start) and what it observed."""

    observed: float
    acted: float | None
    url: str
    tree_text: str
    idle: bool = False
    """The recorded page was idle while the agent thought (see the module)."""
    frozen: float = 0.0
    """How long the recording froze the page's animations before the action (seconds)."""
    read: float = 0.0
    """From the observation's start to when its tree read saw the page (seconds, ``SNAPSHOT_S`` at
    most): what reached the page before that moment is what the observed tree can show."""
    dispatch: float | None = None
    """How long the action's input took to dispatch (seconds; None: not kept, before schema 11)."""

    @property
    def moment(self) -> float:
        """When the observation saw the page (seconds after the episode's start)."""
        return self.observed + self.read


@dataclass(frozen=True)
class RecordedPace:
    """The timeline of one recorded episode (see the module)."""

    steps: tuple[RecordedStep, ...]
    socket_opened: float | None = None
    """When the episode's first WebSocket opened (seconds after its start), if it had one."""
    started: float = 0.0
    """When the recorded episode started (wall-clock seconds, as its traffic is timed)."""

    @property
    def observed_at(self) -> list[float]:
        """When each recorded observation read the page's tree (wall-clock seconds: the read's
        start, plus ``SNAPSHOT_S``)."""
        return [self.started + step.moment for step in self.steps]

    @classmethod
    def of(
        cls,
        episode_started: datetime,
        rows: Sequence[Mapping[str, Any]],
        requests: Sequence[Mapping[str, Any]] = (),
    ) -> RecordedPace | None:
        """The pace of an episode's step rows and its ``requests`` rows; None for a store that
        kept none (before schema 7)."""
        if not rows or all(r.get("acted_at") is None for r in rows):
            return None
        pushed = any(_unasked(r) for r in requests)
        started = sorted(r["started_at"] for r in requests if r.get("started_at"))
        sockets = sorted(r["started_at"] for r in requests if r.get("status") == 101 and r.get("started_at"))
        return cls(
            tuple(
                RecordedStep(
                    observed=_seconds(episode_started, r["started_at"]),
                    acted=_seconds(episode_started, r["acted_at"]) if r.get("acted_at") else None,
                    url=r.get("url") or "",
                    tree_text=r.get("tree_text") or "",
                    idle=not pushed and _quiet(started, r["started_at"], r.get("acted_at")),
                    frozen=(r.get("frozen_ms") or 0.0) / 1e3,
                    read=min((r.get("tree_ms") or 0.0) / 1e3, SNAPSHOT_S),
                    dispatch=r["dispatch_ms"] / 1e3 if r.get("dispatch_ms") is not None else None,
                )
                for r in rows
            ),
            _seconds(episode_started, sockets[0]) if sockets else None,
            episode_started.timestamp(),
        )


def _seconds(start: datetime, moment: datetime) -> float:
    return (moment - start).total_seconds()


def _unasked(request: Mapping[str, Any]) -> bool:
    """A socket or a stream: what comes over it comes unasked, at any time."""
    headers = {h["name"].lower() for h in request.get("response_headers") or ()}
    return (
        request.get("status") == 101
        or str(request.get("url", "")).startswith(("ws:", "wss:"))
        or "event-stream" in (request.get("mime_type") or "")
        or CHUNKS_HEADER in headers
    )


def _quiet(started: Sequence[datetime], since: datetime, until: datetime | None) -> bool:
    """No request started from ``since`` to ``until``."""
    return until is not None and bisect.bisect_left(started, since) == bisect.bisect_right(started, until)


class PacedSteps:
    """Holds a replayed episode to its recording's pace (the ``pacer`` of ``EpisodeRecorder``);
    with a ``timeline``, in the recording's time (see the module)."""

    def __init__(
        self,
        recorded: RecordedPace,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        timeline: Timeline | None = None,
    ) -> None:
        self.recorded, self._clock, self._sleep = recorded, clock, sleep
        self.timeline = timeline
        self._start = clock()
        self._anchored = False
        self.turns = Turns(recorded.observed_at, timeline.stood_still if timeline is not None else None)
        """The order of deliveries and observations, shared with the episode's router (see the
        module); on the timeline, a delivery's lateness is counted on the page's time."""
        self._typing = False
        """Whether the action under way types (its input's hold outlasts the page's data)."""
        self.observed_until: float | None = None
        """When the replay's last observation was taken (wall-clock seconds, as traffic is timed):
        what reached the page before it is what the observations could show."""

    def begin(self) -> None:
        """The episode starts now (called before its context opens, as ``episodes.started_at`` is
        taken); on the timeline, τ cannot pass the first observation's moment before it is taken."""
        self._start = self._clock()
        if self.timeline is not None:
            self.timeline.begin()
            self._hold_observation(0)

    def socket_opened(self) -> None:
        """The page opened its first WebSocket now (any thread): from now on the recorded timeline
        is kept from that moment, as the server's timers count from it (a page that loaded slower
        or faster than recorded would otherwise see a timer's push a step early or late). On the
        timeline, τ jumps to the recorded opening if it is behind it (a page that loaded faster)."""
        if self.recorded.socket_opened is None or self._anchored:
            return
        self._anchored = True
        if self.timeline is not None:
            self.timeline.advance_to(self.recorded.socket_opened)
        else:
            self._start = self._clock() - self.recorded.socket_opened

    def before_action(self, page: Page, step_index: int, action: Action) -> dict[str, float]:
        """Wait until the recorded action's moment (none for steps past the recording, nor for
        ``stop``, which does nothing to the page: the answer is given at once), the page's
        animations frozen for the end of it as long as the recording froze them; the step's
        timings to add (``frozen_ms``). Without a timeline, a thinking time in which the recorded
        page was idle is not waited for either."""
        step = self._step(step_index)
        if step is None or step.acted is None or action.kind is ActionKind.STOP:
            return {}
        if self.timeline is None and step.idle:
            return {}
        acted, timing = step.acted, dict[str, float]()
        if step.frozen <= 0 or acted <= self._moment():
            self._until(acted)
        else:
            with page.thinking(max(0.0, acted - step.frozen - self._moment())) as timing:
                self._until(acted)
        self._typing = action.kind is ActionKind.TYPE
        self._hold_dispatch(step_index, step)
        return timing

    def _hold_dispatch(self, step_index: int, step: RecordedStep) -> None:
        """On the timeline, the action's input may take the page no more time than the recording's
        took (``steps.dispatch_ms``): τ is held that long after the action starts until the input
        is dispatched (:meth:`after_dispatch`). A replay types slower than its recording on a loaded
        machine (each key a round trip to the browser: 367 ms against 191 for Trac's summary), and a
        debounce the last key restarts would end that much later on the page's clock: a timer that
        fired just before the next action when recorded fired just after it in the replay, and the
        next key restarted it. A dispatch that waits for what the page awaits (a click's navigation,
        until its document commits) does not hold τ before that response's moment (``yields``).
        Meanwhile no request the recording's page asked for inside that window holds τ at its
        recorded moment (``window``): the replayed input makes the page ask when it reaches it, and
        held there, the page's time would stand still while the input went on: a debounce due a few
        milliseconds past the recorded moment of the request it sends (the replayed input ends on the
        page's clock where the recorded dispatch ended, a little after the recording's last key) could
        not fire before the input restarted it (Trac's preview went out 5 ms into the next action)."""
        if self.timeline is None or step.dispatch is None:
            return
        start = max(self.timeline.now(), step.acted or 0.0)
        self.timeline.hold(
            ("action", step_index), start + step.dispatch, yields=True, window=True, keys=self._typing
        )

    def after_dispatch(self, step_index: int) -> None:
        """The action's input was dispatched (any thread): the page's time goes on."""
        if self.timeline is not None:
            self.timeline.lift(("action", step_index))

    def before_observe(self, page: Page, step_index: int) -> None:
        """Wait for the deliveries the recording's page had before this observation, then until
        the page shows the recorded observation, or its moment plus ``MARGIN_S`` (or ``RENDER_S``
        after the last delivery, if later; plus up to ``LOADING_MAX_S`` while the page is still
        loading something). On the timeline, see :meth:`_observe_on_timeline`."""
        step = self._step(step_index)
        if step is None:
            return
        if self.timeline is not None:
            self._observe_on_timeline(page, step_index, step)
            return
        until = self._start + step.observed + MARGIN_S
        delivered = self._deliveries(step_index, until + LOADING_MAX_S)
        if delivered is not None:
            gap = self.turns.recorded_gap
            until = max(until, delivered + (RENDER_S if gap is None else max(0.0, gap) + MARGIN_S))
        while not self._shows(page, step):
            now = self._clock()
            if now >= until + LOADING_MAX_S or (now >= until and not page.loading):
                return
            self._wait(POLL_S if now >= until else min(POLL_S, until - now))

    def _observe_on_timeline(self, page: Page, step_index: int, step: RecordedStep) -> None:
        """Reach the observation's recorded moment (where τ is held), then, the page's time
        standing still, wait for the deliveries the recording's page had before it and for the
        page to show the recorded state while something is still loading (a replay may serve
        slower than the live site did: waiting costs no page time), and only then, if the page
        still does not show it, let the page's own work due then run: τ goes on, up to
        ``MARGIN_S`` past the moment (a replay's action takes longer than the recording's did,
        and a debounced save fires that much later)."""
        assert self.timeline is not None
        moment = step.moment
        self._until(moment)
        reached = self._clock()
        delivered = self._deliveries(step_index, reached + LOADING_MAX_S, moment)
        rendered = max(reached, delivered or reached) + FROZEN_RENDER_S
        while not self._shows(page, step):
            now = self._clock()
            if now >= reached + LOADING_MAX_S or (now >= rendered and not page.loading):
                break
            self._wait(POLL_S)
        else:
            return
        self.timeline.hold(("observe", step_index), moment + MARGIN_S)
        while not self._shows(page, step) and self.timeline.now() < moment + MARGIN_S:
            self._wait(POLL_S)

    def page_time(self) -> float:
        """On the timeline, τ (the page's clock stands still while the replay waits for what the
        recording had by then); else the machine's clock."""
        return self.timeline.now() if self.timeline is not None else time.monotonic()

    def after_observe(self, step_index: int) -> None:
        """The observation was taken: deliveries the recording received after it read the page may
        go, and τ may go on to the next observation's moment."""
        self.observed_until = time.time()  # before they go: none of them counts as observed
        self.turns.observed(step_index)
        if self.timeline is not None:
            self.timeline.lift(("observe", step_index))
            self._hold_observation(step_index + 1)

    def _hold_observation(self, step_index: int) -> None:
        assert self.timeline is not None
        step = self._step(step_index)
        if step is not None:
            self.timeline.hold(("observe", step_index), step.moment)

    def _moment(self) -> float:
        """Where the replay is on the recorded timeline (seconds since the episode's start)."""
        return self.timeline.now() if self.timeline is not None else self._clock() - self._start

    def _until(self, moment: float) -> None:
        """Wait until the replay reaches ``moment`` of the recorded timeline (see :meth:`_moment`)."""
        if self.timeline is not None:
            self.timeline.wait_until(moment, self._sleep)
        else:
            self._wait(self._start + moment - self._clock())

    def _deliveries(self, step_index: int, bound: float, moment: float | None = None) -> float | None:
        """Wait (until ``bound`` at most) for every delivery on its way that the recording's page
        received before this observation read the page; when the last delivery since the previous
        observation reached the page (None: none did). On the timeline (τ held at the observation's
        ``moment``), a delivery that waits for the page to say something first (a socket's reply to
        a message a debounce sends: the replay's action took longer than the recording's) gets the
        page's own work due up to ``MARGIN_S`` past the moment, as a page that does not show the
        recorded state does: held at the moment, the page would never say it."""
        released = False
        while (
            due := self.turns.awaited(step_index, now := self._clock(), bound)
        ) is not None and now < bound:
            if not released and moment is not None and self.turns.awaits_page(step_index, now, bound):
                assert self.timeline is not None
                self.timeline.hold(("observe", step_index), moment + MARGIN_S)
                released = True
            self._wait(min(POLL_S, max(DELIVERY_POLL_S, due - now)))
        return self.turns.delivered_at

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
