"""Secret redaction: what never reaches the store, or the terminal, in clear.

A :class:`Redactor` applies the structural rules of ``secret_rules.py`` (where a value is) and
scrubs every known secret value (what a value is). It knows two kinds:

* **credentials** (``secret_shapes.credential_shaped``: random-looking tokens, keys of a known
  format) found in a secret place anywhere in the episode (a token in one URL, a cookie, a JSON
  ``access_token``), typed, or configured: scrubbed from every row *and* every body;
* **other secrets by place** — a password typed into a password field, the value of a
  secret-named environment variable, a ``Basic`` password — that are words or short strings
  (``admin``, ``hunter2``): scrubbed from mmina's own rows (actions, model input and output,
  trees, answers, errors, the ``tasks`` row) and request bodies, never from response bodies,
  where the same word is code or text a page needs (a body keeps them only where the rules of
  ``secret_rules.py`` take them by place: a form's ``password=`` field, a JSON ``"password"``).

Identifiers, words and short strings found in secret places are never learned. docs/redaction.md
lists the rules for users.

Redaction is deterministic (one marker, no hashes: equal inputs give equal outputs, which the
replayer's matcher relies on: a recorded ``[REDACTED]`` matches any value) and idempotent
(redacting twice changes nothing more).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote_plus

from mmina.redaction.secret_names import is_secret_name
from mmina.redaction.secret_patterns import SCHEME
from mmina.redaction.secret_rules import BODY, MARKERS, REDACTED, STRICT, collecting, is_text_type
from mmina.redaction.secret_shapes import credential_shaped, variants

MIN_TYPED = 4
"""Secrets by place (typed, configured) at least this long are scrubbed from rows; shorter ones
only in their ``[text]`` form (how an action shows what was typed)."""


class Redactor:
    """The structural rules plus every known secret value, scrubbed wherever it may appear.

    One per episode: it learns from the whole episode first (steps, traffic, typed text,
    the environment), then redacts every row and blob, so a token seen in one place is gone
    from all of them. ``secrets`` are secrets by place (see :meth:`learn_secret`), e.g. the
    environment's keys. With none it is the structural rules alone.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.values: set[str] = set()
        """Credentials: scrubbed from rows and every body."""
        self.row_values: set[str] = set()
        """Secrets that are words or short strings: scrubbed from rows and request bodies only."""
        self._bracketed: set[str] = set()
        self._patterns: dict[tuple[bool, bool], re.Pattern[Any]] = {}
        self._clean: set[tuple[bytes, str]] = set()
        """Response bodies the rules found no secret in (by digest and type): redacting one
        skips the rules (the recorder reads every body twice, to learn, then to redact)."""
        for secret in secrets:
            self.learn_secret(secret)

    # learning

    def learn(self, values: Iterable[str]) -> None:
        """Values found in secret places: the credential-shaped ones are scrubbed everywhere
        (an identifier or a word in a secret place is not learned)."""
        self._add(self.values, (v for value in values if credential_shaped(value) for v in variants(value)))

    def learn_secret(self, text: str) -> None:
        """A secret by place whatever its shape (typed into a secret field, an environment key):
        a credential everywhere; otherwise in rows once at least :data:`MIN_TYPED` characters
        long, shorter only as ``[text]`` (how an action shows it)."""
        if not text or "REDACTED" in text:
            return
        if credential_shaped(text):
            self.learn([text])
        elif len(text) >= MIN_TYPED:
            self._add(self.row_values, variants(text))
        else:
            self._bracketed.add(f"[{text}]")
            self._add(self.row_values, {f"[{text}]"})

    def _add(self, known: set[str], values: Iterable[str]) -> None:
        new = {v for v in values if v and v not in MARKERS} - known
        if new:
            known |= new
            self._patterns.clear()

    def learn_text(self, text: str | None) -> None:
        """Secrets the structural rules find in a text (URLs, pairs, credentials)."""
        if text:
            rules, found = collecting()
            rules.text(text)
            self.learn(found)

    def learn_row(self, row: Mapping[str, Any]) -> None:
        """Secrets in every text of a row (nested lists and structs included)."""
        for text in _texts(row):
            self.learn_text(text)

    def learn_headers(self, headers: Iterable[tuple[str, str]]) -> None:
        """Credential values of headers: whole, the part after the scheme, cookie values; a
        ``Basic`` credential's password is a secret by place whatever its shape."""
        rules, found = collecting()
        for name, value in headers:
            rules.header(name, value)
        self.learn(found)
        for part in (p for value in found for p in _basic_parts(value)):
            self.learn_secret(part)

    def learn_body(self, data: bytes, mime: str, response: bool) -> None:
        """Secrets a text body holds by its structure (a JSON ``access_token``, a form password)."""
        if data and is_text_type(mime):
            rules, found = collecting(strict=not response)
            rules.body(data.decode("utf-8", "surrogateescape"), mime)
            self.learn(found)
            if response and not found:
                self._clean.add(_digest(data, mime))

    # redacting

    def text(self, text: str | None, prose: bool = True) -> str | None:
        """A row's text: the structural rules (see :meth:`Rules.text`), then every known secret
        scrubbed (last: a structural rule leaves the marker URLs use)."""
        if not text:
            return text
        return self.scrub(STRICT.text(text, prose))

    def traffic_text(self, text: str) -> str:
        """A URL of the traffic (a request's, a redirect's), which a replay matches: the
        structural rules and the credentials (a typed word stays: ``/admin/`` is a path)."""
        return self.scrub(STRICT.text(text, prose=False), everywhere=True) if text else text

    def json_text(self, text: str) -> str:
        return self.scrub(STRICT.json_text(text))

    def value(self, value: Any) -> Any:
        """A JSON-like value (a model request's parameters, a configuration)."""
        return self._scrub_strings(STRICT.json_value(value))

    def headers(self, headers: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
        """Header pairs as the store keeps them (``{"name", "value"}``), redacted; a replay
        serves them, so of the known values only the credentials are scrubbed."""
        return [{"name": n, "value": self.scrub(STRICT.header(n, v), everywhere=True)} for n, v in headers]

    def body(self, data: bytes, mime: str, response: bool = True) -> bytes:
        """A body blob: the structural rules on text bodies (a response body's take only
        credential-shaped values, see :class:`Rules`), then the known credentials scrubbed from
        any body (and, from a request body, every known secret); bytes that are not UTF-8 survive."""
        if data and is_text_type(mime) and not (response and _digest(data, mime) in self._clean):
            text = data.decode("utf-8", "surrogateescape")
            redacted = (BODY if response else STRICT).body(text, mime)
            data = data if redacted == text else redacted.encode("utf-8", "surrogateescape")
        return self.scrub_bytes(data, everywhere=response)

    def row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A store row: every text redacted (``*_json`` columns as JSON, ``*_headers`` as
        headers), nested lists and structs too; references (:data:`REFERENCES`) untouched."""
        return {k: v if k in REFERENCES else self._cell(k, v) for k, v in row.items()}

    def _cell(self, name: str, value: Any) -> Any:
        if isinstance(value, str):
            return self.json_text(value) if name.endswith("_json") else self.text(value)
        if name.endswith("_headers") and isinstance(value, list):
            return self.headers((h["name"], h["value"]) for h in value)
        if isinstance(value, list):
            return [self._cell(name, v) for v in value]
        if isinstance(value, dict):
            return self.row(value)
        return value

    def scrub(self, text: str, everywhere: bool = False) -> str:
        """Every known secret (longest first) replaced by :data:`REDACTED`; with ``everywhere``
        only the credentials (what may be scrubbed from what a replay serves)."""
        pattern = self._pattern(everywhere, False) if text else None
        return pattern.sub(self._replacement, text) if pattern else text

    def _replacement(self, match: re.Match[str]) -> str:
        """A short typed secret keeps its brackets (``type [7] [[REDACTED]]`` stays an action)."""
        return f"[{REDACTED}]" if match.group(0) in self._bracketed else REDACTED

    def scrub_bytes(self, data: bytes, everywhere: bool = True) -> bytes:
        """:meth:`scrub` for a body's bytes (by default the credentials only: a response body)."""
        pattern = self._pattern(everywhere, True) if data else None
        return pattern.sub(self._replacement_bytes, data) if pattern else data

    def _replacement_bytes(self, match: re.Match[bytes]) -> bytes:
        return (
            f"[{REDACTED}]".encode()
            if match.group(0).decode("utf-8", "surrogateescape") in self._bracketed
            else REDACTED.encode()
        )

    def _pattern(self, everywhere: bool, as_bytes: bool) -> re.Pattern[Any] | None:
        """The compiled trie of the known values of one tier (built once per set of values)."""
        values = self.values if everywhere else self.values | self.row_values
        if not values:
            return None
        key = (everywhere, as_bytes)
        if key not in self._patterns:
            pattern = literal_pattern(values)
            self._patterns[key] = re.compile(
                pattern.encode("utf-8", "surrogatepass") if as_bytes else pattern
            )
        return self._patterns[key]

    def _scrub_strings(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {k: self._scrub_strings(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrub_strings(v) for v in value]
        return value


def literal_pattern(values: Iterable[str]) -> str:
    """A regex matching any of ``values``, the longest where several start at one place, built
    as a trie: a page is scanned once however many secrets an episode learned (an alternation
    of hundreds of tokens sharing a prefix is ~40x slower)."""
    trie: dict[str, Any] = {}
    for value in values:
        node = trie
        for char in value:
            node = node.setdefault(char, {})
        node[""] = {}
    return _trie_pattern(trie)


def _trie_pattern(node: dict[str, Any]) -> str:
    """One trie node as a regex: a single path runs as literals (no recursion per character);
    an end inside a longer value makes the rest optional, greedily, so the longest value wins."""
    chain = ""
    while len(node) == 1 and "" not in node:
        char, node = next(iter(node.items()))
        chain += re.escape(char)
    branches = [re.escape(char) + _trie_pattern(child) for char, child in sorted(node.items()) if char]
    if not branches:
        return chain
    body = f"(?:{'|'.join(branches)})"
    return chain + (f"{body}?" if "" in node else body)


REFERENCES = frozenset(
    {
        "episode_id",
        "run_id",
        "task_id",
        "task_sha256",
        "task_suite_sha256",
        "screenshot",
        "screenshot_som",
        "final_screenshot",
        "model_input",
        "blob",
        "request_body",
        "response_body",
        "blob_packs",
        "worker",
        "prompt_sha256",
        "batch_id",
        "prefix_run",
        "prefix_episode",
    }
)
"""Columns that are ids and content hashes, not text: never rewritten (a scrubbed hash would
point nowhere)."""


def _digest(data: bytes, mime: str) -> tuple[bytes, str]:
    return hashlib.blake2b(data, digest_size=16).digest(), mime


def _texts(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)


def _basic_parts(value: str) -> list[str]:
    """A Basic credential's decoded ``user:password`` and its password."""
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return []
    return [decoded, decoded.partition(":")[2]] if ":" in decoded else []


# -- what the process was configured with -----------------------------------------------------

NOT_SECRET_ENV = frozenset({"PWD", "OLDPWD"})
"""Unix's working directories, not passwords (``pwd``)."""


def configured_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of secret-named environment variables (``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``,
    ``*_TOKEN``...) and the credentials of URLs in the environment (``OPENAI_BASE_URL`` with
    ``user:PASS@``, also as the ``Basic`` credential a client sends for it): an endpoint may
    echo them, and none of them belongs in a store. Paths (``SSH_AUTH_SOCK``) are not secrets."""
    environ = os.environ if environ is None else environ
    values = [
        v
        for k, v in environ.items()
        if k not in NOT_SECRET_ENV and is_secret_name(k) and not os.path.exists(v)
    ]
    return values + [s for v in environ.values() if "://" in v and "@" in v for s in userinfo_secrets(v)]


def userinfo_secrets(url: str) -> list[str]:
    """The secrets of a URL's userinfo: the password (or a lone user, a token), ``user:password``
    and its base64 (what an HTTP client sends as ``Authorization: Basic``)."""
    scheme = SCHEME.match(url)
    authority = url[scheme.end() :].partition("/")[0] if scheme else ""
    if "@" not in authority:
        return []
    userinfo = unquote_plus(authority.rpartition("@")[0])
    user, colon, password = userinfo.partition(":")
    return [password or user, userinfo, base64.b64encode(userinfo.encode()).decode()]


def redact_configured(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row written outside any episode (a run, a task): the structural rules and the
    configured secrets (see :meth:`Redactor.row`)."""
    return Redactor(configured_secrets()).row(row)


def redact_episode(
    episode: Mapping[str, Any], steps: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An episode written without traffic (an import): what its own rows show in secret places
    and the configured secrets, redacted from all of them."""
    steps = list(steps)
    redactor = Redactor(configured_secrets())
    for row in (episode, *steps):
        redactor.learn_row(row)
    return redactor.row(episode), [redactor.row(step) for step in steps]


def redact_message(text: str) -> str:
    """A message for the terminal (an error of the endpoint, the store...): the configured
    secrets and the structural rules but ``name=value`` (a message may say ``KEY=VALUE``)."""
    return Redactor(configured_secrets()).text(text, prose=False) or text


# -- typed text -------------------------------------------------------------------------------


def typed_text_is_secret(text: str, failed: bool, target_name: str | None) -> bool:
    """Whether the text of a ``type`` action is a secret: when the target as observed is named
    like a secret field (``Password``, ``API key``, ``PIN``), or when the action failed (its
    target was missing or not a field: mmina cannot tell where the text was headed) and the text
    looks like a credential — the ``5``, ``KYO`` or ``fahrenheit`` of a failed replay are not.
    Text typed into an ``<input type=password>`` is a secret too (``recorder/acting.py``
    reports it as it types)."""
    return is_secret_name(target_name or "") or failed and credential_shaped(text)


def is_secret_input(input_type: str, *names: str) -> bool:
    """An ``<input>`` whose value is a secret: ``type=password``, or a name, id or
    ``autocomplete`` that says so (``current-password``, ``api_key``)."""
    return input_type.lower() == "password" or any(is_secret_name(n) for n in names if n)
