"""The hand-over of a hop-conditioned episode: a prefix replayed from the archive, then the live web.

One browser context does both, so everything the prefix left stays as it was: the tabs and
their history (the same pages), web storage (``localStorage``; ``sessionStorage`` of each tab),
IndexedDB and cookies. Until the hand-over the context is routed to the reference episode's
archive exactly as ``mmina replay`` routes it (clock, seeded ``Math.random`` and ``crypto``); it is never
offline (the agent goes on on the live web), so a ``keepalive`` beacon a prefix page sends as it
unloads, which outlives its routes, may reach the live site; at the hand-over
:meth:`HandOverRouter.hand_over`

* removes the archive's route, so every later request goes to the live web (the fixture web by
  default), a SharedWorker's own requests included; a WebSocket opened from then on connects to
  its server;
* sets the page clock to the real time: the replay's clock (installed at the reference's
  start, running since) stays installed, but from then on ``Date`` reads the wall clock and
  runs with it, and timers fire in real time, as on any page; ``Math.random`` stays seeded with
  the reference episode's seed, as in any recording (``recorder/seeding.py``);
* drops the cookies whose value the archive holds redacted: a cookie a server set with
  ``Set-Cookie`` is a credential by rule and never reaches the store in clear, so the replay
  could only give it back as the redaction marker; the live site then sees no such cookie (a
  new visitor for that cookie) rather than a forged one. Cookies set by the pages' scripts
  (``document.cookie``) were set again by the replayed scripts and are kept.

What was handed over (tabs and history lengths, cookie names kept and dropped, storage keys;
never values; keys named so that redaction by name leaves them readable) is returned for
``episodes.handover_json``. :class:`PrefixedAgent` plays the
prefix's actions and then hands the page to the agent under test; :func:`check_prefix` says
whether the replayed prefix was faithful (``episodes.prefix_faithful``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from playwright.async_api import BrowserContext, WebSocketRoute
from playwright.async_api import Error as PlaywrightError

from mmina.agents.protocol import Agent, AgentReply, Handover, hand_over, uses_marks
from mmina.observations.observation import Observation
from mmina.redaction.secret_rules import MARKERS
from mmina.replayer.fidelity import StepView, compare_steps
from mmina.replayer.prefixes import Prefix
from mmina.replayer.router import ArchiveRouter
from mmina.tasks.task import Task

PAGE_DEADLINE_S = 5.0
"""A page asked its history length answers within this (a busy page is reported as unknown)."""
CLOCK = "real time from the hand-over (the replay's clock set to the wall clock, then running with it)"


@dataclass
class HandOverRouter(ArchiveRouter):
    """An :class:`ArchiveRouter` that can let go of its context: before :meth:`hand_over` it
    answers every request from the archive, after it the context is on the live web."""

    context: BrowserContext | None = None
    live: bool = False

    async def prepare(self, context: BrowserContext) -> None:
        self.context = context
        await super().prepare(context)

    async def _socket(self, socket: WebSocketRoute) -> None:
        """Before the hand-over, the recorded conversation; after it, the live server."""
        if self.live:
            socket.connect_to_server()
            return
        await super()._socket(socket)

    async def hand_over(self) -> dict[str, Any]:
        """Let the context go to the live web (see the module); what it handed over."""
        context = self.context
        if context is None:
            raise RuntimeError("hand_over before prepare")
        self.live = True
        dropped = await drop_redacted_cookies(context)
        handed_at = datetime.now(UTC)
        await context.clock.set_system_time(handed_at)
        await context.unroute("**/*")
        await self.let_workers_go()  # a SharedWorker's own requests are not routed by Playwright
        return {
            "handed_over_at": handed_at.isoformat(),
            "clock": CLOCK,
            **await handed_state(context),
            "dropped_cookie_names": dropped,
        }


async def drop_redacted_cookies(context: BrowserContext) -> list[str]:
    """Remove the cookies whose value is (or holds) a redaction marker; their names."""
    dropped = []
    for cookie in await context.cookies():
        if any(marker in cookie.get("value", "") for marker in MARKERS):
            await context.clear_cookies(
                name=cookie["name"], domain=cookie.get("domain"), path=cookie.get("path")
            )
            dropped.append(cookie["name"])
    return dropped


async def handed_state(context: BrowserContext) -> dict[str, Any]:
    """Tabs (URL, history length), cookie names and web-storage keys per origin; no values."""
    state = await context.storage_state()
    tabs = [{"url": page.url, "history": await _history_length(page)} for page in context.pages]
    storage = {
        o["origin"]: sorted(item["name"] for item in o.get("localStorage", [])) for o in state["origins"]
    }
    return {
        "tabs": tabs,
        "cookie_names": sorted(c["name"] for c in state["cookies"]),
        "local_storage": storage,
    }


async def _history_length(page: Any) -> int | None:
    try:
        return await asyncio.wait_for(page.evaluate("history.length"), PAGE_DEADLINE_S)
    except (TimeoutError, PlaywrightError):
        return None


class PrefixedAgent:
    """Plays a prefix's actions, then hands the page, and the rest of the task, to ``agent``.

    ``hand_over_page`` runs once, on the episode's thread, right after the observation of the
    first step past the prefix (the page the agent is handed; observed while still on the
    archive) and before ``agent`` sees it; its result is kept in ``handed``.
    """

    def __init__(
        self,
        agent: Agent,
        prefix: Prefix,
        hand_over_page: Callable[[], dict[str, Any]],
        show_actions: bool = True,
    ) -> None:
        self.agent, self.prefix, self.show_actions = agent, prefix, show_actions
        self.name = getattr(agent, "name", "agent")
        self._hand_over_page = hand_over_page
        self._queue: list[str] = []
        self.handed: dict[str, Any] | None = None

    @property
    def uses_marks(self) -> bool:
        return uses_marks(self.agent)

    def reset(self, task: Task) -> None:
        self.agent.reset(task)
        self._queue, self.handed = list(self.prefix.actions), None

    def act(self, observation: Observation) -> AgentReply | str:
        if self._queue:
            return AgentReply(output=self._queue.pop(0))
        if self.handed is None:
            self.handed = self._hand_over_page()
            prefix = self.prefix
            hand_over(self.agent, Handover(prefix.start_hop, prefix.actions, prefix.urls, self.show_actions))
        return self.agent.act(observation)


@dataclass(frozen=True)
class PrefixCheck:
    """How faithfully a conditioned episode's prefix replayed (as ``mmina replay`` judges a step:
    URL and accessibility tree equal to the reference's)."""

    compared: int
    faithful_steps: int
    mismatch: str | None = None
    handed_over: bool = True

    @property
    def faithful(self) -> bool:
        return self.handed_over and self.mismatch is None

    def as_json(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "faithful_steps": self.faithful_steps,
            "faithful": self.faithful,
            "mismatch": self.mismatch,
        }


def check_prefix(prefix: Prefix, steps: Sequence[Mapping[str, Any]], handed_over: bool) -> PrefixCheck:
    """Compare the replayed steps 0 .. prefix.steps (the last: the page handed over, when the
    agent's first step was stored) with the reference's; the first difference is named."""
    rows = {row["step_index"]: row for row in steps if row["step_index"] <= prefix.steps}
    if not handed_over:
        return PrefixCheck(
            0,
            0,
            f"the episode ended after {len(rows)} of the prefix's {prefix.steps} step(s), "
            "before the hand-over",
            handed_over=False,
        )
    pairs = [
        (expected, rows.get(i))
        for i, expected in enumerate(prefix.expected)
        if expected is not None and (i < prefix.steps or i in rows)
    ]
    compared = compare_steps(
        [e for e, _ in pairs], [StepView.from_row(r) for _, r in pairs if r is not None], lambda _a, _b: None
    )
    first = next((s for s in compared if not s.faithful), None)
    return PrefixCheck(len(compared), sum(s.faithful for s in compared), _mismatch(first) if first else None)


def _mismatch(step: Any) -> str:
    """One line on how a step differed from the reference."""
    if step.replayed_url is None:
        return f"step {step.step_index}: missing in the replay"
    if not step.url_equal:
        return f"step {step.step_index}: url {step.replayed_url} (reference: {step.recorded_url})"
    return f"step {step.step_index}: accessibility tree differs ({step.tree_change})"


@dataclass
class HandOverState:
    """What the recorder's column hook learns, for the job to report (one episode's)."""

    check: PrefixCheck | None = None
    handed: dict[str, Any] | None = field(default=None)
