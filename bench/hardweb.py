"""Replay fidelity on the hard web: each behaviour recorded, the site restarted with new random
state, and replayed from the archive (see ``mmina.fixtures.hardweb``).

Per behaviour: the share of steps with URL and tree equal (target ≥ 99%), the requests that
reached the live site during the replay (target 0), and the slowest step against its deadline.
"""
from __future__ import annotations

from pathlib import Path

from mmina.fixtures.hardweb.check import Outcome, check
from mmina.recorder.browser import ACTION_DEADLINE_S, OBSERVE_DEADLINE_S

from bench.results import AT_LEAST, Section, Target


def hardweb_section(root: Path) -> Section:
    section = Section("hardweb")
    outcomes = check(root)
    for outcome in outcomes:
        replay = outcome.replay
        note = f"{replay.url_equal}/{replay.recorded_steps} URL, {replay.tree_equal}/{replay.recorded_steps} tree"
        section.add(f"{outcome.behaviour.name}: fidelity", round(100 * replay.fidelity, 1), "%",
                    Target(99.0, AT_LEAST), note if replay.error is None else f"{note}; {replay.error}")
    section.add("requests reaching the live site during replays", len({h for o in outcomes for h in o.live_hits}),
                "", Target(0))
    section.add("slowest step / its deadline", round(max(_deadline_share(o) for o in outcomes), 3), "",
                Target(1.0), "observation or action, recorded or replayed")
    return section


def _deadline_share(outcome: Outcome) -> float:
    steps = [*outcome.recorded, *outcome.replayed]
    return max(max((s["action_ms"] or 0) / (ACTION_DEADLINE_S * 1e3), s["observe_ms"] / (OBSERVE_DEADLINE_S * 1e3))
               for s in steps)
