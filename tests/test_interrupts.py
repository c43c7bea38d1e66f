"""Ctrl-C at a terminal signals the whole foreground process group — mmina, Playwright's driver,
Chromium, kiwix-serve. The episodes in flight must then finish or be left for ``--resume``,
never be committed as failures of the agent; the resumed run records every task exactly once.

A real ``mmina record --concurrency 4`` in a session of its own, signalled with ``os.killpg``
as a terminal would. It is started with SIGINT ignored, as a script starts a background job
(and as some CI runners start everything): Python then installs no handler of its own, and
``mmina`` must install it itself or run to the end through a Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from mmina.store import Store
from mmina.store.inspect import verify_store
from mmina.store.sql import run_query
from mmina.tasks.taskcheck import load_suite
from tests.serve_helpers import ignore_sigint

TASKS = 12
WAIT_S = 600
"""How long the interrupted recording may take to wind down (its episodes in flight finish)."""


def _suite(folder: Path) -> Path:
    (folder / "normal").mkdir(parents=True)
    original = (Path(load_suite().path) / "normal" / "1.json").read_text()
    for number in range(1, TASKS + 1):
        (folder / "normal" / f"{number}.json").write_text(original)
    return folder


def _record(suite: Path, store: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mmina",
        "record",
        "--tasks",
        str(suite),
        "--store",
        str(store),
        "--run-id",
        "ctrl-c",
        "--no-screenshots",
        "--concurrency",
        "4",
        *extra,
    ]


def _episodes(store: Path) -> list[tuple[str, str, str | None]]:
    return run_query(Store.open(store), "select task_id, status, error from episodes order by task_id").rows


def test_ctrl_c_at_a_terminal_leaves_a_run_that_resumes_with_every_task_once(tmp_path: Path) -> None:
    suite, store = _suite(tmp_path / "suite"), tmp_path / "store"
    proc = subprocess.Popen(
        _record(suite, store),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        preexec_fn=ignore_sigint,
    )
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("[1] "):
                os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole process group
                break
        _, rest = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = "".join(lines) + rest
    assert proc.returncode == 130 and "Interrupted." in output and "Traceback" not in output, output[-3000:]
    interrupted = _episodes(store)
    assert 1 <= len(interrupted) < TASKS
    assert all(status == "completed" for _, status, _ in interrupted), interrupted
    resumed = subprocess.run(
        _record(suite, store, "--resume"), capture_output=True, text=True, timeout=WAIT_S
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = _episodes(store)
    assert sorted(task for task, _, _ in final) == sorted(f"normal/{n}" for n in range(1, TASKS + 1))
    assert all(status == "completed" for _, status, _ in final), [e for e in final if e[1] != "completed"]
    assert {p.kind for p in verify_store(Store.open(store)).problems} <= {"partial"}


def test_a_ctrl_c_once_a_command_is_done_changes_nothing() -> None:
    """A Ctrl-C that lands after the command's work (its output written), while the process
    tears down — here held for 3 s by a slow exit handler — neither changes the exit code nor
    prints a stray KeyboardInterrupt (it used to: "Exception ignored in atexit callback",
    or the process ended by the signal)."""
    code = (
        "import atexit, sys, time; atexit.register(time.sleep, 3); "  # exit handlers run last registered first
        "atexit.register(lambda: print('exiting', file=sys.stderr, flush=True)); "
        "from mmina.cli import main; main(['--version'])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    assert proc.stderr.readline() == "exiting\n"  # the command is done; the exit handler sleeps
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "mmina, version" in out and (proc.returncode, err) == (0, ""), (proc.returncode, err)
