"""JSON redacted in place: each changed value's literal is replaced where it stands, and every
other byte of the document — spacing, key order, escapes, number formats — is kept.

Re-serialising a whole document for one secret would change every byte around it (a source map,
an OpenAPI description, a translation file served to a page would no longer be what the browser
received). The caller decides per value (:data:`Leaf`); this module only finds the literals.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from mmina.redaction.secret_names import stronger

Leaf = Callable[[Any, "str | None"], Any]
"""(a decoded string, number, bool or null; the kind of secret name it sits under, None: none) → its new value."""
SecretKey = Callable[[str], "str | None"]
"""A key → the kind of secret name it is (``secret_names.name_kind``)."""

_TOKEN = re.compile(
    r'"(?:[^"\\]+|\\.)*"|-?(?:\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|Infinity)|NaN|true|false|null|[{}\[\]:,]'
)


def splice(text: str, leaf: Leaf, secret_key: SecretKey, inherit: bool = True) -> str:
    """``text`` (valid JSON) with every value ``leaf`` changes replaced by the new value's literal.
    A value is under the secret name of its own key, of a list's key it is in, and — with
    ``inherit`` — of any object's key it is nested in (``{"credentials": {"user": ...}}``)."""
    parts: list[str] = []
    done = 0
    stack: list[
        tuple[bool, str | None]
    ] = []  # per open container: (is an object, the secret name it is under)
    key, expecting_key = "", False
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token in "{[":
            is_object = token == "{"
            stack.append(
                (is_object, _secret_here(stack, key, secret_key) if inherit or not is_object else None)
            )
            expecting_key = token == "{"
        elif token in "}]":
            stack.pop()
        elif token == ",":
            expecting_key = bool(stack) and stack[-1][0]
        elif token != ":":
            if expecting_key:
                key, expecting_key = json.loads(token), False
                continue
            value = json.loads(token)
            new = leaf(value, _secret_here(stack, key, secret_key))
            if new != value or type(new) is not type(value):
                parts += [text[done : match.start()], _literal(new, token)]
                done = match.end()
    return "".join(parts) + text[done:] if parts else text


def _secret_here(stack: list[tuple[bool, str | None]], key: str, secret_key: SecretKey) -> str | None:
    """The kind of secret-named key a value at this point sits under (its own or an enclosing
    one, the stronger of the two), None: none."""
    if not stack:
        return None
    is_object, secret = stack[-1]
    return stronger(secret, secret_key(key) if is_object else None)


def _literal(value: Any, old: str) -> str:
    """The JSON literal of ``value``, ASCII-escaped when the literal it replaces was ASCII."""
    text = json.dumps(value, ensure_ascii=False)
    return json.dumps(value) if old.isascii() and not text.isascii() else text
