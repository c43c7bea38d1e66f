"""Evaluators: pure functions of stored episodes, by name (``mmina rescore --evaluator NAME``).

See :mod:`mmina.evaluators.registry` for names and third-party evaluators,
:mod:`mmina.evaluators.base` for the protocol, and :mod:`mmina.evaluators.rescore` for
scoring a store. The names below are imported on first use (:mod:`mmina.lazy`).
"""

from typing import TYPE_CHECKING

from mmina.lazy import lazy_names

if TYPE_CHECKING:
    from mmina.evaluators.base import EpisodeView, Evaluator, EvaluatorError, Score, StepView
    from mmina.evaluators.registry import ENTRY_POINT_GROUP, get, names, register

__all__ = [
    "ENTRY_POINT_GROUP",
    "EpisodeView",
    "Evaluator",
    "EvaluatorError",
    "Score",
    "StepView",
    "get",
    "names",
    "register",
]
__getattr__ = lazy_names(
    __name__,
    {
        **dict.fromkeys(("EpisodeView", "Evaluator", "EvaluatorError", "Score", "StepView"), "base"),
        **dict.fromkeys(("ENTRY_POINT_GROUP", "get", "names", "register"), "registry"),
    },
)
