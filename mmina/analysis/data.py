"""What the analysis reads: the scored episodes of some runs under one evaluator, from the store.

Everything comes from DuckDB over the store's views (``episode_scores``, ``latest_scores``,
``tasks``, ``steps``), so the report's numbers are the ones ``mmina sql`` gives.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import duckdb

from mmina.analysis.names import DEFAULT_EVALUATOR
from mmina.errors import DAMAGED_RUN_HINT, MminaError, unreadable_file
from mmina.store import Store
from mmina.store.views import StoreConnection, connect, read_error


class AnalysisError(MminaError):
    """The store holds nothing to analyse for the asked runs or evaluator."""


@dataclass(frozen=True)
class HopVerdict:
    hop_index: int
    """The hop as an index into the task's procedure (0-based); tables show ``hop_index + 1``."""
    passed: bool
    completed_step: int | None


@dataclass(frozen=True)
class StepRow:
    step_index: int
    url: str
    action: str | None
    action_error: str | None
    tokens: int = 0
    """Model tokens of the step, prompt and completion."""
    cost_usd: float = 0.0
    agent_ms: float = 0.0
    """The agent's time to choose the action (model time, for a model)."""
    wall_ms: float = 0.0
    """From this step's start to the next one's (the last step: its observation, agent and action)."""


@dataclass(frozen=True, kw_only=True)
class Episode:
    """One scored episode (the latest recorded of its task and repeat in its run)."""

    run_id: str
    episode_id: str
    task_id: str
    n_hops: int
    bucket: str
    verdict: str
    passed: bool
    hops_passed: int
    hops_total: int
    first_failed_hop: int | None
    """The first hop whose verdict failed, 1-based as in every table (None: no hop failed)."""
    status: str
    stop_reason: str
    final_answer: str | None
    n_steps: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    procedure: tuple[str, ...] = ()
    live_hop_steps: tuple[int, ...] = ()
    hops: tuple[HopVerdict, ...] = ()
    steps: tuple[StepRow, ...] = field(default=(), repr=False)
    hops_given: int | None = None
    """The hops a hop-conditioned episode's prefix gave (``episodes.hops_given``; they are not
    among ``hops``); None for an episode that started from its task's start page."""
    prefix_faithful: bool | None = None
    """Whether the conditioned episode's prefix replayed faithfully (None: not conditioned)."""
    agent: str = ""
    model: str | None = None
    attempt: int = 1
    """Which repeat of its task (``record --repeats``)."""

    @property
    def agent_label(self) -> str:
        return agent_label(self.agent, self.model)

    @property
    def conditioned(self) -> bool:
        return self.hops_given is not None

    @property
    def first_hop(self) -> int:
        """The index (0-based) of the first hop the agent had to do itself: after those given."""
        return self.hops_given or 0

    @property
    def first_failure(self) -> str:
        """``passed``, the 1-based position of the first failed hop, or ``answer`` (no hop failed)."""
        if self.passed:
            return "passed"
        return "answer" if self.first_failed_hop is None else str(self.first_failed_hop)


def agent_label(agent: str, model: str | None) -> str:
    """Whose episodes they are: the run's agent, and its model when it has one."""
    return f"{agent} ({model})" if model else agent


@dataclass(frozen=True)
class Scored:
    runs: tuple[str, ...]
    evaluator: str
    episodes: tuple[Episode, ...]
    not_applicable: int = 0
    """Episodes whose verdict is n/a (the evaluator had nothing to judge): in no rate, not in ``episodes``."""
    infrastructure: int = 0
    """Episodes an infrastructure error ended (``episodes.error_kind``; not superseded by a re-run):
    not the agent's failure, so in no rate and not in ``episodes``."""
    blocked: int = 0
    """Episodes the environment blocked (verdict ``blocked``, ``mmina.tasks.blocking``): in no rate,
    not in ``episodes``."""


EPISODES_SQL = """
SELECT s.*, t.procedure, e.hop_steps AS live_hop_steps
FROM episode_scores s
JOIN tasks t ON t.run_id = s.run_id AND t.task_id = s.task_id
JOIN episodes e ON e.episode_id = s.episode_id
WHERE s.evaluator = $evaluator AND list_contains($runs, s.run_id) AND s.passed IS NOT NULL
ORDER BY s.run_id, s.n_hops, s.task_id, s.hops_given NULLS FIRST, s.attempt
"""

LEFT_OUT_SQL = """
SELECT count(*) FILTER (WHERE error_kind IS DISTINCT FROM 'infrastructure' AND verdict <> 'blocked') AS not_applicable,
       count(*) FILTER (WHERE error_kind = 'infrastructure') AS infrastructure,
       count(*) FILTER (WHERE error_kind IS DISTINCT FROM 'infrastructure' AND verdict = 'blocked') AS blocked
FROM episode_scores WHERE evaluator = $evaluator AND list_contains($runs, run_id) AND passed IS NULL
"""

AGENTS_SQL = """
SELECT run_id, agent, model FROM runs WHERE list_contains($runs, run_id)
"""

UNSCORED_SQL = """
SELECT e.run_id, count(*) AS missing FROM episodes e
WHERE list_contains($runs, e.run_id) AND e.episode_id NOT IN
      (SELECT episode_id FROM latest_scores WHERE evaluator = $evaluator AND level = 'task')
GROUP BY e.run_id ORDER BY e.run_id
"""

HOPS_SQL = """
SELECT h.episode_id, h.hop - 1 AS hop_index, h.verdict = 'pass' AS passed, h.detail_json
FROM latest_scores h JOIN episode_scores s ON s.episode_id = h.episode_id AND s.evaluator = h.evaluator
WHERE h.evaluator = $evaluator AND h.level = 'hop' AND list_contains($runs, s.run_id)
      AND h.hop > coalesce(s.hops_given, 0)
ORDER BY h.episode_id, h.hop
"""

STEPS_SQL = """
SELECT st.episode_id, st.step_index, coalesce(st.url, '') AS url, st.action, st.action_error,
       coalesce(st.prompt_tokens, 0) + coalesce(st.completion_tokens, 0) AS tokens,
       coalesce(st.cost_usd, 0) AS cost_usd, coalesce(st.agent_ms, 0) AS agent_ms,
       coalesce((epoch(lead(st.started_at) OVER w) - epoch(st.started_at)) * 1000,
                coalesce(st.observe_ms, 0) + coalesce(st.agent_ms, 0) + coalesce(st.action_ms, 0)) AS wall_ms
FROM steps st JOIN episode_scores s ON s.episode_id = st.episode_id AND s.evaluator = $evaluator
WHERE list_contains($runs, s.run_id)
WINDOW w AS (PARTITION BY st.episode_id ORDER BY st.step_index)
ORDER BY st.episode_id, st.step_index
"""


def query(db: StoreConnection, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of one query as dicts; DuckDB errors become one-line mmina errors."""
    try:
        cursor = db.connection.execute(sql, params)
        columns = [d[0] for d in cursor.description or []]
        return [dict(zip(columns, row)) for row in cursor.fetchall()]
    except duckdb.Error as exc:
        raise read_error(exc) from None


def select_runs(store: Store, runs: Sequence[str]) -> tuple[str, ...]:
    """The named runs (checked), else every run of the store; a store without runs has nothing to analyse."""
    chosen = store.select_runs(runs)
    if not chosen:
        raise AnalysisError(f"{store.root} holds no runs (record one with `mmina record`)")
    return tuple(chosen)


def rescore_hint(evaluator: str, runs: Sequence[str]) -> str:
    return f"mmina rescore --evaluator {evaluator} " + " ".join(f"--run {r}" for r in runs)


def check_scored(db: StoreConnection, params: dict[str, Any]) -> None:
    """Fail, naming the rescore command, when an episode of the runs lacks the evaluator's verdict."""
    missing = query(db, UNSCORED_SQL, params)
    if missing:
        evaluator = params["evaluator"]
        counts = ", ".join(f"{m['missing']} in run {m['run_id']}" for m in missing)
        hint = rescore_hint(evaluator, [m["run_id"] for m in missing])
        others = stored_evaluators(db, evaluator)
        raise AnalysisError(f"no {evaluator} score for some episodes ({counts}{others}): run `{hint}` first")


def stored_evaluators(db: StoreConnection, evaluator: str) -> str:
    """When no verdict of ``evaluator`` is stored at all (a mistyped name?), whose verdicts are:
    a clause for a "no verdicts" message ("" when it holds some, or none of any evaluator)."""
    names = [r["evaluator"] for r in query(db, "SELECT DISTINCT evaluator FROM scores ORDER BY 1", {})]
    if evaluator in names or not names:
        return ""
    return (
        f"; the store holds verdicts of {', '.join(names)}, and `mmina rescore --list` names every evaluator"
    )


TASKLESS_SQL = """
SELECT e.run_id, count(*) AS taskless FROM episodes e
WHERE list_contains($runs, e.run_id)
      AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = e.run_id AND t.task_id = e.task_id)
GROUP BY e.run_id ORDER BY e.run_id
"""


def check_tasks(store: Store, db: StoreConnection, runs: Sequence[str]) -> None:
    """Fail, naming the file, when a run's episodes lack their tasks because its ``tasks`` file
    cannot be read (the report would leave them out of every table without a word)."""
    for row in query(db, TASKLESS_SQL, {"runs": list(runs)}):
        store.read("tasks", run_id=row["run_id"], columns=["task_id"])
        damaged = store.unreadable("tasks", row["run_id"])
        if damaged:
            raise AnalysisError(
                f"{row['taskless']} episode(s) of run {row['run_id']} have no task: "
                f"{unreadable_file('tasks', *damaged[0])}; {DAMAGED_RUN_HINT} (or report the "
                "other runs with --run)"
            )


def load(store: Store, runs: Sequence[str] = (), evaluator: str = DEFAULT_EVALUATOR) -> Scored:
    """The scored episodes of ``runs`` (default: all) under ``evaluator``, with hops and steps.

    Every episode must carry a task verdict of ``evaluator``: a partial picture would give
    wrong rates, so a missing score is an error that names the rescore command to run.
    Named runs are read from their own folders only, so one run of a large store is quick.
    """
    chosen = select_runs(store, runs)
    db = connect(store, chosen if runs else None)
    try:
        check_scored(db, {"evaluator": evaluator, "runs": list(chosen)})
        check_tasks(store, db, chosen)
        episodes = scored_episodes(db, chosen, evaluator)
        agents = {
            r["run_id"]: (r["agent"], r["model"]) for r in query(db, AGENTS_SQL, {"runs": list(chosen)})
        }
        (left_out,) = query(db, LEFT_OUT_SQL, {"evaluator": evaluator, "runs": list(chosen)})
    finally:
        db.close()
    return Scored(
        chosen,
        evaluator,
        tuple(
            replace(e, agent=agents[e.run_id][0], model=agents[e.run_id][1]) if e.run_id in agents else e
            for e in episodes
        ),
        **left_out,
    )


def scored_episodes(db: StoreConnection, runs: Sequence[str], evaluator: str) -> tuple[Episode, ...]:
    """The scored episodes of ``runs`` under ``evaluator`` (one per task and repeat), with
    their hop verdicts and steps, as the report reads them; episodes without a verdict are left out."""
    params = {"evaluator": evaluator, "runs": list(runs)}
    rows = query(db, EPISODES_SQL, params)
    hops = _hops(query(db, HOPS_SQL, params))
    steps = _steps(query(db, STEPS_SQL, params))
    return tuple(_episode(r, hops.get(r["episode_id"], ()), steps.get(r["episode_id"], ())) for r in rows)


def _hops(rows: list[dict[str, Any]]) -> dict[str, tuple[HopVerdict, ...]]:
    found: dict[str, list[HopVerdict]] = defaultdict(list)
    for row in rows:
        step = json.loads(row["detail_json"] or "{}").get("completed_step")
        found[row["episode_id"]].append(
            HopVerdict(row["hop_index"], bool(row["passed"]), step if isinstance(step, int) else None)
        )
    return {k: tuple(v) for k, v in found.items()}


def _steps(rows: list[dict[str, Any]]) -> dict[str, tuple[StepRow, ...]]:
    found: dict[str, list[StepRow]] = defaultdict(list)
    for row in rows:
        found[row.pop("episode_id")].append(StepRow(**row))
    return {k: tuple(v) for k, v in found.items()}


def _episode(row: dict[str, Any], hops: tuple[HopVerdict, ...], steps: tuple[StepRow, ...]) -> Episode:
    names = Episode.__dataclass_fields__
    values = {k: v for k, v in row.items() if k in names}
    values["procedure"] = tuple(row["procedure"] or ())
    values["live_hop_steps"] = tuple(row["live_hop_steps"] or ())
    values["passed"] = bool(row["passed"])
    return Episode(**values, hops=hops, steps=steps)
