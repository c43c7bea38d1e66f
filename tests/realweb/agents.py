"""The scripted agent of the real-web runs: the oracle, with a model's pace."""

from __future__ import annotations

import time

from mmina.agents import AgentReply, OracleAgent
from mmina.observations.observation import Observation


class ThinkingOracle(OracleAgent):
    """Plays a task's reference script like the oracle, thinking before each action for the
    step's ``think`` seconds (as a model takes seconds per step: what the page does meanwhile —
    a timer's update, a pushed result, a toast going away — is what the recording saw)."""

    name = "thinking-oracle"

    def act(self, observation: Observation) -> AgentReply:
        if self._position < len(self._script):
            time.sleep(float(self._script[self._position].get("think", 0.0)))
        return super().act(observation)
