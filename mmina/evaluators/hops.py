"""The clean hop evaluator, ``hops``.

It walks the pages the agent reached in order: the stored step URLs (each the page observed
before the step's action), then the terminal observation's URL (the page after the last
action, ``episodes.final_url``) when it is known and differs from the last step's.

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
(official tasks). Hops without a keyword (a task without ``procedure``, whose hops are counted
from ``cnt_hop`` or its suite) have no URL condition: they are judged by the final answer
alone, all completing together, on the last page, when it passes. An episode without a step
(it failed before the agent acted) completes no hop, even where its start page would.

The task passes iff every hop completed and the final answer passes the task's string
references (``exact_match`` / ``must_include``; a task with none — e.g. only ``fuzzy_match`` —
is decided by its hops). Task value = completed hops / hops.

A hop-conditioned episode (``mmina record --prefix-run``, ``episodes.start_hop``) was handed
the hops before its start hop by a replayed prefix: the queue starts at the start hop, those
given hops get no row (they are not the agent's), the agent's hops complete from its own first
observation on (the step after the last given hop's, if that hop completed there: one hop per
step), and the task value is completed hops / the hops the agent had to do. The task row's
detail names the start hop and the steps of the given hops.

``mmina_official`` (the official runner's rules) is in :mod:`mmina.evaluators.official`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

from mmina.evaluators.base import ScoreRow, Trace, task_result, verdict_of
from mmina.evaluators.trace_evaluator import TraceEvaluator
from mmina.tasks.answers import answer_verdict, must_include
from mmina.tasks.task import Task, first_agent_step

FLIGHT_SITES = ("momondo", "flight")
SHOP_SITES = ("7770", "shop")
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

    @property
    def by_answer_only(self) -> bool:
        """A hop with no URL condition (no keyword, no reference URL): the answer judges it."""
        return self.reference_url is None and not self.keyword

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
        return [
            HopCondition(h.keyword, f.get("reference_url") or None, answer=f.get("answer"))
            for h, f in zip(task.hops, fixture)
        ]
    return [
        HopCondition(h.keyword, requires=_requirements(task, h.keyword, h.index == task.n_hops - 1))
        for h in task.hops
    ]


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


def hop_rows(
    conditions: Sequence[HopCondition], completed: dict[int, tuple[int, str]], start: int = 0
) -> list[ScoreRow]:
    """One row per hop from ``start`` on (the hops before it were given, see the module)."""
    rows = []
    for index, condition in enumerate(conditions[start:], start):
        step, how = completed.get(index, (None, None))
        rows.append(
            ScoreRow(
                verdict=verdict_of(index in completed),
                value=float(index in completed),
                level="hop",
                hop_index=index,
                detail={**condition.description, "completed_step": step, "by": how},
            )
        )
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

    The exact rule is in the module docstring. Version 2 also walks the terminal page; version 3
    starts a hop-conditioned episode's queue at its start hop; version 4 numbers hops from 1 in
    its detail (``first_failed_hop``) and says ``hops_given`` (was ``start_hop``), as every table
    does since store schema 7. Its verdicts are version 3's. Version 5 completes hops without a
    keyword by a passing answer (before, none completed) and no hop of an episode without a step.
    """

    name = "hops"
    version = "5"
    step_fields = ("step_index", "url")
    episode_fields = ("final_answer", "final_url", "prefix_steps", "prefix_hop_steps")

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self.conditions = PerTask(hop_conditions)

    def rows(self, trace: Trace) -> list[ScoreRow]:
        conditions = self.conditions(trace.task)
        start = min(len(trace.given), len(conditions))
        completed = walk_queue(conditions, trace)
        answer_ok = answer_verdict(trace.task, trace.final_answer)
        all_hops = len(completed) == len(conditions) - start
        to_do = len(conditions) - start
        value = len(completed) / to_do if to_do else float(answer_ok is not False)
        detail = {
            "hops_completed": len(completed),
            "n_hops": len(conditions),
            "hop_steps": [completed[i][0] for i in sorted(completed)],
            "answer": trace.final_answer,
            "answer_ok": answer_ok,
            "first_failed_hop": None if all_hops else start + len(completed) + 1,
        }
        if trace.given:
            detail |= {"hops_given": start, "given_hop_steps": list(trace.given)}
        passed = all_hops and answer_ok is not False
        return [*hop_rows(conditions, completed, start), task_result(verdict_of(passed), detail, value)]


def walk_queue(conditions: Sequence[HopCondition], trace: Trace) -> dict[int, tuple[int, str]]:
    """Hop index -> (step that completed it, "url" or "answer"); only the head, one per step.
    A conditioned episode's queue starts after its given hops, on the agent's own pages."""
    completed: dict[int, tuple[int, str]] = {}
    if not trace.urls:  # no step: the agent never acted
        return completed
    head = min(len(trace.given), len(conditions))
    opens_at = first_agent_step(trace.prefix_steps, trace.given)
    indexes, urls = trace.pages()
    for step_index, url in zip(indexes, urls):
        if head == len(conditions):
            break
        if step_index >= opens_at and conditions[head].holds(url):
            completed[head] = (step_index, "url")
            head += 1
    rest = conditions[head:]
    if (
        rest
        and (len(rest) == 1 or all(c.by_answer_only for c in rest))
        and last_hop_answer_ok(trace.task, rest[-1], trace.final_answer)
    ):
        completed |= {index: (indexes[-1], "answer") for index in range(head, len(conditions))}
    return completed
