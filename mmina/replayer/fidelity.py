"""How faithfully a replay reproduced a recording, step by step and per episode.

Pure over stored values (step rows, screenshot bytes, the router's request log), so a replay
can be judged again later, or a live re-run compared with its recording the same way.

* A step's **accessibility tree** is equal when its lines say the same — the same roles,
  names, attributes, texts and properties at the same depths — whatever ids the elements
  carry: ids derive from the elements (:mod:`mmina.observations.element_ids`), so equal lines mean equal
  ids within one id scheme, and a recording stored with an older scheme still compares by
  what it showed. A differing tree comes with ``tree_change``, which names the first line
  that differs (with the elements it sits in) and the elements found on one side only, by
  role and name, and a unified diff of the lines without ids (recorded → replayed). Its **URL**
  is equal when the texts are, or when they differ only in query values that change on every
  load (clock readings, random cache-busters: ``archive.same_page``), which a replay under the
  frozen clock cannot repeat.
* A step's **screenshot difference** is the fraction of pixels that differ: Pillow's
  ``ImageChops.difference`` of the two decoded screenshots, where a pixel differs when any
  channel differs by more than ``PIXEL_TOLERANCE`` of 255. Screenshots are JPEG (q80), and a
  re-encoded block can move a channel by a few levels without any visible change; identical
  renders give identical bytes and 0.0. Different sizes count as 1.0.
* A step's **requests** are the ones that loaded what it observed: for step k, those issued by
  the action of step k-1 (for step 0, the initial page load), served exactly / fuzzily / by
  nearest match / not at all (see :mod:`mmina.replayer.archive`); a matched request whose
  recorded body is missing, one served a body that redaction changed (the page got other bytes
  than when recorded), or one the router failed to answer, is counted as a defect too.
* A replay's **sockets** are compared message by message with their recordings
  (:func:`compare_sockets`): the server's messages in order, the page's by content (as the
  script matches them; around an engine.io upgrade the order of what went over polling and over
  the socket follows the page's timing), volatile parts normalised
  (:func:`mmina.replayer.sockets.normalised`), heartbeats left out (pings and pongs keep the
  transport's own clock, so how many there are and where they fall among the page's messages
  follows how long the replay took, and no page shows them); a recorded socket the replay never
  opened counts every recorded message as missing.
* **Episode fidelity** = steps with both URL and tree equal / max(recorded steps, replayed
  steps): a replay that ends early or runs longer loses fidelity for every missing step.
  The screenshot-identical fraction is reported next to it (over steps with screenshots on
  both sides).
"""

from __future__ import annotations

import difflib
import io
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field
from typing import Any

from PIL import Image, ImageChops

from mmina.observations.aria_snapshot import AriaLine
from mmina.observations.observation import render_line, tree_lines
from mmina.replayer.archive import MatchKind, same_page
from mmina.replayer.sockets import PAGE, SERVER, Message, heartbeat_kind, normalised

PIXEL_TOLERANCE = 8
MAX_DIFF_LINES = 60
MAX_NAMED = 5
"""Elements named per side in ``tree_change`` (the rest are counted)."""
MAX_TEXT = 40
"""Characters of an unnamed element's text shown in ``tree_change``."""


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
    whose recorded body is missing (served empty, or with a repeat's body), requests the router
    failed to answer, and matched requests served a body that redaction changed (not the bytes
    the page received)."""

    exact: int = 0
    fuzzy: int = 0
    nearest: int = 0
    unmatched: int = 0
    missing_body: int = 0
    failed: int = 0
    redacted_body: int = 0

    @property
    def total(self) -> int:
        return self.exact + self.fuzzy + self.nearest + self.unmatched

    def __add__(self, other: RequestCounts) -> RequestCounts:
        return RequestCounts(*(a + b for a, b in zip(astuple(self), astuple(other))))

    @classmethod
    def of(
        cls, kinds: Iterable[MatchKind], missing_body: int = 0, failed: int = 0, redacted_body: int = 0
    ) -> RequestCounts:
        found = Counter(kinds)
        return cls(
            found[MatchKind.EXACT],
            found[MatchKind.FUZZY],
            found[MatchKind.NEAREST],
            found[MatchKind.UNMATCHED],
            missing_body,
            failed,
            redacted_body,
        )


@dataclass(frozen=True)
class RequestMatch:
    """How one replayed request was answered: ``kind`` (``nearest``, ``unmatched``...) and the
    recorded request that served it (its URL and place in the archive; None: a synthetic answer)."""

    method: str
    url: str
    kind: str
    recorded_url: str | None = None
    recorded_order: int | None = None


@dataclass(frozen=True, kw_only=True)
class StepFidelity:
    step_index: int
    recorded_url: str | None
    replayed_url: str | None
    url_equal: bool
    tree_equal: bool
    screenshot_diff: float | None
    requests: RequestCounts = field(default_factory=RequestCounts)
    tree_diff: str = ""
    tree_change: str = ""
    """Which part of the tree differed, in one line ("" when the trees are equal)."""
    matches: tuple[RequestMatch, ...] = ()
    """The step's requests the archive answered by nearest match or not at all (a synthetic
    answer), each with the recorded request that served it: where a wrong "nearest" is found."""

    @property
    def faithful(self) -> bool:
        return self.url_equal and self.tree_equal

    @property
    def screenshot_identical(self) -> bool | None:
        return None if self.screenshot_diff is None else self.screenshot_diff == 0.0


@dataclass(frozen=True)
class SocketFidelity:
    """One socket of the recording compared with the replay's, message by message."""

    url: str
    recorded: int
    replayed: int
    equal: int
    """Messages equal at the same place of their direction (page → server, server → page)."""
    first_difference: str = ""

    @property
    def faithful(self) -> bool:
        return self.recorded == self.replayed == self.equal


def compare_sockets(url: str, recorded: Sequence[Message], replayed: Sequence[Message]) -> SocketFidelity:
    """``recorded`` and ``replayed`` (one socket's messages) compared direction by direction,
    heartbeats left out (see the module)."""
    recorded, replayed = _said(recorded), _said(replayed)
    old = [normalised(m.data) for m in recorded if m.direction == SERVER]
    new = [normalised(m.data) for m in replayed if m.direction == SERVER]
    page_equal, first = _by_content(
        [normalised(m.data) for m in recorded if m.direction == PAGE],
        [normalised(m.data) for m in replayed if m.direction == PAGE],
    )
    same = [a == b for a, b in zip(old, new)]
    if not first and (False in same or len(old) != len(new)):
        index = same.index(False) if False in same else min(len(old), len(new))
        first = f"server → page message {index + 1}: recorded {_message(old, index)}, replayed {_message(new, index)}"
    return SocketFidelity(url, len(recorded), len(replayed), page_equal + sum(same), first)


def _by_content(old: Sequence[str | bytes], new: Sequence[str | bytes]) -> tuple[int, str]:
    """Page messages said on both sides (by content, as the script matches them: which transport
    and so which order a page used around its upgrade follows its own timing), and the first
    one said on one side only."""
    left = Counter(new)
    missing = []
    for index, message in enumerate(old):
        if left[message] > 0:
            left[message] -= 1
        else:
            missing.append(index)
    if missing:
        return (
            len(old) - len(missing),
            f"page → server message {missing[0] + 1}: recorded {_message(old, missing[0])}, "
            "not said in the replay",
        )
    extra = next((i for i, m in enumerate(new) if left[m] > 0), None)
    if extra is not None:
        return len(
            old
        ), f"page → server: replayed {_message(new, extra)} (message {extra + 1}), not said when recorded"
    return len(old), ""


def _said(messages: Sequence[Message]) -> list[Message]:
    """The messages that are not heartbeats."""
    return [m for m in messages if heartbeat_kind(m.data) is None]


def _message(messages: Sequence[str | bytes], index: int) -> str:
    if index >= len(messages):
        return "nothing"
    text = messages[index] if isinstance(messages[index], str) else repr(messages[index])
    return f"`{_cut(str(text), 2 * MAX_TEXT)}`"


@dataclass(frozen=True, kw_only=True)
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
    sockets: tuple[SocketFidelity, ...] = ()

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
        data["steps"] = [
            {**asdict(s), "faithful": s.faithful, "screenshot_identical": s.screenshot_identical}
            for s in self.steps
        ]
        data["sockets"] = [{**asdict(s), "faithful": s.faithful} for s in self.sockets]
        return {
            **data,
            "fidelity": self.fidelity,
            "url_equal": self.url_equal,
            "tree_equal": self.tree_equal,
            "screenshots_compared": self.screenshots_compared,
            "screenshots_identical": self.screenshots_identical,
        }


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
        "screenshots_identical": (sum(e.screenshots_identical for e in episodes) / compared)
        if compared
        else None,
        "requests": requests,
    }


def tree_diff(recorded: str | None, replayed: str | None, limit: int = MAX_DIFF_LINES) -> str:
    """A unified diff of two accessibility trees' lines without ids, cut after ``limit`` lines."""
    lines = list(
        difflib.unified_diff(_shown(recorded), _shown(replayed), "recorded", "replayed", lineterm="", n=1)
    )
    if len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more diff lines)"]
    return "\n".join(lines)


def tree_change(recorded: str | None, replayed: str | None) -> str:
    """Which part of two differing trees differs: the first differing line, where it sits, and
    the elements (role and name) on one side only; "" for trees that say the same."""
    old, new = _lines(recorded), _lines(replayed)
    if old == new:
        return ""
    start = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    where = _path(old, start) or _path(new, start)
    parts = [
        f"first difference at line {start + 1}{f' (in {where})' if where else ''}: "
        f"recorded {_described(old, start)}, replayed {_described(new, start)}"
    ]
    counts = (
        Counter(_element(line) for line in old if line.is_node),
        Counter(_element(line) for line in new if line.is_node),
    )
    for side, only in (("recording", counts[0] - counts[1]), ("replay", counts[1] - counts[0])):
        if only:
            parts.append(f"{sum(only.values())} element(s) only in the {side}: {_named(only)}")
    return "; ".join(parts)


def _lines(tree: str | None) -> list[AriaLine]:
    return [line for _, line in tree_lines(tree or "")]


def _shown(tree: str | None) -> list[str]:
    """A tree's lines as shown to the agent, without ids."""
    return [render_line(line) for line in _lines(tree)]


def _described(lines: Sequence[AriaLine], index: int) -> str:
    return f"`{render_line(lines[index]).strip()}`" if index < len(lines) else "nothing (the tree ended)"


def _path(lines: Sequence[AriaLine], index: int) -> str:
    """The elements enclosing line ``index``, outermost first (``main > list "Results"``)."""
    if index >= len(lines):
        return ""
    path, depth = [], lines[index].depth
    for line in reversed(lines[:index]):
        if line.depth < depth and line.is_node:
            path.append(_element(line))
            depth = line.depth
    return " > ".join(reversed(path))


def _element(line: AriaLine) -> str:
    """An element as the agent reads it, by role and name (an unnamed one by its text, cut short)."""
    text = None if line.name or line.value is None else _cut(line.value)
    return render_line(AriaLine(depth=0, role=line.role, name=line.name, value=text))


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _named(counts: Counter[str]) -> str:
    named = [f"{element}{f' ×{n}' if n > 1 else ''}" for element, n in counts.most_common(MAX_NAMED)]
    rest = len(counts) - len(named)
    return ", ".join(named) + (f" and {rest} more" if rest > 0 else "")


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


def compare_steps(
    recorded: Sequence[StepView],
    replayed: Sequence[StepView],
    screenshots: ScreenshotDiff,
    requests: Mapping[int, RequestCounts] | None = None,
) -> tuple[StepFidelity, ...]:
    """Step-by-step comparison by step index; a step missing on one side is not faithful."""
    by_index = ({s.step_index: s for s in recorded}, {s.step_index: s for s in replayed})
    indexes = sorted(by_index[0].keys() | by_index[1].keys())
    return tuple(
        _compare(by_index[0].get(i), by_index[1].get(i), i, screenshots, (requests or {}).get(i - 1))
        for i in indexes
    )


def _compare(
    old: StepView | None,
    new: StepView | None,
    index: int,
    screenshots: ScreenshotDiff,
    requests: RequestCounts | None,
) -> StepFidelity:
    if old is None or new is None:
        note = "(step missing in the replay)" if new is None else "(step not in the recording)"
        return StepFidelity(
            step_index=index,
            recorded_url=old.url if old else None,
            replayed_url=new.url if new else None,
            url_equal=False,
            tree_equal=False,
            screenshot_diff=None,
            requests=requests or RequestCounts(),
            tree_diff=note,
            tree_change=note,
        )
    change = tree_change(old.tree_text, new.tree_text)
    return StepFidelity(
        step_index=index,
        recorded_url=old.url,
        replayed_url=new.url,
        url_equal=same_page(old.url or "", new.url or ""),
        tree_equal=not change,
        screenshot_diff=screenshots(old.screenshot, new.screenshot),
        requests=requests or RequestCounts(),
        tree_diff=tree_diff(old.tree_text, new.tree_text) if change else "",
        tree_change=change,
    )
