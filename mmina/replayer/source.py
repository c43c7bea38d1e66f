"""What a replay reads of the recorded run: its row, settings, tasks, episodes and traffic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mmina.errors import SEE_EPISODES, SEE_RUNS, StoreError, not_found
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.seeding import Seeding
from mmina.replayer.archive import Archive, exchanges_from_rows
from mmina.store import Store
from mmina.store.runs import run_config
from mmina.tasks.budget import Limits
from mmina.tasks.task import Task, task_folder, task_from_row

Rows = dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class Source:
    """One recorded episode to replay (or to pool into a task's archive)."""

    episode_id: str
    task_id: str
    started_at: datetime
    blob_packs: tuple[str, ...]
    attempt: int = 1
    """The repeat it was in its run (``episodes.attempt``); its replay is the same repeat."""
    random_seeding: int | None = None
    """How its pages' ``Math.random`` and ``crypto`` were seeded (``episodes.random_seeding``; None:
    before schema version 10, scheme 1)."""

    def seeding(self, name: str | None = None) -> Seeding:
        """The seeding of a replay of it: its own scheme, seeded by its episode id (or ``name``)."""
        return Seeding.of(name or self.episode_id, self.random_seeding)


@dataclass(frozen=True)
class SourceRun:
    """What a replay needs of the recorded run: its row, settings, tasks and traffic (read once)."""

    run_id: str
    row: dict[str, Any]
    limits: Limits
    browser: dict[str, Any]
    tasks: dict[str, dict[str, Any]]
    requests: Rows

    @classmethod
    def load(cls, store: Store, run_id: str, episodes: set[str]) -> SourceRun:
        rows = store.read("runs", run_id=run_id).to_pylist()
        if not rows:
            raise StoreError(not_found("run", run_id, str(store.root), see=SEE_RUNS))
        config = run_config(rows[0].get("config_json"))
        known = {f.name for f in fields(Limits)}
        limits = Limits(**{k: v for k, v in (config.get("limits") or {}).items() if k in known})
        tasks = {row["task_id"]: row for row in store.read("tasks", run_id=run_id).to_pylist()}
        requests = by_episode(store, "requests", run_id, "seq", episodes)
        return cls(run_id, rows[0], limits, config.get("browser") or {}, tasks, requests)

    def browser_config(self, override: BrowserConfig | None) -> BrowserConfig:
        """The source's viewport and capture settings; how to launch the browser (executable,
        extra arguments, back-forward cache) from the caller (the source's own extra arguments
        pointed its host names at a live server)."""
        launch = {"executable", "extra_args", "back_forward_cache"}
        known = {f.name for f in fields(BrowserConfig)} - launch
        recorded = {k: v for k, v in self.browser.items() if k in known}
        recorded.update(
            viewport_width=self.row["viewport_width"], viewport_height=self.row["viewport_height"]
        )
        override = override or BrowserConfig()
        return BrowserConfig(
            **recorded,
            executable=override.executable,
            extra_args=tuple(override.extra_args),
            back_forward_cache=override.back_forward_cache,
        )

    def task(self, task_id: str) -> Task:
        """A recorded task, with the folder its file was read from (a relative ``storage_state``
        is found there again)."""
        return replace(
            task_from_row(self.tasks[task_id]), folder=task_folder(self.row.get("task_suite_path"), task_id)
        )

    def archive(self, store: Store, sources: Sequence[Source]) -> Archive:
        """The recorded requests of ``sources`` (pooled, in the sources' order) with their bodies."""
        rows = [row for source in sources for row in self.requests.get(source.episode_id, [])]
        digests = {r[c] for r in rows for c in ("response_body", "request_body") if r[c]}
        packs = sorted({p for s in sources for p in s.blob_packs})
        return Archive(exchanges_from_rows(rows, store.read_blobs(sorted(digests), packs)))


def select_sources(store: Store, run_id: str | None, episode_id: str | None) -> tuple[str, list[Source]]:
    """The source run and its committed episodes in start order, those a re-run superseded left
    out as every table leaves them (or just ``episode_id``)."""
    if bool(run_id) == bool(episode_id):
        raise StoreError("name exactly one source: --run ID or --episode ID")
    columns = [
        "episode_id",
        "task_id",
        "started_at",
        "blob_packs",
        "run_id",
        "attempt",
        "supersedes",
        "random_seeding",
    ]
    if episode_id:
        every = store.read("episodes", columns=columns)
        episodes = every.filter(pc.equal(every.column("episode_id"), episode_id))
        if not episodes.num_rows:
            known = every.column("episode_id").to_pylist()
            raise StoreError(not_found("episode", episode_id, str(store.root), known, SEE_EPISODES))
    else:
        run_id = store.resolve_run(str(run_id))  # named: exactly one of the two is
        episodes = store.read("episodes", run_id=run_id, columns=columns)
        if not episodes.num_rows:
            raise StoreError(f"run {run_id} has no finished episodes to replay")
    rows = episodes.sort_by("started_at").to_pylist()
    superseded = {r["supersedes"] for r in rows if r["supersedes"]}
    return rows[0]["run_id"], [
        Source(
            r["episode_id"],
            r["task_id"],
            r["started_at"],
            tuple(r["blob_packs"] or ()),
            r["attempt"] or 1,
            r["random_seeding"],
        )
        for r in rows
        if r["episode_id"] not in superseded
    ]


def by_episode(
    store: Store,
    table_name: str,
    run_id: str,
    order: str,
    episodes: set[str],
    columns: list[str] | None = None,
) -> Rows:
    """One table's rows of a run, grouped by episode, each group in ``order`` (read once per run)."""
    table = store.read(table_name, run_id=run_id, columns=columns)
    table = table.filter(pc.is_in(table.column("episode_id"), pa.array(sorted(episodes), pa.string())))
    grouped: Rows = {}
    for row in table.sort_by([("episode_id", "ascending"), (order, "ascending")]).to_pylist():
        grouped.setdefault(row["episode_id"], []).append(row)
    return grouped
