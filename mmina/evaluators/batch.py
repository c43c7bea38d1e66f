"""A batch of verdicts: what one evaluator said about some episodes, as ``scores`` rows.

Every row of a batch carries the batch id, the evaluator's name, version and arguments and
one time, so re-scoring can rebuild it. Reading rule: for each (episode, evaluator) the
latest batch (``scored_at``, then ``batch_id``) holds the current verdicts. The store is
append-only, so an *overwriting* batch is written like any other and lists, in each row's
``detail_json.supersedes``, the episode's earlier batches of that evaluator.

``mmina eval-steps``, the harness import and the recorder write their verdicts through
:func:`score_rows` (one episode's rows as dicts); ``mmina rescore`` collects a whole batch in
:class:`ScoreColumns` and writes it through :func:`score_table` (the same rows, built column
by column).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, NamedTuple

import msgspec
import pyarrow as pa

from mmina.evaluators.base import EpisodeView, EvaluatorError, Score, ScoreRow, args_json
from mmina.store.schema import SCORES
from mmina.store.store import utcnow


def new_batch_id(evaluator: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", evaluator).strip("-")[:32] or "evaluator"
    return f"{utcnow():%Y%m%d-%H%M%S}-{slug}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, kw_only=True)
class ScoreBatch:
    """One batch: who scored (evaluator, version, arguments), when, and what it supersedes."""

    batch_id: str
    evaluator: str
    version: str
    args: Mapping[str, Any]
    scored_at: datetime
    supersedes: Mapping[str, Sequence[str]] | None = field(default=None, compare=False)
    """For an overwriting batch: each episode's earlier batch ids of this evaluator (None: appending)."""

    @classmethod
    def new(
        cls,
        evaluator: str,
        version: object,
        args: Mapping[str, Any],
        supersedes: Mapping[str, Sequence[str]] | None = None,
    ) -> ScoreBatch:
        """A batch starting now, with a fresh id."""
        return cls(
            batch_id=new_batch_id(evaluator),
            evaluator=evaluator,
            version=str(version),
            args=dict(args),
            scored_at=utcnow(),
            supersedes=supersedes,
        )

    @cached_property
    def args_json(self) -> str:
        """The arguments as stored: sorted JSON."""
        return args_json(self.args)

    def extra(self, episode_id: str) -> dict[str, Any]:
        """What an overwriting batch adds to the detail of each of the episode's rows."""
        return (
            {"supersedes": sorted(set(self.supersedes.get(episode_id, ())))}
            if self.supersedes is not None
            else {}
        )


def stored_hop(hop_index: int | None) -> int | None:
    """An evaluator's hop (``Score.hop_index``, 0-based: an index into ``task.hops``) as the store
    and every table number hops: 1-based (``scores.hop``)."""
    return None if hop_index is None else hop_index + 1


def score_rows(view: EpisodeView, scores: Sequence[Score], batch: ScoreBatch) -> list[dict[str, Any]]:
    """The ``scores`` rows of one episode's verdicts in ``batch``."""
    return episode_score_rows(view.episode_id, view.task.task_id, scores, batch)


def episode_score_rows(
    episode_id: str, task_id: str, scores: Sequence[Score], batch: ScoreBatch
) -> list[dict[str, Any]]:
    """:func:`score_rows` by the episode's and task's ids (for verdicts given without a view,
    such as a person's labels)."""
    extra = batch.extra(episode_id)
    return [
        {
            "episode_id": episode_id,
            "task_id": task_id,
            "evaluator": batch.evaluator,
            "evaluator_version": batch.version,
            "args_json": batch.args_json,
            "level": s.level,
            "hop": stored_hop(s.hop_index),
            "step_index": s.step_index,
            "verdict": s.verdict,
            "value": float(s.value),
            "detail_json": stored_detail(s.detail, extra),
            "batch_id": batch.batch_id,
            "scored_at": batch.scored_at,
        }
        for s in scores
    ]


class Outcome(NamedTuple):
    """One scored episode in short: its task-level verdict and value, hop rows passed and in
    all, and what its verdicts cost (the task row's ``detail.cost_usd``, for an evaluator that
    pays a judge; None otherwise)."""

    verdict: str
    value: float
    hops_passed: int
    hops_total: int
    cost_usd: float | None = None


class ScoreColumns:
    """A batch's verdict rows, each tagged with the position of its episode (in the
    :class:`~mmina.evaluators.loading.EpisodeBatch`); episodes come in position order. Also
    each scored episode's :class:`Outcome` and rows (start, end), and the episodes that could
    not be scored, with the reason."""

    def __init__(self) -> None:
        self.scores: list[ScoreRow] = []
        self.position: list[int] = []
        self.outcomes: dict[int, Outcome] = {}
        self.rows: dict[int, tuple[int, int]] = {}
        self.failures: dict[int, str] = {}
        self.judge: dict[int, str] = {}
        """Each judged episode's ``judge_json`` (the judge's configuration its rows carry)."""
        self._last = -1

    def add(self, position: int, rows: Sequence[ScoreRow], judge: str | None = None) -> None:
        """The episode's rows, in order; without a task-level row it is unscored instead.
        ``judge``: the ``judge_json`` of its rows, for an evaluator that asked a judge."""
        task, passed, hops = None, 0, 0
        for row in rows:
            if row.level == "hop":
                hops, passed = hops + 1, passed + (row.verdict == "pass")
            elif task is None and row.level == "task":
                task = row
        if task is None:
            self.fail(position, "the evaluator returned no task-level score")
            return
        self._next(position)
        cost = task.detail.get("cost_usd") if isinstance(task.detail, Mapping) else None
        self.outcomes[position] = Outcome(
            task.verdict, task.value, passed, hops, float(cost) if isinstance(cost, (int, float)) else None
        )
        self.rows[position] = (len(self.scores), len(self.scores) + len(rows))
        if judge is not None:
            self.judge[position] = judge
        self.scores += rows
        self.position += [position] * len(rows)

    def fail(self, position: int, reason: str) -> None:
        self._next(position)
        self.failures[position] = reason

    def _next(self, position: int) -> None:
        if position <= self._last:
            raise EvaluatorError(
                f"episode {position} given after episode {self._last}: add episodes in batch order"
            )
        self._last = position


def score_table(
    columns: ScoreColumns, episode_ids: Sequence[str], task_ids: Sequence[str], batch: ScoreBatch
) -> pa.Table:
    """The ``scores`` rows of ``columns`` in ``batch`` (what :func:`score_rows` gives for
    each episode, in the same order); ``episode_ids`` and ``task_ids`` by episode position."""
    positions = pa.array(columns.position, pa.int64())
    verdict, value, level, hop_index, step_index, detail = (
        zip(*columns.scores) if columns.scores else [()] * 6
    )
    values: dict[str, Any] = {
        "episode_id": pa.array(episode_ids, pa.string()).take(positions),
        "task_id": pa.array(task_ids, pa.string()).take(positions),
        "level": level,
        "hop": [stored_hop(h) for h in hop_index],
        "step_index": step_index,
        "verdict": verdict,
        "value": list(map(float, value)),
        "detail_json": _details(
            detail, [episode_ids[p] for p in columns.position] if batch.supersedes is not None else (), batch
        ),
        "judge_json": [columns.judge.get(p) for p in columns.position]
        if columns.judge
        else pa.nulls(len(positions), pa.string()),
    }
    constants = {
        "evaluator": batch.evaluator,
        "evaluator_version": batch.version,
        "args_json": batch.args_json,
        "batch_id": batch.batch_id,
        "scored_at": batch.scored_at,
    }
    arrays = [
        pa.array(values[f.name], f.type)
        if f.name in values
        else pa.repeat(pa.scalar(constants[f.name], f.type), len(positions))
        for f in SCORES.schema
    ]
    return pa.Table.from_arrays(arrays, schema=SCORES.schema)


def _details(
    details: Sequence[Mapping[str, Any]], episode_ids: Sequence[str], batch: ScoreBatch
) -> list[str]:
    """Each row's ``detail_json``; ``episode_ids`` (of each row) are needed only by an overwriting batch."""
    if batch.supersedes is None:
        return [detail_json(d) for d in details]
    return [stored_detail(d, batch.extra(e)) for d, e in zip(details, episode_ids)]


_DETAIL = msgspec.json.Encoder(order="sorted", enc_hook=str)


def detail_json(detail: Mapping[str, Any]) -> str:
    """A score's detail as compact JSON with sorted keys (values JSON cannot hold become text)."""
    return _DETAIL.encode(detail).decode()


def stored_detail(detail: Mapping[str, Any], extra: Mapping[str, Any]) -> str:
    """The ``detail_json`` of a row: its detail plus what its batch adds (see :meth:`ScoreBatch.extra`)."""
    return detail_json({**detail, **extra} if extra else detail)
