"""Export throughput (episodes/s) on the built-in suite recorded by the oracle: WARC, HAR and Inspect."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mmina.interchange.har_export import export_har
from mmina.interchange.inspect_export import export_inspect
from mmina.interchange.stored import Selection
from mmina.interchange.warc_export import export_warc
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store

from bench.results import Section


def interchange_section(work: Path, tasks: tuple[str, ...], log: Callable[[str], None]) -> Section:
    """Records ``tasks`` once, then times each export of the run (CPU and wall time of this process)."""
    log(f"interchange: recording {len(tasks)} task(s) with the oracle")
    store = Store.open(work / "store", create=True)
    run_id = record_run(store, RecordConfig(task_ids=tasks, run_id="oracle")).run_id
    episodes = store.read("episodes", run_id=run_id, columns=["episode_id"]).column("episode_id").to_pylist()
    section = Section("interchange")
    exports = {"WARC": lambda: export_warc(store, Selection(run=run_id), work / "run.warc.gz"),
               "Inspect": lambda: export_inspect(store, run_id, work / "run.eval"),
               "HAR": lambda: [export_har(store, e, work / f"{e}.har") for e in episodes]}
    for name, export in exports.items():
        log(f"interchange: {name} export")
        wall, cpu = time.perf_counter(), time.process_time()
        export()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        section.add(f"{name} export", round(len(episodes) / wall, 1), "episodes/s",
                    note=f"{len(episodes)} episodes in {wall:.2f} s wall, {cpu:.2f} s CPU of this process")
    return section
