"""The ``heuristic`` agent: a deterministic baseline that fails like a weak model, with no API key.

It reads the same observation every agent gets and follows a few fixed rules, so its
trajectories look like a weak model's: it searches for the wrong words, clicks the link that
merely looks closest to the question, leaves a site too early and answers with whatever page
line shares the most words with the question. Nothing is random: the same task on the same
pages always gives the same episode, so its results are a reproducible floor to compare with.

The rules, step by step:

1. **Hops and questions.** The task's hops are its ``procedure`` sites, worked on in order. A
   numbered intent ("(1) ... (2) ...") gives one question per hop; otherwise every hop gets
   the whole intent.
2. **Getting there.** When the page is not on the hop's site (its host does not name the site),
   it goes to the site: a URL written in the hop's question, else the fixture web's site for
   the hop's keyword; with neither, it moves on to the next hop.
3. **Searching.** On first reaching a site that has a search box, it types the hop's *query*
   and presses Enter: the longest run of capitalized words in the question that is not a
   site's name ("Calder Bay"), else (up to three of) the words after "search for" / "look up" /
   "find" up to the next punctuation or "and", else the question's longest word.
4. **Following links.** Otherwise it clicks the link it has not clicked yet whose words share
   the most with the question's (the first one on ties), if it shares at least one word; at
   most ``MAX_CLICKS`` links per hop.
5. **Moving on.** When nothing is left to do on a site, it notes the hop's answer (rule 6) and
   goes on to the next hop; after the last it stops with its notes joined by "; ".
6. **Answering.** A hop's answer is the text of the page line sharing the most words with the
   question — among lines with a digit when the question asks for a number, amount, price,
   time or date — or nothing when no line shares a word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from mmina.actions.grammar import Action, ActionKind
from mmina.agents.prompts import FIXTURE_WEBSITES
from mmina.agents.protocol import AgentReply, Handover
from mmina.observations.observation import Element, Observation, tree_lines
from mmina.tasks.task import Task

MAX_CLICKS = 2
STOP_WORDS = frozenset(
    "a an and are as at be by do does did for from has have how in is it its of on or the then that this these "
    "those to was were what when where which who whom why with you your use open find look up list search site "
    "page answer report step steps following order there their them into out about each both every than one all "
    "tell give show write separated semicolon question questions".split()
)
NUMBER_HINTS = (
    "how many",
    "how much",
    "how long",
    "price",
    "cost",
    "number",
    "what time",
    "when",
    "date",
    "year",
    "rate",
    "total",
    "digits",
    "count",
)
ANSWER_ROLES = (
    "paragraph",
    "cell",
    "listitem",
    "heading",
    "text",
    "generic",
    "term",
    "definition",
    "strong",
    "rowheader",
    "columnheader",
    "caption",
    "figure",
    "img",
)
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'&.-]*")
_URL = re.compile(r"https?://[^\s)\"']+")
_PART = re.compile(r"\((\d+)\)\s*")
_AFTER = re.compile(r"\b(?:search for|look up|find)\s+(?:the\s+|a\s+|an\s+)?([^.,;:?()]+)", re.I)


def words(text: str) -> list[str]:
    """Lower-case content words of a text (stop words and one- or two-letter words left out)."""
    found = (w.strip(".'-&").lower() for w in _WORD.findall(text))
    return [w for w in found if len(w) > 2 and w not in STOP_WORDS]


def overlap(text: str, question: set[str]) -> int:
    return len(set(words(text)) & question)


def questions(intent: str, hops: int) -> list[str]:
    """One question per hop: the intent's numbered parts when it has one per hop, else the intent."""
    parts = [p.strip() for p in _PART.split(intent)[2::2]]
    return parts if len(parts) == hops else [intent] * hops


def site_for(keyword: str, question: str) -> str | None:
    """Where a hop's site is: a URL in its question, else the fixture web's site for its keyword."""
    written = _URL.search(question)
    if written:
        return written.group(0).rstrip(".,;")
    for url, _brand in FIXTURE_WEBSITES:
        label = (urlsplit(url).hostname or "").split(".")[0]
        if label.startswith(keyword) or keyword.startswith(label) or (keyword == "kiwix" and label == "wiki"):
            return url
    return None


BRAND_WORDS = frozenset(w for _url, brand in FIXTURE_WEBSITES for w in words(brand)) | {"wiki"}


def query(question: str) -> str:
    """What to type into a search box for this question (rule 3)."""
    runs = re.findall(r"\b[A-Z][\w'&-]*(?:\s+[A-Z][\w'&-]*){0,3}", question)
    names = [" ".join(r.split()) for r in runs if set(words(r)) - BRAND_WORDS and words(r)]
    if names:
        return max(names, key=lambda n: (len(n.split()), -names.index(n)))
    after = _AFTER.search(question)
    wanted = words(re.split(r"\s+and\s+", after.group(1))[0]) if after else []
    if wanted:
        return " ".join(wanted[:3])
    return max(words(question) or [""], key=len)


def page_lines(tree_text: str) -> list[str]:
    """The texts of the page's lines that could hold an answer (rule 6)."""
    lines = []
    for _, line in tree_lines(tree_text):
        text = (line.value or line.name).strip() if line.role in ANSWER_ROLES else ""
        if text:
            lines.append(text)
    return lines


def best_line(tree_text: str, question: str) -> str:
    """The page line sharing the most words with the question (a line with a digit for number questions)."""
    wanted = set(words(question))
    lines = page_lines(tree_text)
    if any(hint in question.lower() for hint in NUMBER_HINTS):
        lines = [line for line in lines if re.search(r"\d", line)] or lines
    scored = [(overlap(line, wanted), -index, line) for index, line in enumerate(lines)]
    best = max(scored, default=(0, 0, ""))
    return best[2] if best[0] > 0 else ""


@dataclass
class _Hop:
    keyword: str
    question: str
    site: str | None
    went: bool = False
    searched: bool = False
    clicked: list[str] = field(default_factory=list)


class HeuristicAgent:
    """The rules of the module docstring; ``act`` returns one action of the grammar per step."""

    name = "heuristic"
    uses_marks = False

    def __init__(self) -> None:
        self._hops: list[_Hop] = []
        self._current = 0
        self._notes: list[str] = []

    def reset(self, task: Task) -> None:
        keywords = [h.keyword for h in task.hops] or ["page"]
        asked = questions(task.intent, len(keywords))
        self._hops = [_Hop(k, q, site_for(k, q)) for k, q in zip(keywords, asked)]
        self._current, self._notes = 0, []

    def take_over(self, handover: Handover) -> None:
        """Start at the hop handed over (the earlier hops are done; it took no notes on them)."""
        self._current = min(handover.start_hop, len(self._hops))

    def act(self, observation: Observation) -> AgentReply:
        return AgentReply(output=self._next(observation).render())

    def _next(self, observation: Observation) -> Action:
        while self._current < len(self._hops):
            hop = self._hops[self._current]
            action = self._on_hop(hop, observation)
            if action is not None:
                return action
            self._notes.append(best_line(observation.tree_text, hop.question))
            self._current += 1
        return Action(ActionKind.STOP, text="; ".join(note for note in self._notes if note))

    def _on_hop(self, hop: _Hop, observation: Observation) -> Action | None:
        """The hop's next action, or None when the agent is done with it (rules 2-4)."""
        if not _on_site(hop, observation.url):
            if hop.site is None or hop.went or hop.searched or hop.clicked:
                return None
            hop.went = True
            return Action(ActionKind.GOTO, url=hop.site)
        box = _search_box(observation.elements)
        if box is not None and not hop.searched:
            hop.searched = True
            return Action(ActionKind.TYPE, element_id=box.id, text=query(hop.question), press_enter=True)
        hop.searched = True
        link = _best_link(observation.elements, hop)
        if link is None or len(hop.clicked) >= MAX_CLICKS:
            return None
        hop.clicked.append(link.name)
        return Action(ActionKind.CLICK, element_id=link.id)


def _on_site(hop: _Hop, url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    label = (urlsplit(hop.site).hostname or "").split(".")[0] if hop.site else hop.keyword
    return bool(host) and (label in host or hop.keyword in url.lower())


def _search_box(elements: list[Element]) -> Element | None:
    return next(
        (
            e
            for e in elements
            if e.role in ("searchbox", "textbox", "combobox")
            and ("search" in e.name.lower() or e.role == "searchbox")
        ),
        None,
    )


def _best_link(elements: list[Element], hop: _Hop) -> Element | None:
    wanted = set(words(hop.question))
    scored = [
        (overlap(e.name, wanted), -i, e)
        for i, e in enumerate(elements)
        if e.role == "link" and e.name and e.name not in hop.clicked
    ]
    best = max(scored, default=None, key=lambda s: s[:2])
    return best[2] if best is not None and best[0] > 0 else None
