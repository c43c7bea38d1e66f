"""Leftovers of writers that are gone (issue 25): a SIGKILLed writer's temporary files and the
orphans of a writer killed between its renames are removed by ``store verify --repair`` and
by the next writer, never while their writer lives or a commit is under way, so ``store
verify`` is clean after any kill and ``--resume``. Real processes, really killed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from mmina.cli import cli
from mmina.store import Store
from mmina.store.inspect import verify_store
from mmina.store.schema import SCHEMA_VERSION
from mmina.store.sql import run_query
from tests.store_helpers import REPO_ROOT, write_episode
from tests.test_store_robustness import spawn, wait_for_line

V = f".v{SCHEMA_VERSION}.parquet"
IN_FLIGHT = """
from mmina.store import Store
from tests.store_helpers import begin, step_row, write_episode
store = Store.open({root!r}, create=True)
begin(store, "r1")
write_episode(store, "r1", "ep-done-{tag}", [b"first episode {tag}"], n_steps=2)
writer = store.episode_writer("r1", "ep-in-flight-{tag}")
for i in range(3):
    writer.add_step(step_row(i, writer.put_blob(os.urandom(600_000), "image/jpeg")))
print("READY", flush=True)
time.sleep(300)
"""
BETWEEN_RENAMES = """
import signal
from mmina.store import Store
from mmina.store.backends import LocalNewFile
from tests.store_helpers import begin, write_episode
store = Store.open({root!r}, create=True)
begin(store, "r1")
write_episode(store, "r1", "ep-done", [b"first episode"], n_steps=2)
commit = LocalNewFile.commit
def commit_then_die(self):
    if "/episodes/" in str(self.final):  # the commit point: die just before it
        os.kill(os.getpid(), signal.SIGKILL)
    return commit(self)
LocalNewFile.commit = commit_then_die
write_episode(store, "r1", "ep-killed", [b"never seen"], n_steps=3, n_requests=1)
"""
HOLDS_THE_COMMIT_LOCK = """
from mmina.store import Store
with Store.open({root!r}).commit_lock(exclusive=False):
    print("READY", flush=True)
    time.sleep(300)
"""


def temporary_files(root: Path) -> list[Path]:
    return sorted(root.rglob(".*.tmp"))


def killed_in_flight(root: Path, tag: str = "a") -> list[Path]:
    """A writer SIGKILLed in the middle of an episode; the temporary files it left."""
    proc = spawn(IN_FLIGHT.format(root=str(root), tag=tag))
    try:
        wait_for_line(proc, "READY")
    finally:
        proc.kill()
        proc.wait()
    return temporary_files(root)


def verify(root: Path, *args: str):
    return CliRunner().invoke(cli, ["store", "verify", "--store", str(root), *args])


def test_repair_removes_the_temporary_files_of_a_killed_writer(tmp_path: Path) -> None:
    root = tmp_path / "store"
    left = killed_in_flight(root)
    assert left and verify(root).exit_code == 1
    repaired = verify(root, "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert [
        line.split(": ")[1] for line in repaired.stdout.splitlines() if line.startswith("removed partial: ")
    ] == [str(p) for p in left]
    assert temporary_files(root) == [] and verify(root).exit_code == 0
    assert run_query(Store.open(root), "select episode_id from episodes").rows == [("ep-done-a",)]


def test_the_next_writer_removes_them_by_itself(tmp_path: Path) -> None:
    root = tmp_path / "store"
    assert killed_in_flight(root)
    write_episode(Store.open(root), "r1", "ep-next", [b"next"], n_steps=1)
    assert temporary_files(root) == []
    report = verify_store(Store.open(root))
    assert report.ok and report.in_progress == [], report


def test_a_live_writers_files_are_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "store"
    proc = spawn(IN_FLIGHT.format(root=str(root), tag="live"))
    try:
        wait_for_line(proc, "READY")
        live = temporary_files(root)
        result = verify(root, "--repair", "--format", "json")
        report = json.loads(result.stdout)
        assert (
            result.exit_code == 0
            and report["repaired"] == []
            and report["in_progress"] == [str(p) for p in live]
        )
        write_episode(
            Store.open(root), "r1", "ep-beside", [b"beside"], n_steps=1
        )  # a writer starting meanwhile
        assert temporary_files(root) == live and all(p.exists() for p in live)
    finally:
        proc.kill()
        proc.wait()
    assert verify(root, "--repair").exit_code == 0 and temporary_files(root) == []


def killed_between_renames(root: Path) -> list[Path]:
    proc = spawn(BETWEEN_RENAMES.format(root=str(root)))
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    return sorted(root.rglob(f"ep-killed{V}"))


def test_orphans_of_a_writer_killed_between_renames_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    orphans = killed_between_renames(root)
    assert [p.parent.name if p.parent.name == "blobs" else p.parent.parent.name for p in orphans] == [
        "blobs",
        "requests",
        "steps",
    ]
    [unfinished] = temporary_files(root)  # its episodes file, written but not renamed
    assert sorted((p.kind, p.path) for p in verify_store(Store.open(root)).problems) == [
        *(("orphan", str(p)) for p in orphans),
        ("partial", str(unfinished)),
    ]
    write_episode(Store.open(root), "r1", "ep-next", [b"next"], n_steps=1)  # the next writer cleans up
    assert not any(p.exists() for p in [*orphans, unfinished]) and verify_store(Store.open(root)).ok
    assert sorted(run_query(Store.open(root), "select episode_id from episodes").rows) == [
        ("ep-done",),
        ("ep-next",),
    ]


def test_orphans_are_kept_while_a_commit_may_be_under_way(tmp_path: Path) -> None:
    root = tmp_path / "store"
    orphans = killed_between_renames(root)
    holder = spawn(HOLDS_THE_COMMIT_LOCK.format(root=str(root)))
    try:
        wait_for_line(holder, "READY")
        write_episode(
            Store.open(root), "r1", "ep-next", [b"next"], n_steps=1
        )  # commits beside it, removes nothing
        assert all(p.exists() for p in orphans)
    finally:
        holder.kill()
        holder.wait()
    repaired = verify(root, "--repair")
    assert repaired.exit_code == 0 and repaired.stdout.count("removed orphan: ") == len(orphans)
    assert not any(p.exists() for p in orphans)


def test_a_killed_recording_resumes_to_a_clean_verify(tmp_path: Path) -> None:
    root = tmp_path / "store"
    command = [
        sys.executable,
        "-m",
        "mmina",
        "record",
        "--task",
        "normal/1,normal/2,normal/3",
        "--run-id",
        "k",
        "--store",
        str(root),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 240
        while (
            time.monotonic() < deadline
            and proc.poll() is None
            and not list(root.glob("episodes/run_id=k/*.parquet"))
        ):
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    resumed = subprocess.run(
        [*command, "--resume", "--format", "json"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr
    rows = run_query(Store.open(root), "select task_id, count(*) from episodes group by 1 order by 1").rows
    assert rows == [("normal/1", 1), ("normal/2", 1), ("normal/3", 1)]
    result = verify(root)
    assert result.exit_code == 0 and "in progress" not in result.stdout, result.stdout
