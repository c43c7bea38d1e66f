"""Score stored episodes with any evaluator and append the verdicts as a new batch.

One invocation is one :class:`~mmina.evaluators.batch.ScoreBatch`. Rows go to
``scores/run_id=<run>/<batch>.parquet``, one file per run, written only when every episode
of that run was scored — an episode that could not be scored (the judge endpoint failed
after its retries, the evaluator raised) leaves its run without a file, so a batch is never
half-written. ``--action overwrite`` writes a batch like ``append`` does — the store is
append-only — whose rows list the earlier batches of that evaluator they supersede.

With ``--workers N`` (and ``--executor ray``) groups of runs are scored side by side, each
by a :class:`RescoreJob` in a process or Ray actor of its own, into the same batch: one id
and time, one file per run, exactly the rows one process would have written.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import PurePath
from typing import Any, NamedTuple

from mmina.errors import SEE_EPISODES, not_found
from mmina.evaluators.base import (
    NOT_APPLICABLE,
    EpisodeView,
    Evaluator,
    EvaluatorError,
    Score,
    ScoreRow,
    failure,
    missing_reference,
    needs_steps,
)
from mmina.evaluators.batch import Outcome, ScoreBatch, ScoreColumns, score_table
from mmina.evaluators.judge import (
    FUZZY_PROMPT_VERSION,
    JudgeConfig,
    JudgeOutcome,
    JudgeRequest,
    canonical,
    resolve,
)
from mmina.evaluators.loading import (
    Earlier,
    EpisodeBatch,
    by_run,
    load_episodes,
    previous_batches,
    with_steps,
)
from mmina.evaluators.registry import factory, get
from mmina.evaluators.rescore_settings import ACTIONS, JudgeSettings, RescoreConfig
from mmina.evaluators.strings import gold_urls, references
from mmina.executors.interface import Layout
from mmina.executors.spread import spread
from mmina.store import Store
from mmina.store.layout import data_name, table_dir
from mmina.store.schema import SCHEMA_VERSION, SCORES
from mmina.tasks.task import BUCKETS, Task, hop_bucket, task_from_row

REFERENCE_KEYS = ("exact_match", "must_include", "fuzzy_match")

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, kw_only=True)
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
    cost_usd: float | None = None


@dataclass(frozen=True)
class Unscored:
    run_id: str
    episode_id: str
    task_id: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Flip:
    run_id: str
    episode_id: str
    task_id: str
    before: str
    after: str
    previous_batch: str


@dataclass(frozen=True, kw_only=True)
class Bucket:
    """Task SR and hop SR of one hop-count bucket (``1``, ``2-4``, ``5+`` or ``overall``)."""

    name: str
    episodes: int
    tasks_passed: int
    tasks_unclear: int
    hops_passed: int
    hops_total: int
    tasks_na: int = 0
    """Episodes with nothing to judge (verdict n/a): in no rate."""

    @property
    def judged(self) -> int:
        """Episodes with a verdict that counts: all but the n/a ones."""
        return self.episodes - self.tasks_na

    @property
    def task_sr(self) -> float | None:
        """None when no episode had anything to judge."""
        return self.tasks_passed / self.judged if self.judged else None

    @property
    def hop_sr(self) -> float | None:
        """None when the evaluator gives no hop-level rows."""
        return self.hops_passed / self.hops_total if self.hops_total else None


@dataclass
class JudgeSpend:
    """Tokens of the judge replies a rescoring's verdicts rest on (each distinct request once),
    and of those it sent for now (the rest came from the cache), priced at the evaluator's
    ``price_in`` / ``price_out`` (USD per million tokens; 0 when it has none)."""

    prices: tuple[float, float] = (0.0, 0.0)
    tokens: list[int] = field(default_factory=lambda: [0, 0])
    new_tokens: list[int] = field(default_factory=lambda: [0, 0])

    def add(self, outcome: JudgeOutcome) -> None:
        asked = {row["prompt"] for row in outcome.new_rows}
        for prompt, (given, taken) in outcome.usage.items():
            self.tokens[0], self.tokens[1] = self.tokens[0] + given, self.tokens[1] + taken
            if prompt in asked:
                self.new_tokens[0], self.new_tokens[1] = (
                    self.new_tokens[0] + given,
                    self.new_tokens[1] + taken,
                )

    def merge(self, other: JudgeSpend) -> None:
        self.tokens = [a + b for a, b in zip(self.tokens, other.tokens)]
        self.new_tokens = [a + b for a, b in zip(self.new_tokens, other.new_tokens)]

    def cost(self, tokens: Sequence[int]) -> float:
        return round((tokens[0] * self.prices[0] + tokens[1] * self.prices[1]) / 1e6, 8)

    def as_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.tokens[0],
            "completion_tokens": self.tokens[1],
            "cost_usd": self.cost(self.tokens),
            "new_prompt_tokens": self.new_tokens[0],
            "new_completion_tokens": self.new_tokens[1],
            "spent_usd": self.cost(self.new_tokens),
        }


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
    judge_spend: JudgeSpend = field(default_factory=JudgeSpend)
    judge_changes: list[str] = field(default_factory=list)
    """What the judge's provider changed or refused, in words (each verdict's ``judge_json`` has it in full)."""
    judge_config: dict[str, Any] | None = None
    """The judge asked (model, endpoint host, prompt version, sampling), for an evaluator with a judge."""

    @property
    def ok(self) -> bool:
        return not self.unscored

    def as_json(self) -> dict[str, Any]:
        """The result for scripts (``--format json``)."""
        buckets = [{**asdict(b), "task_sr": b.task_sr, "hop_sr": b.hop_sr} for b in self.buckets()]
        return {
            "batch_id": self.batch_id,
            "evaluator": self.evaluator,
            "version": self.version,
            "args": self.args,
            "action": self.action,
            "ok": self.ok,
            "buckets": buckets,
            "flips": [asdict(f) for f in self.flips],
            "unscored": [asdict(u) for u in self.unscored],
            "episodes": [asdict(s) for s in self.scored],
            "files": self.files,
            "judge": {
                "cached": self.judge_cached,
                "requested": self.judge_requested,
                "failed": self.judge_failed,
            },
            "judge_usage": self.judge_spend.as_json(),
            "judge_changes": self.judge_changes,
            "judge_config": self.judge_config,
        }

    def buckets(self) -> list[Bucket]:
        """SR by hop-count bucket, then overall, over the episodes whose rows were written."""
        written = [s for s in self.scored if s.written]
        groups = {name: [s for s in written if hop_bucket(s.n_hops) == name] for name in BUCKETS}
        groups["overall"] = written
        return [
            Bucket(
                name=name,
                episodes=len(group),
                tasks_passed=sum(s.verdict == "pass" for s in group),
                tasks_unclear=sum(s.verdict == "unclear" for s in group),
                hops_passed=sum(s.hops_passed for s in group),
                hops_total=sum(s.hops_total for s in group),
                tasks_na=sum(s.verdict == NOT_APPLICABLE for s in group),
            )
            for name, group in groups.items()
        ]


def build_evaluator(config: RescoreConfig) -> Evaluator:
    """The evaluator with its arguments; a judge model given on the command line is
    recorded in the arguments of evaluators that use a judge, and the judge's prices in those
    of evaluators that record what their verdicts cost (``price_in`` / ``price_out``)."""
    make = factory(config.evaluator)
    args = dict(config.args)
    if getattr(make, "uses_judge", False) and config.judge.model and "judge_model" not in args:
        args["judge_model"] = config.judge.model
    for name, price in (("price_in", config.judge.price_in), ("price_out", config.judge.price_out)):
        if price is not None and name not in args:
            if name not in getattr(make, "ARGS", {}):
                raise EvaluatorError(
                    f"evaluator {config.evaluator} records no cost: --judge-price-in and "
                    "--judge-price-out are for evaluators that do (keypoints)"
                )
            args[name] = price
    if getattr(make, "requires_judge", False) and not args.get("judge_model"):
        raise EvaluatorError(f"evaluator {config.evaluator} asks an LLM judge: pass --judge-model NAME")
    return get(config.evaluator, **args)


def prices_of(scorer: Evaluator | ScoreBatch) -> tuple[float, float]:
    """The judge's prices in the evaluator's (or batch's) arguments, USD per million tokens."""
    args = scorer.args
    return float(args.get("price_in") or 0.0), float(args.get("price_out") or 0.0)


def rescore(
    store: Store, config: RescoreConfig, progress: Progress | None = None, layout: Layout = Layout()
) -> RescoreResult:
    """Score the selected episodes, append the rows, report SR, flips and unscored episodes;
    ``layout``: how many workers score groups of runs side by side, and where."""
    if config.action not in ACTIONS:
        raise EvaluatorError(f"--action must be one of {', '.join(ACTIONS)}, not {config.action!r}")
    evaluator = build_evaluator(config)
    runs = select_runs(store, config.runs, config.episodes)
    check_applicable(store, evaluator, runs)
    every = (not config.runs and not config.episodes) or set(runs) == set(store.run_ids())
    batch = ScoreBatch.new(config.evaluator, evaluator.version, evaluator.args)
    if layout.in_this_process(len(runs)):
        with cycle_collector_paused():
            return score_runs(store, config, evaluator, Share(runs, every, batch), progress)
    return _spread(store, config, Share(runs, every, batch), layout, progress)


@contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Rescoring holds millions of objects (step columns, rows, details) and makes no
    reference cycles of its own: the cycle collector's repeated full passes over them cost
    about a third of a large rescoring. It runs again as before once rescoring is done."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class Share:
    """The runs one scorer takes and the batch they go to (``every``: they are all the store's
    runs; ``part``: which share of a spread rescoring, named in its judge cache file)."""

    runs: list[str]
    every: bool
    batch: ScoreBatch
    part: int | None = None

    @property
    def judge_stem(self) -> str:
        return self.batch.batch_id if self.part is None else f"{self.batch.batch_id}-{self.part}"


def score_runs(
    store: Store, config: RescoreConfig, evaluator: Evaluator, share: Share, progress: Progress | None
) -> RescoreResult:
    """Score the episodes of ``share.runs`` into its batch and write a file per run."""
    episodes = load_episodes(store, share.runs, set(config.episodes), evaluator, share.every)
    previous = previous_batches(store, share.runs, config.evaluator, share.every)
    batch = (
        share.batch
        if config.action != "overwrite"
        else replace(share.batch, supersedes={e: [b for b, _ in earlier] for e, earlier in previous.items()})
    )
    result = RescoreResult(
        batch.batch_id,
        batch.evaluator,
        batch.version,
        dict(batch.args),
        config.action,
        judge_spend=JudgeSpend(prices_of(evaluator)),
    )
    with ThreadPoolExecutor(1) as writer:  # a file is compressed and flushed while the next run is scored
        saved: list[Future[PurePath]] = []
        for part, columns in _scored(store, evaluator, episodes, config.judge, share, result, progress):
            saved += _write(store, batch, part, columns, previous, result, writer)
        result.files = [str(file.result()) for file in saved]
    return result


class RescoreJob:
    """A worker of a spread rescoring (a job of ``mmina.executors.interface``): its own store handle and
    evaluator, scoring one share of the runs at a time into the shared batch."""

    def __init__(self, location: str, config: RescoreConfig, batch: ScoreBatch) -> None:
        self.store = Store.open(location)
        self.config = config
        self.evaluator = build_evaluator(config)
        self.batch = batch
        if str(self.evaluator.version) != batch.version:
            raise EvaluatorError(
                f"evaluator {config.evaluator} is version {self.evaluator.version} on this worker "
                f"but {batch.version} where the rescoring started: install the same mmina "
                "and evaluators everywhere"
            )

    def work(self, share: Share) -> RescoreResult:
        """Score the share's runs; those written already (by a worker lost after writing them,
        whose share this is again) are read back instead of scored twice."""
        written = [run for run in share.runs if self.store.holds("scores", share.batch.batch_id, run)]
        result = self.stored(written)
        todo = [run for run in share.runs if run not in written]
        if todo:
            with cycle_collector_paused():
                _merge(
                    result,
                    score_runs(self.store, self.config, self.evaluator, replace(share, runs=todo), None),
                )
        return result

    def stored(self, runs: Sequence[str]) -> RescoreResult:
        """The batch's rows of ``runs`` as written, as a result (no flips: they were counted
        where they were scored)."""
        batch = self.batch
        result = RescoreResult(
            batch.batch_id,
            batch.evaluator,
            batch.version,
            dict(batch.args),
            self.config.action,
            judge_spend=JudgeSpend(prices_of(batch)),
        )
        for run_id in runs:
            n_hops = {
                r["task_id"]: r["n_hops"]
                for r in self.store.read("tasks", run_id=run_id, columns=["task_id", "n_hops"]).to_pylist()
            }
            rows = [
                r
                for r in self.store.read("scores", run_id=run_id).to_pylist()
                if r["batch_id"] == batch.batch_id
            ]
            result.scored += stored_episodes(run_id, rows, n_hops)
            result.files.append(
                str(table_dir(self.store.root, SCORES, run_id) / data_name(batch.batch_id, SCHEMA_VERSION))
            )
        return result

    def close(self) -> None:
        pass


SHARES_PER_WORKER = 4
"""Runs are cut into this many shares per worker, so that a worker done early takes more."""


def _spread(
    store: Store, config: RescoreConfig, whole: Share, layout: Layout, progress: Progress | None
) -> RescoreResult:
    """Shares of the runs scored by workers where ``layout`` says, merged in run order."""
    count = min(len(whole.runs), layout.workers * SHARES_PER_WORKER)
    shares = [
        Share(
            whole.runs[i * len(whole.runs) // count : (i + 1) * len(whole.runs) // count],
            False,
            whole.batch,
            i,
        )
        for i in range(count)
    ]
    done: dict[int, RescoreResult] = {}
    settled = partial(
        _written, store, whole.batch.batch_id
    )  # a lost worker's share: again, unless all written
    for share, part in spread(
        partial(RescoreJob, store.location, config, whole.batch), shares, layout, settled=settled
    ):
        assert share.part is not None  # every share of a spread rescoring has its number
        done[share.part] = part
        if progress:
            progress("runs", sum(len(shares[i].runs) for i in done), len(whole.runs))
    batch = whole.batch
    result = RescoreResult(
        batch.batch_id,
        batch.evaluator,
        batch.version,
        dict(batch.args),
        config.action,
        judge_spend=JudgeSpend(prices_of(batch)),
    )
    for index in sorted(done):
        _merge(result, done[index])
    return result


def _written(store: Store, batch_id: str, share: Share) -> bool:
    return all(store.holds("scores", batch_id, run) for run in share.runs)


def stored_episodes(
    run_id: str, rows: Sequence[Mapping[str, Any]], n_hops: Mapping[str, int]
) -> list[ScoredEpisode]:
    """The episodes of one run's written score rows (of one batch): the task row's verdict and
    value, and the hop rows passed of all."""
    hops: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        if row["level"] == "hop":
            hops[row["episode_id"]].append(row["verdict"] == "pass")
    return [
        ScoredEpisode(
            run_id=run_id,
            episode_id=r["episode_id"],
            task_id=r["task_id"],
            n_hops=n_hops.get(r["task_id"], 0),
            verdict=r["verdict"],
            value=r["value"],
            hops_passed=sum(hops[r["episode_id"]]),
            hops_total=len(hops[r["episode_id"]]),
            written=True,
        )
        for r in rows
        if r["level"] == "task"
    ]


def _merge(result: RescoreResult, part: RescoreResult) -> None:
    result.scored += part.scored
    result.unscored += part.unscored
    result.flips += part.flips
    result.files += part.files
    result.judge_cached += part.judge_cached
    result.judge_requested += part.judge_requested
    result.judge_failed += part.judge_failed
    result.judge_spend.merge(part.judge_spend)
    result.judge_changes = list(dict.fromkeys([*result.judge_changes, *part.judge_changes]))
    result.judge_config = result.judge_config or part.judge_config


def check_applicable(store: Store, evaluator: Evaluator, runs: Sequence[str]) -> None:
    """Refuse, before anything is written, an evaluator that has nothing to judge in any task of
    the runs (e.g. ``fuzzy`` on tasks without ``fuzzy_match`` references): a batch of n/a
    verdicts would only look like a result. The error says which references the tasks have."""
    if not runs or getattr(evaluator, "missing_reference", None) is None:
        return
    chosen = set(runs)
    rows = [r for r in store.read("tasks").to_pylist() if r["run_id"] in chosen]
    tasks = [task_from_row(r) for r in rows]
    reasons = [missing_reference(evaluator, t) for t in tasks]
    if tasks and all(reasons):
        raise EvaluatorError(
            f"evaluator {evaluator.name} has nothing to judge in {len(tasks)} task(s): "
            f"{reasons[0]}{'' if len(set(reasons)) == 1 else ' (or the like)'}; "
            f"{reference_hint(evaluator, tasks)}"
        )


def reference_hint(evaluator: Evaluator, tasks: Sequence[Task]) -> str:
    """Which references the tasks do have, and how to judge against them."""
    counts = {key: sum(bool(references(t, key)) for t in tasks) for key in REFERENCE_KEYS}
    counts["url_match"] = sum(bool(gold_urls(t)) for t in tasks)
    present = {key: n for key, n in counts.items() if n}
    if not present:
        return "the tasks have no reference answer nor reference_url"
    have = ", ".join(f"{key} in {n}" for key, n in present.items())
    choices = [c for c in getattr(evaluator, "CHOICES", {}).get("reference", ()) if c in present]
    how = f"--arg reference={choices[0]}" if choices else " or ".join(f"--evaluator {key}" for key in present)
    return f"the tasks have {have}: try {how}"


def select_runs(store: Store, runs: Sequence[str], episodes: Sequence[str]) -> list[str]:
    """The runs to score: those named, those holding the named episodes, else all."""
    chosen = store.select_runs(runs)
    if not episodes:
        return chosen
    table = store.read("episodes", columns=["episode_id", "run_id"])
    where = {
        e: r
        for e, r in zip(table.column("episode_id").to_pylist(), table.column("run_id").to_pylist())
        if r in chosen
    }
    missing = [e for e in episodes if e not in where]
    if missing:
        scope = f"run(s) {', '.join(runs)}" if runs else str(store.root)
        why = store.why_no_episode(missing[0])
        raise EvaluatorError(not_found("episode", missing[0], scope, where, SEE_EPISODES) + why)
    return list(dict.fromkeys(where[e] for e in episodes))


def _scored(
    store: Store,
    evaluator: Evaluator,
    episodes: EpisodeBatch,
    settings: JudgeSettings,
    share: Share,
    result: RescoreResult,
    progress: Progress | None,
) -> Iterator[tuple[EpisodeBatch, ScoreColumns]]:
    """The episodes with their rows (or the reasons they cannot be scored): run by run
    through the evaluator's ``score_batch`` when it has one and asks no judge, else all at
    once, view by view (the judge is asked for every episode's prompts together)."""
    batched = None if judge_asker(evaluator) is not None else getattr(evaluator, "score_batch", None)
    if batched is None:
        episodes = with_steps(store, episodes, evaluator, share.every) if needs_steps(evaluator) else episodes
        columns = ScoreColumns()
        judged = _with_judgments(
            store, evaluator, episodes.views(), settings, share.judge_stem, result, progress
        )
        _score_views(evaluator, judged, columns, progress)
        yield episodes, columns
        return
    done = 0
    for part in by_run(store, episodes, evaluator) if needs_steps(evaluator) else [episodes]:
        columns = ScoreColumns()
        batched(part, columns)
        yield part, columns
        done += len(part)
        if progress:
            progress("score", done, len(episodes))


def _score_views(
    evaluator: Evaluator, judged: list[Judged], columns: ScoreColumns, progress: Progress | None
) -> None:
    for done, (view, problem, judge) in enumerate(judged, start=1):
        rows, problem = (None, problem) if problem else _score_one(evaluator, view)
        if rows is None:
            columns.fail(done - 1, problem or "unknown")
        else:
            columns.add(
                done - 1,
                [
                    ScoreRow(
                        verdict=s.verdict,
                        value=s.value,
                        level=s.level,
                        hop_index=s.hop_index,
                        step_index=s.step_index,
                        detail=s.detail,
                    )
                    for s in rows
                ],
                judge,
            )
        if progress:
            progress("score", done, len(judged))


MAX_ROUNDS = 8
"""Rounds of judge requests an evaluator may ask in stages (each round's requests depend on
the replies before): more means it keeps asking, and its episodes go unscored."""

Asker = Callable[[EpisodeView], list[JudgeRequest]]


JUDGE_CONFIG_KEYS = ("model", "endpoint", "prompt_version", "asked")
"""What a rescoring's result says of the judge it asked (its rows' ``judge_json`` say the rest)."""


class Judged(NamedTuple):
    """An episode with its judge replies, or the reason it cannot be scored; ``judge``: the
    ``judge_json`` of its rows (None for an evaluator without a judge)."""

    view: EpisodeView
    problem: str | None
    judge: str | None


@dataclass
class Calls:
    """The judge calls each episode's verdicts rest on (their ``judge_json``), and how many came from the cache."""

    made: dict[str, dict[str, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))
    cached: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, episode_id: str, requests: list[JudgeRequest], outcome: JudgeOutcome) -> None:
        for request in requests:
            if request.prompt in outcome.calls:
                self.made[episode_id][request.prompt] = outcome.calls[request.prompt]
                self.cached[episode_id] += request.prompt in outcome.from_cache

    def changes(self, config: JudgeConfig) -> list[str]:
        """What the provider refused or answered with instead, over every call, in words."""
        made = [c for by_prompt in self.made.values() for c in by_prompt.values()]
        refused = sorted({p for c in made for p in c.get("refused", ())})
        models = sorted({c["reply_model"] for c in made if c.get("reply_model") not in (None, config.model)})
        return (
            [
                f"the judge endpoint refused {', '.join(refused)}: dropped from the calls that it refused "
                "(their verdicts say so in judge_json.refused)"
            ]
            if refused
            else []
        ) + ([f"the judge's replies say {', '.join(models)} answered, not {config.model}"] if models else [])

    def judge_json(self, config: JudgeConfig, episode_id: str) -> str:
        return canonical(config.summary(list(self.made[episode_id].values()), self.cached[episode_id]))


def judge_asker(evaluator: object) -> Asker | None:
    """What the evaluator asks the judge of an episode (given the replies so far), or None
    when it asks nothing: its ``judge_requests``, or its ``judge_prompts`` as plain questions."""
    requests = getattr(evaluator, "judge_requests", None)
    if requests is not None:
        return requests
    prompts = getattr(evaluator, "judge_prompts", None)
    return None if prompts is None else (lambda view: [JudgeRequest.plain(p) for p in prompts(view)])


def _with_judgments(
    store: Store,
    evaluator: Evaluator,
    views: list[EpisodeView],
    settings: JudgeSettings,
    stem: str,
    result: RescoreResult,
    progress: Progress | None,
) -> list[Judged]:
    """Each episode with its judge replies, or with the reason it cannot be scored, and the
    judge's configuration its rows carry. Requests are asked in rounds, all episodes' at once,
    until no episode needs another (new replies are cached in a ``judge_cache`` file per round,
    the first named ``stem``). A judge that cannot answer leaves the episode unscored: no
    other evaluator stands in for it."""
    asker = judge_asker(evaluator)
    judged = {v.episode_id: v for v in views}
    problems: dict[str, str] = {}
    model = getattr(evaluator, "args", {}).get("judge_model") or settings.model
    version = str(getattr(evaluator, "prompt_version", FUZZY_PROMPT_VERSION))
    calls = Calls()
    for round_number in range(MAX_ROUNDS + 1):
        wanted = _still_wanted(asker, judged, problems)
        if not wanted:
            break
        if round_number == MAX_ROUNDS:
            problems |= {e: f"the evaluator still asked the judge after {MAX_ROUNDS} rounds" for e in wanted}
            break
        outcome = resolve(
            store,
            [r for rs in wanted.values() for r in rs],
            replace(settings, model=model),
            (lambda done, total: progress("judge", done, total)) if progress else None,
            version,
        )
        if outcome.new_rows:
            store.append(
                "judge_cache",
                outcome.new_rows,
                stem=stem if round_number == 0 else f"{stem}-{round_number + 1}",
            )
        result.judge_cached += outcome.cached
        result.judge_requested += outcome.requested
        result.judge_failed += len(outcome.failures)
        result.judge_spend.add(outcome)
        for episode_id, requests in wanted.items():
            judged[episode_id], problem = _judged(judged[episode_id], requests, outcome)
            calls.add(episode_id, requests, outcome)
            if problem:
                problems[episode_id] = problem
    config = JudgeConfig.of(replace(settings, model=model), version) if asker is not None and model else None
    if config:
        result.judge_changes = calls.changes(config)
        result.judge_config = {k: v for k, v in config.summary([], 0).items() if k in JUDGE_CONFIG_KEYS}
    return [
        Judged(
            judged[v.episode_id],
            problems.get(v.episode_id),
            calls.judge_json(config, v.episode_id) if config else None,
        )
        for v in views
    ]


def _still_wanted(
    asker: Asker | None, judged: Mapping[str, EpisodeView], problems: Mapping[str, str]
) -> dict[str, list[JudgeRequest]]:
    """The requests each episode (not given up on) needs that it has no reply to yet."""
    if asker is None:
        return {}
    wanted = {}
    for episode_id, view in judged.items():
        if episode_id not in problems:
            new = [r for r in asker(view) if r.prompt not in view.judgments]
            if new:
                wanted[episode_id] = new
    return wanted


def _judged(
    view: EpisodeView, requests: list[JudgeRequest], outcome: JudgeOutcome
) -> tuple[EpisodeView, str | None]:
    failed = [outcome.failures[r.prompt] for r in requests if r.prompt in outcome.failures]
    if failed:
        return view, failed[0]
    prompts = [r.prompt for r in requests]
    return replace(
        view,
        judgments={**view.judgments, **{p: outcome.replies[p] for p in prompts}},
        judge_usage={**view.judge_usage, **{p: outcome.usage[p] for p in prompts}},
    ), None


def _score_one(evaluator: Evaluator, view: EpisodeView) -> tuple[list[Score] | None, str | None]:
    try:
        rows = list(evaluator.score(view))
    except Exception as exc:  # a failing (third-party) evaluator leaves the episode unscored, not a traceback
        return None, failure(exc)
    if not any(isinstance(r, Score) and r.level == "task" for r in rows):
        return None, "the evaluator returned no task-level score"
    if not all(isinstance(r, Score) for r in rows):
        return None, "the evaluator returned something that is not a Score"
    return rows, None


def _write(
    store: Store,
    batch: ScoreBatch,
    episodes: EpisodeBatch,
    columns: ScoreColumns,
    previous: Mapping[str, list[Earlier]],
    result: RescoreResult,
    writer: Executor,
) -> list[Future[PurePath]]:
    """One file per run with every episode scored, written by ``writer``; runs with an
    unscored episode get none."""
    for position, reason in columns.failures.items():
        result.unscored.append(
            Unscored(
                episodes.run_ids[position],
                episodes.episode_ids[position],
                episodes.tasks[position].task_id,
                reason,
            )
        )
    blocked = {u.run_id for u in result.unscored}
    table = score_table(columns, episodes.episode_ids, [t.task_id for t in episodes.tasks], batch)
    saved = []
    for run_id, positions in _by_run(columns.outcomes, episodes.run_ids).items():
        written = run_id not in blocked
        if written:
            start, end = columns.rows[positions[0]][0], columns.rows[positions[-1]][1]
            saved.append(
                writer.submit(
                    store.append_arrow, "scores", table.slice(start, end - start), batch.batch_id, run_id
                )
            )
        for position in positions:
            _record(
                result,
                episodes,
                position,
                columns.outcomes[position],
                previous.get(episodes.episode_ids[position], []),
                written,
            )
    return saved


def _by_run(positions: Iterable[int], run_ids: Sequence[str]) -> dict[str, list[int]]:
    """Positions by run; a run's episodes are consecutive, so are its rows."""
    runs: dict[str, list[int]] = defaultdict(list)
    for position in positions:
        runs[run_ids[position]].append(position)
    return runs


def _record(
    result: RescoreResult,
    episodes: EpisodeBatch,
    position: int,
    outcome: Outcome,
    previous: list[Earlier],
    written: bool,
) -> None:
    run_id, episode_id, task = (
        episodes.run_ids[position],
        episodes.episode_ids[position],
        episodes.tasks[position],
    )
    result.scored.append(
        ScoredEpisode(
            run_id=run_id,
            episode_id=episode_id,
            task_id=task.task_id,
            n_hops=task.n_hops,
            verdict=outcome.verdict,
            value=outcome.value,
            hops_passed=outcome.hops_passed,
            hops_total=outcome.hops_total,
            written=written,
            cost_usd=outcome.cost_usd,
        )
    )
    if written and previous and previous[-1][1] != outcome.verdict:
        result.flips.append(
            Flip(
                run_id=run_id,
                episode_id=episode_id,
                task_id=task.task_id,
                before=previous[-1][1],
                after=outcome.verdict,
                previous_batch=previous[-1][0],
            )
        )
