"""The LLM judge of the ``fuzzy`` evaluator: the paper's prompt, a strict parser, a cache.

Every call goes through the client of :mod:`mmina.models.model_client` to any OpenAI-compatible
endpoint (``--base-url``, else ``OPENAI_BASE_URL``; ``OPENAI_API_KEY``), which retries 429
and 5xx answers with backoff itself (``max_retries``) and ends each call at its deadline
(``deadline_s``, retries included). A judge that cannot answer is an error: the caller leaves
the episode unscored — there is no fallback to any other evaluator.

A reply depends on more than the question, so a :class:`JudgeConfig` travels with every call:
the model, the endpoint's host, the sampling parameters sent (temperature, top_p, seed, max
tokens) and the prompt version. Replies are cached in the store's ``judge_cache`` table under
the SHA-256 of that configuration and the prompt (as JSON): scoring the same answers again
with the same judge sends no request at all and gives the same verdicts, and a changed
temperature, endpoint or prompt version is a miss. Each cached row also says what the
provider did (``judge_json``): a parameter it refused (dropped, and the call asked again
without it — never silently: every verdict resting on it lists it), the model its reply
reported. The ``openai`` module is imported only when a request has to be sent.

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
import os
import string
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from mmina.evaluators.base import EvaluatorError
from mmina.evaluators.rescore_settings import JudgeSettings
from mmina.models.model_client import (
    BASE_URL_ENV,
    Deadlines,
    ModelClient,
    ModelError,
    ParameterRefused,
    require_api_key,
)
from mmina.store import Store
from mmina.store.store import utcnow

PROMPT = 'Given the statement "{pred}", would it be correct to infer "{reference}"? Yes or No'
FUZZY_PROMPT_VERSION = "fuzzy-1"
"""The version of the paper's question and of its strict reading (:func:`parse_verdict`): a new
one with any change to either (a test pins it to the question's text), so that no verdict or
cached reply of one is taken for the other's."""
MAX_TOKENS = 16
DEFAULT_ENDPOINT = "https://api.openai.com/v1"
"""Where the ``openai`` client sends a call when neither ``--judge-base-url`` nor ``OPENAI_BASE_URL`` says."""
DROPPABLE = ("temperature", "top_p", "seed")
"""Sampling parameters a provider may refuse (some models take only their default temperature):
such a parameter is dropped and the call asked again, and every verdict resting on it says so."""
_STRIP = string.punctuation + "“”‘’«»"

Progress = Callable[[int, int], None]


def judge_prompt(pred: str, reference: str) -> str:
    """The paper's question, with the agent's answer and one reference filled in verbatim."""
    return PROMPT.format(pred=pred, reference=reference)


def endpoint_host(base_url: str | None) -> str:
    """The host (and port) a judge call goes to — never the scheme's credentials nor the path,
    where a proxy may keep a key: ``--judge-base-url``, else ``OPENAI_BASE_URL``, else OpenAI's."""
    parts = urlsplit(base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_ENDPOINT)
    host = parts.hostname or "unknown"
    host = f"[{host}]" if ":" in host else host
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


@dataclass(frozen=True)
class JudgeConfig:
    """Everything a judge's reply depends on besides the question: the model, the endpoint's
    host, the prompt version and the sampling parameters asked for (None: not sent, the
    provider's default). Part of every cache key and of every verdict row."""

    model: str
    endpoint: str
    prompt_version: str = FUZZY_PROMPT_VERSION
    temperature: float | None = 0.0
    top_p: float | None = None
    seed: int | None = None

    @classmethod
    def of(cls, settings: JudgeSettings, prompt_version: str = FUZZY_PROMPT_VERSION) -> JudgeConfig:
        temperature = None if settings.temperature is None else float(settings.temperature)
        top_p = None if settings.top_p is None else float(settings.top_p)
        return cls(
            settings.model or "",
            endpoint_host(settings.base_url),
            prompt_version,
            temperature,
            top_p,
            settings.seed,
        )

    def sampling(self, max_tokens: int) -> dict[str, Any]:
        """The parameters a call sends: those set, and the reply's token budget."""
        given = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "max_tokens": max_tokens,
        }
        return {name: value for name, value in given.items() if value is not None}

    def key(self, prompt: str, max_tokens: int) -> str:
        """The cache key of ``prompt`` asked with this configuration: SHA-256 of both as canonical JSON."""
        asked = {
            "model": self.model,
            "endpoint": self.endpoint,
            "prompt_version": self.prompt_version,
            "sampling": self.sampling(max_tokens),
            "prompt": prompt,
        }
        return hashlib.sha256(canonical(asked).encode()).hexdigest()

    def summary(self, calls: Sequence[Mapping[str, Any]], cached: int) -> dict[str, Any]:
        """A verdict's ``judge_json``: this configuration and what the ``calls`` it rests on (their
        ``judge_cache.judge_json``) sent and were told — refused parameters, the models the replies
        reported."""

        def distinct(name: str) -> list[Any]:
            return sorted({c[name] for c in calls if c.get(name) is not None})

        return {
            "model": self.model,
            "endpoint": self.endpoint,
            "prompt_version": self.prompt_version,
            "asked": {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed},
            "max_tokens": sorted({c.get("sent", {}).get("max_tokens") for c in calls} - {None}),
            "refused": sorted({p for c in calls for p in c.get("refused", ())}),
            "reply_models": distinct("reply_model"),
            "fingerprints": distinct("fingerprint"),
            "calls": len(calls),
            "cached": cached,
        }


def canonical(value: Any) -> str:
    """JSON with sorted keys and no spaces: the same value is always the same text."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def parse_verdict(reply: str | None) -> str:
    """``pass`` when the first word is yes, ``fail`` when it is no (any case, punctuation
    around it stripped); anything else is ``unclear`` — a reply is never guessed."""
    words = (reply or "").split()
    first = words[0].strip(_STRIP).lower() if words else ""
    return {"yes": "pass", "no": "fail"}.get(first, "unclear")


Usage = tuple[int, int]
"""The tokens a reply cost: (prompt, completion)."""
IMAGE_TYPES = {
    b"\xff\xd8\xff": "image/jpeg",
    b"\x89PNG": "image/png",
    b"GIF8": "image/gif",
    b"RIFF": "image/webp",
}


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
    def plain(cls, prompt: str) -> JudgeRequest:
        """The paper's kind of question: one text, no system prompt, a yes or no."""
        return cls((("text", prompt),))

    @property
    def prompt(self) -> str:
        """What is cached and hashed: a plain question's text itself (so the fuzzy judge's cache
        keys are as they always were), else the request as canonical JSON, images by hash."""
        if (
            self.parts
            and len(self.parts) == 1
            and self.parts[0][0] == "text"
            and not self.system
            and self.max_tokens == MAX_TOKENS
        ):
            return self.parts[0][1]
        return json.dumps(
            {"system": self.system, "parts": [list(p) for p in self.parts], "max_tokens": self.max_tokens},
            ensure_ascii=False,
            sort_keys=True,
            separators=(",", ":"),
        )

    @property
    def images(self) -> list[str]:
        return [value for kind, value in self.parts if kind == "image"]

    def messages(self, images: Mapping[str, bytes]) -> list[dict[str, Any]]:
        """The chat messages to send, each image inlined as a data URL."""
        content = [
            {"type": "text", "text": value} if kind == "text" else _image_part(value, images)
            for kind, value in self.parts
        ]
        system = [{"role": "system", "content": self.system}] if self.system else []
        if len(content) == 1 and content[0]["type"] == "text":
            return [*system, {"role": "user", "content": content[0]["text"]}]
        return [*system, {"role": "user", "content": content}]


def _image_part(digest: str, images: Mapping[str, bytes]) -> dict[str, Any]:
    data = images.get(digest)
    if data is None:
        raise ModelError(f"screenshot {digest[:12]}… is missing from the store")
    media = next((kind for magic, kind in IMAGE_TYPES.items() if data.startswith(magic)), "image/jpeg")
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{media};base64,{base64.b64encode(data).decode()}"},
    }


@dataclass
class JudgeOutcome:
    """Replies by prompt (cached and new) with the tokens each cost and what each call sent
    and was told (``calls``: its ``judge_cache.judge_json``), the new cache rows, the prompts
    answered from the cache, and the prompts that failed."""

    config: JudgeConfig
    replies: dict[str, str] = field(default_factory=dict)
    cached: int = 0
    new_rows: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    from_cache: set[str] = field(default_factory=set)

    @property
    def requested(self) -> int:
        """Prompts that needed the endpoint (answered or failed)."""
        return len(self.new_rows) + len(self.failures)


class Cached(NamedTuple):
    reply: str
    usage: Usage
    call: str | None
    """The call's ``judge_json`` (as stored)."""


def read_cache(store: Store, model: str) -> dict[str, Cached]:
    """Cached replies of ``model`` by cache key, with the tokens each cost and what the call
    sent and was told (the first stored reply of a key wins)."""
    columns = ("prompt_sha256", "model", "response", "prompt_tokens", "completion_tokens", "judge_json")
    table = store.read("judge_cache", columns=list(columns))
    cache: dict[str, Cached] = {}
    for key, row_model, reply, given, taken, call in zip(*(table.column(c).to_pylist() for c in columns)):
        if row_model == model and reply is not None:
            cache.setdefault(key, Cached(reply, (given or 0, taken or 0), call))
    return cache


def resolve(
    store: Store,
    prompts: Iterable[str | JudgeRequest],
    settings: JudgeSettings,
    progress: Progress | None = None,
    prompt_version: str = FUZZY_PROMPT_VERSION,
) -> JudgeOutcome:
    """Every request's reply (by its ``prompt``; a text is a plain question): from the cache,
    else from the endpoint (concurrently), asked with the configuration ``settings`` and
    ``prompt_version`` make.

    Nothing is written here; the caller appends ``new_rows`` to ``judge_cache``.
    """
    if not settings.model:
        raise EvaluatorError("this evaluator asks an LLM judge: pass --judge-model NAME")
    config = JudgeConfig.of(settings, prompt_version)
    outcome = JudgeOutcome(config)
    cache = read_cache(store, config.model)
    requests = {r.prompt: r for r in (JudgeRequest.plain(p) if isinstance(p, str) else p for p in prompts)}
    missing = []
    for prompt, request in requests.items():
        found = cache.get(config.key(prompt, request.max_tokens))
        if found is not None:
            outcome.replies[prompt], outcome.usage[prompt] = found.reply, found.usage
            outcome.calls[prompt] = json.loads(found.call) if found.call else {}
            outcome.from_cache.add(prompt)
            outcome.cached += 1
        else:
            missing.append(request)
    if missing:
        _ask_all(store, missing, settings, outcome, progress)
    return outcome


def _ask_all(
    store: Store,
    requests: list[JudgeRequest],
    settings: JudgeSettings,
    outcome: JudgeOutcome,
    progress: Progress | None,
) -> None:
    require_api_key("asking the judge", EvaluatorError, settings.api_key_env)
    client = ModelClient(
        settings.base_url,
        Deadlines(settings.deadline_s, settings.max_retries),
        "judge endpoint",
        settings.api_key_env,
    )
    images = read_images(store, requests)
    refused: set[str] = set()
    with ThreadPoolExecutor(max_workers=max(1, settings.concurrency)) as pool:
        futures = {pool.submit(ask, client, outcome.config, r, images, refused): r.prompt for r in requests}
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
                outcome.calls[prompt] = json.loads(row["judge_json"])
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


def ask(
    client: ModelClient,
    config: JudgeConfig,
    request: JudgeRequest | str,
    images: Mapping[str, bytes] | None = None,
    refused: set[str] | None = None,
) -> dict[str, Any]:
    """One judge call, as a ``judge_cache`` row. A sampling parameter the endpoint refuses is
    dropped and the call asked again without it; ``refused`` (shared by a batch's calls) keeps
    such parameters from being sent again, and the row says which were dropped."""
    request = JudgeRequest.plain(request) if isinstance(request, str) else request
    refused = set() if refused is None else refused
    wanted = config.sampling(request.max_tokens)
    messages = request.messages(images or {})
    while True:
        sent = {name: value for name, value in wanted.items() if name not in refused}
        try:
            reply = client.complete(model=config.model, messages=messages, **sent)
            break
        except ParameterRefused as exc:
            if exc.param not in DROPPABLE or exc.param not in sent:
                raise
            refused.add(exc.param)
    call = {
        "model": config.model,
        "endpoint": config.endpoint,
        "prompt_version": config.prompt_version,
        "sent": sent,
        "refused": sorted(set(wanted) - set(sent)),
        "reply_model": reply.model,
        "fingerprint": reply.fingerprint,
    }
    return {
        "prompt_sha256": config.key(request.prompt, request.max_tokens),
        "model": config.model,
        "prompt": request.prompt,
        "response": reply.text,
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "created_at": utcnow(),
        "judge_json": canonical(call),
    }
