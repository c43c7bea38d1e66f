"""Where an agent may take the browser: the web (``http:``, ``https:``) and ``about:blank``.

Everything else — ``file:`` (the machine's own files), ``chrome:`` and other ``about:`` pages
(the browser's internals), ``data:``, ``blob:``, ``view-source:``, ``filesystem:`` ... — is
refused unless the user allows the scheme (``mmina record --allow-scheme file``), except
``javascript:``: such a URL is no place to go but a script run in the page, outside the action
grammar, so no setting allows it. The agent's ``goto`` is checked
before the browser is asked anything (a refused ``javascript:`` URL never runs), and every tab
of an episode is checked again when it lands somewhere (so a page cannot take it to a local
file either). Pure: the recorder's acting and tab modules apply it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from mmina.errors import MminaError

WEB_SCHEMES = frozenset({"http", "https"})
BLANK = "about:blank"
PAGE_SCHEMES = frozenset({"blob", "chrome-error"})
"""What a page may land on by itself beyond the web: ``blob:`` URLs it made from its own data, and
Chromium's error page (``chrome-error://chromewebdata/``, shown for a failed navigation)."""
NEVER_ALLOWED = {
    "javascript": "a javascript: URL runs a script in the page instead of going to a page, which no action "
    "may do"
}
"""Schemes no ``--allow-scheme`` allows, with why."""
_SCHEME_NAME = re.compile(r"[a-z][a-z0-9+.-]*")
_IGNORED = re.compile(r"[\t\n\r]")
_EDGES = "".join(chr(c) for c in range(0x21))


def scheme_of(url: str) -> str:
    """The URL's scheme as a browser reads it (lower case; tabs and newlines anywhere and
    control characters or spaces around it ignored, as the URL standard says); "" for none."""
    text = _IGNORED.sub("", url).strip(_EDGES)
    scheme, colon, _ = text.partition(":")
    return scheme.lower() if colon and _SCHEME_NAME.fullmatch(scheme.lower()) else ""


def is_blank(url: str) -> bool:
    text = _IGNORED.sub("", url).strip(_EDGES).lower()
    return text == BLANK or text.startswith((BLANK + "#", BLANK + "?"))


def refusal(url: str, allowed: Iterable[str] = (), also: Iterable[str] = ()) -> str | None:
    """Why navigating to ``url`` is refused, or None when it is allowed: the web, ``about:blank``,
    the schemes the user ``allowed`` and those ``also`` allowed where the check is made."""
    scheme = scheme_of(url)
    allowable = scheme in {*allowed, *also} and scheme not in NEVER_ALLOWED
    if scheme in WEB_SCHEMES or is_blank(url) or allowable:
        return None
    shown = url if len(url) <= 80 else url[:77] + "..."
    if not scheme:
        return f"{shown!r} is not an absolute URL (give http:// or https://)"
    if scheme in NEVER_ALLOWED:
        why = NEVER_ALLOWED[scheme]
        return f"navigation to {scheme}: is refused ({shown!r}): {why} (goto takes a page's URL)"
    return (
        f"navigation to {scheme}: is refused ({shown!r}): agents stay on the web (http, https, about:blank; "
        f"allow more with --allow-scheme {scheme})"
    )


def is_web_url(url: str) -> bool:
    """An absolute http(s) URL with a host (a malformed one, such as ``http://[::1``, is not)."""
    try:
        parts = urlsplit(url)
        return parts.scheme in WEB_SCHEMES and bool(parts.hostname)
    except ValueError:
        return False


def check_schemes(schemes: Iterable[str]) -> tuple[str, ...]:
    """The schemes a user allows, lower case; a name that is no scheme is an error."""
    names = tuple(dict.fromkeys(s.strip().lower().rstrip(":") for s in schemes))
    bad = [n for n in names if not _SCHEME_NAME.fullmatch(n)]
    if bad:
        raise MminaError(
            f"not a URL scheme: {bad[0]!r} (a scheme is a letter, then letters, digits, '+', '-' or '.')"
        )
    never = [n for n in names if n in NEVER_ALLOWED]
    if never:
        raise MminaError(f"the {never[0]}: scheme cannot be allowed: {NEVER_ALLOWED[never[0]]}")
    return names
