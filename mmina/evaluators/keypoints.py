"""``keypoints``: a multimodal judge that checks each hop against the key points it requires.

The shape of WebJudge and of rubric-based verifiers, over mmina's stored trajectories: the
judge lists each hop's key points from the task (intent, hops, references), rates which
steps bear on them from the steps' text (URL, title, action — no model output), then judges
each hop from its key points, the final answer and the few most relevant steps' screenshots,
with reasons citing steps (the questions and the strict reading of the replies are in
:mod:`mmina.evaluators.keypoint_prompts`). Every call is cached in ``judge_cache`` like the
``fuzzy`` judge's: a rescore of the same episodes with the same judge sends no request.

Rows: one per hop (``pass`` / ``fail``; ``unclear`` when a reply was malformed or refused),
its detail holding the key points, the steps shown with their relevance, the reasons, the
steps cited (``step_index``, 0-based; the questions number steps from 1), the tokens and the
cost of its verdict call; and the task row — every hop must pass, value = hops passed /
hops — with the tokens and cost of every call the episode's verdicts rest on (the key points
are the task's, shared by its episodes: summing episodes counts them once per episode).

Arguments: ``judge_model``; ``per_hop`` (steps shown per hop, default 3); ``min_relevance``
(0-5, default 3); ``images`` (false: the steps' accessibility tree instead of screenshots, for
a text-only judge); ``price_in`` / ``price_out`` (USD per million tokens, for the cost).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mmina.evaluators import keypoint_prompts as ask
from mmina.evaluators.base import BuiltinEvaluator, EpisodeView, EvaluatorError, Score, combine
from mmina.evaluators.judge import JudgeRequest
from mmina.evaluators.keypoint_prompts import Malformed, Page

BUDGETS = {"key_points": 800, "relevance": 1000, "verdict": 500}
"""Reply tokens of each question."""
REPLY_KEPT = 2000
"""Characters of a malformed reply kept in the detail."""


@dataclass
class Spent:
    """Tokens and cost of the calls an episode's verdicts rest on (each distinct call once)."""

    usage: Mapping[str, tuple[int, int]]
    prices: tuple[float, float]
    prompts: dict[str, None] = field(default_factory=dict)

    def add(self, request: JudgeRequest) -> dict[str, Any]:
        """Count the call (once) and say what it alone cost."""
        self.prompts.setdefault(request.prompt)
        return self.of([request.prompt])

    def of(self, prompts: Sequence[str]) -> dict[str, Any]:
        given = sum(self.usage.get(p, (0, 0))[0] for p in prompts)
        taken = sum(self.usage.get(p, (0, 0))[1] for p in prompts)
        cost = (given * self.prices[0] + taken * self.prices[1]) / 1e6
        return {"prompt_tokens": given, "completion_tokens": taken, "cost_usd": round(cost, 8)}

    def total(self) -> dict[str, Any]:
        return {**self.of(list(self.prompts)), "calls": len(self.prompts)}


class KeyPoints(BuiltinEvaluator):
    """A multimodal judge: each hop's key points from the task, the steps that bear on them
    (scored for relevance), and a verdict per hop with reasons citing steps (LLM judge, cached)."""

    name = "keypoints"
    ARGS = {
        "judge_model": None,
        "per_hop": 3,
        "min_relevance": 3,
        "images": True,
        "price_in": 0.0,
        "price_out": 0.0,
    }
    CHOICES = {"per_hop": tuple(range(1, 11)), "min_relevance": tuple(range(0, 6)), "images": (True, False)}
    uses_judge: ClassVar[bool] = True
    requires_judge: ClassVar[bool] = True
    prompt_version: ClassVar[str] = ask.PROMPT_VERSION
    step_fields = ("step_index", "url", "action", "title", "screenshot", "tree_text")
    episode_fields = (
        "final_answer",
        "final_url",
        "final_title",
        "final_screenshot",
        "final_tree_text",
        "blob_packs",
    )

    def __init__(self, **args: Any) -> None:
        super().__init__(**args)
        for key in ("price_in", "price_out"):
            price = self.args[key]
            if isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 <= price <= 10_000:
                raise EvaluatorError(
                    f"evaluator keypoints: {key} is USD per million tokens (0 to 10000), not {price!r}"
                )

    def judge_requests(self, episode: EpisodeView) -> list[JudgeRequest]:
        return self._walk(episode)[0]

    def score(self, episode: EpisodeView) -> list[Score]:
        wanted, rows = self._walk(episode)
        if rows is None:
            raise EvaluatorError(
                f"no judge reply yet for {len(wanted)} question(s) of episode {episode.episode_id}"
            )
        return rows

    def _request(self, episode: EpisodeView, parts: list[tuple[str, str]], kind: str) -> JudgeRequest:
        packs = tuple(episode.episode.get("blob_packs") or ())
        return JudgeRequest(tuple(parts), ask.SYSTEM, BUDGETS[kind], packs)

    def _walk(self, episode: EpisodeView) -> tuple[list[JudgeRequest], list[Score] | None]:
        """The questions still to ask, or (all answered) the rows: key points, then relevance,
        then every hop's verdict, each stage asked once the one before is answered."""
        task, spent = (
            episode.task,
            Spent(episode.judge_usage, (self.args["price_in"], self.args["price_out"])),
        )
        points_request = self._request(episode, [("text", ask.key_points_question(task))], "key_points")
        reply = episode.judgments.get(points_request.prompt)
        if reply is None:
            return [points_request], None
        spent.add(points_request)
        try:
            points = ask.key_points(reply, task.n_hops)
        except Malformed as exc:
            return [], self._unclear(task.n_hops, f"key points: {exc}", reply, spent)
        pages = pages_of(episode)
        relevance_request = self._request(
            episode, [("text", ask.relevance_question(task, points, pages))], "relevance"
        )
        reply = episode.judgments.get(relevance_request.prompt)
        if reply is None:
            return [relevance_request], None
        spent.add(relevance_request)
        try:
            scores = ask.relevance(reply, task.n_hops, [p.number for p in pages])
        except Malformed as exc:
            return [], self._unclear(task.n_hops, f"relevance: {exc}", reply, spent, points)
        return self._verdicts(episode, points, pages, scores, spent)

    def _verdicts(
        self,
        episode: EpisodeView,
        points: list[list[str]],
        pages: list[Page],
        scores: dict[int, dict[int, int]],
        spent: Spent,
    ) -> tuple[list[JudgeRequest], list[Score] | None]:
        by_number = {p.number: p for p in pages}
        shown = [
            [by_number[n] for n in ask.chosen(scores[hop], self.args["per_hop"], self.args["min_relevance"])]
            for hop in range(len(points))
        ]
        requests = [
            self._request(
                episode,
                ask.verdict_question(
                    episode.task, hop, points[hop], episode.final_answer, shown[hop], self.args["images"]
                ),
                "verdict",
            )
            for hop in range(len(points))
        ]
        missing = [r for r in requests if r.prompt not in episode.judgments]
        if missing:
            return missing, None
        hops = [
            self._hop(hop, points[hop], shown[hop], scores[hop], episode.judgments[r.prompt], spent.add(r))
            for hop, r in enumerate(requests)
        ]
        return [], [*hops, _task_row(hops, spent)]

    def _hop(
        self,
        hop: int,
        points: list[str],
        shown: list[Page],
        scores: Mapping[int, int],
        reply: str,
        cost: dict[str, Any],
    ) -> Score:
        detail: dict[str, Any] = {
            "key_points": points,
            "evidence": [p.step_index for p in shown],
            "relevance": {str(n - 1): s for n, s in sorted(scores.items())},
            **cost,
        }
        try:
            verdict, reasons, cited = ask.verdict(reply, [p.number for p in shown])
        except Malformed as exc:
            return Score(
                "unclear", 0.0, "hop", hop, detail={**detail, "reason": str(exc), "reply": reply[:REPLY_KEPT]}
            )
        return Score(
            verdict,
            float(verdict == "pass"),
            "hop",
            hop,
            detail={**detail, "reasons": reasons, "cited_steps": [n - 1 for n in cited]},
        )

    def _unclear(
        self, n_hops: int, reason: str, reply: str, spent: Spent, points: list[list[str]] | None = None
    ) -> list[Score]:
        """Every hop unclear, for a reply the later questions needed and could not read."""
        hops = [
            Score(
                "unclear",
                0.0,
                "hop",
                hop,
                detail={"reason": reason, **({"key_points": points[hop]} if points else {})},
            )
            for hop in range(n_hops)
        ]
        return [*hops, _task_row(hops, spent, {"reason": reason, "reply": reply[:REPLY_KEPT]})]


def _task_row(hops: list[Score], spent: Spent, extra: Mapping[str, Any] | None = None) -> Score:
    passed = sum(h.verdict == "pass" for h in hops)
    value = passed / len(hops) if hops else 0.0
    return Score(
        combine([h.verdict for h in hops]),
        value,
        "task",
        detail={"hops_passed": passed, "hops": len(hops), **spent.total(), **(extra or {})},
    )


def pages_of(episode: EpisodeView) -> list[Page]:
    """The steps as the judge sees them, numbered from 1, then the final page when it is stored."""
    pages = [
        Page(
            number=s.step_index + 1,
            url=s.url,
            title=s.title or "",
            action=s.action or "(none: the output could not be parsed)",
            screenshot=s.screenshot,
            tree_text=s.tree_text,
        )
        for s in episode.steps
    ]
    row = episode.episode
    if row.get("final_url") is not None:
        after = pages[-1].number + 1 if pages else 1
        pages.append(
            Page(
                number=after,
                url=row["final_url"],
                title=row.get("final_title") or "",
                action="",
                screenshot=row.get("final_screenshot"),
                tree_text=row.get("final_tree_text"),
            )
        )
    return pages
