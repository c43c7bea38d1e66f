"""A scripted key-point judge for the local OpenAI-compatible server (``FakeOpenAI(script=...)``).

It reads the three questions of ``keypoints`` as a model would see them and answers with the
JSON asked for: one key point per hop (reach its site), relevance 5 for the steps whose URL
holds the hop's site keyword (1 for the others), and a verdict per hop that passes when a
shown step's URL holds that keyword. Any answer can be replaced (``replies``: a function of
the question's kind and hop, returning the reply text or None for the default) to script
malformed, refused or contrary replies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.fake_openai import image_urls, last_user_text

Override = Callable[[str, int | None], str | None]


def sites(text: str) -> list[str]:
    found = re.search(r"^Hops \((\d+)\): (.*)$", text, re.MULTILINE)
    assert found, text
    return [part.split(". ", 1)[1] for part in found.group(2).split("; ")]


def steps(text: str) -> dict[int, str]:
    """Step number → URL, of the steps the question lists."""
    return {int(n): url for n, url in re.findall(r"^Step (\d+): (\S+)", text, re.MULTILINE)}


class KeypointJudge:
    """``script`` for FakeOpenAI: answers the key-point judge's questions, records what it saw."""

    def __init__(self, replies: Override | None = None) -> None:
        self.replies = replies
        self.asked: list[tuple[str, int | None, dict[str, Any]]] = []

    def __call__(self, body: dict[str, Any]) -> str | None:
        text = last_user_text(body)
        kind, hop = self.kind(text)
        if kind is None:
            return None
        self.asked.append((kind, hop, body))
        scripted = self.replies(kind, hop) if self.replies else None
        if scripted is not None:
            return scripted
        return {"key_points": self.key_points, "relevance": self.relevance, "verdict": self.verdict}[kind](
            text, hop
        )

    @staticmethod
    def kind(text: str) -> tuple[str | None, int | None]:
        if "List, for each of the" in text:
            return "key_points", None
        if "rate how strongly each step's screenshot" in text:
            return "relevance", None
        found = re.search(r"^This is hop (\d+) of", text, re.MULTILINE)
        return ("verdict", int(found.group(1))) if found else (None, None)

    def key_points(self, text: str, hop: int | None) -> str:
        return json.dumps(
            {
                "hops": [
                    {"hop": i + 1, "key_points": [f"reach the {site} site"]}
                    for i, site in enumerate(sites(text))
                ]
            }
        )

    def relevance(self, text: str, hop: int | None) -> str:
        entries = [
            {"hop": i + 1, "step": n, "score": 5 if site in url else 1}
            for i, site in enumerate(sites(text))
            for n, url in steps(text).items()
        ]
        return json.dumps({"relevance": entries})

    def verdict(self, text: str, hop: int | None) -> str:
        assert hop is not None
        site = sites(text)[hop - 1]
        shown = [n for n, url in steps(text).items() if site in url]
        if not shown:
            return json.dumps({"verdict": "fail", "reasons": f"no step shows the {site} site", "steps": []})
        return json.dumps(
            {"verdict": "pass", "reasons": f"step {shown[-1]} shows the {site} site", "steps": [shown[-1]]}
        )

    def images(self, kind: str = "verdict") -> list[list[str]]:
        """The image URLs of each question of that kind, in the order asked."""
        return [image_urls(body) for asked, _, body in self.asked if asked == kind]

    def verdict_images(self) -> dict[int | None, list[str]]:
        """The image URLs of each hop's verdict question (asked together: in any order)."""
        return {hop: image_urls(body) for asked, hop, body in self.asked if asked == "verdict"}
