"""User-style agents (the ``module:Class`` protocol) used by the recorder tests."""
from __future__ import annotations

from mmina.agents import AgentReply
from mmina.observation import Observation


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
        return AgentReply("Thinking... In summary, the next action I will perform is ```scroll [down]```",
                          prompt_tokens=10, completion_tokens=5, cost_usd=0.001)


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


PASSWORD = "hunter2-planted-91b7"


class PasswordTyper:
    """Signs in on the secrets test site by typing a password, then reads the order count."""

    def __init__(self) -> None:
        self.calls = 0

    def act(self, observation: Observation) -> str:
        self.calls += 1
        if self.calls == 1:
            return f"type [{observation.find('textbox', 'Password').id}] [{PASSWORD}] [0]"
        if self.calls == 2:
            return f"click [{observation.find('button', 'Log in').id}]"
        orders = next((line for line in observation.tree_text.splitlines() if "orders" in line), "")
        return f"stop [{orders.split(':')[-1].strip()}]"
