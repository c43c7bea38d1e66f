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
from typing import Any

from mmina.answers import answer_verdict, must_include
from mmina.evaluators.base import BuiltinEvaluator, EpisodeView, Score, task_score, verdict_of
from mmina.tasks import Task

FLIGHT_SITES = ("momondo", "flight")
SHOP_SITES = ("7770", "shop")
KIWIX = "kiwix"


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

    def describe(self) -> dict[str, Any]:
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


def hop_rows(conditions: Sequence[HopCondition], completed: dict[int, tuple[int, str]]) -> list[Score]:
    rows = []
    for index, condition in enumerate(conditions):
        step, how = completed.get(index, (None, None))
        rows.append(Score(verdict_of(index in completed), float(index in completed), "hop", hop_index=index,
                          detail={**condition.describe(), "completed_step": step, "by": how}))
    return rows


class Hops(BuiltinEvaluator):
    """The clean hop queue: only the head hop completes, at most one per step, when the step
    URL is its reference URL (or has its procedure keyword); the last hop also by the answer.

    The exact rule is in the module docstring.
    """

    name = "hops"
    step_fields = ("step_index", "url")

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        self._conditions: dict[int, tuple[Task, list[HopCondition]]] = {}

    def conditions(self, task: Task) -> list[HopCondition]:
        """``hop_conditions(task)``, worked out once per task object of this rescoring."""
        if id(task) not in self._conditions:
            self._conditions[id(task)] = (task, hop_conditions(task))  # the task is held, so its id stays its own
        return self._conditions[id(task)][1]

    def score(self, episode: EpisodeView) -> list[Score]:
        conditions = self.conditions(episode.task)
        completed = walk_queue(conditions, episode)
        answer_ok = answer_verdict(episode.task, episode.final_answer)
        all_hops = len(completed) == len(conditions)
        value = len(completed) / len(conditions) if conditions else float(answer_ok is not False)
        detail = {"hops_completed": len(completed), "n_hops": len(conditions),
                  "hop_steps": [completed[i][0] for i in sorted(completed)], "answer": episode.final_answer,
                  "answer_ok": answer_ok, "first_failed_hop": None if all_hops else len(completed)}
        passed = all_hops and answer_ok is not False
        return [*hop_rows(conditions, completed), task_score(verdict_of(passed), detail, value)]


def walk_queue(conditions: Sequence[HopCondition], episode: EpisodeView) -> dict[int, tuple[int, str]]:
    """Hop index -> (step that completed it, "url" or "answer"); only the head, one per step."""
    completed: dict[int, tuple[int, str]] = {}
    for step in episode.steps:
        head = len(completed)
        if head < len(conditions) and conditions[head].holds(step.url):
            completed[head] = (step.step_index, "url")
    head = len(completed)
    if conditions and head == len(conditions) - 1 and episode.steps and \
            last_hop_answer_ok(episode.task, conditions[head], episode.final_answer):
        completed[head] = (episode.steps[-1].step_index, "answer")
    return completed


class MminaOfficial(BuiltinEvaluator):
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

    def score(self, episode: EpisodeView) -> list[Score]:
        task = episode.task
        keywords = [h.keyword for h in task.hops]
        steps = official_counter(task, keywords, [(s.step_index, s.url) for s in episode.steps])
        answer_ok = answer_verdict(task, episode.final_answer)
        end = len(steps) == len(keywords) and answer_ok is not False
        rows = [Score(verdict_of(i < len(steps)), float(i < len(steps)), "hop", hop_index=i,
                      detail={"keyword": k, "completed_step": steps[i] if i < len(steps) else None})
                for i, k in enumerate(keywords)]
        rows.append(Score(verdict_of(end), float(end), "hop", hop_index=len(keywords),
                          detail={"keyword": "end", "answer_ok": answer_ok}))
        value = (len(steps) + end) / (len(keywords) + 1)
        detail = {"hops_completed": len(steps), "n_hops": len(keywords), "denominator": len(keywords) + 1,
                  "answer": episode.final_answer, "answer_ok": answer_ok}
        return [*rows, task_score(verdict_of(end), detail, value)]


def official_counter(task: Task, keywords: list[str], urls: list[tuple[int, str]]) -> list[int]:
    """The step at which the counter passed each hop (several hops may share a step)."""
    done: list[int] = []
    state = {"wiki_exit_used": False}
    for step_index, url in urls:
        if len(done) >= len(keywords):
            break
        gained = _official_gain(task, keywords, len(done), url.lower(), state)
        done += [step_index] * min(gained, len(keywords) - len(done))
    return done


def _official_gain(task: Task, keywords: list[str], head_index: int, url: str, state: dict[str, bool]) -> int:
    head = keywords[head_index]
    if not head:  # a task without a procedure: its hop is judged by the answer alone
        return 0
    following = keywords[head_index + 1] if head_index + 1 < len(keywords) else "end"
    checks: list[Callable[[], bool]] = [
        lambda: not state["wiki_exit_used"] and KIWIX in head and KIWIX not in url and following in url,
        lambda: _on_site(head, url, FLIGHT_SITES) and task.flight.lower() in url,
        lambda: _on_site(head, url, SHOP_SITES) and task.shop.lower() in url,
        lambda: head in url and all(part in url for part in task.city.lower().split()),
    ]
    results = [check() for check in checks]
    if results[0]:
        state["wiki_exit_used"] = True
    return sum(results)


def _on_site(head: str, url: str, markers: Sequence[str]) -> bool:
    return any(m in head and m in url for m in markers)
