"""The six-step episode of the issue as a scripted agent (``--agent tests.independent_site.agent:SixSteps``).

click Catalog, go_back, click Today's deals (through the 302 -> 301 chain), go_back, type a
search and press Enter (the POST form with its CSRF field), stop.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.independent_site.server import HOST

SCRIPT = [
    {"action": "click", "target": {"role": "link", "name": "Catalog"}},
    {"action": "go_back"},
    {"action": "click", "target": {"role": "link", "name": "Today's deals"}},
    {"action": "go_back"},
    {
        "action": "type",
        "target": {"role": "searchbox", "name": "Search the shop"},
        "text": "oolong",
        "enter": True,
    },
    {"action": "stop", "answer": "Oolong Breeze and Oolong Reserve"},
]


class SixSteps:
    """Plays ``SCRIPT`` on whatever the observation shows (elements found by role and name)."""

    name = "six-steps"
    uses_marks = False

    def reset(self, task: object) -> None:
        self.position = 0

    def act(self, observation) -> str:
        step = SCRIPT[self.position]
        self.position += 1
        kind = step["action"]
        if kind == "go_back":
            return "go_back"
        if kind == "stop":
            return f"stop [{step['answer']}]"
        element = observation.find(step["target"]["role"], step["target"]["name"])
        element_id = element.id if element else "missing"
        if kind == "click":
            return f"click [{element_id}]"
        return f"type [{element_id}] [{step['text']}] [press_enter_after={int(step['enter'])}]"


def task(script: list[dict] | None = None) -> dict:
    """The episode as an MMInA task (with the same steps as an oracle ``reference_script``)."""
    return {
        "task_id": 1,
        "intent": "Look at the catalog and today's deals of the Corner Tea Shop, then search it for oolong teas. "
        "Which oolong teas does it sell?",
        "start_url": f"http://{HOST}/",
        "eval": {
            "eval_types": ["string_match"],
            "reference_answers": {"must_include": ["Oolong"]},
            "reference_url": f"http://{HOST}/search",
            "program_html": [],
            "string_note": "",
            "reference_answer_raw_annotation": "Oolong Breeze, Oolong Reserve",
        },
        "cnt_hop": 2,
        "procedure": ["shop", "end"],
        "reference_script": script or SCRIPT,
    }


def write_task(folder: Path, script: list[dict] | None = None) -> Path:
    """The task as ``folder/indie/1.json`` (a one-task MMInA suite); returns the suite folder."""
    path = folder / "indie" / "1.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(task(script), indent=2))
    return folder / "indie"
