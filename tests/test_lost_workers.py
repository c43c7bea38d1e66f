"""A lost worker costs only its episodes in flight (issue 53, item 3): a worker process killed
mid-run, and a real two-node Ray cluster on this machine (``ray start`` of a head and a second
node, token auth as Ray 2.60 has it) whose second node's raylet is killed mid-run. Each run
finishes with every task recorded exactly once and no error stored."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from mmina.errors import MminaWarning
from mmina.executors.interface import Layout
from mmina.executors.spread import spread
from mmina.store import Store
from tests.agents_for_tests import descendants
from tests.store_helpers import REPO_ROOT

TASKS = [f"normal/{n}" for n in range(1, 9)]
RAY = Path(sys.executable).parent / "ray"


def _kill_tree(pid: int) -> None:
    for victim in [pid, *descendants(pid)]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _record(store: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmina",
            "record",
            "--store",
            str(store),
            "--no-screenshots",
            "--max-steps",
            "6",
            "--run-id",
            "lost",
            "--format",
            "json",
            *[f"--task={t}" for t in TASKS],
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


def _after_first_episode(proc: subprocess.Popen[str], reported: str = "[1] ") -> list[str]:
    """Read the run's progress until its first episode is reported (a line holding ``reported``); the lines read."""
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if reported in line:
            break
    return lines


def _lose_a_worker(proc: subprocess.Popen[str], reported: str) -> tuple[list[str], str, str]:
    """Once the first episode is reported, SIGKILL one worker process (with its browser); the
    progress read before, and stdout and the rest of stderr once the command ended."""
    try:
        seen = _after_first_episode(proc, reported)
        workers = [
            pid for pid in descendants(proc.pid) if b"spawn_main" in _read(Path(f"/proc/{pid}/cmdline"))
        ]
        assert workers, seen
        _kill_tree(workers[0])
        out, err = proc.communicate(timeout=600)
    finally:
        _kill_tree(proc.pid)
    return seen, out, err


def _exactly_once(store: Path) -> None:
    rows = Store.open(store).read("episodes").to_pylist()
    assert sorted(r["task_id"] for r in rows) == sorted(TASKS)
    assert [r["error"] for r in rows if r["status"] == "error"] == []


class _DiesOnce:
    """A job whose process kills itself the first time it is handed item 3 (a marker file says so)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def work(self, item: int) -> int:
        if item == 3 and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return item * 2

    def close(self) -> None:
        pass


def test_the_pool_counts_its_workers_alive_and_lost_and_redoes_a_lost_item(tmp_path: Path) -> None:
    counts: list[tuple[int, int]] = []
    with pytest.warns(MminaWarning, match="a worker process was lost"):
        results = dict(
            spread(
                partial(_DiesOnce, str(tmp_path / "died")),
                list(range(8)),
                Layout(workers=2),
                settled=lambda item: False,
                on_workers=lambda alive, lost: counts.append((alive, lost)),
            )
        )
    assert results == {n: n * 2 for n in range(8)} and (tmp_path / "died").exists()
    assert counts[:2] == [(1, 0), (2, 0)]  # as each process starts
    lost = counts.index(next(c for c in counts if c[1] == 1))
    assert (
        counts[lost][0] in (1, 2) and counts[-1][1] == 1
    )  # the lost one counted (a replacement may start at once)
    assert all(alive <= 2 for alive, _ in counts)


def test_a_killed_worker_process_costs_only_its_episodes_in_flight(tmp_path: Path) -> None:
    proc = _record(tmp_path / "store", "--workers", "2", "--concurrency", "2")
    seen, out, err = _lose_a_worker(proc, "[1] ")
    assert proc.returncode == 0, "".join(seen) + err[-3000:]
    assert "a worker process was lost" in err and "Traceback" not in err
    assert json.loads(out)["workers_lost"] == 1
    _exactly_once(tmp_path / "store")


@pytest.fixture
def two_nodes() -> Iterator[tuple[str, int, dict[str, str]]]:
    """A head and a second node on this machine, one CPU each: the address, the second node's
    raylet pid and the environment that reaches the cluster."""
    folder = Path(tempfile.mkdtemp(prefix="mmray-", dir="/tmp"))  # Ray's socket paths must stay short
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--num-cpus", "1", "--disable-usage-stats"]
    try:
        subprocess.run(
            [
                str(RAY),
                "start",
                "--head",
                "--port",
                str(port),
                "--temp-dir",
                str(folder),
                "--include-dashboard",
                "false",
                *common,
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=180,
        )
        before = set(_raylets(folder))
        _join(f"127.0.0.1:{port}", [*common], env, folder, before)
        [second] = set(_raylets(folder)) - before
        yield f"127.0.0.1:{port}", second, env
    finally:  # this cluster's processes only (``ray stop`` would end every test's Ray on the machine)
        for pid in [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and str(folder).encode() in _read(p / "cmdline")
        ]:
            _kill_tree(pid)


RAY_STARTUP_TIMED_OUT = "The current node timed out during startup"
"""What ``ray start`` says when its own wait for the new raylet to register (a fixed 30 s in Ray
2.60, not configurable) ran out: on a loaded machine, a start-up that would have succeeded."""


def _join(address: str, options: list[str], env: dict[str, str], folder: Path, before: set[int]) -> None:
    """``ray start --address``, once more if Ray's start-up wait ran out (the raylet it left is
    ended first); any other failure, or a second one, fails with Ray's own words."""
    for attempt in (1, 2):
        done = subprocess.run(
            [str(RAY), "start", "--address", address, *options],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if done.returncode == 0:
            return
        said = (done.stdout + done.stderr)[-3000:]
        if attempt == 2 or RAY_STARTUP_TIMED_OUT not in said:
            raise AssertionError(f"ray start --address {address} failed ({done.returncode}):\n{said}")
        for pid in set(_raylets(folder)) - before:
            _kill_tree(pid)


def _raylets(folder: Path) -> list[int]:
    """The raylets of the cluster whose temporary folder is ``folder`` (not another test's Ray on
    the machine, whose raylet may start meanwhile)."""
    found = []
    for entry in Path("/proc").iterdir():
        command = _read(entry / "cmdline") if entry.name.isdigit() else b""
        if command.split(b"\0")[0].endswith(b"/raylet") and str(folder).encode() in command:
            found.append(int(entry.name))
    return found


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_ray_node_lost_mid_run_costs_only_its_episodes_in_flight(tmp_path: Path, two_nodes) -> None:
    address, second, env = two_nodes
    proc = _record(
        tmp_path / "store",
        "--executor",
        "ray",
        "--ray-address",
        address,
        "--workers",
        "2",
        "--concurrency",
        "2",
        env=env,
    )
    try:
        seen = _after_first_episode(proc)
        _kill_tree(second)  # the node: its raylet and every process under it (its actor among them)
        out, err = proc.communicate(timeout=900)
    finally:
        _kill_tree(proc.pid)
    assert proc.returncode == 0, "".join(seen) + err[-3000:]
    assert "a Ray worker was lost" in err and "Traceback" not in err
    assert "raylet" not in err.lower()  # Ray's own state dumps stay in its logs
    _exactly_once(tmp_path / "store")


def test_a_replay_whose_worker_process_is_killed_replays_each_episode_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    recorded = _record(store)
    recorded.communicate(timeout=600)
    assert recorded.returncode == 0
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmina",
            "replay",
            "--store",
            str(store),
            "--run",
            "lost",
            "--workers",
            "2",
            "--concurrency",
            "2",
            "--format",
            "json",
            "--run-id",
            "again",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    seen, _out, err = _lose_a_worker(proc, ": fidelity ")
    assert proc.returncode == 0, "".join(seen) + err[-3000:]
    assert "a worker process was lost" in err
    rows = Store.open(store).read("episodes", run_id="again").to_pylist()
    assert sorted(r["task_id"] for r in rows) == sorted(TASKS)
