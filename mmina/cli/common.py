"""What every command shares: the command registry's group, options, the store, errors."""
from __future__ import annotations

import importlib
import math
import signal
import sys
import warnings
from dataclasses import asdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click
from click.exceptions import NoSuchCommand

from mmina.agents.settings import AgentSettings
from mmina.cli.render import echo
from mmina.errors import MminaError, MminaWarning
from mmina.evaluators.rescore_settings import (DEFAULT_CONCURRENCY as JUDGE_CONCURRENCY,
                                               DEFAULT_MAX_RETRIES as JUDGE_RETRIES, JudgeSettings)
from mmina.model_client import (API_KEY_ENV, DEFAULT_CALL_S, DEFAULT_MAX_RETRIES, DEFAULT_PATIENCE_S, MAX_CALL_S,
                                 MAX_PATIENCE_S, MAX_RETRIES)
from mmina.pool import EXECUTORS, Layout
from mmina.store.defaults import STORE_ENV

if TYPE_CHECKING:
    from mmina.store import Store

FORMATS = ("table", "csv", "json")
MAX_WORKERS = 256
MAX_CONCURRENCY = 256
"""Episodes in flight per worker (each a browser context; its memory: docs/benchmarks.md)."""
MAX_JUDGE_CONCURRENCY = 64
"""Judge requests in flight at once."""
MAX_STEPS = 1000
MAX_MEMORY = 50
"""Earlier trajectories put into one prompt."""
MAX_PRICE_USD = 10_000.0
"""Per million tokens."""
MAX_DRIFT = 100
MAX_REPEATS = 100
"""The most episodes per task ``record --repeats`` takes (pass^k and bootstrap intervals need
only a handful; more is a typo)."""
MAX_BUDGET_USD = 1e9
MAX_BUDGET_HOURS = 24 * 366.0
"""A session's budgets (``record --max-cost``, ``--max-hours``)."""
"""Drift levels of the fixture web (prices move by up to 5 % a level; level 3 already moves URLs)."""
MAX_HISTORY = 100
"""Earlier actions shown in one prompt."""


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when one is asked for: ``lazy`` maps each
    name to ``"module:attribute"`` (click's LazyGroup pattern), so ``mmina --help`` and a
    command's ``--help`` load no library but the one they need. Commands added with
    ``add_command`` work as usual."""

    def __init__(self, *args: Any, lazy: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            self.add_command(load_command(self.lazy[cmd_name]), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, but a mistyped name is offered the nearest of every command, not only
        those loaded already ("Did you mean 'record'?")."""
        try:
            return super().resolve_command(ctx, args)
        except NoSuchCommand as exc:
            raise NoSuchCommand(exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx) from None


def load_command(target: str) -> click.Command:
    """The command at ``"module:attribute"`` (an entry of a lazy group's table)."""
    module, _, attribute = target.partition(":")
    command = getattr(importlib.import_module(module), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{target} is not a click command")
    return command


class MminaGroup(LazyGroup):
    """Turns library errors into one line on stderr and a non-zero exit, never a traceback,
    and mmina's warnings into one ``Warning:`` line each."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return super().invoke(ctx)
        except MminaError as exc:
            from mmina.redact import redact_message  # compiles its rules: only when there is a message

            echo(f"Error: {redact_message(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    if issubclass(category, MminaWarning):
        from mmina.redact import redact_message

        echo(f"Warning: {redact_message(str(message))}", err=True)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


class Bounded(click.FloatRange):
    """A float in a closed range that is also finite: click's own range lets ``nan`` through
    (every comparison with it is false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number in the range {self._describe_range()}.", param, ctx)
        return number


def store_option(func):
    return click.option(
        "--store", "store_path", metavar="DIR|URL", default=None,
        help=f"Store: a directory or an object-store URL such as s3://bucket/prefix (any fsspec URL; "
             f"credentials from the environment, e.g. AWS_ACCESS_KEY_ID) (default: ${STORE_ENV}, else ./mmina-store).",
    )(func)


def browser_options(func):
    """``--browser PATH`` and ``--browser-arg ARG``: which Chromium, started with which extra flags."""
    func = click.option("--browser-arg", "browser_args", multiple=True, metavar="ARG",
                        help="An extra Chromium flag, e.g. --proxy-server=HOST:PORT or "
                             "'--host-resolver-rules=MAP example.org 127.0.0.1:8080' (repeatable; a --disable-features "
                             "list is added to mmina's and Playwright's own).")(func)
    return click.option("--browser", "browser_path", metavar="PATH",
                        help="Chromium executable (default: $MMINA_CHROMIUM, Playwright's, the system's).")(func)


def executor_options(workers_help: str):
    """``--workers``, ``--executor`` and ``--ray-address``: where the work is spread."""
    def decorator(func):
        func = click.option("--ray-address", metavar="ADDRESS", envvar="RAY_ADDRESS", show_envvar=True,
                            help="--executor ray: join this Ray cluster (e.g. ray://head:10001 or auto) "
                                 "instead of starting one on this machine.")(func)
        func = click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
                            help="Where workers run: processes on this machine, or Ray actors "
                                 "(pip install 'mmina[ray]').")(func)
        return click.option("--workers", type=click.IntRange(1, MAX_WORKERS), default=1, show_default=True,
                            help=workers_help)(func)

    return decorator


def scale_options(what: str):
    """:func:`executor_options` and ``--concurrency`` for commands that drive browsers
    (``what``: "recorded" or "replayed")."""
    def decorator(func):
        func = click.option("--concurrency", type=click.IntRange(1, MAX_CONCURRENCY), default=1, show_default=True,
                            help=f"Episodes {what} at once per worker, each in its own context of the worker's "
                                 "one Chromium (the lever for agents that wait on a model).")(func)
        return executor_options("Worker processes (or Ray actors), each with its own Chromium.")(func)

    return decorator


def layout(options: dict[str, Any], concurrency: int | None = None) -> Layout:
    """How the work is spread, from the options of :func:`scale_options` (or of
    :func:`executor_options`, with ``concurrency`` given)."""
    in_flight = options["concurrency"] if concurrency is None else concurrency
    return Layout(options["workers"], in_flight, options["executor"], options["ray_address"])


def format_option(*choices: str):
    """``--format``: a table for people first, then what scripts read (``table|csv|json`` unless
    ``choices`` says otherwise)."""
    offered = choices or FORMATS
    scripts = " and ".join(f for f in offered if f != "table")

    def decorator(func):
        return click.option("--format", "fmt", type=click.Choice(offered), default=offered[0], show_default=True,
                            help=f"Output format; {scripts} {'are' if ' and ' in scripts else 'is'} for "
                                 "scripts (the values as stored).")(func)

    return decorator


RUN_REF = "a run id, an unambiguous prefix of one, or latest"
"""What a ``--run`` option accepts (see :meth:`mmina.store.Store.resolve_run`)."""


def run_option(what: str, multiple: bool = False, required: bool = False):
    """``--run RUN``: a run of the store, by id, unambiguous prefix or ``latest`` (``what``:
    the help text before that; ``multiple``: repeatable)."""
    return click.option("--run", "runs" if multiple else "run_id", multiple=multiple, required=required,
                        metavar="RUN", help=f"{what} ({RUN_REF}{'; repeatable' if multiple else ''}).")


_RENAMED = "mmina.renamed"
"""``ctx.meta`` key: the values given under an option's old name, by the new option's parameter."""


def renamed_option(name: str, dest: str, old: str, **kwargs: Any):
    """``click.option(name, dest, **kwargs)`` that still takes its old name ``old``: hidden from
    help, it works as before with a warning on stderr (giving both names is an error)."""
    def keep_old(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value is not None and value != ():
            echo(f"Warning: {old} is an old name; use {name} (the old one will go in a later version)", err=True)
            ctx.meta.setdefault(_RENAMED, {})[dest] = value
        return value

    def take_old(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        given = ctx.meta.get(_RENAMED, {})
        if dest not in given:
            return value
        if ctx.get_parameter_source(dest) == click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(f"give {name} or its old name {old}, not both")
        return given[dest]

    def decorator(func: Any) -> Any:
        func = click.option(name, dest, callback=take_old, **kwargs)(func)
        return click.option(old, hidden=True, is_eager=True, expose_value=False, callback=keep_old,
                            type=kwargs.get("type"), metavar=kwargs.get("metavar"))(func)

    return decorator


def judge_options(scope: str, base_url_default: str = "$OPENAI_BASE_URL, else OpenAI's",
                  renamed: Mapping[str, str] | None = None):
    """The LLM judge's options, each help text starting with ``scope``: --judge-model,
    --judge-base-url, --judge-api-key-env, --judge-concurrency, --judge-deadline and
    --judge-retries. ``renamed`` maps an option's new name to the old name this command knew
    it by (still accepted, with a warning)."""
    old = dict(renamed or {})

    def option(name: str, dest: str, **kwargs: Any) -> Any:
        if name in old:
            return renamed_option(name, dest, old[name], **kwargs)
        return click.option(name, dest, **kwargs)

    options = [
        option("--judge-model", "judge_model", metavar="MODEL", help=f"{scope}: the judge's model."),
        option("--judge-base-url", "judge_base_url", metavar="URL",
               help=f"{scope}: the judge's OpenAI-compatible endpoint (default: {base_url_default})."),
        option("--judge-api-key-env", "judge_api_key_env", metavar="VAR", default=API_KEY_ENV, show_default=True,
               help=f"{scope}: the environment variable that holds the judge's key."),
        option("--judge-concurrency", "judge_concurrency", type=click.IntRange(1, MAX_JUDGE_CONCURRENCY),
               default=JUDGE_CONCURRENCY, show_default=True, help=f"{scope}: judge requests in flight at once."),
        option("--judge-deadline", "judge_deadline", type=Bounded(1, MAX_CALL_S), default=DEFAULT_CALL_S,
               show_default=True, metavar="SECONDS",
               help=f"{scope}: the most one judge call may take, retries included."),
        option("--judge-retries", "judge_retries", type=click.IntRange(0, MAX_RETRIES), default=JUDGE_RETRIES,
               show_default=True, metavar="N",
               help=f"{scope}: retries of a judge call on 429, 5xx, timeouts and lost connections, with backoff."),
        click.option("--judge-temperature", "judge_temperature", type=Bounded(0, 2), default=0.0, show_default=True,
                     metavar="T", help=f"{scope}: the judge's sampling temperature (part of every cache key and "
                                       "verdict; one the provider refuses is dropped, and the verdicts say so)."),
        click.option("--judge-top-p", "judge_top_p", type=Bounded(0, 1), metavar="P",
                     help=f"{scope}: the judge's top_p (default: not sent)."),
        click.option("--judge-seed", "judge_seed", type=int, metavar="N",
                     help=f"{scope}: the judge's sampling seed (default: not sent)."),
    ]

    def decorator(func: Any) -> Any:
        return _apply(options, func)

    return decorator


def judge_settings(options: dict[str, Any], base_url: str | None = None,
                   prices: tuple[float | None, float | None] = (None, None)) -> JudgeSettings:
    """The judge's settings from :func:`judge_options` (``base_url``: the endpoint when
    ``--judge-base-url`` is not given; ``prices``: USD per million prompt and completion tokens)."""
    return JudgeSettings(model=options["judge_model"], base_url=options["judge_base_url"] or base_url,
                         concurrency=options["judge_concurrency"], max_retries=options["judge_retries"],
                         deadline_s=options["judge_deadline"], api_key_env=options["judge_api_key_env"],
                         price_in=prices[0], price_out=prices[1], temperature=options["judge_temperature"],
                         top_p=options["judge_top_p"], seed=options["judge_seed"])


def model_call_options(scope: str, retries: int = DEFAULT_MAX_RETRIES):
    """``--model-deadline`` and ``--model-retries``: how long one model call may take, retries
    included, and how often it is retried (each help text starting with ``scope``; ``retries``
    the default)."""
    options = [
        click.option("--model-deadline", type=Bounded(1, MAX_CALL_S), default=DEFAULT_CALL_S, show_default=True,
                     metavar="SECONDS", help=f"{scope}: the most one model call may take, retries included (an "
                                             "endpoint that never answers, or drips, fails the call then)."),
        click.option("--model-retries", type=click.IntRange(0, MAX_RETRIES), default=retries,
                     show_default=True, metavar="N",
                     help=f"{scope}: retries of a model call on 429, 5xx, timeouts and lost connections, with backoff."),
        click.option("--endpoint-patience", type=Bounded(0, MAX_PATIENCE_S), default=DEFAULT_PATIENCE_S,
                     show_default=True, metavar="SECONDS",
                     help=f"{scope}: how long calls wait for an endpoint that is down or refuses everyone (no "
                          "connection, 5xx, 429) before the run stops, resumable; its episodes are not failed "
                          "for it. 0: such a call fails its episode."),
    ]

    def decorator(func):
        return _apply(options, func)

    return decorator


def _apply(options: list[Any], func: Any) -> Any:
    for option in reversed(options):
        func = option(func)
    return func


def openai_agent_options(scope: str, prices: bool = True):
    """The openai agent's options, each help text starting with ``scope`` (e.g. "openai agent"):
    --model, --base-url, --input-mode, --temperature and, with ``prices``, --price-in/--price-out."""
    options = [
        click.option("--model", metavar="NAME", help=f"{scope}: the model to ask."),
        click.option("--base-url", metavar="URL", envvar="OPENAI_BASE_URL", show_envvar=True,
                     help=f"{scope}: the OpenAI-compatible endpoint (default: OpenAI's); the key is $OPENAI_API_KEY."),
        click.option("--input-mode", type=click.Choice(["text", "caption", "multimodal"]), default="text",
                     show_default=True,
                     help=f"{scope}: accessibility tree only, plus image captions, or plus the screenshot."),
        click.option("--temperature", type=Bounded(0, 2), default=0.0, show_default=True,
                     help=f"{scope}: sampling temperature (0..2)."),
        model_call_options(scope),
    ]
    if prices:
        options += [click.option(f"--price-{kind}", type=Bounded(0, MAX_PRICE_USD), default=0.0, show_default=True,
                                 metavar="USD", help=f"{scope}: price per million {kind}put tokens, for the recorded cost.")
                    for kind in ("in", "out")]

    def decorator(func):
        return _apply(options, func)

    return decorator


def ctrl_c_interrupts() -> None:
    """Ctrl-C (SIGINT) interrupts every command even when it was started where SIGINT is
    ignored (a script's background job, some CI runners): Python then installs no
    KeyboardInterrupt handler, so ``record`` would ignore a Ctrl-C sent to its process group and
    run to the end, and uvicorn, which stops on SIGINT and raises it again under the handler it
    found, would end ``serve`` with 0 instead of 130."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def open_store(store_path: str | None, create: bool = False) -> Store:
    """The store of ``--store`` (else ``$MMINA_STORE``, else ./mmina-store), opened once at the
    edge; with ``create``, one that the command's first write creates."""
    from mmina.store import Store, resolve_store_path

    return Store.open(resolve_store_path(store_path), create=create)


AGENT_OPTIONS = {"model": "model", "base_url": "base_url", "input_mode": "input_mode", "temperature": "temperature",
                 "price_in": "price_input", "price_out": "price_output", "memory": "memory", "memory_by": "memory_by",
                 "captioner": "captioner", "caption_model": "caption_model", "from_run": "from_run",
                 "from_episode": "from_episode", "model_deadline": "model_deadline_s", "model_retries": "max_retries",
                 "endpoint_patience": "endpoint_patience_s", "error_rate": "error_rate", "seed": "seed"}
"""Command-line option → :class:`AgentSettings` field, for every agent option any command has."""


def noisy_agent_options(scope: str):
    """``--error-rate`` and ``--seed``: a noisy oracle of chosen skill, and seeds for agents that
    draw at random (each help text about the oracle starting with ``scope``)."""
    options = [
        click.option("--error-rate", type=Bounded(0, 1), default=0.0, show_default=True, metavar="P",
                     help=f"{scope}: drop each step of its script with probability P (a noisy oracle of chosen "
                          "skill; seeded by --seed, the task and its repeat)."),
        click.option("--seed", type=click.IntRange(0, 2**31 - 1), metavar="N",
                     help="Seeds agents that draw at random, with each task and repeat: the oracle with --error-rate "
                          "(default 0), and the openai agent's requests (the API's seed parameter, sent only when "
                          "given)."),
    ]

    def decorator(func: Any) -> Any:
        return _apply(options, func)

    return decorator


def agent_settings(options: dict[str, Any]) -> AgentSettings:
    """The agent settings from whichever agent options the command has (the rest keep their defaults)."""
    return AgentSettings(**{field: options[name] for name, field in AGENT_OPTIONS.items() if name in options})


def check_model_endpoint(agent: str, settings: AgentSettings) -> dict[str, Any] | None:
    """For an agent behind a model endpoint, one cheap request before anything starts
    (:mod:`mmina.agents.endpoint`), and its line on stderr; None for other agents."""
    if agent != "openai":
        return None
    from mmina.agents.endpoint import check_endpoint

    found = check_endpoint(settings)
    echo(found.line(), err=True)
    return asdict(found)


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"
