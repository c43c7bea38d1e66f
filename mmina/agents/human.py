"""The ``human`` agent: a person reads each observation in the terminal and types the action.

It produces human baselines with exactly the observations and action grammar a model gets.
The observation goes to stderr (stdout stays free for ``--format json``), one action line is
read from stdin and returned verbatim: the recorder parses it, so a mistyped line becomes that
step's action error and the episode goes on. End of input ends the episode as errored.

One person types for one episode at a time: do not combine it with ``--workers`` above 1
(worker processes have no terminal, so each of their episodes would end with "no more input").
"""

from __future__ import annotations

import sys
from typing import TextIO

from mmina.agents.prompts import ACTIONS
from mmina.agents.protocol import AgentReply, Handover
from mmina.errors import AgentError
from mmina.observations.observation import Observation
from mmina.tasks.task import Task

PROMPT = "action> "


class HumanAgent:
    """Shows the text observation and reads one action per step."""

    name = "human"
    uses_marks = False

    def __init__(self, stdin: TextIO, out: TextIO) -> None:
        self.stdin, self.out = stdin, out

    @classmethod
    def from_terminal(cls) -> HumanAgent:
        """Refuse early when there is no input to read actions from."""
        if sys.stdin is None or sys.stdin.closed or not sys.stdin.readable():
            raise AgentError("the human agent reads actions from standard input, which is not readable here")
        return cls(sys.stdin, sys.stderr)

    def reset(self, task: Task) -> None:
        self._print(
            f"\n=== task {task.task_id}: {task.intent}\n{ACTIONS}"
            "Type one action per step, e.g. click [12]; end of input (Ctrl-D) ends the episode."
        )

    def take_over(self, handover: Handover) -> None:
        """Say where the person takes over, and (unless hidden) the steps taken for them."""
        lines = [
            f"=== you take over at hop {handover.start_hop + 1} after {len(handover.actions)} step(s) "
            "replayed from a reference"
        ]
        if handover.show_actions:
            lines += [
                f"  {i}. {action} (on {url})"
                for i, (action, url) in enumerate(zip(handover.actions, handover.urls), start=1)
            ]
        self._print("\n".join(lines))

    def act(self, observation: Observation) -> AgentReply:
        self._print(render_observation(observation))
        return AgentReply(output=self._read_action())

    def _read_action(self) -> str:
        """The next non-empty line, without its line break; empty lines prompt again."""
        while True:
            self.out.write(PROMPT)
            self.out.flush()
            line = self.stdin.readline()
            if not line:
                raise AgentError("no more input")
            if line.strip():
                return line.rstrip("\r\n")

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


def render_observation(observation: Observation) -> str:
    """The step as text: objective, URL, tabs and the accessibility tree (no screenshots in a terminal)."""
    tabs = "\n".join(
        f"  [{i}] {t.title or t.url} - {t.url}{' (active)' if i == observation.active_tab else ''}"
        for i, t in enumerate(observation.tabs)
    )
    return (
        f"\n--- step {observation.step_index}\nOBJECTIVE: {observation.intent}\nURL: {observation.url}\n"
        f"OPEN TABS:\n{tabs}\nOBSERVATION:\n{observation.tree_text}"
    )
