"""Synthetic runs, tasks and episodes written through the real store writer (no mocks).

Importable as ``from tests.store_helpers import ...`` and, from subprocesses, after putting
the repository root on ``sys.path`` (see ``REPO_ROOT``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mmina.store import Store

REPO_ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
SUITE_SHA = "0" * 64


def run_row(**overrides: Any) -> dict[str, Any]:
    row = {
        "created_at": T0,
        "agent": "oracle",
        "model": None,
        "config_json": "{}",
        "task_suite": "synthetic",
        "task_suite_path": "/nowhere",
        "task_suite_sha256": SUITE_SHA,
        "task_count": 1,
        "mmina_version": "0.1.0",
        "python_version": "3.11",
        "playwright_version": "1.0",
        "browser_version": "chromium 1",
        "viewport_width": 1280,
        "viewport_height": 720,
        "hostname": "test",
    }
    return {**row, **overrides}


def task_row(task_id: str = "normal/1", n_hops: int = 2, **overrides: Any) -> dict[str, Any]:
    procedure = [f"site{i}" for i in range(n_hops)] + ["end"]
    row = {
        "task_id": task_id,
        "suite": task_id.split("/")[0],
        "intent": f"do {task_id}",
        "start_urls": ["http://wiki.mmina.test/"],
        "cnt_hop": n_hops + 1,
        "n_hops": n_hops,
        "procedure": procedure,
        "eval_types": ["must_include"],
        "reference_answers_json": '{"must_include": ["x"]}',
        "reference_url": "",
        "city": "",
        "flight": "",
        "shop": "",
        "original_json": "{}",
        "task_sha256": "1" * 64,
    }
    return {**row, **overrides}


def judged_task_row(
    task_id: str = "normal/1", answers: dict[str, Any] | None = None, reference_url: str = "", n_hops: int = 2
) -> dict[str, Any]:
    """A task row whose original JSON (what evaluators read) carries these references."""
    original = {
        "intent": f"do {task_id}",
        "start_url": "http://wiki.mmina.test/",
        "procedure": [f"site{i}" for i in range(n_hops)] + ["end"],
        "eval": {
            "eval_types": ["string_match"],
            "reference_answers": answers or {},
            "reference_url": reference_url,
        },
    }
    return task_row(
        task_id,
        n_hops,
        original_json=json.dumps(original),
        reference_answers_json=json.dumps(answers or {}),
        reference_url=reference_url,
    )


def begin(store: Store, run_id: str, sha: str = SUITE_SHA, tasks: Sequence[str] = ("normal/1",)) -> bool:
    return store.begin_run(
        run_id, run_row(task_suite_sha256=sha, task_count=len(tasks)), [task_row(t) for t in tasks]
    )


def step_row(index: int, screenshot: str | None = None, **overrides: Any) -> dict[str, Any]:
    row = {
        "step_index": index,
        "started_at": T0 + timedelta(seconds=index),
        "url": f"http://wiki.mmina.test/p{index}",
        "title": f"Page {index}",
        "tabs": [{"url": f"http://wiki.mmina.test/p{index}", "title": f"Page {index}"}],
        "active_tab": 0,
        "tree_text": f"[{index}] link 'next'",
        "screenshot": screenshot,
        "screenshot_som": None,
        "screenshot_width": 1,
        "screenshot_height": 1,
        "images": [],
        "model_output": f"click [{index}]",
        "action": f"click [{index}]",
        "action_kind": "click",
        "action_error": None,
        "live_hops": 0,
        "live_hop_completed": False,
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "cost_usd": 0.0,
        "observe_ms": 1.5,
        "tree_ms": 0.5,
        "screenshot_ms": 0.5,
        "agent_ms": 0.25,
        "action_ms": 2.0,
    }
    return {**row, **overrides}


def request_row(seq: int, body: str | None = None, **overrides: Any) -> dict[str, Any]:
    row = {
        "seq": seq,
        "step_index": seq - 1,
        "started_at": T0 + timedelta(milliseconds=seq),
        "method": "GET",
        "url": f"http://wiki.mmina.test/r{seq}",
        "status": 200,
        "request_headers": [{"name": "Cookie", "value": "[REDACTED]"}],
        "response_headers": [{"name": "Content-Type", "value": "text/html"}],
        "request_body": None,
        "request_body_size": 0,
        "response_body": body,
        "response_body_size": 0,
        "mime_type": "text/html",
        "redirect_url": "",
        "time_ms": 3.0,
    }
    return {**row, **overrides}


def episode_row(task_id: str = "normal/1", n_steps: int = 2, **overrides: Any) -> dict[str, Any]:
    row = {
        "task_id": task_id,
        "attempt": 1,
        "status": "completed",
        "stop_reason": "stop",
        "final_answer": "x",
        "n_steps": n_steps,
        "n_hops": 2,
        "live_hops": 2,
        "hop_steps": [0, 1],
        "started_at": T0,
        "ended_at": T0 + timedelta(seconds=n_steps),
        "duration_ms": 1000.0 * n_steps,
        "prompt_tokens": 10 * n_steps,
        "completion_tokens": 2 * n_steps,
        "cost_usd": 0.0,
        "error": None,
    }
    return {**row, **overrides}


def write_episode(
    store: Store,
    run_id: str,
    episode_id: str,
    blobs: Sequence[bytes] = (),
    n_steps: int = 2,
    n_requests: int = 0,
) -> list[str]:
    """Commit one episode: each step's screenshot is the next blob (cycled); returns the blob hashes."""
    writer = store.episode_writer(run_id, episode_id)
    digests = [writer.put_blob(data, "application/octet-stream") for data in blobs]
    for index in range(n_steps):
        writer.add_step(step_row(index, digests[index % len(digests)] if digests else None))
    writer.add_requests([request_row(seq, digests[0] if digests else None) for seq in range(n_requests)])
    writer.commit(episode_row(n_steps=n_steps))
    return digests
