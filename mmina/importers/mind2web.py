"""Multimodal-Mind2Web samples as single-step episodes, so ``mmina eval-steps`` runs on them.

The data set (``osunlp/Multimodal-Mind2Web`` on Hugging Face) has one row per action: the
task (``annotation_id``, ``confirmed_task``, ``website``, ``domain``, ``subdomain``,
``action_reprs``), the page before the action (``cleaned_html``, ``screenshot`` — an image
struct with ``bytes``/``path``), the action (``operation``: JSON with ``op`` CLICK / TYPE /
SELECT and ``value``; ``pos_candidates``: JSON strings naming the target's
``backend_node_id``) and its position ``target_action_index``. Parquet files (as
downloaded) and JSON files (a list of rows, or JSON lines) in that schema are read.

Each Mind2Web task becomes a task (``mind2web/<annotation_id>``; its ``action_reprs`` kept as
``recorded_actions``, the history eval-steps shows), each row one episode
(``m2w-<action_uid>``) with one step at ``step_index`` = ``target_action_index``: the
cleaned HTML reduced to its interactive elements as ``[backend_node_id] role "name"``
lines, the screenshot as a blob, and the recorded action in the grammar (CLICK →
``click [id]``; TYPE and SELECT → ``type [id] [value] [press_enter_after=0]``, SELECT on a
``combobox``). Rows are validated before anything is written; a row without a positive
candidate is skipped and listed. Importing again into the same ``--run-id`` skips the rows
already there.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mmina.actions.grammar import Action, ActionKind
from mmina.errors import MminaError
from mmina.redaction.redact import redact_configured, redact_episode
from mmina.store import BatchWriter, Store
from mmina.store.layout import check_id
from mmina.store.runs import SuiteRef, run_row
from mmina.store.store import utcnow
from mmina.tasks.task import suite_sha256

REQUIRED = (
    "action_uid",
    "annotation_id",
    "confirmed_task",
    "cleaned_html",
    "operation",
    "pos_candidates",
    "target_action_index",
)
OPTIONAL = ("website", "domain", "subdomain", "action_reprs", "screenshot")
SUFFIXES = (".parquet", ".json", ".jsonl")
OPS = ("CLICK", "TYPE", "SELECT")
AGENT = "mind2web"
Progress = Callable[[int, int], None]

BATCH_EPISODES = 500
"""Samples committed together (one file per table); a crash loses at most one batch."""


class Mind2WebError(MminaError):
    """The files are not Multimodal-Mind2Web samples, or cannot be imported as asked."""


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One validated row, everything but its screenshot."""

    action_uid: str
    annotation_id: str
    task: str
    website: str
    domain: str
    subdomain: str
    action_reprs: tuple[str, ...]
    index: int
    action: Action | None
    tree_text: str
    repr: str

    @property
    def task_id(self) -> str:
        return f"mind2web/{self.annotation_id}"

    @property
    def episode_id(self) -> str:
        return "m2w-" + re.sub(r"[^A-Za-z0-9._-]", "-", self.action_uid)[:120]


@dataclass
class ImportResult:
    run_id: str
    store: str
    files: list[str]
    tasks: int = 0
    imported: int = 0
    already: int = 0
    without_screenshot: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The import for scripts (``--format json``)."""
        return {**asdict(self), "skipped": [{"action_uid": u, "reason": r} for u, r in self.skipped]}


# ---------------------------------------------------------------- reading the files


def data_files(path: Path) -> list[Path]:
    """The Parquet/JSON files at ``path`` (one file, or every one below a folder)."""
    if not path.exists():
        raise Mind2WebError(f"{path} does not exist")
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES)
    if not files:
        raise Mind2WebError(f"no Multimodal-Mind2Web files (*.parquet, *.json, *.jsonl) under {path}")
    return files


def rows(path: Path, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
    """The rows of one file with these columns (those of ``OPTIONAL`` may be missing)."""
    try:
        if path.suffix == ".parquet":
            yield from _parquet_rows(path, columns)
        else:
            yield from _json_rows(path)
    except (OSError, ValueError) as exc:  # pyarrow's errors are ValueErrors / OSErrors
        raise Mind2WebError(f"cannot read {path}: {exc}") from None


def _parquet_rows(path: Path, columns: Sequence[str]) -> Iterator[dict[str, Any]]:
    handle = pq.ParquetFile(path)
    present = set(handle.schema_arrow.names)
    missing = [c for c in columns if c not in present and c not in OPTIONAL]
    if missing:
        raise Mind2WebError(f"{path} is not Multimodal-Mind2Web: no column(s) {', '.join(missing)}")
    for batch in handle.iter_batches(batch_size=16, columns=[c for c in columns if c in present]):
        yield from batch.to_pylist()


def _json_rows(path: Path) -> Iterator[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    data = (
        [json.loads(line) for line in text.splitlines() if line.strip()]
        if path.suffix == ".jsonl"
        else json.loads(text)
    )
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise Mind2WebError(f"{path} is not Multimodal-Mind2Web: expected a list of rows (objects)")
    yield from data


def parse_sample(raw: dict[str, Any], where: str) -> Sample:
    """A validated sample; a malformed row raises :class:`Mind2WebError` naming it."""
    missing = [k for k in REQUIRED if raw.get(k) is None]
    if missing:
        raise Mind2WebError(f"{where}: no {', '.join(missing)}")
    operation = _json(raw["operation"], where, "operation")
    op = str(operation.get("op", "")).upper()
    if op not in OPS:
        raise Mind2WebError(f"{where}: operation op must be one of {', '.join(OPS)}, not {op!r}")
    target = _target(raw["pos_candidates"], where)
    try:
        index = int(raw["target_action_index"])
    except (TypeError, ValueError):
        raise Mind2WebError(f"{where}: target_action_index is not a number") from None
    reprs = tuple(str(r) for r in raw.get("action_reprs") or ())
    action = _action(op, target, str(operation.get("value") or "")) if target else None
    tree = reduce_html(str(raw["cleaned_html"]), {target} if target else set())
    return Sample(
        action_uid=str(raw["action_uid"]),
        annotation_id=str(raw["annotation_id"]),
        task=str(raw["confirmed_task"]),
        website=str(raw.get("website") or ""),
        domain=str(raw.get("domain") or ""),
        subdomain=str(raw.get("subdomain") or ""),
        action_reprs=reprs,
        index=index,
        action=action,
        tree_text=tree,
        repr=reprs[index] if index < len(reprs) else "",
    )


def _json(value: Any, where: str, name: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        raise Mind2WebError(f"{where}: {name} is not JSON") from None
    if not isinstance(parsed, dict):
        raise Mind2WebError(f"{where}: {name} is not a JSON object")
    return parsed


def _target(candidates: Any, where: str) -> str | None:
    """The first positive candidate's ``backend_node_id`` (top level or inside ``attributes``)."""
    if not isinstance(candidates, (list, tuple)):
        raise Mind2WebError(f"{where}: pos_candidates is not a list")
    for candidate in candidates:
        parsed = _json(candidate, where, "a pos_candidates entry")
        node = parsed.get("backend_node_id") or _json(
            parsed.get("attributes") or "{}", where, "candidate attributes"
        ).get("backend_node_id")
        if node:
            return str(node)
    return None


def _action(op: str, target: str, value: str) -> Action:
    if op == "CLICK":
        return Action(ActionKind.CLICK, element_id=target)
    return Action(ActionKind.TYPE, element_id=target, text=value, press_enter=False)


# ---------------------------------------------------------------- the HTML, reduced

INTERACTIVE_TAGS = frozenset({"a", "button", "input", "select", "textarea", "option"})
INTERACTIVE_ROLES = frozenset(
    {
        "button",
        "link",
        "checkbox",
        "radio",
        "combobox",
        "listbox",
        "option",
        "menuitem",
        "tab",
        "switch",
        "textbox",
        "searchbox",
        "slider",
        "spinbutton",
    }
)
VOID_TAGS = frozenset(
    {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    }
)
INPUT_ROLES = {
    "checkbox": "checkbox",
    "radio": "radio",
    "submit": "button",
    "button": "button",
    "reset": "button",
    "image": "button",
    "search": "searchbox",
}
TAG_ROLES = {"a": "link", "button": "button", "select": "combobox", "textarea": "textbox", "option": "option"}
MAX_NAME = 100


def reduce_html(html: str, keep: set[str]) -> str:
    """The interactive elements of a Mind2Web ``cleaned_html`` (and those in ``keep``) as tree lines."""
    parser = _Reducer(keep)
    parser.feed(html)
    parser.close()
    return "\n".join(line for line in parser.lines if line)


def _role(tag: str, attrs: dict[str, str]) -> str:
    if attrs.get("role") in INTERACTIVE_ROLES:
        return attrs["role"]
    if tag == "input":
        return INPUT_ROLES.get(attrs.get("type", "text").lower(), "textbox")
    return TAG_ROLES.get(tag, attrs.get("role") or tag)


class _Reducer(HTMLParser):
    """Collects one line per kept element; its name is filled in when the element closes."""

    def __init__(self, keep: set[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.keep = keep
        self.lines: list[str] = []
        self.stack: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attr_list: list[tuple[str, str | None]]) -> None:
        attrs = {k: v or "" for k, v in attr_list}
        node = attrs.get("backend_node_id")
        kept = bool(node) and (
            tag in INTERACTIVE_TAGS or attrs.get("role") in INTERACTIVE_ROLES or node in self.keep
        )
        entry = {
            "tag": tag,
            "attrs": attrs,
            "kept": kept,
            "text": [],
            "line": len(self.lines),
            "depth": sum(e["kept"] for e in self.stack),
        }
        if kept:
            self.lines.append("")
        if tag in VOID_TAGS:
            self._finish(entry)
        else:
            self.stack.append(entry)

    def handle_endtag(self, tag: str) -> None:
        if not any(e["tag"] == tag for e in self.stack):
            return
        while self.stack:
            entry = self.stack.pop()
            self._finish(entry)
            if entry["tag"] == tag:
                return

    def handle_data(self, data: str) -> None:
        for entry in self.stack:
            if entry["kept"]:
                entry["text"].append(data)

    def close(self) -> None:
        super().close()
        while self.stack:
            self._finish(self.stack.pop())

    def _finish(self, entry: dict[str, Any]) -> None:
        if not entry["kept"]:
            return
        attrs = entry["attrs"]
        text = " ".join(" ".join(entry["text"]).split())
        name = next(
            (
                v
                for v in (
                    attrs.get("aria_label"),
                    attrs.get("aria-label"),
                    text,
                    attrs.get("placeholder"),
                    attrs.get("value"),
                    attrs.get("title"),
                    attrs.get("alt"),
                    attrs.get("name"),
                )
                if v
            ),
            "",
        )
        name = " ".join(name.split())[:MAX_NAME].replace('"', '\\"')
        self.lines[entry["line"]] = (
            "\t" * entry["depth"] + f'[{attrs["backend_node_id"]}] {_role(entry["tag"], attrs)} "{name}"'
        )


# ---------------------------------------------------------------- screenshots


def screenshot_bytes(value: Any, base: Path) -> bytes | None:
    """An image struct (``bytes`` or ``path``), base64 text, or a path relative to the file."""
    if value is None:
        return None
    if isinstance(value, dict):
        data = value.get("bytes")
        if data:
            return bytes(data) if not isinstance(data, str) else base64.b64decode(data)
        value = value.get("path")
        if not value:
            return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    candidate = base / str(value)
    if candidate.is_file():
        return candidate.read_bytes()
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise Mind2WebError(
            f"screenshot {str(value)[:60]!r} is neither a file next to the data nor base64"
        ) from None


def image_info(data: bytes) -> tuple[str, int | None, int | None]:
    """Media type and pixel size of a screenshot."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return Image.MIME.get(image.format or "", "image/jpeg"), image.width, image.height
    except OSError:
        raise Mind2WebError("a screenshot is not an image Pillow can read") from None


# ---------------------------------------------------------------- into the store


def load_samples(files: Sequence[Path], limit: int | None) -> tuple[list[Sample], list[tuple[str, str]]]:
    """Every sample of the files (validated), and the rows skipped for want of a target."""
    samples: list[Sample] = []
    skipped: list[tuple[str, str]] = []
    seen: set[Any] = set()
    for path in files:
        for number, raw in enumerate(rows(path, [*REQUIRED, *OPTIONAL]), start=1):
            if limit is not None and len(samples) >= limit:
                return samples, skipped
            where = f"{path}: row {number} ({raw.get('action_uid')})"
            sample = parse_sample(raw, where)
            _check_screenshot(raw.get("screenshot"), path.parent, where)
            if sample.action_uid in seen:
                raise Mind2WebError(f"{path}: row {number}: action_uid {sample.action_uid} appears twice")
            seen.add(sample.action_uid)
            if sample.action is None:
                skipped.append((sample.action_uid, "no positive candidate (the target is not in the HTML)"))
            else:
                samples.append(sample)
    return samples, skipped


def _check_screenshot(value: Any, base: Path, where: str) -> None:
    """A screenshot that would fail while writing fails now, before anything is written."""
    try:
        data = screenshot_bytes(value, base)
        if data:
            image_info(data)
    except Mind2WebError as exc:
        raise Mind2WebError(f"{where}: {exc}") from None


def task_rows(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """One ``tasks`` row per Mind2Web task (the first row of a task describes it)."""
    by_task: dict[str, Sample] = {}
    for sample in samples:
        by_task.setdefault(sample.task_id, sample)
    return [_task_row(s) for s in by_task.values()]


def _task_row(sample: Sample) -> dict[str, Any]:
    original = {
        "intent": sample.task,
        "start_url": "",
        "procedure": [sample.website or "site", "end"],
        "cnt_hop": 2,
        "eval": {"eval_types": [], "reference_answers": {}, "reference_url": ""},
        "recorded_actions": list(sample.action_reprs),
        "mind2web": {
            "annotation_id": sample.annotation_id,
            "website": sample.website,
            "domain": sample.domain,
            "subdomain": sample.subdomain,
        },
    }
    text = json.dumps(original, sort_keys=True, ensure_ascii=False)
    return redact_configured(
        {
            "task_id": sample.task_id,
            "suite": "mind2web",
            "intent": sample.task,
            "start_urls": [],
            "cnt_hop": 2,
            "n_hops": 1,
            "procedure": original["procedure"],
            "eval_types": [],
            "reference_answers_json": "{}",
            "reference_url": "",
            "city": "",
            "flight": "",
            "shop": "",
            "original_json": text,
            "task_sha256": hashlib.sha256(text.encode()).hexdigest(),
        }
    )


def mind2web_run_row(tasks: Sequence[dict[str, Any]], files: Sequence[Path]) -> dict[str, Any]:
    """The run: the files it came from and a checksum of its tasks (re-importing them resumes it)."""
    suite = SuiteRef(
        "mind2web",
        str(files[0].parent if len(files) > 1 else files[0]),
        suite_sha256((t["task_id"], t["task_sha256"]) for t in tasks),
    )
    config = {"mode": "import", "source": "multimodal-mind2web", "files": [str(f) for f in files]}
    return run_row(AGENT, None, config, suite, len(tasks))


def import_mind2web(
    store: Store,
    path: str | Path,
    run_id: str | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """Validate every sample, then write one run with one single-step episode per sample."""
    files = data_files(Path(path))
    run_id = check_id("run id", run_id) if run_id else f"{utcnow():%Y%m%d-%H%M%S}-mind2web"
    samples, skipped = load_samples(files, limit)
    if not samples:
        raise Mind2WebError(f"no importable sample in {path}")
    tasks = task_rows(samples)
    result = ImportResult(run_id, str(store.root), [str(f) for f in files], len(tasks), skipped=skipped)
    store.begin_run(run_id, mind2web_run_row(tasks, files), tasks)
    existing = store.committed_episode_ids()
    batch = store.batch_writer(run_id)
    for done, (sample, shot) in enumerate(
        _with_screenshots(files, {s.action_uid: s for s in samples}), start=1
    ):
        if sample.episode_id in existing:
            result.already += 1
        else:
            _add_episode(batch, sample, shot, result)
        if len(batch) >= BATCH_EPISODES:
            batch.commit()
            batch = store.batch_writer(run_id)
        if progress:
            progress(done, len(samples))
    batch.commit()
    return result


def _with_screenshots(
    files: Sequence[Path], by_uid: dict[str, Sample]
) -> Iterator[tuple[Sample, bytes | None]]:
    """Each sample with its screenshot, read in a second pass (screenshots are most of the bytes)."""
    for path in files:
        for raw in rows(path, ["action_uid", "screenshot"]):
            sample = by_uid.pop(str(raw.get("action_uid")), None)
            if sample is not None:
                yield sample, screenshot_bytes(raw.get("screenshot"), path.parent)


def _add_episode(batch: BatchWriter, sample: Sample, shot: bytes | None, result: ImportResult) -> None:
    """One single-step episode; visible when its batch commits (a crash loses at most that batch,
    and importing again skips what was committed)."""
    media, width, height = image_info(shot) if shot else (None, None, None)
    digest = batch.put_blob(shot, media or "image/jpeg") if shot else None
    result.without_screenshot += shot is None
    now = utcnow()
    batch.add_episode(
        *redact_episode(
            {
                "episode_id": sample.episode_id,
                "task_id": sample.task_id,
                "attempt": 1,
                "status": "completed",
                "stop_reason": "script_end",
                "final_answer": None,
                "n_steps": 1,
                "n_hops": 1,
                "live_hops": 1,
                "hop_steps": [sample.index],
                "started_at": now,
                "ended_at": now,
                "duration_ms": 0.0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cost_usd": 0.0,
                "error": None,
            },
            [_step_row(sample, digest, width, height)],
        )
    )
    result.imported += 1


def _step_row(
    sample: Sample, screenshot: str | None, width: int | None, height: int | None
) -> dict[str, Any]:
    action = sample.action
    assert action is not None
    return {
        "step_index": sample.index,
        "started_at": utcnow(),
        "url": "",
        "title": sample.website,
        "tabs": [{"url": "", "title": sample.website}],
        "active_tab": 0,
        "tree_text": sample.tree_text,
        "screenshot": screenshot,
        "screenshot_som": None,
        "screenshot_width": width,
        "screenshot_height": height,
        "images": [],
        "model_output": sample.repr or action.render(),
        "action": action.render(),
        "action_kind": action.kind.value,
        "action_error": None,
        "live_hops": 0,
        "live_hop_completed": False,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,
    }
