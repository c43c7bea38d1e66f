"""A local OpenAI-compatible chat endpoint for tests (and demos): real HTTP on 127.0.0.1.

It records every request body, and answers with a small deterministic policy that reads the
element ids out of the prompt's observation, so a real episode of the built-in task
``normal/1`` (wiki, then shop) completes. It also judges: to the fuzzy judge's question it
answers "Yes." when the reference is contained in the statement (case-insensitive), else
"No." (``judge_reply`` replaces that text). It can also misbehave: HTTP errors for the first N
requests, an error for every request (which may echo the key it was given), text without an
action, a reply that never comes (``hang``) or comes one byte every ``drip_s`` seconds, absurd
``usage`` numbers, and ``raw_content`` bytes put into the JSON as they are (a lone surrogate
escape, bytes that are no UTF-8). A ``script`` answers the requests it recognizes (a judge's
scripted verdicts, a refusal with null content).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mmina.actions.grammar import SUMMARY_MARKER

PROMPT_TOKENS = 1200
COMPLETION_TOKENS = 30
CAPTION = "a small square picture"
NULL_CONTENT = "\x00null"
ANY_VELL = 'Vell[^"]*'
JUDGE_QUESTION = re.compile(
    r'^Given the statement "(?P<pred>.*)", would it be correct to infer "(?P<ref>.*)"\? Yes or No$', re.DOTALL
)


def judge_answer(prompt: str) -> str | None:
    """The fake judge's reply to the fuzzy judge's question; None for any other prompt."""
    found = JUDGE_QUESTION.match(prompt)
    if not found:
        return None
    return "Yes." if found["ref"].lower() in found["pred"].lower() else "No."


def next_action(observation: str) -> str:
    """The action for ``normal/1`` given the text of one observation (with its ``URL:`` line)."""
    url = _find(r"^URL: (\S+)", observation)
    if "wiki." in url and "/A/" in url:
        return "goto [http://shop.mmina.test/]"
    if "wiki." in url and "search" in url:
        return f"click [{_id('link', 'Solaria', observation)}]"
    if "wiki." in url:
        return f"type [{_id('searchbox', 'Search', observation)}] [Solaria] [press_enter_after=1]"
    if "/product/" in url:
        return f"stop [{_find(r'paragraph: ([$][0-9.]+)', observation)}]"
    if "search" in url:
        return f"click [{_id('link', ANY_VELL, observation)}]"
    return f"type [{_id('searchbox', 'Search products', observation)}] [Vell] [press_enter_after=1]"


def _id(role: str, name: str, observation: str) -> str:
    """The id of the first element with this role and a name matching the pattern ("0" when absent)."""
    return _find(rf'\[(\d+)\] {role} "{name}"', observation)


def _find(pattern: str, text: str) -> str:
    found = re.search(pattern, text, re.MULTILINE)
    return found.group(1) if found else "0"


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message (string content or the text parts of a list)."""
    content = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if part["type"] == "text")


def image_urls(body: dict[str, Any]) -> list[str]:
    """Every ``image_url`` URL in the request's messages."""
    return [
        part["image_url"]["url"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for part in m["content"]
        if part["type"] == "image_url"
    ]


@dataclass
class FakeOpenAI:
    """``with FakeOpenAI() as server:`` serves ``server.url`` (an OpenAI ``base_url``) until the block ends.

    ``requests`` holds every request body as sent, plus ``_authorization`` (the header),
    ``_failed`` (an injected error answered it) or ``_reply`` (the text answered).
    The first ``fail_first`` requests (every request with ``always_fail``) get HTTP ``fail_status``,
    with a tiny ``retry-after-ms`` so client retries are quick; ``reply`` replaces the policy's text
    (``judge_reply`` only the judge's), ``policy`` the built-in choice of action. ``delay_s`` makes
    every answer wait that long (a model's latency), concurrently across requests.
    """

    fail_first: int = 0
    fail_status: int = 429
    always_fail: bool = False
    fail_after: int | None = None
    """Answer the first ``fail_after`` requests, then fail every one (a key revoked, a quota spent mid-run)."""
    models: tuple[str, ...] | None = None
    """The models it runs: a request for another gets 404 ``model_not_found``, as OpenAI answers (None: any)."""
    reply: str | None = None
    judge_reply: str | None = None
    delay_s: float = 0.0
    policy: Callable[[str], str] | None = None
    """The action (grammar text) for a step's user message, replacing the built-in policy."""
    script: Callable[[dict[str, Any]], str | None] | None = None
    """Replies to requests it recognizes (the request body in, the reply's text out; None: the
    usual answer), e.g. a judge's scripted verdicts. A reply of ``NULL_CONTENT`` is sent as a
    null ``content`` with a ``refusal`` (what OpenAI's models send when they refuse)."""
    hang: bool = False
    drip_s: float = 0.0
    usage: dict[str, Any] | None = None
    """Replaces the ``usage`` object of every answer (e.g. ``{"prompt_tokens": 10**30}``)."""
    raw_content: bytes | None = None
    """The reply's ``content`` as raw bytes between the JSON quotes (escapes and all)."""
    echo_key: bool = False
    """An injected error says which key it refused, whole, as a careless endpoint would (``Incorrect API key
    provided: <the credential of the Authorization header>``)."""
    keep_requests: bool = True
    """False keeps no request body (a benchmark's thousands of prompts), only the counts."""
    serves_at_once: int | None = None
    """The most requests it works on at once: one more is refused with 429 and ``Retry-After: 1``
    (a shared server's rate limit; None: no limit)."""
    unavailable: bool = False
    """Answer every request with 503 (an overloaded or restarting server) while set."""
    html: bool = False
    """Answer every request with an HTML page and 200 (a proxy's or a portal's page at the wrong URL)."""
    refuses: tuple[str, ...] = ()
    """Parameters it refuses (HTTP 400 naming the ``param``, as OpenAI answers a model that takes only its
    default temperature) when a request sends them."""
    reply_model: str | None = None
    """The model its answers report (a provider serving a dated snapshot; None: the one asked for)."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    received: int = 0
    answered: int = 0

    def __enter__(self) -> FakeOpenAI:
        self.stopped = threading.Event()
        self.working = 0
        self.limited = 0
        self._start(0)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        return self

    def _start(self, port: int) -> None:
        self._server = _QuietServer(("127.0.0.1", port), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def go_down(self) -> None:
        """Stop listening: every connection is refused until :meth:`come_back` (a server down)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self.down = True

    def come_back(self) -> None:
        """Listen again on the same port."""
        self._start(self._server.server_address[1])
        self.down = False

    def __exit__(self, *exc_info: object) -> None:
        self.stopped.set()
        if not getattr(self, "down", False):
            self.go_down()

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The bodies of the requests that got an answer (not an injected error)."""
        return [r for r in self.requests if not r.get("_failed")]

    def respond(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Status and JSON for one request, in arrival order."""
        if self.models is not None and body.get("model") not in self.models:
            body["_failed"] = True
            return 404, {
                "error": {
                    "message": f"The model `{body.get('model')}` does not exist or you do not have "
                    "access to it.",
                    "type": "invalid_request_error",
                    "code": "model_not_found",
                }
            }
        refused = next((name for name in self.refuses if name in body), None)
        if refused is not None:
            body["_failed"] = True
            return 400, {
                "error": {
                    "message": f"Unsupported value: '{refused}' does not support {body[refused]!r} with "
                    "this model. Only the default value is supported.",
                    "type": "invalid_request_error",
                    "param": refused,
                    "code": "unsupported_value",
                }
            }
        late = self.fail_after is not None and self.received > self.fail_after
        if self.always_fail or late or self.received <= self.fail_first:
            body["_failed"] = True
            message = f"injected HTTP {self.fail_status}"
            if self.echo_key:
                message = f"Incorrect API key provided: {str(body.get('_authorization')).partition(' ')[2]}"
            return self.fail_status, {"error": {"message": message, "type": "injected"}}
        self.answered += 1
        body["_reply"] = self._text(body)
        return 200, self._completion(body, body["_reply"])

    def _text(self, body: dict[str, Any]) -> str:
        if self.reply is not None:
            return self.reply
        scripted = self.script(body) if self.script else None
        if scripted is not None:
            return scripted
        observation = last_user_text(body)
        judged = judge_answer(observation)
        if judged is not None:
            return self.judge_reply if self.judge_reply is not None else judged
        if "URL:" not in observation:
            return CAPTION
        action = self.policy(observation) if self.policy else next_action(observation)
        return f"Let's think step by step. I look at the page. {SUMMARY_MARKER} ```{action}```"

    def _completion(self, body: dict[str, Any], text: str) -> dict[str, Any]:
        usage = (
            self.usage
            if self.usage is not None
            else {
                "prompt_tokens": PROMPT_TOKENS,
                "completion_tokens": COMPLETION_TOKENS,
                "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
            }
        )
        message = (
            {"role": "assistant", "content": text}
            if text != NULL_CONTENT
            else {"role": "assistant", "content": None, "refusal": "I can't help with that."}
        )
        return {
            "id": f"chatcmpl-{self.answered}",
            "object": "chat.completion",
            "created": 0,
            "model": self.reply_model or body["model"],
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage,
        }

    def encode(self, answer: dict[str, Any]) -> bytes:
        """The answer's bytes; with ``raw_content``, those bytes stand for the reply's text."""
        data = json.dumps(answer).encode()
        if self.raw_content is None or "choices" not in answer:
            return data
        marker = json.dumps(answer["choices"][0]["message"]["content"]).encode()
        return data.replace(marker, b'"' + self.raw_content + b'"', 1)


class _QuietServer(ThreadingHTTPServer):
    """A client that hung up (a killed worker, a call past its deadline) is no error of the
    server's, nor is the half of a request body it sent."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, json.JSONDecodeError)):
            super().handle_error(request, client_address)


def _handler(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            body["_authorization"] = self.headers.get("Authorization")
            if server.html:
                page = b"<!doctype html><title>Sign in</title><p>Please sign in to the network."
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            if server.unavailable:
                self._send(
                    503, {"error": {"message": "injected: the server is unavailable", "type": "injected"}}
                )
                return
            with lock:
                refused = server.serves_at_once is not None and server.working >= server.serves_at_once
                server.limited += refused
                server.working += not refused
            if refused:
                self._send(
                    429, {"error": {"message": "injected: rate limited", "type": "injected"}}, retry_after="1"
                )
                return
            try:
                self._answer(body)
            finally:
                with lock:
                    server.working -= 1

        def _answer(self, body: dict[str, Any]) -> None:
            time.sleep(server.delay_s)
            with lock:
                server.received += 1
                if server.keep_requests:
                    server.requests.append(body)
                    server.paths.append(self.path)
                status, answer = server.respond(body)
            if server.hang:
                server.stopped.wait()
            elif server.drip_s:
                self._drip(server.encode(answer))
            else:
                self._send(status, server.encode(answer))

        def _drip(self, data: bytes) -> None:
            """One byte of the answer every ``drip_s`` seconds (a read timeout never fires)."""
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                for byte in data:
                    if server.stopped.wait(server.drip_s):
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
            except OSError:  # the client gave up and closed the connection
                return

        def _send(self, status: int, data: bytes | dict[str, Any], retry_after: str | None = None) -> None:
            data = data if isinstance(data, bytes) else json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if retry_after is not None:
                self.send_header("retry-after", retry_after)
            else:
                self.send_header("retry-after-ms", "10")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

    return Handler
