"""Evaluators by name: the built-ins, ones registered in code, and third-party ones.

A third-party package offers evaluators through the entry-point group ``mmina.evaluators``
(``name = "package.module:Factory"``); a factory is called with the ``--arg`` values as
keyword arguments and returns an :class:`~mmina.evaluators.base.Evaluator`. Entry points
are looked up only when a name is not built in (or when all names are listed), so a
broken third-party package never slows down or breaks the built-ins.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from mmina.errors import not_found
from mmina.evaluators.base import EpisodeView, Evaluator, EvaluatorError, Score
from mmina.evaluators.fuzzy import Fuzzy, TaskEval
from mmina.evaluators.hops import Hops
from mmina.evaluators.keypoints import KeyPoints
from mmina.evaluators.labelling import HUMAN
from mmina.evaluators.official import MminaOfficial
from mmina.evaluators.strings import ExactMatch, MustInclude, UrlMatch

ENTRY_POINT_GROUP = "mmina.evaluators"

EvaluatorFactory = Callable[..., Evaluator]

BUILTINS: dict[str, EvaluatorFactory] = {
    cls.name: cls
    for cls in (ExactMatch, MustInclude, UrlMatch, Fuzzy, Hops, MminaOfficial, TaskEval, KeyPoints)
}
_registered: dict[str, EvaluatorFactory] = {}

__all__ = [
    "BUILTINS",
    "ENTRY_POINT_GROUP",
    "EpisodeView",
    "Evaluator",
    "EvaluatorError",
    "Score",
    "factory",
    "get",
    "names",
    "parse_args",
    "register",
]


def register(name: str, factory: EvaluatorFactory) -> None:
    """Make ``factory`` available as ``name`` in this process (built-in names are reserved)."""
    if name in BUILTINS:
        raise EvaluatorError(f"evaluator name {name!r} is built in; choose another name")
    _registered[name] = factory


def _entry_points() -> list[EntryPoint]:
    return list(entry_points(group=ENTRY_POINT_GROUP))


def names() -> list[str]:
    """Every known evaluator name: built-ins, registered ones and installed entry points."""
    return sorted({*BUILTINS, *_registered, *(ep.name for ep in _entry_points())})


def factory(name: str) -> EvaluatorFactory:
    """The factory of ``name``; an unknown name lists the known ones."""
    if name in BUILTINS:
        return BUILTINS[name]
    if name in _registered:
        return _registered[name]
    found = [ep for ep in _entry_points() if ep.name == name]
    if not found and name == HUMAN:
        raise EvaluatorError(
            "human verdicts are people's labels, not computed: label episodes in `mmina serve` or "
            "with `mmina import labels FILE`, and compare a judge with them in `mmina agreement`"
        )
    if not found:
        raise EvaluatorError(
            not_found(
                "evaluator", name, None, names(), "mmina rescore --list", f"evaluators: {', '.join(names())}"
            )
        )
    try:
        loaded = found[0].load()
    except Exception as exc:  # a broken third-party package must not show a traceback
        raise EvaluatorError(
            f"cannot load evaluator {name} from {found[0].value}: {type(exc).__name__}: {exc}"
        ) from None
    _registered[name] = loaded
    return loaded


def get(name: str, **args: Any) -> Evaluator:
    """A ready evaluator; its rows are recorded under ``name`` with its version and ``args``."""
    make = factory(name)
    try:
        evaluator = make(**args)
    except EvaluatorError:
        raise
    except TypeError as exc:
        raise EvaluatorError(f"evaluator {name} does not take these arguments: {exc}") from None
    if not isinstance(evaluator, Evaluator):
        raise EvaluatorError(f"evaluator {name} lacks name, version, args or score(episode)")
    return evaluator


def parse_args(pairs: Iterable[str]) -> dict[str, Any]:
    """``key=value`` pairs; values are JSON when they parse (``3``, ``true``), else text."""
    args: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise EvaluatorError(f"evaluator argument {pair!r} is not KEY=VALUE")
        try:
            args[key.strip()] = json.loads(value)
        except ValueError:
            args[key.strip()] = value
    return args
