"""What every command shares: the command registry's group, options, the store, errors."""

from __future__ import annotations

import importlib
import math
import signal
import sys
import warnings
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.exceptions import NoSuchCommand

from mmina.agents.settings import AgentSettings
from mmina.cli.render import WIDE, echo
from mmina.errors import MminaError, MminaWarning
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

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
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
            from mmina.redaction.redact import (
                redact_message,  # compiles its rules: only when there is a message
            )

            echo(f"Error: {redact_message(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    if issubclass(category, MminaWarning):
        from mmina.redaction.redact import redact_message

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
        "--store",
        "store_path",
        metavar="DIR|URL",
        default=None,
        help=f"Store: a directory or an object-store URL such as s3://bucket/prefix (any fsspec URL; "
        f"credentials from the environment, e.g. AWS_ACCESS_KEY_ID) (default: ${STORE_ENV}, else ./mmina-store).",
    )(func)


def format_option(*choices: str):
    """``--format``: a table for people first, then what scripts read (``table|csv|json`` unless
    ``choices`` says otherwise)."""
    offered = choices or FORMATS
    scripts = " and ".join(f for f in offered if f != "table")

    def decorator(func):
        func = wide_option(func) if "table" in offered else func
        return click.option(
            "--format",
            "fmt",
            type=click.Choice(offered),
            default=offered[0],
            show_default=True,
            help=f"Output format; {scripts} {'are' if ' and ' in scripts else 'is'} for "
            "scripts (the values as stored).",
        )(func)

    return decorator


def _set_wide(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[WIDE] = True


def wide_option(func):
    """``--wide``: every table shows all its columns, whole, however narrow the terminal (the
    rule that fits a table otherwise: :mod:`mmina.cli.fitting`)."""
    return click.option(
        "--wide",
        is_flag=True,
        expose_value=False,
        callback=_set_wide,
        help="Tables show every column, whole, however narrow the terminal (which then "
        "wraps their lines); without it a table fits the terminal.",
    )(func)


RUN_REF = "a run id, an unambiguous prefix of one, or latest"
"""What a ``--run`` option accepts (see :meth:`mmina.store.Store.resolve_run`)."""


SUITE_HELP = (
    "Task file or folder in the MMInA format, or a built-in suite folder name such as multi567 "
    "(default: the whole built-in suite)."
)
"""What ``--tasks PATH`` takes, on every command that reads a suite."""


def old_arguments(values: tuple[str, ...], old: str, new: str) -> tuple[str, ...]:
    """Values given as positional arguments, as a command took them before it took options like
    every other command (still accepted, with a warning; ``old`` and ``new`` name both forms)."""
    if values:
        echo(
            f"Warning: {old} as arguments is an old form; use {new} (the old one will go in a later version)",
            err=True,
        )
    return values


def run_option(what: str, multiple: bool = False, required: bool = False):
    """``--run RUN``: a run of the store, by id, unambiguous prefix or ``latest`` (``what``:
    the help text before that; ``multiple``: repeatable)."""
    return click.option(
        "--run",
        "runs" if multiple else "run_id",
        multiple=multiple,
        required=required,
        metavar="RUN",
        help=f"{what} ({RUN_REF}{'; repeatable' if multiple else ''}).",
    )


_RENAMED = "mmina.renamed"
"""``ctx.meta`` key: the values given under an option's old name, by the new option's parameter."""


def renamed_option(name: str, dest: str, old: str, short: str | None = None, **kwargs: Any):
    """``click.option(name, dest, **kwargs)`` (and its ``short`` name) that still takes its old
    name ``old``: hidden from help, it works as before with a warning on stderr (giving both
    names is an error). A ``callback`` in ``kwargs`` sees the value under either name."""
    then = kwargs.pop("callback", None)

    def keep_old(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value is not None and value != ():
            echo(
                f"Warning: {old} is an old name; use {name} (the old one will go in a later version)",
                err=True,
            )
            ctx.meta.setdefault(_RENAMED, {})[dest] = value
        return value

    def take_old(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        given = ctx.meta.get(_RENAMED, {})
        if dest in given:
            if ctx.get_parameter_source(dest) == click.core.ParameterSource.COMMANDLINE:
                raise click.UsageError(f"give {name} or its old name {old}, not both")
            value = given[dest]
        return then(ctx, _param, value) if then else value

    def decorator(func: Any) -> Any:
        func = click.option(*([short] if short else []), name, dest, callback=take_old, **kwargs)(func)
        return click.option(
            old,
            f"renamed_{dest}",
            hidden=True,
            is_eager=True,
            expose_value=False,
            callback=keep_old,
            type=kwargs.get("type"),
            metavar=kwargs.get("metavar"),
            multiple=kwargs.get("multiple", False),
            is_flag=kwargs.get("is_flag"),
        )(func)

    return decorator


FILE, FOLDER, FILE_OR_FOLDER = "FILE", "DIR", "PATH"
"""What ``-o/--output`` writes (its metavar)."""


def output_option(
    help: str, writes: str = FILE, required: bool = False, checked: bool = True, old: str | None = None
):
    """``-o/--output``: one name for what every command writes (``writes``: a FILE, a DIR, or
    either, a PATH, which click checks unless ``checked`` is false and the command does, with
    :func:`mmina.outputs.output_path`; ``old``: the name this command took before, still
    accepted with a warning)."""
    kind = {"file_okay": writes != FOLDER, "dir_okay": writes != FILE} if checked else {}
    kwargs: dict[str, Any] = {
        "type": click.Path(path_type=Path, **kind),
        "metavar": writes,
        "required": required,
        "help": help,
    }
    if old:
        return renamed_option("--output", "output", old, short="-o", **kwargs)
    return click.option("-o", "--output", "output", **kwargs)


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
