"""``mmina import labels``: labels made elsewhere (a spreadsheet, another tool), from CSV or JSON.

A file holds one label per row (CSV with a header) or per object (a JSON list, or an object
with a ``labels`` list):

* ``episode_id`` — the episode labelled (required);
* ``hop`` — the hop position, 1-based; empty, ``task`` or null for the task itself;
* ``label`` — ``pass``, ``fail``, ``unsure`` or ``blocked`` (the environment kept the agent from it);
* ``labeller`` — who labelled (optional: ``--labeller``, else the operating-system user);
* ``note`` — optional.

Every row is checked before anything is written; one batch per labeller is appended (see
:mod:`mmina.evaluators.labelling`), so for each episode the file names, it replaces that
labeller's earlier labels of the episode.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmina.evaluators.labelling import (
    Label,
    LabelError,
    Saved,
    check_labels,
    checked_label,
    checked_labeller,
    episode_refs,
    write_labels,
)
from mmina.store import Store

COLUMNS = ("episode_id", "hop", "label", "labeller", "note")
REQUIRED = ("episode_id", "label")
MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Row:
    """One label of the file, with where it is (``labels.csv line 4``) and who gave it."""

    where: str
    labeller: str
    label: Label


def import_labels(store: Store, path: str | Path, labeller: str) -> list[Saved]:
    """Read, check and store the labels of ``path``; ``labeller`` for rows that name none."""
    rows = list(read_rows(Path(path), checked_labeller(labeller)))
    if not rows:
        raise LabelError(f"{path}: no labels in the file")
    refs = episode_refs(store, (row.label.episode_id for row in rows))
    for row in rows:
        try:
            check_labels([row.label], refs)
        except LabelError as exc:
            raise LabelError(f"{row.where}: {exc}") from None
    groups: dict[str, list[Label]] = defaultdict(list)
    for row in rows:
        groups[row.labeller].append(row.label)
    for name, labels in groups.items():
        try:
            check_labels(labels, refs)
        except LabelError as exc:
            raise LabelError(f"{path}: labeller {name}: {exc}") from None
    return [
        write_labels(store, labels, name, f"import:{Path(path).name}", refs)
        for name, labels in groups.items()
    ]


def read_rows(path: Path, labeller: str) -> Iterator[Row]:
    """The file's labels, each checked on its own (a bad value names its line or item)."""
    text = _text(path)
    records = _json_records(path, text) if _looks_like_json(path, text) else _csv_records(path, text)
    for where, record in records:
        yield _row(where, record, labeller)


def _text(path: Path) -> str:
    try:
        if path.stat().st_size > MAX_BYTES:
            raise LabelError(f"{path}: larger than {MAX_BYTES >> 20} MB; split it")
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise LabelError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise LabelError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise LabelError(f"{path}: cannot read it: {exc.strerror or exc}") from None


def _looks_like_json(path: Path, text: str) -> bool:
    return path.suffix.lower() == ".json" or text.lstrip()[:1] in ("[", "{")


def _json_records(path: Path, text: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LabelError(f"{path}: not valid JSON ({exc})") from None
    records = data.get("labels") if isinstance(data, dict) else data
    if not isinstance(records, list):
        raise LabelError(f'{path}: expected a JSON list of labels (or an object with a "labels" list)')
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            raise LabelError(f"{path} item {number}: a label is a JSON object, not {type(record).__name__}")
        yield f"{path} item {number}", record


def _csv_records(path: Path, text: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [name.strip() for name in reader.fieldnames or []]
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        raise LabelError(
            f"{path}: the header needs the columns {', '.join(REQUIRED)} (missing {', '.join(missing)}; "
            f"known: {', '.join(COLUMNS)})"
        )
    reader.fieldnames = header
    try:
        for record in reader:
            yield f"{path} line {reader.line_num}", record
    except csv.Error as exc:
        raise LabelError(f"{path} line {reader.line_num}: {exc}") from None


def _row(where: str, record: Mapping[str, Any], labeller: str) -> Row:
    try:
        episode = _text_field(record, "episode_id")
        if not episode:
            raise LabelError("episode_id is empty")
        label = Label(
            episode,
            checked_label(_text_field(record, "label")),
            _hop(record.get("hop")),
            _text_field(record, "note"),
        )
        name = _text_field(record, "labeller")
        return Row(where, checked_labeller(name) if name else labeller, label)
    except LabelError as exc:
        raise LabelError(f"{where}: {exc}") from None


def _text_field(record: Mapping[str, Any], name: str) -> str:
    value = record.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise LabelError(f"{name} must be text, not {json.dumps(value)[:40]}")
    return value.strip()


def _hop(value: Any) -> int | None:
    """A 1-based hop position; None (the task) for an empty value, null or ``task``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "task")):
        return None
    text = str(value).strip()
    if isinstance(value, bool) or not re.fullmatch(r"[0-9]{1,4}", text) or int(text) < 1:
        raise LabelError(f"hop must be a hop position (1, 2, ...) or empty for the task, not {text[:40]!r}")
    return int(text)
