"""``mmina export wacz``: stored episodes as a WACZ 1.1.1 package, the web archivists' own
(what ReplayWeb.page and Browsertrix publish and open without indexing in the browser first).

The package is a ZIP holding:

* ``archive/data.warc.gz``: the WARC of ``mmina export warc`` (sockets as IIPC #115 proposes,
  steps and screenshots as metadata and resource records) with every body written in full,
  no revisit records: a player fetches one record by its index entry and has the body;
* ``indexes/index.cdxj``: one CDXJ line per response, keyed as the players look it up
  (``wacz_index``), sorted;
* ``pages/pages.jsonl``: the ``json-pages-1.0`` header, then one page per step (its URL,
  time, title, the text of its accessibility tree, and the episode, task and step it is);
* ``datapackage.json``: ``profile: data-package``, ``wacz_version: 1.1.1``, every file with
  its ``sha256:`` hash and size, title, creation time, software, and the first page;
* ``datapackage-digest.json``: the hash of ``datapackage.json``.

The WARC is stored uncompressed in the ZIP (``STORE``, as the specification requires of
files already compressed, so a player reads a record by range); the JSON files are deflated.
The WARC goes to a temporary file beside the output first (the ZIP needs its hash before
listing it); the output appears whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from mmina import __version__
from mmina.interchange.stored import Row, Selection, StoredEpisode, selected_runs, written_whole
from mmina.interchange.wacz_index import CdxjIndex
from mmina.interchange.warc_export import OnEpisode, WarcExport, write_warc
from mmina.interchange.warc_records import WarcWriter
from mmina.observations.observation import tree_lines
from mmina.store import Store
from mmina.store.store import utcnow

WACZ_VERSION = "1.1.1"
WARC_NAME = "data.warc.gz"
CHUNK = 1 << 20


@dataclass
class WaczExport:
    """What an export wrote."""

    path: str
    episodes: int = 0
    pages: int = 0
    indexed: int = 0
    """CDXJ lines (responses of http(s) URLs)."""
    records: int = 0
    sockets: int = 0
    bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def page_lines(episode: StoredEpisode) -> Iterator[dict[str, Any]]:
    """One ``pages.jsonl`` entry per step of ``episode`` that observed an http(s) page."""
    for step in episode.steps:
        url = step.get("url") or ""
        if url.lower().startswith(("http://", "https://")):
            yield {
                "id": f"{episode.episode_id}/{step['step_index']}",
                "url": url,
                "ts": _rfc3339(step["started_at"]),
                "title": step.get("title") or url,
                "text": page_text(step.get("tree_text") or ""),
                "mmina_episode": episode.episode_id,
                "mmina_task": episode.row["task_id"],
                "mmina_step": step["step_index"],
            }


def page_text(tree: str) -> str:
    """The words a tree shows (names and texts, in order), for a page's full-text search."""
    words = []
    for _id, line in tree_lines(tree):
        words += [w for w in (line.name, line.value) if w]
    return " ".join(words)


def _rfc3339(moment: datetime) -> str:
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def export_wacz(
    store: Store,
    selection: Selection,
    output: Path,
    on_episode: OnEpisode | None = None,
    title: str | None = None,
) -> WaczExport:
    """Write the selected episodes as a WACZ package at ``output`` (see the module)."""
    runs = selected_runs(store, selection)
    report = WaczExport(str(output))
    with written_whole(output) as partial, _scratch(output) as scratch:
        warc, pages = scratch / WARC_NAME, scratch / "pages.jsonl"
        index = CdxjIndex(WARC_NAME)
        first: list[Row] = []
        with warc.open("wb") as sink, pages.open("w", encoding="utf-8") as page_file:
            page_file.write(
                json.dumps({"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}) + "\n"
            )
            counted = _pages_writer(page_file, report, first, on_episode)
            warc_report = WarcExport(str(warc))
            write_warc(store, selection, WarcWriter(sink, index), warc_report, runs, counted, revisits=False)
        report.records, report.sockets, report.indexed = (
            warc_report.records,
            warc_report.sockets,
            len(index.lines),
        )
        package = {
            "title": title or f"mmina run {', '.join(runs)}",
            "runs": runs,
            "first": first[0] if first else None,
        }
        _zip(partial, warc, index.text(), pages.read_bytes(), package)
    report.bytes = output.stat().st_size
    return report


def _pages_writer(
    sink: IO[str], report: WaczExport, first: list[Row], on_episode: OnEpisode | None
) -> Callable[[StoredEpisode], None]:
    def written(episode: StoredEpisode) -> None:
        for page in page_lines(episode):
            sink.write(json.dumps(page, ensure_ascii=False) + "\n")
            report.pages += 1
            if not first:
                first.append(page)
        report.episodes += 1
        if on_episode:
            on_episode(episode)

    return written


@contextmanager
def _scratch(output: Path) -> Iterator[Path]:
    """A folder beside ``output`` for the parts of the package, removed afterwards."""
    folder = output.with_name(f".{output.name}.{os.getpid()}.parts")
    folder.mkdir(exist_ok=True)
    try:
        yield folder
    finally:
        for part in folder.iterdir():
            part.unlink()
        folder.rmdir()


def _zip(path: Path, warc: Path, index: bytes, pages: bytes, package: dict[str, Any]) -> None:
    """The package: the WARC stored, the rest deflated, the data package listing every file."""
    resources = [
        _resource(f"archive/{WARC_NAME}", *_file_hash(warc)),
        _resource("indexes/index.cdxj", hashlib.sha256(index).hexdigest(), len(index)),
        _resource("pages/pages.jsonl", hashlib.sha256(pages).hexdigest(), len(pages)),
    ]
    datapackage = json.dumps(_datapackage(resources, package), indent=2).encode()
    digest = json.dumps(
        {"path": "datapackage.json", "hash": "sha256:" + hashlib.sha256(datapackage).hexdigest()}, indent=2
    ).encode()
    with zipfile.ZipFile(path, "w", allowZip64=True) as package_zip:
        package_zip.write(warc, f"archive/{WARC_NAME}", compress_type=zipfile.ZIP_STORED)
        for name, data in (
            ("indexes/index.cdxj", index),
            ("pages/pages.jsonl", pages),
            ("datapackage.json", datapackage),
            ("datapackage-digest.json", digest),
        ):
            package_zip.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)


def _resource(path: str, sha: str, size: int) -> dict[str, Any]:
    return {"name": path.rsplit("/", 1)[-1], "path": path, "hash": f"sha256:{sha}", "bytes": size}


def _file_hash(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest(), path.stat().st_size


def _datapackage(resources: list[dict[str, Any]], package: dict[str, Any]) -> dict[str, Any]:
    now = _rfc3339(utcnow())
    first = package["first"]
    main = {"mainPageUrl": first["url"], "mainPageDate": first["ts"]} if first else {}
    return {
        "profile": "data-package",
        "wacz_version": WACZ_VERSION,
        "title": package["title"],
        "description": "Web-agent episodes recorded by mmina: one page per step. Secrets were redacted before "
        "they reached mmina's store (see the WARC's warcinfo record).",
        "created": now,
        "modified": now,
        "software": f"mmina {__version__}",
        **main,
        "mmina": {"runs": package["runs"]},
        "resources": resources,
    }
