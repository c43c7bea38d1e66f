"""A batch of verdicts: what one evaluator said about some episodes, as ``scores`` rows.

Every row of a batch carries the batch id, the evaluator's name, version and arguments and
one time, so re-scoring can rebuild it. Reading rule: for each (episode, evaluator) the
latest batch (``scored_at``, then ``batch_id``) holds the current verdicts. The store is
append-only, so an *overwriting* batch is written like any other and lists, in each row's
``detail_json.supersedes``, the episode's earlier batches of that evaluator.

``mmina rescore``, ``mmina eval-steps`` and the harness import all write their verdicts through
:func:`score_rows`.
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import msgspec

from mmina.evaluators.base import EpisodeView, Score, args_json
from mmina.store.store import utcnow


def new_batch_id(evaluator: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", evaluator).strip("-")[:32] or "evaluator"
    return f"{utcnow():%Y%m%d-%H%M%S}-{slug}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
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
    def new(cls, evaluator: str, version: object, args: Mapping[str, Any],
            supersedes: Mapping[str, Sequence[str]] | None = None) -> "ScoreBatch":
        """A batch starting now, with a fresh id."""
        return cls(new_batch_id(evaluator), evaluator, str(version), dict(args), utcnow(), supersedes)

    @cached_property
    def args_json(self) -> str:
        """The arguments as stored: sorted JSON."""
        return args_json(self.args)


def score_rows(view: EpisodeView, scores: Sequence[Score], batch: ScoreBatch) -> list[dict[str, Any]]:
    """The ``scores`` rows of one episode's verdicts in ``batch``."""
    extra = {"supersedes": sorted(set(batch.supersedes.get(view.episode_id, ())))} \
        if batch.supersedes is not None else {}
    return [{"episode_id": view.episode_id, "task_id": view.task.task_id, "evaluator": batch.evaluator,
             "evaluator_version": batch.version, "args_json": batch.args_json, "level": s.level,
             "hop_index": s.hop_index, "step_index": s.step_index, "verdict": s.verdict, "value": float(s.value),
             "detail_json": detail_json({**s.detail, **extra} if extra else s.detail), "batch_id": batch.batch_id,
             "scored_at": batch.scored_at}
            for s in scores]


_DETAIL = msgspec.json.Encoder(order="sorted", enc_hook=str)


def detail_json(detail: Mapping[str, Any]) -> str:
    """A score's detail as compact JSON with sorted keys (values JSON cannot hold become text)."""
    return _DETAIL.encode(detail).decode()
