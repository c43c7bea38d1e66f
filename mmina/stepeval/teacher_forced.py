"""``mmina eval-steps``: ask an agent for the next action of stored steps and score it.

One invocation is one batch of ``scores`` rows (evaluator ``step_action``, ``level`` =
``step``, ``step_index`` set), one file per run, written by
:func:`mmina.evaluators.batch.score_rows`. Each row's ``detail_json`` holds the prediction, the
raw output, tokens, cost and the verdicts (keys in :data:`DETAIL_KEYS`); ``verdict``/``value``
are the whole action's. Steps the agent could not be asked about (endpoint failure, judge
failure) are listed as failed and get no row; steps without a screenshot under an agent that
needs one are listed as skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mmina.actions.grammar import parse_action, parse_agent_output
from mmina.agents.settings import HISTORY_ACTIONS, AgentSettings
from mmina.errors import AgentError, MminaError
from mmina.evaluators.base import EpisodeView, Score
from mmina.evaluators.batch import ScoreBatch, score_rows
from mmina.evaluators.judge import (
    JudgeConfig,
    JudgeOutcome,
    JudgeSettings,
    canonical,
    judge_prompt,
    parse_verdict,
    resolve,
)
from mmina.stepeval import action_match as compare
from mmina.stepeval.action_match import ActionFacts, StepScore
from mmina.stepeval.predictor import Prediction, make_step_agent, needs_screenshot, predict
from mmina.stepeval.step_report import StepReport, build_report
from mmina.stepeval.steps import (
    ReferenceStep,
    StepEvalError,
    load_reference_steps,
    observation,
    sample,
    screenshots,
)
from mmina.store import Store

EVALUATOR = "step_action"
VERSION = "1"
CHUNK = 32
DETAIL_KEYS = (
    "reference_action",
    "reference_op",
    "reference_target",
    "reference_target_label",
    "reference_value",
    "predicted_action",
    "predicted_op",
    "predicted_target",
    "predicted_target_label",
    "predicted_value",
    "raw_output",
    "parse_error",
    "op_ok",
    "target_ok",
    "value_ok",
    "value_method",
    "action_ok",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "agent_ms",
    "history",
    "history_shown",
    "previous_actions",
    "website",
    "hop",
    "position",
    "n_steps",
)
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EvalConfig:
    run_id: str
    agent: str
    settings: AgentSettings = field(default_factory=AgentSettings)
    sample: int | None = None
    seed: int = 0
    history: int = HISTORY_ACTIONS
    all_steps: bool = False
    episodes: tuple[str, ...] = ()
    judge: JudgeSettings = field(default_factory=JudgeSettings)

    def args(self) -> dict[str, Any]:
        """What rebuilds the batch: recorded as the rows' ``args_json``."""
        s = self.settings
        return {
            "agent": self.agent,
            "model": s.model,
            "input_mode": s.input_mode,
            "temperature": s.temperature,
            "history": self.history,
            "sample": self.sample,
            "seed": self.seed,
            "references": "all" if self.all_steps else "succeeded",
            "episodes": list(self.episodes),
            "value_judge": self.judge.model,
        }


@dataclass(frozen=True)
class StepProblem:
    episode_id: str
    step_index: int
    reason: str


@dataclass
class EvalResult:
    batch_id: str
    run_id: str
    args: dict[str, Any]
    references: int = 0
    details: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[StepProblem] = field(default_factory=list)
    failed: list[StepProblem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    def report(self) -> StepReport:
        return build_report(self.details)

    def as_json(self) -> dict[str, Any]:
        """The batch for scripts (``--format json``): its figures, files and problems."""
        return {
            "batch_id": self.batch_id,
            "run_id": self.run_id,
            "args": self.args,
            "ok": self.ok,
            "references": self.references,
            **self.report().as_dict(),
            "files": self.files,
            "skipped": [asdict(s) for s in self.skipped],
            "failed": [asdict(f) for f in self.failed],
        }


@dataclass(frozen=True, kw_only=True)
class _Asked:
    step: ReferenceStep
    history: list[str]
    prediction: Prediction
    reference: ActionFacts
    predicted: ActionFacts | None
    parse_error: str | None
    labels: dict[str, Any]


def eval_steps(store: Store, config: EvalConfig, progress: Progress | None = None) -> EvalResult:
    """Sample the run's reference steps, ask the agent, score, append one batch of step rows."""
    if config.history < 0:
        raise StepEvalError("--history must be 0 or more")
    config = replace(config, run_id=store.resolve_run(config.run_id))
    references = load_reference_steps(store, config.run_id, config.all_steps, config.episodes)
    if not references:
        raise StepEvalError(
            f"run {config.run_id} has no reference steps: no episode succeeded "
            "(pass --all-steps to use every step)"
        )
    agent = make_step_agent(config.agent, config.settings, config.history, store)
    batch = ScoreBatch.new(EVALUATOR, VERSION, config.args())
    result = EvalResult(batch.batch_id, config.run_id, dict(batch.args), len(references))
    chosen = sample(references, config.sample, config.seed)
    askable = _skip_without_screenshot(chosen, needs_screenshot(agent), result)
    asked = _ask_all(store, agent, askable, config.history, result, progress)
    scores = _score_all(store, asked, config.judge, result)
    _write(store, batch, config, scores, result)
    return result


def _skip_without_screenshot(
    steps: list[ReferenceStep], needed: bool, result: EvalResult
) -> list[ReferenceStep]:
    if not needed:
        return steps
    for step in steps:
        if not step.has_screenshot:
            result.skipped.append(
                StepProblem(step.episode_id, step.step_index, "no screenshot recorded (the agent needs one)")
            )
    return [s for s in steps if s.has_screenshot]


def _ask_all(
    store: Store,
    agent: Any,
    steps: list[ReferenceStep],
    k: int,
    result: EvalResult,
    progress: Progress | None,
) -> list[_Asked]:
    asked = []
    for start in range(0, len(steps), CHUNK):
        chunk = steps[start : start + CHUNK]
        blobs = screenshots(store, chunk)
        for step in chunk:
            try:
                asked.append(_ask(agent, step, k, blobs))
            except AgentError as exc:
                result.failed.append(StepProblem(step.episode_id, step.step_index, str(exc)))
            if progress:
                progress(len(asked) + len(result.failed), len(steps))
    return asked


def _ask(agent: Any, step: ReferenceStep, k: int, blobs: dict[str, bytes]) -> _Asked:
    seen = observation(step, blobs)
    history = step.history(k)
    prediction = predict(agent, step.task, history, seen)
    elements = {e.id: e for e in seen.elements}
    roles = {e.id: e.role for e in seen.elements}
    reference = compare.facts(parse_action(step.action), roles)
    predicted, error = None, None
    try:
        predicted = compare.facts(parse_agent_output(prediction.reply.output), roles)
    except MminaError as exc:
        error = str(exc)
    labels = {
        "reference_target_label": compare.element_label(reference.target, elements),
        "predicted_target_label": compare.element_label(predicted.target if predicted else None, elements),
    }
    return _Asked(
        step=step,
        history=history,
        prediction=prediction,
        reference=reference,
        predicted=predicted,
        parse_error=error,
        labels=labels,
    )


Scored = tuple[_Asked, StepScore, str | None]
"""A step, its verdict, and the ``judge_json`` of its row (the value judge's configuration; None without one)."""


def _score_all(
    store: Store, asked: list[_Asked], settings: JudgeSettings, result: EvalResult
) -> list[Scored]:
    """Verdicts of every asked step; values that differ go to the fuzzy judge when one is set."""
    outcome = _judge(store, asked, settings, result.batch_id)
    replies = outcome.replies if outcome else {}
    scored = []
    for item in asked:
        prompts = [judge_prompt(p, r) for p, r in compare.judge_pairs([(item.reference, item.predicted)])]
        failure = (
            next((outcome.failures[p] for p in prompts if p in outcome.failures), None) if outcome else None
        )
        if failure:
            result.failed.append(StepProblem(item.step.episode_id, item.step.step_index, failure))
            continue

        def judge(pred: str, ref: str) -> bool | None:
            return {"pass": True, "fail": False}.get(parse_verdict(replies.get(judge_prompt(pred, ref))))

        scored.append(
            (
                item,
                compare.score(item.reference, item.predicted, judge if settings.model else None),
                _judge_json(outcome, prompts, settings),
            )
        )
    return scored


def _judge(store: Store, asked: list[_Asked], settings: JudgeSettings, batch_id: str) -> JudgeOutcome | None:
    """Judge replies (cached in ``judge_cache``) and failures by prompt; None without a judge."""
    if not settings.model:
        return None
    prompts = [
        judge_prompt(p, r) for p, r in compare.judge_pairs([(a.reference, a.predicted) for a in asked])
    ]
    outcome = resolve(store, prompts, settings)
    if outcome.new_rows:
        store.append("judge_cache", outcome.new_rows, stem=batch_id)
    return outcome


def _judge_json(outcome: JudgeOutcome | None, prompts: list[str], settings: JudgeSettings) -> str | None:
    """The value judge's configuration and the calls this step's verdict rests on (None without a judge)."""
    if not settings.model:
        return None
    config = outcome.config if outcome else JudgeConfig.of(settings)
    calls = [outcome.calls[p] for p in prompts if p in outcome.calls] if outcome else []
    cached = sum(p in outcome.from_cache for p in prompts) if outcome else 0
    return canonical(config.summary(calls, cached))


def detail(item: _Asked, verdict: StepScore, k: int) -> dict[str, Any]:
    """The ``detail_json`` of one step row (keys: :data:`DETAIL_KEYS`)."""
    reference, predicted, reply, step = item.reference, item.predicted, item.prediction.reply, item.step
    return {
        "reference_action": reference.action,
        "reference_op": reference.op,
        "reference_target": reference.target,
        "reference_value": reference.value,
        "predicted_action": predicted.action if predicted else None,
        "predicted_op": predicted.op if predicted else None,
        "predicted_target": predicted.target if predicted else None,
        "predicted_value": predicted.value if predicted else None,
        **item.labels,
        "raw_output": reply.output,
        "parse_error": item.parse_error,
        "op_ok": verdict.op_ok,
        "target_ok": verdict.target_ok,
        "value_ok": verdict.value_ok,
        "value_method": verdict.value_method,
        "action_ok": verdict.action_ok,
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "cost_usd": reply.cost_usd,
        "agent_ms": item.prediction.agent_ms,
        "history": k,
        "history_shown": len(item.history),
        "previous_actions": item.history,
        "website": step.website,
        "hop": _hop(step),
        "position": step.step_index,
        "n_steps": step.n_steps,
    }


def _hop(step: ReferenceStep) -> int | None:
    """The hop (1-based) live tracking had the step on: the one after those it had seen reached,
    the last once all were."""
    live = step.row["live_hops"]
    return None if live is None else min(live + 1, max(step.task.n_hops, 1))


def _write(
    store: Store, batch: ScoreBatch, config: EvalConfig, scored: list[Scored], result: EvalResult
) -> None:
    """One ``scores`` file for the run, rows in stored step order."""
    if not scored:
        return
    rows = []
    for item, verdict, judge in scored:
        info = detail(item, verdict, config.history)
        result.details.append(info)
        view = EpisodeView(item.step.run_id, item.step.episode_id, item.step.task, {}, ())
        score = Score(
            "pass" if verdict.action_ok else "fail",
            1.0 if verdict.action_ok else 0.0,
            "step",
            step_index=item.step.step_index,
            detail=info,
        )
        rows += [{**row, "judge_json": judge} for row in score_rows(view, [score], batch)]
    result.files.append(str(store.append("scores", rows, stem=result.batch_id, run_id=config.run_id)))


# ---------------------------------------------------------------- reading stored batches


@dataclass(frozen=True)
class StoredBatch:
    """A stored ``step_action`` batch of a run, with its report."""

    run_id: str
    batch_id: str
    report: StepReport

    def as_json(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "run_id": self.run_id, **self.report.as_dict()}


def stored_report(store: Store, run_id: str, batch_id: str | None = None) -> StoredBatch:
    """The report of one ``step_action`` batch of the run (the latest when not named)."""
    run_id = store.resolve_run(run_id)
    chosen, details = stored_details(store, run_id, batch_id)
    return StoredBatch(run_id, chosen, build_report(details))


def stored_details(
    store: Store, run_id: str, batch_id: str | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """The step details of one ``step_action`` batch of the run (the latest when not named)."""
    rows = [
        r
        for r in store.read(
            "scores",
            run_id=run_id,
            columns=[
                "evaluator",
                "level",
                "batch_id",
                "scored_at",
                "episode_id",
                "step_index",
                "detail_json",
            ],
        ).to_pylist()
        if r["evaluator"] == EVALUATOR and r["level"] == "step"
    ]
    if not rows:
        raise StepEvalError(f"run {run_id} has no step scores: run mmina eval-steps --run {run_id} first")
    batches = sorted({(r["scored_at"], r["batch_id"]) for r in rows})
    chosen = batch_id or batches[-1][1]
    if chosen not in {b for _, b in batches}:
        raise StepEvalError(
            f"no eval-steps batch {chosen} in run {run_id} (batches: {', '.join(b for _, b in batches)})"
        )
    picked = sorted(
        (r for r in rows if r["batch_id"] == chosen), key=lambda r: (r["episode_id"], r["step_index"])
    )
    return chosen, [json.loads(r["detail_json"]) for r in picked]
