"""What storing each step's model input costs: bytes per step with and without it, and how much
content addressing saves against storing every step's request whole.

The ``openai`` agent (multimodal, with ``--memory 2`` so a memory block repeats in every system
prompt) records the tasks against the tests' local OpenAI-compatible server; a first run
without memory gives the memory something to show.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from bench.results import Section, Target, ratio
from mmina.agents.settings import AgentSettings
from mmina.models.model_input import INPUT_TYPE, MESSAGE_TYPE, canonical, load_request
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.store.sql import run_query

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fake_openai import FakeOpenAI  # noqa: E402 - the tests' local OpenAI-compatible server

INPUT_BLOBS_SQL = f"""
select count(*), coalesce(sum(size), 0) from (select distinct sha256, size from blobs
                                          where media_type in ('{MESSAGE_TYPE}', '{INPUT_TYPE}'))
"""


def record_with_model(root: Path, task_ids: tuple[str, ...]) -> tuple[Store, str]:
    """Two runs of the openai agent; the second with memory. Returns the store and that run's id."""
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    store = Store.open(root, create=True)
    with FakeOpenAI() as server:
        settings = AgentSettings(model="bench-model", base_url=server.url, input_mode="multimodal")
        record_run(
            store, RecordConfig(agent="openai", task_ids=task_ids, run_id="first", agent_settings=settings)
        )
        record_run(
            store,
            RecordConfig(
                agent="openai", task_ids=task_ids, run_id="memory", agent_settings=replace(settings, memory=2)
            ),
        )
    return store, "memory"


def evidence_section(root: Path, task_ids: tuple[str, ...]) -> Section:
    store, run_id = record_with_model(root, task_ids)
    section = Section("model input")
    steps = run_query(store, "select count(*) from steps").rows[0][0]
    total = sum(p.stat().st_size for p in store.root.rglob("*.parquet"))
    blobs, stored = run_query(store, INPUT_BLOBS_SQL).rows[0]
    digests = [
        r[0] for r in run_query(store, "select model_input from steps where model_input is not null").rows
    ]
    cache = store.read_blobs(digests + _messages(store, digests))

    def blob(digest: str) -> bytes:
        if digest not in cache:
            cache.update(store.read_blobs([digest]))
        return cache[digest]

    whole = sum(len(canonical(load_request(d, blob))) for d in digests)
    section.add(
        "store bytes per step, without model input",
        round((total - stored) / steps),
        "B",
        note=f"{steps} steps of {len(task_ids)} tasks, two runs",
    )
    section.add("store bytes per step, with model input", round(total / steps), "B")
    section.add(
        "model input bytes per step (stored by content)",
        round(stored / steps),
        "B",
        Target(10_000),
        note=f"{blobs} distinct message and input blobs for {len(digests)} requests",
    )
    section.add(
        "each request stored whole / by content",
        round(ratio(whole, stored), 1),
        "×",
        note=f"{whole / 1e6:.1f} MB as JSON per step (images inline) vs {stored / 1e6:.2f} MB",
    )
    return section


def _messages(store: Store, digests: list[str]) -> list[str]:
    documents = store.read_blobs(digests)
    return sorted({m for d in digests for m in json.loads(documents[d])["messages"]})
