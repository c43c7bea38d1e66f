"""Score stored episodes with any evaluator and append the verdicts as a new batch.

One invocation is one :class:`~mmina.evaluators.batch.ScoreBatch`. Rows go to
``scores/run_id=<run>/<batch>.parquet``, one file per run, written only when every episode
of that run was scored — an episode that could not be scored (the judge endpoint failed
after its retries, the evaluator raised) leaves its run without a file, so a batch is never
half-written. ``--action overwrite`` writes a batch like ``append`` does — the store is
append-only — whose rows list the earlier batches of that evaluator they supersede.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mmina.evaluators.base import EpisodeView, Evaluator, EvaluatorError, Score, needs_steps
from mmina.evaluators.batch import ScoreBatch, score_rows
from mmina.evaluators.judge import JudgeOutcome, JudgeSettings, resolve
from mmina.evaluators.loading import Earlier, load_views, previous_batches
from mmina.evaluators.registry import factory, get
from mmina.store import Store
from mmina.tasks import BUCKETS, hop_bucket

ACTIONS = ("append", "overwrite")

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RescoreConfig:
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

    def as_json(self) -> dict[str, Any]:
        """The result for scripts (``--format json``)."""
        buckets = [{**asdict(b), "task_sr": b.task_sr, "hop_sr": b.hop_sr} for b in self.buckets()]
        return {"batch_id": self.batch_id, "evaluator": self.evaluator, "version": self.version, "args": self.args,
                "action": self.action, "ok": self.ok, "buckets": buckets, "flips": [asdict(f) for f in self.flips],
                "unscored": [asdict(u) for u in self.unscored], "episodes": [asdict(s) for s in self.scored],
                "files": self.files, "judge": {"cached": self.judge_cached, "requested": self.judge_requested,
                                                "failed": self.judge_failed}}

    def buckets(self) -> list[Bucket]:
        """SR by hop-count bucket, then overall, over the episodes whose rows were written."""
        written = [s for s in self.scored if s.written]
        groups = {name: [s for s in written if hop_bucket(s.n_hops) == name] for name in BUCKETS}
        groups["overall"] = written
        return [Bucket(name, len(group), sum(s.verdict == "pass" for s in group),
                       sum(s.verdict == "unclear" for s in group), sum(s.hops_passed for s in group),
                       sum(s.hops_total for s in group)) for name, group in groups.items()]


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


def rescore(store: Store, config: RescoreConfig, progress: Progress | None = None) -> RescoreResult:
    """Score the selected episodes, append the rows, report SR, flips and unscored episodes."""
    if config.action not in ACTIONS:
        raise EvaluatorError(f"--action must be one of {', '.join(ACTIONS)}, not {config.action!r}")
    evaluator = build_evaluator(config)
    runs = select_runs(store, config.runs, config.episodes)
    views = load_views(store, runs, set(config.episodes), with_steps=needs_steps(evaluator), evaluator=evaluator)
    previous = previous_batches(store, runs, config.evaluator)
    supersedes = {e: [b for b, _ in earlier] for e, earlier in previous.items()} \
        if config.action == "overwrite" else None
    batch = ScoreBatch.new(config.evaluator, evaluator.version, evaluator.args, supersedes)
    result = RescoreResult(batch.batch_id, batch.evaluator, batch.version, dict(batch.args), config.action)
    judged = _with_judgments(store, evaluator, views, config.judge, result, progress)
    scored = _score_all(evaluator, judged, result, progress)
    _write(store, batch, scored, previous, result)
    return result


def select_runs(store: Store, runs: Sequence[str], episodes: Sequence[str]) -> list[str]:
    """The runs to score: those named, those holding the named episodes, else all."""
    chosen = store.select_runs(runs)
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


def _write(store: Store, batch: ScoreBatch, scored: dict[str, tuple[EpisodeView, list[Score]]],
           previous: Mapping[str, list[Earlier]], result: RescoreResult) -> None:
    """One file per run with every episode scored; runs with an unscored episode get none."""
    blocked = {u.run_id for u in result.unscored}
    by_run: dict[str, list[str]] = defaultdict(list)
    for episode_id, (view, _) in scored.items():
        by_run[view.run_id].append(episode_id)
    for run_id, episode_ids in by_run.items():
        written = run_id not in blocked
        rows = [row for e in episode_ids for row in score_rows(*scored[e], batch)]
        if written and rows:
            result.files.append(str(store.append("scores", rows, stem=batch.batch_id, run_id=run_id)))
        for episode_id in episode_ids:
            _record(result, *scored[episode_id], previous.get(episode_id, []), written)


def _record(result: RescoreResult, view: EpisodeView, scores: list[Score], previous: list[Earlier],
            written: bool) -> None:
    task = next(s for s in scores if s.level == "task")
    hops = [s for s in scores if s.level == "hop"]
    result.scored.append(ScoredEpisode(view.run_id, view.episode_id, view.task.task_id, view.n_hops, task.verdict,
                                       task.value, sum(h.verdict == "pass" for h in hops), len(hops), written))
    if written and previous and previous[-1][1] != task.verdict:
        result.flips.append(Flip(view.run_id, view.episode_id, view.task.task_id, previous[-1][1], task.verdict,
                                 previous[-1][0]))
