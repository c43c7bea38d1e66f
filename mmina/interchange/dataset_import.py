"""``mmina import dataset``: a folder written by ``mmina export dataset`` (or downloaded from the
Hub) back into a store, run by run: the runs and their tasks, every episode with its steps
(and requests, when the dataset has them), the blobs (screenshots from the image columns, the
rest from ``blobs``, each checked against its hash), and the score rows.

A dataset exported at an older store schema version is upgraded as the store upgrades old
files (the same migrations); a newer one is refused. Every run is checked to be new to the
store before anything is written; a run's episodes are committed together (one batch), so an
import that fails leaves at most a run with no episodes, never half an episode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mmina.interchange.dataset_export import FORMAT, FORMAT_VERSION, IMAGE_COLUMNS, MANIFEST
from mmina.interchange.stored import InterchangeError, Row
from mmina.store import Store
from mmina.store.layout import batch_stem
from mmina.store.migrations import check_readable, upgrade
from mmina.store.schema import EPISODES, REQUESTS, RUNS, SCORES, STEPS, TASKS, Table

READ_ROWS = 100
"""Rows read at a time (a row group of the export)."""
Progress = Callable[[int], None]


@dataclass
class DatasetImport:
    store: str
    runs: list[str] = field(default_factory=list)
    episodes: int = 0
    steps: int = 0
    requests: int = 0
    scores: int = 0
    blobs: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Dataset:
    """An exported folder: its manifest, and the rows of a config, one run at a time."""

    folder: Path
    manifest: dict[str, Any]

    @property
    def version(self) -> int:
        return int(self.manifest["schema_version"])

    def has(self, config: str) -> bool:
        return config in self.manifest["configs"]

    def batches(self, config: str, run_id: str | None = None) -> Iterator[pa.Table]:
        """The config's rows in row-group-sized tables, narrowed to one run."""
        for name in self.manifest["configs"].get(config, {}).get("files", []):
            try:
                file = pq.ParquetFile(self.folder / name)
                for batch in file.iter_batches(batch_size=READ_ROWS):
                    data = pa.Table.from_batches([batch])
                    yield data if run_id is None else data.filter(pc.equal(data.column("run_id"), run_id))
            except (OSError, pa.ArrowException) as exc:
                raise InterchangeError(
                    f"cannot read {self.folder / name}: {str(exc).splitlines()[0]}"
                ) from None

    def rows(self, config: str, table: Table | None, run_id: str | None = None) -> Iterator[tuple[Row, Row]]:
        """Each row as the store's table has it (upgraded from the dataset's schema version), with
        the row's image bytes by column."""
        images = IMAGE_COLUMNS.get(config, {})
        for data in self.batches(config, run_id):
            pictures = {hashed: data.column(column).to_pylist() for hashed, column in images.items()}
            kept = data.drop_columns([c for c in data.column_names if c == "run_id" or c in images.values()])
            rows = upgrade(table, kept, self.version).to_pylist() if table else kept.to_pylist()
            for index, row in enumerate(rows):
                yield row, {hashed: (values[index] or {}).get("bytes") for hashed, values in pictures.items()}


def open_dataset(folder: Path) -> _Dataset:
    """The exported folder at ``folder``, its manifest checked (format, versions, files)."""
    path = folder / MANIFEST
    if not path.is_file():
        raise InterchangeError(
            f"{folder} is not an mmina dataset: no {MANIFEST} (write one with `mmina export dataset`)"
        )
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InterchangeError(f"cannot read {path}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InterchangeError(f"{path} does not describe an mmina dataset")
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise InterchangeError(
            f"{path} is dataset format {manifest['format_version']}; this mmina reads up to "
            f"{FORMAT_VERSION} (pip install -U mmina)"
        )
    check_readable(int(manifest.get("schema_version", 0)), str(folder))
    for config in ("runs", "tasks", "episodes"):
        if config not in manifest.get("configs", {}):
            raise InterchangeError(f"{folder} has no {config} config")
    for files in (c["files"] for c in manifest["configs"].values()):
        missing = [name for name in files if not (folder / name).is_file()]
        if missing:
            raise InterchangeError(f"{folder} lacks {missing[0]} (the dataset is incomplete)")
    return _Dataset(folder, manifest)


def import_dataset(store: Store, folder: Path, progress: Progress | None = None) -> DatasetImport:
    """Import the dataset at ``folder`` into ``store`` (see the module)."""
    dataset = open_dataset(folder)
    run_ids = [str(r) for batch in dataset.batches("runs") for r in batch.column("run_id").to_pylist()]
    existing = set(run_ids) & set(store.run_ids())
    if existing:
        raise InterchangeError(
            f"run {min(existing)} is already in {store.location}: import into another store"
        )
    report = DatasetImport(store.location)
    for run_id, (run_row, _) in zip(run_ids, dataset.rows("runs", RUNS)):
        tasks = [row for row, _ in dataset.rows("tasks", TASKS, run_id)]
        if not store.begin_run(run_id, run_row, tasks):
            raise InterchangeError(f"run {run_id} is already in {store.location}: import into another store")
        _RunImport(store, dataset, run_id, report).run(progress)
        scores = [row for row, _ in dataset.rows("scores", SCORES, run_id)] if dataset.has("scores") else []
        if scores:
            store.append("scores", scores, stem=f"imported-{batch_stem()}", run_id=run_id)
        report.scores += len(scores)
        report.runs.append(run_id)
    return report


BLOB_COLUMNS = {
    "steps": ("screenshot", "screenshot_som", "model_input"),
    "episodes": ("final_screenshot",),
    "requests": ("request_body", "response_body"),
}
"""The hash columns whose blobs an episode's ``blob_packs`` should name."""


class _RunImport:
    """One run's episodes into one batch: blobs first, then each episode with its children;
    each episode's ``blob_packs`` names the batch's pack when it holds one of the episode's
    blobs, and the packs already holding the others."""

    def __init__(self, store: Store, dataset: _Dataset, run_id: str, report: DatasetImport) -> None:
        self.store, self.dataset, self.run_id, self.report = store, dataset, run_id, report
        self.writer = store.batch_writer(run_id)
        self.new: set[str] = set()

    def run(self, progress: Progress | None) -> None:
        try:
            self._blobs()
            steps = self._children("steps", STEPS)
            requests = self._children("requests", REQUESTS) if self.dataset.has("requests") else {}
            for row, images in self.dataset.rows("episodes", EPISODES, self.run_id):
                self._images(row, images)
                children = steps.pop(row["episode_id"], []), requests.pop(row["episode_id"], [])
                packs = (
                    self._packs([row], "episodes")
                    | self._packs(children[0], "steps")
                    | self._packs(children[1], "requests")
                )
                self.writer.add_episode({**row, "blob_packs": sorted(packs)}, *children)
                self.report.episodes += 1
                self.report.steps += len(children[0])
                if progress:
                    progress(self.report.episodes)
            self.writer.commit()
        except BaseException:
            self.writer.abort()
            raise

    def put(self, data: bytes, media_type: str, expected: str | None, what: str) -> None:
        """Put one blob, checked against the hash the dataset names it by."""
        digest = self.writer.put_blob(data, media_type or "application/octet-stream")
        if expected is not None and digest != expected:
            raise InterchangeError(
                f"{what} of run {self.run_id} does not match its hash {expected}: the dataset is damaged"
            )
        if digest not in self.writer.index:  # not in the store before: in this batch's pack
            self.new.add(digest)
        self.report.blobs += 1

    def _blobs(self) -> None:
        for row, _ in self.dataset.rows("blobs", None, self.run_id) if self.dataset.has("blobs") else ():
            self.put(row["data"] or b"", row["media_type"], row["sha256"], "a blob")

    def _images(self, row: Row, images: dict[str, bytes | None]) -> None:
        for column, data in images.items():
            if data is not None:
                self.put(data, "image/jpeg", row.get(column), f"an image of column {column}")

    def _children(self, config: str, table: Table) -> dict[str, list[Row]]:
        """A child table's rows by episode, their images put as blobs."""
        found: dict[str, list[Row]] = {}
        for row, images in self.dataset.rows(config, table, self.run_id):
            self._images(row, images)
            found.setdefault(row["episode_id"], []).append(
                {k: v for k, v in row.items() if k != "episode_id"}
            )
            self.report.requests += table is REQUESTS
        return found

    def _packs(self, rows: list[Row], config: str) -> set[str]:
        digests = {row.get(column) for row in rows for column in BLOB_COLUMNS[config]} - {None}
        pack = self.writer.pack.final.relative_to(self.store.root).as_posix()
        location = self.writer.index.location
        return {pack if d in self.new else location[d] for d in digests if d in self.new or d in location}
