"""One cheap request before the first episode: is the model endpoint there, does it take the key,
and does it run the model?

A wrong ``--base-url`` or model name otherwise fails every episode of a run, one after another,
each after its retries. The check is retried as a run's calls are (``--model-retries``, a 429's
``Retry-After`` honoured), so a burst of 429s or 503s at the start does not end a run; only an
answer that is a chat completion passes (an HTML page from a proxy does not). The check is a
chat completion of one token (``max_tokens=1``), sent the way the agent's own calls are: the
same route (``/chat/completions``), key and model name. It is not ``models.list``:
OpenAI-compatible servers list models differently from how they accept them (llama.cpp lists the
file it loaded and answers to any name; Ollama answers ``llama3`` for ``llama3:latest``;
gateways and some proxies do not serve ``/models`` at all), so a listing can refuse a model that
works and accept a route that does not. The request costs a dozen tokens.

With prices given, the check also says what a step costs at most: the instructions and examples
every prompt carries plus an observation cut at its limit, at about four characters a token
(mmina ships no tokenizer; the real counts are recorded per step), and a reply of up to
``max_tokens``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from mmina.agents import prompts
from mmina.agents.llm import MAX_OBSERVATION_CHARS, check_settings
from mmina.agents.settings import AgentSettings
from mmina.errors import AgentError
from mmina.models.model_client import Deadlines, ModelClient, ModelError

OPENAI_URL = "https://api.openai.com/v1"
CHECK_S = 60.0
"""The most the check may take, its retries included (a run's own calls keep their deadline)."""
CHARS_PER_TOKEN = 4
PROBE = [{"role": "user", "content": "Reply with the word OK."}]


@dataclass(frozen=True, kw_only=True)
class EndpointCheck:
    """What the check found: where, which model, how fast, and what a step costs at most."""

    base_url: str
    model: str
    seconds: float
    step_prompt_tokens: int
    step_completion_tokens: int
    step_cost_usd: float | None
    """None when no price was given."""

    def line(self) -> str:
        """One line for people, e.g. before a run starts."""
        text = f"model endpoint {self.base_url} answers for model {self.model} ({self.seconds:.1f} s)"
        if self.step_cost_usd is None:
            return text
        return (
            f"{text}; at the given prices a step costs at most ${self.step_cost_usd:.4f} (up to "
            f"~{self.step_prompt_tokens:,} prompt and {self.step_completion_tokens:,} completion tokens)"
        )


def check_endpoint(settings: AgentSettings) -> EndpointCheck:
    """Send the one-token request; :class:`AgentError` naming the URL and model when it fails."""
    check_settings(settings)
    model = settings.model or ""
    deadlines = Deadlines(
        min(CHECK_S, settings.model_deadline_s), settings.max_retries
    )  # retried as a call is
    client = ModelClient(settings.base_url, deadlines)
    where = without_userinfo(client.base_url or OPENAI_URL)
    started = time.perf_counter()
    try:
        client.complete(model=model, messages=PROBE, max_tokens=1, temperature=0)
    except ModelError as exc:
        raise AgentError(f"model {model} at {where} cannot be used: {_reason(str(exc))}") from None
    prompt_tokens = step_prompt_tokens()
    return EndpointCheck(
        base_url=where,
        model=model,
        seconds=time.perf_counter() - started,
        step_prompt_tokens=prompt_tokens,
        step_completion_tokens=settings.max_tokens,
        step_cost_usd=_step_cost(settings, prompt_tokens),
    )


def without_userinfo(url: str) -> str:
    """``url`` as shown in a message: a ``user:PASS@`` in it is left out (it is a credential)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])) if "@" in parts.netloc else url


def _reason(message: str) -> str:
    """The client's line without its own subject (``model endpoint failed ...: ``)."""
    return message.removeprefix("model endpoint ")


def step_prompt_tokens() -> int:
    """The most prompt tokens a step sends, estimated from characters (screenshots not counted)."""
    fixed = sum(
        len(part) for part in (prompts.INTRO, prompts.OBSERVATION_HELP, prompts.ACTIONS, prompts.RULES)
    )
    examples = sum(len(question) + len(answer) for question, answer in prompts.EXAMPLES)
    return (fixed + examples + MAX_OBSERVATION_CHARS) // CHARS_PER_TOKEN


def _step_cost(settings: AgentSettings, prompt_tokens: int) -> float | None:
    if not (settings.price_input or settings.price_output):
        return None
    return (prompt_tokens * settings.price_input + settings.max_tokens * settings.price_output) / 1e6
