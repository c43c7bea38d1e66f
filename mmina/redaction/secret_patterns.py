"""The patterns of the structural rules (``secret_rules.py``): what a URL, a parameter, a quoted
pair, a script's ``key: "value"``, an auth scheme, a tag or a form field looks like in text, and
the small scanners that read around a match. Pure text: no decision about what is a secret.
"""

from __future__ import annotations

import re

SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
URL_REST = re.compile(r"""[^\s'"<>\[\]()`\\{}|^]+""")
"""What follows a URL's ``://`` (up to a space, a quote, a bracket...)."""
SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_MARKER = r"\[REDACTED\]|%5BREDACTED%5D|"
TEXT_PARAM = re.compile(
    rf"(?P<lead>[?#&](?:amp;)?)(?P<key>[A-Za-z0-9_%\-\[\]]+)=(?!=)"
    rf"(?P<value>{_MARKER}[^&#\s\"'<>\\`()\[\]{{}},;|]+)"
)
"""``?token=...`` or ``&token=...`` outside a whole URL; not ``&&keyCode==k`` (a script's comparison,
see :meth:`Rules._text_param`). The pattern starts with its lead character so a long text is
scanned at the speed of a character search."""
ASSIGNMENT = re.compile(
    rf"(?<![\w.\-?&#%\[/])(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{{0,63}})=(?P<value>{_MARKER}[^\s&#?\"'<>,;)\]}}]+)"
)
"""``password=hunter2`` in prose, ``;jsessionid=...`` in a URL (not a ``/key=x/`` path segment)."""
_KEY = r"(?P<key>[A-Za-z0-9_.\-\[\] ]{1,64})"
QUOTED_PAIR = re.compile(  # "key": "value" (JSON, scripts), 'key': 'value' (Python reprs), "key": 12
    rf"""(?P<q>["']){_KEY}(?P=q)\s*:\s*(?:(?P<vq>["'])(?P<value>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)"""
    r"""|(?P<number>-?\d[\d.]*))"""
)
CODE_VALUE = re.compile(r"""[:=]\s*(?P<vq>["'`])(?P<value>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)""")
"""The value of ``{apiKey:"..."}`` or ``e.apiKey="..."`` (a script's object literal or assignment),
found from its ``:``/``=`` (the key is read backwards: :meth:`Rules._code_pairs`). In a response
body only, where the value must also look like a credential (``{token:"keyword"}`` in a grammar,
``a?b:"x"`` in a ternary stay)."""
IDENTIFIER_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$")
ESCAPED_PAIR = re.compile(  # \"key\":\"value\" (JSON inside a string)
    rf"""\\(?P<q>["']){_KEY}\\(?P=q)\s*:\s*\\(?P<vq>["'])(?P<value>(?:(?!\\(?P=vq))[^\n])*?)\\(?P=vq)"""
)
SAID = re.compile(
    r"""(?<![\w\-])(?P<key>[Pp]ass(?:word|wd|code|phrase)|PASSWORD|PIN|[Aa][Pp][Ii][ _-]?[Kk]ey|[Tt]oken|[Ss]ecret)"""
    r"""(?:\s+(?:is|was))?(?:\s*[:=]\s*|\s+)(?P<q>["'`]?)(?P<value>[^\s"'`\[\]]*[^\s"'`\[\].,;:!?)])(?P=q)"""
)
"""A secret given in a sentence (a task's intent: ``log in with the password Tr0ub4dor&3``):
prose only, and only a token (``the password you were given`` names none)."""
LABELLED = re.compile(r'"(?P<key>[^"\n]{1,64})": (?P<value>[^\n"]+)$', re.M)
"""An accessibility-tree field and its value (``- textbox "API key": sk-...``): prose only."""
AUTH_SCHEME = re.compile(r"\b(?P<scheme>[Bb]earer|Basic|BASIC|BEARER)\s+(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)")
AUTH_WORDS = ("earer", "EARER", "Basic", "BASIC")
"""Substrings without which :data:`AUTH_SCHEME` cannot match (a substring search is ~50x faster)."""
_TOKEN_LIKE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
TAG = re.compile(r"<(?:input|meta)\b[^>]*>", re.I)
ATTRIBUTE = re.compile(
    r"""(?P<name>[\w:-]+)\s*=\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s"'=<>`]+))"""
)
MULTIPART_FIELD = re.compile(
    r"""(?P<head>Content-Disposition:[^\r\n]*?\bname="(?P<name>[^"]*)"(?![^\r\n]*filename=)[^\r\n]*\r?\n"""
    r"""(?:[^\r\n]+\r?\n)*\r?\n)(?P<value>.*?)(?=\r?\n--)""",
    re.I | re.S,
)


def identifier_before(text: str, at: int) -> str:
    """The identifier ending just before ``at`` (spaces between skipped): ``apiKey`` in
    ``e.apiKey = "..."``; "" when there is none."""
    end = at
    while end > 0 and text[end - 1] in " \t":
        end -= 1
    start = end
    while start > 0 and text[start - 1] in IDENTIFIER_CHARS:
        start -= 1
    return text[start:end] if start < end and not text[start].isdigit() else ""


def scheme_start(text: str, at: int, floor: int) -> int | None:
    """Where the scheme ending at ``at`` (the ``://``) starts: the leftmost letter at a word
    boundary in the run of scheme characters before it (as ``\\b[A-Za-z][A-Za-z0-9+.-]*://``)."""
    start = at
    while start > floor and text[start - 1] in SCHEME_CHARS:
        start -= 1
    for position in range(start, at):
        before = text[position - 1] if position else " "
        if text[position].isascii() and text[position].isalpha() and not (before.isalnum() or before == "_"):
            return position
    return None


URL_LOOKBACK = 4096
"""How far before a parameter :func:`in_whole_url` looks for its URL's ``://`` (a parameter further
into a URL than this is read by the text rule too; the bound keeps a script full of ``?a=b`` cheap)."""


def in_whole_url(text: str, at: int) -> bool:
    """Whether position ``at`` of ``text`` is inside a whole URL (``scheme://`` and what follows up
    to a space, a quote, a bracket: :data:`URL_REST`), which the URL rule reads as a whole."""
    sep = text.rfind("://", max(0, at - URL_LOOKBACK), at)
    if sep < 0:
        return False
    rest = URL_REST.match(text, sep + 3)
    return rest is not None and rest.end() > at and scheme_start(text, sep, 0) is not None


def token_like(value: str) -> bool:
    """After ``Bearer`` in mmina's own texts: a token rather than a word (``Basic understanding``)."""
    classes = (
        any(c.islower() for c in value),
        any(c.isupper() for c in value),
        any(c.isdigit() for c in value),
        any(not c.isalnum() for c in value),
    )
    return sum(classes) >= 2 and not _TOKEN_LIKE.fullmatch(value)


def replace_group(m: re.Match[str], group: str, replacement: str) -> str:
    """The whole match with one group's text replaced."""
    start, end = m.span(group)
    whole = m.group(0)
    return whole[: start - m.start()] + replacement + whole[end - m.start() :]


def attribute_value(match: re.Match[str] | None) -> str:
    if match is None:
        return ""
    return next((match[g] for g in ("dq", "sq", "bare") if match[g] is not None), "")
