"""What makes a folder of Parquet shards a Hugging Face dataset: the features of each config (in
the dataset card's YAML header and in each shard's ``huggingface`` schema metadata, as the
``datasets`` library writes them), the card itself and its ``CITATION.cff``.

Features follow ``datasets`` 4 and later (``List`` for lists, ``Image`` for a
``{bytes, path}`` struct); the YAML header is written here, block style, with every string
JSON-quoted (a JSON string is a YAML double-quoted scalar), so no YAML library is needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
"""How an ``Image`` feature is stored in Parquet."""
MMINA_TITLE = "MMInA: Benchmarking Multihop Multimodal Internet Agents"
MMINA_AUTHORS = ("Ziniu Zhang", "Shulin Tian", "Liangyu Chen", "Ziwei Liu")
MMINA_YEAR, MMINA_ARXIV = 2024, "2404.09992"
"""The benchmark the recorded tasks come from (cited by every exported card)."""
SPDX = {
    "cc-by-4.0": "CC-BY-4.0",
    "cc-by-sa-4.0": "CC-BY-SA-4.0",
    "cc-by-nc-4.0": "CC-BY-NC-4.0",
    "cc0-1.0": "CC0-1.0",
    "mit": "MIT",
    "apache-2.0": "Apache-2.0",
    "odc-by": "ODC-By-1.0",
    "odbl": "ODbL-1.0",
}
"""Hugging Face license ids and their SPDX spelling (what ``CITATION.cff`` takes); another id is
left out of the CFF file (it stays in the card)."""


@dataclass(frozen=True, kw_only=True)
class CardConfig:
    """One config as the card declares it: its features, where its shards are, how big it is."""

    name: str
    schema: pa.Schema
    images: frozenset[str]
    rows: int
    bytes: int
    doc: str


@dataclass(frozen=True)
class CardText:
    """What the user says about the dataset (``--title``, ``--license``, ``--author``)."""

    title: str
    license: str
    authors: tuple[str, ...]


# ---------------------------------------------------------------- features


def _value_dtype(kind: pa.DataType) -> str:
    if pa.types.is_timestamp(kind):
        zone = f", tz={kind.tz}" if kind.tz else ""
        return f"timestamp[{kind.unit}{zone}]"
    names = {
        pa.string(): "string",
        pa.int32(): "int32",
        pa.int64(): "int64",
        pa.float64(): "float64",
        pa.bool_(): "bool",
        pa.binary(): "binary",
    }
    if kind not in names:
        raise TypeError(f"no Hugging Face feature for {kind}")
    return names[kind]


def feature_dict(kind: pa.DataType, image: bool = False) -> dict[str, Any]:
    """The feature as ``Features.to_dict()`` gives it (what a shard's schema metadata holds)."""
    if image:
        return {"_type": "Image"}
    if pa.types.is_list(kind):
        return {"feature": feature_dict(kind.value_type), "_type": "List"}
    if pa.types.is_struct(kind):
        return {field.name: feature_dict(field.type) for field in kind}
    return {"dtype": _value_dtype(kind), "_type": "Value"}


def feature_yaml(name: str, kind: pa.DataType, image: bool = False) -> dict[str, Any]:
    """The feature as the card's ``dataset_info.features`` list names it."""
    if image:
        return {"name": name, "dtype": "image"}
    if pa.types.is_list(kind):
        inner = kind.value_type
        return {
            "name": name,
            "list": _struct_yaml(inner) if pa.types.is_struct(inner) else _value_dtype(inner),
        }
    if pa.types.is_struct(kind):
        return {"name": name, "struct": _struct_yaml(kind)}
    return {"name": name, "dtype": _value_dtype(kind)}


def _struct_yaml(kind: pa.DataType) -> list[dict[str, Any]]:
    return [feature_yaml(field.name, field.type) for field in kind]


def hf_metadata(schema: pa.Schema, images: frozenset[str]) -> dict[bytes, bytes]:
    """The ``huggingface`` schema metadata of a shard: its features, so the shard alone loads
    with images decoded."""
    features = {field.name: feature_dict(field.type, field.name in images) for field in schema}
    return {b"huggingface": json.dumps({"info": {"features": features}}).encode()}


# ---------------------------------------------------------------- YAML


def yaml_block(value: Any, indent: int = 0) -> list[str]:
    """``value`` (mappings, lists, strings, numbers, booleans) as block-style YAML lines."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if _scalar(item):
                lines.append(f"{pad}{key}: {_yaml_scalar(item)}")
            else:
                lines += [f"{pad}{key}:", *yaml_block(item, indent + 2)]
        return lines
    for item in value:
        inner = yaml_block(item, indent + 2) if not _scalar(item) else [f"{pad}  {_yaml_scalar(item)}"]
        lines.append(f"{pad}- {inner[0].lstrip()}")
        lines += inner[1:]
    return lines


def _scalar(value: Any) -> bool:
    return not isinstance(value, (Mapping, list, tuple)) or not value


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[]"
    if isinstance(value, Mapping):
        return "{}"
    return json.dumps(str(value))


# ---------------------------------------------------------------- the card


def card_header(configs: Sequence[CardConfig], text: CardText, episodes: int) -> dict[str, Any]:
    """The card's YAML header: license, configs (``data_files`` per config, episodes the
    default) and ``dataset_info`` (features and the one split of each config)."""
    return {
        "license": text.license,
        "pretty_name": text.title,
        "tags": ["mmina", "web-agents", "agent-trajectories", "multimodal", "screenshots"],
        "size_categories": [_size_category(episodes)],
        "configs": [
            {
                "config_name": c.name,
                "data_files": [{"split": "train", "path": f"data/{c.name}/train-*.parquet"}],
                **({"default": True} if c.name == "episodes" else {}),
            }
            for c in configs
        ],
        "dataset_info": [
            {
                "config_name": c.name,
                "features": [feature_yaml(f.name, f.type, f.name in c.images) for f in c.schema],
                "splits": [{"name": "train", "num_bytes": c.bytes, "num_examples": c.rows}],
                "download_size": c.bytes,
                "dataset_size": c.bytes,
            }
            for c in configs
        ],
    }


def _size_category(count: int) -> str:
    for limit, name in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
    ):
        if count < limit:
            return name
    return "1M<n<10M"


def card_text(configs: Sequence[CardConfig], text: CardText, about: Mapping[str, Any]) -> str:
    """The whole ``README.md``: the YAML header, then what the dataset holds, how to load it,
    where it came from, what was redacted, and how to cite it."""
    header = "\n".join(["---", *yaml_block(card_header(configs, text, about["episodes"])), "---"])
    rows = "\n".join(f"| `{c.name}` | {c.rows:,} | {c.bytes / 1e6:,.1f} MB | {c.doc} |" for c in configs)
    redacted = (
        "\n".join(f"| `{name}` | {count:,} |" for name, count in about["redacted"].items())
        or "| (none) | 0 |"
    )
    return f"""{header}

# {text.title}

Web-agent episodes on multihop, multimodal tasks of the MMInA benchmark, recorded by
mmina {about["mmina_version"]}: what the agent saw at every step
(URL, accessibility tree with element ids, screenshot), what it answered and did, and the
evaluators' verdicts. Runs: {", ".join(f"`{r}`" for r in about["runs"])}; {about["episodes"]:,} episode(s),
{about["steps"]:,} step(s).

| config | rows | size | what a row is |
|---|---|---|---|
{rows}

```python
from datasets import load_dataset
steps = load_dataset("path/or/hub-id", "steps", split="train")
steps[0]["screenshot_image"]  # a PIL image
```

Rows join on `run_id`, `episode_id` (and `step_index`); `scores.level` is `task`, `hop` or `step`, and
the latest batch of an evaluator (`scored_at`, `batch_id`) is its current verdict. Column meanings are
mmina's store schema (version {about["schema_version"]}, see mmina's docs/store.md); `*_image`
columns are the screenshots whose SHA-256 the column without the suffix holds. `mmina import
dataset <folder>` turns the dataset back into an mmina store (`mmina.json` states versions and
files).

## Provenance

* mmina {about["mmina_version"]}, store schema version {about["schema_version"]} (the store read was at
  version {about["store_schema_version"]}).
* Recorded by mmina {", ".join(about["recorded_by"]) or "unknown"}, browser {", ".join(about["browsers"]) or "unknown"}.

## Redaction

{about["redaction"]}

Rows (and blobs) that carry a redaction marker:

| config | rows |
|---|---|
{redacted}

## Citation

See `CITATION.cff`. The tasks are MMInA's: {MMINA_TITLE}
({", ".join(MMINA_AUTHORS)}, {MMINA_YEAR}, arXiv:{MMINA_ARXIV}).
"""


def citation_cff(text: CardText, version: str, released: str) -> str:
    """``CITATION.cff`` (Citation File Format 1.2.0) for the dataset, citing MMInA's paper."""
    authors = [{"name": name} for name in text.authors] or [{"name": "mmina users"}]
    paper = {
        "type": "article",
        "title": MMINA_TITLE,
        "year": MMINA_YEAR,
        "authors": [{"name": name} for name in MMINA_AUTHORS],
        "identifiers": [{"type": "other", "value": f"arXiv:{MMINA_ARXIV}"}],
    }
    document = {
        "cff-version": "1.2.0",
        "message": "If you use this dataset, please cite it as below.",
        "type": "dataset",
        "title": text.title,
        "authors": authors,
        **({"license": SPDX[text.license]} if text.license in SPDX else {}),
        "version": version,
        "date-released": released,
        "references": [paper],
    }
    return "\n".join(yaml_block(document)) + "\n"
