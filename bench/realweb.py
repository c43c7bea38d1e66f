"""Replay fidelity on real web applications from PyPI (and one hand-written page set, ``shop``:
history navigation over HTTP/1.0 without cache headers): each application's episode recorded,
the application restarted with new random state, and replayed from the archive (see
``tests/realweb/``; the applications are installed on first use into ``.realweb/``).

Per application: the share of steps with URL and tree equal (target ≥ 99%), the connections
that reached the restarted application during the replay (target 0), the requests the archive
could not match (target 0), the matched requests whose recorded body is missing (target 0),
and the slowest step against its deadline (target ≤ 1).
"""
from __future__ import annotations

from pathlib import Path

from bench.results import AT_LEAST, Section, Target
from tests.realweb.apps import APPS, SAMPLE
from tests.realweb.check import Outcome, check


def realweb_section(root: Path, quick: bool = False) -> Section:
    """All the applications, or with ``quick`` the test suite's default sample."""
    section = Section("realweb")
    apps = tuple(a for a in APPS if a.name in SAMPLE) if quick else APPS
    for outcome in check(root, apps):
        _add(section, outcome)
    return section


def _add(section: Section, outcome: Outcome) -> None:
    replay, name = outcome.replay, outcome.app.name
    total = max(replay.recorded_steps, replay.replayed_steps)
    note = f"{outcome.app.kind}; {replay.url_equal}/{total} URL, {replay.tree_equal}/{total} tree"
    section.add(f"{name}: fidelity", round(100 * replay.fidelity, 1), "%", Target(99.0, AT_LEAST),
                note if replay.error is None else f"{note}; {replay.error}")
    section.add(f"{name}: connections reaching the live app during replay", outcome.live_connections, "", Target(0))
    section.add(f"{name}: unmatched requests", replay.requests.unmatched, "", Target(0),
                f"{replay.requests.total} requests: {replay.requests.exact} exact, {replay.requests.fuzzy} fuzzy, "
                f"{replay.requests.nearest} nearest")
    section.add(f"{name}: matched requests with a missing body", replay.requests.missing_body, "", Target(0),
                f"{replay.requests.failed} the router failed to answer")
    section.add(f"{name}: slowest step / its deadline", round(outcome.slowest_share, 3), "", Target(1.0),
                "observation or action, recorded or replayed")
