"""``blocked``: an outcome the environment decided, not the agent (issue 54).

A task the environment prevented is no evidence about the agent: its start page or a hop's site
was down, answered a server error, or put a CAPTCHA or a login wall the task did not ask for in
the agent's way. Such an episode is *blocked*: its verdicts stay as judged, but every table
counts it apart, in no rate (Online-Mind2Web's human labels call it "not executable").

The rules, each with the evidence it keeps (``episodes.blocked``, JSON), looked at when the
episode ends and only when it did not end with an answer that passed:

``start_page``
    The task's start page could not be opened: no connection, or an HTTP 5xx
    (``cannot open the start page https://shop.example/: HTTP 503``).
``site_down``
    The page the episode ended on is one of the task's sites (the start page's host, or a host
    named like one of its hops, e.g. ``en.wikipedia.org`` for a ``wikipedia`` hop) and it
    answered an HTTP 5xx, or Chromium could not reach it (connection refused, reset or timed out;
    a name that does not resolve is the agent's typing, not the site's failure).
``bot_wall``
    The page the episode ended on is a bot check: its title or text asks to prove the visitor is
    human ("Verify you are human", "unusual traffic", "Just a moment...", a CAPTCHA).
``login_wall``
    The page the episode ended on asks for a password, it was reached by a redirect to a login
    address (the agent asked for another page), and the task's intent says nothing of logging in.

Pure rules over what an episode stored: the recorder applies them as an episode ends.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

BLOCKED = "blocked"
"""The verdict ``episode_scores`` gives a blocked episode that did not pass (and a person's label may give)."""
START_PAGE, SITE_DOWN, BOT_WALL, LOGIN_WALL = "start_page", "site_down", "bot_wall", "login_wall"
RULES = (START_PAGE, SITE_DOWN, BOT_WALL, LOGIN_WALL)

UNREACHABLE = re.compile(
    r"net::ERR_(CONNECTION_(REFUSED|RESET|CLOSED|TIMED_OUT|FAILED)|ADDRESS_UNREACHABLE|"
    r"TIMED_OUT|EMPTY_RESPONSE|SSL_PROTOCOL_ERROR)"
)
"""Chromium's words for a site that did not answer (not ``NAME_NOT_RESOLVED``: a typo's)."""
AT_URL = re.compile(r"net::ERR_[A-Z_]+ at (\S+)")
BOT_CHECK = re.compile(
    r"\b(captcha|recaptcha|hcaptcha|verify (that )?you are (a )?human|are you a robot|"
    r"i'?m not a robot|unusual traffic|checking (if the site connection is secure|your browser)|"
    r"just a moment\.\.\.|attention required! \| cloudflare|press (&|and) hold)\b",
    re.IGNORECASE,
)
LOGIN_PATH = re.compile(r"(log-?in|sign-?in|signon|auth|account/?login|session/new)", re.IGNORECASE)
PASSWORD_FIELD = re.compile(
    r"textbox \"[^\"\n]*(password|passwort|mot de passe|contraseña)[^\"\n]*\"", re.IGNORECASE
)
ASKS_TO_LOG_IN = re.compile(r"\b(log ?in|sign ?in|sign up|account|password|credentials)\b", re.IGNORECASE)
MAX_TEXT = 300
"""At most this much of a page's text is kept as evidence."""


@dataclass(frozen=True, kw_only=True)
class FinalPage:
    """Where an episode ended: the page's URL, title and text (the accessibility tree), how its
    document answered (``status``; None: unknown or not loaded) and, when the last action could
    not reach it, Chromium's error (``net::ERR_...``); ``redirected_from``: the address the agent
    asked for, when a redirect brought it here."""

    url: str
    title: str = ""
    text: str = ""
    status: int | None = None
    error: str | None = None
    redirected_from: str | None = None


@dataclass(frozen=True)
class Blocked:
    """Which rule found the environment in the way, and its evidence."""

    rule: str
    url: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "url": self.url, **self.evidence}


def start_page_blocked(url: str, status: int | None, error: str | None) -> Blocked:
    """The start page could not be opened (``status``: its 5xx; ``error``: Chromium's)."""
    return Blocked(
        START_PAGE, url, {k: v for k, v in (("status", status), ("error", error)) if v is not None}
    )


def task_hosts(start_urls: Sequence[str]) -> frozenset[str]:
    return frozenset(host for host in (urlsplit(u).hostname for u in start_urls) if host)


def on_task_site(url: str, hosts: frozenset[str], hop_keywords: Sequence[str]) -> bool:
    """Whether ``url`` is one of the task's sites: a start page's host, or a host that names a hop."""
    host = urlsplit(url).hostname or ""
    return bool(host) and (host in hosts or any(k and k.lower() in host.lower() for k in hop_keywords))


def blocked_at_end(
    page: FinalPage, intent: str, start_urls: Sequence[str], hop_keywords: Sequence[str]
) -> Blocked | None:
    """The rule (see the module) that finds the environment in the way where an episode ended, or None."""
    hosts = task_hosts(start_urls)
    if page.status is not None and page.status >= 500 and on_task_site(page.url, hosts, hop_keywords):
        return Blocked(SITE_DOWN, page.url, {"status": page.status, "title": page.title[:MAX_TEXT]})
    unreachable = UNREACHABLE.search(page.error or "")
    if unreachable is not None:
        target = AT_URL.search(page.error or "")  # Chromium names the address it could not reach
        url = target.group(1) if target else page.url
        if on_task_site(url, hosts, hop_keywords):
            return Blocked(SITE_DOWN, url, {"error": unreachable.group(0)})
    check = BOT_CHECK.search(page.title) or BOT_CHECK.search(page.text)
    if check is not None:
        return Blocked(BOT_WALL, page.url, {"matched": check.group(0), "title": page.title[:MAX_TEXT]})
    if (
        page.redirected_from is not None
        and LOGIN_PATH.search(urlsplit(page.url).path + "?" + urlsplit(page.url).query)
        and PASSWORD_FIELD.search(page.text)
        and not ASKS_TO_LOG_IN.search(intent)
    ):
        return Blocked(
            LOGIN_WALL, page.url, {"asked_for": page.redirected_from, "title": page.title[:MAX_TEXT]}
        )
    return None
