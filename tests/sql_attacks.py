"""SQL that tries to write through ``mmina sql`` or to read outside the store, shared by the
sandbox tests on a local store and on S3: named cases (the reproductions of issue 25) and a
Hypothesis strategy that wraps writes and outside reads every way DuckDB parses them."""

from __future__ import annotations

from hypothesis import strategies as st

CANARY = "MMINA-CANARY-7f3a9c"
"""Planted outside the store (a file, an environment variable): no result may ever hold it."""


def writes(targets: list[str]) -> list[str]:
    """Statements that write to each target path."""
    return [
        sql
        for target in targets
        for sql in (
            f"copy (select 1 as x) to '{target}'",
            f"copy (select * from episodes) to '{target}' (format parquet)",
            f"copy episodes to '{target}' (format parquet, use_tmp_file false)",
            f"export database '{target}'",
            f"attach '{target}' as attached",
        )
    ]


def outside_reads(paths: list[str]) -> list[str]:
    """Statements that read files outside the store (or list them)."""
    return [
        sql
        for path in paths
        for sql in (
            f"select * from read_text('{path}')",
            f"select * from read_blob('{path}')",
            f"select * from read_csv('{path}', header = false)",
            f"select * from sniff_csv('{path}')",
            f"select * from read_parquet('{path}')",
            f"select * from glob('{path}')",
            f"select * from parquet_metadata('{path}')",
            f"select * from read_json('{path}')",
        )
    ]


OTHER = [
    "install httpfs",
    "load httpfs",
    "set enable_external_access = true",
    "reset lock_configuration",
    "pragma enable_profiling",
    "call pragma_version()",
    "create secret s (type s3, key_id 'a', secret 'b')",
    "create table t as select 1",
    "insert into episodes select * from episodes",
    "drop view steps",
    "set allowed_directories = ['/']",
    "checkpoint",
    "vacuum",
    "detach memory",
    "use memory",
    "set variable x = 1",
    "prepare p as select 1",
    "create macro m() as 1",
]


def wrapped(statement: str) -> list[str]:
    """``statement`` inside every wrapper that reaches the statements inside it."""
    quoted = statement.replace("'", "''")
    return [
        statement,
        f"explain {statement}",
        f"explain analyze {statement}",
        f"EXPLAIN ANALYZE {statement}",
        f"explain (analyze, format json) {statement}",
        f"explain /* c */ analyze -- x\n {statement}",
        f"explain explain analyze {statement}",
        f"with x as ({statement}) select 1",
        f"with x as ({statement}) select * from x",
        f"select 1; {statement}",
        f"{statement}; select 1",
        f"select * from query('{quoted}')",
        f"from ({statement})",
        f"select * from ({statement}) t",
        f"/* comment */ {statement} -- trailing",
        f"  \n\t{statement.upper()};",
    ]


ODD = ["\x00", "\udcff", "\ud83d", "\x1b[31m", "\u202e", "'", '"', ";", "--", "/*", "$1", "?", "\\", "\n"]


def statements(core: list[str]) -> st.SearchStrategy[str]:
    """Generated statements: a core statement, wrapped, cased and commented at random, with odd
    bytes put anywhere."""
    base = st.sampled_from(core).flatmap(lambda s: st.sampled_from(wrapped(s)))
    odd = st.lists(st.sampled_from(ODD) | st.text(max_size=4), max_size=3)
    return st.tuples(base, odd, st.integers(min_value=0)).map(_sprinkle)


def _sprinkle(parts: tuple[str, list[str], int]) -> str:
    statement, odd, seed = parts
    for index, text in enumerate(odd):
        at = (seed * (index + 7)) % (len(statement) + 1)
        statement = statement[:at] + text + statement[at:]
    return statement


def leaks(value: object, secrets: list[str]) -> bool:
    """True when a result value holds one of ``secrets``."""
    text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return any(secret in text for secret in secrets)
