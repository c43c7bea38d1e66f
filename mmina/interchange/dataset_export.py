"""``mmina export dataset``: runs as a folder ready to publish on the Hugging Face Hub.

The folder holds one config per table (``runs``, ``tasks``, ``episodes``, ``steps``, ``scores``,
and with ``--requests`` the network trace), each as Parquet shards under ``data/<config>/``
(``train-00000-of-00002.parquet`` ...), plus ``blobs``: every blob the rows name that no image
column carries (the exact model input and its messages, in-view images, and with
``--requests`` the bodies), once per run. Screenshots are ``Image`` features
(``screenshot_image`` beside the ``screenshot`` hash). ``README.md`` is the dataset card (its
YAML header declares each config's ``data_files`` and features, the license; its text the
versions, the redaction summary and the citation), ``CITATION.cff`` the citation and
``mmina.json`` what ``mmina import dataset`` reads back.

Streams like the other exports: episodes are read one at a time and rows are written in row
groups of at most :data:`ROW_GROUP_ROWS` rows; a shard is closed before it grows past
``--max-shard-mb``. What grows with the run: the set of blob hashes already written for a run
(a blob is written once per run) and the run's score rows. The folder is written under a
temporary name and renamed when complete: it appears whole or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mmina.interchange.dataset_card import (
    IMAGE_TYPE,
    CardConfig,
    CardText,
    card_text,
    citation_cff,
    hf_metadata,
)
from mmina.interchange.stored import (
    REDACTION_NOTE,
    BlobReader,
    InterchangeError,
    Row,
    Selection,
    StoredEpisode,
    folder_bytes,
    provenance,
    stream_episodes,
    written_folder,
)
from mmina.models.model_input import INPUT_TYPE, MESSAGE_TYPE
from mmina.redaction.secret_rules import MARKERS
from mmina.store import Store
from mmina.store.schema import BLOBS, TABLES

FORMAT = "mmina-dataset"
FORMAT_VERSION = 1
MANIFEST = "mmina.json"
DEFAULT_MAX_SHARD_MB = 256.0
ROW_GROUP_ROWS = 100
"""Rows per row group (the ``datasets`` library's advice for image datasets: a viewer or a
streaming reader fetches one row group)."""
ROW_GROUP_BYTES = 32 * 2**20
IMAGE_COLUMNS: dict[str, dict[str, str]] = {
    "episodes": {"final_screenshot": "final_screenshot_image"},
    "steps": {"screenshot": "screenshot_image", "screenshot_som": "screenshot_som_image"},
}
"""Per config, the hash columns whose blob is also written as an ``Image`` feature."""
DROPPED = {"episodes": ("blob_packs",)}
"""Store-internal columns left out (the packs' paths mean nothing outside the store)."""
CONFIG_DOCS = {
    "runs": "a run: agent, model, configuration, task suite, software and browser versions, viewport",
    "tasks": "a task of a run, normalized, with the original MMInA JSON",
    "episodes": "an attempt at a task: status, stop reason, answer, steps, hops, tokens, cost, final screenshot",
    "steps": "an observation and the action taken on it: URL, tree, screenshot, model output, action, timings",
    "scores": "an evaluator's verdict on an episode, a hop or a step",
    "requests": "an exchange of the network trace (bodies by hash, in `blobs`)",
    "blobs": "a blob rows name by SHA-256 that no image column carries (model input, bodies), once per run",
}
CONFIG_ORDER = ("episodes", "steps", "scores", "tasks", "runs", "requests", "blobs")
BLOB_SCHEMA = pa.schema([pa.field("run_id", pa.string()), *BLOBS.schema])
OnEpisode = Callable[[StoredEpisode], None]


@dataclass(frozen=True)
class DatasetOptions:
    """What to export and how: the tasks (all when empty), the network trace, the shard size,
    and what the card says."""

    tasks: tuple[str, ...] = ()
    requests: bool = False
    max_shard_mb: float = DEFAULT_MAX_SHARD_MB
    card: CardText = CardText("mmina episodes", "cc-by-4.0", ())


@dataclass
class ConfigTally:
    rows: int = 0
    bytes: int = 0
    files: list[str] = field(default_factory=list)
    redacted: int = 0


@dataclass
class DatasetExport:
    """What an export wrote."""

    path: str
    runs: list[str]
    episodes: int = 0
    steps: int = 0
    configs: dict[str, ConfigTally] = field(default_factory=dict)
    missing_blobs: int = 0
    bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def config_schema(name: str) -> pa.Schema:
    """The Arrow schema of a config's shards: ``run_id``, the table's columns (less the
    store-internal ones) and its image columns."""
    if name == "blobs":
        return BLOB_SCHEMA
    table = TABLES[name]
    fields = [field for field in table.schema if field.name not in DROPPED.get(name, ())]
    images = [pa.field(column, IMAGE_TYPE) for column in IMAGE_COLUMNS.get(name, {}).values()]
    return pa.schema([pa.field("run_id", pa.string()), *fields, *images])


def image_columns(name: str) -> frozenset[str]:
    return frozenset(IMAGE_COLUMNS.get(name, {}).values())


class _Shards:
    """One config's shards: rows buffered into row groups, a new shard before one would pass
    ``max_bytes``; parts are renamed ``train-NNNNN-of-MMMMM.parquet`` when all are written."""

    def __init__(self, folder: Path, name: str, max_bytes: int) -> None:
        self.folder, self.name, self.max_bytes = folder / "data" / name, name, max_bytes
        self.schema = config_schema(name).with_metadata(hf_metadata(config_schema(name), image_columns(name)))
        self.tally = ConfigTally()
        self.buffer: list[Row] = []
        self.buffered = 0
        self.parts: list[Path] = []
        self.sink: pa.NativeFile | None = None
        self.writer: pq.ParquetWriter | None = None

    def add(self, row: Row) -> None:
        self.buffer.append(row)
        self.buffered += _size(row)
        self.tally.rows += 1
        self.tally.redacted += _marked(row)
        if len(self.buffer) >= ROW_GROUP_ROWS or self.buffered >= min(ROW_GROUP_BYTES, self.max_bytes // 4):
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        data = pa.Table.from_pylist(self.buffer, schema=self.schema)
        if self.sink is not None and self.sink.tell() + data.nbytes > self.max_bytes:
            self._close_part()
        if self.writer is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.parts.append(self.folder / f"part-{len(self.parts):05d}.parquet")
            self.sink = pa.OSFile(str(self.parts[-1]), "wb")
            self.writer = pq.ParquetWriter(self.sink, self.schema, compression="zstd")
        self.writer.write_table(data, row_group_size=len(self.buffer))
        self.buffer, self.buffered = [], 0

    def _close_part(self) -> None:
        if self.writer is not None and self.sink is not None:
            self.writer.close()
            self.sink.close()
        self.writer, self.sink = None, None

    def close(self) -> ConfigTally:
        """Finish the last shard and give every shard its final name."""
        self.flush()
        self._close_part()
        for index, part in enumerate(self.parts):
            final = part.with_name(f"train-{index:05d}-of-{len(self.parts):05d}.parquet")
            part.rename(final)
            self.tally.files.append(final.relative_to(self.folder.parents[1]).as_posix())
            self.tally.bytes += final.stat().st_size
        return self.tally


def _size(row: Row) -> int:
    """Roughly the bytes a row adds (its texts and binaries, images included)."""
    total = 0
    for value in row.values():
        if isinstance(value, (str, bytes)):
            total += len(value)
        elif isinstance(value, dict) and isinstance(value.get("bytes"), bytes):
            total += len(value["bytes"])
    return total + 64


def _marked(row: Row) -> bool:
    """The row carries a redaction marker (in a text, a header or a blob)."""
    for value in row.values():
        if isinstance(value, str) and any(marker in value for marker in MARKERS):
            return True
        if isinstance(value, bytes) and any(marker.encode() in value for marker in MARKERS):
            return True
        if isinstance(value, list) and any(isinstance(v, dict) and _marked(v) for v in value):
            return True
    return False


# ---------------------------------------------------------------- blobs of an episode


def _sniff(data: bytes) -> str:
    """An image's media type from its first bytes (in-view images carry none in the store)."""
    for magic, media in (
        (b"\xff\xd8", "image/jpeg"),
        (b"\x89PNG", "image/png"),
        (b"GIF8", "image/gif"),
        (b"RIFF", "image/webp"),
    ):
        if data.startswith(magic):
            return media
    return "application/octet-stream"


class _EpisodeBlobs:
    """The blobs one episode's rows name, read from its packs: screenshots, the model input
    (the input document, its messages, their images), in-view images and, when asked, bodies."""

    def __init__(self, reader: BlobReader, episode: StoredEpisode, bodies: bool) -> None:
        self.media: dict[str, str] = {}
        wanted = self._direct(episode, bodies)
        self.data = reader.read(episode, wanted)
        messages = self._children(self.data, INPUT_TYPE, lambda doc: doc.get("messages", []), MESSAGE_TYPE)
        self.data.update(reader.read(episode, messages))
        images = self._children(self.data, MESSAGE_TYPE, _message_images, None)
        self.data.update(reader.read(episode, images))
        self.missing = len({*wanted, *messages, *images} - self.data.keys())

    def _direct(self, episode: StoredEpisode, bodies: bool) -> set[str]:
        for step in episode.steps:
            for column in ("screenshot", "screenshot_som"):
                self._name(step.get(column), "image/jpeg")
            self._name(step.get("model_input"), INPUT_TYPE)
            for image in step.get("images") or ():
                self._name(image.get("blob"), "")
        self._name(episode.row.get("final_screenshot"), "image/jpeg")
        for request in episode.requests if bodies else ():
            self._name(request.get("request_body"), _header(request.get("request_headers"), "content-type"))
            self._name(request.get("response_body"), request.get("mime_type") or "")
        return set(self.media)

    def _name(self, digest: str | None, media: str) -> None:
        if digest:
            self.media.setdefault(digest, media)

    def _children(
        self, found: Mapping[str, bytes], kind: str, names: Callable[[Any], Iterable[Any]], media: str | None
    ) -> set[str]:
        """The blobs named inside the found blobs of media type ``kind``."""
        children: set[str] = set()
        for digest in [d for d, m in self.media.items() if m == kind and d in found]:
            for child in names(json.loads(found[digest])):
                name, child_media = (child, media) if media else child
                self._name(name, child_media)
                children.add(name)
        return children

    def media_type(self, digest: str) -> str:
        return self.media.get(digest) or _sniff(self.data[digest])

    def image(self, digest: str | None) -> dict[str, Any] | None:
        """An ``Image`` feature value: the bytes, named by hash."""
        if not digest or digest not in self.data:
            return None
        return {"bytes": self.data[digest], "path": f"{digest}.{self.media_type(digest).rsplit('/', 1)[-1]}"}


def _message_images(message: Any) -> list[tuple[str, str]]:
    content = message.get("content") if isinstance(message, dict) else None
    parts = content if isinstance(content, list) else []
    return [
        (p["image_url"]["blob"], p["image_url"].get("media_type") or "image/jpeg")
        for p in parts
        if isinstance(p, dict) and isinstance(p.get("image_url"), dict) and p["image_url"].get("blob")
    ]


def _header(headers: Sequence[Mapping[str, str]] | None, name: str) -> str:
    return next((h["value"] for h in headers or () if h["name"].lower() == name), "")


# ---------------------------------------------------------------- the export


class _Writer:
    """Every config's shards in the partial folder, and the per-run memory of blobs written."""

    def __init__(self, folder: Path, options: DatasetOptions) -> None:
        max_bytes = max(int(options.max_shard_mb * 2**20), 1)
        names = [n for n in CONFIG_ORDER if n != "requests" or options.requests]
        self.shards = {name: _Shards(folder, name, max_bytes) for name in names}
        self.written: set[str] = set()

    def add(self, name: str, row: Row) -> None:
        self.shards[name].add(row)

    def episode(self, episode: StoredEpisode, blobs: _EpisodeBlobs, requests: bool) -> None:
        run_id = episode.run_id
        self.add(
            "episodes",
            {
                **_without(episode.row, DROPPED["episodes"]),
                "final_screenshot_image": blobs.image(episode.row.get("final_screenshot")),
            },
        )
        for step in episode.steps:
            self.add(
                "steps",
                {
                    **step,
                    "run_id": run_id,
                    "screenshot_image": blobs.image(step.get("screenshot")),
                    "screenshot_som_image": blobs.image(step.get("screenshot_som")),
                },
            )
        for request in episode.requests if requests else ():
            self.add("requests", {**request, "run_id": run_id})
        shown = {episode.row.get("final_screenshot")} | {
            s.get(c) for s in episode.steps for c in IMAGE_COLUMNS["steps"]
        }
        for digest in sorted(blobs.data.keys() - shown - self.written):
            data = blobs.data[digest]
            self.add(
                "blobs",
                {
                    "run_id": run_id,
                    "sha256": digest,
                    "media_type": blobs.media_type(digest),
                    "size": len(data),
                    "data": data,
                },
            )
            self.written.add(digest)

    def close(self) -> dict[str, ConfigTally]:
        return {name: shards.close() for name, shards in self.shards.items()}


def _without(row: Row, names: Iterable[str]) -> Row:
    return {k: v for k, v in row.items() if k not in names}


def export_dataset(
    store: Store,
    runs: Sequence[str],
    output: Path,
    options: DatasetOptions = DatasetOptions(),
    on_episode: OnEpisode | None = None,
) -> DatasetExport:
    """Write runs ``runs`` (ids, prefixes or ``latest``) as a Hugging Face dataset folder (see
    the module); the folder appears whole or not at all."""
    run_ids = list(dict.fromkeys(store.resolve_run(run) for run in runs))
    if not run_ids:
        raise InterchangeError("name the runs to export")
    report = DatasetExport(str(output), run_ids)
    with written_folder(output) as partial:
        writer = _Writer(partial, options)
        about = _About()
        for run_id in run_ids:
            _export_run(store, run_id, writer, options, report, about, on_episode)
        if not report.episodes:
            raise InterchangeError("the selection holds no finished episode")
        report.configs = {name: tally for name, tally in writer.close().items() if tally.rows}
        _write_card(store, partial, report, options, about)
    report.bytes = folder_bytes(output)
    return report


@dataclass
class _About:
    """What the card states about the runs (from their ``runs`` rows)."""

    recorded_by: set[str] = field(default_factory=set)
    browsers: set[str] = field(default_factory=set)


def _export_run(
    store: Store,
    run_id: str,
    writer: _Writer,
    options: DatasetOptions,
    report: DatasetExport,
    about: _About,
    on_episode: OnEpisode | None,
) -> None:
    run_row = store.read("runs", run_id=run_id).to_pylist()[0]
    writer.add("runs", {**run_row, "run_id": run_id})
    about.recorded_by.add(run_row.get("mmina_version") or "unknown")
    about.browsers.add(run_row.get("browser_version") or "unknown")
    wanted = set(options.tasks)
    for task in store.read("tasks", run_id=run_id).to_pylist():
        if not wanted or task["task_id"] in wanted:
            writer.add("tasks", {**task, "run_id": run_id})
    writer.written = set()
    reader, exported = BlobReader(store), set()
    selection = Selection(run=run_id, tasks=options.tasks)
    for episode in stream_episodes(store, selection, request_columns=None if options.requests else ["seq"]):
        blobs = _EpisodeBlobs(reader, episode, options.requests)
        writer.episode(episode, blobs, options.requests)
        exported.add(episode.episode_id)
        report.episodes += 1
        report.steps += len(episode.steps)
        report.missing_blobs += blobs.missing
        if on_episode:
            on_episode(episode)
    for score in store.read("scores", run_id=run_id).to_pylist():
        if score["episode_id"] in exported:
            writer.add("scores", {**score, "run_id": run_id})


def _write_card(
    store: Store, folder: Path, report: DatasetExport, options: DatasetOptions, about: _About
) -> None:
    versions = provenance(store)
    redacted = {name: tally.redacted for name, tally in report.configs.items() if tally.redacted}
    facts = {
        "mmina_version": versions["mmina_version"],
        "schema_version": versions["schema_version"],
        "store_schema_version": versions["store_schema_version"],
        "runs": report.runs,
        "episodes": report.episodes,
        "steps": report.steps,
        "recorded_by": sorted(about.recorded_by),
        "browsers": sorted(about.browsers),
        "redaction": REDACTION_NOTE,
        "redacted": redacted,
    }
    configs = [
        CardConfig(
            name=name,
            schema=config_schema(name),
            images=image_columns(name),
            rows=tally.rows,
            bytes=tally.bytes,
            doc=CONFIG_DOCS[name],
        )
        for name, tally in report.configs.items()
    ]
    (folder / "README.md").write_text(card_text(configs, options.card, facts))
    today = datetime.now(UTC).date().isoformat()
    (folder / "CITATION.cff").write_text(citation_cff(options.card, versions["mmina_version"], today))
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **facts,
        "exported_at": today,
        "configs": {
            name: {"rows": t.rows, "bytes": t.bytes, "files": t.files} for name, t in report.configs.items()
        },
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
