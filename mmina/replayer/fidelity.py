"""How faithfully a replay reproduced a recording, step by step and per episode.

Pure over stored values (step rows, screenshot bytes, the router's request log), so a replay
can be judged again later, or a live re-run compared with its recording the same way.

* A step's **accessibility tree** is equal when the stored texts are equal; a differing tree
  comes with a unified diff (recorded → replayed). Its **URL** is equal when the texts are, or
  when they differ only in query values that change on every load (clock readings, random
  cache-busters: ``archive.same_page``), which a replay under the frozen clock cannot repeat.
* A step's **screenshot difference** is the fraction of pixels that differ: Pillow's
  ``ImageChops.difference`` of the two decoded screenshots, where a pixel differs when any
  channel differs by more than ``PIXEL_TOLERANCE`` of 255. Screenshots are JPEG (q80), and a
  re-encoded block can move a channel by a few levels without any visible change; identical
  renders give identical bytes and 0.0. Different sizes count as 1.0.
* A step's **requests** are the ones that loaded what it observed: for step k, those issued by
  the action of step k-1 (for step 0, the initial page load), served exactly / fuzzily / by
  nearest match / not at all (see :mod:`mmina.replayer.archive`); a matched request whose
  recorded body is missing, or one the router failed to answer, is counted as a defect too.
* **Episode fidelity** = steps with both URL and tree equal / max(recorded steps, replayed
  steps): a replay that ends early or runs longer loses fidelity for every missing step.
  The screenshot-identical fraction is reported next to it (over steps with screenshots on
  both sides).
"""
from __future__ import annotations

import difflib
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field
from typing import Any

from PIL import Image, ImageChops

from mmina.replayer.archive import MatchKind, same_page

PIXEL_TOLERANCE = 8
MAX_DIFF_LINES = 60


@dataclass(frozen=True)
class StepView:
    """The parts of a stored step that fidelity compares."""

    step_index: int
    url: str | None
    tree_text: str | None
    screenshot: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StepView:
        return cls(row["step_index"], row.get("url"), row.get("tree_text"), row.get("screenshot"))


@dataclass(frozen=True)
class RequestCounts:
    """Requests by how the archive matched them, and the defects among them: matched requests
    whose recorded body is missing (served empty), and requests the router failed to answer."""

    exact: int = 0
    fuzzy: int = 0
    nearest: int = 0
    unmatched: int = 0
    missing_body: int = 0
    failed: int = 0

    @property
    def total(self) -> int:
        return self.exact + self.fuzzy + self.nearest + self.unmatched

    def __add__(self, other: RequestCounts) -> RequestCounts:
        return RequestCounts(*(a + b for a, b in zip(astuple(self), astuple(other))))

    @classmethod
    def of(cls, kinds: Iterable[MatchKind], missing_body: int = 0, failed: int = 0) -> RequestCounts:
        kinds = list(kinds)
        return cls(*(sum(k is kind for k in kinds) for kind in MatchKind), missing_body, failed)


@dataclass(frozen=True)
class StepFidelity:
    step_index: int
    recorded_url: str | None
    replayed_url: str | None
    url_equal: bool
    tree_equal: bool
    screenshot_diff: float | None
    requests: RequestCounts = field(default_factory=RequestCounts)
    tree_diff: str = ""

    @property
    def faithful(self) -> bool:
        return self.url_equal and self.tree_equal

    @property
    def screenshot_identical(self) -> bool | None:
        return None if self.screenshot_diff is None else self.screenshot_diff == 0.0


@dataclass(frozen=True)
class EpisodeFidelity:
    task_id: str
    source_episode: str
    replay_episode: str
    recorded_steps: int
    replayed_steps: int
    steps: tuple[StepFidelity, ...]
    requests: RequestCounts = field(default_factory=RequestCounts)
    unmatched_urls: tuple[str, ...] = ()
    status: str = "completed"
    error: str | None = None

    @property
    def fidelity(self) -> float:
        """Steps with URL and tree equal / the longer of the two step counts (1.0 for two empty episodes)."""
        total = max(self.recorded_steps, self.replayed_steps)
        return sum(s.faithful for s in self.steps) / total if total else 1.0

    @property
    def url_equal(self) -> int:
        return sum(s.url_equal for s in self.steps)

    @property
    def tree_equal(self) -> int:
        return sum(s.tree_equal for s in self.steps)

    @property
    def screenshots_compared(self) -> int:
        return sum(s.screenshot_diff is not None for s in self.steps)

    @property
    def screenshots_identical(self) -> int:
        return sum(bool(s.screenshot_identical) for s in self.steps)

    def as_json(self) -> dict[str, Any]:
        """The episode with every step's comparison and the derived counts."""
        data = asdict(self)
        data["steps"] = [{**asdict(s), "faithful": s.faithful, "screenshot_identical": s.screenshot_identical}
                         for s in self.steps]
        return {**data, "fidelity": self.fidelity, "url_equal": self.url_equal, "tree_equal": self.tree_equal,
                "screenshots_compared": self.screenshots_compared, "screenshots_identical": self.screenshots_identical}


def summarize(episodes: Sequence[EpisodeFidelity]) -> dict[str, Any]:
    """Run totals: step fidelity over all steps, screenshot-identical share, request counts."""
    total = sum(max(e.recorded_steps, e.replayed_steps) for e in episodes)
    compared = sum(e.screenshots_compared for e in episodes)
    requests = sum((e.requests for e in episodes), RequestCounts())
    return {
        "episodes": len(episodes),
        "steps": total,
        "fidelity": sum(sum(s.faithful for s in e.steps) for e in episodes) / total if total else 1.0,
        "url_equal": sum(e.url_equal for e in episodes),
        "tree_equal": sum(e.tree_equal for e in episodes),
        "screenshots_compared": compared,
        "screenshots_identical": (sum(e.screenshots_identical for e in episodes) / compared) if compared else None,
        "requests": requests,
    }


def tree_diff(recorded: str | None, replayed: str | None, limit: int = MAX_DIFF_LINES) -> str:
    """A unified diff of two accessibility trees, cut after ``limit`` lines."""
    lines = list(difflib.unified_diff((recorded or "").splitlines(), (replayed or "").splitlines(),
                                      "recorded", "replayed", lineterm="", n=1))
    if len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(lines)


def pixel_difference(first: bytes, second: bytes, tolerance: int = PIXEL_TOLERANCE) -> float:
    """Fraction of pixels where some channel differs by more than ``tolerance``."""
    if first == second:
        return 0.0
    a, b = (Image.open(io.BytesIO(data)).convert("RGB") for data in (first, second))
    if a.size != b.size:
        return 1.0
    difference = ImageChops.difference(a, b)
    if difference.getbbox() is None:
        return 0.0
    red, green, blue = difference.split()
    largest = ImageChops.lighter(ImageChops.lighter(red, green), blue)
    differing = largest.point(lambda v: 255 if v > tolerance else 0).histogram()[255]
    return differing / (a.size[0] * a.size[1])


ScreenshotDiff = Callable[[str | None, str | None], float | None]


def screenshot_differ(blobs: Mapping[str, bytes], tolerance: int = PIXEL_TOLERANCE) -> ScreenshotDiff:
    """Compares screenshots by digest; equal digests never get decoded."""
    def compare(first: str | None, second: str | None) -> float | None:
        if first is None or second is None or first not in blobs or second not in blobs:
            return None
        return 0.0 if first == second else pixel_difference(blobs[first], blobs[second], tolerance)

    return compare


def compare_steps(recorded: Sequence[StepView], replayed: Sequence[StepView], screenshots: ScreenshotDiff,
                  requests: Mapping[int, RequestCounts] | None = None) -> tuple[StepFidelity, ...]:
    """Step-by-step comparison by step index; a step missing on one side is not faithful."""
    by_index = ({s.step_index: s for s in recorded}, {s.step_index: s for s in replayed})
    indexes = sorted(by_index[0].keys() | by_index[1].keys())
    return tuple(_compare(by_index[0].get(i), by_index[1].get(i), i, screenshots, (requests or {}).get(i - 1))
                 for i in indexes)


def _compare(old: StepView | None, new: StepView | None, index: int, screenshots: ScreenshotDiff,
             requests: RequestCounts | None) -> StepFidelity:
    if old is None or new is None:
        note = "(step missing in the replay)" if new is None else "(step not in the recording)"
        return StepFidelity(index, old.url if old else None, new.url if new else None, False, False, None,
                            requests or RequestCounts(), note)
    trees_equal = old.tree_text == new.tree_text
    return StepFidelity(index, old.url, new.url, same_page(old.url, new.url), trees_equal,
                        screenshots(old.screenshot, new.screenshot), requests or RequestCounts(),
                        "" if trees_equal else tree_diff(old.tree_text, new.tree_text))
