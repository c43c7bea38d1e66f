"""Export throughput (episodes/s) and memory: WARC (and its restoring import), WACZ, Inspect, HAR, the
Hugging Face dataset and ATIF on the built-in suite recorded by the oracle, then WARC, WACZ and Inspect
on one synthetic run of many episodes, each export in a process of its own whose peak resident memory
is read (streaming: it must not grow with the run)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.results import Section
from bench.synthetic import build
from mmina.evaluators.rescore import RescoreConfig, rescore
from mmina.interchange.atif_export import export_atif
from mmina.interchange.dataset_export import export_dataset
from mmina.interchange.har_export import export_har
from mmina.interchange.inspect_export import export_inspect
from mmina.interchange.stored import Selection
from mmina.interchange.wacz_export import export_wacz
from mmina.interchange.warc_export import export_warc
from mmina.interchange.warc_import import import_warc
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store

BIG_RUN = "synthetic-all"
FEW_TASKS = 10
SCALE_EPISODES = (10_000, 500)
"""Episodes of the synthetic run (full, --quick): enough to see whether memory grows with the run
(an export costs ~20-40 ms of CPU an episode, so 100,000 would take an hour of this bench)."""
CHILD = """
import json, sys, time
from pathlib import Path
from mmina.store import Store
from mmina.interchange.stored import Selection
from mmina.interchange.inspect_export import export_inspect
from mmina.interchange.warc_export import export_warc
from mmina.interchange.wacz_export import export_wacz
kind, store, run, out, tasks = sys.argv[1], Store.open(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), sys.argv[5:]
started, cpu = time.perf_counter(), time.process_time()
exports = {"warc": export_warc, "wacz": export_wacz}
result = exports[kind](store, Selection(run=run, tasks=tuple(tasks)), out) \
if kind in exports else export_inspect(store, run, out)
episodes = result.samples if kind == "inspect" else result.episodes
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
print(json.dumps({"episodes": episodes, "wall": time.perf_counter() - started, "cpu": time.process_time() - cpu,
                  "peak_mb": peak, "bytes": result.bytes}))
"""


def interchange_section(
    work: Path, tasks: tuple[str, ...], quick: bool, log: Callable[[str], None]
) -> Section:
    section = Section("interchange")
    builtin(section, work / "builtin", tasks, log)
    at_scale(section, work / "synthetic", SCALE_EPISODES[quick], log)
    return section


def builtin(section: Section, work: Path, tasks: tuple[str, ...], log: Callable[[str], None]) -> None:
    """Records ``tasks`` once, then times each export of the run in this process."""
    log(f"interchange: recording {len(tasks)} task(s) with the oracle")
    store = Store.open(work / "store", create=True)
    run_id = record_run(store, RecordConfig(task_ids=tasks, run_id="oracle")).run_id
    episodes = store.read("episodes", run_id=run_id, columns=["episode_id"]).column("episode_id").to_pylist()
    exports = {
        "WARC": lambda: export_warc(store, Selection(run=run_id), work / "run.warc.gz"),
        "WARC restored (import warc, no --tasks)": lambda: import_warc(
            Store.open(work / "restored", create=True), [work / "run.warc.gz"], None
        ),
        "WACZ": lambda: export_wacz(store, Selection(run=run_id), work / "run.wacz"),
        "Inspect": lambda: export_inspect(store, run_id, work / "run.eval"),
        "HAR": lambda: [export_har(store, e, work / f"{e}.har") for e in episodes],
        "dataset": lambda: export_dataset(store, [run_id], work / "dataset"),
        "ATIF": lambda: export_atif(store, Selection(run=run_id), work / "atif"),
    }
    for name, export in exports.items():
        log(f"interchange: {name} export of the built-in suite")
        wall, cpu = time.perf_counter(), time.process_time()
        export()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        section.add(
            f"{name}{'' if 'import' in name else ' export'}, built-in suite",
            round(len(episodes) / wall, 1),
            "episodes/s",
            note=f"{len(episodes)} episodes in {wall:.2f} s wall, {cpu:.2f} s CPU",
        )


def at_scale(section: Section, work: Path, episodes: int, log: Callable[[str], None]) -> None:
    """One run of ``episodes`` synthetic episodes: WARC of a few tasks and of all, Inspect of all."""
    log(f"interchange: a synthetic run of {episodes} episodes")
    build(work / "store", episodes, log, one_run=BIG_RUN)
    rescore(Store.open(work / "store"), RescoreConfig(evaluator="hops"))
    few = [f"synthetic/{n}" for n in range(1, FEW_TASKS + 1)]
    for name, kind, tasks in (
        (f"WARC export, {FEW_TASKS} tasks of the run", "warc", few),
        ("WARC export, the whole run", "warc", []),
        ("WACZ export, the whole run", "wacz", []),
        ("Inspect export, the whole run", "inspect", []),
    ):
        log(f"interchange: {name}")
        figures = _child(kind, work, tasks)
        section.add(
            name,
            round(figures["episodes"] / figures["wall"], 1),
            "episodes/s",
            note=f"{figures['episodes']} episodes in {figures['wall']:.1f} s wall, {figures['cpu']:.1f} s CPU; "
            f"peak RSS {figures['peak_mb']:.0f} MB; {figures['bytes'] / 1e6:.0f} MB written",
        )
        section.add(f"{name}: peak RSS", round(figures["peak_mb"]), "MB")


def _child(kind: str, work: Path, tasks: list[str]) -> dict:
    out = work / {"warc": "run.warc.gz", "wacz": "run.wacz"}.get(kind, "run.eval")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(work / "store"), BIG_RUN, str(out), *tasks],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])
