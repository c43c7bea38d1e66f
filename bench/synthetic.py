"""A synthetic store at scale, written through mmina's own batch writer.

Runs of 1,050 tasks (the size of MMInA), cloned from the built-in fixture tasks so that every
evaluator has real references: each episode has ``STEPS`` steps whose URLs walk the hops it
completed (the hop's reference URL), a final answer that is right for about 60% of episodes,
screenshots drawn from a pool of distinct images (so blobs deduplicate as in a real store),
and per-step timings. Deterministic for a given size.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mmina.store import Store
from mmina.tasks.task import Task, task_from_dict, task_row
from mmina.tasks.taskcheck import load_suite

TASKS_PER_RUN = 1050
STEPS = 10
SCREENSHOT_POOL = 500
SCREENSHOT_BYTES = 24_000
T0 = datetime(2026, 11, 1, tzinfo=UTC)
SUITE_SHA = "5" * 64


def synthetic_tasks(count: int = TASKS_PER_RUN) -> list[Task]:
    """``count`` tasks cloned round-robin from the built-in suite, ids ``synthetic/1`` ..."""
    base = [t for t in load_suite().tasks if t.original.get("mmina_hops")]
    return [_synthetic(base[i % len(base)], i + 1) for i in range(count)]


def _synthetic(task: Task, number: int) -> Task:
    """A clone of ``task`` that also has an ``exact_match`` reference (the answer its solved
    episodes give), so that every string evaluator has something to judge: the fixture tasks
    have ``must_include`` ones only."""
    original = copy.deepcopy(task.original)
    evaluation = original.setdefault("eval", {})
    evaluation["reference_answers"] = {
        **evaluation.get("reference_answers", {}),
        "exact_match": _right_answer(task),
    }
    return task_from_dict(original, f"synthetic/{number}", task.sha256)


def build(
    root: Path, episodes: int, log: Callable[[str], None] = print, one_run: str | None = None
) -> dict[str, Any]:
    """Write ``episodes`` episodes (``STEPS`` steps each) into a new store at ``root``: runs of
    the 1,050 tasks, or with ``one_run`` all of them in that run (a task's later episodes are
    its further attempts)."""
    store = Store.open(root, create=True)
    tasks = synthetic_tasks(min(TASKS_PER_RUN, episodes))
    rows = [task_row(t) for t in tasks]
    pool = _screenshots(random.Random(7))
    started, written, run = time.perf_counter(), 0, 0
    while written < episodes:
        run_id = one_run or f"synthetic-{run:04d}"
        store.begin_run(run_id, run_row(len(tasks)), rows)
        batch = store.batch_writer(run_id)
        for index in range(min(len(tasks), episodes - written)):
            _add_episode(batch, tasks[index], written + index, pool, run + 1 if one_run else 1)
        batch.commit()
        written, run = written + len(batch), run + 1
        log(f"synthetic store: {written}/{episodes} episodes")
    return {
        "episodes": written,
        "steps": written * STEPS,
        "runs": run,
        "seconds": time.perf_counter() - started,
    }


def _screenshots(rng: random.Random) -> list[bytes]:
    return [b"\xff\xd8\xff\xe0" + rng.randbytes(SCREENSHOT_BYTES) for _ in range(SCREENSHOT_POOL)]


def _add_episode(batch, task: Task, number: int, pool: list[bytes], attempt: int = 1) -> None:
    rng = random.Random(number)
    hops = task.original["mmina_hops"]
    solved = rng.random() < 0.6
    completed = len(hops) if solved else rng.randrange(len(hops))
    answer = _right_answer(task) if solved else "I could not find it"
    shots = [batch.put_blob(pool[rng.randrange(len(pool))], "image/jpeg") for _ in range(STEPS)]
    steps = [_step(k, hops, completed, shots[k], answer, number) for k in range(STEPS)]
    batch.add_episode(
        {
            "episode_id": f"syn-{number:07d}",
            "task_id": task.task_id,
            "attempt": attempt,
            "status": "completed",
            "stop_reason": "stop",
            "final_answer": answer,
            "n_steps": STEPS,
            "n_hops": len(hops),
            "live_hops": completed,
            "hop_steps": list(range(completed)),
            "started_at": T0 + timedelta(seconds=number),
            "ended_at": T0 + timedelta(seconds=number + STEPS),
            "duration_ms": 1000.0 * STEPS,
            "prompt_tokens": 1200 * STEPS,
            "completion_tokens": 30 * STEPS,
            "cost_usd": 0.01 * STEPS,
            "error": None,
        },
        steps,
    )


def _right_answer(task: Task) -> str:
    references = task.reference_answers
    return str(references.get("exact_match") or ", ".join(references.get("must_include") or ()))


def _step(
    k: int, hops: list[dict[str, Any]], completed: int, shot: str, answer: str, number: int
) -> dict[str, Any]:
    url = hops[k]["reference_url"] if k < completed else f"http://wiki.mmina.test/kiwix/search?q=lost{number}"
    last = k == STEPS - 1
    action = f"stop [{answer}]" if last else f"click [{k + 3}]"
    return {
        "step_index": k,
        "started_at": T0 + timedelta(seconds=number, milliseconds=100 * k),
        "url": url,
        "title": f"Page {k}",
        "tabs": [{"url": url, "title": f"Page {k}"}],
        "active_tab": 0,
        "tree_text": _tree(number, k),
        "screenshot": shot,
        "screenshot_som": None,
        "screenshot_width": 1280,
        "screenshot_height": 2048,
        "images": [],
        "model_output": f"In summary, the next action I will perform is ```{action}```",
        "action": action,
        "action_kind": "stop" if last else "click",
        "action_error": None,
        "live_hops": min(k, completed),
        "live_hop_completed": k < completed,
        "prompt_tokens": 1200,
        "completion_tokens": 30,
        "cost_usd": 0.01,
        "observe_ms": 60.0,
        "tree_ms": 12.0,
        "screenshot_ms": 40.0,
        "som_ms": 25.0,
        "images_ms": 3.0,
        "agent_ms": 900.0,
        "action_ms": 150.0,
    }


def _tree(number: int, k: int) -> str:
    lines = [f'[{i}] link "Result {number % 97}-{k}-{i}"' for i in range(3, 20)]
    return "\n".join(['[1] RootWebArea "Synthetic page"', '[2] searchbox "Search"', *lines])


def run_row(task_count: int) -> dict[str, Any]:
    return {
        "created_at": T0,
        "agent": "synthetic",
        "model": None,
        "config_json": "{}",
        "task_suite": "synthetic",
        "task_suite_path": "bench/synthetic.py",
        "task_suite_sha256": SUITE_SHA,
        "task_count": task_count,
        "mmina_version": "bench",
        "python_version": "",
        "playwright_version": "",
        "browser_version": "",
        "viewport_width": 1280,
        "viewport_height": 2048,
        "hostname": "bench",
    }
