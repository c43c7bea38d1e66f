"""``fuzzy`` (the LLM judge) and ``task`` (whatever each task's own ``eval`` asks for).

``fuzzy`` asks, for every reference, the paper's question with the final answer as the
statement; the episode passes iff the judge says yes for every reference, fails if it says
no for any, and is unclear otherwise; a task without references of the kind asked is n/a
(nothing to judge: no request, and no part in any rate). References are ``eval.reference_answers.fuzzy_match``
(``reference=fuzzy_match``, default) or the ``must_include`` keywords
(``reference=must_include``). An episode without a final answer fails without a call. A
``fuzzy_match`` of ``"N/A"`` is WebArena's marker of an unachievable task: as there, the answer
passes iff it is ``N/A`` itself (exact match, no judge).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mmina.evaluators.base import (
    NOT_APPLICABLE,
    BuiltinEvaluator,
    EpisodeView,
    EvaluatorError,
    Score,
    combine,
    task_score,
    verdict_of,
)
from mmina.evaluators.judge import FUZZY_PROMPT_VERSION, judge_prompt, parse_verdict
from mmina.evaluators.strings import ExactMatch, MustInclude, UrlMatch, lacks, references
from mmina.tasks.answers import exact_match
from mmina.tasks.task import Task

STRING_KEYS = ("exact_match", "must_include", "fuzzy_match")
UNACHIEVABLE = "N/A"


def fuzzy_prompts(episode: EpisodeView, refs: list[str]) -> list[str]:
    if episode.final_answer is None or refs == [UNACHIEVABLE]:
        return []
    return [judge_prompt(episode.final_answer, r) for r in refs]


def fuzzy_verdict(
    episode: EpisodeView, refs: list[str], key: str = "fuzzy_match"
) -> tuple[str, dict[str, Any]]:
    """The judged verdict over all references (see the module docstring); n/a without any."""
    if not refs:
        return NOT_APPLICABLE, {"reason": f"the task has no {key} reference for the judge"}
    answer = episode.final_answer
    if answer is None:
        return "fail", {"reason": "the agent gave no final answer", "references": refs}
    if refs == [UNACHIEVABLE]:
        return verdict_of(exact_match(answer, UNACHIEVABLE)), {
            "answer": answer,
            "reason": "unachievable-task marker",
        }
    judged = [_judged(episode.judgments, answer, r) for r in refs]
    return combine([j["verdict"] for j in judged]), {"answer": answer, "judgments": judged}


def _judged(judgments: Mapping[str, str], answer: str, reference: str) -> dict[str, Any]:
    prompt = judge_prompt(answer, reference)
    if prompt not in judgments:
        raise EvaluatorError(f"no judge reply for reference {reference!r}")
    reply = judgments[prompt]
    return {"reference": reference, "reply": reply, "verdict": parse_verdict(reply)}


class Fuzzy(BuiltinEvaluator):
    """The paper's LLM judge over the final answer, cached in ``judge_cache``."""

    name = "fuzzy"
    needs_steps = False
    ARGS = {"reference": "fuzzy_match", "judge_model": None}
    CHOICES = {"reference": ("fuzzy_match", "must_include")}
    uses_judge: ClassVar[bool] = True
    requires_judge: ClassVar[bool] = True
    prompt_version: ClassVar[str] = FUZZY_PROMPT_VERSION

    def missing_reference(self, task: Task) -> str | None:
        return lacks(task, self.args["reference"])

    def judge_prompts(self, episode: EpisodeView) -> list[str]:
        return fuzzy_prompts(episode, references(episode.task, self.args["reference"]))

    def score(self, episode: EpisodeView) -> list[Score]:
        key = self.args["reference"]
        verdict, detail = fuzzy_verdict(episode, references(episode.task, key), key)
        return [task_score(verdict, {**detail, "reference": self.args["reference"]})]


class TaskEval(BuiltinEvaluator):
    """Each task's own ``eval``: for ``string_match``, every reference kind present
    (``exact_match``, ``must_include``, ``fuzzy_match`` — the last through the judge); for
    ``url_match``, ``url_match`` on the final URL; kinds that need the live page
    (``program_html``) or are unknown are unclear; a check without its reference is n/a. All
    must pass (any fail fails); a task whose checks all lack their references is n/a."""

    name = "task"
    step_fields = ("step_index", "url")  # url_match's
    ARGS = {"judge_model": None}
    uses_judge: ClassVar[bool] = True
    prompt_version: ClassVar[str] = FUZZY_PROMPT_VERSION

    def missing_reference(self, task: Task) -> str | None:
        """A task whose every check is a reference kind it lacks has nothing to judge."""
        kinds = checks_of(task)
        if any(kind not in ("string_match", "url_match") for kind in kinds):
            return None
        if "url_match" in kinds and not UrlMatch().missing_reference(task):
            return None
        return "the task's eval names no reference (no reference answer, no reference_url)"

    def judge_prompts(self, episode: EpisodeView) -> list[str]:
        if "fuzzy_match" not in checks_of(episode.task):
            return []
        return fuzzy_prompts(episode, references(episode.task, "fuzzy_match"))

    def score(self, episode: EpisodeView) -> list[Score]:
        results = {kind: _check(kind, episode) for kind in checks_of(episode.task)}
        verdict = combine([v for v, _ in results.values()])
        detail = {
            "eval_types": list(episode.task.eval_types),
            "checks": {kind: {"verdict": v, **d} for kind, (v, d) in results.items()},
        }
        return [task_score(verdict, detail)]


def checks_of(task: Task) -> list[str]:
    """The checks a task's ``eval_types`` ask for, in order, without repeats."""
    kinds: list[str] = []
    for eval_type in task.eval_types:
        if eval_type == "string_match":
            kinds += [k for k in STRING_KEYS if references(task, k)] or ["string_match"]
        else:
            kinds.append(eval_type)
    return list(dict.fromkeys(kinds))


_SINGLE = {"exact_match": ExactMatch, "must_include": MustInclude, "url_match": UrlMatch}


def _check(kind: str, episode: EpisodeView) -> tuple[str, dict[str, Any]]:
    if kind in _SINGLE:
        row = _SINGLE[kind]().score(episode)[0]
        return row.verdict, dict(row.detail)
    if kind == "fuzzy_match":
        return fuzzy_verdict(episode, references(episode.task, "fuzzy_match"))
    if kind == "string_match":
        return NOT_APPLICABLE, {"reason": "string_match without any reference answer"}
    return verdict_of(None), {"reason": f"{kind} is not supported by rescoring (it needs the live page)"}
