"""The LLM judge of the ``fuzzy`` evaluator: the paper's prompt, a strict parser, a cache.

Every call goes through the client of :mod:`mmina.model_client` to any OpenAI-compatible
endpoint (``--base-url``, else ``OPENAI_BASE_URL``; ``OPENAI_API_KEY``), which retries 429
and 5xx answers with backoff itself (``max_retries``) and ends each call at its deadline
(``deadline_s``, retries included). Replies are cached in the store's
``judge_cache`` table under the SHA-256 of ``[model, prompt]`` (as JSON), so scoring the
same answers again sends no request at all and gives the same verdicts. The ``openai``
module is imported only when a request has to be sent.
"""
from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from mmina.evaluators.base import EvaluatorError
from mmina.evaluators.rescore_settings import JudgeSettings
from mmina.model_client import Deadlines, ModelClient, ModelError, require_api_key
from mmina.store import Store
from mmina.store.store import utcnow

PROMPT = 'Given the statement "{pred}", would it be correct to infer "{reference}"? Yes or No'
MAX_TOKENS = 16
_STRIP = string.punctuation + "“”‘’«»"

Progress = Callable[[int, int], None]


def judge_prompt(pred: str, reference: str) -> str:
    """The paper's question, with the agent's answer and one reference filled in verbatim."""
    return PROMPT.format(pred=pred, reference=reference)


def prompt_key(model: str, prompt: str) -> str:
    """The cache key: SHA-256 of the JSON list ``[model, prompt]`` (unambiguous, model-specific)."""
    return hashlib.sha256(json.dumps([model, prompt], ensure_ascii=False).encode()).hexdigest()


def parse_verdict(reply: str | None) -> str:
    """``pass`` when the first word is yes, ``fail`` when it is no (any case, punctuation
    around it stripped); anything else is ``unclear`` — a reply is never guessed."""
    words = (reply or "").split()
    first = words[0].strip(_STRIP).lower() if words else ""
    return {"yes": "pass", "no": "fail"}.get(first, "unclear")


@dataclass
class JudgeOutcome:
    """Replies by prompt (cached and new), the new cache rows, and the prompts that failed."""

    replies: dict[str, str] = field(default_factory=dict)
    cached: int = 0
    new_rows: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def requested(self) -> int:
        """Prompts that needed the endpoint (answered or failed)."""
        return len(self.new_rows) + len(self.failures)


def read_cache(store: Store, model: str) -> dict[str, str]:
    """Cached replies of ``model`` by cache key (the first stored reply of a key wins)."""
    table = store.read("judge_cache", columns=["prompt_sha256", "model", "response"])
    cache: dict[str, str] = {}
    for key, row_model, reply in zip(*(table.column(c).to_pylist() for c in ("prompt_sha256", "model", "response"))):
        if row_model == model and reply is not None:
            cache.setdefault(key, reply)
    return cache


def resolve(store: Store, prompts: Iterable[str], settings: JudgeSettings,
            progress: Progress | None = None) -> JudgeOutcome:
    """Every prompt's reply: from the cache, else from the endpoint (concurrently).

    Nothing is written here; the caller appends ``new_rows`` to ``judge_cache``.
    """
    if not settings.model:
        raise EvaluatorError("this evaluator asks an LLM judge: pass --judge-model NAME")
    model, outcome = settings.model, JudgeOutcome()
    cache = read_cache(store, model)
    missing = []
    for prompt in dict.fromkeys(prompts):
        key = prompt_key(model, prompt)
        if key in cache:
            outcome.replies[prompt] = cache[key]
            outcome.cached += 1
        else:
            missing.append(prompt)
    if missing:
        _ask_all(missing, settings, outcome, progress)
    return outcome


def _ask_all(prompts: list[str], settings: JudgeSettings, outcome: JudgeOutcome, progress: Progress | None) -> None:
    require_api_key("asking the judge", EvaluatorError, settings.api_key_env)
    client = ModelClient(settings.base_url, Deadlines(settings.deadline_s, settings.max_retries), "judge endpoint",
                         settings.api_key_env)
    with ThreadPoolExecutor(max_workers=max(1, settings.concurrency)) as pool:
        futures = {pool.submit(ask, client, settings.model or "", p): p for p in prompts}
        for done, future in enumerate(as_completed(futures), start=1):
            prompt = futures[future]
            try:
                row = future.result()
            except ModelError as exc:
                outcome.failures[prompt] = str(exc)
            else:
                outcome.new_rows.append(row)
                outcome.replies[prompt] = row["response"]
            if progress:
                progress(done, len(prompts))


def ask(client: ModelClient, model: str, prompt: str) -> dict[str, Any]:
    """One judge call, as a ``judge_cache`` row."""
    reply = client.complete(model=model, messages=[{"role": "user", "content": prompt}], temperature=0,
                            max_tokens=MAX_TOKENS)
    return {"prompt_sha256": prompt_key(model, prompt), "model": model, "prompt": prompt, "response": reply.text,
            "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens, "created_at": utcnow()}
