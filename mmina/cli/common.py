"""What every command shares: the store option, output formats, rendering, errors."""
from __future__ import annotations

import base64
import csv
import json
import math
import sys
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import click
from rich.console import Console
from rich.table import Table as RichTable

from mmina.agents.settings import AgentSettings
from mmina.analysis.display import display
from mmina.analysis.tables import Table
from mmina.errors import MminaError
from mmina.model_client import DEFAULT_CALL_S, DEFAULT_MAX_RETRIES, MAX_CALL_S, MAX_RETRIES
from mmina.pool import EXECUTORS, Layout
from mmina.redact import redact_message
from mmina.store import STORE_ENV, Store, resolve_store_path

FORMATS = ("table", "csv", "json")
MAX_WORKERS = 256
MAX_CONCURRENCY = 256
"""Episodes in flight per worker (each a browser context of about 70 MB)."""
MAX_STEPS = 1000
MAX_MEMORY = 50
"""Earlier trajectories put into one prompt."""
MAX_PRICE_USD = 10_000.0
"""Per million tokens."""
MAX_DRIFT = 100
"""Drift levels of the fixture web (prices move by up to 5 % a level; level 3 already moves URLs)."""
MAX_HISTORY = 100
"""Earlier actions shown in one prompt."""

stdout = Console(soft_wrap=False)
stderr = Console(stderr=True)


class MminaGroup(click.Group):
    """Turns library errors into one line on stderr and a non-zero exit, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MminaError as exc:
            click.echo(f"Error: {redact_message(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


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
    def decorator(func):
        return click.option("--format", "fmt", type=click.Choice(choices or FORMATS), default=(choices or FORMATS)[0],
                            show_default=True, help="Output format; json and csv are meant for scripts.")(func)

    return decorator


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


def open_store(store_path: str | None, create: bool = False) -> Store:
    """The store of ``--store`` (else ``$MMINA_STORE``, else ./mmina-store), opened once at the
    edge; with ``create``, one that the command's first write creates."""
    return Store.open(resolve_store_path(store_path), create=create)


AGENT_OPTIONS = {"model": "model", "base_url": "base_url", "input_mode": "input_mode", "temperature": "temperature",
                 "price_in": "price_input", "price_out": "price_output", "memory": "memory", "memory_by": "memory_by",
                 "captioner": "captioner", "caption_model": "caption_model", "from_run": "from_run",
                 "from_episode": "from_episode", "model_deadline": "model_deadline_s", "model_retries": "max_retries"}
"""Command-line option → :class:`AgentSettings` field, for every agent option any command has."""


def agent_settings(options: dict[str, Any]) -> AgentSettings:
    """The agent settings from whichever agent options the command has (the rest keep their defaults)."""
    return AgentSettings(**{field: options[name] for name, field in AGENT_OPTIONS.items() if name in options})


def jsonable(value: Any) -> Any:
    """Values DuckDB and Arrow return, as JSON: timestamps in ISO 8601, bytes in base64."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def print_json(data: Any) -> None:
    click.echo(json.dumps(jsonable(data), indent=2, ensure_ascii=False))


def render_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str, title: str | None = None) -> None:
    """Print rows as a terminal table, CSV, or a JSON list of objects."""
    if fmt == "json":
        print_json([dict(zip(columns, row)) for row in rows])
    elif fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_cell(v) for v in row] for row in rows)
    else:
        table = RichTable(title=title)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
        stdout.print(table)


def print_tables(tables: Sequence[Table]) -> None:
    """Report tables on the terminal, rates with their 95% intervals folded into one cell."""
    for table in tables:
        columns, rows = display(table)
        rich = RichTable(title=table.title, title_justify="left")
        for column in columns:
            rich.add_column(column, overflow="fold")
        for row in rows:
            rich.add_row(*row)
        stdout.print(rich)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(jsonable(value), ensure_ascii=False)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(value))} bytes>"
    return str(jsonable(value))


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TB"
