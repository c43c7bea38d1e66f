"""The one way mmina talks to a model: the ``openai`` client for any OpenAI-compatible endpoint.

The ``openai`` agent, the captioner and the LLM judge all call through :class:`ModelClient`. The
endpoint is the given base URL, else ``OPENAI_BASE_URL``, else OpenAI's; the key is
``OPENAI_API_KEY``. Every call has a *deadline* kept on the caller's side: the whole call, its
retries (429, 5xx, timeouts and lost connections, with the client's backoff) included, ends
after ``Deadlines.call_s`` seconds however the endpoint behaves — one that answers nothing, or
one that drips a byte every few seconds (which never trips a read timeout), costs the caller
that long and no longer. A failure of any kind is one :class:`ModelError` line.

What comes back is checked before anyone stores it: text with lone surrogates or bytes that
are not UTF-8 is kept, escaped (``\\ud83d``, ``\\xff``); token counts that are not counts
(negative, fractional, absurd such as 10**30) become 0 with a note saying why.

Calls run as coroutines on one event loop thread shared by the process (so cancelling a call
at its deadline really stops its socket). ``openai`` is imported on first use: the import takes
seconds that commands without a model should not pay.
"""
from __future__ import annotations

import codecs
import concurrent.futures
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mmina.errors import MminaError, first_line
from mmina.navigation import is_web_url
from mmina.unicode import escaped, mapped_text

if TYPE_CHECKING:
    import asyncio

API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
RETRIED_STATUSES = frozenset({408, 409, 429})
DEFAULT_CALL_S = 180.0
"""A model call's deadline, retries included (``--model-deadline``)."""
DEFAULT_MAX_RETRIES = 4
"""Retries of one call within its deadline (``--model-retries``)."""
ATTEMPT_S = 60.0
"""The longest one attempt may wait for a connection or between two bytes (the client's timeout)."""
MAX_CALL_S = 3600.0
MAX_RETRIES = 20
MAX_TOKENS = 10_000_000
"""More tokens than any model takes or gives in one call: a usage count above it is not believed."""
LOOP_GRACE_S = 5.0
_ESCAPE_ERRORS = "mmina-escape"


class ModelError(MminaError):
    """A model call failed: the endpoint's error (after the retries it deserved), its deadline
    passed, or its reply could not be read."""


@dataclass(frozen=True)
class Deadlines:
    """How long one model call may take on the caller's side, and how often it is retried."""

    call_s: float = DEFAULT_CALL_S
    max_retries: int = DEFAULT_MAX_RETRIES

    def __post_init__(self) -> None:
        if not 0 < self.call_s <= MAX_CALL_S or not 0 <= self.max_retries <= MAX_RETRIES:
            raise ModelError(f"a model call's deadline is 0..{MAX_CALL_S:g} s and its retries 0..{MAX_RETRIES}, "
                             f"not {self.call_s:g} s and {self.max_retries}")


@dataclass(frozen=True)
class ModelReply:
    """A reply as mmina keeps it: safe text, believable token counts, and what was changed."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    note: str | None = None
    """Why the endpoint's usage was not taken as given (None when it was)."""


def openai_module() -> Any:
    """The ``openai`` module, imported on first use."""
    import openai

    return openai


def require_api_key(purpose: str, error: type[MminaError], env: str = API_KEY_ENV) -> None:
    """Refuse early, as ``error``, when no key is set in ``env`` (``purpose``: what needs the model)."""
    if not os.environ.get(env):
        raise error(f"{purpose} needs an API key: set {env} "
                    "(a local endpoint that ignores keys accepts any non-empty value)")


class ModelClient:
    """Chat completions from one endpoint, each call within its deadline (safe from many threads)."""

    def __init__(self, base_url: str | None, deadlines: Deadlines = Deadlines(), what: str = "model endpoint",
                 api_key_env: str = API_KEY_ENV) -> None:
        self.base_url = base_url or os.environ.get(BASE_URL_ENV) or None
        self.deadlines, self.what, self.api_key_env = deadlines, what, api_key_env
        if self.base_url is not None and not is_web_url(self.base_url):
            raise ModelError(f"the {what}'s base URL must be an http(s) URL (--base-url or {BASE_URL_ENV})")
        self._client: Any = None

    def complete(self, **request: Any) -> ModelReply:
        """One ``chat.completions.create`` call (text no UTF-8 can hold sent escaped, see
        ``mmina.unicode``); :class:`ModelError` when it fails or runs out of time."""
        import asyncio  # here, not at the top: commands that call no model do not pay for it

        future = asyncio.run_coroutine_threadsafe(self._complete(mapped_text(request)), _loop())
        try:
            return future.result(timeout=self.deadlines.call_s + LOOP_GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ModelError(self._late()) from None

    async def _complete(self, request: dict[str, Any]) -> ModelReply:
        import asyncio

        openai = openai_module()
        try:
            response = await asyncio.wait_for(self._async_client().chat.completions.create(**request),
                                              self.deadlines.call_s)
        except asyncio.TimeoutError:
            raise ModelError(self._late()) from None
        except openai.APIError as exc:
            raise ModelError(failure_line(self.what, exc, self.deadlines.max_retries)) from None
        except Exception as exc:  # noqa: BLE001 - whatever the endpoint sent, the caller gets one line
            raise ModelError(f"{self.what} sent a reply that cannot be read: {type(exc).__name__}: "
                             f"{first_line(exc)}") from None
        return reply_of(response)

    def _async_client(self) -> Any:
        """The ``openai.AsyncOpenAI`` client, made on the loop that runs its calls."""
        if self._client is None:
            openai = openai_module()
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=os.environ.get(self.api_key_env, ""), max_retries=self.deadlines.max_retries,
                timeout=min(ATTEMPT_S, self.deadlines.call_s),
                http_client=openai.DefaultAsyncHttpxClient(event_hooks={"response": [_escape_undecodable]}))
        return self._client

    def _late(self) -> str:
        return (f"{self.what} gave no complete answer within {self.deadlines.call_s:g} s "
                f"(the deadline of a model call, retries included)")


def failure_line(what: str, exc: Exception, retries: int) -> str:
    """One line; says "after N retries" only for what the client retries (429, 5xx, timeouts,
    no connection), e.g. ``model endpoint failed after 4 retries: Error code: 503``."""
    status = getattr(exc, "status_code", None)
    retried = status is None or status in RETRIED_STATUSES or status >= 500
    from mmina.redact import Redactor, configured_secrets  # its rules are compiled on first use, not for --help

    message = Redactor(configured_secrets()).scrub(first_line(exc))  # an endpoint may quote the key it refused
    return f"{what} failed{f' after {retries} retries' if retried else ''}: {message}"


def reply_of(response: Any) -> ModelReply:
    """The first choice's text (an empty reply is data, not an error) and the usage, checked. A
    key the endpoint echoes (its own, from the environment) is scrubbed here, before any agent,
    judge or store sees it."""
    choices = getattr(response, "choices", None) or []
    message = getattr(choices[0], "message", None) if choices else None
    text = getattr(message, "content", None) or ""
    usage = getattr(response, "usage", None)
    prompt, prompt_note = token_count(getattr(usage, "prompt_tokens", None), "prompt_tokens")
    completion, completion_note = token_count(getattr(usage, "completion_tokens", None), "completion_tokens")
    notes = [n for n in (prompt_note, completion_note) if n]
    from mmina.redact import Redactor, configured_secrets

    text = Redactor(configured_secrets()).scrub(escaped(text if isinstance(text, str) else str(text)))
    return ModelReply(text, prompt, completion, "; ".join(notes) or None)


def token_count(value: Any, name: str) -> tuple[int, str | None]:
    """A usage count as a number of tokens, and why it was not taken as given (0 then)."""
    if value is None:
        return 0, None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return 0, f"usage.{name} {shown} is not a token count (0..{MAX_TOKENS:,}): counted as 0"
    return value, None


def _escape_byte(error: UnicodeError) -> tuple[str, int]:
    """A codec error handler: an undecodable byte becomes the JSON text ``\\\\xff`` (so a JSON
    string still parses, and shows the byte escaped). It is registered for decoding only."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    bad = error.object[error.start:error.end]
    return "".join(f"\\\\x{b:02x}" for b in bad), error.end


codecs.register_error(_ESCAPE_ERRORS, _escape_byte)


async def _escape_undecodable(response: Any) -> None:
    """A response hook of the client's HTTP library: a body that is not UTF-8 is replaced by one with each bad byte
    escaped, so the client parses it instead of failing (``escaped`` handles the rest)."""
    body = await response.aread()
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        response._content = body.decode("utf-8", _ESCAPE_ERRORS).encode("utf-8")


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    """The process's model-call event loop, on a daemon thread started on first use."""
    import asyncio

    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="mmina-model", daemon=True).start()
        return _LOOP
