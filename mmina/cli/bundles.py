"""Option bundles: a dataclass per group of command-line options, each option declared once.

A bundle's fields carry their click option (:func:`option`); ``Bundle.options(...)`` is the
decorator that adds those options to a command and hands the command one typed instance of
the bundle instead of loose keyword arguments, so no command looks an option up by name::

    @click.command()
    @BrowserOptions.options()
    def run(browser: BrowserOptions) -> None:
        ... browser.browser_path ...

Help texts may name words a command fills in (``{scope}``, ``{what}``...): the same option then
reads "openai agent: the model to ask." on one command and "--agent openai: ..." on another.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Mapping
from typing import Any, ClassVar, TypeVar

import click

from mmina.agents.settings import CAPTIONERS, AgentSettings
from mmina.cli.common import (
    MAX_CONCURRENCY,
    MAX_JUDGE_CONCURRENCY,
    MAX_MEMORY,
    MAX_PRICE_USD,
    MAX_WORKERS,
    RUN_REF,
    Bounded,
    renamed_option,
)
from mmina.evaluators.rescore_settings import (
    DEFAULT_CONCURRENCY as JUDGE_CONCURRENCY,
)
from mmina.evaluators.rescore_settings import (
    DEFAULT_MAX_RETRIES as JUDGE_RETRIES,
)
from mmina.evaluators.rescore_settings import (
    JudgeSettings,
)
from mmina.executors.interface import EXECUTORS, Layout
from mmina.models.model_client import (
    API_KEY_ENV,
    DEFAULT_CALL_S,
    DEFAULT_MAX_RETRIES,
    DEFAULT_PATIENCE_S,
    MAX_CALL_S,
    MAX_PATIENCE_S,
    MAX_RETRIES,
)

_OPTION = "mmina.option"
"""A field's metadata key: the click option that fills it."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class _Declared:
    decls: tuple[str, ...]
    kwargs: dict[str, Any]


def option(*decls: str, **kwargs: Any) -> Any:
    """A bundle field and its click option (``decls`` and ``kwargs`` as for ``click.option``;
    the destination is the field's name). The field's default is the option's: ``default``
    when given, else ``()`` for a repeatable option, ``False`` for a flag, None otherwise."""
    if "default" in kwargs:
        default = kwargs["default"]
    else:
        default = () if kwargs.get("multiple") else False if kwargs.get("is_flag") else None
    return dataclasses.field(default=default, metadata={_OPTION: _Declared(decls, kwargs)})


def _fill(text: str | None, words: Mapping[str, str]) -> str | None:
    for key, value in words.items():
        text = text.replace("{" + key + "}", value) if text else text
    return text


class Bundle:
    """Base of the option bundles (each a frozen, keyword-only dataclass)."""

    PARAM: ClassVar[str]
    """The command's parameter that receives the bundle."""
    WORDS: ClassVar[Mapping[str, str]] = {}
    """The words help texts name, unless a command says otherwise."""

    @classmethod
    def options(
        cls,
        *,
        omit: Collection[str] = (),
        renamed: Mapping[str, str] | None = None,
        param: str | None = None,
        **words: str,
    ) -> Callable[[F], F]:
        """The decorator that adds the bundle's options to a command and gives it the bundle as
        ``param`` (default :attr:`PARAM`). ``omit``: fields this command does not offer (they keep
        their defaults); ``renamed``: an option's new name → the old name this command still
        takes, with a warning; ``words``: what ``{word}`` in the help texts reads."""
        offered = [f for f in cls._declared() if f.name not in omit]
        filled = {**cls.WORDS, **words}
        old = dict(renamed or {})
        into = param or cls.PARAM

        def decorator(func: F) -> F:
            @functools.wraps(func)
            def packed(*args: Any, **kwargs: Any) -> Any:
                values = {f.name: kwargs.pop(f.name) for f in offered}
                return func(*args, **kwargs, **{into: cls(**values)})

            for declared_field in reversed(offered):
                packed = _click_option(declared_field, filled, old)(packed)
            return packed  # type: ignore[return-value]

        return decorator

    @classmethod
    def flags(cls) -> dict[str, str]:
        """Each option's long name → the field it fills (``--browser`` → ``browser_path``)."""
        return {f.metadata[_OPTION].decls[-1]: f.name for f in cls._declared()}

    @classmethod
    def _declared(cls) -> list[dataclasses.Field[Any]]:
        """The fields that declare an option (every bundle is a dataclass)."""
        return [f for f in dataclasses.fields(cls) if _OPTION in f.metadata]  # type: ignore[arg-type]


def _click_option(
    declared_field: dataclasses.Field[Any], words: Mapping[str, str], old: Mapping[str, str]
) -> Callable[[Any], Any]:
    declared: _Declared = declared_field.metadata[_OPTION]
    kwargs = {**declared.kwargs, "help": _fill(declared.kwargs.get("help"), words)}
    name = declared.decls[-1]
    if name in old:
        return renamed_option(name, declared_field.name, old[name], **kwargs)
    return click.option(*declared.decls, declared_field.name, **kwargs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BrowserOptions(Bundle):
    """``--browser PATH`` and ``--browser-arg ARG``: which Chromium, started with which extra flags."""

    PARAM: ClassVar[str] = "browser"

    browser_path: str | None = option(
        "--browser",
        metavar="PATH",
        help="Chromium executable (default: $MMINA_CHROMIUM, Playwright's, the system's).",
    )
    browser_args: tuple[str, ...] = option(
        "--browser-arg",
        multiple=True,
        metavar="ARG",
        help="An extra Chromium flag, e.g. --proxy-server=HOST:PORT or '--host-resolver-rules=MAP example.org "
        "127.0.0.1:8080' (repeatable; a --disable-features list is added to mmina's and Playwright's own).",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScaleOptions(Bundle):
    """``--workers``, ``--executor``, ``--ray-address`` and ``--concurrency``: where the work is
    spread (commands that drive no browser omit ``concurrency``; words: ``workers``, the help of
    ``--workers``, and ``what``, e.g. "recorded")."""

    PARAM: ClassVar[str] = "scale"
    WORDS: ClassVar[Mapping[str, str]] = {
        "workers": "Worker processes (or Ray actors), each with its own Chromium."
    }

    workers: int = option(
        "--workers", type=click.IntRange(1, MAX_WORKERS), default=1, show_default=True, help="{workers}"
    )
    executor: str = option(
        "--executor",
        type=click.Choice(EXECUTORS),
        default="local",
        show_default=True,
        help="Where workers run: processes on this machine, or Ray actors (pip install 'mmina[ray]').",
    )
    ray_address: str | None = option(
        "--ray-address",
        metavar="ADDRESS",
        envvar="RAY_ADDRESS",
        show_envvar=True,
        help="--executor ray: join this Ray cluster (e.g. ray://head:10001 or auto) "
        "instead of starting one on this machine.",
    )
    concurrency: int = option(
        "--concurrency",
        type=click.IntRange(1, MAX_CONCURRENCY),
        default=1,
        show_default=True,
        help="Episodes {what} at once per worker, each in its own context of the worker's "
        "one Chromium (the lever for agents that wait on a model).",
    )

    def layout(self) -> Layout:
        return Layout(self.workers, self.concurrency, self.executor, self.ray_address)


@dataclasses.dataclass(frozen=True, kw_only=True)
class JudgeOptions(Bundle):
    """The LLM judge's options, each help text starting with the word ``scope`` (``base_url``:
    what the endpoint defaults to)."""

    PARAM: ClassVar[str] = "judge"
    WORDS: ClassVar[Mapping[str, str]] = {"base_url": "$OPENAI_BASE_URL, else OpenAI's"}

    judge_model: str | None = option("--judge-model", metavar="MODEL", help="{scope}: the judge's model.")
    judge_base_url: str | None = option(
        "--judge-base-url",
        metavar="URL",
        help="{scope}: the judge's OpenAI-compatible endpoint (default: {base_url}).",
    )
    judge_api_key_env: str = option(
        "--judge-api-key-env",
        metavar="VAR",
        default=API_KEY_ENV,
        show_default=True,
        help="{scope}: the environment variable that holds the judge's key.",
    )
    judge_concurrency: int = option(
        "--judge-concurrency",
        type=click.IntRange(1, MAX_JUDGE_CONCURRENCY),
        default=JUDGE_CONCURRENCY,
        show_default=True,
        help="{scope}: judge requests in flight at once.",
    )
    judge_deadline: float = option(
        "--judge-deadline",
        type=Bounded(1, MAX_CALL_S),
        default=DEFAULT_CALL_S,
        show_default=True,
        metavar="SECONDS",
        help="{scope}: the most one judge call may take, retries included.",
    )
    judge_retries: int = option(
        "--judge-retries",
        type=click.IntRange(0, MAX_RETRIES),
        default=JUDGE_RETRIES,
        show_default=True,
        metavar="N",
        help="{scope}: retries of a judge call on 429, 5xx, timeouts and lost connections, with backoff.",
    )
    judge_temperature: float = option(
        "--judge-temperature",
        type=Bounded(0, 2),
        default=0.0,
        show_default=True,
        metavar="T",
        help="{scope}: the judge's sampling temperature (part of every cache key and verdict; one the provider "
        "refuses is dropped, and the verdicts say so).",
    )
    judge_top_p: float | None = option(
        "--judge-top-p",
        type=Bounded(0, 1),
        metavar="P",
        help="{scope}: the judge's top_p (default: not sent).",
    )
    judge_seed: int | None = option(
        "--judge-seed", type=int, metavar="N", help="{scope}: the judge's sampling seed (default: not sent)."
    )
    judge_price_in: float | None = option(
        "--judge-price-in",
        type=Bounded(0, MAX_PRICE_USD),
        metavar="USD",
        help="The judge's price per million prompt tokens, for the cost keypoints records per hop and episode.",
    )
    judge_price_out: float | None = option(
        "--judge-price-out",
        type=Bounded(0, MAX_PRICE_USD),
        metavar="USD",
        help="The judge's price per million completion tokens.",
    )

    def settings(self, base_url: str | None = None) -> JudgeSettings:
        """The judge's settings (``base_url``: the endpoint when ``--judge-base-url`` is not given)."""
        return JudgeSettings(
            model=self.judge_model,
            base_url=self.judge_base_url or base_url,
            concurrency=self.judge_concurrency,
            max_retries=self.judge_retries,
            deadline_s=self.judge_deadline,
            api_key_env=self.judge_api_key_env,
            price_in=self.judge_price_in,
            price_out=self.judge_price_out,
            temperature=self.judge_temperature,
            top_p=self.judge_top_p,
            seed=self.judge_seed,
        )


AGENT_WORDS = {"openai": "openai agent", "oracle": "oracle agent", "replay": "replay agent"}
"""What the agent options' help calls each agent on ``record`` (``replay`` says ``--agent openai``...)."""
OPENAI_ONLY = (
    "error_rate",
    "seed",
    "from_run",
    "from_episode",
    "captioner",
    "caption_model",
    "memory",
    "memory_by",
)
"""The agent options that are not the openai agent's own (a command that only asks a model omits them)."""
PRICES = ("price_input", "price_output")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgentOptions(Bundle):
    """How an agent is configured: every field is the :class:`AgentSettings` field of the same
    name, with its default, so a command offers the ones its agents use (``omit`` the rest)."""

    PARAM: ClassVar[str] = "agent_options"
    WORDS: ClassVar[Mapping[str, str]] = AGENT_WORDS

    error_rate: float = option(
        "--error-rate",
        type=Bounded(0, 1),
        default=0.0,
        show_default=True,
        metavar="P",
        help="{oracle}: drop each step of its script with probability P (a noisy oracle of chosen skill; seeded by "
        "--seed, the task and its repeat).",
    )
    seed: int | None = option(
        "--seed",
        type=click.IntRange(0, 2**31 - 1),
        metavar="N",
        help="Seeds agents that draw at random, with each task and repeat: the oracle with --error-rate (default 0), "
        "and the openai agent's requests (the API's seed parameter, sent only when given).",
    )
    from_run: str | None = option(
        "--from-run",
        metavar="RUN",
        help="{replay}: replay this run's episode of each task (RUN: " + RUN_REF + ").",
    )
    from_episode: str | None = option(
        "--from-episode", metavar="ID", help="{replay}: replay this one episode."
    )
    model: str | None = option("--model", metavar="NAME", help="{openai}: the model to ask.")
    base_url: str | None = option(
        "--base-url",
        metavar="URL",
        envvar="OPENAI_BASE_URL",
        show_envvar=True,
        help="{openai}: the OpenAI-compatible endpoint (default: OpenAI's); the key is $OPENAI_API_KEY.",
    )
    input_mode: str = option(
        "--input-mode",
        type=click.Choice(["text", "caption", "multimodal"]),
        default="text",
        show_default=True,
        help="{openai}: accessibility tree only, plus image captions, or plus the screenshot.",
    )
    temperature: float = option(
        "--temperature",
        type=Bounded(0, 2),
        default=0.0,
        show_default=True,
        help="{openai}: sampling temperature (0..2).",
    )
    model_deadline_s: float = option(
        "--model-deadline",
        type=Bounded(1, MAX_CALL_S),
        default=DEFAULT_CALL_S,
        show_default=True,
        metavar="SECONDS",
        help="{openai}: the most one model call may take, retries included (an endpoint that never answers, or "
        "drips, fails the call then).",
    )
    max_retries: int = option(
        "--model-retries",
        type=click.IntRange(0, MAX_RETRIES),
        default=DEFAULT_MAX_RETRIES,
        show_default=True,
        metavar="N",
        help="{openai}: retries of a model call on 429, 5xx, timeouts and lost connections, with backoff.",
    )
    endpoint_patience_s: float = option(
        "--endpoint-patience",
        type=Bounded(0, MAX_PATIENCE_S),
        default=DEFAULT_PATIENCE_S,
        show_default=True,
        metavar="SECONDS",
        help="{openai}: how long calls wait for an endpoint that is down or refuses everyone (no connection, 5xx, "
        "429) before the run stops, resumable; its episodes are not failed for it. 0: such a call fails its "
        "episode.",
    )
    price_input: float = option(
        "--price-in",
        type=Bounded(0, MAX_PRICE_USD),
        default=0.0,
        show_default=True,
        metavar="USD",
        help="{openai}: price per million input tokens, for the recorded cost.",
    )
    price_output: float = option(
        "--price-out",
        type=Bounded(0, MAX_PRICE_USD),
        default=0.0,
        show_default=True,
        metavar="USD",
        help="{openai}: price per million output tokens, for the recorded cost.",
    )
    captioner: str = option(
        "--captioner",
        type=click.Choice(CAPTIONERS),
        default="none",
        show_default=True,
        help="Caption in-view images (stored on each step): their alt text, or a vision model's words.",
    )
    caption_model: str | None = option(
        "--caption-model", metavar="NAME", help="--captioner openai: the vision model (default: --model)."
    )
    memory: int = option(
        "--memory",
        type=click.IntRange(0, MAX_MEMORY),
        default=0,
        show_default=True,
        metavar="K",
        help="{openai}: put the K most relevant earlier trajectories from the store into the prompt.",
    )
    memory_by: str = option(
        "--memory-by",
        type=click.Choice(["similarity", "recency"]),
        default="similarity",
        show_default=True,
        help="{openai}: rank earlier trajectories by intent similarity or by recency.",
    )

    def settings(self) -> AgentSettings:
        return AgentSettings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
