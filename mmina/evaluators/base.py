"""What every evaluator sees and returns: a stored episode in, score rows out.

Evaluators are pure over stored data (no browser, no network): an :class:`EpisodeView` is
assembled from the store's ``tasks``, ``episodes`` and ``steps`` tables, and an evaluator
that needs an LLM judge finds the judge's replies, already fetched and cached by the
runner, in ``EpisodeView.judgments``. That keeps every verdict reproducible from the store.

The deterministic built-ins (``trace_evaluator.py``) are defined over a :class:`Trace` —
task, final answer, step URLs — and return :class:`ScoreRow` tuples: one definition serves
an episode (``score``) and a whole rescoring, column by column (``score_batch``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

from mmina.errors import MminaError
from mmina.tasks.blocking import BLOCKED
from mmina.tasks.task import Task

NOT_APPLICABLE = "n/a"
"""The verdict of an evaluator with nothing to judge in an episode (its task has no reference
of the kind it reads): counted neither as passed nor as failed, and left out of every rate."""
# BLOCKED (``mmina.tasks.blocking``): the verdict of a person who saw the environment keep the agent from
# the task; like n/a, in no rate. Evaluators do not give it: ``episode_scores`` shows it for an
# episode the recorder found blocked that did not pass.
VERDICTS = ("pass", "fail", "unclear", NOT_APPLICABLE, BLOCKED)
LEVELS = ("task", "hop", "step")


class EvaluatorError(MminaError):
    """An evaluator cannot be found, built or run as asked (bad name, arguments, judge)."""


class StepView(NamedTuple):
    """The stored facts of one step that evaluators may use. The page's title, its screenshot
    (a blob hash) and its accessibility tree are read only for an evaluator that lists them in
    ``step_fields`` (a judge that looks at the page); the others are read unless it says
    otherwise (see :func:`step_fields`).

    A named tuple: rescoring with an evaluator that takes views builds a million of them
    from column arrays.
    """

    step_index: int
    url: str
    action: str | None = None
    action_kind: str | None = None
    model_output: str | None = None
    action_error: str | None = None
    live_hops: int | None = None
    """Live URL tracking's hops reached by this step (``steps.live_hops``): a gauge, not a verdict."""
    title: str | None = None
    screenshot: str | None = None
    tree_text: str | None = None


DEFAULT_STEP_FIELDS = StepView._fields[:7]
"""What an evaluator that does not say (``step_fields``) is given of each step: not the page itself."""


@dataclass(frozen=True)
class EpisodeView:
    """One stored episode with its task and steps (in step order), ready to be scored."""

    run_id: str
    episode_id: str
    task: Task
    episode: Mapping[str, Any]
    steps: tuple[StepView, ...]
    judgments: Mapping[str, str] = field(default_factory=dict)
    judge_usage: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """The tokens (prompt, completion) each judge reply cost when it was asked (cached or not)."""

    @property
    def final_answer(self) -> str | None:
        """The answer of the final ``stop`` action; None when the agent never stopped."""
        return self.episode.get("final_answer")

    @property
    def final_url(self) -> str | None:
        """The page the agent ended on: the terminal observation's URL (``episodes.final_url``,
        the page after the last action), else the URL of the last stored step."""
        terminal = self.episode.get("final_url")
        return terminal if terminal is not None else (self.steps[-1].url if self.steps else None)

    @property
    def n_hops(self) -> int:
        return self.task.n_hops


@dataclass(frozen=True)
class Score:
    """One verdict of an evaluator; the runner adds episode, evaluator and batch columns."""

    verdict: str
    value: float
    level: str = "task"
    hop_index: int | None = None
    """Hop-level rows: the hop as an index into ``task.hops`` (0-based, as Python counts); the
    store and every table number it from 1 (``scores.hop`` = ``hop_index + 1``)."""
    step_index: int | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise EvaluatorError(f"verdict must be one of {', '.join(VERDICTS)}, not {self.verdict!r}")
        if self.level not in LEVELS:
            raise EvaluatorError(f"level must be one of {', '.join(LEVELS)}, not {self.level!r}")


class ScoreRow(NamedTuple):
    """A :class:`Score` as plain data, in the same field order (``Score(*row)`` makes one):
    what the built-ins compute, so that scoring a batch builds no object per verdict."""

    verdict: str
    value: float
    level: str = "task"
    hop_index: int | None = None
    step_index: int | None = None
    detail: Mapping[str, Any] = {}


class Trace(NamedTuple):
    """What the deterministic built-ins read of an episode: its task, final answer, the
    stored steps' indexes and URLs, in step order (a null URL is ""), and the URL of its
    terminal observation (``episodes.final_url``: the page after the last action; None when
    the store does not know it). A hop-conditioned episode also says which hops its prefix gave
    (``given``: the reference step that completed each, ``episodes.prefix_hop_steps``) and how
    many steps the prefix had (``episodes.prefix_steps``)."""

    task: Task
    final_answer: str | None
    step_indexes: Sequence[int]
    urls: Sequence[str]
    terminal_url: str | None = None
    given: Sequence[int] = ()
    prefix_steps: int = 0

    @classmethod
    def of(cls, episode: EpisodeView) -> Trace:
        row = episode.episode
        return cls(
            episode.task,
            episode.final_answer,
            [s.step_index for s in episode.steps],
            [s.url for s in episode.steps],
            row.get("final_url"),
            row.get("prefix_hop_steps") or (),
            row.get("prefix_steps") or 0,
        )

    @property
    def final_url(self) -> str | None:
        """The page the agent ended on: the terminal observation's URL, else the last step's."""
        return self.terminal_url if self.terminal_url is not None else (self.urls[-1] if self.urls else None)

    def pages(self) -> tuple[Sequence[int], Sequence[str]]:
        """Step indexes and URLs of every page the agent reached, in order: the steps', then the
        terminal page when it is known and differs from the last step's (a page reached by the
        last action, never observed as a step; it gets the index after the last step's)."""
        if self.terminal_url is None or (self.urls and self.urls[-1] == self.terminal_url):
            return self.step_indexes, self.urls
        after = self.step_indexes[-1] + 1 if self.step_indexes else 0
        return [*self.step_indexes, after], [*self.urls, self.terminal_url]


def verdict_of(passed: bool | None) -> str:
    """True/False/None as pass/fail/unclear."""
    return "unclear" if passed is None else ("pass" if passed else "fail")


def combine(verdicts: list[str]) -> str:
    """All must pass: any fail fails, else any unclear is unclear; checks with nothing to judge
    (n/a) do not count, and when no check had anything to judge the result is n/a."""
    judged = [v for v in verdicts if v != NOT_APPLICABLE]
    if "fail" in judged:
        return "fail"
    if not judged:
        return NOT_APPLICABLE
    return "unclear" if "unclear" in judged else "pass"


def not_applicable(reason: str) -> ScoreRow:
    """The task-level row of an episode with nothing to judge (``reason`` says what is missing)."""
    return task_result(NOT_APPLICABLE, {"reason": reason})


def task_result(verdict: str, detail: Mapping[str, Any], value: float | None = None) -> ScoreRow:
    """A task-level row; the value is 1 for pass, else 0, unless the evaluator says otherwise."""
    return ScoreRow(
        verdict=verdict,
        value=float(value if value is not None else verdict == "pass"),
        level="task",
        detail=dict(detail),
    )


def task_score(verdict: str, detail: Mapping[str, Any], value: float | None = None) -> Score:
    """:func:`task_result` as a :class:`Score`."""
    return Score(*task_result(verdict, detail, value))


@runtime_checkable
class Evaluator(Protocol):
    """Anything with a name, a version, its arguments and ``score``.

    ``args`` must be JSON-serializable: it is stored (as sorted JSON) with every row, so a
    rescoring can rebuild the evaluator. An evaluator that needs an LLM judge also defines
    ``judge_prompts(episode) -> list[str]``; the runner fetches those replies (from the
    cache or the endpoint) into ``episode.judgments`` before calling ``score``. A judge that
    asks in stages (a question that depends on an earlier reply) defines
    ``judge_requests(episode) -> list[JudgeRequest]`` instead: the requests it still needs given
    the replies so far in ``episode.judgments`` (keyed by ``JudgeRequest.prompt``); the runner
    asks again after each round of replies until it needs none. One that
    never reads ``episode.steps`` may say ``needs_steps = False``: rescoring then skips
    reading the steps table (see :func:`needs_steps`); one that reads only some step fields
    may list them in ``step_fields`` (see :func:`step_fields`), and only some columns of the
    ``episodes`` row in ``episode_fields`` (see :func:`episode_fields`).

    An evaluator that needs no judge may also define ``score_batch(batch, out)``: rescoring
    then hands it every selected episode at once, column by column (an
    :class:`~mmina.evaluators.loading.EpisodeBatch`), and it adds each episode's rows (or
    the reason it cannot be scored) to ``out`` (a :class:`~mmina.evaluators.batch.ScoreColumns`)
    — the same verdicts ``score`` gives, without a view or a ``Score`` per episode.
    """

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def args(self) -> dict[str, Any]: ...

    def score(self, episode: EpisodeView) -> list[Score]: ...


def missing_reference(evaluator: object, task: Task) -> str | None:
    """What ``task`` lacks for ``evaluator`` to judge it (e.g. "the task has no fuzzy_match
    reference"), None when it has something to judge. An evaluator says so with a
    ``missing_reference(task)`` method; one without is taken to judge every task."""
    probe = getattr(evaluator, "missing_reference", None)
    return probe(task) if callable(probe) else None


class BuiltinEvaluator:
    """Shared argument handling of the built-ins: declared defaults, unknown keys refused.
    Of the ``episodes`` row they read only the final answer."""

    name: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    ARGS: ClassVar[dict[str, Any]] = {}
    CHOICES: ClassVar[dict[str, tuple[Any, ...]]] = {}
    uses_judge: ClassVar[bool] = False
    episode_fields: ClassVar[tuple[str, ...]] = ("final_answer", "final_url")

    def __init__(self, **args: Any) -> None:
        unknown = sorted(set(args) - set(self.ARGS))
        if unknown:
            known = ", ".join(sorted(self.ARGS)) or "none"
            raise EvaluatorError(
                f"evaluator {self.name} has no argument {', '.join(unknown)} (its arguments: {known})"
            )
        self.args: dict[str, Any] = {**self.ARGS, **args}
        for key, allowed in self.CHOICES.items():
            if self.args[key] not in allowed:
                raise EvaluatorError(
                    f"evaluator {self.name}: {key} must be one of "
                    f"{', '.join(map(str, allowed))}, not {self.args[key]!r}"
                )

    def score(self, episode: EpisodeView) -> list[Score]:
        raise NotImplementedError


def failure(exc: Exception) -> str:
    """Why an episode whose evaluator raised is unscored."""
    return f"evaluator failed: {type(exc).__name__}: {exc}"


def needs_steps(evaluator: object) -> bool:
    """Whether ``evaluator`` reads ``episode.steps`` (assumed unless it says otherwise)."""
    return bool(getattr(evaluator, "needs_steps", True))


def step_fields(evaluator: object) -> tuple[str, ...]:
    """The :class:`StepView` fields ``evaluator`` reads (``step_fields``; default
    :data:`DEFAULT_STEP_FIELDS`); the others are None in the views it gets, and their columns
    are not read."""
    fields = tuple(getattr(evaluator, "step_fields", DEFAULT_STEP_FIELDS))
    return (
        fields
        if {"step_index", "url"} <= set(fields)
        else tuple(dict.fromkeys(("step_index", "url", *fields)))
    )


def episode_fields(evaluator: object) -> tuple[str, ...] | None:
    """The ``episodes`` columns ``evaluator`` reads through ``episode.episode`` (its
    ``episode_fields``; default all: None); the others are absent from the rows it gets."""
    fields = getattr(evaluator, "episode_fields", None)
    return None if fields is None else tuple(fields)


def args_json(args: Mapping[str, Any]) -> str:
    """Arguments as sorted JSON: the same arguments always give the same text."""
    return json.dumps(dict(args), sort_keys=True, ensure_ascii=False)
