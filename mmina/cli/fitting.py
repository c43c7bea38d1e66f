"""How a table fits the terminal: which of its columns are shown, and how wide each one is.

One rule for every table a command prints on a terminal:

* An identifier (a column whose name ends in ``id``, ``run``, ``task`` or ``episode``:
  ``run_id``, ``source episode``, a paired side's ``episode_a``) is never wrapped and never left
  out: a run id stays on one line, whole, to be copied.
* A header is never broken inside a word: a column is at least as wide as its header's longest
  word (``tasks_passed`` is one word; ``task_sr [95% CI]`` may take two lines).
* A cell wraps between words; a word folds only when it is longer than :data:`FOLD_AT`
  characters (a URL, a long model output), so a number, a date or a status stays whole.
* The first column, each row's label, stays on one line when it is short (:data:`LABEL_WIDTH`).
* When the columns do not fit at those widths, columns are left out: first those the table
  names as secondary (:data:`SECONDARY`), then from the right; the first column and the
  identifiers stay. The command says which were left out; ``--wide`` shows every column.
* When even the columns kept do not fit (identifiers wider than the terminal), the table is
  as wide as they need and the terminal wraps its lines.

Off a terminal (a pipe, a file) and with ``--wide`` every column is shown at its full width.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rich.cells import cell_len

FOLD_AT = 12
"""A cell's word longer than this may be folded to fit; shorter words stay whole."""

LABEL_WIDTH = 24
"""The first column (each row's label: a bucket, a group, a task) is never wrapped when it is no
wider than this."""

KEY_NAMES = frozenset({"id", "run", "task", "episode"})
"""The last words of the names of columns whose values are identifiers."""

SECONDARY: dict[str, tuple[str, ...]] = {
    "runs": ("tasks", "episodes", "errors", "tasks_done", "started", "agent", "model", "status"),
    "comparison": ("evaluator", "hops", "hops_passed", "tasks", "passed"),
    "rescore": ("hops_passed", "hops_total"),
    "hop_positions": ("passed_after_previous", "reached"),
    "cost": ("mean_completion_tokens", "mean_prompt_tokens"),
}
"""Per table (by its name), the columns (as shown: ``x [95% CI]`` for a rate) a narrow terminal
leaves out first, in that order: the tables keep the ids and the success rates (and the cost)
before the counts behind them (the agent is in a run's id already)."""


def is_key(name: str) -> bool:
    """Whether a column holds identifiers (never wrapped, never left out): its name's last word
    (``run_id``, ``source episode``) is one of :data:`KEY_NAMES`, a paired table's side
    (``episode_a``, ``run_id_b``) left aside."""
    words = re.split(r"[\s_]+", re.sub(r"_[ab]$", "", name.lower()).strip())
    return words[-1] in KEY_NAMES


@dataclass(frozen=True)
class Column:
    """A column's widths in terminal cells: ``natural`` (its widest line) and ``least`` (the
    narrowest that breaks no identifier, no header word and no short word)."""

    name: str
    natural: int
    least: int
    key: bool


@dataclass(frozen=True)
class Fit:
    """What is shown: the indexes of the columns kept, each one's content width, the names of
    those left out, and the whole table's width (borders and padding included)."""

    shown: tuple[int, ...]
    widths: tuple[int, ...]
    dropped: tuple[str, ...]

    @property
    def width(self) -> int:
        return table_width(self.widths)


def table_width(widths: Sequence[int]) -> int:
    """A boxed table's width: its columns, one space either side of each, a rule between them
    and one on each side."""
    return sum(widths) + 3 * len(widths) + 1


def _lines(text: str) -> list[str]:
    return text.splitlines() or [""]


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


def measure(name: str, cells: Sequence[str]) -> Column:
    """The widths of a column headed ``name`` holding ``cells``."""
    natural = max(cell_len(line) for text in (name, *cells) for line in _lines(text))
    if is_key(name):
        return Column(name, natural, natural, True)
    words = min(max((_longest_word(text) for text in cells), default=0), FOLD_AT)
    return Column(name, natural, min(natural, max(_longest_word(name), words, 1)), False)


def fit(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    available: int | None,
    secondary: Sequence[str] = (),
) -> Fit:
    """Which columns to show and how wide, for a terminal ``available`` cells wide (None: as
    wide as the table needs, every column shown whole)."""
    measured = [measure(name, [row[i] for row in rows]) for i, name in enumerate(columns)]
    if measured and measured[0].natural <= LABEL_WIDTH:
        measured[0] = replace(measured[0], least=measured[0].natural)
    if available is None:
        return Fit(tuple(range(len(measured))), tuple(c.natural for c in measured), ())
    shown = _kept(measured, available, secondary)
    widths = _spread([measured[i] for i in shown], available - table_width([0] * len(shown)))
    return Fit(tuple(shown), widths, tuple(c.name for i, c in enumerate(measured) if i not in shown))


def _kept(columns: Sequence[Column], available: int, secondary: Sequence[str]) -> list[int]:
    """The columns kept once the droppable ones are left out, in order, until the rest fits."""
    droppable = [i for i, c in enumerate(columns) if i and not c.key]
    order = [i for name in secondary for i in droppable if columns[i].name == name]
    order += [i for i in reversed(droppable) if i not in order]
    shown = list(range(len(columns)))
    for index in order:
        if table_width([columns[i].least for i in shown]) <= available:
            break
        shown.remove(index)
    return shown


def _spread(columns: Sequence[Column], room: int) -> tuple[int, ...]:
    """Content widths that fill ``room`` cells: every column at least its ``least``, the widest
    ones narrowed first (one cap for all, found by bisection), what is left given to the capped."""

    def widths(cap: int) -> list[int]:
        return [max(c.least, min(c.natural, cap)) for c in columns]

    low, high = 0, max((c.natural for c in columns), default=0)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if sum(widths(middle)) <= room else (low, middle - 1)
    result = widths(low)
    spare = room - sum(result)
    for i, column in enumerate(columns):
        if spare <= 0:
            break
        if result[i] < column.natural:
            result[i] += 1
            spare -= 1
    return tuple(result)
