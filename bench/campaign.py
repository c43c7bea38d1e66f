"""A campaign that finishes: an epoch-sized run of short tasks through mmina's worker layer and
model client, once without faults and once with them, side by side (issue 53).

Each task is three model calls to the local OpenAI-compatible server (50 ms each) through
:class:`mmina.models.model_client.ModelClient` with an endpoint patience, made by worker processes of
:func:`mmina.executors.spread.spread` (2 processes × 16 in flight), and "committed" as a file created once
(``O_EXCL``: a task done twice is counted, never hidden). No browser: what is measured is the
campaign's machinery — holding calls through faults, adapting to rate limits, redoing a lost
worker's tasks — not a step's CPU (that is ``--only epoch``).

The faulty run meets, at once: a server that serves 24 requests at a time and answers 429
(``Retry-After: 1``) beyond; the endpoint refusing connections for ``OUTAGE_S`` once a third of
the tasks are done; one worker process killed (SIGKILL, with what it had in flight) once half
are done. Printed: tasks per hour of both runs, the faulty run's overhead beyond the outage
itself, retries and seconds waited, and the tasks committed (target: every one exactly once).
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.results import AT_LEAST, Section, Target
from mmina.executors.interface import Layout
from mmina.executors.spread import spread
from mmina.models.model_client import Deadlines, ModelClient
from tests.agents_for_tests import descendants
from tests.fake_openai import FakeOpenAI

TASKS, QUICK_TASKS = 1_000, 200
OUTAGE_S, QUICK_OUTAGE_S = 30.0, 5.0
CALLS = 3
LAYOUT = Layout(workers=2, concurrency=16)
SERVES_AT_ONCE = 24


@dataclass(frozen=True)
class Outcome:
    seconds: float
    committed: int
    twice: int
    retries: int
    waited_s: float


class CampaignJob:
    """One worker process's job: a task is ``CALLS`` model calls, then its file created once."""

    def __init__(self, url: str, folder: str) -> None:
        self.client = ModelClient(url, Deadlines(call_s=30, max_retries=2, patience_s=600))
        self.folder = Path(folder)

    def work(self, task: int) -> tuple[int, float, bool]:
        retries, waited = 0, 0.0
        for _ in range(CALLS):
            reply = self.client.complete(
                model="m", messages=[{"role": "user", "content": f"task {task}"}], max_tokens=8
            )
            retries, waited = retries + reply.retries, waited + reply.waited_s
        try:
            os.close(os.open(self.folder / str(task), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return retries, waited, True
        except FileExistsError:
            return retries, waited, False

    def close(self) -> None:
        pass


def _campaign(tasks: int, faults: bool, outage_s: float) -> Outcome:
    folder = Path(tempfile.mkdtemp(prefix="mmina-campaign-"))
    with FakeOpenAI(
        delay_s=0.05, keep_requests=False, serves_at_once=SERVES_AT_ONCE if faults else None
    ) as server:
        done = [0]
        if faults:
            _at(lambda: done[0] >= tasks // 3, lambda: _outage(server, outage_s))
            _at(lambda: done[0] >= tasks // 2, _kill_a_worker)
        started = time.perf_counter()
        retries, waited, twice = 0, 0.0, 0
        for _task, (tried, held, first) in spread(
            partial(CampaignJob, server.url, str(folder)),
            list(range(tasks)),
            LAYOUT,
            settled=lambda task: (folder / str(task)).exists(),
        ):
            done[0] += 1
            retries, waited, twice = retries + tried, waited + held, twice + (not first)
        seconds = time.perf_counter() - started
    return Outcome(seconds, len(list(folder.iterdir())), twice, retries, waited)


def _at(condition: Callable[[], bool], then: Callable[[], None]) -> None:
    """``then()`` on a thread once ``condition()`` holds."""

    def run() -> None:
        while not condition():
            time.sleep(0.05)
        then()

    threading.Thread(target=run, daemon=True).start()


def _outage(server: FakeOpenAI, seconds: float) -> None:
    server.go_down()
    time.sleep(seconds)
    server.come_back()


def _kill_a_worker() -> None:
    """SIGKILL one of this process's worker processes (``multiprocessing`` spawned)."""
    for pid in descendants(os.getpid()):
        try:
            spawned = b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if spawned:
            os.kill(pid, signal.SIGKILL)
            return


def campaign_section(quick: bool = False) -> Section:
    tasks, outage_s = (QUICK_TASKS, QUICK_OUTAGE_S) if quick else (TASKS, OUTAGE_S)
    os.environ.setdefault("OPENAI_API_KEY", "sk-local-bench-key")  # the local server takes any key
    clean, faulty = _campaign(tasks, False, outage_s), _campaign(tasks, True, outage_s)
    section = Section("campaign")
    per_hour = lambda outcome: tasks / outcome.seconds * 3600  # noqa: E731
    section.add(
        "tasks committed exactly once, with faults",
        faulty.committed - faulty.twice,
        "",
        Target(tasks, AT_LEAST),
        f"of {tasks}; {faulty.twice} done twice; fault-free: {clean.committed}",
    )
    section.add(
        "tasks per hour, fault-free",
        round(per_hour(clean)),
        "/h",
        None,
        f"{tasks} tasks of {CALLS} model calls, {LAYOUT.workers} processes × {LAYOUT.concurrency} in flight",
    )
    section.add(
        "tasks per hour, with faults",
        round(per_hour(faulty)),
        "/h",
        None,
        f"429s beyond {SERVES_AT_ONCE} at once, the endpoint down {outage_s:g} s, a worker process killed",
    )
    overhead = (faulty.seconds - outage_s - clean.seconds) / clean.seconds
    section.add(
        "overhead of the faults beyond the outage itself",
        round(overhead, 2),
        "",
        None,
        f"{faulty.seconds:.1f} s with faults, {clean.seconds:.1f} s without, {outage_s:g} s of outage",
    )
    section.add(
        "model call attempts retried",
        faulty.retries,
        "",
        None,
        f"calls waited {faulty.waited_s:.0f} s in all for the endpoint (fault-free: {clean.retries} retried)",
    )
    return section
