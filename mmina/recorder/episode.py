"""One episode: open the task, loop observe → act → execute under budgets, store it all."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from playwright.async_api import Error as PlaywrightError

from mmina.actions.grammar import Action, ActionKind, parse_agent_output
from mmina.agents.captions import Captioner
from mmina.agents.protocol import (
    Agent,
    AgentReply,
    ScriptEnd,
    agent_seed,
    checked_reply,
    seed_agent,
    uses_marks,
)
from mmina.errors import AGENT, INFRASTRUCTURE, AgentError, MminaError, StartPageError, TaskError, first_line
from mmina.models.endpoint_gate import EndpointUnavailable
from mmina.models.model_input import store_request, with_image_blobs
from mmina.observations.observation import Observation
from mmina.recorder.browser import BrowserSession, ContextHook, EpisodeBrowser, Offline
from mmina.recorder.har import RoutedTraffic, capture
from mmina.recorder.seeding import Seeding, recording_seeding
from mmina.recorder.verdicts import episode_view, verdict_summary, write_verdicts
from mmina.redaction.redact import Redactor, configured_secrets, typed_text_is_secret
from mmina.store import EpisodeWriter, Store
from mmina.store.marks import mark_rows
from mmina.tasks.answers import answer_verdict
from mmina.tasks.blocking import Blocked, FinalPage, blocked_at_end, start_page_blocked
from mmina.tasks.budget import Budget, Limits
from mmina.tasks.harness_context import harness_context
from mmina.tasks.task import HopTracker, Task, id_slug, task_row


@dataclass(frozen=True, kw_only=True)
class EpisodeResult:
    episode_id: str
    task_id: str
    status: str
    stop_reason: str
    final_answer: str | None
    n_steps: int
    n_hops: int
    live_hops: int
    duration_ms: float
    error: str | None
    answer_ok: bool | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    verdict: str | None = None
    """The ``hops`` evaluator's task verdict, written with the episode (None when it was not)."""
    hops_passed: int | None = None
    """Hops the ``hops`` evaluator passed (None when it did not score the episode)."""
    start_hop: int = 0
    """The hop the agent started at: hops before it were given by a prefix (``record --prefix-run``)."""
    endpoint_retries: int = 0
    """Model call attempts that failed for the endpoint's sake (``episodes.endpoint_retries``)."""
    endpoint_wait_s: float = 0.0
    """Seconds the agent's calls waited for the endpoint to come back (``episodes.endpoint_wait_s``)."""
    error_kind: str | None = None
    """Whose failure an error was: ``infrastructure`` or ``agent`` (see :func:`error_kind`); None without one."""
    attempt: int = 1
    """Which repeat of its task the episode is (``episodes.attempt``; ``record --repeats``)."""
    supersedes: str | None = None
    """The episode of this task this one recorded again (an infrastructure error ended it), or None."""

    @property
    def hops_to_do(self) -> int:
        """The hops the agent had to complete itself (all of them, unless a prefix gave some)."""
        return self.n_hops - self.start_hop

    @property
    def agent_live_hops(self) -> int:
        """Hops live tracking saw the agent itself reach (given hops left out)."""
        return max(self.live_hops - self.start_hop, 0)

    @property
    def hops_credited(self) -> int:
        """Hops passed by the ``hops`` verdicts (the live-tracked ones of the agent for an episode
        without them); never a hop a prefix gave."""
        return self.hops_passed if self.hops_passed is not None else self.agent_live_hops

    @property
    def success(self) -> bool:
        """The verdict when there is one, else live tracking: every hop reached and, where the task
        has string references, the answer right."""
        if self.verdict is not None:
            return self.verdict == "pass"
        return self.status == "completed" and self.live_hops == self.n_hops and self.answer_ok is not False


def _context_options(task: Task) -> tuple[dict[str, Any], TaskError | None]:
    """Playwright's ``new_context`` arguments for the task's storage state and position, as
    the official harness passes them (``mmina.tasks.harness_context``; the permission to read the
    position granted besides), and the error that ends the episode when they cannot be read
    (the file changed since the suite was checked)."""
    try:
        context = harness_context(task.original, task.folder)
    except TaskError as exc:
        return {}, exc
    options: dict[str, Any] = {}
    if context.storage_state is not None:
        options["storage_state"] = context.storage_state
    if context.geolocation is not None:
        options["geolocation"] = asdict(context.geolocation)
        options["permissions"] = ["geolocation"]
    return options, None


def new_episode_id(task: Task) -> str:
    return f"{id_slug(task.task_id)}-{uuid.uuid4().hex[:16]}"


def _now() -> datetime:
    return datetime.now(UTC)


class Pacer(Protocol):
    """Holds an episode to a pace of its own (a replay keeps its recording's:
    ``mmina.replayer.pace``); called from the episode's thread."""

    def begin(self) -> None: ...

    def before_observe(self, page: EpisodeBrowser, step_index: int) -> None: ...

    def after_observe(self, step_index: int) -> None: ...

    def page_time(self) -> float:
        """The pages' time in seconds (a replay's: its recording's timeline)."""
        ...

    def before_action(self, page: EpisodeBrowser, step_index: int, action: Action) -> dict[str, float]:
        """Wait before the action; the step's timings to add (e.g. ``frozen_ms``)."""
        ...

    def after_dispatch(self, step_index: int) -> None:
        """The action's input was dispatched (called from any thread; also once more after the
        action, whatever became of it)."""
        ...


MoreTraffic = Callable[[], RoutedTraffic]
"""What the context's router did that its HAR misses (a replay's sockets, which its router
played, and the addresses it continued requests to), asked for once the context has closed."""
ExtraColumns = Callable[[list[dict[str, Any]]], dict[str, Any]]
"""Further ``episodes`` columns worked out from the episode's step rows just before it is
committed (a hop-conditioned episode's prefix columns)."""


class EpisodeRecorder:
    """Records one attempt at one task into an :class:`EpisodeWriter`.

    ``tracker`` replaces the live hop queue (one that starts at a later hop, for an episode
    handed a prefix) and ``columns`` adds columns to the episode's row (see :data:`ExtraColumns`);
    a ``pacer`` decides when each observation and action happens (see :class:`Pacer`), and
    ``more_traffic`` gives the traffic the browser's HAR cannot have (see :data:`MoreTraffic`).
    """

    def __init__(
        self,
        session: BrowserSession,
        agent: Agent,
        task: Task,
        writer: EpisodeWriter[Store],
        limits: Limits,
        workdir: Path,
        captioner: Captioner | None = None,
        prepare: ContextHook | None = None,
        offline: Offline | None = None,
        seed: Seeding | None = None,
        tracker: HopTracker | None = None,
        columns: ExtraColumns | None = None,
        pacer: Pacer | None = None,
        more_traffic: MoreTraffic | None = None,
    ) -> None:
        self.session, self.agent, self.task, self.writer = session, agent, task, writer
        self.pacer, self.more_traffic = pacer, more_traffic
        self.captioner, self.prepare, self.offline, self.columns = captioner, prepare, offline, columns
        self.seed = seed or recording_seeding(writer.episode_id)
        """Seeds ``Math.random`` and ``crypto`` (a replay passes its source episode's seed and scheme, so
        pages draw alike); the scheme is stored (``episodes.random_seeding``)."""
        self.budget = Budget(limits)
        self.tracker = tracker or HopTracker(task)
        self.har = workdir / f"{writer.episode_id}.har.zip"
        self.step_starts: list[datetime] = []
        self.tokens = [0, 0]
        self.endpoint_retries, self.endpoint_wait_s = 0, 0.0
        """What the model endpoint's faults cost the episode (see ``AgentReply``)."""
        self.cost = 0.0
        self._requests: list[tuple[dict[str, Any], Any]] = []
        self._typed_secrets: list[str] = []

    def record(self, attempt: int, supersedes: str | None = None) -> EpisodeResult:
        """Record the episode and commit it as ``attempt``; ``supersedes`` names the episode of
        this task it records again (one an infrastructure error ended: ``record --resume``)."""
        started, clock = _now(), time.perf_counter()
        options, refused = _context_options(self.task)
        if self.pacer is not None:
            self.pacer.begin()
        browser = self.session.episode(
            self.har,
            self.prepare,
            offline=self.offline,
            paint_marks=uses_marks(self.agent),
            seed=self.seed,
            options=options,
            page_time=self.pacer.page_time if self.pacer is not None else time.monotonic,
        )
        status, error, kind, stop_reason, answer, final = "completed", None, None, "error", None, None
        blocked: Blocked | None = None
        try:
            try:
                if refused is not None:
                    raise refused
                browser.open(self.task.start_urls)
                seed_agent(self.agent, agent_seed(self.task.task_id, attempt))
                self.agent.reset(self.task)
                stop_reason, answer = self._loop(browser)
            except EndpointUnavailable:
                raise  # not the agent's failure: the episode is not stored, the run stops (resumable)
            except StartPageError as exc:
                status, error, kind = "error", first_line(exc), error_kind(exc, self.session.connected)
                blocked = start_page_blocked(exc.url or "", exc.status, exc.error) if exc.url else None
            except (MminaError, PlaywrightError) as exc:
                status, error, kind = "error", first_line(exc), error_kind(exc, self.session.connected)
            final = self._terminal(browser)
        finally:
            closed = _close(browser)
        if closed is not None and status != "error":  # e.g. Playwright's driver died: the steps stay
            status, error, kind = "error", closed, INFRASTRUCTURE
        terminal = self._terminal_columns(final)
        redactor = self._redactor(browser.secrets, error, terminal)
        requests = capture(
            self.har,
            self.step_starts,
            self.writer.put_blob,
            redactor,
            browser.streams,
            self.more_traffic() if self.more_traffic else RoutedTraffic(),
        )
        self.har.unlink(missing_ok=True)
        self._store_model_inputs(redactor)
        self._redact_task(redactor)
        for step in self.writer.steps:
            step.update(redactor.row(step))
        self.writer.add_requests(requests)
        link_images(self.writer.steps, requests)
        blocked = blocked or self._blocked_at_end(final, requests)
        duration = (time.perf_counter() - clock) * 1e3
        answer, error = redactor.text(answer), redactor.text(error)
        result = EpisodeResult(
            episode_id=self.writer.episode_id,
            task_id=self.task.task_id,
            status=status,
            stop_reason=stop_reason,
            final_answer=answer,
            n_steps=self.budget.steps,
            n_hops=self.task.n_hops,
            live_hops=self.tracker.current,
            duration_ms=duration,
            error=error,
            answer_ok=answer_verdict(self.task, answer),
            prompt_tokens=self.tokens[0],
            completion_tokens=self.tokens[1],
            cost_usd=self.cost,
            start_hop=len(self.tracker.given),
            endpoint_retries=self.endpoint_retries,
            endpoint_wait_s=round(self.endpoint_wait_s, 3),
            error_kind=kind,
            attempt=attempt,
            supersedes=supersedes,
        )
        extra = self.columns(self.writer.steps) if self.columns else {}
        row = redactor.row(
            {
                **self._episode_row(result, started),
                **terminal,
                **extra,
                "blocked": json.dumps(blocked.as_json()) if blocked else None,
            }
        )
        self.writer.commit(row)
        rows = write_verdicts(
            self.writer.store,
            episode_view(self.writer.run_id, result.episode_id, self.task, row, self.writer.steps),
        )
        verdict, passed = verdict_summary(rows)
        return replace(result, verdict=verdict, hops_passed=passed)

    def _blocked_at_end(
        self, final: tuple[Observation, datetime] | None, requests: list[dict[str, Any]]
    ) -> Blocked | None:
        """Whether the environment was in the agent's way where the episode ended (``mmina.tasks.blocking``)."""
        if final is None:
            return None
        observation = final[0]
        answered = [r for r in requests if r["url"] == observation.url]
        redirect = next(
            (r["url"] for r in reversed(requests) if r.get("redirect_url") == observation.url), None
        )
        last_error = next(
            (e for e in (step.get("action_error") for step in reversed(self.writer.steps[-2:])) if e), None
        )  # the agent's last action, or the one before a stop
        page = FinalPage(
            url=observation.url,
            title=observation.title or "",
            text=observation.tree_text or "",
            status=answered[-1]["status"] if answered else None,
            error=last_error,
            redirected_from=redirect,
        )
        return blocked_at_end(
            page, self.task.intent, self.task.start_urls, [h.keyword for h in self.task.hops]
        )

    def _terminal(self, browser: EpisodeBrowser) -> tuple[Observation, datetime] | None:
        """The terminal observation: the page after the episode's last action (a stop's page, the
        page a budget's last action reached, or what an error left), observed once more before
        the context closes; None when there is no page to observe (the browser is gone)."""
        observed_at = _now()
        try:
            observation, _ = browser.observe(self.budget.steps, self.task.intent)
        except (MminaError, PlaywrightError):
            return None
        if browser.observe_error:  # the page is there but could not be read: only its URL and tabs are known
            observation.tree_text, observation.screenshot = None, None  # type: ignore[assignment]
        return observation, observed_at

    def _terminal_columns(self, final: tuple[Observation, datetime] | None) -> dict[str, Any]:
        """The ``episodes.final_*`` columns (null: unknown), as observed: redacted with the episode's rows."""
        if final is None:
            return {}
        observation, observed_at = final
        screenshot = (
            self.writer.put_blob(observation.screenshot, "image/jpeg") if observation.screenshot else None
        )
        return {
            "final_url": observation.url,
            "final_title": observation.title,
            "final_tabs": [{"url": t.url, "title": t.title} for t in observation.tabs],
            "final_tree_text": observation.tree_text,
            "final_screenshot": screenshot,
            "final_observed_at": observed_at,
        }

    def _redactor(self, typed: list[str], error: str | None, terminal: dict[str, Any]) -> Redactor:
        """Every secret the episode knows before its rows are redacted: the configured keys,
        the text typed into secret fields, and what the steps, the terminal observation and the
        error show in secret places (``capture`` adds the traffic's)."""
        redactor = Redactor(configured_secrets())
        for text in [*typed, *self._typed_secrets]:
            redactor.learn_secret(text)
        for row in (*self.writer.steps, terminal):
            redactor.learn_row(row)
        redactor.learn_text(error)
        return redactor

    def _redact_task(self, redactor: Redactor) -> None:
        """Scrub what the episode learned from the run's ``tasks`` rows, written before it ran
        (an intent may give the password the agent typed)."""
        stored = task_row(self.task)
        if redactor.row(stored) != stored:
            self.writer.store.redact_tasks(self.writer.run_id, redactor.row)

    def _store_model_inputs(self, redactor: Redactor) -> None:
        """The requests the agent sent, as blobs, once every secret of the episode is known."""
        for step, request in self._requests:
            step["model_input"] = store_request(request, self.writer.put_blob, redactor)

    def _loop(self, browser: EpisodeBrowser) -> tuple[str, str | None]:
        while True:
            if self.pacer is not None:
                self.pacer.before_observe(browser, self.budget.steps)
            self.step_starts.append(_now())
            observation, timings = browser.observe(self.budget.steps, self.task.intent)
            if self.pacer is not None:
                self.pacer.after_observe(self.budget.steps)
            if uses_marks(self.agent):
                _wait_for_marks(observation, timings)
            self._caption(observation, timings)
            completed = self.tracker.observe(observation.url, observation.step_index)
            agent_start = time.perf_counter()
            try:
                with browser.thinking(self.session.config.freeze_after_s) as frozen:
                    reply = checked_reply(self.agent.act(observation))
                    thought = (
                        time.perf_counter() - agent_start - reply.endpoint_wait_s
                    )  # a wait for the endpoint neither
                    timings["agent_ms"] = max(thought, 0.0) * 1e3  # the thaw is not the agent's
            except ScriptEnd:
                self.step_starts.pop()
                return "script_end", None
            except MminaError:
                raise
            except Exception as exc:  # a user's agent failing ends its episode, not the run
                raise AgentError(f"agent failed: {type(exc).__name__}: {exc}") from exc
            timings.update(frozen)
            action, error, acted_at = self._run_action(browser, reply, timings)
            self._typed_secrets += typed_secret(observation, action, error)
            error = (
                "; ".join(e for e in (reply.note, error) if e) or None
            )  # usage not believed, then the action's
            if browser.observe_error:  # the step is kept, with why its observation is empty
                error = f"{browser.observe_error}; {error}" if error else browser.observe_error
            self._store_step(observation, reply, action, error, completed, timings, acted_at)
            self.budget.record(action.render() if action else None)
            if action is not None and action.kind is ActionKind.STOP:
                return "stop", action.answer
            if self.budget.exceeded:
                return self.budget.exceeded, None

    def _caption(self, observation: Observation, timings: dict[str, float]) -> None:
        """Caption the in-view images (counted in ``images_ms``), so agent and store see the same words."""
        if self.captioner is None or not observation.images:
            return
        started = time.perf_counter()
        observation.images = [
            replace(i, caption=self.captioner.caption(i, observation.screenshot)) for i in observation.images
        ]
        elapsed = (time.perf_counter() - started) * 1e3
        timings["images_ms"] = timings.get("images_ms", 0.0) + elapsed
        timings["observe_ms"] = timings.get("observe_ms", 0.0) + elapsed

    def _run_action(
        self, browser: EpisodeBrowser, reply: AgentReply, timings: dict[str, float]
    ) -> tuple[Action | None, str | None, datetime | None]:
        """Parse and execute; both failures are data on the step, not episode errors. Also when
        the action was sent to the page (after the pacer's wait; None when it did not parse)."""
        started, action, acted_at = time.perf_counter(), None, None
        step, pacer = self.budget.steps, self.pacer

        def dispatched(seconds: float) -> None:  # on the browser's event loop
            timings["dispatch_ms"] = seconds * 1e3
            if pacer is not None:
                pacer.after_dispatch(step)

        try:
            action = parse_agent_output(reply.output)
            if pacer is not None:
                timings.update(pacer.before_action(browser, step, action))
                started = time.perf_counter()
            acted_at = _now()
            browser.execute(action, dispatched)
            return action, None, acted_at
        except MminaError as exc:
            return action, str(exc), acted_at
        finally:
            timings["action_ms"] = (time.perf_counter() - started) * 1e3
            if pacer is not None:
                pacer.after_dispatch(step)

    def _store_step(
        self,
        observation: Observation,
        reply: AgentReply,
        action: Action | None,
        error: str | None,
        completed: bool,
        timings: dict[str, float],
        acted_at: datetime | None,
    ) -> None:
        """The step as observed; redacted with the whole episode's secrets when it ends."""
        self.tokens[0] += reply.prompt_tokens
        self.tokens[1] += reply.completion_tokens
        self.endpoint_retries += reply.endpoint_retries
        self.endpoint_wait_s += reply.endpoint_wait_s
        self.cost += reply.cost_usd
        screenshot = (
            self.writer.put_blob(observation.screenshot, "image/jpeg") if observation.screenshot else None
        )
        painted = observation.resolve_marks()
        som = self.writer.put_blob(painted, "image/jpeg") if painted else None
        config = self.session.config
        marks = (
            mark_rows(observation.elements, config.viewport_width, config.viewport_height)
            if screenshot
            else None
        )
        self.writer.add_step(
            {
                "step_index": observation.step_index,
                "started_at": self.step_starts[-1],
                "url": observation.url,
                "title": observation.title,
                "tabs": [{"url": t.url, "title": t.title} for t in observation.tabs],
                "active_tab": observation.active_tab,
                "tree_text": observation.tree_text,
                "screenshot": screenshot,
                "screenshot_som": som,
                "marks": marks,
                "screenshot_width": config.viewport_width if screenshot else None,
                "screenshot_height": config.viewport_height if screenshot else None,
                "images": [
                    {"blob": None, **asdict(i), "caption": i.caption or None} for i in observation.images
                ],
                "model_output": reply.output,
                "action": action.render() if action else None,
                "action_kind": action.kind.value if action else None,
                "action_error": error,
                "target_box": target_box(observation, action),
                "live_hops": self.tracker.current,
                "live_hop_completed": completed,
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "cost_usd": reply.cost_usd,
                "acted_at": acted_at,
                **timings,
            }
        )
        if reply.request is not None:
            self._requests.append(
                (self.writer.steps[-1], with_image_blobs(reply.request, self.writer.put_blob))
            )

    def _episode_row(self, result: EpisodeResult, started: datetime) -> dict[str, Any]:
        return {
            "task_id": result.task_id,
            "attempt": result.attempt,
            "status": result.status,
            "stop_reason": result.stop_reason,
            "final_answer": result.final_answer,
            "n_steps": result.n_steps,
            "n_hops": result.n_hops,
            "live_hops": result.live_hops,
            "hop_steps": list(self.tracker.completed_at),
            "started_at": started,
            "ended_at": _now(),
            "duration_ms": result.duration_ms,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "cost_usd": result.cost_usd,
            "error": result.error,
            "error_kind": result.error_kind,
            "supersedes": result.supersedes,
            "endpoint_retries": result.endpoint_retries,
            "endpoint_wait_s": result.endpoint_wait_s,
            "random_seeding": self.seed.scheme,
        }


CRASHED = ("Target crashed", "Page crashed")
"""Playwright's words for a renderer that died under the episode (out of memory, killed)."""


def error_kind(exc: BaseException, browser_connected: bool) -> str:
    """``infrastructure`` when the error was the machinery's — the browser or its driver gone
    (``browser_connected`` false once the episode failed) or a renderer crashed, the store, the
    model endpoint failing for everyone (an :class:`MminaError` that says so) — else ``agent``:
    the agent raised, its output, or the task's site (a start page that does not open, a page
    whose call passed its deadline)."""
    if getattr(exc, "infrastructure", False) or not browser_connected:
        return INFRASTRUCTURE
    return (
        INFRASTRUCTURE if isinstance(exc, PlaywrightError) and any(w in str(exc) for w in CRASHED) else AGENT
    )


def typed_secret(observation: Observation, action: Action | None, error: str | None) -> list[str]:
    """The text of a ``type`` action when it is a secret by :func:`mmina.redaction.redact.typed_text_is_secret`
    (its target as observed is named like a password field, or it failed and looks like a credential)."""
    if action is None or action.kind is not ActionKind.TYPE or not action.text:
        return []
    target = next((e for e in observation.elements if e.id == action.element_id), None)
    return (
        [action.text]
        if typed_text_is_secret(action.text, error is not None, target.name if target else None)
        else []
    )


def link_images(steps: list[dict[str, Any]], requests: list[dict[str, Any]]) -> None:
    """Point each step's images at the response body the browser downloaded for them.

    The network capture already stored every image once; the step only names it.
    """
    bodies = {r["url"]: r["response_body"] for r in requests if r["response_body"] and r["status"] == 200}
    for step in steps:
        for image in step["images"]:
            image["blob"] = bodies.get(image["src"])


def _close(browser: EpisodeBrowser) -> str | None:
    """Close the episode's context; why that failed, if it did (the episode is kept either way;
    a context abandoned past its deadline loses its HAR, and the error says so)."""
    try:
        browser.close()
    except PlaywrightError as exc:
        return f"closing the browser failed: {first_line(exc)}"
    except MminaError as exc:
        return first_line(exc)
    return None


TARGETED = frozenset({ActionKind.CLICK, ActionKind.HOVER, ActionKind.TYPE})


def target_box(observation: Observation, action: Action | None) -> dict[str, float] | None:
    """The observed box of the element an action targets (screenshot coordinates), if it had one."""
    if action is None or action.kind not in TARGETED:
        return None
    element = next((e for e in observation.elements if e.id == action.element_id), None)
    if element is None or element.box is None:
        return None
    return dict(zip(("x", "y", "width", "height"), element.box))


def _wait_for_marks(observation: Observation, timings: dict[str, float]) -> None:
    """For agents that read the set-of-marks screenshot: the wait counts as observation time."""
    started = time.perf_counter()
    observation.resolve_marks()
    timings["observe_ms"] = timings.get("observe_ms", 0.0) + (time.perf_counter() - started) * 1e3
