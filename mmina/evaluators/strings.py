"""Answer and URL checks of single tasks: ``exact_match``, ``must_include``, ``url_match``.

The string rules are the live ones of :mod:`mmina.tasks.answers` (so rescoring agrees with
what ``mmina record`` printed); here they become stored, versioned verdicts.
"""

from __future__ import annotations

from typing import Any

from mmina.evaluators.base import ScoreRow, Trace, not_applicable, task_result, verdict_of
from mmina.evaluators.trace_evaluator import TraceEvaluator
from mmina.tasks.answers import exact_match, missing_keywords, normalize
from mmina.tasks.task import URL_ALTERNATIVES, Task


def references(task: Task, key: str) -> list[str]:
    """``eval.reference_answers[key]`` as a list (a single string is one reference)."""
    value = task.reference_answers.get(key)
    if value is None or value == "":
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def lacks(task: Task, key: str) -> str | None:
    """Why ``task`` gives nothing to judge against ``key`` references (None: it has some)."""
    return None if references(task, key) else f"the task has no {key} reference"


class ExactMatch(TraceEvaluator):
    """Pass iff the final answer equals ``exact_match`` (lowercased, surrounding quotes and
    spaces stripped; a list of references gives alternatives). No answer fails."""

    name = "exact_match"
    needs_steps = False

    def missing_reference(self, task: Task) -> str | None:
        return lacks(task, "exact_match")

    def rows(self, trace: Trace) -> list[ScoreRow]:
        missing = self.missing_reference(trace.task)
        if missing:
            return [not_applicable(missing)]
        refs = references(trace.task, "exact_match")
        answer = trace.final_answer
        passed = answer is not None and any(exact_match(answer, r) for r in refs)
        return [
            task_result(
                verdict_of(passed),
                {"answer": answer, "normalized": normalize(answer or ""), "references": refs},
            )
        ]


class MustInclude(TraceEvaluator):
    """Pass iff every ``must_include`` keyword (lowercased, trimmed) is a substring of the
    lowercased final answer. No answer fails."""

    name = "must_include"
    needs_steps = False

    def missing_reference(self, task: Task) -> str | None:
        return lacks(task, "must_include")

    def rows(self, trace: Trace) -> list[ScoreRow]:
        lacking = self.missing_reference(trace.task)
        if lacking:
            return [not_applicable(lacking)]
        keywords = references(trace.task, "must_include")
        missing = missing_keywords(trace.final_answer or "", keywords)
        passed = trace.final_answer is not None and not missing
        return [
            task_result(
                verdict_of(passed), {"answer": trace.final_answer, "keywords": keywords, "missing": missing}
            )
        ]


def gold_urls(task: Task) -> list[str]:
    """``eval.reference_url``, split on `` |OR| `` (alternatives, as in WebArena)."""
    return [u.strip() for u in task.reference_url.split(URL_ALTERNATIVES) if u.strip()]


def url_matches(gold: str, url: str) -> bool:
    """The gold URL is contained in the visited URL (equality included); trailing ``/`` ignored."""
    return gold.rstrip("/") in url.strip()


class UrlMatch(TraceEvaluator):
    """Pass iff a gold ``reference_url`` is a substring of the checked URL (or equal to it).

    ``where=final`` (default) checks the page the agent ended on — the terminal observation
    (the page after the last action: where it stopped, or where a budget's last action led),
    else the last stored step; ``where=any`` checks every page it reached and passes on the
    first match.
    """

    name = "url_match"
    version = "2"  # 2: the final page is the terminal observation when the store has it
    step_fields = ("step_index", "url")
    ARGS = {"where": "final"}
    CHOICES = {"where": ("final", "any")}

    def missing_reference(self, task: Task) -> str | None:
        return None if gold_urls(task) else "the task has no reference_url"

    def rows(self, trace: Trace) -> list[ScoreRow]:
        missing = self.missing_reference(trace.task)
        if missing:
            return [not_applicable(missing)]
        golds = gold_urls(trace.task)
        steps = list(zip(*trace.pages()))
        checked = [(steps[-1][0], trace.final_url)] if self.args["where"] == "final" and steps else steps
        match = next(
            ((index, url) for index, url in checked for g in golds if url_matches(g, url or "")), None
        )
        detail: dict[str, Any] = {
            "gold": golds,
            "where": self.args["where"],
            "final_url": trace.final_url,
            "matched_step": match[0] if match else None,
        }
        return [task_result(verdict_of(match is not None), detail)]
