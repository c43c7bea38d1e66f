"""What every benchmark returns: named figures, each with its unit and, when there is one, its target."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

Compare = Callable[[float, float], bool]
AT_MOST: Compare = operator.le
AT_LEAST: Compare = operator.ge
SYMBOLS = {AT_MOST: "≤", AT_LEAST: "≥"}


@dataclass(frozen=True)
class Target:
    bound: float
    compare: Compare = AT_MOST

    def met(self, value: float) -> bool:
        return self.compare(value, self.bound)

    def __str__(self) -> str:
        return f"{SYMBOLS[self.compare]} {self.bound:g}"


@dataclass(frozen=True)
class Figure:
    section: str
    name: str
    value: float | str | bool | None
    unit: str = ""
    target: Target | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.target is None or not isinstance(self.value, (int, float)):
            return None
        return self.target.met(float(self.value))

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["target"] = str(self.target) if self.target else None
        data["met"] = self.met
        return data


@dataclass
class Section:
    """Figures of one benchmark, added as they are measured."""

    name: str
    figures: list[Figure] = field(default_factory=list)
    partial: bool = False
    """Measured for part of what the section covers (``MMINA_REALWEB`` naming some applications):
    written into an existing results file, its figures replace only those of the same name."""

    def add(
        self,
        name: str,
        value: float | str | bool | None,
        unit: str = "",
        target: Target | None = None,
        note: str = "",
    ) -> None:
        self.figures.append(Figure(self.name, name, value, unit, target, note))


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


RESULTS = Path(__file__).resolve().parent / "results.json"


def previous_release() -> dict[str, Any]:
    """The figures of the previous release kept in ``bench/results.json`` (its
    ``previous_release`` block, carried over by every write), for side-by-side ratios."""
    return dict(json.loads(RESULTS.read_text()).get("previous_release", {}))


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far: ``VmHWM``, which (unlike ``ru_maxrss``) a
    process started by a large parent does not inherit through fork and exec."""
    return _status_mb("VmHWM")


def current_rss_mb() -> float:
    """Resident memory of this process now."""
    return _status_mb("VmRSS")


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return float(line.split()[1]) / 1024
    return float("nan")
