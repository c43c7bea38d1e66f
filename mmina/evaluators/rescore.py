"""Score stored episodes with any evaluator and append the verdicts as a new batch.

One invocation is one *batch*: every row it writes carries the batch id, the evaluator's
name, version and arguments. Rows go to ``scores/run_id=<run>/<batch>.parquet``, one file
per run, written only when every episode of that run was scored — an episode that could
not be scored (the judge endpoint failed after its retries, the evaluator raised) leaves
its run without a file, so a batch is never half-written.

Reading rule: for each (episode, evaluator) the latest batch (``scored_at``, then
``batch_id``) holds the current verdicts. ``--action overwrite`` writes a batch like
``append`` does — the store is append-only — and also lists, in every new row's
``detail_json.supersedes``, the earlier batches of that evaluator for the episode, which
readers of the score history should treat as retracted.
"""
from __future__ import annotations

import json
import os
import re
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import pyarrow.compute as pc

from mmina.evaluators.base import EpisodeView, Evaluator, EvaluatorError, Score, StepView, args_json
from mmina.evaluators.judge import JudgeOutcome, JudgeSettings, resolve
from mmina.evaluators.registry import factory, get
from mmina.store import Store
from mmina.store.store import utcnow
from mmina.tasks import task_from_dict

ACTIONS = ("append", "overwrite")
BUCKETS = ("1", "2-4", "5+")
STEP_COLUMNS = ["episode_id", "step_index", "url", "action", "action_kind", "model_output", "action_error", "hop_index"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RescoreConfig:
    store: str | os.PathLike[str]
    evaluator: str
    args: Mapping[str, Any] = field(default_factory=dict)
    runs: tuple[str, ...] = ()
    episodes: tuple[str, ...] = ()
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    action: str = "append"


@dataclass(frozen=True)
class ScoredEpisode:
    run_id: str
    episode_id: str
    task_id: str
    n_hops: int
    verdict: str
    value: float
    hops_passed: int
    hops_total: int
    written: bool


@dataclass(frozen=True)
class Unscored:
    run_id: str
    episode_id: str
    task_id: str
    reason: str


@dataclass(frozen=True)
class Flip:
    run_id: str
    episode_id: str
    task_id: str
    before: str
    after: str
    previous_batch: str


@dataclass(frozen=True)
class Bucket:
    """Task SR and hop SR of one hop-count bucket (``1``, ``2-4``, ``5+`` or ``overall``)."""

    name: str
    episodes: int
    tasks_passed: int
    tasks_unclear: int
    hops_passed: int
    hops_total: int

    @property
    def task_sr(self) -> float | None:
        return self.tasks_passed / self.episodes if self.episodes else None

    @property
    def hop_sr(self) -> float | None:
        """None when the evaluator gives no hop-level rows."""
        return self.hops_passed / self.hops_total if self.hops_total else None


@dataclass
class RescoreResult:
    batch_id: str
    evaluator: str
    version: str
    args: dict[str, Any]
    action: str
    scored: list[ScoredEpisode] = field(default_factory=list)
    unscored: list[Unscored] = field(default_factory=list)
    flips: list[Flip] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    judge_cached: int = 0
    judge_requested: int = 0
    judge_failed: int = 0

    @property
    def ok(self) -> bool:
        return not self.unscored

    def buckets(self) -> list[Bucket]:
        """SR by hop-count bucket, then overall, over the episodes whose rows were written."""
        written = [s for s in self.scored if s.written]
        groups = {name: [s for s in written if hop_bucket(s.n_hops) == name] for name in BUCKETS}
        groups["overall"] = written
        return [Bucket(name, len(group), sum(s.verdict == "pass" for s in group),
                       sum(s.verdict == "unclear" for s in group), sum(s.hops_passed for s in group),
                       sum(s.hops_total for s in group)) for name, group in groups.items()]


def hop_bucket(n_hops: int) -> str:
    """The MMInA paper's grouping of tasks by hop count."""
    return "1" if n_hops <= 1 else "2-4" if n_hops <= 4 else "5+"


def new_batch_id(evaluator: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", evaluator).strip("-")[:32] or "evaluator"
    return f"{utcnow():%Y%m%d-%H%M%S}-{slug}-{uuid.uuid4().hex[:6]}"


def build_evaluator(config: RescoreConfig) -> Evaluator:
    """The evaluator with its arguments; a judge model given on the command line is
    recorded in the arguments of evaluators that use a judge."""
    make = factory(config.evaluator)
    args = dict(config.args)
    if getattr(make, "uses_judge", False) and config.judge.model and "judge_model" not in args:
        args["judge_model"] = config.judge.model
    if getattr(make, "requires_judge", False) and not args.get("judge_model"):
        raise EvaluatorError(f"evaluator {config.evaluator} asks an LLM judge: pass --judge-model NAME")
    return get(config.evaluator, **args)


def rescore(config: RescoreConfig, progress: Progress | None = None) -> RescoreResult:
    """Score the selected episodes, append the rows, report SR, flips and unscored episodes."""
    if config.action not in ACTIONS:
        raise EvaluatorError(f"--action must be one of {', '.join(ACTIONS)}, not {config.action!r}")
    evaluator = build_evaluator(config)
    store = Store.open(config.store)
    runs = select_runs(store, config.runs, config.episodes)
    views = load_views(store, runs, set(config.episodes))
    result = RescoreResult(new_batch_id(config.evaluator), config.evaluator, str(evaluator.version),
                           dict(evaluator.args), config.action)
    views = _with_judgments(store, evaluator, views, config.judge, result, progress)
    scored = _score_all(evaluator, views, result, progress)
    previous = previous_batches(store, runs, config.evaluator)
    _write(store, config, evaluator, scored, previous, result)
    return result


def select_runs(store: Store, runs: Sequence[str], episodes: Sequence[str]) -> list[str]:
    """The runs to score: those named, those holding the named episodes, else all."""
    known = store.run_ids()
    unknown = [r for r in runs if r not in known]
    if unknown:
        raise EvaluatorError(f"unknown run {unknown[0]} in {store.root} (runs: {_listing(known)})")
    chosen = list(dict.fromkeys(runs)) or known
    if not episodes:
        return chosen
    table = store.read("episodes", columns=["episode_id", "run_id"])
    where = {e: r for e, r in zip(table.column("episode_id").to_pylist(), table.column("run_id").to_pylist())
             if r in chosen}
    missing = [e for e in episodes if e not in where]
    if missing:
        scope = f"run(s) {', '.join(runs)}" if runs else str(store.root)
        raise EvaluatorError(f"unknown episode {missing[0]} in {scope}")
    return list(dict.fromkeys(where[e] for e in episodes))


def _listing(items: Sequence[str], limit: int = 10) -> str:
    if not items:
        return "none"
    more = f", ... ({len(items)} in all)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def load_views(store: Store, runs: Iterable[str], only: set[str] | None = None) -> list[EpisodeView]:
    """The episodes of ``runs`` (only those in ``only`` when given) with tasks and steps."""
    views = []
    for run_id in runs:
        tasks = store.read("tasks", run_id=run_id, columns=["task_id", "original_json", "task_sha256"]).to_pylist()
        by_task = {t["task_id"]: task_from_dict(json.loads(t["original_json"]), t["task_id"], t["task_sha256"] or "")
                   for t in tasks}
        episodes = [e for e in store.read("episodes", run_id=run_id).to_pylist()
                    if not only or e["episode_id"] in only]
        steps = _steps_by_episode(store, run_id)
        for row in sorted(episodes, key=lambda e: (e["started_at"], e["episode_id"])):
            if row["task_id"] not in by_task:
                raise EvaluatorError(f"episode {row['episode_id']} of run {run_id} has no task {row['task_id']}")
            views.append(EpisodeView(run_id, row["episode_id"], by_task[row["task_id"]], row,
                                     tuple(steps.get(row["episode_id"], ()))))
    return views


def _steps_by_episode(store: Store, run_id: str) -> dict[str, list[StepView]]:
    steps: dict[str, list[StepView]] = defaultdict(list)
    for row in store.read("steps", run_id=run_id, columns=STEP_COLUMNS).to_pylist():
        episode_id = row.pop("episode_id")
        row["url"] = row["url"] or ""
        steps[episode_id].append(StepView(**{k: v for k, v in row.items() if k != "run_id"}))
    for items in steps.values():
        items.sort(key=lambda s: s.step_index)
    return steps


def _with_judgments(store: Store, evaluator: Evaluator, views: list[EpisodeView], settings: JudgeSettings,
                    result: RescoreResult, progress: Progress | None) -> list[tuple[EpisodeView, str | None]]:
    """Each episode with its judge replies, or with the reason it cannot be scored."""
    asks = getattr(evaluator, "judge_prompts", None)
    prompts = {v.episode_id: list(asks(v)) if asks else [] for v in views}
    wanted = [p for ps in prompts.values() for p in ps]
    if not wanted:
        return [(v, None) for v in views]
    model = getattr(evaluator, "args", {}).get("judge_model") or settings.model
    outcome = resolve(store, wanted, replace(settings, model=model),
                      (lambda done, total: progress("judge", done, total)) if progress else None)
    if outcome.new_rows:
        store.append("judge_cache", outcome.new_rows, stem=result.batch_id)
    result.judge_cached, result.judge_requested, result.judge_failed = \
        outcome.cached, outcome.requested, len(outcome.failures)
    return [_judged(v, prompts[v.episode_id], outcome) for v in views]


def _judged(view: EpisodeView, prompts: list[str], outcome: JudgeOutcome) -> tuple[EpisodeView, str | None]:
    failed = [outcome.failures[p] for p in prompts if p in outcome.failures]
    if failed:
        return view, failed[0]
    return replace(view, judgments={p: outcome.replies[p] for p in prompts}), None


def _score_all(evaluator: Evaluator, views: list[tuple[EpisodeView, str | None]], result: RescoreResult,
               progress: Progress | None) -> dict[str, tuple[EpisodeView, list[Score]]]:
    """Scores by episode id; episodes that cannot be scored go to ``result.unscored``."""
    scored = {}
    for done, (view, problem) in enumerate(views, start=1):
        rows, problem = (None, problem) if problem else _score_one(evaluator, view)
        if rows is None:
            result.unscored.append(Unscored(view.run_id, view.episode_id, view.task.task_id, problem or "unknown"))
        else:
            scored[view.episode_id] = (view, rows)
        if progress:
            progress("score", done, len(views))
    return scored


def _score_one(evaluator: Evaluator, view: EpisodeView) -> tuple[list[Score] | None, str | None]:
    try:
        rows = list(evaluator.score(view))
    except Exception as exc:  # a failing (third-party) evaluator leaves the episode unscored, not a traceback
        return None, f"evaluator failed: {type(exc).__name__}: {exc}"
    if not any(isinstance(r, Score) and r.level == "task" for r in rows):
        return None, "the evaluator returned no task-level score"
    if not all(isinstance(r, Score) for r in rows):
        return None, "the evaluator returned something that is not a Score"
    return rows, None


def previous_batches(store: Store, runs: Iterable[str], evaluator: str) -> dict[str, list[tuple[datetime, str, str]]]:
    """Earlier task-level verdicts of ``evaluator`` by episode: (scored_at, batch_id, verdict), oldest first."""
    found: dict[str, list[tuple[datetime, str, str]]] = defaultdict(list)
    for run_id in runs:
        table = store.read("scores", run_id=run_id, columns=["episode_id", "evaluator", "level", "verdict", "batch_id",
                                                             "scored_at"])
        if not table.num_rows:
            continue
        mask = pc.and_(pc.equal(table.column("evaluator"), evaluator), pc.equal(table.column("level"), "task"))
        for row in table.filter(mask).to_pylist():
            found[row["episode_id"]].append((row["scored_at"], row["batch_id"], row["verdict"]))
    for items in found.values():
        items.sort()
    return found


def _write(store: Store, config: RescoreConfig, evaluator: Evaluator, scored: dict[str, tuple[EpisodeView, list[Score]]],
           previous: dict[str, list[tuple[datetime, str, str]]], result: RescoreResult) -> None:
    """One file per run with every episode scored; runs with an unscored episode get none."""
    blocked = {u.run_id for u in result.unscored}
    by_run: dict[str, list[str]] = defaultdict(list)
    for episode_id, (view, _) in scored.items():
        by_run[view.run_id].append(episode_id)
    scored_at = utcnow()
    for run_id, episode_ids in by_run.items():
        written = run_id not in blocked
        rows = [row for e in episode_ids for row in
                score_rows(scored[e][0], scored[e][1], config, evaluator, result.batch_id, scored_at, previous.get(e, []))]
        if written and rows:
            result.files.append(str(store.append("scores", rows, stem=result.batch_id, run_id=run_id)))
        for episode_id in episode_ids:
            _record(result, *scored[episode_id], previous.get(episode_id, []), written)


def score_rows(view: EpisodeView, scores: list[Score], config: RescoreConfig, evaluator: Evaluator, batch_id: str,
               scored_at: datetime, previous: list[tuple[datetime, str, str]]) -> list[dict[str, Any]]:
    """The ``scores`` rows of one episode."""
    extra = {"supersedes": sorted({b for _, b, _ in previous})} if config.action == "overwrite" else {}
    return [{"episode_id": view.episode_id, "task_id": view.task.task_id, "evaluator": config.evaluator,
             "evaluator_version": str(evaluator.version), "args_json": args_json(evaluator.args), "level": s.level,
             "hop_index": s.hop_index, "step_index": s.step_index, "verdict": s.verdict, "value": float(s.value),
             "detail_json": json.dumps({**s.detail, **extra}, sort_keys=True, ensure_ascii=False, default=str),
             "batch_id": batch_id, "scored_at": scored_at} for s in scores]


def _record(result: RescoreResult, view: EpisodeView, scores: list[Score], previous: list[tuple[datetime, str, str]],
            written: bool) -> None:
    task = next(s for s in scores if s.level == "task")
    hops = [s for s in scores if s.level == "hop"]
    result.scored.append(ScoredEpisode(view.run_id, view.episode_id, view.task.task_id, view.n_hops, task.verdict,
                                       task.value, sum(h.verdict == "pass" for h in hops), len(hops), written))
    if written and previous and previous[-1][2] != task.verdict:
        result.flips.append(Flip(view.run_id, view.episode_id, view.task.task_id, previous[-1][2], task.verdict,
                                 previous[-1][1]))
