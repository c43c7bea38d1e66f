"""The one way mmina talks to a model: the ``openai`` client for any OpenAI-compatible endpoint.

The ``openai`` agent, the captioner and the LLM judge all make their client here. The endpoint
is the given base URL, else ``OPENAI_BASE_URL``, else OpenAI's; the key is ``OPENAI_API_KEY``;
the client itself retries 429 and 5xx answers with backoff (``max_retries``). ``openai`` is
imported on first use: the import takes seconds that commands without a model should not pay.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from mmina.errors import MminaError, first_line
from mmina.redact import Redactor, configured_secrets

if TYPE_CHECKING:
    import openai

API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
RETRIED_STATUSES = frozenset({408, 409, 429})
DEFAULT_TIMEOUT_S = 120.0


def openai_module() -> Any:
    """The ``openai`` module, imported on first use."""
    import openai

    return openai


def require_api_key(purpose: str, error: type[MminaError]) -> None:
    """Refuse early, as ``error``, when no key is set (``purpose``: what needs the model)."""
    if not os.environ.get(API_KEY_ENV):
        raise error(f"{purpose} needs an API key: set {API_KEY_ENV} "
                    "(a local endpoint that ignores keys accepts any non-empty value)")


def make_client(base_url: str | None, max_retries: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> "openai.OpenAI":
    """A client for ``base_url`` (else ``OPENAI_BASE_URL``, else OpenAI's) with this retry budget."""
    return openai_module().OpenAI(base_url=base_url or os.environ.get(BASE_URL_ENV) or None,
                                  api_key=os.environ[API_KEY_ENV], max_retries=max_retries, timeout=timeout_s)


def api_error() -> type[Exception]:
    """The client's base error class (what an endpoint failure raises)."""
    return openai_module().APIError


def failure_line(what: str, exc: Exception, retries: int) -> str:
    """One line; says "after N retries" only for what the client retries (429, 5xx, timeouts,
    no connection), e.g. ``model endpoint failed after 4 retries: Error code: 503``."""
    status = getattr(exc, "status_code", None)
    retried = status is None or status in RETRIED_STATUSES or status >= 500
    message = Redactor(configured_secrets()).scrub(first_line(exc))  # an endpoint may quote the key it refused
    return f"{what} failed{f' after {retries} retries' if retried else ''}: {message}"


def reply_text(response: Any) -> str:
    """The first choice's text; an empty reply is data, not an error. A key the endpoint echoes
    (its own, from the environment) is scrubbed here, before any agent, judge or store sees it."""
    text = (response.choices[0].message.content or "") if response.choices else ""
    return Redactor(configured_secrets()).scrub(text)


def usage_tokens(response: Any) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of a reply; 0 where the endpoint did not say."""
    usage = getattr(response, "usage", None)
    return int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)
