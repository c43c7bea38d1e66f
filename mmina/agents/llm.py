"""The ``openai`` agent: an LLM or LMM behind any OpenAI-compatible endpoint picks each action.

The client comes from :mod:`mmina.models.model_client` (``--base-url``, else ``OPENAI_BASE_URL``;
``OPENAI_API_KEY``; 429 and 5xx retried with backoff, ``--model-retries``; each call within
``--model-deadline``). When it gives up, the agent raises :class:`AgentError`: the episode is
recorded as errored and the run goes on.
"""

from __future__ import annotations

from typing import Any

from mmina.actions.grammar import parse_agent_output
from mmina.agents import prompts
from mmina.agents.captions import AltTextCaptioner, Captioner, image_part
from mmina.agents.memory import RANKINGS, TrajectoryMemory
from mmina.agents.protocol import AgentReply, Handover
from mmina.agents.settings import HISTORY_ACTIONS, AgentSettings
from mmina.errors import AgentError, MminaError
from mmina.models.model_client import ModelClient, ModelError, ModelReply, require_api_key
from mmina.observations.observation import Observation
from mmina.store import Store
from mmina.tasks.task import Task

MAX_OBSERVATION_CHARS = 16_000


class OpenAIAgent:
    """Asks a chat model for each action with the paper's prompt; records its text, tokens and cost."""

    name = "openai"

    def __init__(
        self,
        settings: AgentSettings,
        client: ModelClient,
        captioner: Captioner | None = None,
        max_observation_chars: int = MAX_OBSERVATION_CHARS,
        store: Store | None = None,
    ) -> None:
        self.settings, self.client = settings, client
        self.captioner = captioner or AltTextCaptioner()
        self.max_observation_chars = max_observation_chars
        self.memory = (
            TrajectoryMemory(store, settings.memory, settings.memory_by, exclude_run=settings.run_id)
            if settings.memory
            else None
        )
        self._system = ""
        self._history: list[str] = []
        self._seed: int | None = None

    @property
    def uses_marks(self) -> bool:
        """Only the multimodal prompt shows the set-of-marks screenshot."""
        return self.settings.input_mode == "multimodal"

    @classmethod
    def from_settings(cls, settings: AgentSettings, store: Store | None = None) -> OpenAIAgent:
        """Check the settings before anything starts, so a mistake costs no browser and no store."""
        check_settings(settings)
        return cls(settings, client_for(settings), store=store)

    def seed_episode(self, seed: int) -> None:
        """With ``--seed N``, each episode's requests carry a ``seed`` of N, the task and the repeat
        (sampling then differs between repeats and repeats itself on a server that honours it)."""
        if self.settings.seed is not None:
            self._seed = (self.settings.seed * 1_000_003 + seed) & 0x7FFFFFFF

    def reset(self, task: Task) -> None:
        memory = self.memory.prompt_section(task) if self.memory else ""
        self._system = prompts.system_prompt(task, self.settings.input_mode, memory)
        self._history = []

    def take_over(self, handover: Handover) -> None:
        """The prefix's actions become its previous actions (as if it had taken them), unless
        ``--hide-prefix`` asks to leave them out of the prompt."""
        if handover.show_actions:
            self._history = [_history_entry(action) for action in handover.actions]

    def act(self, observation: Observation) -> AgentReply:
        request = self.request(observation)
        reply = self._complete(request)
        self._history.append(_history_entry(reply.text))
        return self._reply(reply, request)

    def request(self, observation: Observation) -> dict[str, Any]:
        """The keyword arguments of this step's ``chat.completions.create`` call (stored with the step)."""
        request = {
            "model": self.settings.model,
            "messages": self.messages(observation),
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        return request if self._seed is None else {**request, "seed": self._seed}

    def messages(self, observation: Observation) -> list[dict[str, Any]]:
        """System instructions, the few-shot exchanges, then this step's observation."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self._system}]
        for question, answer in prompts.EXAMPLES:
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": self._user_content(observation)})
        return messages

    def _user_content(self, observation: Observation) -> str | list[dict[str, Any]]:
        mode = self.settings.input_mode
        captions = (
            [
                prompts.caption_line(
                    i.alt, i.x, i.y, i.caption or self.captioner.caption(i, observation.screenshot)
                )
                for i in observation.images
            ]
            if mode == "caption"
            else []
        )
        text = prompts.user_text(
            observation, self._history[-HISTORY_ACTIONS:], self.max_observation_chars, captions
        )
        if mode != "multimodal":
            return text
        screenshot = observation.screenshot_som or observation.screenshot
        if screenshot is None:
            raise AgentError("the multimodal input mode needs screenshots: record without --no-screenshots")
        return [{"type": "text", "text": text}, image_part(screenshot)]

    def _complete(self, request: dict[str, Any]) -> ModelReply:
        try:
            return self.client.complete(**request)
        except ModelError as exc:
            if exc.infrastructure:
                raise  # the endpoint's failure, not the agent's (down past its patience: the run stops, resumable)
            raise AgentError(str(exc)) from None

    def _reply(self, reply: ModelReply, request: dict[str, Any]) -> AgentReply:
        cost = (
            reply.prompt_tokens * self.settings.price_input
            + reply.completion_tokens * self.settings.price_output
        ) / 1e6
        return AgentReply(
            output=reply.text,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            cost_usd=cost,
            request=request,
            note=reply.note,
            endpoint_retries=reply.retries,
            endpoint_wait_s=reply.waited_s,
        )


def check_settings(settings: AgentSettings) -> None:
    """The one-line errors for an agent that cannot work: no model, no key, unknown modes."""
    if not settings.model:
        raise AgentError("the openai agent needs --model NAME (the model the endpoint should run)")
    require_api_key("talking to a model", AgentError)
    if settings.input_mode not in prompts.INPUT_MODES:
        raise AgentError(f"unknown input mode {settings.input_mode!r}: use {', '.join(prompts.INPUT_MODES)}")
    if settings.memory_by not in RANKINGS:
        raise AgentError(f"unknown memory ranking {settings.memory_by!r}: use {', '.join(RANKINGS)}")


def client_for(settings: AgentSettings) -> ModelClient:
    """The client for the agent's endpoint with the run's deadline and retry budget."""
    return ModelClient(settings.base_url, settings.deadlines)


def _history_entry(output: str) -> str:
    """How an earlier reply is shown under PREVIOUS ACTIONS: its action, or a note that it had none."""
    try:
        return parse_agent_output(output).render()
    except MminaError:
        return "(a reply without a valid action)"
