"""Record each real application's episode, restart it with new random state, replay, and judge.

``check(folder, apps)`` is what ``tests/test_realweb_apps.py`` asserts on and what ``python -m
bench --only realweb`` prints: per application, the recorded and replayed steps, the replay's
fidelity report, the connections that reached the restarted application during the replay
(there must be none), and how long the recording and the replay took. The agent is the oracle
with a model's pace (``agents.ThinkingOracle``): it thinks before each action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mmina.fixtures.hardweb.check import deadline_share, rows_by_episode
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.har import HANDED_HEADER
from mmina.recorder.recording import RecordConfig, record_run
from mmina.replayer.fidelity import EpisodeFidelity
from mmina.replayer.replays import replay_run
from mmina.replayer.sockets import PAGE, parse_messages
from mmina.store import Store
from tests.realweb.apps import App, RunningApp, write_suite

AGENT = "tests.realweb.agents:ThinkingOracle"
LARGE_BODY = 256 * 1024
"""A body this large is one whose serving time a replay may stretch (a multi-MB bundle)."""
DRAWN_ID = re.compile(
    rb"(?<![0-9A-Za-z])(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    rb"|[0-9A-F]{32})(?![0-9A-Za-z])",
    re.IGNORECASE,
)
"""An id a page draws: a UUID (``crypto.randomUUID``, lumino's ``uuid4``) or 32 hex digits (NbClassic's)."""


@dataclass(frozen=True)
class BodyTime:
    """One large response: its URL and size, and how long its exchange took recorded and replayed (ms)."""

    url: str
    size: int
    recorded_ms: float
    replayed_ms: float
    handed_ms: float | None = None
    """When the replay began handing it over, in ms after its request started (``x-mmina-handed``):
    what the replayed exchange spent before that is holding (for the recorded pace, the timeline)."""

    @property
    def ratio(self) -> float:
        return self.replayed_ms / self.recorded_ms if self.recorded_ms > 0 else 0.0

    @property
    def handover_ms(self) -> float | None:
        """How long handing it over took, from the replay's beginning to the browser having it all
        (None: the replay's row does not say when it began)."""
        return None if self.handed_ms is None else max(0.0, self.replayed_ms - self.handed_ms)

    @property
    def beyond_ms(self) -> float | None:
        """How much longer the hand-over took than the recorded exchange (ms; negative: shorter)."""
        return None if self.handover_ms is None else self.handover_ms - self.recorded_ms


@dataclass(frozen=True)
class Outcome:
    """One application's record -> restart with new state -> replay."""

    app: App
    recorded: list[dict[str, Any]]
    replay: EpisodeFidelity
    replayed: list[dict[str, Any]]
    live_connections: int
    """Connections that reached the restarted application during the replay."""
    recorded_s: float
    replayed_s: float
    """How long the recorded and the replayed episode took (``episodes.duration_ms``)."""
    replayed_sockets: list[dict[str, Any]]
    """The replay run's own socket rows (``requests``), which it stores as a recording does."""
    bodies: tuple[BodyTime, ...] = ()
    """The largest response bodies (``LARGE_BODY`` bytes or more): how long each took, recorded and replayed."""
    ids: tuple[int, int] = (0, 0)
    """The ids the replayed page drew and sent on its sockets that its recording's page sent too, and all
    it sent (:func:`sent_ids`): how many of its draws came out as recorded."""

    @property
    def pace_ratio(self) -> float:
        """The replay's time over the recording's (a replay keeps the recorded pace, no slower)."""
        return self.replayed_s / self.recorded_s if self.recorded_s else 0.0

    @property
    def slowest_share(self) -> float:
        """The slowest observation or action, recorded or replayed, over its deadline."""
        return deadline_share([*self.recorded, *self.replayed])


def check(folder: Path, apps: tuple[App, ...]) -> list[Outcome]:
    """Every application in turn, each in a run of its own (its host name is its own)."""
    return [_check_one(folder / app.name, app) for app in apps]


def _check_one(folder: Path, app: App) -> Outcome:
    suite = write_suite(folder / "tasks", (app,))
    store = Store.open(folder / "store", create=True)
    with RunningApp(app, folder) as running:
        recorded = record_run(store, RecordConfig(tasks=str(suite), agent=AGENT, browser=_browser(running)))
        running.restart()
        report = replay_run(store, recorded.run_id, browser=_browser(running))
        live = running.connections
    steps = rows_by_episode(store.read("steps", run_id=recorded.run_id).to_pylist(), "step_index")
    replayed = rows_by_episode(store.read("steps", run_id=report.replay_run).to_pylist(), "step_index")
    fidelity = report.episodes[0]
    took = {
        r["episode_id"]: r["duration_ms"] / 1e3
        for run in (recorded.run_id, report.replay_run)
        for r in store.read("episodes", run_id=run, columns=["episode_id", "duration_ms"]).to_pylist()
    }
    requests = {
        run: store.read("requests", run_id=run).to_pylist() for run in (recorded.run_id, report.replay_run)
    }
    sockets = [r for r in requests[report.replay_run] if r["status"] == 101]
    return Outcome(
        app,
        steps.get(fidelity.source_episode, []),
        fidelity,
        replayed.get(fidelity.replay_episode, []),
        live,
        took[fidelity.source_episode],
        took[fidelity.replay_episode],
        sockets,
        large_bodies(requests[recorded.run_id], requests[report.replay_run]),
        _alike(sent_ids(store, requests[recorded.run_id]), sent_ids(store, requests[report.replay_run])),
    )


def sent_ids(store: Store, requests: list[dict[str, Any]]) -> set[bytes]:
    """The ids (:data:`DRAWN_ID`) a page drew and sent on its sockets: in a socket's query (Jupyter's
    ``session_id``) and in its own messages (a kernel message's ``msg_id`` and ``session``); the ids a
    server drew (a kernel's, in every URL) are left out."""
    sockets = [r for r in requests if r["status"] == 101 and r["response_body"]]
    blobs = store.read_blobs(sorted({r["response_body"] for r in sockets}))
    said = [urlsplit(r["url"]).query.encode() for r in sockets]
    for socket in sockets:
        said += [
            m.data if isinstance(m.data, bytes) else m.data.encode()
            for m in parse_messages(blobs.get(socket["response_body"], b""))
            if m.direction == PAGE
        ]
    return {found.lower() for text in said for found in DRAWN_ID.findall(text)}


def _alike(recorded: set[bytes], replayed: set[bytes]) -> tuple[int, int]:
    return len(replayed & recorded), len(replayed)


def large_bodies(recorded: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> tuple[BodyTime, ...]:
    """The large bodies of the recording (each URL's first), largest first, with the replay's time
    for the same URL and when the replay began handing it over (its row's ``x-mmina-handed``)."""
    served = {r["url"]: r for r in reversed(replayed)}
    large = {r["url"]: r for r in reversed(recorded) if (r["response_body_size"] or 0) >= LARGE_BODY}
    return tuple(
        BodyTime(url, r["response_body_size"], r["time_ms"], served[url]["time_ms"], handed_ms(served[url]))
        for url, r in sorted(large.items(), key=lambda item: -item[1]["response_body_size"])
        if url in served
    )


def handed_ms(row: dict[str, Any]) -> float | None:
    """When a replay's router began handing a request's response over, in ms after the request
    started (its ``x-mmina-handed`` header; None: the row has none)."""
    value = next((h["value"] for h in row.get("response_headers") or () if h["name"] == HANDED_HEADER), None)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _browser(running: RunningApp) -> BrowserConfig:
    return BrowserConfig(extra_args=tuple(running.chromium_args()))
