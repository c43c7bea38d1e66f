"""Tables that fit the terminal (``mmina.cli.fitting``), and help that fits it too.

The commands run as a user runs them: their own process, on a real pseudo-terminal 80 or 120
columns wide. A run id stays whole on one line (copyable), no header is broken inside a word,
no line is wider than the terminal, columns left out are named, ``--wide`` shows them all; every
command summary of ``mmina --help`` (and of its groups) is whole at 80 and 120 columns.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from datetime import timedelta
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rich.cells import cell_len

from mmina.analysis.display import display
from mmina.analysis.report import build_report
from mmina.cli import cli
from mmina.cli.fitting import FOLD_AT, fit, table_width
from mmina.evaluators.rescore import RescoreConfig, rescore
from mmina.store import Store
from tests.store_helpers import REPO_ROOT, T0, episode_row, judged_task_row, run_row, step_row

RUNS = ("20261206-130508-oracle-8e4f51", "20261206-130521-heuristic-3a1fe0", "20261206-140000-openai-0a1b2c")
TASKS = [judged_task_row(task, {"must_include": ["x"]}) for task in ("normal/1", "normal/2")]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three scored runs (one with a long model name) written through the real store writer."""
    root = tmp_path_factory.mktemp("tables") / "store"
    opened = Store.open(root, create=True)
    for day, run_id in enumerate(RUNS):
        model = "gpt-4o-mini-2024-07-18-with-a-long-name" if "openai" in run_id else None
        row = run_row(
            created_at=T0 + timedelta(days=day), agent=run_id.split("-")[2], model=model, task_count=2
        )
        opened.begin_run(run_id, row, TASKS)
        for number, task in enumerate(("normal/1", "normal/2")):
            writer = opened.episode_writer(run_id, f"{task.replace('/', '-')}-{day}{number}")
            writer.add_step(step_row(0, url="http://site0.test/"))
            writer.commit(episode_row(task, n_steps=1, final_answer="x"))
    assert rescore(opened, RescoreConfig(evaluator="hops")).ok
    return root


def terminal(columns: int, *args: str) -> str:
    """What ``mmina ARGS`` shows on a terminal ``columns`` wide (colours off, escapes removed)."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {
        **os.environ,
        "COLUMNS": str(columns),
        "LINES": "40",
        "TERM": "xterm",
        "NO_COLOR": "1",
        "PYTHONPATH": str(REPO_ROOT),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "mmina", *args],
        stdin=subprocess.DEVNULL,
        stdout=child,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=REPO_ROOT,
    )
    os.close(child)
    output, deadline = b"", time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the child's end is closed: everything was read
                break
            if not chunk:
                break
            output += chunk
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
        assert code == 0, output.decode(errors="replace")
    finally:
        process.kill()
        os.close(main)
    return ANSI.sub("", output.decode()).replace("\r\n", "\n")


def widest(text: str) -> int:
    return max(cell_len(line) for line in text.splitlines())


def left_out(text: str) -> list[str]:
    """The columns the notes under the tables name as left out."""
    notes = re.findall(r"\(left out to fit \d+ columns: (.*?); --wide shows all\)", " ".join(text.split()))
    return [name for note in notes for name in note.split(", ")]


def test_runs_at_80_columns_shows_whole_run_ids(store: Path) -> None:
    out = terminal(80, "runs", "--store", str(store))
    assert widest(out) <= 80, out
    for run_id in RUNS:
        assert sum(run_id in line for line in out.splitlines()) == 1, out  # whole, on one line, copyable
    assert "task_sr" in out and "hop_sr" in out and "status" in out
    assert {"tasks_done", "episodes"} <= set(left_out(out))
    assert "tasks_done" not in out.split("(left out")[0]


def test_wide_shows_every_column_and_120_columns_more_than_80(store: Path) -> None:
    wide = terminal(80, "runs", "--wide", "--store", str(store))
    for column in (
        "run_id",
        "started",
        "agent",
        "model",
        "tasks_done",
        "episodes",
        "errors",
        "task_sr",
        "status",
    ):
        assert column in wide
    assert "gpt-4o-mini-2024-07-18-with-a-long-name" in wide and not left_out(wide)
    assert widest(wide) > 80
    at_120 = terminal(120, "runs", "--store", str(store))
    assert widest(at_120) <= 120 and all(run_id in at_120 for run_id in RUNS)
    at_80 = terminal(80, "runs", "--store", str(store))
    assert "agent" in at_120.split("(left out")[0] and len(left_out(at_120)) < len(left_out(at_80))


def test_report_headers_are_never_broken_inside_a_word(store: Path) -> None:
    out = terminal(80, "report", "--store", str(store))
    assert widest(out) <= 80, out
    joined = " ".join(out.split())
    tables = [t for t in build_report(Store.open(store)).chosen() if t.rows and t.title in joined]
    assert len(tables) >= 5, out
    shown = set(re.findall(r"[^\s┃│|]+", out))
    for table in tables:
        for header in display(table)[0]:
            if header in left_out(out):
                continue
            assert all(word in shown for word in header.split()), (table.name, header)


def test_sql_results_fit_and_keep_ids_whole(store: Path) -> None:
    out = terminal(
        80,
        "sql",
        "select run_id, episode_id, task_id, final_answer, status, n_steps, error, "
        "started_at from episodes order by episode_id",
        "--store",
        str(store),
    )
    assert widest(out) <= 80, out
    for run_id in RUNS:
        assert run_id in out
    assert left_out(out), out  # not everything fits in 80 columns: the note says what is missing


def test_fit_keeps_identifiers_whole_and_words_unbroken() -> None:
    columns = ["run_id", "started", "a_long_header_name", "notes", "tail"]
    rows = [["20261206-130521-heuristic-3a1fe0", "2026-12-06 13:05 UTC", "1", "word " * 30, "x"]]
    fitted = fit(columns, rows, 80)
    assert fitted.width <= 80 and fitted.shown[0] == 0 and fitted.widths[0] == len(rows[0][0])
    for index, width in zip(fitted.shown, fitted.widths):
        assert width >= max(len(w) for w in columns[index].split())
        assert width >= min(max(len(w) for w in rows[0][index].split()), FOLD_AT)
    assert fit(columns, rows, None).widths == tuple(max(len(c), len(v)) for c, v in zip(columns, rows[0]))
    # the secondary columns go first, then from the right; the first column stays
    assert fit(columns, rows, 60, secondary=("started",)).dropped[0] == "started"
    narrow = fit(columns, rows, 20)
    assert narrow.shown == (0,) and narrow.width == table_width([len(rows[0][0])]) > 20  # the id stays whole


def test_every_command_summary_is_whole_at_80_and_120_columns() -> None:
    runner = CliRunner()

    def groups(command: click.Command, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        if not isinstance(command, click.Group):
            return []
        ctx = click.Context(command, info_name=path[-1] if path else "mmina")
        found = [path]
        for name in command.list_commands(ctx):
            found += groups(command.get_command(ctx, name), (*path, name))  # type: ignore[arg-type]
        return found

    for path in groups(cli, ()):
        for width in (80, 120):
            result = runner.invoke(cli, [*path, "--help"], terminal_width=width)
            assert result.exit_code == 0, result.output
            listed = result.output.split("Commands:")[1]
            assert "..." not in listed and "…" not in listed, (path, width, listed)


def test_the_first_help_example_records_one_task() -> None:
    out = CliRunner().invoke(cli, ["--help"]).output
    first = next(line.strip() for line in out.splitlines() if line.strip().startswith("mmina "))
    assert first == "mmina record --task normal/1"
    assert "100 tasks" in out


def test_paired_episode_ids_are_identifiers_too() -> None:
    columns = ["task_id", "direction", "episode_a", "episode_b", "hops_passed_a", "repeat"]
    rows = [["normal/1", "pass→fail", "normal-1-efcedca8206e485a", "normal-1-03fab68192234a76", "2", "1"]]
    fitted = fit(columns, rows, 80)
    assert {2, 3} <= set(fitted.shown) and fitted.width <= 80
    assert [w for i, w in zip(fitted.shown, fitted.widths) if i in (2, 3)] == [25, 25]
    assert "hops_passed_a" in fitted.dropped
