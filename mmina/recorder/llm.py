"""The ``openai`` agent: an LLM or LMM behind any OpenAI-compatible endpoint picks each action.

Only the ``openai`` client talks to the endpoint: it reads ``--base-url`` (else
``OPENAI_BASE_URL``) and ``OPENAI_API_KEY``, and retries 429 and 5xx answers with backoff
itself (``max_retries``). When it gives up, the agent raises :class:`AgentError`: the episode
is recorded as errored and the run goes on. The client is imported on first use, because
``import openai`` costs seconds that commands without a model should not pay.
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
from typing import TYPE_CHECKING, Any, Protocol

from mmina.actions import parse_agent_output
from mmina.agents import AgentReply
from mmina.errors import AgentError, MminaError
from mmina.observation import Observation, PageImage
from mmina.recorder import prompts
from mmina.recorder.memory import RANKINGS, TrajectoryMemory
from mmina.tasks import Task

if TYPE_CHECKING:
    import openai

    from mmina.recorder.agents import AgentSettings

REQUEST_TIMEOUT_S = 120.0
MAX_OBSERVATION_CHARS = 16_000
HISTORY_ACTIONS = 5


class Captioner(Protocol):
    """Describes an in-view image in a few words (the ``caption`` input mode)."""

    def caption(self, image: PageImage, screenshot: bytes | None) -> str: ...


class AltTextCaptioner:
    """The default: the image's alt text, which costs nothing and needs no model."""

    def caption(self, image: PageImage, screenshot: bytes | None) -> str:
        return image.alt or "(no description)"


class OpenAICaptioner:
    """A vision model's one-sentence caption of the image, cropped from the screenshot.

    The crop is what the agent saw, wherever the image came from; captions are cached by the
    crop's hash, so an image shown on many steps is captioned once.
    """

    def __init__(self, client: "openai.OpenAI", model: str, max_tokens: int = 60) -> None:
        self.client, self.model, self.max_tokens = client, model, max_tokens
        self._cache: dict[str, str] = {}

    def caption(self, image: PageImage, screenshot: bytes | None) -> str:
        crop = _crop(screenshot, image) if screenshot else None
        if crop is None:
            return image.alt or "(no description)"
        key = hashlib.sha256(crop).hexdigest()
        if key not in self._cache:
            self._cache[key] = self._ask(crop)
        return self._cache[key]

    def _ask(self, crop: bytes) -> str:
        content = [{"type": "text", "text": "Describe this image in one short sentence."}, _image_part(crop)]
        try:
            response = self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": content}], max_tokens=self.max_tokens,
                temperature=0.0)
        except _openai().APIError as exc:
            raise AgentError(f"captioning failed: {_one_line(exc)}") from None
        return " ".join((response.choices[0].message.content or "").split())


class OpenAIAgent:
    """Asks a chat model for each action with the paper's prompt; records its text, tokens and cost."""

    name = "openai"

    def __init__(self, settings: "AgentSettings", client: "openai.OpenAI", captioner: Captioner | None = None,
                 max_observation_chars: int = MAX_OBSERVATION_CHARS) -> None:
        self.settings, self.client = settings, client
        self.captioner = captioner or AltTextCaptioner()
        self.max_observation_chars = max_observation_chars
        self.memory = (TrajectoryMemory(settings.store, settings.memory, settings.memory_by, exclude_run=settings.run_id)
                       if settings.memory else None)
        self._system = ""
        self._history: list[str] = []

    @classmethod
    def from_settings(cls, settings: "AgentSettings") -> "OpenAIAgent":
        """Check the settings before anything starts, so a mistake costs no browser and no store."""
        check_settings(settings)
        return cls(settings, make_client(settings))

    def reset(self, task: Task) -> None:
        memory = self.memory.prompt_section(task) if self.memory else ""
        self._system = prompts.system_prompt(task, self.settings.input_mode, memory)
        self._history = []

    def act(self, observation: Observation) -> AgentReply:
        response = self._complete(self.messages(observation))
        output = _text(response)
        self._history.append(_history_entry(output))
        return self._reply(output, response.usage)

    def messages(self, observation: Observation) -> list[dict[str, Any]]:
        """System instructions, the few-shot exchanges, then this step's observation."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": self._system}]
        for question, answer in prompts.EXAMPLES:
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": self._user_content(observation)})
        return messages

    def _user_content(self, observation: Observation) -> str | list[dict[str, Any]]:
        mode = self.settings.input_mode
        captions = [prompts.caption_line(i.alt, i.x, i.y, self.captioner.caption(i, observation.screenshot))
                     for i in observation.images] if mode == "caption" else []
        text = prompts.user_text(observation, self._history[-HISTORY_ACTIONS:], self.max_observation_chars, captions)
        if mode != "multimodal":
            return text
        screenshot = observation.screenshot_som or observation.screenshot
        if screenshot is None:
            raise AgentError("the multimodal input mode needs screenshots: record without --no-screenshots")
        return [{"type": "text", "text": text}, _image_part(screenshot)]

    def _complete(self, messages: list[dict[str, Any]]) -> Any:
        try:
            return self.client.chat.completions.create(
                model=self.settings.model, messages=messages, temperature=self.settings.temperature,
                max_tokens=self.settings.max_tokens)
        except _openai().APIError as exc:
            raise AgentError(_endpoint_failure(exc, self.settings.max_retries)) from None

    def _reply(self, output: str, usage: Any) -> AgentReply:
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = (prompt_tokens * self.settings.price_input + completion_tokens * self.settings.price_output) / 1e6
        return AgentReply(output, prompt_tokens, completion_tokens, cost)


def check_settings(settings: "AgentSettings") -> None:
    """The one-line errors for an agent that cannot work: no model, no key, unknown modes."""
    if not settings.model:
        raise AgentError("the openai agent needs --model NAME (the model the endpoint should run)")
    if not os.environ.get("OPENAI_API_KEY"):
        raise AgentError("the openai agent needs an API key: set OPENAI_API_KEY "
                         "(a local endpoint that ignores keys accepts any non-empty value)")
    if settings.input_mode not in prompts.INPUT_MODES:
        raise AgentError(f"unknown input mode {settings.input_mode!r}: use {', '.join(prompts.INPUT_MODES)}")
    if settings.memory_by not in RANKINGS:
        raise AgentError(f"unknown memory ranking {settings.memory_by!r}: use {', '.join(RANKINGS)}")


def make_client(settings: "AgentSettings") -> "openai.OpenAI":
    """The client for ``--base-url`` (else ``OPENAI_BASE_URL``, else OpenAI's) with the run's retry budget."""
    return _openai().OpenAI(base_url=settings.base_url or os.environ.get("OPENAI_BASE_URL") or None,
                            api_key=os.environ["OPENAI_API_KEY"], max_retries=settings.max_retries,
                            timeout=REQUEST_TIMEOUT_S)


def _openai() -> Any:
    """The ``openai`` module, imported on first use (it takes seconds to import)."""
    import openai

    return openai


def _history_entry(output: str) -> str:
    """How an earlier reply is shown under PREVIOUS ACTIONS: its action, or a note that it had none."""
    try:
        return parse_agent_output(output).render()
    except MminaError:
        return "(a reply without a valid action)"


def _image_part(jpeg: bytes) -> dict[str, Any]:
    encoded = base64.b64encode(jpeg).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{encoded}"}}


def _crop(screenshot: bytes, image: PageImage) -> bytes | None:
    """The image's box cut out of the viewport screenshot, as JPEG (None when nothing of it is visible)."""
    from PIL import Image

    with Image.open(io.BytesIO(screenshot)) as page:
        box = (max(0, round(image.x)), max(0, round(image.y)), min(page.width, round(image.x + image.width)),
               min(page.height, round(image.y + image.height)))
        if box[2] <= box[0] or box[3] <= box[1]:
            return None
        out = io.BytesIO()
        page.crop(box).convert("RGB").save(out, "JPEG", quality=85)
    return out.getvalue()


def _text(response: Any) -> str:
    """The reply's text; an empty reply is data (an unparsable step), not an error."""
    return (response.choices[0].message.content or "") if response.choices else ""


def _endpoint_failure(exc: Exception, retries: int) -> str:
    """One line; says "after N retries" only for what the client retries (429, 5xx, timeouts, no connection)."""
    status = getattr(exc, "status_code", None)
    retried = status is None or status in (408, 409, 429) or status >= 500
    return f"model endpoint failed{f' after {retries} retries' if retried else ''}: {_one_line(exc)}"


def _one_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
