"""How table cells read: rates as percentages with their interval, merged into one column.

The terminal and HTML renderings use this; JSON and CSV keep the raw columns.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mmina.analysis.tables import Table


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def rate_cell(value: float | None, lo: float | None, hi: float | None) -> str:
    if value is None:
        return "–"
    return f"{percent(value)} [{lo:.0%}–{hi:.0%}]"


def cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, datetime):
        return f"{value.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    return str(value)


def fold_flags(table: Table) -> Table:
    """Boolean columns (failure modes) folded into one ``modes`` column listing the true ones."""
    flags = [i for i, _ in enumerate(table.columns) if table.rows and isinstance(table.rows[0][i], bool)]
    if not flags:
        return table
    keep = [i for i in range(len(table.columns)) if i not in flags]
    rows = tuple(
        (*(r[i] for i in keep), ", ".join(table.columns[i] for i in flags if r[i])) for r in table.rows
    )
    return Table(table.name, table.title, (*(table.columns[i] for i in keep), "modes"), rows)


def display(table: Table) -> tuple[list[str], list[list[str]]]:
    """Column names and text cells; ``x, x_lo, x_hi`` become one ``x [95% CI]`` column and
    boolean columns one ``modes`` column."""
    table = fold_flags(table)
    columns: list[str] = []
    picks: list[tuple[int, ...]] = []
    names = list(table.columns)
    for i, name in enumerate(names):
        if name.endswith(("_lo", "_hi")) and name[:-3] in names:
            continue
        if f"{name}_lo" in names:
            columns.append(f"{name} [95% CI]")
            picks.append((i, names.index(f"{name}_lo"), names.index(f"{name}_hi")))
        else:
            columns.append(name)
            picks.append((i,))
    rows = [
        [rate_cell(*(row[j] for j in pick)) if len(pick) == 3 else cell(row[pick[0]]) for pick in picks]
        for row in table.rows
    ]
    return columns, rows
