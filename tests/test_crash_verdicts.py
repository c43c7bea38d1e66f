"""A crash between an episode's commit and its verdicts (issue 35, item 2): ``store verify`` lists
the episode, ``record --resume`` scores it from the stored rows, exactly as the recording would
have. The one fault injected: the recording process kills itself where the verdicts are written.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from mmina.cli import cli
from mmina.store import Store
from mmina.store.inspect import verify_store
from tests.store_helpers import REPO_ROOT

KILLED_AT_THE_VERDICTS = """
import os, signal, sys
import mmina.recorder.episode as episode
episode.write_verdicts = lambda store, view: os.kill(os.getpid(), signal.SIGKILL)
from mmina.cli import cli
cli(["record", "--task", "normal/1", "--run-id", "k", "--store", sys.argv[1]])
"""


def _verdicts(store: Store) -> list[tuple[str, str, int | None, str]]:
    rows = store.read("scores", columns=["evaluator", "level", "hop", "verdict"]).to_pylist()
    return sorted(
        (r["evaluator"], r["level"], r["hop"] if r["hop"] is not None else -1, r["verdict"]) for r in rows
    )


def test_resume_scores_an_episode_a_crash_left_without_its_verdicts(tmp_path: Path) -> None:
    location = str(tmp_path / "store")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_THE_VERDICTS, location],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = Store.open(location)
    [episode] = store.read("episodes", columns=["episode_id"]).column("episode_id").to_pylist()
    assert store.read("scores").num_rows == 0  # committed, and no verdict
    [problem] = verify_store(store).problems
    assert (
        problem.kind == "unscored" and episode in problem.message and "--resume --run-id k" in problem.message
    )
    verify = CliRunner().invoke(cli, ["store", "verify", "--store", location])
    assert verify.exit_code == 1 and "unscored" in verify.output

    resumed = CliRunner().invoke(
        cli,
        [
            "record",
            "--task",
            "normal/1",
            "--run-id",
            "k",
            "--resume",
            "--store",
            location,
            "--format",
            "json",
        ],
    )
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout)
    assert (
        summary["verdicts_added"] == [episode]
        and summary["skipped"] == ["normal/1"]
        and summary["episodes"] == []
    )
    assert verify_store(Store.open(location)).ok
    scored = _verdicts(Store.open(location))
    assert ("hops", "task", -1, "pass") in scored and ("task", "task", -1, "pass") in scored
    again = CliRunner().invoke(
        cli,
        [
            "record",
            "--task",
            "normal/1",
            "--run-id",
            "k",
            "--resume",
            "--store",
            location,
            "--format",
            "json",
        ],
    )
    assert (
        json.loads(again.stdout)["verdicts_added"] == [] and _verdicts(Store.open(location)) == scored
    )  # once


def test_the_verdicts_written_on_resume_are_those_of_the_recording(recorded_copy: Path) -> None:
    """The shared recording (normal/1 by the oracle) with its verdicts file taken away, as the
    crash leaves it: resume writes the same verdicts back."""
    store = Store.open(recorded_copy)
    before = _verdicts(store)
    [scores] = list(recorded_copy.glob("scores/run_id=*/*.parquet"))
    run_id = scores.parent.name.removeprefix("run_id=")
    scores.unlink()
    resumed = CliRunner().invoke(
        cli, ["record", "--task", "normal/1", "--run-id", run_id, "--resume", "--store", str(recorded_copy)]
    )
    assert resumed.exit_code == 0 and "scored 1 episode(s) committed without their verdicts" in resumed.output
    assert _verdicts(Store.open(recorded_copy)) == before
