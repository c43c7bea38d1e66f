"""What an agent may be configured with: one frozen, picklable record for every built-in."""

from __future__ import annotations

from dataclasses import dataclass

from mmina.models.model_client import DEFAULT_CALL_S, DEFAULT_MAX_RETRIES, DEFAULT_PATIENCE_S, Deadlines

CAPTIONERS = ("none", "alt", "openai")
"""How in-view images are captioned (``--captioner``): not, by their alt text, or by a vision model."""
HISTORY_ACTIONS = 5
"""The most earlier actions the ``openai`` agent shows in a prompt."""


@dataclass(frozen=True)
class AgentSettings:
    """Everything an agent may be configured with (picklable, so workers can rebuild it).

    The store the agent may read (memory, the replay agent) is not a setting: it is handed
    to :func:`mmina.agents.registry.make_agent` as an open store.
    """

    run_id: str | None = None
    from_episode: str | None = None
    from_run: str | None = None
    model: str | None = None
    base_url: str | None = None
    input_mode: str = "text"
    memory: int = 0
    memory_by: str = "similarity"
    temperature: float = 0.0
    max_tokens: int = 1024
    price_input: float = 0.0
    price_output: float = 0.0
    max_retries: int = DEFAULT_MAX_RETRIES
    model_deadline_s: float = DEFAULT_CALL_S
    """The deadline of one model call, retries included (``mmina.models.model_client``)."""
    endpoint_patience_s: float = DEFAULT_PATIENCE_S
    """How long calls wait for an endpoint that is down for everyone (``mmina.models.endpoint_gate``)."""
    captioner: str = "none"
    caption_model: str | None = None
    error_rate: float = 0.0
    """The oracle's chance of dropping a step of its script (``--error-rate``: a noisy oracle)."""
    seed: int | None = None
    """Seeds an agent that samples, with each episode's own seed (``--seed``; ``mmina.agents.protocol``):
    the noisy oracle's draws (0 when None), the ``openai`` agent's ``seed`` parameter (sent only when set)."""
    show_prefix: bool = True
    """A hop-conditioned episode's agent is told the prefix's actions as its own earlier ones
    (False: ``--hide-prefix``; see :class:`mmina.agents.protocol.Handover`)."""

    @property
    def deadlines(self) -> Deadlines:
        """The deadline and retries of each model call the agent (or its captioner) makes."""
        return Deadlines(self.model_deadline_s, self.max_retries, self.endpoint_patience_s)
