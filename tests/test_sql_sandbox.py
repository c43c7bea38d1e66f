"""`mmina sql` in its sandbox, on a local store: nothing written however wrapped, nothing read
outside the store, one-line errors for any input, a deadline, and Ctrl-C.

The reproductions of issue 25 (``explain analyze copy (...) to 'PATH'`` overwrote committed
files, the marker, added a Parquet file to a table and wrote outside the store;
``read_text('/proc/self/environ')``, ``read_csv('/etc/passwd')``, ``read_blob``,
``glob('/root/**')`` returned data; a non-UTF-8 byte gave a traceback; SIGINT did not stop
a query) are named cases; Hypothesis generates the rest. Real DuckDB, real files.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from mmina.cli import cli
from mmina.errors import MminaError, QueryError
from mmina.store import Store
from mmina.store.sql import QueryTimeoutError, run_query
from mmina.store.views import connect
from tests.heavy import sized
from tests.sql_attacks import CANARY, OTHER, leaks, outside_reads, statements, wrapped, writes
from tests.store_helpers import REPO_ROOT, begin, write_episode

SLOW = "select count(*) from range(100000000) a(i), range(100000000) b(j) where (i * j) % 7 = 3"
"""A query that runs for hours unless stopped."""


def files_of(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones too) by its content's hash."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store of three episodes, and next to it a folder of files that must stay unseen."""
    base = tmp_path_factory.mktemp("sandbox")
    store = Store.open(base / "store", create=True)
    begin(store, "r1")
    for index in range(3):
        write_episode(store, "r1", f"ep{index}", [b"shot %d" % index], n_steps=3, n_requests=2)
    outside = base / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(f"{CANARY}\n")
    (outside / "canary.csv").write_text(f"secret\n{CANARY}\n")
    os.symlink(outside / "canary.txt", base / "store" / "link.txt")  # a way out planted inside the store
    return {"store": base / "store", "outside": outside}


@pytest.fixture(scope="module", autouse=True)
def canary_in_environment() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MMINA_SANDBOX_CANARY", CANARY)
        yield


def targets(world: dict[str, Path]) -> list[str]:
    """Where an attack writes: a committed file, the marker, a new file in a table, outside."""
    store, committed = world["store"], next(world["store"].glob("episodes/run_id=r1/ep0.*.parquet"))
    return [
        str(committed),
        str(store / "mmina-store.json"),
        str(store / "episodes/run_id=r1/extra.v4.parquet"),
        str(world["outside"] / "written.csv"),
        "mmina://episodes/run_id=r1/ep0.v4.parquet",
        "mmina://mmina-store.json",
        "mmina://steps/run_id=r1/extra.v4.parquet",
        "mmina://../escaped.csv",
        "/tmp/mmina-sandbox-escape.csv",
    ]


def secret_paths(world: dict[str, Path]) -> list[str]:
    outside = world["outside"]
    return [
        "/proc/self/environ",
        "/etc/passwd",
        "/root/**",
        str(outside / "canary.txt"),
        str(outside / "*"),
        f"file://{outside}/canary.csv",
        "mmina://link.txt",
        "mmina://../outside/canary.txt",
        f"mmina://{outside}/canary.txt",
        "mmina://../../../../../../etc/passwd",
    ]


def attacks(world: dict[str, Path]) -> list[str]:
    return [*writes(targets(world)), *outside_reads(secret_paths(world)), *OTHER]


def unchanged(world: dict[str, Path], before: dict[str, str]) -> bool:
    escaped = [Path("/tmp/mmina-sandbox-escape.csv"), world["store"].parent / "escaped.csv"]
    return (
        files_of(world["store"]) == before
        and sorted(os.listdir(world["outside"])) == ["canary.csv", "canary.txt"]
        and not any(p.exists() for p in escaped)
    )


def check(world: dict[str, Path], query: str, before: dict[str, str]) -> None:
    """The query fails with a one-line mmina error or returns nothing from outside; nothing changed."""
    try:
        result = run_query(Store.open(world["store"]), query, timeout_s=60)
    except MminaError as exc:
        assert "\n" not in str(exc) and not leaks(str(exc), [CANARY, "root:x:0"]), str(exc)
    else:
        assert not any(leaks(v, [CANARY, "root:x:0"]) for row in result.rows for v in row), (
            query,
            result.rows,
        )
    assert unchanged(world, before), query


# -- the reproductions ---------------------------------------------------------------------


def wrapped_targets(world: dict[str, Path]) -> list[str]:
    """Every target with MMINA_HEAVY=1; by default one of each kind — a committed file, the marker
    and a new file in a table through ``mmina://``, outside the store — since
    test_every_named_attack_fails_cleanly tries every target unwrapped."""
    every = targets(world)
    return sized([every[0], every[5], every[6], every[8]], every)


@pytest.mark.parametrize("wrapper", [0, 2, 4, 5, 7, 9, 11])
def test_writes_are_refused_however_wrapped(world: dict[str, Path], wrapper: int) -> None:
    before = files_of(world["store"])
    for statement in writes(wrapped_targets(world)):
        query = wrapped(statement)[wrapper]
        result = CliRunner().invoke(cli, ["sql", query, "--store", str(world["store"])])
        assert result.exit_code == 1, (query, result.output)
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.output
        assert unchanged(world, before), query
    assert run_query(Store.open(world["store"]), "select count(*) from episodes").rows == [(3,)]


def test_the_issue_reproduction_runs_no_write(world: dict[str, Path]) -> None:
    before = files_of(world["store"])
    committed = next(world["store"].glob("episodes/run_id=r1/ep0.*.parquet"))
    with pytest.raises(QueryError, match="read-only: COPY statements are not allowed"):
        run_query(Store.open(world["store"]), f"explain analyze copy (select 1) to '{committed}'")
    with pytest.raises(QueryError, match="read-only: a COPY inside a query is not allowed"):
        run_query(Store.open(world["store"]), f"with x as (copy (select 1) to '{committed}') select 1")
    assert files_of(world["store"]) == before


@pytest.mark.parametrize(
    "query",
    [
        "select * from read_text('/proc/self/environ')",
        "select * from read_csv('/etc/passwd')",
        "select * from read_blob('/etc/passwd')",
        "select * from glob('/root/**')",
        "select * from glob('/etc/*')",
    ],
)
def test_nothing_outside_the_store_is_read(world: dict[str, Path], query: str) -> None:
    result = CliRunner().invoke(cli, ["sql", query, "--store", str(world["store"])])
    assert result.exit_code == 1 and result.stdout == ""
    assert (
        result.stderr.startswith("Error: mmina sql reads the store's own files only")
        and result.stderr.count("\n") == 1
    )
    assert CANARY not in result.output and "root:x:0" not in result.output


def test_every_named_attack_fails_cleanly(world: dict[str, Path]) -> None:
    before = files_of(world["store"])
    for query in attacks(world):
        check(world, query, before)


def test_the_filesystem_holds_even_without_the_statement_check(world: dict[str, Path]) -> None:
    """The sandbox's second line: statements run straight on its connection still cannot make
    a file, write through ``mmina://``, write outside the store or read outside it. (On a
    local disk DuckDB opens the store's own data files directly, by their exact paths, for
    speed: overwriting one of those is stopped by the statement check alone; see sandbox.py.)"""
    before = files_of(world["store"])
    committed = {str(p) for p in world["store"].rglob("*.parquet")}
    db = connect(Store.open(world["store"]))
    try:
        for query in [
            *writes([t for t in targets(world) if t not in committed]),
            *outside_reads(secret_paths(world)),
        ]:
            try:
                rows = db.connection.execute(query).fetchall()
            except duckdb.Error:
                continue
            assert not any(leaks(v, [CANARY, "root:x:0"]) for row in rows for v in row), query
    finally:
        db.close()
    assert unchanged(world, before)


@settings(
    max_examples=sized(50, 150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=statements(
        [
            "copy (select 1) to 'mmina://episodes/run_id=r1/ep9.v4.parquet'",
            "copy (select 1) to '/tmp/mmina-sandbox-escape.csv'",
            "export database 'mmina://x'",
            "select * from read_text('/proc/self/environ')",
            "select * from glob('/root/**')",
            "select * from read_text('mmina://link.txt')",
            "select * from read_csv('/etc/passwd')",
            "insert into episodes select * from episodes",
            "select count(*) from steps",
            *OTHER,
        ]
    )
)
def test_generated_statements_never_write_nor_read_outside(world: dict[str, Path], query: str) -> None:
    check(world, query, files_of(world["store"]))


# -- what a read may do ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("select count(*) from episodes;", [(3,)]),
        ("with s as (select episode_id from steps) select count(distinct episode_id) from s", [(3,)]),
        ("from episodes select count(*)", [(3,)]),
        ("pivot (select episode_id, 1 as one from episodes) on episode_id in ('ep0') using sum(one)", [(1,)]),
        ("select count(*) from glob('mmina://episodes/*/*.parquet')", [(3,)]),
        (
            "select json_extract_string(content, '$.format') from read_text('mmina://mmina-store.json')",
            [("mmina-store",)],
        ),
        ("/* a comment */ select 1 -- and another", [(1,)]),
    ],
)
def test_reads_run(world: dict[str, Path], query: str, expected: list[tuple]) -> None:
    assert run_query(Store.open(world["store"]), query).rows == expected


@pytest.mark.parametrize(
    "query",
    [
        "explain select count(*) from steps",
        "explain analyze select count(*) from steps",
        "explain (format json) select 1",
        "describe steps",
        "summarize episodes",
        "show tables",
    ],
)
def test_explain_and_describe_run(world: dict[str, Path], query: str) -> None:
    assert run_query(Store.open(world["store"]), query).rows


def test_max_rows_cuts_the_result(world: dict[str, Path]) -> None:
    result = run_query(Store.open(world["store"]), "select * from range(10)", max_rows=3)
    assert result.rows == [(0,), (1,), (2,)] and result.truncated
    assert not run_query(Store.open(world["store"]), "select 1", max_rows=3).truncated


# -- bad input, deadlines, Ctrl-C ------------------------------------------------------------


def mmina(*args: str | bytes, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "mmina", *args], capture_output=True, cwd=REPO_ROOT, timeout=240, **kwargs
    )


def test_a_byte_that_is_not_utf8_is_one_line(world: dict[str, Path]) -> None:
    proc = mmina("sql", b"select '\xff'", "--store", str(world["store"]))
    assert proc.returncode == 1 and proc.stdout == b""
    assert proc.stderr == b"Error: the query is not valid UTF-8: byte 0xff at character 9\n"


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        ";",
        "-- nothing",
        "selec 1",
        "select (" * 2000,
        "select '\x1b[2J'::int",
        "explain",
        "explain analyze",
        "explain (format json)",
        "explain explain",
        "select 1; selec 2",
        "\ud83d",
        "select 1 " + "+ 1 " * 20000,
    ],
)
def test_odd_queries_are_one_line(world: dict[str, Path], query: str) -> None:
    result = CliRunner().invoke(cli, ["sql", "--store", str(world["store"]), "--", query])
    assert result.exit_code == 1 and result.stdout == "", result.output
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "\x1b" not in result.output


def test_a_query_past_its_deadline_is_stopped(world: dict[str, Path]) -> None:
    started = time.monotonic()
    with pytest.raises(QueryTimeoutError, match="ran longer than 1 s and was stopped"):
        run_query(Store.open(world["store"]), SLOW, timeout_s=1)
    assert time.monotonic() - started < 60, "the interrupt stopped the query"
    result = CliRunner().invoke(cli, ["sql", SLOW, "--timeout", "1", "--store", str(world["store"])])
    assert result.exit_code == 1 and result.stderr.startswith("Error: the query ran longer than 1 s")


def test_ctrl_c_stops_a_running_query(world: dict[str, Path]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmina", "sql", SLOW, "--timeout", "0", "--store", str(world["store"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(5)  # started, and inside the query (or still starting: Ctrl-C must work there too)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and out == b"" and err == b"Interrupted.\n", err
