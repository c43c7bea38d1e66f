"""A fresh recording worker for the memory benchmark: one browser session records the same
tasks ``--runs`` times over, as a long recording does, and after each round prints this
process's peak and current resident memory as a JSON line.

    python -m bench.memory_probe --store DIR --runs 8 shopping/1 wikipedia/1 ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.results import current_rss_mb, peak_rss_mb
from mmina.agents.oracle import OracleAgent
from mmina.agents.settings import AgentSettings
from mmina.fixtures.web import FixtureWeb
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.workers import Worker, WorkerSetup
from mmina.store import Store
from mmina.tasks.budget import Limits
from mmina.tasks.taskcheck import load_suite


class MarksReader(OracleAgent):
    """The oracle, said to read the set-of-marks image: the recorder paints it for every step."""

    uses_marks = True


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_probe", description=__doc__)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument(
        "--marks", action="store_true", help="an oracle shown the set-of-marks image (painted)"
    )
    parser.add_argument("tasks", nargs="+")
    args = parser.parse_args()
    tasks = [t for t in load_suite().tasks if t.task_id in set(args.tasks)]
    store = Store.open(args.store, create=True)
    with FixtureWeb() as web:
        setup = WorkerSetup(
            agent="oracle",
            settings=AgentSettings(run_id="memory"),
            store=str(store.root),
            run_id="memory",
            limits=Limits(),
            browser=BrowserConfig(extra_args=tuple(web.chromium_args())),
        )
        runner = Worker(
            setup, BrowserSession(setup.browser), store, MarksReader() if args.marks else OracleAgent(), None
        )
        try:
            for round_ in range(1, args.runs + 1):
                for task in tasks:
                    runner.work(task)
                print(
                    json.dumps(
                        {
                            "run": round_,
                            "episodes": round_ * len(tasks),
                            "peak_mb": peak_rss_mb(),
                            "now_mb": current_rss_mb(),
                        }
                    ),
                    flush=True,
                )
        finally:
            runner.close()


if __name__ == "__main__":
    main()
