"""An epoch at scale: many episodes in flight against a model that takes 2 s per step.

The fixture tasks (not the kiwix viewer's) are cloned to 256 episodes and recorded by the
``openai`` agent against the tests' local OpenAI-compatible server, which answers each step with
the oracle's action after a fixed delay. Two kinds of task: the short ones (2–6 steps), for every
number in flight, and at 32 in flight the MMInA-length ones as well (8–12 steps across sites:
typing, filtering, paging, going to another site), since an MMInA task has about ten steps and
what an episode costs once (its context, its first page, its last observation) is spread over
its steps; the projected epoch is taken from those. The model server and the fixture web run in
processes of their own (``bench/apart.py``), counted apart. Each configuration is one run:
episodes per minute, the ratio to the ideal (every model call waited for once per
``concurrency``: ``steps × delay / concurrency``), the core-seconds per step of mmina's side by
process kind (``bench/cputree.py``), and the peak memory of mmina and its browsers per episode
in flight beyond the first. Then what an episode costs while it waits on its model
(``bench/waiting.py``), the floors under a step (one episode's work done by Chromium alone, by
Playwright and by mmina, ``bench/floors.py``), the episodes of the run the epoch is projected
from done again at the same number in flight by a bare Playwright harness and by the recorder
alone, each with gotos and with the episodes' actions (``bench/layers.py``), against the
core-seconds a step that 0.7 of the ideal would allow, the projected time of a 1,050-task ×
10-step epoch with a 5 s model on this machine, and the ratio to the previous release's
core-seconds per step (``docs/performance.md``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.apart import in_own_process, serve_fixture_web, serve_model
from bench.cputree import KINDS, CpuSplit, CpuTree
from bench.floors import Floor, floors
from bench.layers import ACTIONS, BARE, BARE_ACTIONS, GOTOS, layers, recorded
from bench.results import AT_LEAST, Section, Target, previous_release, ratio
from bench.waiting import ANIMATED, per_episode_second, waiting_split
from mmina.actions.grammar import Action, parse_action
from mmina.agents.oracle import script_action
from mmina.agents.settings import HISTORY_ACTIONS, AgentSettings
from mmina.errors import MminaError
from mmina.executors.interface import Layout
from mmina.observations.observation import Observation, elements_from_tree
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.store.sql import run_query
from mmina.tasks.task import Task
from mmina.tasks.taskcheck import load_suite

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.agents_for_tests import descendants  # noqa: E402

DELAY_S = 2.0
EPISODES = 256
MAX_SCRIPT = 6
LONG_SCRIPT = (8, 12)
"""The reference-script lengths of the MMInA-length tasks (``long_tasks``)."""
LONG_EPISODES = 128
FIXTURE_TASKS = Path(__file__).resolve().parent.parent / "fixtures" / "tasks"
SAMPLE_S = 3.0
MODEL, WEB = "model server", "web"
"""The kinds counted apart: a real epoch runs its model elsewhere and its sites are on the web."""
PER_STEP_TARGET = 0.23
WAIT_TARGET = 0.02
IDEAL_SHARE = 0.7
"""The share of the ideal (every model call waited for once, nothing else) 32 in flight is held to."""
EPOCH_STEPS = 1_050 * 10
EPOCH_MODEL_S = 5.0

WHOLE = "the whole recording"
"""The run itself, as a layer over the recorder alone (``bench/layers.py``)."""

SHORT, LONG = "short", "long"
"""The kinds of task a setting runs (``short_tasks``, ``long_tasks``)."""


@dataclass(frozen=True)
class Setting:
    """One configuration: ``workers`` × ``concurrency`` in flight, on ``executor``, over ``episodes``
    of the ``tasks`` kind (``SHORT`` or ``LONG``)."""

    label: str
    episodes: int
    concurrency: int
    workers: int = 1
    executor: str = "local"
    tasks: str = SHORT

    @property
    def in_flight(self) -> int:
        return self.workers * self.concurrency

    @property
    def layout(self) -> Layout:
        return Layout(self.workers, self.concurrency, self.executor)


FULL = (
    Setting("concurrency 1", 12, 1),
    Setting("concurrency 8", 64, 8),
    Setting("concurrency 32", EPISODES, 32),
    Setting("concurrency 32, MMInA-length tasks", LONG_EPISODES, 32, tasks=LONG),
    Setting("concurrency 64", EPISODES, 64),
    Setting("2 workers × 16, local", EPISODES, 16, 2),
    Setting("2 workers × 16, Ray", EPISODES, 16, 2, "ray"),
)
QUICK = (
    Setting("concurrency 1", 2, 1),
    Setting("concurrency 8", 8, 8),
    Setting("concurrency 8, MMInA-length tasks", 8, 8, tasks=LONG),
    Setting("2 workers × 4, local", 8, 4, 2),
    Setting("2 workers × 4, Ray", 8, 4, 2, "ray"),
)
FLOORS = (6, 3)
QUICK_FLOORS = (1, 1)
"""Episodes per measurement and rounds of the floors (``bench/floors.py``)."""
WAITING = (32, EPOCH_MODEL_S)
QUICK_WAITING = (4, 3.0)
"""Episodes waiting at once, and for how long (seconds) their CPU is sampled."""


def short_tasks(suite_tasks: tuple[Task, ...]) -> list[Task]:
    """Tasks the oracle finishes in a few steps, on the Python fixture web (no kiwix-serve)."""
    return scripted_tasks(suite_tasks, 1, MAX_SCRIPT)


def long_tasks(suite_tasks: tuple[Task, ...]) -> list[Task]:
    """Tasks of MMInA's length (``LONG_SCRIPT`` steps, several sites), on the Python fixture web."""
    return scripted_tasks(suite_tasks, *LONG_SCRIPT)


def scripted_tasks(suite_tasks: tuple[Task, ...], low: int, high: int) -> list[Task]:
    """Tasks whose reference script has ``low``..``high`` steps, none of them on kiwix-serve."""
    return [
        t
        for t in suite_tasks
        if t.reference_script
        and low <= len(t.reference_script) <= high
        and not any("kiwix." in u for u in t.start_urls)
    ]


def write_clones(folder: Path, tasks: list[Task], count: int, name: str) -> Path:
    """``count`` task files cycling through ``tasks`` (task ids 1..count), as the suite folder ``name``."""
    suite = folder / name
    suite.mkdir(parents=True, exist_ok=True)
    for number in range(1, count + 1):
        task = tasks[(number - 1) % len(tasks)]
        raw = json.loads((FIXTURE_TASKS / f"{task.task_id}.json").read_text())
        (suite / f"{number}.json").write_text(json.dumps({**raw, "task_id": number}))
    return suite


def oracle_policy(tasks: list[Task]) -> Callable[[str], str]:
    """The fake model's answer: the oracle's next action, found from the prompt alone (the task
    by its objective, the step by the previous actions shown, elements from the tree)."""
    scripts = {t.intent: t.reference_script or [] for t in tasks}

    def act(prompt: str) -> str:
        intent = _between(prompt, "OBJECTIVE: ", "\n")
        script = scripts.get(intent, [])
        step = script_step(script, _between(prompt, "PREVIOUS ACTIONS:\n", "\0"))
        if step >= len(script):
            return "stop [N/A]"
        observation = Observation(
            step_index=step,
            url=_between(prompt, "URL: ", "\n"),
            title="",
            tabs=[],
            active_tab=0,
            tree_text="",
            elements=elements_from_tree(prompt),
            intent=intent,
        )
        return script_action(script[step], observation).render()

    return act


def script_step(script: list[dict[str, Any]], previous: str) -> int:
    """How many of the script's steps were taken, from the prompt's previous actions. The prompt
    shows only the last ``HISTORY_ACTIONS`` of them, numbered from 1, so past that many the step
    is the first place where the script's actions before it are the ones shown (element ids
    aside: those of earlier pages are not in the prompt); the script's end when none is."""
    lines = [] if previous.strip() == "None" else previous.strip().splitlines()
    if len(lines) < HISTORY_ACTIONS:
        return len(lines)
    try:
        shown = [_shape(parse_action(line.partition(". ")[2])) for line in lines]
    except MminaError:  # a reply without a valid action: the script is lost, stop
        return len(script)
    blank = Observation(step_index=0, url="", title="", tabs=[], active_tab=0, tree_text="", elements=[])
    planned = [_shape(script_action(step, blank)) for step in script]
    return next(
        (end for end in range(len(shown), len(script) + 1) if planned[end - len(shown) : end] == shown),
        len(script),
    )


def _shape(action: Action) -> Action:
    """An action without its element id."""
    return replace(action, element_id=None)


def _between(text: str, start: str, end: str) -> str:
    after = text.split(start, 1)[1] if start in text else ""
    return after.split(end, 1)[0]


class Sampler:
    """Peak proportional memory (PSS) of this process and all its descendants but the ``apart``
    ones (the model server, the web), while a block runs; ``own_s``: the CPU the sampling took
    (reading ``smaps_rollup`` walks page tables), which is the bench's, not the run's."""

    def __init__(self, apart: set[int]) -> None:
        self.peak_mb = 0.0
        self.own_s = 0.0
        self.apart = apart
        self._stop = threading.Event()

    @contextmanager
    def sampling(self) -> Iterator[Sampler]:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()

    def _run(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(SAMPLE_S):
            self.peak_mb = max(self.peak_mb, tree_pss_mb(os.getpid(), self.apart))
        self.own_s = time.thread_time() - started


def tree_pss_mb(root: int, apart: Collection[int] = ()) -> float:
    """Proportional memory of ``root`` and its descendants (those under ``apart`` left out), in MB."""
    excluded = set(apart)
    for pid in apart:
        excluded.update(descendants(pid))
    total = 0
    for pid in [root, *descendants(root)]:
        if pid in excluded:
            continue
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        found = re.search(r"^Pss:\s+(\d+) kB", rollup, re.MULTILINE)
        total += int(found.group(1)) if found else 0
    return total / 1024


@dataclass(frozen=True)
class Measured:
    setting: Setting
    wall_s: float
    episodes: int
    steps: int
    errors: int
    peak_mb: float
    cpu: CpuSplit
    delay_s: float
    run_id: str = ""

    @property
    def per_step(self) -> float:
        """Core-seconds of mmina's side per step."""
        return self.cpu.side() / max(1, self.steps)


@dataclass(frozen=True)
class World:
    """What the run talks to, in processes of their own: the web's browser arguments, the
    model's URL and the pids whose CPU is counted apart."""

    web_args: tuple[str, ...]
    model_url: str
    apart: dict[int, str]


def measure(store: Store, suite: Path, setting: Setting, world: World, delay: float) -> Measured:
    sampler, tree = Sampler(set(world.apart)), CpuTree(world.apart)
    settings = AgentSettings(model="bench-model", base_url=world.model_url)
    browser = BrowserConfig(extra_args=world.web_args)
    config = RecordConfig(
        tasks=str(suite),
        agent="openai",
        limit=setting.episodes,
        layout=setting.layout,
        agent_settings=settings,
        browser=browser,
        serve_fixture_web=False,
    )
    with tree.sampling(), sampler.sampling():
        started = time.perf_counter()
        summary = record_run(store, config)
        wall = time.perf_counter() - started
    split = tree.split
    split.seconds["mmina"] -= sampler.own_s
    [[steps]] = run_query(store, f"select count(*) from steps where run_id = '{summary.run_id}'").rows
    return Measured(
        setting,
        wall,
        len(summary.episodes),
        steps,
        summary.errors,
        sampler.peak_mb,
        split,
        delay,
        summary.run_id,
    )


@contextmanager
def world(tasks: list[Task], delay: float) -> Iterator[World]:
    """The fixture web and the model (answering after ``delay``), each in a process of its own."""
    with (
        in_own_process(serve_fixture_web) as web,
        in_own_process(serve_model, delay, [t.task_id for t in tasks]) as model,
    ):
        yield World(tuple(web.value), model.value, {model.pid: MODEL, web.pid: WEB})


def epoch_section(root: Path, quick: bool, log: Callable[[str], None]) -> Section:
    suite_tasks = load_suite().tasks
    kinds = {SHORT: short_tasks(suite_tasks), LONG: long_tasks(suite_tasks)}
    settings_list = QUICK if quick else FULL
    delay = DELAY_S / 10 if quick else DELAY_S
    suites = {
        kind: write_clones(
            root / "tasks", tasks, max(s.episodes for s in settings_list if s.tasks == kind), kind
        )
        for kind, tasks in kinds.items()
    }
    store = Store.open(root / "store", create=True)
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    results: list[Measured] = []
    with world([*kinds[SHORT], *kinds[LONG]], delay) as here:
        for setting in settings_list:
            log(f"epoch: {setting.episodes} episodes, {setting.label} (model answers after {delay:g} s)")
            results.append(measure(store, suites[setting.tasks], setting, here, delay))
        split_up = _layers(store, results, here, delay, root, log)
        urls = [u for t in kinds[SHORT] for u in t.start_urls]
        waiting = _waiting(here, urls, QUICK_WAITING if quick else WAITING, log)
        log("epoch: one episode's work by Chromium alone, by Playwright, by mmina (floors)")
        under = floors(here.web_args, *(QUICK_FLOORS if quick else FLOORS))
    section = _section(results, delay, waiting)
    _floor_figures(section, under)
    _against_floor(section, results, under["Chromium"]["total"])
    _layer_figures(section, *split_up)
    _ideal_budgets(section, split_up[0], results[0])
    return section


def _layers(
    store: Store, results: list[Measured], here: World, delay: float, root: Path, log: Callable[[str], None]
) -> tuple[Measured, dict[str, CpuSplit]]:
    """The episodes of the run the epoch is projected from, done again with less of mmina
    (``bench/layers.py``)."""
    result = projected_from(results)
    log(
        f"epoch: the episodes of {result.setting.label} again, by a bare Playwright harness (gotos, then "
        "actions) and by the recorder alone (layers)"
    )
    episodes = recorded(store, result.run_id)
    folder = root / "layers"
    folder.mkdir(exist_ok=True)
    return result, layers(episodes, here.web_args, here.apart, result.setting.in_flight, delay, folder)


def _layer_figures(section: Section, result: Measured, split_up: dict[str, CpuSplit]) -> None:
    """Core-seconds per step of the run's episodes done by less of mmina, and what each layer adds."""
    steps = max(1, result.steps)
    totals = {**{name: split.side() / steps for name, split in split_up.items()}, WHOLE: result.per_step}
    for name, split in split_up.items():
        kinds = ", ".join(
            f"{k} {split.seconds.get(k, 0.0) / steps:.3f}"
            for k in KINDS
            if split.seconds.get(k, 0.0) > 0.0005 * steps
        )
        section.add(
            f"{result.setting.label}, the same episodes: {name}",
            round(totals[name], 3),
            "core-s per step",
            note=f"{kinds}; {split.wall_s:.0f} s",
        )
    for upper, lower in (
        (WHOLE, ACTIONS),
        (ACTIONS, GOTOS),
        (GOTOS, BARE),
        (BARE_ACTIONS, BARE),
        (ACTIONS, BARE_ACTIONS),
    ):
        section.add(
            f"layers: {upper} / {lower}",
            round(ratio(totals[upper], totals[lower]), 2),
            "×",
            note=f"{totals[upper] - totals[lower]:.3f} core-s per step added",
        )


def _ideal_budgets(section: Section, result: Measured, base: Measured) -> None:
    """The core-seconds a step may cost for ``result``'s run to reach ``IDEAL_SHARE`` of its ideal,
    with the machine's cores as busy with the run's work as they were: by the speedup over
    ``base`` (1 in flight; the target above) and by the ideal of ``in flight / model delay``
    steps a second. What the layers compare with."""
    cores, busy = os.cpu_count() or 1, result.cpu.busy()
    needed = {
        "speedup over 1 in flight": IDEAL_SHARE * result.setting.in_flight * base.steps / base.wall_s,
        "ideal / measured time": IDEAL_SHARE * result.setting.in_flight / result.delay_s,
    }
    for name, steps_per_s in needed.items():
        section.add(
            f"{result.setting.label}: core-s per step that {IDEAL_SHARE:g} of ideal allows ({name})",
            round(cores * busy / steps_per_s, 3),
            "core-s per step",
            note=f"{steps_per_s:.1f} steps/s on {cores} cores {busy:.0%} busy with the run's work",
        )


Waiting = dict[str, dict[str, float]]
"""Cores per waiting episode by kind (and ``total``), for each kind of page waited on."""


def _waiting(here: World, urls: list[str], setting: tuple[int, float], log: Callable[[str], None]) -> Waiting:
    """Episodes waiting on the fixture web's pages, and on an animated page frozen and running."""
    in_flight, wait_s = setting
    config = BrowserConfig(extra_args=here.web_args)
    found: Waiting = {}
    for name, pages, freeze in (
        ("fixture pages", urls, True),
        ("an animated page, frozen", [ANIMATED], True),
        ("an animated page, running", [ANIMATED], False),
    ):
        log(f"epoch: {in_flight} episodes waiting {wait_s:g} s on {name}")
        split = waiting_split(config, pages, in_flight, wait_s, here.apart, freeze)
        found[name] = per_episode_second(split, in_flight, wait_s, KINDS)
    return found


def _section(results: list[Measured], delay: float, waiting: Waiting) -> Section:
    section = Section("epoch")
    base = results[0]
    for result in results:
        label, setting = result.setting.label, result.setting
        rate = result.episodes / result.wall_s * 60
        ideal = result.steps * delay / setting.in_flight
        section.add(
            f"{label}: episodes/min",
            round(rate, 1),
            "/min",
            note=f"{result.episodes} episodes, {result.steps} steps, {result.errors} errors, "
            f"{result.wall_s:.0f} s",
        )
        section.add(
            f"{label}: ideal / measured time",
            round(ratio(ideal, result.wall_s), 2),
            "×",
            note=f"ideal {ideal:.0f} s = steps × {delay:g} s / {setting.in_flight} in flight",
        )
        if setting.in_flight > base.setting.in_flight:
            _speedup(section, result, base)
        _cpu_figures(section, result)
        if setting.in_flight > base.setting.in_flight:
            extra = (result.peak_mb - base.peak_mb) / (setting.in_flight - base.setting.in_flight)
            target = Target(70) if setting.in_flight == 32 else None
            section.add(
                f"{label}: memory per episode in flight beyond the first",
                round(extra, 1),
                "MB",
                target,
                note=f"peak {result.peak_mb:.0f} MB (PSS of mmina, browsers, drivers)",
            )
    per_wait = _waiting_figures(section, waiting)
    _projection(section, results, per_wait)
    _previous_release(section, projected_from(results, SHORT))
    _ray_vs_local(section, results)
    return section


def _cpu_figures(section: Section, result: Measured) -> None:
    """Core-seconds per step of mmina's side, in all and by process kind; the model server's and
    the web's apart (a real epoch has neither on its machine)."""
    label, steps, split = result.setting.label, max(1, result.steps), result.cpu
    target = Target(PER_STEP_TARGET) if result.setting.in_flight == 32 and result.delay_s == DELAY_S else None
    kinds = ", ".join(
        f"{k} {split.seconds.get(k, 0.0) / steps:.3f}"
        for k in KINDS
        if split.seconds.get(k, 0.0) > 0.0005 * steps
    )
    section.add(
        f"{label}: core-seconds per step (mmina's side)",
        round(result.per_step, 3),
        "core-s",
        target,
        note=f"{kinds}; apart: model server {split.seconds.get(MODEL, 0.0) / steps:.3f}, "
        f"web {split.seconds.get(WEB, 0.0) / steps:.3f}; mmina's side used "
        f"{split.busy():.0%} of the machine's cores",
    )


def _waiting_figures(section: Section, waiting: Waiting) -> float:
    """Cores per episode waiting on its model (core-seconds per second of waiting), by kind."""
    for name, shares in waiting.items():
        target = Target(WAIT_TARGET) if name == "fixture pages" else None
        kinds = ", ".join(f"{k} {shares[k]:.4f}" for k in KINDS if shares[k] >= 0.00005)
        section.add(
            f"an episode waiting on its model, {name}",
            round(shares["total"], 4),
            "cores",
            target,
            note=f"core-seconds per second of waiting: {kinds or 'none'}",
        )
    return max(0.0, waiting["fixture pages"]["total"])


def _floor_figures(section: Section, under: dict[str, Floor]) -> None:
    """Core-seconds per step of one episode's work done one episode at a time, layer by layer
    (``bench/floors.py``): what the pages cost, with screenshots, through Playwright, through mmina."""
    for name, floor in under.items():
        kinds = ", ".join(f"{k} {floor[k]:.3f}" for k in KINDS if floor[k] >= 0.0005)
        section.add(
            f"floor, one episode at a time: {name}", round(floor["total"], 3), "core-s per step", note=kinds
        )
    ratios = [("mmina", "Playwright"), ("Playwright", "Chromium"), ("Chromium", "Chromium, no screenshots")]
    for upper, lower in ratios:
        section.add(
            f"floor: {upper} / {lower}",
            round(ratio(under[upper]["total"], under[lower]["total"]), 2),
            "×",
            note=f"{under[upper]['total'] - under[lower]['total']:.3f} core-s per step added by {upper}",
        )


def _against_floor(section: Section, results: list[Measured], chromium: float) -> None:
    """A step at 32 in flight as a multiple of the same run's Chromium-alone floor: how many bare
    Chromium steps (page and screenshot, no harness, one at a time) one of mmina's costs, both
    measured on the machine as it was during the run."""
    for tasks in (SHORT, LONG):
        result = projected_from(results, tasks)
        if result.setting.tasks == tasks:
            times = round(ratio(result.per_step, chromium), 2)
            section.add(
                f"{result.setting.label}: a step / the Chromium floor",
                times,
                "×",
                note=f"{result.per_step:.3f} core-s at {result.setting.in_flight} in flight over "
                f"{chromium:.3f} for Chromium alone, one episode at a time, in the same run",
            )


def _projection(section: Section, results: list[Measured], per_wait: float) -> None:
    """A 1,050-task × 10-step epoch with a 5 s model on this machine's cores, with enough episodes
    in flight to keep them busy: each step costs what it cost at 32 in flight in one worker (on
    the MMInA-length tasks where they ran, whose steps are as many as an MMInA task's; else the
    most in flight measured) less its own waiting, plus 5 s of waiting."""
    result = projected_from(results)
    active = result.per_step - per_wait * result.delay_s
    per_step = active + per_wait * EPOCH_MODEL_S
    cores = os.cpu_count() or 1
    seconds = EPOCH_STEPS * per_step / cores
    in_flight = (
        EPOCH_STEPS
        / seconds
        * (EPOCH_MODEL_S + result.wall_s * result.setting.in_flight / result.steps - result.delay_s)
    )
    section.add(
        "projected epoch: 1,050 tasks × 10 steps, 5 s model",
        round(seconds / 60, 1),
        "min",
        Target(20),
        note=f"{per_step:.3f} core-s per step ({active:.3f} acting + 5 s × {per_wait:.4f} waiting) × "
        f"{EPOCH_STEPS:,} steps / {cores} cores (from {result.setting.label}); needs ≈ "
        f"{in_flight:.0f} episodes in flight",
    )


def _previous_release(section: Section, result: Measured) -> None:
    """The core-seconds per step against the previous release's, on the tasks it was measured on
    (the short ones at 32 in flight)."""
    previous = previous_release()
    everything = result.cpu.side() + result.cpu.seconds.get(MODEL, 0.0) + result.cpu.seconds.get(WEB, 0.0)
    section.add(
        "core-seconds per step, everything, / previous release",
        round(ratio(everything / max(1, result.steps), previous["per_step"]), 2),
        "×",
        note=f"{everything / max(1, result.steps):.3f} now (model server and web included, as the previous "
        f"release's whole-machine figure) vs {previous['per_step']} at {previous['version']}",
    )


def projected_from(results: list[Measured], tasks: str = LONG) -> Measured:
    """The run at 32 in flight in one worker on ``tasks`` (else on the other kind, else the most
    in flight measured): where the projection takes its cost per step from (see :func:`_projection`)."""
    local = [r for r in results if r.setting.workers == 1]
    at_32 = sorted((r for r in local if r.setting.in_flight == 32), key=lambda r: r.setting.tasks != tasks)
    return at_32[0] if at_32 else max(local, key=lambda r: (r.setting.in_flight, r.setting.tasks == tasks))


def _speedup(section: Section, result: Measured, base: Measured) -> None:
    """Steps per second over those of ``base`` (1 in flight), as a share of the ideal speedup
    (the number in flight): 1.0 when nothing but the model's waiting limits it."""
    speedup = ratio(result.steps / result.wall_s, base.steps / base.wall_s)
    share = speedup * base.setting.in_flight / result.setting.in_flight
    section.add(  # no target: "32 in flight ≥ 0.7 of ideal" is retired (docs/performance.md)
        f"{result.setting.label}: speedup over 1 in flight / ideal",
        round(share, 2),
        "×",
        note=f"{speedup:.1f}× the steps/s of 1 in flight, ideal {result.setting.in_flight}×",
    )


def _ray_vs_local(section: Section, results: list[Measured]) -> None:
    """Ray's episodes/min against the local executor at the same workers × concurrency."""
    for ray_result in (r for r in results if r.setting.executor == "ray"):
        local = next(
            (
                r
                for r in results
                if r.setting.executor == "local"
                and (r.setting.workers, r.setting.concurrency)
                == (ray_result.setting.workers, ray_result.setting.concurrency)
            ),
            None,
        )
        if local is not None:
            section.add(
                "Ray / local at the same concurrency",
                round(ratio(local.wall_s, ray_result.wall_s), 2),
                "×",
                Target(0.85, AT_LEAST),
                note="episodes/min of Ray over the local executor's",
            )
