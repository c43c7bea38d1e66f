"""The CPU a run used, by process kind, read from ``/proc`` (Linux) while it runs.

Whole-machine counters count whatever else the machine does (other users, other benchmarks),
and a process's ``RUSAGE_CHILDREN`` counts only children it has waited for (not Playwright's
driver nor Chromium, which live as long as the run). So :class:`CpuTree` samples, every
``INTERVAL_S``, ``utime + stime`` of every process of the run: this process and its
descendants (worker processes, Playwright's node driver, Chromium and its children), and any
process that names the user-data-dir of one of the run's Chromiums (a zygote's children need
not descend from the run on every system). A process counts from when it was first seen (from
zero if it started after the sampling did) to its last sample. Processes given as *apart*
(the bench's model server, its web sites: a real epoch has neither on its machine) are counted
under their own kind, with their descendants.

What a sample misses is the last moments (under ``INTERVAL_S``) of a process that exits
between two samples: a renderer's shutdown when its context closes, small beside its life.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

INTERVAL_S = 0.2
TICKS = os.sysconf("SC_CLK_TCK")
KINDS = ("mmina", "driver", "browser", "gpu", "renderer", "utility", "zygote", "other")
"""The kinds of mmina's side of a run, in the order they are shown."""
CHROMIUM_TYPES = {
    "": "browser",
    "renderer": "renderer",
    "gpu-process": "gpu",
    "utility": "utility",
    "zygote": "zygote",
}
USER_DATA = "--user-data-dir="


@dataclass(frozen=True)
class Stat:
    """One process's line of ``/proc/<pid>/stat``: its parent, own CPU ticks (every thread's,
    exited ones included) and when it started (with the pid, an identity a reused pid lacks)."""

    ppid: int
    ticks: int
    started: int


def read_stat(pid: int) -> Stat | None:
    """The process's stat line, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return Stat(int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19]))


def command_line(pid: int) -> list[str]:
    """The process's arguments. Chromium's child processes rewrite theirs as one string with
    spaces between the arguments (their process title), which is split back here."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    parts = [p for p in raw.split("\0") if p]
    return parts[0].split(" ") if len(parts) == 1 else parts


def kind_of(command: list[str]) -> str:
    """A process's kind from its command line: Chromium's by its ``--type``, Playwright's node
    driver, mmina's Python (the run's own process and its worker processes)."""
    program = Path(command[0]).name if command and command[0] else ""
    if "chrom" in program or "headless_shell" in program:
        kind = next((a.split("=", 1)[1] for a in command if a.startswith("--type=")), "")
        return CHROMIUM_TYPES.get(kind, "other")
    if program == "node" or program.startswith("node"):
        return "driver"
    if program.startswith("python") or program in ("ray::IDLE", "raylet") or program.startswith("ray::"):
        return "mmina"
    return "other"


def all_stats() -> dict[int, Stat]:
    """Every process's stat, by pid (one pass over ``/proc``)."""
    found: dict[int, Stat] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = read_stat(int(entry.name))
            if stat is not None:
                found[int(entry.name)] = stat
    return found


def descendants(roots: dict[int, str], stats: dict[int, Stat]) -> dict[int, str]:
    """Every descendant of each root (and the root), with the root's label."""
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        children.setdefault(stat.ppid, []).append(pid)
    found: dict[int, str] = {}
    todo = [(pid, label) for pid, label in roots.items() if pid in stats]
    while todo:
        pid, label = todo.pop()
        if pid not in found:
            found[pid] = label
            todo += [(child, label) for child in children.get(pid, [])]
    return found


RECHECKS = 5
"""Samples over which a new process's kind is read again: a child is a copy of its parent
(a Python, for Playwright's node driver) until it executes its own program."""


@dataclass
class _Seen:
    kind: str
    first: int
    last: int
    checks: int = 1


@dataclass
class CpuSplit:
    """Core-seconds by kind (mmina's side in ``KINDS``, the apart ones under their labels)."""

    seconds: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0

    def side(self) -> float:
        """mmina's side: every kind but the apart ones."""
        return sum(self.seconds.get(k, 0.0) for k in KINDS)

    def busy(self) -> float:
        """The share of the machine's cores mmina's side kept busy over the wall time."""
        return self.side() / (self.wall_s * (os.cpu_count() or 1)) if self.wall_s > 0 else 0.0

    def minus(self, other: CpuSplit) -> CpuSplit:
        names = set(self.seconds) | set(other.seconds)
        return CpuSplit(
            {n: self.seconds.get(n, 0.0) - other.seconds.get(n, 0.0) for n in names},
            self.wall_s - other.wall_s,
        )


class CpuTree:
    """Samples the CPU of this process's tree while a block runs (see the module)."""

    def __init__(self, apart: dict[int, str] | None = None) -> None:
        self.apart = dict(apart or {})
        self.split = CpuSplit()
        self._seen: dict[tuple[int, int], _Seen] = {}
        self._kinds: dict[tuple[int, int], str] = {}
        self._stop = threading.Event()
        self._own_s = 0.0

    @contextmanager
    def sampling(self) -> Iterator[CpuTree]:
        started = time.perf_counter()
        self._sample(first=True)
        thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
            self._sample(first=False)
            self.split = self._result(time.perf_counter() - started)

    def _run(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(INTERVAL_S):
            self._sample(first=False)
        self._own_s = time.thread_time() - started

    def _sample(self, first: bool) -> None:
        stats = all_stats()
        members = descendants({os.getpid(): "", **self.apart}, stats)
        members.update(self._by_user_data(stats, members))
        for pid, label in members.items():
            stat = stats[pid]
            key = (pid, stat.started)
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = _Seen(
                    label or kind_of(command_line(pid)), stat.ticks if first else 0, 0
                )
            elif seen.checks < RECHECKS and not label:
                command = command_line(pid)
                seen.kind, seen.checks = (kind_of(command) if command else seen.kind), seen.checks + 1
            seen.last = stat.ticks

    def _by_user_data(self, stats: dict[int, Stat], members: dict[int, str]) -> dict[int, str]:
        """Processes outside the tree that name the user-data-dir of a Chromium inside it."""
        dirs = {
            a
            for pid, label in members.items()
            if not label
            for a in command_line(pid)
            if a.startswith(USER_DATA)
        }
        if not dirs:
            return {}
        return {
            pid: ""
            for pid in stats
            if pid not in members and any(a in dirs for a in command_line(pid) if a.startswith(USER_DATA))
        }

    def _result(self, wall_s: float) -> CpuSplit:
        seconds: dict[str, float] = {}
        for seen in self._seen.values():
            seconds[seen.kind] = seconds.get(seen.kind, 0.0) + (seen.last - seen.first) / TICKS
        seconds["mmina"] = seconds.get("mmina", 0.0) - self._own_s
        return CpuSplit(seconds, wall_s)
