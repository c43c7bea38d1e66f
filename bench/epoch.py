"""An epoch at scale: many episodes in flight against a model that takes 2 s per step.

The fixture tasks (short ones, not the kiwix viewer's) are cloned to 256 episodes and recorded
by the ``openai`` agent against the tests' local OpenAI-compatible server, which answers each
step with the oracle's action after a fixed delay. Each configuration is one run: episodes per
minute, the ratio to the ideal (every model call waited for once per ``concurrency``:
``steps × delay / concurrency``), the peak memory of mmina and its browsers per episode in flight
beyond the first, and the CPU it used (both cores of this machine = 100%).
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mmina.pool import Layout
from mmina.agents.oracle import script_action
from mmina.agents.settings import AgentSettings
from mmina.observation import Element, Observation
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks import Task
from mmina.taskcheck import load_suite

from bench.results import AT_LEAST, Section, Target, ratio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.agents_for_tests import descendants  # noqa: E402
from tests.fake_openai import FakeOpenAI  # noqa: E402 - the tests' local OpenAI-compatible server

DELAY_S = 2.0
EPISODES = 256
MAX_SCRIPT = 6
FIXTURE_TASKS = Path(__file__).resolve().parent.parent / "fixtures" / "tasks"
ELEMENT = re.compile(r'^\s*\[(\d+)\] ([\w/-]+)(?: "((?:[^"\\]|\\.)*)")?', re.MULTILINE)
SAMPLE_S = 3.0


@dataclass(frozen=True)
class Setting:
    """One configuration: ``workers`` × ``concurrency`` in flight, on ``executor``, over ``episodes``."""

    label: str
    episodes: int
    concurrency: int
    workers: int = 1
    executor: str = "local"

    @property
    def in_flight(self) -> int:
        return self.workers * self.concurrency

    @property
    def layout(self) -> Layout:
        return Layout(self.workers, self.concurrency, self.executor)


FULL = (Setting("concurrency 1", 12, 1), Setting("concurrency 8", 64, 8), Setting("concurrency 32", EPISODES, 32),
        Setting("concurrency 64", EPISODES, 64), Setting("2 workers × 16, local", EPISODES, 16, 2),
        Setting("2 workers × 16, Ray", EPISODES, 16, 2, "ray"))
QUICK = (Setting("concurrency 1", 2, 1), Setting("concurrency 8", 8, 8), Setting("2 workers × 4, local", 8, 4, 2),
         Setting("2 workers × 4, Ray", 8, 4, 2, "ray"))


def short_tasks(suite_tasks: tuple[Task, ...]) -> list[Task]:
    """Tasks the oracle finishes in a few steps, on the Python fixture web (no kiwix-serve)."""
    return [t for t in suite_tasks if t.reference_script and len(t.reference_script) <= MAX_SCRIPT
            and not any("kiwix." in u for u in t.start_urls)]


def write_clones(folder: Path, tasks: list[Task], count: int) -> Path:
    """``count`` task files cycling through ``tasks`` (task ids 1..count), as one suite folder."""
    suite = folder / "epoch"
    suite.mkdir(parents=True, exist_ok=True)
    for number in range(1, count + 1):
        task = tasks[(number - 1) % len(tasks)]
        raw = json.loads((FIXTURE_TASKS / f"{task.task_id}.json").read_text())
        (suite / f"{number}.json").write_text(json.dumps({**raw, "task_id": number}))
    return suite


def oracle_policy(tasks: list[Task]) -> Callable[[str], str]:
    """The fake model's answer: the oracle's next action, found from the prompt alone (the task
    by its objective, the step by the number of previous actions, elements from the tree)."""
    scripts = {t.intent: t.reference_script or [] for t in tasks}

    def act(prompt: str) -> str:
        intent = _between(prompt, "OBJECTIVE: ", "\n")
        previous = _between(prompt, "PREVIOUS ACTIONS:\n", "\0")
        step = 0 if previous.strip() == "None" else len(previous.strip().splitlines())
        script = scripts.get(intent, [])
        if step >= len(script):
            return "stop [N/A]"
        elements = [Element(m[1], m[2], json.loads(f'"{m[3]}"') if m[3] else "", 0) for m in ELEMENT.finditer(prompt)]
        observation = Observation(step, _between(prompt, "URL: ", "\n"), "", [], 0, "", elements, intent=intent)
        return script_action(script[step], observation).render()

    return act


def _between(text: str, start: str, end: str) -> str:
    after = text.split(start, 1)[1] if start in text else ""
    return after.split(end, 1)[0]


class Sampler:
    """Peak proportional memory (PSS) of this process and all its descendants, and the
    machine's CPU use, while a block runs."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()

    @contextmanager
    def sampling(self) -> Iterator["Sampler"]:
        busy, total = _cpu_jiffies()
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            busy_after, total_after = _cpu_jiffies()
            self.cpu = (busy_after - busy) / max(1, total_after - total)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.peak_mb = max(self.peak_mb, tree_pss_mb(os.getpid()))


def tree_pss_mb(root: int) -> float:
    """Proportional memory of ``root`` and its descendants, in MB."""
    total = 0
    for pid in [root, *descendants(root)]:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        found = re.search(r"^Pss:\s+(\d+) kB", rollup, re.MULTILINE)
        total += int(found.group(1)) if found else 0
    return total / 1024


def _cpu_jiffies() -> tuple[int, int]:
    """Busy and total CPU time of the machine so far (``/proc/stat``, every core)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


@dataclass(frozen=True)
class Measured:
    setting: Setting
    wall_s: float
    episodes: int
    steps: int
    errors: int
    peak_mb: float
    cpu: float


def measure(store: Store, suite: Path, setting: Setting, settings: AgentSettings) -> Measured:
    sampler = Sampler()
    with sampler.sampling():
        started = time.perf_counter()
        summary = record_run(store, RecordConfig(tasks=str(suite), agent="openai", limit=setting.episodes,
                                                 layout=setting.layout, agent_settings=settings))
        wall = time.perf_counter() - started
    [[steps]] = run_query(store, f"select count(*) from steps where run_id = '{summary.run_id}'").rows
    return Measured(setting, wall, len(summary.episodes), steps, summary.errors, sampler.peak_mb, sampler.cpu)


def epoch_section(root: Path, quick: bool, log: Callable[[str], None]) -> Section:
    tasks = short_tasks(load_suite().tasks)
    settings_list = QUICK if quick else FULL
    delay = DELAY_S / 10 if quick else DELAY_S
    suite = write_clones(root / "tasks", tasks, max(s.episodes for s in settings_list))
    store = Store.open(root / "store", create=True)
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    results: list[Measured] = []
    with FakeOpenAI(delay_s=delay, policy=oracle_policy(tasks)) as server:
        settings = AgentSettings(model="bench-model", base_url=server.url)
        for setting in settings_list:
            log(f"epoch: {setting.episodes} episodes, {setting.label} (model answers after {delay:g} s)")
            results.append(measure(store, suite, setting, settings))
    return _section(results, delay)


def _section(results: list[Measured], delay: float) -> Section:
    section = Section("epoch")
    base = results[0]
    for result in results:
        label, setting = result.setting.label, result.setting
        rate = result.episodes / result.wall_s * 60
        ideal = result.steps * delay / setting.in_flight
        section.add(f"{label}: episodes/min", round(rate, 1), "/min",
                    note=f"{result.episodes} episodes, {result.steps} steps, {result.errors} errors, "
                         f"{result.wall_s:.0f} s")
        section.add(f"{label}: ideal / measured time", round(ratio(ideal, result.wall_s), 2), "×",
                    note=f"ideal {ideal:.0f} s = steps × {delay:g} s / {setting.in_flight} in flight")
        if setting.in_flight > base.setting.in_flight:
            _speedup(section, result, base)
        ceiling = result.steps / result.wall_s / max(result.cpu, 1e-3)
        section.add(f"{label}: CPU", round(result.cpu * 100), "%",
                    note=f"all cores = 100%; CPU-bound ceiling ≈ {ceiling:.1f} steps/s")
        if setting.in_flight > base.setting.in_flight:
            extra = (result.peak_mb - base.peak_mb) / (setting.in_flight - base.setting.in_flight)
            section.add(f"{label}: memory per episode in flight beyond the first", round(extra, 1), "MB",
                        Target(80), note=f"peak {result.peak_mb:.0f} MB (PSS of mmina, browsers, drivers)")
    _ray_vs_local(section, results)
    return section


def _speedup(section: Section, result: Measured, base: Measured) -> None:
    """Steps per second over those of ``base`` (1 in flight), as a share of the ideal speedup
    (the number in flight): 1.0 when nothing but the model's waiting limits it."""
    speedup = ratio(result.steps / result.wall_s, base.steps / base.wall_s)
    share = speedup * base.setting.in_flight / result.setting.in_flight
    target = Target(0.7, AT_LEAST) if result.setting.in_flight == 32 else None
    section.add(f"{result.setting.label}: speedup over 1 in flight / ideal", round(share, 2), "×", target,
                note=f"{speedup:.1f}× the steps/s of 1 in flight, ideal {result.setting.in_flight}×")


def _ray_vs_local(section: Section, results: list[Measured]) -> None:
    """Ray's episodes/min against the local executor at the same workers × concurrency."""
    for ray_result in (r for r in results if r.setting.executor == "ray"):
        local = next((r for r in results if r.setting.executor == "local"
                      and (r.setting.workers, r.setting.concurrency) == (ray_result.setting.workers,
                                                                          ray_result.setting.concurrency)), None)
        if local is not None:
            section.add("Ray / local at the same concurrency", round(ratio(local.wall_s, ray_result.wall_s), 2), "×",
                        Target(0.85, AT_LEAST), note="episodes/min of Ray over the local executor's")
