"""Step-level figures from stored step scores (pure: score details in, rows out).

Input is the ``detail_json`` of ``scores`` rows written by ``mmina eval-steps`` (evaluator
``step_action``), decoded. Accuracy is the share of steps whose whole action was right, with
a 95% Wilson score interval (``mmina.stats.wilson``, the one ``mmina report`` uses);
operation, target and value accuracy are given next to it (target and value over the steps
whose recorded action has one).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmina.stats import wilson
from mmina.stepeval.action_match import OPS, UNPARSABLE

GROUPS = ("operation", "website", "history", "hop", "position")
Record = Mapping[str, Any]


def position_bucket(step_index: int) -> str:
    """Steps 0-4 one by one, then 5-9 and 10+."""
    return str(step_index) if step_index < 5 else "5-9" if step_index < 10 else "10+"


def _hop(record: Record) -> str:
    """The hop (1-based) the step was on; batches written before store schema 7 kept the
    0-based ``hop_index``."""
    if record.get("hop") is not None:
        return str(record["hop"])
    return "" if record.get("hop_index") is None else str(record["hop_index"] + 1)


_KEYS: dict[str, Callable[[Record], str]] = {
    "operation": lambda r: r["reference_op"],
    "website": lambda r: r.get("website") or "",
    "history": lambda r: str(r.get("history_shown", 0)),
    "hop": lambda r: _hop(r),
    "position": lambda r: position_bucket(int(r.get("position", 0))),
}


@dataclass(frozen=True, kw_only=True)
class Accuracy:
    """One group's figures."""

    group: str
    key: str
    steps: int
    correct: int
    op_correct: int
    target_correct: int
    target_steps: int
    value_correct: int
    value_steps: int

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.steps if self.steps else None

    @property
    def interval(self) -> tuple[float | None, float | None]:
        return wilson(self.correct, self.steps)

    def as_dict(self) -> dict[str, Any]:
        low, high = self.interval
        return {
            "group": self.group,
            "key": self.key,
            "steps": self.steps,
            "correct": self.correct,
            "accuracy": self.accuracy,
            "ci_low": low,
            "ci_high": high,
            "op_accuracy": _share(self.op_correct, self.steps),
            "target_accuracy": _share(self.target_correct, self.target_steps),
            "value_accuracy": _share(self.value_correct, self.value_steps),
        }


def _share(k: int, n: int) -> float | None:
    return k / n if n else None


def accuracy(group: str, key: str, records: Sequence[Record]) -> Accuracy:
    targets = [r["target_ok"] for r in records if r.get("target_ok") is not None]
    values = [r["value_ok"] for r in records if r.get("value_ok") is not None]
    return Accuracy(
        group=group,
        key=key,
        steps=len(records),
        correct=sum(bool(r["action_ok"]) for r in records),
        op_correct=sum(bool(r["op_ok"]) for r in records),
        target_correct=sum(targets),
        target_steps=len(targets),
        value_correct=sum(values),
        value_steps=len(values),
    )


def by_group(records: Sequence[Record], group: str) -> list[Accuracy]:
    """Accuracy per value of ``group`` (operations in their fixed order, other keys sorted)."""
    buckets: dict[str, list[Record]] = {}
    for record in records:
        buckets.setdefault(_KEYS[group](record), []).append(record)
    order = {op: i for i, op in enumerate(OPS)} if group == "operation" else {}
    keys = sorted(buckets, key=lambda k: (order.get(k, len(order)), _natural(k)))
    return [accuracy(group, k, buckets[k]) for k in keys]


def _natural(key: str) -> tuple[int, str]:
    head = key.split("-")[0].rstrip("+")
    return (int(head), key) if head.isdigit() else (1 << 30, key)


def confusion(records: Iterable[Record]) -> list[dict[str, Any]]:
    """One row per recorded operation: how often each operation (or no parsable action) was predicted."""
    counts = Counter((r["reference_op"], r.get("predicted_op") or UNPARSABLE) for r in records)
    references = [op for op in OPS if any(ref == op for ref, _ in counts)]
    return [
        {"reference": ref, **{pred: counts.get((ref, pred), 0) for pred in (*OPS, UNPARSABLE)}}
        for ref in references
    ]


def wrong_targets(records: Iterable[Record], limit: int = 10) -> list[dict[str, Any]]:
    """The most common (recorded target, predicted target) pairs among steps where the agent
    named an element, but not the recorded one."""
    counts = Counter(
        (r.get("reference_target_label") or "", r["predicted_target_label"])
        for r in records
        if r.get("target_ok") is False and r.get("predicted_target_label")
    )
    return [
        {"reference_target": ref, "predicted_target": pred, "steps": n}
        for (ref, pred), n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]
    ]


def cost(records: Sequence[Record]) -> dict[str, Any]:
    """Tokens and money over the steps, and per step."""
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in records)
    completion = sum(int(r.get("completion_tokens") or 0) for r in records)
    usd = sum(float(r.get("cost_usd") or 0.0) for r in records)
    n = len(records)
    return {
        "steps": n,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "cost_usd": usd,
        "cost_usd_per_step": usd / n if n else None,
        "tokens_per_step": (prompt + completion) / n if n else None,
    }


@dataclass(frozen=True)
class StepReport:
    overall: Accuracy
    groups: dict[str, list[Accuracy]] = field(default_factory=dict)
    confusion: list[dict[str, Any]] = field(default_factory=list)
    wrong_targets: list[dict[str, Any]] = field(default_factory=list)
    cost: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.as_dict(),
            "groups": {g: [a.as_dict() for a in rows] for g, rows in self.groups.items()},
            "confusion": self.confusion,
            "wrong_targets": self.wrong_targets,
            "cost": self.cost,
        }


def build_report(records: Sequence[Record], groups: Sequence[str] = GROUPS) -> StepReport:
    """Everything ``mmina eval-steps`` prints, from the step details."""
    return StepReport(
        accuracy("overall", "all", records),
        {g: by_group(records, g) for g in groups},
        confusion(records),
        wrong_targets(records),
        cost(records),
    )
