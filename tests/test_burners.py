"""The CPU burners contributors run the suite beside (``python -m tests.burners N -- COMMAND``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.burners import burning, parse
from tests.polling import wait_until

HERE = Path(__file__).resolve().parent.parent


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_burners_spin_while_the_block_runs_and_are_gone_after_it() -> None:
    with burning(2) as burners:
        pids = [burner.pid for burner in burners]
        assert len(set(pids)) == 2
        wait_until(lambda: all(_cpu_seconds(pid) >= 0.1 for pid in pids), 30, "both burners using CPU")
    assert [burner.returncode is not None for burner in burners] == [True, True]
    assert not any(_alive(pid) for pid in pids)


SIBLINGS = (
    "import os, sys\n"
    "from pathlib import Path\n"
    "stats = [p / 'stat' for p in Path('/proc').iterdir() if p.name.isdigit()]\n"
    "parents = [s.read_text().rsplit(')', 1)[1].split()[1] for s in stats if s.exists()]\n"
    "print(parents.count(str(os.getppid())) - 1)\n"
    "sys.exit(3)\n"
)
"""Prints how many other processes share its parent (the burners), exits 3."""


def test_the_command_runs_beside_them_and_its_exit_code_is_returned() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.burners", "2", "--", sys.executable, "-c", SIBLINGS],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert int(done.stdout) == 2


def test_a_killed_starter_leaves_no_burner_behind() -> None:
    """The burners watch their parent: SIGKILL of ``python -m tests.burners`` (no clean-up runs)
    still ends them."""
    starter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.burners",
            "2",
            "--",
            sys.executable,
            "-c",
            "import time; time.sleep(60)",
        ],
        cwd=HERE,
    )
    try:
        wait_until(lambda: len(_children(starter.pid)) >= 3, 30, "two burners and the command started")
        children = _children(starter.pid)
        starter.send_signal(signal.SIGKILL)
        starter.wait(30)
        burners = [
            pid for pid in children if "tests.burners" not in _command(pid) and "sleep" not in _command(pid)
        ]
        assert len(burners) == 2
        wait_until(lambda: not any(_alive(pid) for pid in burners), 30, "the burners ending")
    finally:
        for pid in _children(starter.pid):
            os.kill(pid, signal.SIGKILL)
        if starter.poll() is None:
            starter.kill()


def test_ctrl_c_ends_the_command_and_the_burners_quietly() -> None:
    """Ctrl-C at a terminal reaches the whole process group: the command ends by it (exit 130),
    the burners neither die noisily (no KeyboardInterrupt traceback) nor stay."""
    starter = subprocess.Popen(
        [sys.executable, "-m", "tests.burners", "2", "--", "sleep", "60"],
        cwd=HERE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 - before any thread
    )
    try:
        wait_until(
            lambda: any("sleep" in _command(pid) for pid in _children(starter.pid)), 30, "the command started"
        )
        children = _children(starter.pid)
        os.killpg(starter.pid, signal.SIGINT)
        _, err = starter.communicate(timeout=60)
        assert (starter.returncode, err) == (130, "")
        assert not any(_alive(pid) for pid in children)
    finally:
        if starter.poll() is None:
            os.killpg(starter.pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["2", "pytest"], "put the command after --"),
        (["2", "--"], "no command after --"),
        (["two", "--", "true"], "whole number"),
        (["-1", "--", "true"], "0 or more"),
    ],
)
def test_bad_arguments_are_refused_with_a_reason(argv: list[str], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse(argv)
    done = subprocess.run(
        [sys.executable, "-m", "tests.burners", *argv],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert reason in done.stderr and "Traceback" not in done.stderr
