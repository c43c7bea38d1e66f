"""The agreement table: ``mmina_official``'s stored verdicts against what the runner's code logged.

    python -m tests.data.official.differential.agreement STORE recorded.official.json

Reads the latest ``mmina_official`` task rows of the store's episodes (``mmina rescore
--evaluator mmina_official`` first) and the harness's output for the same episodes (ids
``run/task``), and prints, per rule set and over all: episodes, and on how many the two agree
on the outcome (PASS / FAIL / no result), the hops credited and the logged denominator (and
numerator). Episodes whose score needs the LLM judge or ``program_html`` are left out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mmina.store import Store
from mmina.store.sql import run_query

RULE_SETS = {
    "compare": "multihop",
    "multi567": "multihop",
    "multipro": "multihop",
    "normal": "2hop",
    "shopping": "singlehop",
    "wikipedia": "singlehop",
}
SQL = """
select e.run_id, e.task_id, s.detail_json from latest_scores s join episodes e using (episode_id)
where s.evaluator = 'mmina_official' and s.level = 'task'
"""


def table(store: Store, official: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [dict(zip(("run_id", "task_id", "detail_json"), r)) for r in run_query(store, SQL).rows]
    groups: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for row in rows:
        key = f"{row['run_id']}/{row['task_id']}"
        if key not in official:
            continue
        mine = json.loads(row["detail_json"])
        if mine.get("pending"):
            continue
        groups.setdefault(RULE_SETS.get(mine["domain"], "other"), []).append((mine, official[key]))
    every = [pair for pairs in groups.values() for pair in pairs]
    return [
        _agreement(name, groups[name]) for name in ("multihop", "2hop", "singlehop") if name in groups
    ] + [_agreement("all", every)]


def _agreement(name: str, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    return {
        "rule_set": name,
        "episodes": len(pairs),
        "outcome_agrees": sum(m["outcome"] == o["outcome"] and m["error"] == o["error"] for m, o in pairs),
        "hops_credited_agree": sum(m["hops_credited"] == o["cnt_ans"] for m, o in pairs),
        "numerator_agrees": sum(m["numerator"] == o["numerator"] for m, o in pairs),
        "denominator_agrees": sum(m["denominator"] == o["denominator"] for m, o in pairs),
        "official_outcomes": {
            k: sum(o["outcome"] == k for _, o in pairs) for k in ("pass", "fail", "no_result")
        },
    }


def main(argv: list[str]) -> int:
    official = json.loads(Path(argv[2]).read_text())["results"]
    for row in table(Store.open(argv[1]), official):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
