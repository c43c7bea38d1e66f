"""Stored episodes as evaluators see them: Arrow tables in, an :class:`EpisodeBatch` out.

Only the columns the evaluator reads are read; runs of the same suite share parsed tasks
(and only one copy of a task's JSON is read). The batch keeps the episodes column by
column: an evaluator with ``score_batch`` walks those lists, run by run (:func:`by_run`:
the next runs' steps are read while one is scored), any other one gets an
:class:`EpisodeView` per episode, all at once (:func:`load_batch`).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mmina.errors import DAMAGED_RUN_HINT, unreadable_file
from mmina.evaluators.base import (
    DEFAULT_STEP_FIELDS,
    EpisodeView,
    Evaluator,
    EvaluatorError,
    StepView,
    Trace,
    episode_fields,
    needs_steps,
    step_fields,
)
from mmina.store import Store
from mmina.tasks.task import Task, task_from_row

Earlier = tuple[str, str]
"""An earlier task verdict of the same evaluator: (batch_id, verdict)."""

PREFETCH = 2
"""Runs whose steps are read ahead while one is scored."""
ORDER_COLUMNS = ("episode_id", "task_id", "started_at")
"""What ordering the episodes and finding their tasks need (with ``run_id``), whatever the evaluator reads."""


@dataclass(frozen=True)
class StepColumns:
    """The steps of a batch's episodes as Python lists, in episode then step order: episode
    ``i``'s steps are rows ``offsets[i]`` to ``offsets[i + 1]``. ``url`` is never None ("")."""

    offsets: list[int]
    columns: Mapping[str, list[Any]]

    @classmethod
    def none(cls, episodes: int) -> StepColumns:
        """No step for any of ``episodes`` episodes (the evaluator reads none)."""
        return cls([0] * (episodes + 1), {"step_index": [], "url": []})

    def views(self) -> list[StepView]:
        """Every step as a :class:`StepView` (fields not read are None)."""
        unread = [None] * self.offsets[-1]
        return list(map(StepView, *(self.columns.get(name, unread) for name in StepView._fields)))


@dataclass(frozen=True)
class EpisodeBatch:
    """The selected episodes column by column, in scoring order: by run (in the order
    asked), start time, id. ``episodes`` holds their rows (the columns read), in that order."""

    run_ids: list[str]
    episode_ids: list[str]
    tasks: list[Task]
    episodes: pa.Table
    steps: StepColumns

    def __len__(self) -> int:
        return len(self.episode_ids)

    def part(self, start: int, end: int, steps: StepColumns) -> EpisodeBatch:
        """Episodes ``start`` to ``end``, with these steps."""
        return EpisodeBatch(
            self.run_ids[start:end],
            self.episode_ids[start:end],
            self.tasks[start:end],
            self.episodes.slice(start, end - start),
            steps,
        )

    @cached_property
    def final_answers(self) -> list[str | None]:
        return self.episodes.column("final_answer").to_pylist()

    @cached_property
    def final_urls(self) -> list[str | None]:
        """Each episode's terminal observation URL (None: unknown, or the column was not read)."""
        if "final_url" not in self.episodes.column_names:
            return [None] * len(self)
        return self.episodes.column("final_url").to_pylist()

    @cached_property
    def prefixes(self) -> list[tuple[Sequence[int], int]]:
        """Each episode's given hop steps and prefix length (``()``, 0: not conditioned, or not read)."""
        names = self.episodes.column_names
        if "prefix_hop_steps" not in names or "prefix_steps" not in names:
            return [((), 0)] * len(self)
        steps = self.episodes.column("prefix_steps").to_pylist()
        return [
            (given or (), count or 0)
            for given, count in zip(self.episodes.column("prefix_hop_steps").to_pylist(), steps)
        ]

    def trace(self, position: int) -> Trace:
        """What the deterministic built-ins read of the episode at ``position``."""
        start, end = self.steps.offsets[position], self.steps.offsets[position + 1]
        columns = self.steps.columns
        return Trace(
            self.tasks[position],
            self.final_answers[position],
            columns["step_index"][start:end],
            columns["url"][start:end],
            self.final_urls[position],
            *self.prefixes[position],
        )

    def views(self) -> list[EpisodeView]:
        """One :class:`EpisodeView` per episode (steps in order; none when none were read)."""
        rows, steps, offsets = _Columns(self.episodes), self.steps.views(), self.steps.offsets
        return [
            EpisodeView(
                run_id, episode_id, task, Row(rows, index), tuple(steps[offsets[index] : offsets[index + 1]])
            )
            for index, (run_id, episode_id, task) in enumerate(
                zip(self.run_ids, self.episode_ids, self.tasks)
            )
        ]


def load_batch(
    store: Store,
    runs: Iterable[str],
    only: set[str] | None = None,
    evaluator: Evaluator | None = None,
    every: bool | None = None,
) -> EpisodeBatch:
    """The episodes of ``runs`` (only those in ``only`` when given) with tasks and, when
    ``evaluator`` reads them, steps — only the fields and episode columns it reads. ``every``:
    whether ``runs`` are all the store's runs, when the caller knows."""
    runs = list(dict.fromkeys(runs))
    every = set(runs) == set(store.run_ids()) if every is None else every
    episodes = load_episodes(store, runs, only, evaluator, every)
    return (
        episodes
        if evaluator is not None and not needs_steps(evaluator)
        else with_steps(store, episodes, evaluator, every)
    )


def with_steps(
    store: Store, episodes: EpisodeBatch, evaluator: Evaluator | None, every: bool
) -> EpisodeBatch:
    """``episodes`` with their steps (the fields ``evaluator`` reads), read at once."""
    wanted = _wanted_steps(evaluator)
    runs = list(dict.fromkeys(episodes.run_ids))
    if not runs:
        return episodes
    steps = _sorted_steps(_read(store, "steps", runs, ["episode_id", *wanted], every), episodes.episode_ids)
    return episodes.part(0, len(episodes), _step_columns(steps, len(episodes), wanted))


def load_episodes(
    store: Store, runs: list[str], only: set[str] | None, evaluator: Evaluator | None, every: bool
) -> EpisodeBatch:
    """:func:`load_batch` without steps (each episode has none)."""
    fields = episode_fields(evaluator)
    columns = None if fields is None else list(dict.fromkeys([*ORDER_COLUMNS, *fields]))
    episodes = _episodes_in_order(_read(store, "episodes", runs, columns, every), runs, only)
    run_ids, episode_ids, task_ids = (
        episodes.column(n).to_pylist() for n in ("run_id", "episode_id", "task_id")
    )
    tasks = _tasks_of(store, _tasks(store, runs, every), run_ids, episode_ids, task_ids)
    return EpisodeBatch(run_ids, episode_ids, tasks, episodes, StepColumns.none(len(episode_ids)))


def by_run(store: Store, episodes: EpisodeBatch, evaluator: Evaluator) -> Iterator[EpisodeBatch]:
    """``episodes`` run by run, each with its steps (the fields ``evaluator`` reads). The next
    runs' steps are read and ordered (by Arrow, without the GIL) while the caller scores the
    current one, and only one run's steps at a time become Python objects."""
    wanted = _wanted_steps(evaluator)
    spans = _run_spans(episodes.run_ids)

    def read(span: tuple[str, int, int]) -> pa.Table:
        run_id, start, end = span
        table = store.read("steps", run_id=run_id, columns=["episode_id", *wanted])
        return _sorted_steps(table, episodes.episode_ids[start:end])

    with ThreadPoolExecutor(1) as reader:
        pending = deque(reader.submit(read, span) for span in spans[:PREFETCH])
        for index, (_, start, end) in enumerate(spans):
            steps = pending.popleft().result()
            if index + PREFETCH < len(spans):
                pending.append(reader.submit(read, spans[index + PREFETCH]))
            yield episodes.part(start, end, _step_columns(steps, end - start, wanted))


def _run_spans(run_ids: list[str]) -> list[tuple[str, int, int]]:
    """(run, start, end) of each run's consecutive episodes."""
    spans: list[tuple[str, int, int]] = []
    for index, run_id in enumerate(run_ids):
        if spans and spans[-1][0] == run_id:
            spans[-1] = (run_id, spans[-1][1], index + 1)
        else:
            spans.append((run_id, index, index + 1))
    return spans


def _wanted_steps(evaluator: Evaluator | None) -> tuple[str, ...]:
    return step_fields(evaluator) if evaluator is not None else DEFAULT_STEP_FIELDS


def _episodes_in_order(episodes: pa.Table, runs: list[str], only: set[str] | None) -> pa.Table:
    """Episode rows (of ``only`` when given) by run (in the order given), start time and id."""
    if only:
        episodes = episodes.filter(pc.is_in(episodes.column("episode_id"), pa.array(sorted(only))))
    rank = pc.index_in(episodes.column("run_id"), pa.array(runs))
    return (
        episodes.append_column("_rank", rank)
        .sort_by([("_rank", "ascending"), ("started_at", "ascending"), ("episode_id", "ascending")])
        .drop_columns(["_rank"])
    )


def _tasks_of(
    store: Store,
    tasks: Mapping[tuple[str, str], Task],
    run_ids: list[str],
    episode_ids: list[str],
    task_ids: list[str],
) -> list[Task]:
    found = [tasks.get(key) for key in zip(run_ids, task_ids)]
    for run_id, episode_id, task_id, task in zip(run_ids, episode_ids, task_ids, found):
        if task is None:
            why = _why_no_task(store, run_id)
            raise EvaluatorError(f"episode {episode_id} of run {run_id} has no task {task_id}{why}")
    return found  # type: ignore[return-value]


def _why_no_task(store: Store, run_id: str) -> str:
    """Why a run lacks a task its episode names, when a damaged ``tasks`` file is the reason."""
    lost = store.unreadable("tasks", run_id)
    return f": {unreadable_file('tasks', lost[0][0], lost[0][1])}; {DAMAGED_RUN_HINT}" if lost else ""


class _Columns:
    """A table's columns as Python lists, each converted the first time any row reads it."""

    def __init__(self, table: pa.Table) -> None:
        self.table, self.names = table, tuple(table.column_names)
        self._lists: dict[str, list[Any]] = {}

    def value(self, name: str, index: int) -> Any:
        if name not in self._lists:
            self._lists[name] = self.table.column(name).to_pylist()
        return self._lists[name][index]


class Row(Mapping[str, Any]):
    """One stored row as a read-only mapping; columns nobody reads are never converted."""

    __slots__ = ("_columns", "_index")

    def __init__(self, columns: _Columns, index: int) -> None:
        self._columns, self._index = columns, index

    def __getitem__(self, name: str) -> Any:
        if name not in self._columns.names:
            raise KeyError(name)
        return self._columns.value(name, self._index)

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns.names)

    def __len__(self) -> int:
        return len(self._columns.names)


def _read(
    store: Store,
    table: str,
    runs: list[str],
    columns: Sequence[str] | None = None,
    every: bool | None = None,
    where: Mapping[str, Any] | None = None,
) -> pa.Table:
    """A table restricted to ``runs`` (with its ``run_id`` column), read in one pass;
    ``every``: whether ``runs`` are all the store's runs, when the caller knows."""
    wanted = [*columns, "run_id"] if columns else None
    if every if every is not None else set(runs) == set(store.run_ids()):
        return store.read(table, columns=wanted, where=where)
    return pa.concat_tables(
        [store.read(table, run_id=run_id, columns=wanted, where=where) for run_id in runs]
    )


def _tasks(store: Store, runs: list[str], every: bool) -> dict[tuple[str, str], Task]:
    """Tasks by (run, task id), each distinct task parsed once however many runs hold it;
    a task's JSON is read only from the run holding its first copy."""
    table = _read(store, "tasks", runs, ["task_id", "task_sha256"], every)
    runs_of, sums = table.column("run_id").to_pylist(), table.column("task_sha256").to_pylist()
    keys = [
        (task_id, digest or f"row {index}")  # no checksum: that row on its own
        for index, (task_id, digest) in enumerate(zip(table.column("task_id").to_pylist(), sums))
    ]
    first: dict[tuple[str, str], tuple[str, int, str | None]] = {}  # key -> (run, row in that run, checksum)
    nth: Counter[str] = Counter()
    for run_id, key, digest in zip(runs_of, keys, sums):
        first.setdefault(key, (run_id, nth[run_id], digest))
        nth[run_id] += 1
    parsed = _parse_first_copies(store, first)
    return {(run_id, key[0]): parsed[key] for run_id, key in zip(runs_of, keys)}


def _parse_first_copies(
    store: Store, first: Mapping[tuple[str, str], tuple[str, int, str | None]]
) -> dict[tuple[str, str], Task]:
    texts = {
        run_id: store.read("tasks", run_id=run_id, columns=["original_json"]).column("original_json")
        for run_id in dict.fromkeys(run_id for run_id, _, _ in first.values())
    }
    return {
        key: task_from_row(
            {"task_id": key[0], "task_sha256": digest, "original_json": texts[run_id][row].as_py()}
        )
        for key, (run_id, row, digest) in first.items()
    }


def _sorted_steps(table: pa.Table, episode_ids: list[str]) -> pa.Table:
    """The steps of these episodes, with each one's ``_position`` among them, by position then
    step index (stable: steps with the same index keep their stored order)."""
    position = pc.index_in(table.column("episode_id"), value_set=pa.array(episode_ids, pa.string()))
    table = table.append_column("_position", position).filter(pc.is_valid(position))
    return table.sort_by([("_position", "ascending"), ("step_index", "ascending")])


def _step_columns(table: pa.Table, episodes: int, fields: Sequence[str]) -> StepColumns:
    """Sorted steps (see :func:`_sorted_steps`) as Python lists, grouped by episode; fields
    not read stay out."""
    counts = [0] * episodes
    tally = pc.value_counts(table.column("_position"))
    for value, count in zip(tally.field("values").to_pylist(), tally.field("counts").to_pylist()):
        counts[value] = count
    columns = {name: table.column(name).to_pylist() for name in fields if name != "url"}
    columns["url"] = pc.fill_null(table.column("url"), "").to_pylist()
    return StepColumns([0, *accumulate(counts)], columns)


def previous_batches(
    store: Store, runs: Iterable[str], evaluator: str, every: bool | None = None
) -> dict[str, list[Earlier]]:
    """Earlier task-level verdicts of ``evaluator`` by episode: (batch_id, verdict), oldest
    first (only the ``scores`` row groups that may hold that evaluator's task rows are read)."""
    table = _read(
        store,
        "scores",
        list(dict.fromkeys(runs)),
        ["episode_id", "batch_id", "verdict", "scored_at"],
        every,
        where={"evaluator": evaluator, "level": "task"},
    )
    table = table.sort_by(
        [("episode_id", "ascending"), ("scored_at", "ascending"), ("batch_id", "ascending")]
    )
    found: dict[str, list[Earlier]] = defaultdict(list)
    columns = [table.column(name).to_pylist() for name in ("episode_id", "batch_id", "verdict")]
    for episode_id, batch_id, verdict in zip(*columns):
        found[episode_id].append((batch_id, verdict))
    return found
