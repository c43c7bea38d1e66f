"""The deterministic built-ins' base: an evaluator decided by an episode's :class:`Trace` alone,
scoring one episode (``score``) or a whole rescoring column by column (``score_batch``).

It sits above ``base.py``, ``batch.py`` and ``loading.py``: a batch is what those two build, so
the protocol of ``base.py`` need not know them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmina.evaluators.base import BuiltinEvaluator, EpisodeView, Score, ScoreRow, Trace, failure

if TYPE_CHECKING:
    from mmina.evaluators.batch import ScoreColumns
    from mmina.evaluators.loading import EpisodeBatch


class TraceEvaluator(BuiltinEvaluator):
    """A built-in decided by an episode's :class:`Trace` alone. ``rows`` is its definition;
    ``score`` (one stored or live episode) and ``score_batch`` (a whole rescoring) both call it."""

    def rows(self, trace: Trace) -> list[ScoreRow]:
        raise NotImplementedError

    def score(self, episode: EpisodeView) -> list[Score]:
        return [Score(*row) for row in self.rows(Trace.of(episode))]

    def score_batch(self, batch: EpisodeBatch, out: ScoreColumns) -> None:
        for position in range(len(batch)):
            try:
                rows = self.rows(batch.trace(position))
            except Exception as exc:  # as in rescoring one episode: that episode is unscored
                out.fail(position, failure(exc))
                continue
            out.add(position, rows)
