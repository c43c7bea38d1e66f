"""What the commands print: tables and lines that show the stored text as it is.

Three rules, for every command. A cell is literal text: nothing in it is read as Rich markup
(``[active]``, ``[/x]``, ``goto [http://...]``) or as an emoji code (``:smile:``). Control
characters (an ANSI escape in a page title, a carriage return in a model's reply) are shown as
escapes such as ``\\x1b``, never sent raw to the terminal, where they would recolour it, move the
cursor or hide text; newlines stay line breaks. And when stdout is not a terminal nothing is
wrapped: lines stay whole and a table is as wide as its widest row (scripts that read the
output should still ask for ``--format csv`` or ``json``, which keep the raw values).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # Rich is imported when something is printed, not for --help
    from rich.console import Console, JustifyMethod
    from rich.progress import Progress
    from rich.table import Table as RichTable

    from mmina.analysis.tables import Table

UNWRAPPED_WIDTH = 1_000_000
"""The console width when stdout is not a terminal: wider than any table, so none is folded."""

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Every C0 control but the newline and the tab, DEL, the C1 controls, and the bidirectional
controls (which reorder what a terminal shows: "Trojan source")."""

_NAMED = {"\r": "\\r"}


def visible(text: str) -> str:
    """``text`` with each control character written as an escape (``\\x1b``, ``\\r``, ``\\u202e``);
    newlines and tabs stay (a tree's indentation, a diff)."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group()) or _escape(m.group()), text)


def visible_cell(text: str) -> str:
    """:func:`visible` for a table cell, tabs escaped too: a table would turn them into spaces."""
    return visible(text).replace("\t", "\\t")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _console(stderr: bool = False) -> Console:
    """A console that never interprets text (markup, emoji codes, highlighting) and never wraps
    a printed line; off a terminal, a table gets all the width it needs. (No ``file``: Rich then
    writes to whatever ``sys.stdout``/``sys.stderr`` is when it prints.)"""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stderr or stream.isatty() else UNWRAPPED_WIDTH
    return Console(stderr=stderr, width=width, markup=False, emoji=False, highlight=False, soft_wrap=True)


@lru_cache(maxsize=1)
def err_console() -> Console:
    """The console of progress bars and spinners on stderr."""
    return _console(stderr=True)


def stderr_is_terminal() -> bool:
    """Whether people watch stderr (a bar or a spinner), or it goes to a log (plain lines)."""
    return sys.stderr.isatty()


@contextmanager
def progress_bar(*fields: str, eta: bool = False) -> Iterator[Progress | None]:
    """A transient progress bar on stderr when it is a terminal (None in logs): description,
    bar, done of total, then each task field named in ``fields``, the time so far and, with
    ``eta``, the time left."""
    if not stderr_is_terminal():
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *(TextColumn(f"{{task.fields[{name}]}}") for name in fields),
        TimeElapsedColumn(),
    ]
    if eta:
        columns += [TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*columns, console=err_console(), transient=True) as bar:
        yield bar


@contextmanager
def status(message: str) -> Iterator[Callable[[str], None]]:
    """A spinner with ``message`` on stderr while work that can take a while runs (nothing in
    logs); yields a function that changes the message."""
    if not stderr_is_terminal():
        yield lambda _message: None
        return
    with err_console().status(message) as spinner:
        yield lambda text: spinner.update(text)


def echo(line: str = "", err: bool = False, nl: bool = True) -> None:
    """One line (or several) of text for people, control characters made visible, never wrapped."""
    click.echo(visible(line), err=err, nl=nl)


def words_to_width(text: str, width: int | None) -> str:
    """``text`` wrapped between words to ``width`` cells (None: as it is); a word longer than the
    width (an id, a path) stays whole on its own line."""
    if width is None:
        return text
    import textwrap

    return "\n".join(
        textwrap.fill(line, width, break_long_words=False, break_on_hyphens=False)
        for line in text.splitlines()
    )


def terminal_width() -> int | None:
    """The width of the terminal stdout is (None off a terminal, and with ``--wide``)."""
    console = _console()
    return console.width if console.is_terminal and not wide() else None


def say(line: str) -> None:
    """A sentence for people on stdout, wrapped between words on a terminal (a word is never
    broken: ids stay whole), one line elsewhere."""
    echo(words_to_width(line, terminal_width()))


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``|`([^`]+)`|\*\*([^*]+)\*\*")


def plain_text(doc: str) -> str:
    """reStructuredText or Markdown markup in help text (a docstring) as plain words:
    ``` ``exact_match`` ```, `` `x` ``, ``:class:`Name` `` and ``**bold**`` lose their marks."""
    text = _ROLE.sub(lambda m: m.group(1).rpartition(".")[2], doc)
    return _LITERAL.sub(lambda m: next(g for g in m.groups() if g is not None), text)


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
    """JSON for scripts: every value as stored (control characters are JSON escapes)."""
    click.echo(json.dumps(jsonable(data), indent=2, ensure_ascii=False))


def cell_text(value: Any) -> str:
    """A value as the text of a cell (None empty, lists and dicts as JSON, bytes by their size)."""
    if value is None:
        return ""
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(jsonable(value), ensure_ascii=False)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(bytes(value))} bytes>"
    return str(jsonable(value))


def csv_text(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """CSV for scripts: a header line, then the values as stored (None empty). A row with a
    carriage return has every field quoted: a lone CR is a line end to CSV readers."""
    out = io.StringIO()
    plain = csv.writer(out, lineterminator="\n")
    quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
    plain.writerow(columns)
    for row in rows:
        text = [cell_text(v) for v in row]
        (quoted if any("\r" in t for t in text) else plain).writerow(text)
    return out.getvalue()


def write_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """:func:`csv_text` on stdout, byte for byte (``color=True``: click would strip what looks
    like an ANSI escape from a stored value)."""
    click.echo(csv_text(columns, rows), nl=False, color=True)


def render_rows(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    fmt: str = "table",
    title: str | None = None,
    secondary: Sequence[str] = (),
) -> None:
    """Rows as a table for people (``secondary``: the columns a narrow terminal leaves out
    first), CSV, or a JSON list of objects."""
    if fmt == "json":
        print_json([dict(zip(columns, row)) for row in rows])
    elif fmt == "csv":
        write_csv(columns, rows)
    else:
        print_table(columns, [[cell_text(v) for v in row] for row in rows], title, secondary=secondary)


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    title: str | None = None,
    title_justify: JustifyMethod = "center",
    secondary: Sequence[str] = (),
) -> None:
    """Text cells as a terminal table fitted to the terminal (:mod:`mmina.cli.fitting`: ids
    whole, headers unbroken, columns named in ``secondary`` left out first); an empty one is one
    line saying so."""
    if not rows:
        echo(f"{title}: no rows" if title else f"no rows (columns: {', '.join(columns)})")
        return
    from rich.table import Table as RichTable
    from rich.text import Text

    from mmina.cli.fitting import fit, is_key

    heads = [visible_cell(column) for column in columns]
    cells = [[visible_cell(value) for value in row] for row in rows]
    available = terminal_width()
    fitted = fit(heads, cells, available, secondary)
    caption = Text(words_to_width(visible_cell(title), available)) if title else None
    table = RichTable(title=caption, title_justify=title_justify)
    for index, width in zip(fitted.shown, fitted.widths):
        table.add_column(Text(heads[index]), width=width, no_wrap=is_key(heads[index]), overflow="fold")
    for row in cells:
        table.add_row(*(Text(row[index]) for index in fitted.shown))
    _print_renderable(table, fitted.width)
    if fitted.dropped:
        note = f"(left out to fit {available} columns: {_names(fitted.dropped)}; --wide shows all)"
        echo(words_to_width(note, available))


def _names(names: Sequence[str], most: int = 8) -> str:
    """The first ``most`` names, then how many more."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def print_tables(tables: Sequence[Table]) -> None:
    """Report tables for people: rates with their 95% intervals in one cell (``x [lo–hi]``),
    the title on the left."""
    from mmina.analysis.display import display
    from mmina.cli.fitting import SECONDARY

    for table in tables:
        columns, rows = display(table)
        print_table(columns, rows, table.title, title_justify="left", secondary=SECONDARY.get(table.name, ()))


def _print_renderable(table: RichTable, width: int) -> None:
    """On a terminal, with its styles, ``width`` cells wide when the terminal is narrower (the
    terminal then wraps its lines); elsewhere as plain lines without trailing blanks, as wide as
    the table needs."""
    console = _console()
    if console.is_terminal:
        console.width = max(console.width, width)
        console.print(table)
        return
    with console.capture() as captured:
        console.print(table)
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


WIDE = "mmina.wide"
"""``ctx.meta`` key: ``--wide`` was given (every table shows all its columns, whole)."""


def wide() -> bool:
    """Whether the command was given ``--wide``."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.meta.get(WIDE))
