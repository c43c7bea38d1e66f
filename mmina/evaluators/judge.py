"""The LLM judge of the ``fuzzy`` evaluator: the paper's prompt, a strict parser, a cache.

Every call goes through the client of :mod:`mmina.model_client` to any OpenAI-compatible
endpoint (``--base-url``, else ``OPENAI_BASE_URL``; ``OPENAI_API_KEY``), which retries 429
and 5xx answers with backoff itself (``max_retries``) and ends each call at its deadline
(``deadline_s``, retries included). Replies are cached in the store's
``judge_cache`` table under the SHA-256 of ``[model, prompt]`` (as JSON), so scoring the
same answers again sends no request at all and gives the same verdicts. The ``openai``
module is imported only when a request has to be sent.

A judge that asks more than the paper's one question (``keypoints``) sends a
:class:`JudgeRequest`: a user message of text and screenshots (blob hashes), a system prompt
and a token budget. Its cached ``prompt`` is the request as canonical JSON, images by hash,
so the same request is the same cache key; the screenshots are read from the store only when
the request has to be sent.
"""
from __future__ import annotations

import base64
import hashlib
import json
import string
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, NamedTuple

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


Usage = tuple[int, int]
"""The tokens a reply cost: (prompt, completion)."""
IMAGE_TYPES = {b"\xff\xd8\xff": "image/jpeg", b"\x89PNG": "image/png", b"GIF8": "image/gif", b"RIFF": "image/webp"}


class JudgeRequest(NamedTuple):
    """One judge call as data: the user message's parts in order — ``("text", words)`` or
    ``("image", blob sha256)`` — a system prompt, and the reply's token budget. ``packs``
    (where the episode's blobs are) only speeds up reading the images; it is no part of the
    question."""

    parts: tuple[tuple[str, str], ...]
    system: str = ""
    max_tokens: int = MAX_TOKENS
    packs: tuple[str, ...] = ()

    @classmethod
    def plain(cls, prompt: str) -> "JudgeRequest":
        """The paper's kind of question: one text, no system prompt, a yes or no."""
        return cls((("text", prompt),))

    @property
    def prompt(self) -> str:
        """What is cached and hashed: a plain question's text itself (so the fuzzy judge's cache
        keys are as they always were), else the request as canonical JSON, images by hash."""
        if self.parts and len(self.parts) == 1 and self.parts[0][0] == "text" and not self.system \
                and self.max_tokens == MAX_TOKENS:
            return self.parts[0][1]
        return json.dumps({"system": self.system, "parts": [list(p) for p in self.parts], "max_tokens": self.max_tokens},
                          ensure_ascii=False, sort_keys=True, separators=(",", ":"))

    @property
    def images(self) -> list[str]:
        return [value for kind, value in self.parts if kind == "image"]

    def messages(self, images: Mapping[str, bytes]) -> list[dict[str, Any]]:
        """The chat messages to send, each image inlined as a data URL."""
        content = [{"type": "text", "text": value} if kind == "text" else _image_part(value, images)
                   for kind, value in self.parts]
        system = [{"role": "system", "content": self.system}] if self.system else []
        if len(content) == 1 and content[0]["type"] == "text":
            return [*system, {"role": "user", "content": content[0]["text"]}]
        return [*system, {"role": "user", "content": content}]


def _image_part(digest: str, images: Mapping[str, bytes]) -> dict[str, Any]:
    data = images.get(digest)
    if data is None:
        raise ModelError(f"screenshot {digest[:12]}… is missing from the store")
    media = next((kind for magic, kind in IMAGE_TYPES.items() if data.startswith(magic)), "image/jpeg")
    return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{base64.b64encode(data).decode()}"}}


@dataclass
class JudgeOutcome:
    """Replies by prompt (cached and new) with the tokens each cost, the new cache rows, and
    the prompts that failed."""

    replies: dict[str, str] = field(default_factory=dict)
    cached: int = 0
    new_rows: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)

    @property
    def requested(self) -> int:
        """Prompts that needed the endpoint (answered or failed)."""
        return len(self.new_rows) + len(self.failures)


def read_cache(store: Store, model: str) -> dict[str, tuple[str, Usage]]:
    """Cached replies of ``model`` by cache key, with the tokens each cost (the first stored
    reply of a key wins)."""
    columns = ("prompt_sha256", "model", "response", "prompt_tokens", "completion_tokens")
    table = store.read("judge_cache", columns=list(columns))
    cache: dict[str, tuple[str, Usage]] = {}
    for key, row_model, reply, given, taken in zip(*(table.column(c).to_pylist() for c in columns)):
        if row_model == model and reply is not None:
            cache.setdefault(key, (reply, (given or 0, taken or 0)))
    return cache


def resolve(store: Store, prompts: Iterable[str | JudgeRequest], settings: JudgeSettings,
            progress: Progress | None = None) -> JudgeOutcome:
    """Every request's reply (by its ``prompt``; a text is a plain question): from the cache,
    else from the endpoint (concurrently).

    Nothing is written here; the caller appends ``new_rows`` to ``judge_cache``.
    """
    if not settings.model:
        raise EvaluatorError("this evaluator asks an LLM judge: pass --judge-model NAME")
    model, outcome = settings.model, JudgeOutcome()
    cache = read_cache(store, model)
    requests = {r.prompt: r for r in (JudgeRequest.plain(p) if isinstance(p, str) else p for p in prompts)}
    missing = []
    for prompt, request in requests.items():
        found = cache.get(prompt_key(model, prompt))
        if found is not None:
            outcome.replies[prompt], outcome.usage[prompt] = found
            outcome.cached += 1
        else:
            missing.append(request)
    if missing:
        _ask_all(store, missing, settings, outcome, progress)
    return outcome


def _ask_all(store: Store, requests: list[JudgeRequest], settings: JudgeSettings, outcome: JudgeOutcome,
             progress: Progress | None) -> None:
    require_api_key("asking the judge", EvaluatorError, settings.api_key_env)
    client = ModelClient(settings.base_url, Deadlines(settings.deadline_s, settings.max_retries), "judge endpoint",
                         settings.api_key_env)
    images = read_images(store, requests)
    with ThreadPoolExecutor(max_workers=max(1, settings.concurrency)) as pool:
        futures = {pool.submit(ask, client, settings.model or "", r, images): r.prompt for r in requests}
        for done, future in enumerate(as_completed(futures), start=1):
            prompt = futures[future]
            try:
                row = future.result()
            except ModelError as exc:
                outcome.failures[prompt] = str(exc)
            else:
                outcome.new_rows.append(row)
                outcome.replies[prompt] = row["response"]
                outcome.usage[prompt] = (row["prompt_tokens"], row["completion_tokens"])
            if progress:
                progress(done, len(requests))


def read_images(store: Store, requests: Iterable[JudgeRequest]) -> dict[str, bytes]:
    """The screenshots the requests show, read once each (from their episodes' packs when known)."""
    by_packs: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for request in requests:
        by_packs[request.packs] |= set(request.images)
    found: dict[str, bytes] = {}
    for packs, digests in by_packs.items():
        if digests - found.keys():
            found |= store.read_blobs(sorted(digests - found.keys()), list(packs) or None)
    return found


def ask(client: ModelClient, model: str, request: JudgeRequest | str,
        images: Mapping[str, bytes] | None = None) -> dict[str, Any]:
    """One judge call, as a ``judge_cache`` row."""
    request = JudgeRequest.plain(request) if isinstance(request, str) else request
    reply = client.complete(model=model, messages=request.messages(images or {}), temperature=0,
                            max_tokens=request.max_tokens)
    return {"prompt_sha256": prompt_key(model, request.prompt), "model": model, "prompt": request.prompt,
            "response": reply.text, "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "created_at": utcnow()}
