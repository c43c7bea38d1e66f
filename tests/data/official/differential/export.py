"""Export a store's episodes as a differential corpus (what ``harness.py`` and the tests read).

    python -m tests.data.official.differential.export STORE [RUN ...] > recorded.json

One trajectory per task and run (its latest attempt, as the report counts it): its agent (the
run's), task id and domain (the task's folder), the task file's JSON, each step's URL and
action text, and the terminal observation's URL.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Any

from mmina.store import Store


def trajectories(store: Store, runs: list[str]) -> list[dict[str, Any]]:
    """The episodes of ``runs`` (all when empty), by run and task."""
    chosen = runs or store.run_ids()
    agents = {r["run_id"]: r["agent"] for r in store.read("runs", columns=["run_id", "agent"]).to_pylist()}
    tasks = {
        (r["run_id"], r["task_id"]): json.loads(r["original_json"])
        for r in store.read("tasks", columns=["run_id", "task_id", "original_json"]).to_pylist()
    }
    steps: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in store.read("steps", columns=["episode_id", "step_index", "url", "action"]).to_pylist():
        steps[row["episode_id"]].append(row)
    rows = store.read(
        "episodes",
        columns=["run_id", "episode_id", "task_id", "final_url", "stop_reason", "attempt", "started_at"],
    ).to_pylist()
    latest = {
        (e["run_id"], e["task_id"]): e for e in sorted(rows, key=lambda e: (e["attempt"], e["started_at"]))
    }
    found = []
    chosen_rows = sorted(
        (e for e in latest.values() if e["run_id"] in chosen), key=lambda e: (e["run_id"], e["task_id"])
    )
    for episode in chosen_rows:
        ordered = sorted(steps[episode["episode_id"]], key=lambda s: s["step_index"])
        found.append(
            {
                "id": f"{episode['run_id']}/{episode['task_id']}",
                "agent": agents[episode["run_id"]],
                "run_id": episode["run_id"],
                "task_id": episode["task_id"],
                "domain": episode["task_id"].split("/")[0],
                "task": tasks[(episode["run_id"], episode["task_id"])],
                "stop_reason": episode["stop_reason"],
                "steps": [{"url": s["url"] or "", "action": s["action"]} for s in ordered],
                "final_url": episode["final_url"],
            }
        )
    return found


def main(argv: list[str]) -> int:
    store = Store.open(argv[1])
    json.dump(
        {"about": __doc__.splitlines()[0], "trajectories": trajectories(store, argv[2:])},
        sys.stdout,
        indent=1,
        ensure_ascii=False,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
