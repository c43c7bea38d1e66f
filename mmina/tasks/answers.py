"""String answer checks of the MMInA evaluation (pure), used live while recording.

``exact_match``: lowercased, surrounding quotes and spaces stripped, equal.
``must_include``: every reference keyword is a substring of the lowercased answer.
Fuzzy references need an LLM judge and are left to ``mmina rescore``.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmina.tasks.task import Task

_QUOTES = "\"'`“”‘’"


def normalize(text: str) -> str:
    return text.strip().strip(_QUOTES).strip().lower()


def exact_match(answer: str, reference: str) -> bool:
    return normalize(answer) == normalize(reference)


def must_include(answer: str, keywords: Sequence[str]) -> bool:
    lowered = answer.lower()
    return all(_included(k, lowered) for k in keywords)


def missing_keywords(answer: str, keywords: Sequence[str]) -> list[str]:
    """The keywords (as given) that ``must_include`` finds missing, each checked."""
    lowered = answer.lower()
    return [k for k in keywords if not _included(k, lowered)]


def _included(keyword: str, lowered: str) -> bool:
    return keyword.strip().lower() in lowered


def answer_verdict(task: Task, answer: str | None) -> bool | None:
    """Whether the answer passes the task's string references; None when it has none."""
    references = task.reference_answers
    checks = []
    if isinstance(references.get("exact_match"), str):
        checks.append(exact_match(answer or "", references["exact_match"]))
    if isinstance(references.get("must_include"), list):
        checks.append(must_include(answer or "", references["must_include"]))
    return all(checks) if checks else None
