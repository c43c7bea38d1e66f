"""``fuzzy`` (the LLM judge) and ``task`` (whatever each task's own ``eval`` asks for).

``fuzzy`` asks, for every reference, the paper's question with the final answer as the
statement; the episode passes iff the judge says yes for every reference, fails if it says
no for any, and is unclear otherwise. References are ``eval.reference_answers.fuzzy_match``
(``reference=fuzzy_match``, default) or the ``must_include`` keywords
(``reference=must_include``). An episode without a final answer fails without a call. A
``fuzzy_match`` of ``"N/A"`` is WebArena's marker of an unachievable task: as there, the answer
passes iff it is ``N/A`` itself (exact match, no judge).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from mmina.answers import exact_match
from mmina.evaluators.base import (BuiltinEvaluator, EpisodeView, EvaluatorError, Score, combine, task_score,
                                   verdict_of)
from mmina.evaluators.judge import judge_prompt, parse_verdict
from mmina.evaluators.strings import ExactMatch, MustInclude, UrlMatch, references

STRING_KEYS = ("exact_match", "must_include", "fuzzy_match")
UNACHIEVABLE = "N/A"


def fuzzy_prompts(episode: EpisodeView, refs: list[str]) -> list[str]:
    if episode.final_answer is None or refs == [UNACHIEVABLE]:
        return []
    return [judge_prompt(episode.final_answer, r) for r in refs]


def fuzzy_verdict(episode: EpisodeView, refs: list[str]) -> tuple[str, dict[str, Any]]:
    """The judged verdict over all references (see the module docstring)."""
    if not refs:
        return "unclear", {"reason": "the task has no references for the judge"}
    answer = episode.final_answer
    if answer is None:
        return "fail", {"reason": "the agent gave no final answer", "references": refs}
    if refs == [UNACHIEVABLE]:
        return verdict_of(exact_match(answer, UNACHIEVABLE)), {"answer": answer, "reason": "unachievable-task marker"}
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

    def judge_prompts(self, episode: EpisodeView) -> list[str]:
        return fuzzy_prompts(episode, references(episode.task, self.args["reference"]))

    def score(self, episode: EpisodeView) -> list[Score]:
        verdict, detail = fuzzy_verdict(episode, references(episode.task, self.args["reference"]))
        return [task_score(verdict, {**detail, "reference": self.args["reference"]})]


class TaskEval(BuiltinEvaluator):
    """Each task's own ``eval``: for ``string_match``, every reference kind present
    (``exact_match``, ``must_include``, ``fuzzy_match`` — the last through the judge); for
    ``url_match``, ``url_match`` on the final URL; kinds that need the live page
    (``program_html``) or are unknown are unclear. All must pass (any fail fails)."""

    name = "task"
    step_fields = ("step_index", "url")  # url_match's
    ARGS = {"judge_model": None}
    uses_judge: ClassVar[bool] = True

    def judge_prompts(self, episode: EpisodeView) -> list[str]:
        if "fuzzy_match" not in checks_of(episode):
            return []
        return fuzzy_prompts(episode, references(episode.task, "fuzzy_match"))

    def score(self, episode: EpisodeView) -> list[Score]:
        results = {kind: _check(kind, episode) for kind in checks_of(episode)}
        verdict = combine([v for v, _ in results.values()])
        detail = {"eval_types": list(episode.task.eval_types),
                  "checks": {kind: {"verdict": v, **d} for kind, (v, d) in results.items()}}
        return [task_score(verdict, detail)]


def checks_of(episode: EpisodeView) -> list[str]:
    """The checks a task's ``eval_types`` ask for, in order, without repeats."""
    task, kinds = episode.task, []
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
    reason = ("string_match without any reference answer" if kind == "string_match"
              else f"{kind} is not supported by rescoring (it needs the live page)")
    return verdict_of(None), {"reason": reason}
