"""Text that no UTF-8 can hold: lone surrogates (``\\ud83d`` in JSON, or a JavaScript string
cut in half), which Python strings allow and the store, the terminal and every HTTP body refuse.

Where they come from — a task file, a page's title, a model's reply — they are either replaced
by U+FFFD (:func:`valid_text`, for what mmina runs on: an intent, a task id) or kept, escaped as
the six characters ``\\ud83d`` (:func:`escaped`, for what mmina records).
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def escaped(text: str) -> str:
    """``text`` with every lone surrogate written as its escape (``\\ud83d``)."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def has_surrogate(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (dict keys included) holds a lone surrogate."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            todo += [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple)):
            todo += item
    return False


def mapped_text(value: Any, fix: Any = escaped) -> Any:
    """``value`` with ``fix`` applied to every string in it, dict keys included (the value
    itself when it holds no lone surrogate, the common case)."""
    if not has_surrogate(value):
        return value
    if isinstance(value, str):
        return fix(value)
    if isinstance(value, dict):
        return {fix(k) if isinstance(k, str) else k: mapped_text(v, fix) for k, v in value.items()}
    return type(value)(mapped_text(v, fix) for v in value)
