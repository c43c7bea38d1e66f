"""``mmina view`` on a short episode: the command's time, end to end, and its screenshots'.

One task (``normal/1``, the oracle: 6 steps) is recorded, then ``mmina view`` (the real command
line, its own process, as a user runs it) writes the episode's page several times; the median
wall and CPU time are the figures. Beside them, the step images of the episode made the way the
viewer did before 2026-12-06 (the set-of-marks image painted at full size, decoded again and
shrunk to 720 px) and the way it does now (the screenshot decoded at half scale, the marks
painted on it, one encoding).
"""

from __future__ import annotations

import io
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from bench.results import AT_LEAST, Section, Target, ratio
from mmina.analysis.data import query
from mmina.analysis.viewer import EPISODES_SQL, STEPS_SQL, small_step_image
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.store.marks import repaint
from mmina.store.views import connect

TASK = "normal/1"
ROUNDS = 5


def view_section(work: Path, log: Callable[[str], None]) -> Section:
    """The figures of ``mmina view`` on one recorded episode."""
    section = Section("view")
    root = work / "store"
    log("view: recording one task with the oracle")
    summary = record_run(Store.open(root, create=True), RecordConfig(agent="oracle", task_ids=(TASK,)))
    episode = summary.episodes[0]
    log("view: mmina view, several times")
    walls, cpus = zip(
        *(_view_once(root, episode.episode_id, work / f"episode-{i}.html") for i in range(ROUNDS))
    )
    section.add(
        "mmina view, a short episode",
        round(statistics.median(walls), 2),
        "s",
        Target(1.0),
        note=f"{TASK}, {episode.n_steps} steps, median of {ROUNDS} runs of the command "
        "(process start included)",
    )
    section.add(
        "mmina view CPU time",
        round(statistics.median(cpus), 2),
        "s",
        note="user + system of the process: the figure load on the machine changes least",
    )
    before, after = _images(Store.open(root), episode.episode_id)
    section.add("step images before (full-size marks, shrunk to 720 px)", round(before * 1000), "ms")
    section.add("step images now (half-scale decode, marks on it)", round(after * 1000), "ms")
    section.add("step images, before / now", round(ratio(before, after), 1), "×", Target(2.0, AT_LEAST))
    return section


def _view_once(root: Path, episode_id: str, out: Path) -> tuple[float, float]:
    """One ``mmina view`` run: its wall time and its CPU time (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mmina",
            "view",
            "--episode",
            episode_id,
            "--store",
            str(root),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _images(store: Store, episode_id: str) -> tuple[float, float]:
    """CPU seconds to make the episode's step images the old way and the new way."""
    db = connect(store)
    try:
        episode = query(db, EPISODES_SQL, {"episodes": [episode_id]})[0]
        steps = query(db, STEPS_SQL, {"episodes": [episode_id]})
    finally:
        db.close()
    blobs = store.read_blobs([s["screenshot"] for s in steps if s["screenshot"]], episode["blob_packs"])
    rows = [s for s in steps if s["screenshot"] in blobs and s["marks"]]
    before = _cpu(lambda: [_old_image(blobs[s["screenshot"]], s["marks"]) for s in rows])
    after = _cpu(lambda: [small_step_image(s, blobs) for s in rows])
    return before, after


def _old_image(screenshot: bytes, marks: list[dict[str, Any]]) -> bytes:
    """The viewer's step image before: marks painted on the full-size screenshot, then that
    JPEG decoded and shrunk to 720 px (bicubic)."""
    painted = repaint(screenshot, marks)
    with Image.open(io.BytesIO(painted)) as opened:
        picture = opened.convert("RGB")
    picture = picture.resize((720, round(picture.height * 720 / picture.width)))
    out = io.BytesIO()
    picture.save(out, "JPEG", quality=70)
    return out.getvalue()


def _cpu(work: Callable[[], Any], rounds: int = 3) -> float:
    """The least CPU time of a few runs of ``work``."""
    times = []
    for _ in range(rounds):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return min(times)
