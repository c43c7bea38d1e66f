"""Secret redaction: what never reaches the store in clear (headers, credentials, typed passwords)."""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "[REDACTED]"
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key",
     "x-auth-token", "x-csrf-token", "x-xsrf-token", "openai-organization"}
)
_SECRET_FIELD = re.compile(r"pass(word|wd)?|pwd|secret|token|api[-_]?key|auth|session|credential", re.I)


def is_secret_field(name: str) -> bool:
    return bool(_SECRET_FIELD.search(name))


def redact_headers(headers: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": n, "value": REDACTED if n.lower() in SECRET_HEADERS else v} for n, v in headers]


def redact_url(url: str) -> str:
    """Secret-looking query parameters (``token=``, ``api_key=``) get a redacted value."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(is_secret_field(k) for k, _ in pairs):
        return url
    query = urlencode([(k, REDACTED if is_secret_field(k) else v) for k, v in pairs])
    return urlunsplit(parts._replace(query=query))


def redact_body(body: str, mime_type: str) -> str:
    """Redact secret-looking fields of form and JSON request bodies."""
    if "x-www-form-urlencoded" in mime_type:
        pairs = parse_qsl(body, keep_blank_values=True)
        return urlencode([(k, REDACTED if is_secret_field(k) else v) for k, v in pairs])
    if "json" in mime_type:
        try:
            return json.dumps(_redact_json(json.loads(body)))
        except ValueError:
            return body
    return body


def _redact_json(value: object) -> object:
    if isinstance(value, dict):
        return {k: REDACTED if is_secret_field(str(k)) else _redact_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_json(v) for v in value]
    return value


def scrub(text: str | None, secrets: Iterable[str]) -> str | None:
    """Replace every occurrence of known secret values (e.g. typed passwords) in ``text``."""
    if not text:
        return text
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


_URL = re.compile(r"""https?://[^\s'"<>\]\[)]+""")


def redact_urls_in(text: str | None) -> str | None:
    """Redact secret query parameters of every URL inside free text (actions, model output, trees)."""
    if not text or "?" not in text:
        return text
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def clean_text(text: str | None, secrets: Iterable[str]) -> str | None:
    """Everything mmina stores as text passes here: typed secrets and URL credentials removed."""
    return redact_urls_in(scrub(text, secrets))
