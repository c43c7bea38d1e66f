"""One episode's view of the browser: its tabs, for the episode's own thread.

:class:`EpisodeBrowser` runs each of its calls on the session's event loop
(``mmina.recorder.browser_loop``) within the deadline of its part of a step, and freezes the
episode's pages while its agent thinks (``mmina.recorder.freezing``).
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from playwright.async_api import BrowserContext
from playwright.async_api import Error as PlaywrightError

from mmina.actions.grammar import Action
from mmina.errors import MminaError
from mmina.observations.observation import Element, ElementIds, Observation
from mmina.recorder import acting, observing
from mmina.recorder.devtools import SEND_TIMEOUT_S as FREEZE_CALL_S
from mmina.recorder.settling import (
    ACTION_DEADLINE_S,
    CLOSE_DEADLINE_S,
    GRACE_S,
    LOAD_MAX_S,
    OBSERVE_DEADLINE_S,
    PROBE_DEADLINE_S,
    SETTLE_MAX_S,
    DeadlinePassed,
)
from mmina.recorder.streams import EventStreams
from mmina.recorder.tabs import BrowserGone, Tabs

T = TypeVar("T")


class Session(Protocol):
    """What an episode asks of its browser session (:class:`~mmina.recorder.browser.BrowserSession`
    is one): to run a call on the session's event loop by a deadline, and whether the browser answers."""

    def run(
        self, coroutine: Coroutine[Any, Any, T], deadline: float | None = None, doing: str = "a browser call"
    ) -> T: ...

    def answers(self) -> bool: ...


class ContextAbandoned(MminaError):
    """An episode's context could not be closed by its deadline and was left behind: its HAR
    (written when a context closes) is lost, and with it the episode's network trace."""

    infrastructure = True


class EpisodeBrowser:
    """The tabs of one episode, for the episode's own thread (see the module).

    Every method bounds its call into the browser on the caller's side with the deadline of
    its part of a step (``settling.py``) plus ``GRACE_S``: a stuck driver, route handler or
    page costs that call :class:`DeadlinePassed`, never the thread. After a call passed its
    deadline, the next one first checks that the browser still answers at all
    (:meth:`Session.answers`; if not, :class:`BrowserGone` ends the episode) and that
    the page does (if not, the call fails at once instead of waiting for its deadline again)."""

    def __init__(self, session: Session, tabs: Tabs) -> None:
        self.session, self.tabs = session, tabs
        self.stuck: str | None = None
        """Why the last call that passed its deadline did (None once the browser answered again)."""

    @property
    def context(self) -> BrowserContext:
        return self.tabs.context

    @property
    def streams(self) -> EventStreams:
        return self.tabs.streams

    @property
    def secrets(self) -> list[str]:
        return self.tabs.secrets

    @property
    def ids(self) -> ElementIds:
        return self.tabs.ids

    @property
    def observe_error(self) -> str | None:
        return self.tabs.observe_error

    @property
    def url(self) -> str:
        return self.tabs.page.url

    @property
    def loading(self) -> bool:
        """Requests of the episode are in flight now (a cheap read, no call into the browser)."""
        return self.tabs.loading

    def _call(self, coroutine: Coroutine[Any, Any, T], seconds: float, doing: str) -> T:
        """Run one call within ``seconds`` plus ``GRACE_S`` (see the class)."""
        if self.stuck is not None:
            if not self.session.answers():
                coroutine.close()
                raise BrowserGone(f"the browser stopped answering: {self.stuck}")
            if not self._page_answers():
                coroutine.close()
                raise DeadlinePassed(f"the page stopped answering: {self.stuck}")
            self.stuck = None
        try:
            return self.session.run(coroutine, time.monotonic() + seconds + GRACE_S, doing)
        except DeadlinePassed as exc:
            self.stuck = str(exc)
            raise

    def _page_answers(self) -> bool:
        """Whether the active page runs a trivial script within ``PROBE_DEADLINE_S`` (a renderer
        stuck in a script loop does not; a page navigating or gone is left to the call)."""
        try:
            self.session.run(
                self.tabs.page.evaluate("1"), time.monotonic() + PROBE_DEADLINE_S, "asking the page"
            )
        except DeadlinePassed:
            return False
        except PlaywrightError:
            pass
        return True

    def open(self, urls: tuple[str, ...]) -> None:
        self._call(self.tabs.open(urls), ACTION_DEADLINE_S, "opening the start page")

    def settle(self, deadline: float | None = None) -> None:
        seconds = (deadline - time.monotonic()) if deadline is not None else LOAD_MAX_S + SETTLE_MAX_S
        self._call(self.tabs.settle(deadline), max(0.0, seconds), "waiting for the page to settle")

    def observe(self, step_index: int, intent: str) -> tuple[Observation, dict[str, float]]:
        return self._call(
            observing.observe(self.tabs, step_index, intent), OBSERVE_DEADLINE_S, "observing the page"
        )

    def tree(self) -> tuple[str, list[Element]]:
        return self._call(
            observing.read_tree(self.tabs), OBSERVE_DEADLINE_S, "reading the accessibility tree"
        )

    @contextmanager
    def thinking(self, freeze_after: float | None) -> Iterator[dict[str, float]]:
        """While the agent thinks: its tabs freeze after ``freeze_after`` seconds (None: never)
        and are thawed when the block ends; yields the step's timings to add (``frozen_ms``)."""
        timing: dict[str, float] = {}
        if freeze_after is None:
            yield timing
            return
        self._call(
            self.tabs.freezing.after(self.tabs.pages, freeze_after), PROBE_DEADLINE_S, "scheduling a freeze"
        )
        try:
            yield timing
        finally:
            frozen = self._call(self.tabs.freezing.thaw(), 2 * FREEZE_CALL_S, "thawing the page")
            timing["frozen_ms"] = frozen * 1e3

    def execute(self, action: Action, dispatched: acting.Dispatched | None = None) -> None:
        """Run ``action`` and let the page settle; ``dispatched`` hears when its input is done (see
        :data:`mmina.recorder.acting.Dispatched`)."""
        self._call(
            acting.execute(self.tabs, action, dispatched), ACTION_DEADLINE_S, f"the action {action.render()}"
        )

    def close(self) -> None:
        """Close the context (this also writes the HAR file); one that cannot be closed by
        ``CLOSE_DEADLINE_S`` is abandoned (:class:`ContextAbandoned`)."""
        if self.stuck is not None and not self.session.answers():
            raise ContextAbandoned(
                f"the browser stopped answering ({self.stuck}); the context was abandoned "
                "and its network trace (HAR) is lost"
            )
        try:
            self.session.run(self.tabs.close(), time.monotonic() + CLOSE_DEADLINE_S, "closing the context")
        except DeadlinePassed as exc:
            raise ContextAbandoned(
                f"{exc}; the context was abandoned and its network trace (HAR) is lost"
            ) from None
