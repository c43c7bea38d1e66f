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

With an *endpoint patience* (``Deadlines.patience_s``; the agent's ``--endpoint-patience``) a
call that failed for the endpoint's sake (no connection, 5xx, 429 once its retries are spent)
is held until the endpoint answers again, for that long at most, and as many calls are in
flight as the endpoint takes (``mmina.models.endpoint_gate``); the deadline then bounds each attempt.

Calls run as coroutines on one event loop thread shared by the process (so cancelling a call
at its deadline really stops its socket). ``openai`` is imported on first use: the import takes
seconds that commands without a model should not pay.
"""

from __future__ import annotations

import codecs
import concurrent.futures
import contextvars
import os
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mmina.actions.navigation import is_web_url
from mmina.errors import MminaError, first_line, plural
from mmina.models.endpoint_gate import MAX_BACKOFF_S, EndpointGate, EndpointUnavailable, Tally, gate_for
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
MAX_PATIENCE_S = 7 * 24 * 3600.0
DEFAULT_PATIENCE_S = 900.0
"""How long an agent's calls wait for an endpoint that is down for everyone (``--endpoint-patience``)."""
MAX_TOKENS = 10_000_000
"""More tokens than any model takes or gives in one call: a usage count above it is not believed."""
LOOP_GRACE_S = 5.0
_ESCAPE_ERRORS = "mmina-escape"


class ModelError(MminaError):
    """A model call failed: the endpoint's error (after the retries it deserved), its deadline
    passed, or its reply could not be read."""


class ParameterRefused(ModelError):
    """The endpoint refused one parameter of the request (HTTP 400 naming it, as OpenAI's
    ``unsupported_value`` / ``unsupported_parameter`` errors do): the caller may drop it and
    ask again, saying so."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class EndpointFailed(ModelError):
    """The endpoint failed for everyone's sake (no connection, 5xx, 429 after the retries) and the
    call had no patience to wait for it: the infrastructure's failure, not the agent's."""

    infrastructure = True


class ModelUnavailable(ModelError, EndpointUnavailable):
    """The endpoint gave no answer for the whole patience: the endpoint's failure, not the agent's."""


@dataclass(frozen=True)
class Deadlines:
    """How long one model call may take on the caller's side, and how often it is retried."""

    call_s: float = DEFAULT_CALL_S
    max_retries: int = DEFAULT_MAX_RETRIES
    patience_s: float = 0.0
    """How long calls wait for an endpoint that is down or refusing everyone (0: they fail)."""

    def __post_init__(self) -> None:
        if not 0 < self.call_s <= MAX_CALL_S or not 0 <= self.max_retries <= MAX_RETRIES:
            raise ModelError(
                f"a model call's deadline is 0..{MAX_CALL_S:g} s and its retries 0..{MAX_RETRIES}, "
                f"not {self.call_s:g} s and {self.max_retries}"
            )
        if not 0 <= self.patience_s <= MAX_PATIENCE_S:
            raise ModelError(f"the endpoint patience is 0..{MAX_PATIENCE_S:g} s, not {self.patience_s:g} s")

    @property
    def longest_s(self) -> float:
        """The most one call may take: its patience, then one more attempt within the deadline."""
        return self.call_s + (self.patience_s + MAX_BACKOFF_S if self.patience_s else 0.0)


@dataclass(frozen=True)
class ModelReply:
    """A reply as mmina keeps it: safe text, believable token counts, and what was changed."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    note: str | None = None
    """Why the endpoint's usage was not taken as given (None when it was)."""
    retries: int = 0
    """Attempts of this call that failed for the endpoint's sake (a 429, a 5xx, no answer)."""
    waited_s: float = 0.0
    """Seconds this call waited for the endpoint to come back (not the model's thinking)."""
    model: str | None = None
    """The model the reply says answered (a provider may serve a dated snapshot, or another model)."""
    fingerprint: str | None = None
    """The reply's ``system_fingerprint``: the provider's backend configuration, when it says."""


def openai_module() -> Any:
    """The ``openai`` module, imported on first use."""
    import openai

    return openai


def require_api_key(purpose: str, error: type[MminaError], env: str = API_KEY_ENV) -> None:
    """Refuse early, as ``error``, when no key is set in ``env`` (``purpose``: what needs the model)."""
    if not os.environ.get(env):
        raise error(
            f"{purpose} needs an API key: set {env} "
            "(a local endpoint that ignores keys accepts any non-empty value)"
        )


class ModelClient:
    """Chat completions from one endpoint, each call within its deadline (safe from many threads)."""

    def __init__(
        self,
        base_url: str | None,
        deadlines: Deadlines = Deadlines(),
        what: str = "model endpoint",
        api_key_env: str = API_KEY_ENV,
    ) -> None:
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
            return future.result(timeout=self.deadlines.longest_s + LOOP_GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ModelError(self._late()) from None

    async def _complete(self, request: dict[str, Any]) -> ModelReply:
        """Attempts until one answers, the endpoint's faults held at its gate (see the module)."""
        gate, tally = gate_for(self.base_url or "", self.deadlines.patience_s), Tally()
        _CALL.set((gate, tally))
        while True:
            try:
                await gate.ready(tally, self.what)
            except EndpointUnavailable as exc:
                raise ModelUnavailable(str(exc)) from None
            response = await self._attempt(request, gate, tally)
            if response is not None:
                return replace(reply_of(response), retries=tally.retries, waited_s=round(tally.waited_s, 3))

    async def _attempt(self, request: dict[str, Any], gate: EndpointGate, tally: Tally) -> Any:
        """One call through the client (its own retries included): the response, or None when it
        failed for the endpoint's sake and the gate says to wait and try again."""
        import asyncio

        openai = openai_module()
        try:
            async with gate.slot():
                response = await asyncio.wait_for(
                    self._async_client().chat.completions.create(**request), self.deadlines.call_s
                )
        except TimeoutError:
            raise ModelError(self._late()) from None
        except openai.APIError as exc:
            refused = refused_param(exc, request)
            if refused is not None:
                raise ParameterRefused(
                    failure_line(self.what, exc, self.deadlines.max_retries), refused
                ) from None
            fault = is_endpoint_fault(exc)
            if fault and gate.failed(tally, getattr(exc, "status_code", None) == 429):
                return None
            failed = EndpointFailed if fault and not tally.own else ModelError
            raise failed(failure_line(self.what, exc, self.deadlines.max_retries)) from None
        except Exception as exc:  # noqa: BLE001 - whatever the endpoint sent, the caller gets one line
            raise ModelError(
                f"{self.what} sent a reply that cannot be read: {type(exc).__name__}: {first_line(exc)}"
            ) from None
        if not isinstance(getattr(response, "choices", None), list):  # e.g. a proxy's HTML page, read as text
            from mmina.redaction.redact import Redactor, configured_secrets

            shown = Redactor(configured_secrets()).scrub(" ".join(str(response).split())[:80])
            raise ModelError(f"{self.what} sent something that is not a chat completion: {shown!r}")
        return response

    def _async_client(self) -> Any:
        """The ``openai.AsyncOpenAI`` client, made on the loop that runs its calls."""
        if self._client is None:
            openai = openai_module()
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=os.environ.get(self.api_key_env, ""),
                max_retries=self.deadlines.max_retries,
                timeout=min(ATTEMPT_S, self.deadlines.call_s),
                http_client=openai.DefaultAsyncHttpxClient(
                    event_hooks={"response": [_seen, _escape_undecodable]}
                ),
            )
        return self._client

    def _late(self) -> str:
        return (
            f"{self.what} gave no complete answer within {self.deadlines.call_s:g} s "
            f"(the deadline of a model call, retries included)"
        )


def is_endpoint_fault(exc: Exception) -> bool:
    """Whether a failed call (after the client's retries) was the endpoint's doing: no connection
    or no answer in time, 5xx, 429 (what the client retries), not a request it refused."""
    status = getattr(exc, "status_code", None)
    return status is None or status in RETRIED_STATUSES or status >= 500


def refused_param(exc: Exception, request: dict[str, Any]) -> str | None:
    """The request's parameter a 400 answer names as refused (its error's ``param``), if any."""
    param = getattr(exc, "param", None)
    if getattr(exc, "status_code", None) == 400 and isinstance(param, str) and param in request:
        return param
    return None


def failure_line(what: str, exc: Exception, retries: int) -> str:
    """One line; says "after N retries" only for what the client retries (429, 5xx, timeouts,
    no connection), e.g. ``model endpoint failed after 4 retries: Error code: 503``."""
    retried = is_endpoint_fault(exc)
    from mmina.redaction.redact import (  # its rules are compiled on first use, not for --help
        Redactor,
        configured_secrets,
    )

    message = Redactor(configured_secrets()).scrub(
        first_line(exc)
    )  # an endpoint may quote the key it refused
    after = f" after {plural(retries, 'retry', 'retries')}" if retried else ""
    return f"{what} failed{after}: {message}"


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
    from mmina.redaction.redact import Redactor, configured_secrets

    text = Redactor(configured_secrets()).scrub(escaped(text if isinstance(text, str) else str(text)))
    return ModelReply(
        text,
        prompt,
        completion,
        "; ".join(notes) or None,
        model=_reported(response, "model"),
        fingerprint=_reported(response, "system_fingerprint"),
    )


def _reported(response: Any, name: str) -> str | None:
    """A short text field of the response (what the provider says of itself), escaped; None when absent."""
    value = getattr(response, name, None)
    return escaped(value)[:200] if isinstance(value, str) and value else None


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
    bad = error.object[error.start : error.end]
    return "".join(f"\\\\x{b:02x}" for b in bad), error.end


codecs.register_error(_ESCAPE_ERRORS, _escape_byte)


_CALL: contextvars.ContextVar[tuple[EndpointGate, Tally]] = contextvars.ContextVar("mmina_model_call")
"""The gate and tally of the call an HTTP response belongs to (the client's hooks run in its task)."""


async def _seen(response: Any) -> None:
    """A response hook: every attempt's status reaches the call's gate (429s adapt how many calls
    are in flight; see ``mmina.models.endpoint_gate``)."""
    call = _CALL.get(None)
    if call is not None:
        call[0].attempted(call[1], response.status_code)


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
