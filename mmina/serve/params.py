"""Request parameters, checked: a bad value is a clear error for the page, never a crash.

The server answers :class:`BadRequest` with 400 and :class:`NotFound` with 404, each as
``{"error": "..."}`` (see ``app.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from mmina.analysis.failures import MODES
from mmina.errors import MminaError
from mmina.tasks.task import BUCKETS

MAX_TEXT = 500
"""Longest text a filter accepts (a URL of that length is still well under any limit)."""
MAX_PAGE = 500
VERDICTS = ("pass", "fail", "unclear", "n/a", "blocked", "unscored")
SORTABLE = (
    "run_id",
    "task_id",
    "episode_id",
    "attempt",
    "status",
    "stop_reason",
    "n_steps",
    "n_hops",
    "bucket",
    "verdict",
    "hops_passed",
    "first_failure",
    "started_at",
    "duration_ms",
    "cost_usd",
    "tokens",
)
FILTERS = (
    "bucket",
    "n_hops",
    "first_failure",
    "mode",
    "site",
    "verdict",
    "status",
    "error",
    "answer",
    "task",
)
"""Filters of the episodes table, in the order the page shows them."""
_FIRST_FAILURE = re.compile(r"^(passed|answer|[1-9][0-9]{0,2})$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


class BadRequest(MminaError):
    """A parameter the server cannot use: the message says which and why."""


class NotFound(MminaError):
    """Something the request names does not exist in the store (an episode, a run, a step)."""


Params = Mapping[str, Sequence[str]]
"""Query parameters as lists of values (each name may repeat)."""


def grouped(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """A query string's (name, value) pairs as lists of values by name (``run=a&run=b``)."""
    found: dict[str, list[str]] = {}
    for name, value in pairs:
        found.setdefault(name, []).append(value)
    return found


def one(params: Params, name: str, default: str | None = None) -> str | None:
    """The single value of ``name`` (None or ``default`` when absent or empty); text is bounded."""
    values = [v for v in params.get(name, ()) if v != ""]
    if len(values) > 1:
        raise BadRequest(f"parameter {name} is given {len(values)} times; give it once")
    if not values:
        return default
    if len(values[0]) > MAX_TEXT:
        raise BadRequest(f"parameter {name} is longer than {MAX_TEXT} characters")
    return values[0]


def many(params: Params, name: str) -> tuple[str, ...]:
    """Every value of a repeatable parameter, in order, repeats dropped."""
    values = [v for v in params.get(name, ()) if v != ""]
    if any(len(v) > MAX_TEXT for v in values):
        raise BadRequest(f"a value of parameter {name} is longer than {MAX_TEXT} characters")
    return tuple(dict.fromkeys(values))


def integer(params: Params, name: str, default: int, lowest: int, highest: int) -> int:
    """An integer parameter within [lowest, highest]."""
    text = one(params, name)
    if text is None:
        return default
    if not re.fullmatch(r"-?[0-9]{1,12}", text.strip()):
        raise BadRequest(f"parameter {name} must be a whole number, not {text!r}")
    value = int(text)
    if not lowest <= value <= highest:
        raise BadRequest(f"parameter {name} must be between {lowest} and {highest}, not {value}")
    return value


def choice(params: Params, name: str, allowed: Sequence[str], default: str | None = None) -> str | None:
    """A parameter that must be one of ``allowed``."""
    value = one(params, name, default)
    if value is not None and value not in allowed:
        raise BadRequest(f"parameter {name} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def check_known(params: Params, known: Sequence[str]) -> None:
    """Refuse parameters the endpoint does not know: a misspelt filter must not pass silently."""
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise BadRequest(f"unknown parameter {unknown[0]} (this endpoint takes {', '.join(known)})")


def digest(value: str) -> str:
    """A blob's SHA-256 as 64 lower-case hex digits."""
    if not _DIGEST.match(value):
        raise BadRequest(f"{value[:80]!r} is not a blob hash (64 hex digits)")
    return value


@dataclass(frozen=True)
class EpisodeQuery:
    """One page of the episodes table: which runs, which filters, which order."""

    runs: tuple[str, ...] = ()
    evaluator: str = "hops"
    filters: dict[str, str | int] = field(default_factory=dict)
    sort: str = "run_id"
    descending: bool = False
    offset: int = 0
    limit: int = 50


QUERY_PARAMS = ("run", "evaluator", *FILTERS, "sort", "order", "offset", "limit")


def episode_query(params: Params, default_evaluator: str) -> EpisodeQuery:
    """The episodes-table query of a request, every value checked."""
    check_known(params, QUERY_PARAMS)
    return EpisodeQuery(
        runs=many(params, "run"),
        evaluator=one(params, "evaluator", default_evaluator) or "",
        filters=_filters(params),
        sort=choice(params, "sort", SORTABLE, "run_id") or "run_id",
        descending=choice(params, "order", ("asc", "desc"), "asc") == "desc",
        offset=integer(params, "offset", 0, 0, 10**9),
        limit=integer(params, "limit", 50, 1, MAX_PAGE),
    )


def _filters(params: Params) -> dict[str, str | int]:
    found: dict[str, str | int | None] = {
        "bucket": choice(params, "bucket", BUCKETS),
        "n_hops": integer(params, "n_hops", 0, 0, 1000) or None,
        "first_failure": _first_failure(one(params, "first_failure")),
        "mode": choice(params, "mode", MODES),
        "verdict": choice(params, "verdict", VERDICTS),
        **{name: one(params, name) for name in ("site", "status", "error", "answer", "task")},
    }
    return {name: value for name, value in found.items() if value is not None}


def _first_failure(value: str | None) -> str | None:
    if value is not None and not _FIRST_FAILURE.match(value):
        raise BadRequest(f"parameter first_failure must be passed, answer or a hop number, not {value!r}")
    return value
