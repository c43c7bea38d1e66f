"""Rankings that survive replay: four agents of clearly different skill on the live fixture web,
which has drifted since the archive was made, and on that archive.

The reference is the oracle recorded at drift 0; its archive is the frozen web. Each agent — the
oracle, two noisy oracles (each step of the script dropped with probability 0.2 and 0.5,
seeded) and the heuristic baseline — runs the same tasks live at drift ``DRIFT`` (``record
--drift``) and on the archive (``replay --agent``). ``mmina rankings`` then gives each agent's
task SR both ways and Kendall's tau of the two rankings; the table is printed and the figures
kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bench.results import Section
from mmina.agents.settings import AgentSettings
from mmina.analysis.replay_ranking import RankingShift, replay_rankings
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.replayer.replays import replay_agent
from mmina.store import Store
from mmina.tasks.budget import Limits

TASKS = (
    "normal/1",
    "normal/2",
    "normal/3",
    "normal/4",
    "normal/5",
    "shopping/1",
    "shopping/2",
    "compare/1",
    "compare/2",
    "wikipedia/1",
)
DRIFT = 2
AGENTS = {
    "oracle": ("oracle", 0.0),
    "noisy-0.2": ("oracle", 0.2),
    "noisy-0.5": ("oracle", 0.5),
    "heuristic": ("heuristic", 0.0),
}
"""Name -> (agent, error rate): clearly different skill, best first as designed."""
BROWSER = BrowserConfig(screenshots=False, set_of_marks=False)
LIMITS = Limits(max_steps=12)


def rankings_section(work: Path, log: Callable[[str], None], quick: bool = False) -> Section:
    section = Section("rankings")
    store = Store.open(work / "store", create=True)
    tasks = TASKS[:4] if quick else TASKS
    started = time.perf_counter()
    log(f"the reference: the oracle on {len(tasks)} tasks at drift 0 (its archive is the frozen web)")
    reference = _record(store, "oracle", 0.0, tasks, 0, "reference")
    pairs = []
    for name, (agent, error_rate) in AGENTS.items():
        log(f"{name}: live at drift {DRIFT}, then on the archive")
        live = _record(store, agent, error_rate, tasks, DRIFT, f"{name}-live")
        settings = AgentSettings(error_rate=error_rate, seed=7)
        archived = replay_agent(
            store,
            agent,
            reference,
            settings=settings,
            limits=LIMITS,
            browser=BROWSER,
            new_run=f"{name}-archived",
        ).replay_run
        pairs.append((live, archived))
    shift = replay_rankings(store, pairs)
    _add(section, shift, time.perf_counter() - started, len(tasks))
    return section


def _record(
    store: Store, agent: str, error_rate: float, tasks: tuple[str, ...], drift: int, run_id: str
) -> str:
    config = RecordConfig(
        task_ids=tasks,
        agent=agent,
        run_id=run_id,
        drift=drift,
        browser=BROWSER,
        limits=LIMITS,
        agent_settings=replace(AgentSettings(), error_rate=error_rate, seed=7),
    )
    return record_run(store, config).run_id


def _add(section: Section, shift: RankingShift, seconds: float, tasks: int) -> None:
    for agent, name in zip(shift.agents, AGENTS):
        section.add(
            f"{name}: task SR live / archived",
            f"{agent.live.rate:.0%} / {agent.archived.rate:.0%}",
            "",
            note=f"change {agent.change:+.0%} over {agent.live.tasks} tasks",
        )
    interval = (
        f" [{shift.low:.2f}, {shift.high:.2f}]" if shift.low is not None and shift.high is not None else ""
    )
    section.add(
        "Kendall's tau, live vs archived ranking",
        None if shift.tau is None else round(shift.tau, 2),
        "",
        note=f"95% bootstrap interval{interval}; same order: {'yes' if shift.same_order else 'no'}",
    )
    section.add(
        "time, 4 agents x 2 webs + the reference", round(seconds, 1), "s", note=f"{tasks} fixture tasks each"
    )
