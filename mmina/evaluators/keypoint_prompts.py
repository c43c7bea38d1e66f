"""The key-point judge's three questions and the strict reading of its replies.

1. **Key points** — from the task's intent, its hops (the ``procedure`` sites) and its
   references, what each hop requires (asked once per task: the same question for every
   episode of it, so its reply is cached across episodes and runs).
2. **Relevance** — over the episode's steps as text (URL, title, action; no model output),
   how strongly each step's screenshot bears on each hop's key points, 0 to 5.
3. **Verdict** — per hop: its key points, the final answer, and the few most relevant steps
   with their screenshots (or, without images, their accessibility tree) → pass or fail, with
   reasons citing steps.

Every reply must be the JSON asked for (alone, or in one fenced block): anything else — prose,
a refusal, a verdict other than pass or fail, a step that was not shown — is *malformed*, and
what depends on it is ``unclear``; a reply is never guessed at. Steps are numbered from 1 in
the questions (step N is ``steps.step_index`` N-1); the episode's final page, when stored, is
the step after the last.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mmina.tasks.task import Task

PROMPT_VERSION = "keypoints-1"
"""The version of these questions and of the reading of their replies: a new one with any change
to this module's questions or parsers (a test pins it to the module's text), so that no verdict
or cached reply of one version is taken for another's."""
SYSTEM = (
    "You check whether a web agent completed a multi-hop task on the web. A hop is one part of the task, done "
    "on one website, in order. You reply with JSON only, exactly in the form asked for, with no other text."
)
MAX_KEY_POINTS = 8
MAX_SCORE = 5
TREE_CHARS = 1500
TEXT_CHARS = 300
_FENCED = re.compile(r"^```(?:json)?\s*\n?(?P<body>.*?)\n?```$", re.DOTALL)


class Malformed(ValueError):
    """A reply that is not the JSON asked for (the message says how)."""


@dataclass(frozen=True, kw_only=True)
class Page:
    """A step as the judge sees it: its number (from 1), the page and the action taken there."""

    number: int
    url: str
    title: str
    action: str
    screenshot: str | None = None
    tree_text: str | None = None

    @property
    def step_index(self) -> int:
        return self.number - 1

    def line(self) -> str:
        action = (
            f" — action: {_short(self.action)}"
            if self.action
            else " — the final page (after the last action)"
        )
        return f'Step {self.number}: {_short(self.url)} — "{_short(self.title)}"{action}'


def _short(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


# -- the questions ----------------------------------------------------------------------------


def task_text(task: Task) -> str:
    """The task as every question states it: intent, hops and their sites, references."""
    hops = "; ".join(f"{h.index + 1}. {h.keyword or '(no site named)'}" for h in task.hops)
    refs = {k: v for k, v in task.reference_answers.items() if v not in (None, "", [])}
    lines = [f"Task: {task.intent}", f"Hops ({task.n_hops}): {hops}"]
    if refs:
        lines.append(f"Reference answer(s): {json.dumps(refs, ensure_ascii=False, sort_keys=True)}")
    if task.reference_url:
        lines.append(f"Reference URL: {task.reference_url}")
    return "\n".join(lines)


def key_points_question(task: Task) -> str:
    example = json.dumps({"hops": [{"hop": 1, "key_points": ["..."]}]})
    return (
        f"{task_text(task)}\n\nList, for each of the {task.n_hops} hop(s), the key points a trajectory must show "
        "for that hop to count as done: the page that must be reached, the item to find or the information to "
        "read there, and the task's constraints (places, dates, quantities, prices). The last hop also needs the "
        f"final answer to be right. At most {MAX_KEY_POINTS} short key points per hop.\n"
        f"Reply with JSON only: {example}"
    )


def relevance_question(task: Task, points: Sequence[Sequence[str]], pages: Sequence[Page]) -> str:
    example = json.dumps({"relevance": [{"hop": 1, "step": 2, "score": 4}]})
    steps = "\n".join(p.line() for p in pages) or "(the agent took no step)"
    return (
        f"{task_text(task)}\n\nKey points per hop:\n{_points(points)}\n\nThe agent's steps (the page it saw, "
        f"then the action it took there):\n{steps}\n\nFor each hop, rate how strongly each step's screenshot "
        f"would show evidence for or against the hop's key points, from 0 (unrelated) to {MAX_SCORE} (shows it "
        f"directly). List only steps rated 1 or more.\nReply with JSON only: {example}"
    )


def verdict_question(
    task: Task, hop: int, points: Sequence[str], answer: str | None, evidence: Sequence[Page], images: bool
) -> list[tuple[str, str]]:
    """The verdict question of hop ``hop`` (0-based) as message parts: text, and the evidence
    steps' screenshots (or their tree text, without images or without a screenshot)."""
    site = task.hops[hop].keyword
    said = f'"{answer}"' if answer is not None else "(the agent gave no final answer)"
    head = (
        f"{task_text(task)}\n\nThis is hop {hop + 1} of {task.n_hops}{f' ({site})' if site else ''}. Its key "
        f"points:\n{_points([points], numbered=False)}\nThe agent's final answer: {said}\n\n"
    )
    parts: list[tuple[str, str]] = [
        (
            "text",
            head
            + (
                "Evidence: the steps most relevant to this hop."
                if evidence
                else "Evidence: no step was judged relevant to this hop."
            ),
        )
    ]
    for page in evidence:
        parts.append(("text", page.line()))
        if images and page.screenshot:
            parts.append(("image", page.screenshot))
        elif page.tree_text:
            parts.append(("text", f"Its page as text:\n{page.tree_text[:TREE_CHARS]}"))
    example = json.dumps({"verdict": "pass", "reasons": "... step 3 shows ...", "steps": [3]})
    parts.append(
        (
            "text",
            f"Did the agent complete hop {hop + 1}: does the evidence show every key point satisfied? "
            "Judge only from what is shown: a key point not shown is not satisfied. Cite the steps your "
            f'reasons rest on.\nReply with JSON only, verdict "pass" or "fail": {example}',
        )
    )
    return parts


def _points(points: Sequence[Sequence[str]], numbered: bool = True) -> str:
    if not numbered:
        return "\n".join(f"- {p}" for p in points[0])
    return "\n".join(f"Hop {i + 1}:\n" + "\n".join(f"- {p}" for p in hop) for i, hop in enumerate(points))


# -- reading the replies strictly --------------------------------------------------------------


def json_reply(reply: str) -> dict[str, Any]:
    """The reply's JSON object: the whole reply, or the one fenced block that is the whole reply."""
    text = (reply or "").strip()
    if not text:
        raise Malformed("the judge gave an empty reply (a refusal?)")
    fenced = _FENCED.match(text)
    try:
        value = json.loads(fenced["body"] if fenced else text)
    except ValueError:
        raise Malformed("the judge's reply is not the JSON asked for") from None
    if not isinstance(value, dict):
        raise Malformed("the judge's reply is not a JSON object")
    return value


def key_points(reply: str, n_hops: int) -> list[list[str]]:
    """Each hop's key points: exactly ``n_hops`` entries, numbered 1.. in order, each 1 to
    ``MAX_KEY_POINTS`` non-empty texts."""
    hops = json_reply(reply).get("hops")
    if not isinstance(hops, list) or len(hops) != n_hops:
        raise Malformed(
            f"the judge listed key points for {len(hops) if isinstance(hops, list) else 'no'} hop(s), "
            f"not {n_hops}"
        )
    found = []
    for number, hop in enumerate(hops, start=1):
        points = hop.get("key_points") if isinstance(hop, dict) else None
        if (
            not isinstance(hop, dict)
            or hop.get("hop") != number
            or not isinstance(points, list)
            or not 1 <= len(points) <= MAX_KEY_POINTS
            or not all(isinstance(p, str) and p.strip() for p in points)
        ):
            raise Malformed(f"the judge's key points of hop {number} are not 1 to {MAX_KEY_POINTS} texts")
        found.append([p.strip() for p in points])
    return found


def relevance(reply: str, n_hops: int, numbers: Sequence[int]) -> dict[int, dict[int, int]]:
    """Scores by hop (0-based) then step number: every entry names a hop, a step shown and a
    whole score 0..``MAX_SCORE``, each (hop, step) once."""
    entries = json_reply(reply).get("relevance")
    if not isinstance(entries, list):
        raise Malformed('the judge\'s relevance reply has no "relevance" list')
    scores: dict[int, dict[int, int]] = {hop: {} for hop in range(n_hops)}
    for entry in entries:
        hop, step, score = _entry(entry)
        if (
            not 1 <= hop <= n_hops
            or step not in numbers
            or not 0 <= score <= MAX_SCORE
            or step in scores[hop - 1]
        ):
            raise Malformed(
                f"the judge's relevance entry {json.dumps(entry)[:120]} names no hop, shown step and "
                f"score 0 to {MAX_SCORE} (once)"
            )
        scores[hop - 1][step] = score
    return scores


def _entry(entry: Any) -> tuple[int, int, int]:
    """A relevance entry's hop, step and score (-1 for any that is not a whole number)."""
    values: list[Any] = [entry.get(k) if isinstance(entry, dict) else None for k in ("hop", "step", "score")]
    hop, step, score = (v if _whole(v) else -1 for v in values)
    return hop, step, score


def verdict(reply: str, shown: Sequence[int]) -> tuple[str, str, list[int]]:
    """The verdict (pass or fail), its reasons, and the steps cited (among those shown)."""
    value = json_reply(reply)
    said, reasons, steps = value.get("verdict"), value.get("reasons"), value.get("steps", [])
    if said not in ("pass", "fail"):
        raise Malformed(f'the judge\'s verdict is {json.dumps(said)[:60]}, not "pass" or "fail"')
    if not isinstance(reasons, str) or not reasons.strip():
        raise Malformed("the judge gave no reasons")
    if not isinstance(steps, list) or not all(_whole(s) and s in shown for s in steps):
        raise Malformed(
            f"the judge cited steps {json.dumps(steps)[:80]}, not steps it was shown ({list(shown)})"
        )
    return said, reasons.strip(), list(steps)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def chosen(scores: Mapping[int, int], per_hop: int, least: int) -> list[int]:
    """The step numbers to show for a hop: the ``per_hop`` highest scored at least ``least``
    (a tie goes to the later step, nearer the outcome), in step order."""
    ranked = sorted((s for s in scores.items() if s[1] >= least), key=lambda s: (-s[1], -s[0]))
    return sorted(step for step, _ in ranked[:per_hop])
