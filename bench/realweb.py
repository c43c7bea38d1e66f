"""Replay fidelity on real web applications from PyPI and npm (and one hand-written page set,
``shop``: history navigation over HTTP/1.0 without cache headers): each application's episode
recorded by a scripted agent that thinks before each action, the application restarted with new
random state, and the episode replayed from the archive (see ``tests/realweb/``; the
applications are installed on first use into the real-web cache).

``MMINA_REALWEB=jupyter,livedocs`` runs only the applications named; ``MMINA_REALWEB_SEEDING=1``
records with the old seeding scheme (one random stream per document, ``mmina.recorder.seeding``) to
compare it with today's, a stream per calling place (the figure "drawn ids sent as recorded").
Each application runs ``RUNS`` times (the quick bench: the test suite's sample, once), each run a
new recording and its replay, under whatever load the machine has; the worst run is printed. Per
application: the share of steps with URL and tree equal (target ≥ 99%, every run listed), the
connections that reached the restarted application during the replay (target 0), the requests
the archive could not match (target 0), the matched requests whose recorded body is missing
(target 0), the matched requests served a body that redaction changed
(target 0), the socket messages the replay repeated, the replay's wall time over the
recording's (the recording's time is kept: 1 plus where it stood still, target ≤ 1.5), the
slowest step against its deadline (target ≤ 1), the largest body's exchange time replayed
against recorded (no target: it includes the wait for the body's recorded arrival on the timeline),
and the large bodies' hand-over alone: from the moment the replay began handing a body over (after
any hold; the replayed row's ``x-mmina-handed``) to the browser having it all, less the body's
recorded exchange time, for the body of each run furthest beyond it (target ≤
``HANDOVER_MARGIN_MS``).
Then ``bench.delivery``: a 6 MB script delivered by a replay against the live server that sent
it (target ≤ 1.2).

Beside them, ``standing`` (also alone: ``--only standing``): a step on a page whose long-poll and
SharedWorker never end, against a step on the same pages without them (the oracle,
``STANDING_EPISODES`` episodes each; target: within 10%).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from bench.delivery import add_delivery
from bench.results import AT_LEAST, Section, Target
from mmina.recorder import seeding
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from tests.realweb.apps import APPS, SAMPLE, App
from tests.realweb.check import BodyTime, Outcome, check
from tests.realweb.standing_site import StandingSite

RUNS = 5
HANDOVER_MARGIN_MS = 50.0
"""A large body is handed over in no more than its recorded exchange's time and this."""
STANDING_EPISODES = 5
PACE_BOUND = 1.5
"""A replay in the recording's time takes the recording's time plus where it stood still (the
archive or the page slower than live); half as long again is the most we accept."""


def realweb_section(root: Path, quick: bool = False, delivery: bool = True, standing: bool = True) -> Section:
    """All the applications ``RUNS`` times each, or with ``quick`` the test suite's sample once;
    then, for all of them (or the sample), with ``standing`` the never-ending requests' figure and,
    with ``delivery``, ``bench.delivery`` (``--only standing`` and ``--only delivery`` run them alone)."""
    apps = chosen_apps(quick)
    section = Section("realweb", partial=apps != APPS and not quick)
    seeding.RECORDED_SEEDING = int(os.environ.get("MMINA_REALWEB_SEEDING") or seeding.RECORDED_SEEDING)
    for app in apps:
        _add(section, [_run(root / f"run-{number}", app) for number in range(1 if quick else RUNS)])
    if quick or apps == APPS:  # applications named: only theirs
        if standing:
            _add_standing(section, root / "standing", 1 if quick else STANDING_EPISODES)
        if delivery:
            add_delivery(section)
    return section


def chosen_apps(quick: bool = False) -> tuple[App, ...]:
    """The applications named in ``MMINA_REALWEB`` (``jupyter,livedocs``; ``all`` or unset: every
    one), or with ``quick`` the test suite's sample."""
    named = os.environ.get("MMINA_REALWEB", "")
    if quick:
        return tuple(a for a in APPS if a.name in SAMPLE)
    if named and named != "all":
        unknown = set(named.split(",")) - {a.name for a in APPS}
        if unknown:
            raise ValueError(
                f"MMINA_REALWEB names no application {', '.join(sorted(unknown))} "
                f"(there are: {', '.join(a.name for a in APPS)})"
            )
        return tuple(a for a in APPS if a.name in named.split(","))
    return APPS


def _run(folder: Path, app: App) -> Outcome:
    return check(folder, (app,))[0]


def _add(section: Section, runs: list[Outcome]) -> None:
    worst = min(runs, key=lambda o: (o.replay.fidelity, -o.replay.requests.unmatched, -o.live_connections))
    replay, name = worst.replay, worst.app.name
    total = max(replay.recorded_steps, replay.replayed_steps)
    each = ", ".join(f"{100 * o.replay.fidelity:.0f}" for o in runs)
    note = (
        f"{worst.app.kind}; worst of {len(runs)} run(s) ({each} %): {replay.url_equal}/{total} URL, "
        f"{replay.tree_equal}/{total} tree"
    )
    section.add(
        f"{name}: fidelity",
        round(100 * replay.fidelity, 1),
        "%",
        Target(99.0, AT_LEAST),
        note if replay.error is None else f"{note}; {replay.error}",
    )
    section.add(
        f"{name}: connections reaching the live app during replay",
        max(o.live_connections for o in runs),
        "",
        Target(0),
        "most of any run",
    )
    section.add(
        f"{name}: unmatched requests",
        max(o.replay.requests.unmatched for o in runs),
        "",
        Target(0),
        f"worst run: {replay.requests.total} requests: {replay.requests.exact} exact, "
        f"{replay.requests.fuzzy} fuzzy, {replay.requests.nearest} nearest",
    )
    section.add(
        f"{name}: matched requests with a missing body",
        max(o.replay.requests.missing_body for o in runs),
        "",
        Target(0),
        f"{replay.requests.failed} the router failed to answer (worst run)",
    )
    section.add(
        f"{name}: matched requests served a body redaction changed",
        max(o.replay.requests.redacted_body for o in runs),
        "",
        Target(0),
        "most of any run",
    )
    _add_sockets(section, name, runs)
    ratios = [o.pace_ratio for o in runs]
    section.add(
        f"{name}: replay time / recording time",
        round(max(ratios), 2),
        "",
        Target(PACE_BOUND),
        "the recording's time kept (1, plus where τ stood still); each run: "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + f" (recording {min(o.recorded_s for o in runs):.0f}–{max(o.recorded_s for o in runs):.0f} s)",
    )
    section.add(
        f"{name}: slowest step / its deadline",
        round(max(o.slowest_share for o in runs), 3),
        "",
        Target(1.0),
        "observation or action, recorded or replayed, any run",
    )
    _add_bodies(section, name, runs)
    add_handover(section, name, [o.bodies for o in runs])


def add_handover(section: Section, name: str, runs: list[tuple[BodyTime, ...]]) -> None:
    """The large bodies' hand-over against their recorded exchange (applications with one): in
    each run, of every body of ``LARGE_BODY`` bytes or more whose replay says when it began handing
    it over, the one that took longest beyond its recorded time; the worst run's is the figure."""
    worst = [
        max(told, key=lambda b: b.beyond_ms or 0.0) for told in (_told(bodies) for bodies in runs) if told
    ]
    if not worst:
        return
    body = max(worst, key=lambda b: b.beyond_ms or 0.0)
    assert body.handover_ms is not None and body.handed_ms is not None and body.beyond_ms is not None
    section.add(
        f"{name}: large bodies' hand-over beyond their recorded exchange",
        round(body.beyond_ms),
        "ms",
        Target(HANDOVER_MARGIN_MS),
        f"worst: {body.size / 1e6:.1f} MB {body.url.rsplit('/', 1)[-1][:40]} handed over in "
        f"{body.handover_ms:.0f} ms against {body.recorded_ms:.0f} ms recorded (held {body.handed_ms:.0f} ms "
        "before); each run's worst, handed over / recorded: "
        + ", ".join(f"{b.handover_ms:.0f}/{b.recorded_ms:.0f}" for b in worst)
        + f" ms, of up to {max(len(_told(bodies)) for bodies in runs)} large bodies a run (the hand-over: "
        "from the replay beginning to hand a body over, after any hold, to the browser having it all)",
    )


def _told(bodies: tuple[BodyTime, ...]) -> list[BodyTime]:
    """The bodies whose replayed row says when the replay began handing them over."""
    return [b for b in bodies if b.handover_ms is not None]


def _add_bodies(section: Section, name: str, runs: list[Outcome]) -> None:
    """The largest body's time served over its recorded time, worst run (applications with one)."""
    largest = [o.bodies[0] for o in runs if o.bodies]
    if not largest:
        return
    worst = max(largest, key=lambda b: b.ratio)
    section.add(
        f"{name}: largest body's exchange, replayed / recorded time",
        round(worst.ratio, 2),
        "",
        None,
        f"{worst.size / 1e6:.1f} MB {worst.url.rsplit('/', 1)[-1][:40]}: {worst.replayed_ms:.0f} ms replayed, "
        f"{worst.recorded_ms:.0f} ms recorded; each run: "
        + ", ".join(f"{b.ratio:.2f}" for b in largest)
        + " (no target: a body is held until τ reaches its recorded arrival, so a page that asked earlier "
        "than recorded waits by design; the hand-over alone is the next figure)",
    )


def standing_section(root: Path, quick: bool = False) -> Section:
    """``python -m bench --only standing``: the never-ending requests' figure alone, in the
    ``realweb`` section it belongs to (it replaces only itself in ``results.json``)."""
    section = Section("realweb", partial=True)
    _add_standing(section, root, 1 if quick else STANDING_EPISODES)
    return section


def _add_standing(section: Section, folder: Path, episodes: int) -> None:
    """A step's action and settling with requests that never end, over the same without them."""
    costs = {
        never: _step_ms(folder / ("never-ending" if never else "plain"), never, episodes)
        for never in (True, False)
    }
    section.add(
        "standing: a step beside requests that never end / without",
        round(costs[True] / costs[False], 2),
        "",
        Target(1.1),
        f"median action and settling {costs[True]:.0f} ms against {costs[False]:.0f} ms "
        f"(a long-poll never answered and a SharedWorker; {episodes} episode(s) of 3 steps each)",
    )


def _step_ms(folder: Path, never_ending: bool, episodes: int) -> float:
    store = Store.open(folder / "store", create=True)
    with StandingSite(never_ending) as site:
        summary = record_run(
            store,
            RecordConfig(
                tasks=str(site.suite(folder / "tasks", episodes)),
                agent="oracle",
                browser=BrowserConfig(screenshots=False, set_of_marks=False),
            ),
        )
    steps = store.read("steps", run_id=summary.run_id, columns=["action_ms", "action"]).to_pylist()
    return statistics.median(
        s["action_ms"] for s in steps if s["action_ms"] is not None and "stop" not in (s["action"] or "")
    )


def _add_sockets(section: Section, name: str, runs: list[Outcome]) -> None:
    """The socket messages repeated as recorded, in the worst run (applications with sockets)."""
    counts = [
        (sum(s.equal for s in o.replay.sockets), sum(s.recorded for s in o.replay.sockets)) for o in runs
    ]
    if not any(recorded for _equal, recorded in counts):
        return
    equal, recorded = min(counts, key=lambda c: c[0] / c[1] if c[1] else 1.0)
    section.add(
        f"{name}: socket messages repeated",
        round(100 * equal / recorded, 1) if recorded else 100.0,
        "%",
        None,
        f"worst run: {equal} of {recorded} recorded messages, in order, both directions",
    )
    _add_ids(section, name, runs)


def _add_ids(section: Section, name: str, runs: list[Outcome]) -> None:
    """The ids the replayed page drew as its recording did, worst run (pages sending drawn ids on sockets)."""
    if not any(total for _alike, total in (o.ids for o in runs)):
        return
    alike, total = min((o.ids for o in runs), key=lambda c: c[0] / c[1] if c[1] else 1.0)
    section.add(
        f"{name}: drawn ids sent as recorded",
        round(100 * alike / total, 1),
        "%",
        None,
        f"worst run: {alike} of {total} ids the page drew and sent on its sockets; each run: "
        + ", ".join(f"{a}/{t}" for a, t in (o.ids for o in runs))
        + " (episodes.random_seeding decides)",
    )
