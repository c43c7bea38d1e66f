"""Stored episodes as evaluators see them: Arrow tables in, :class:`EpisodeView` out.

Each table is read once for all the runs asked for, only the step fields an evaluator reads
are converted, and runs of the same suite share parsed tasks: rescoring a store of a
hundred thousand episodes is dominated by the evaluators, not by reading.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mmina.evaluators.base import EpisodeView, Evaluator, EvaluatorError, StepView, step_fields
from mmina.store import Store
from mmina.tasks import Task, task_from_row

Earlier = tuple[str, str]
"""An earlier task verdict of the same evaluator: (batch_id, verdict)."""


def load_views(store: Store, runs: Iterable[str], only: set[str] | None = None,
               with_steps: bool = True, evaluator: Evaluator | None = None) -> list[EpisodeView]:
    """The episodes of ``runs`` (only those in ``only`` when given) with tasks and, unless
    ``with_steps`` is false, steps (only the fields ``evaluator`` reads, when given). Each
    table is read once for all runs; runs of the same suite share parsed tasks."""
    runs = list(dict.fromkeys(runs))
    every = set(runs) == set(store.run_ids())
    tasks = _tasks(_read(store, "tasks", runs, ["task_id", "original_json", "task_sha256"], every))
    episodes = _read(store, "episodes", runs, every=every)
    if only:
        episodes = episodes.filter(pc.is_in(episodes.column("episode_id"), pa.array(sorted(only))))
    fields = step_fields(evaluator) if evaluator is not None else StepView._fields
    steps = _steps_by_episode(_read(store, "steps", runs, ["episode_id", *fields], every)) if with_steps else {}
    views = []
    for row in _rows_in_order(episodes, runs):
        run_id, episode_id, task_id = row["run_id"], row["episode_id"], row["task_id"]
        task = tasks.get((run_id, task_id))
        if task is None:
            raise EvaluatorError(f"episode {episode_id} of run {run_id} has no task {task_id}")
        views.append(EpisodeView(run_id, episode_id, task, row, steps.get(episode_id, ())))
    return views


def _rows_in_order(episodes: pa.Table, runs: list[str]) -> list[Row]:
    """Episode rows by run (in the order given), start time and id."""
    rank = pc.index_in(episodes.column("run_id"), pa.array(runs))
    episodes = episodes.append_column("_rank", rank).sort_by(
        [("_rank", "ascending"), ("started_at", "ascending"), ("episode_id", "ascending")]).drop_columns(["_rank"])
    columns = _Columns(episodes)
    return [Row(columns, index) for index in range(episodes.num_rows)]


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


def _read(store: Store, table: str, runs: list[str], columns: list[str] | None = None,
          every: bool | None = None) -> pa.Table:
    """A table restricted to ``runs`` (with its ``run_id`` column), read in one pass;
    ``every``: whether ``runs`` are all the store's runs, when the caller knows."""
    wanted = [*columns, "run_id"] if columns else None
    if every if every is not None else set(runs) == set(store.run_ids()):
        return store.read(table, columns=wanted)
    return pa.concat_tables([store.read(table, run_id=run_id, columns=wanted) for run_id in runs])


def _tasks(rows: pa.Table) -> dict[tuple[str, str], Task]:
    """Tasks by (run, task id), each distinct task parsed once however many runs hold it."""
    runs, ids, sums = (rows.column(name).to_pylist() for name in ("run_id", "task_id", "task_sha256"))
    parsed: dict[tuple[str, str], Task] = {}
    tasks = {}
    for index, (run_id, task_id, digest) in enumerate(zip(runs, ids, sums)):
        key = (task_id, digest or f"row {index}")  # no checksum: parse that row on its own
        if key not in parsed:
            row = {"task_id": task_id, "task_sha256": digest, "original_json": rows.column("original_json")[index].as_py()}
            parsed[key] = task_from_row(row)
        tasks[(run_id, task_id)] = parsed[key]
    return tasks


def _steps_by_episode(table: pa.Table) -> dict[str, tuple[StepView, ...]]:
    """Steps grouped by episode in step order, built from column arrays (fast for millions);
    fields not read stay None."""
    table = table.sort_by([("episode_id", "ascending"), ("step_index", "ascending")])
    columns = {name: table.column(name).to_pylist() for name in table.column_names if name != "run_id"}
    columns["url"] = [url or "" for url in columns["url"]]
    unread = [None] * table.num_rows
    views = list(map(StepView, *(columns.get(name, unread) for name in StepView._fields)))
    grouped: dict[str, tuple[StepView, ...]] = {}
    episode_ids, start = columns["episode_id"], 0
    for end in range(1, len(views) + 1):
        if end == len(views) or episode_ids[end] != episode_ids[start]:
            grouped[episode_ids[start]] = tuple(views[start:end])
            start = end
    return grouped


def previous_batches(store: Store, runs: Iterable[str], evaluator: str) -> dict[str, list[Earlier]]:
    """Earlier task-level verdicts of ``evaluator`` by episode: (batch_id, verdict), oldest first."""
    table = _read(store, "scores", list(dict.fromkeys(runs)), ["episode_id", "evaluator", "level", "verdict",
                                                                "batch_id", "scored_at"])
    mask = pc.and_(pc.equal(table.column("evaluator"), evaluator), pc.equal(table.column("level"), "task"))
    table = table.filter(mask).sort_by([("episode_id", "ascending"), ("scored_at", "ascending"),
                                        ("batch_id", "ascending")])
    found: dict[str, list[Earlier]] = defaultdict(list)
    columns = [table.column(name).to_pylist() for name in ("episode_id", "batch_id", "verdict")]
    for episode_id, batch_id, verdict in zip(*columns):
        found[episode_id].append((batch_id, verdict))
    return found


