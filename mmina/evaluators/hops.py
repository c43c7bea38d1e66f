"""Hop evaluators: the clean hop queue (``hops``) and the official runner's rules (``mmina_official``).

Both walk the stored step URLs in order (each step's URL is the page observed before the
step's action, so the last one is the page the agent ended on).

``hops`` — a queue of the task's hops; only the head can complete, at most one per step.
Hop k completes at the first step (after hop k-1's) whose URL

* equals ``mmina_hops[k].reference_url`` exactly, for tasks with the fixture extension
  ``mmina_hops`` (one entry per hop);
* otherwise (official tasks) contains the hop's ``procedure`` keyword (lowercased URL), and
  also the task's ``flight`` code on a flight-site hop (keyword contains ``flight`` or
  ``momondo``), the task's ``shop`` string on a shop-site hop (keyword contains ``shop`` or
  ``7770``), and every word of the task's ``city`` on the last hop.

The last hop also completes, once it is at the head, when the final answer passes: it
contains ``mmina_hops[-1].answer`` (fixture tasks), or passes the task's string references
(official tasks). The task passes iff every hop completed and the final answer passes the
task's string references (``exact_match`` / ``must_include``; a task with none — e.g. only
``fuzzy_match`` — is decided by its hops). Task value = completed hops / hops.

``mmina_official`` — see :class:`MminaOfficial`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

from mmina.answers import answer_verdict, must_include
from mmina.evaluators.base import ScoreRow, Trace, TraceEvaluator, task_result, verdict_of
from mmina.tasks import Task

FLIGHT_SITES = ("momondo", "flight")
SHOP_SITES = ("7770", "shop")
KIWIX = "kiwix"
T = TypeVar("T")


@dataclass(frozen=True)
class HopCondition:
    """The URL condition of one hop, kept as data so the detail column can show it."""

    keyword: str
    reference_url: str | None = None
    requires: tuple[str, ...] = ()
    answer: str | None = None

    def holds(self, url: str) -> bool:
        """Whether the step URL completes the hop (a hop without a keyword never does: its answer decides)."""
        if self.reference_url is not None:
            return url == self.reference_url
        lowered = url.lower()
        return bool(self.keyword) and self.keyword in lowered and all(r in lowered for r in self.requires)

    @cached_property
    def description(self) -> dict[str, Any]:
        """What the hop rows' detail says of the condition (worked out once; never mutated)."""
        if self.reference_url is not None:
            return {"keyword": self.keyword, "rule": "reference_url", "reference_url": self.reference_url}
        return {"keyword": self.keyword, "rule": "procedure", "requires": [self.keyword, *self.requires]}


def fixture_hops(task: Task) -> list[dict[str, Any]] | None:
    """The ``mmina_hops`` extension when it describes every hop, else None."""
    hops = task.original.get("mmina_hops")
    if isinstance(hops, list) and len(hops) == task.n_hops and all(isinstance(h, dict) for h in hops):
        return hops
    return None


def is_site(keyword: str, markers: Sequence[str]) -> bool:
    return any(m in keyword for m in markers)


def hop_conditions(task: Task) -> list[HopCondition]:
    """One condition per hop: the fixture's reference URL, else the official fields."""
    fixture = fixture_hops(task)
    if fixture is not None:
        return [HopCondition(h.keyword, f.get("reference_url") or None, answer=f.get("answer"))
                for h, f in zip(task.hops, fixture)]
    return [HopCondition(h.keyword, requires=_requirements(task, h.keyword, h.index == task.n_hops - 1))
            for h in task.hops]


def _requirements(task: Task, keyword: str, last: bool) -> tuple[str, ...]:
    needs = []
    if task.flight and is_site(keyword, FLIGHT_SITES):
        needs.append(task.flight.lower())
    if task.shop and is_site(keyword, SHOP_SITES):
        needs.append(task.shop.lower())
    if task.city and last:
        needs += task.city.lower().split()
    return tuple(needs)


def last_hop_answer_ok(task: Task, condition: HopCondition, answer: str | None) -> bool:
    """The last hop's own answer check: its fixture answer, else the task's string references."""
    if answer is None:
        return False
    if condition.answer:
        return must_include(answer, [condition.answer])
    return answer_verdict(task, answer) is True


def hop_rows(conditions: Sequence[HopCondition], completed: dict[int, tuple[int, str]]) -> list[ScoreRow]:
    rows = []
    for index, condition in enumerate(conditions):
        step, how = completed.get(index, (None, None))
        rows.append(ScoreRow(verdict_of(index in completed), float(index in completed), "hop", index,
                             detail={**condition.description, "completed_step": step, "by": how}))
    return rows


class PerTask(Generic[T]):
    """``make(task)``, worked out once per task object (the tasks of a rescoring are shared by
    their episodes); the task is held, so its id stays its own."""

    def __init__(self, make: Callable[[Task], T]) -> None:
        self._make = make
        self._made: dict[int, tuple[Task, T]] = {}

    def __call__(self, task: Task) -> T:
        found = self._made.get(id(task))
        if found is None:
            found = self._made[id(task)] = (task, self._make(task))
        return found[1]


class Hops(TraceEvaluator):
    """The clean hop queue: only the head hop completes, at most one per step, when the step
    URL is its reference URL (or has its procedure keyword); the last hop also by the answer.

    The exact rule is in the module docstring.
    """

    name = "hops"
    step_fields = ("step_index", "url")

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.conditions = PerTask(hop_conditions)

    def rows(self, trace: Trace) -> list[ScoreRow]:
        conditions = self.conditions(trace.task)
        completed = walk_queue(conditions, trace)
        answer_ok = answer_verdict(trace.task, trace.final_answer)
        all_hops = len(completed) == len(conditions)
        value = len(completed) / len(conditions) if conditions else float(answer_ok is not False)
        detail = {"hops_completed": len(completed), "n_hops": len(conditions),
                  "hop_steps": [completed[i][0] for i in sorted(completed)], "answer": trace.final_answer,
                  "answer_ok": answer_ok, "first_failed_hop": None if all_hops else len(completed)}
        passed = all_hops and answer_ok is not False
        return [*hop_rows(conditions, completed), task_result(verdict_of(passed), detail, value)]


def walk_queue(conditions: Sequence[HopCondition], trace: Trace) -> dict[int, tuple[int, str]]:
    """Hop index -> (step that completed it, "url" or "answer"); only the head, one per step."""
    completed: dict[int, tuple[int, str]] = {}
    head = 0
    for step_index, url in zip(trace.step_indexes, trace.urls):
        if head == len(conditions):
            break
        if conditions[head].holds(url):
            completed[head] = (step_index, "url")
            head += 1
    if conditions and head == len(conditions) - 1 and trace.urls and \
            last_hop_answer_ok(trace.task, conditions[head], trace.final_answer):
        completed[head] = (trace.step_indexes[-1], "answer")
    return completed


class MminaOfficial(TraceEvaluator):
    """The official MMInA runner's URL-substring hop rules, for comparison with published numbers.

    Our reading of the published ``run.py``: for every stored step URL ``u`` (lowercased),
    with ``head`` the procedure keyword at the counter, these independent checks each add
    one to the counter:

    1. wiki exit — ``kiwix`` in head, ``kiwix`` not in ``u`` and the next procedure entry in
       ``u`` (leaving the wiki for the next site completes the wiki hop; once per episode);
    2. flight site — a flight-site marker (``momondo``, or our fixture's ``flight``) in both
       head and ``u``, and the task's ``flight`` code in ``u``;
    3. shop site — a shop marker (``7770``, or ``shop``) in both, and the task's ``shop``
       string in ``u``;
    4. keyword — head in ``u`` and the task's ``city`` in ``u`` (a city with spaces: every
       word in ``u``).

    Quirks reproduced: the checks are not exclusive and all test the same head, so one URL
    can complete several hops (skipping hops); the task's single ``city`` is required at
    every keyword hop, whatever site it is on; an empty ``city``/``flight``/``shop`` matches
    any URL; there is no one-hop-per-step limit. END is counted in the denominator: the
    rows are one per hop plus an END row (``hop_index`` = number of hops), which passes when
    the counter reached END and the final answer passes the task's string references (the
    runner's string evaluator); the task passes iff END passed; value = passed rows / (hops + 1).
    Not reproduced: the 2-hop-only shortcuts that counted a hop when a reference answer
    appeared in the URL, the crash when the counter ran past END (we cap it), and comparing
    an upper-case flight code with the lowercased URL (we lowercase both).
    """

    name = "mmina_official"
    step_fields = ("step_index", "url")

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.official = PerTask(OfficialTask.of)

    def rows(self, trace: Trace) -> list[ScoreRow]:
        task, official = trace.task, self.official(trace.task)
        keywords = [head.keyword for head in official.heads]
        steps = official_counter(official, trace.step_indexes, trace.urls)
        answer_ok = answer_verdict(task, trace.final_answer)
        end = len(steps) == len(keywords) and answer_ok is not False
        rows = [ScoreRow(verdict_of(i < len(steps)), float(i < len(steps)), "hop", i,
                         detail={"keyword": k, "completed_step": steps[i] if i < len(steps) else None})
                for i, k in enumerate(keywords)]
        rows.append(ScoreRow(verdict_of(end), float(end), "hop", len(keywords),
                             detail={"keyword": "end", "answer_ok": answer_ok}))
        value = (len(steps) + end) / (len(keywords) + 1)
        detail = {"hops_completed": len(steps), "n_hops": len(keywords), "denominator": len(keywords) + 1,
                  "answer": trace.final_answer, "answer_ok": answer_ok}
        return [*rows, task_result(verdict_of(end), detail, value)]


@dataclass(frozen=True)
class OfficialHead:
    """What the four checks need of one head keyword, worked out once per episode rather than per URL:
    the keyword, the next one (or ``end``), and which site markers it contains."""

    keyword: str
    following: str
    wiki: bool
    flight_markers: tuple[str, ...]
    shop_markers: tuple[str, ...]


@dataclass(frozen=True)
class OfficialTask:
    """The task as the checks test it: its heads, and ``flight``, ``shop`` and the words of
    ``city`` lowercased."""

    heads: tuple[OfficialHead, ...]
    flight: str
    shop: str
    city: tuple[str, ...]

    @classmethod
    def of(cls, task: Task) -> "OfficialTask":
        keywords = [hop.keyword for hop in task.hops]
        following = [*keywords[1:], "end"]
        heads = tuple(OfficialHead(k, f, KIWIX in k, tuple(m for m in FLIGHT_SITES if m in k),
                                   tuple(m for m in SHOP_SITES if m in k)) for k, f in zip(keywords, following))
        return cls(heads, task.flight.lower(), task.shop.lower(), tuple(task.city.lower().split()))


def official_counter(task: OfficialTask, step_indexes: Sequence[int], urls: Sequence[str]) -> list[int]:
    """The step at which the counter passed each hop (several hops may share a step)."""
    done: list[int] = []
    state = {"wiki_exit_used": False}
    hops = len(task.heads)
    for step_index, url in zip(step_indexes, urls):
        if len(done) >= hops:
            break
        gained = _official_gain(task, task.heads[len(done)], url.lower(), state)
        done += [step_index] * min(gained, hops - len(done))
    return done


def _official_gain(task: OfficialTask, head: OfficialHead, url: str, state: dict[str, bool]) -> int:
    """How many of the four independent checks hold for ``url`` (see :class:`MminaOfficial`):
    a site check holds when a marker is in both the head and the URL."""
    if not head.keyword:  # a task without a procedure: its hop is judged by the answer alone
        return 0
    wiki_exit = not state["wiki_exit_used"] and head.wiki and KIWIX not in url and head.following in url
    if wiki_exit:
        state["wiki_exit_used"] = True
    return (wiki_exit + (_on_site(head.flight_markers, url) and task.flight in url)
            + (_on_site(head.shop_markers, url) and task.shop in url)
            + (head.keyword in url and all(part in url for part in task.city)))


def _on_site(markers: Sequence[str], url: str) -> bool:
    return bool(markers) and any(m in url for m in markers)
