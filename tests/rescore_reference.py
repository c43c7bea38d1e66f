"""Rescoring done the slow way, episode by episode, to check ``rescore`` against it.

Independent of :mod:`mmina.evaluators.loading` and of the batch path: the store's plain rows
(tasks parsed row by row, episodes in the documented order, steps sorted by index, every
column read), each episode scored by ``evaluator.score(view)`` — the per-episode definition —
and turned into ``scores`` rows by ``score_rows``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from mmina.evaluators import EpisodeView, StepView, get
from mmina.evaluators.batch import ScoreBatch, score_rows
from mmina.evaluators.rescore import RescoreResult
from mmina.store import Store
from mmina.tasks.task import task_from_row

DETERMINISTIC = (
    ("exact_match", {}),
    ("must_include", {}),
    ("url_match", {}),
    ("url_match", {"where": "any"}),
    ("hops", {}),
    ("mmina_official", {"domain": "normal"}),
    ("mmina_official", {"domain": "multipro"}),
    ("mmina_official", {"domain": "shopping"}),
    ("task", {}),
)
"""Evaluators (with arguments) that need no judge on tasks without ``fuzzy_match`` references."""


def views(store: Store, runs: list[str], only: set[str] | None = None) -> list[EpisodeView]:
    """The episodes of ``runs`` (of ``only``), by run as given, start time and id, with every field."""
    tasks = {(r["run_id"], r["task_id"]): task_from_row(r) for r in store.read("tasks").to_pylist()}
    steps: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in store.read("steps").to_pylist():
        steps[row["episode_id"]].append(row)
    episodes = [
        e
        for e in store.read("episodes").to_pylist()
        if e["run_id"] in runs and (not only or e["episode_id"] in only)
    ]
    episodes.sort(key=lambda e: (runs.index(e["run_id"]), e["started_at"], e["episode_id"]))
    return [
        EpisodeView(
            e["run_id"],
            e["episode_id"],
            tasks[(e["run_id"], e["task_id"])],
            e,
            tuple(
                StepView(*(s[f] for f in StepView._fields))._replace(url=s["url"] or "")
                for s in sorted(steps[e["episode_id"]], key=lambda s: s["step_index"])
            ),
        )
        for e in episodes
    ]


def check(
    store: Store,
    result: RescoreResult,
    runs: list[str] | None = None,
    only: set[str] | None = None,
    supersedes: dict[str, list[str]] | None = None,
) -> None:
    """``result`` (and the rows it wrote) are what scoring each episode on its own gives."""
    evaluator = get(result.evaluator, **result.args)
    stored = [r for r in store.read("scores").to_pylist() if r["batch_id"] == result.batch_id]
    scored_at = stored[0]["scored_at"] if stored else None
    batch = ScoreBatch(
        batch_id=result.batch_id,
        evaluator=result.evaluator,
        version=result.version,
        args=result.args,
        scored_at=scored_at,
        supersedes=supersedes,
    )
    replies = {r["prompt"]: r["response"] for r in store.read("judge_cache").to_pylist()}
    expected_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    expected_scored, expected_unscored = [], []
    for view in views(store, runs or store.run_ids(), only):
        prompts = evaluator.judge_prompts(view) if hasattr(evaluator, "judge_prompts") else []
        view = replace(view, judgments={p: replies[p] for p in prompts})
        try:
            scores = evaluator.score(view)
        except Exception as exc:
            expected_unscored.append(
                (view.run_id, view.episode_id, f"evaluator failed: {type(exc).__name__}: {exc}")
            )
            continue
        expected_rows[view.run_id] += score_rows(view, scores, batch)
        task = next(s for s in scores if s.level == "task")
        hops = [s for s in scores if s.level == "hop"]
        expected_scored.append(
            (
                view.run_id,
                view.episode_id,
                view.task.task_id,
                view.n_hops,
                task.verdict,
                task.value,
                sum(h.verdict == "pass" for h in hops),
                len(hops),
            )
        )
    blocked = {run for run, _, _ in expected_unscored}
    assert [(u.run_id, u.episode_id, u.reason) for u in result.unscored] == expected_unscored
    assert [
        (s.run_id, s.episode_id, s.task_id, s.n_hops, s.verdict, s.value, s.hops_passed, s.hops_total)
        for s in result.scored
    ] == expected_scored
    assert [s.written for s in result.scored] == [s[0] not in blocked for s in expected_scored]
    written: dict[str, list[dict[str, Any]]] = defaultdict(list)
    judged = hasattr(evaluator, "judge_prompts") or hasattr(evaluator, "judge_requests")
    for row in stored:
        judge = row.pop("judge_json")
        assert (judge is not None) == (judged and bool(evaluator.args.get("judge_model"))), (
            "a judge's verdict rows carry its configuration, others none"
        )
        written[row.pop("run_id")].append(row)
    assert dict(written) == {run: rows for run, rows in expected_rows.items() if run not in blocked}
