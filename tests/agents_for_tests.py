"""User-style agents (the ``module:Class`` protocol) used by the recorder tests."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from bench.cputree import command_line, kind_of, read_stat
from mmina.agents import AgentReply, OracleAgent
from mmina.observations.observation import Observation
from mmina.tasks.task import Task


class MissingThenStop:
    """Clicks an element that does not exist, then stops: the error must not end the episode."""

    def __init__(self) -> None:
        self.calls = 0

    def act(self, observation: Observation) -> str:
        self.calls += 1
        return "click [99999]" if self.calls == 1 else "stop [done]"


class Repeater:
    """Scrolls down forever; the repeated-action budget must end the episode."""

    name = "repeater"

    def reset(self, task) -> None:
        pass

    def act(self, observation: Observation) -> AgentReply:
        return AgentReply(
            output="Thinking... In summary, the next action I will perform is ```scroll [down]```",
            prompt_tokens=10,
            completion_tokens=5,
            cost_usd=0.001,
        )


class Babbler:
    """Never produces a parseable action."""

    def act(self, observation: Observation) -> str:
        return "I am not sure what to do."


class SecretVisitor:
    """Visits a URL carrying a token, then stops."""

    def __init__(self) -> None:
        self.calls = 0

    def act(self, observation: Observation) -> str:
        self.calls += 1
        if self.calls == 1:
            return "goto [http://shop.mmina.test/search?q=tea&api_key=sk-test-123]"
        return "stop [ok]"


class Crasher:
    """Raises from act(): the episode is recorded as an error and the run goes on."""

    def act(self, observation: Observation) -> str:
        raise ValueError("model endpoint exploded")


class Interrupter:
    """Takes one step, then the user presses Ctrl-C."""

    def __init__(self) -> None:
        self.calls = 0

    def act(self, observation: Observation) -> str:
        self.calls += 1
        if self.calls > 1:
            raise KeyboardInterrupt
        return "scroll [down]"


def descendants(pid: int) -> list[int]:
    """Child processes of ``pid``, recursively, from one reading of /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo += children.get(child, [])
    return found


def chromium_ticks(*kinds: str) -> int:
    """CPU ticks (of 10 ms) so far of this process's Chromium processes of these kinds (as the
    bench names them, ``bench.cputree.kind_of``: ``"gpu"``, ``"renderer"``), Linux only."""
    total = 0
    for pid in descendants(os.getpid()):
        stat = read_stat(pid)
        if stat is not None and kind_of(command_line(pid)) in kinds:
            total += stat.ticks
    return total


class BrowserKiller:
    """Kills this process's Chromium in its first episode (a browser crash); then just stops."""

    crashed = False

    def act(self, observation: Observation) -> str:
        if not BrowserKiller.crashed:
            BrowserKiller.crashed = True
            for pid in descendants(os.getpid()):
                if "chrom" in Path(f"/proc/{pid}/comm").read_text(errors="replace"):
                    os.kill(pid, signal.SIGKILL)
            return "scroll [down]"
        return "stop [alive]"


class WrongAnswer(OracleAgent):
    """Follows the oracle's script to every page, then answers wrong: hops pass, answers fail."""

    name = "wrong-answer"

    def act(self, observation: Observation) -> AgentReply:
        reply = super().act(observation)
        return AgentReply(output="stop [I do not know]") if reply.output.startswith("stop [") else reply


class Cheater:
    """Answers the task's reference keywords at once, visiting nothing: answers pass, hops fail."""

    name = "cheater"

    def reset(self, task: Task) -> None:
        self.answer = "; ".join(task.reference_answers.get("must_include") or [])

    def act(self, observation: Observation) -> str:
        return f"stop [{self.answer}]"


class SeededMistakes(OracleAgent):
    """The oracle with one seeded mistake per chosen task, made at a chosen hop.

    ``MISTAKES`` maps a task id to (hop, kind): the mistake starts at the first step at which
    ``hop`` hops are complete by the ``hops`` evaluator's rule (the step URL equals the hop's
    reference URL, the head hop only, one per step). Kinds: ``wrong_stop`` (stop with a wrong
    answer), ``babble`` (unparsable output until the budget ends it), ``wander`` (go to a site
    no hop of the task uses, then stop wrong), ``linger`` (scroll on the page that completed
    the hop until the repeated-action budget ends it), ``crash`` (scroll, then raise: an agent
    error), ``action_error`` (click an element that does not exist, then stop wrong),
    ``wrong_final`` (follow the script to the end, answer wrong). Every step reports 100
    prompt and 10 completion tokens costing $0.001.
    """

    name = "seeded-mistakes"
    MISTAKES: dict[str, tuple[int, str]] = {
        "normal/2": (0, "wrong_stop"),
        "normal/3": (0, "babble"),
        "normal/24": (1, "wander"),
        "normal/32": (1, "linger"),
        "normal/38": (2, "crash"),
        "multi567/1": (3, "action_error"),
        "multi567/4": (6, "wrong_final"),
    }
    SITES = ("http://video.mmina.test/", "http://food.mmina.test/", "http://social.mmina.test/")

    def reset(self, task: Task) -> None:
        super().reset(task)
        self.references = [h["reference_url"] for h in task.original["mmina_hops"]]
        self.done, self.mistake_steps = 0, 0
        self.mistake = self.MISTAKES.get(task.task_id)

    def act(self, observation: Observation) -> AgentReply:
        if self.done < len(self.references) and observation.url == self.references[self.done]:
            self.done += 1
        if self.mistake and self.done == self.mistake[0] and self.mistake[1] != "wrong_final":
            self.mistake_steps += 1
            output = self._mistake(self.mistake[1], self.mistake_steps)
        else:
            output = super().act(observation).output
            if self.mistake and self.mistake[1] == "wrong_final" and output.startswith("stop ["):
                output = "stop [I am not sure]"
        return AgentReply(output=output, prompt_tokens=100, completion_tokens=10, cost_usd=0.001)

    def _mistake(self, kind: str, count: int) -> str:
        if kind == "babble":
            return "I am not sure what to do."
        if kind == "linger":
            return "scroll [down]"
        if kind == "crash" and count > 1:
            raise RuntimeError("model endpoint exploded")
        if kind == "crash":
            return "scroll [down]"
        first = {"wander": f"goto [{self._elsewhere()}]", "action_error": "click [99999]"}.get(kind)
        return first if first and count == 1 else "stop [I could not find it]"

    def _elsewhere(self) -> str:
        hosts = {u.split("/")[2] for u in self.references}
        return next(s for s in self.SITES if s.split("/")[2] not in hosts)


class SeededMistakesB(SeededMistakes):
    """Another seeding for paired comparisons: wikipedia/1 now fails, normal/2 and normal/3 pass."""

    name = "seeded-mistakes-b"
    MISTAKES = {"wikipedia/1": (0, "wrong_stop")}


class CookieReader:
    """For the concurrency tests' cookie site: from ``/set?who=X`` go to ``/show`` and answer
    what that page shows of the context's cookie and storage. ``who=crash`` first sends the tab
    to ``chrome://crash`` (its renderer dies); ``who=raise`` makes the agent fail."""

    name = "cookie-reader"

    def reset(self, task: Task) -> None:
        self.crashed = False

    def act(self, observation: Observation) -> str:
        if "who=raise" in observation.url:
            raise RuntimeError("this agent fails on purpose")
        if self.crashed:
            return "stop [crashed]"
        if "who=crash" in observation.url:
            self.crashed = True
            return "goto [chrome://crash]"
        if "/show" not in observation.url:
            return f"goto [{observation.url.split('/set')[0]}/show]"
        shown = next((line for line in observation.tree_text.splitlines() if "who=" in line), "nothing")
        return (
            "stop [" + shown[shown.index("who=") :].rstrip('"') + "]" if "who=" in shown else "stop [nothing]"
        )


class CookieInterrupter(CookieReader):
    """:class:`CookieReader`, except that the user presses Ctrl-C during ``who=ben``'s episode."""

    def act(self, observation: Observation) -> str:
        if "who=ben" in observation.url:
            raise KeyboardInterrupt
        return super().act(observation)


class StateProbe:
    """Takes over a task of tests/state_site.py at hop 2: opens State (live), goes back twice
    through the prefix's history, then answers. Remembers what it was handed (class-wide: the
    recorder makes the instance)."""

    name = "state-probe"
    uses_marks = False
    handovers: list = []

    def reset(self, task: Task) -> None:
        self.calls = 0

    def take_over(self, handover) -> None:
        StateProbe.handovers.append(handover)

    def act(self, observation: Observation) -> str:
        self.calls += 1
        if self.calls == 1:
            link = observation.find("link", "State")
            return f"click [{link.id if link else 'missing'}]"
        return "go_back" if self.calls <= 3 else "stop [oolong]"
