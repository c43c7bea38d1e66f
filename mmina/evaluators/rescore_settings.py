"""What a rescore is asked to do: the evaluator and its arguments, which runs and episodes, the
LLM judge, the batch action. Plain records the command line fills in (and shows the defaults
of) without loading Arrow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mmina.models.model_client import API_KEY_ENV, DEFAULT_CALL_S

ACTIONS = ("append", "overwrite")
DEFAULT_CONCURRENCY = 4
"""Judge requests in flight at once (``--judge-concurrency``)."""
DEFAULT_MAX_RETRIES = 5
"""Retries of one judge call within its deadline."""


@dataclass(frozen=True)
class JudgeSettings:
    """Where and how to ask: model, endpoint and the variable holding its key, the sampling
    parameters sent (None: not sent), parallel requests, each call's retries and deadline, and
    what its tokens cost."""

    model: str | None = None
    base_url: str | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    max_retries: int = DEFAULT_MAX_RETRIES
    deadline_s: float = DEFAULT_CALL_S
    api_key_env: str = API_KEY_ENV
    price_in: float | None = None
    """USD per million prompt tokens, for evaluators that record their cost (None: not given)."""
    price_out: float | None = None
    temperature: float | None = 0.0
    top_p: float | None = None
    seed: int | None = None


@dataclass(frozen=True)
class RescoreConfig:
    evaluator: str
    args: Mapping[str, Any] = field(default_factory=dict)
    runs: tuple[str, ...] = ()
    episodes: tuple[str, ...] = ()
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    action: str = "append"
