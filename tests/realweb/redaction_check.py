"""Pass real code through the redactor in every way the recorder does, and say what changed.

The recorder (``mmina/recorder/har.py``) gives every response body to one episode's
:class:`~mmina.redaction.redact.Redactor` twice: to learn the secrets it holds (``learn_body``), then to
redact it (``body``: the structural rules, then every secret the episode learned scrubbed). A
file of the corpus passes when, for each content type a server may send it with, nothing is
learned from it and its bytes come back identical, with a realistic episode's secrets already
learned (cookies, a bearer JWT, an API key in a URL, a JSON login reply, typed passwords — a
credential and words — and the environment's keys). Shared by ``tests/test_redaction_corpus.py``
and ``bench --only redaction``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mmina.redaction.redact import Redactor, configured_secrets
from tests.realweb.npm_corpus import mime_of

SESSION = "x8k2m9qz4w7r1t5y3u6i0o2p8a4s6d1f"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MiIsIm5hbWUiOiJBZGEifQ.Xq3vL9mN2bR7tY5wK8jH4gF6dS1aZ0cV"
)
EPISODE_ENV = {
    "OPENAI_API_KEY": "sk-proj-7Hq2Lm9Xv4Rt8Kw1Zp6Nc3Bd5Fg0Js",
    "DB_PASSWORD": "postgres",
    "SECRET_KEY": "django-insecure-3k9!x2@q7#m4",
    "HOME": "/root",
}
"""Keys a user's environment holds (a word among them: scrubbed from rows, never from bodies)."""
TYPED = ("Tr0ub4dor&3", "admin", "default", "1234")
"""Passwords typed into password fields: a credential, two words and a PIN."""
ALSO_SERVED_AS = ("text/plain; charset=utf-8",)
"""Besides its own type: what a server that does not know the file's extension may send."""


def episode_redactor() -> Redactor:
    """A redactor that learned a realistic episode's secrets through the recorder's own calls."""
    redactor = Redactor(configured_secrets(EPISODE_ENV))
    redactor.learn_headers(
        [
            ("Cookie", f"sessionid={SESSION}; csrftoken=Vb7Kq2Lx9Zt4Wn8Rm3Pc6Hd1Fy5Js0Ga; lang=en"),
            ("Authorization", f"Bearer {JWT}"),
            ("Set-Cookie", "XSRF-TOKEN=0f3a9c1e7b2d4f6a8c0e1b3d5f7a9c2e; Path=/"),
        ]
    )
    redactor.learn_text("https://api.example.com/v2/search?api_key=4f3c2a1b9e8d7c6b5a49f0e1&q=tea")
    redactor.learn_body(
        b'{"access_token": "Kp4Xw9Lm2Qz7Rt5Vn8Bc3Hd6Jf1Gs0Ya", "token_type": "bearer", '
        b'"refresh_token": "Mz8Qp3Lx6Wt1Rk9Vb4Nc7Hd2Jf5Gs0Ye"}',
        "application/json",
        response=True,
    )
    for text in TYPED:
        redactor.learn_secret(text)
    return redactor


def response_types(path: Path) -> tuple[str, ...]:
    return (mime_of(path), *ALSO_SERVED_AS)


@dataclass(frozen=True)
class Change:
    """One way a file did not pass: under which content type, and what happened."""

    path: Path
    mime: str
    what: str


@dataclass
class CorpusResult:
    files: int = 0
    bytes: int = 0
    changes: list[Change] = field(default_factory=list)
    cpu_s: float = 0.0
    """CPU seconds of the recorder's two calls per body (learn, redact) under each file's own type."""

    @property
    def files_changed(self) -> int:
        return len({c.path for c in self.changes})

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.cpu_s if self.cpu_s else 0.0


def check_corpus(files: Iterable[Path]) -> CorpusResult:
    """Every file under every type it may be served with (see the module)."""
    result = CorpusResult()
    for path in files:
        data = path.read_bytes()
        result.files, result.bytes = result.files + 1, result.bytes + len(data)
        for mime in response_types(path):
            started = time.process_time()
            result.changes += _check(path, data, mime)
            if mime == mime_of(path):
                result.cpu_s += time.process_time() - started
    return result


def _check(path: Path, data: bytes, mime: str) -> list[Change]:
    """The recorder's two calls on one body: nothing learned, the same bytes back."""
    redactor = episode_redactor()
    known = set(redactor.values)
    redactor.learn_body(data, mime, response=True)
    learned = sorted(redactor.values - known)
    redacted = redactor.body(data, mime)
    changes = [Change(path, mime, f"learned {learned[:3]}")] if learned else []
    if redacted != data:
        changes.append(Change(path, mime, f"changed: {len(data)} bytes → {len(redacted)}"))
    return changes
