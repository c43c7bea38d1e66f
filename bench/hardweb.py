"""Replay fidelity on the hard web: each behaviour recorded, the site restarted with new random
state, and replayed from the archive (see ``mmina.fixtures.hardweb``).

Per behaviour: the share of steps with URL and tree equal (target ≥ 99%), the requests that
reached the live site during the replay (target 0), and the slowest step against its deadline.
"""

from __future__ import annotations

from pathlib import Path

from bench.results import AT_LEAST, Section, Target
from mmina.fixtures.hardweb.check import check, deadline_share


def hardweb_section(root: Path) -> Section:
    section = Section("hardweb")
    outcomes = check(root)
    for outcome in outcomes:
        replay = outcome.replay
        note = f"{replay.url_equal}/{replay.recorded_steps} URL, {replay.tree_equal}/{replay.recorded_steps} tree"
        section.add(
            f"{outcome.behaviour.name}: fidelity",
            round(100 * replay.fidelity, 1),
            "%",
            Target(99.0, AT_LEAST),
            note if replay.error is None else f"{note}; {replay.error}",
        )
    section.add(
        "requests reaching the live site during replays",
        len({h for o in outcomes for h in o.live_hits}),
        "",
        Target(0),
    )
    slowest = max(deadline_share([*o.recorded, *o.replayed]) for o in outcomes)
    section.add(
        "slowest step / its deadline",
        round(slowest, 3),
        "",
        Target(1.0),
        "observation or action, recorded or replayed",
    )
    return section
