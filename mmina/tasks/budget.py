"""Episode budgets: the reasons an episode ends without the agent stopping."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    max_steps: int = 30
    max_repeats: int = 3
    max_unparsable: int = 3


@dataclass
class Budget:
    """Tracks one episode; ``exceeded`` names the stop reason once a limit is hit."""

    limits: Limits
    steps: int = 0
    _last_actions: list[str] = field(default_factory=list)
    _unparsable: int = 0

    def record(self, action: str | None) -> None:
        """Count a step; ``action`` is the canonical action text, None when unparsable."""
        self.steps += 1
        self._unparsable = self._unparsable + 1 if action is None else 0
        self._last_actions = (self._last_actions + [action])[-self.limits.max_repeats :] if action else []

    @property
    def exceeded(self) -> str | None:
        if self._unparsable >= self.limits.max_unparsable:
            return "unparsable_output"
        if len(self._last_actions) == self.limits.max_repeats and len(set(self._last_actions)) == 1:
            return "repeated_action"
        if self.steps >= self.limits.max_steps:
            return "max_steps"
        return None
