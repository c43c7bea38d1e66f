"""Evaluators: pure functions of stored episodes, by name (``mmina rescore --evaluator NAME``).

See :mod:`mmina.evaluators.registry` for names and third-party evaluators,
:mod:`mmina.evaluators.base` for the protocol, and :mod:`mmina.evaluators.rescore` for
scoring a store.
"""
from mmina.evaluators.base import EpisodeView, Evaluator, EvaluatorError, Score, StepView
from mmina.evaluators.registry import ENTRY_POINT_GROUP, get, names, register

__all__ = ["ENTRY_POINT_GROUP", "EpisodeView", "Evaluator", "EvaluatorError", "Score", "StepView", "get", "names",
           "register"]
