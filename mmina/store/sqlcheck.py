"""Which SQL ``mmina sql`` runs: reads, and only reads, as DuckDB's own parser sees them.

A statement type is not enough: DuckDB parses ``WITH x AS (COPY ... TO 'f') SELECT 1`` and
``WITH x AS (INSERT ...) SELECT ...`` as SELECT statements, and runs the write inside.
So every statement is parsed into DuckDB's syntax tree (``json_serialize_sql``) and refused
unless every query node in it is a plain read; EXPLAIN (ANALYZE runs what it explains) is
allowed around such a query only. This is the first line of defence, the one that gives a
clear message; the sandbox's read-only filesystem (``sandbox.py``) is the one that holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import duckdb

from mmina.errors import QueryError

READ_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})
"""Query nodes that only read; any other (``COPY_QUERY_NODE``, ``INSERT_QUERY_NODE`` ...) is refused."""
HIDDEN_SQL_FUNCTIONS = frozenset({"query"})
"""Table functions that run SQL given as text, which this check cannot see into."""
MAX_EXPLAIN_DEPTH = 4
ALLOWED = "only SELECT (WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, PIVOT ...) and EXPLAIN of those run"


def read_statements(connection: duckdb.DuckDBPyConnection, query: str) -> list[duckdb.Statement]:
    """The one statement of ``query`` (a list, as DuckDB gives it), checked to be a read before
    it runs; several are refused, as only one result is shown (each is checked first, so a
    write among them is refused as a write)."""
    check_text(query)
    try:
        statements = connection.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(f"invalid SQL: {one_line(exc)}") from None
    if not statements:
        raise QueryError("empty query")
    for statement in statements:
        check_statement(connection, statement.query, statement.type)
    if len(statements) > 1:
        raise QueryError(
            f"the query holds {len(statements)} statements and mmina sql shows one result: "
            "give one statement (run the others on their own, or combine them with UNION ALL or "
            "a join)"
        )
    return statements


def check_text(query: str) -> None:
    """Only text DuckDB can parse: UTF-8 (a byte that is not arrives as a surrogate)."""
    for position, char in enumerate(query):
        if 0xD800 <= ord(char) <= 0xDFFF:
            what = (
                f"byte 0x{ord(char) - 0xDC00:02x}" if 0xDC80 <= ord(char) <= 0xDCFF else f"U+{ord(char):04X}"
            )
            raise QueryError(f"the query is not valid UTF-8: {what} at character {position + 1}")


def check_statement(
    connection: duckdb.DuckDBPyConnection, text: str, kind: duckdb.StatementType, depth: int = 0
) -> None:
    if kind == duckdb.StatementType.SELECT:
        _check_tree(connection, text)
    elif kind == duckdb.StatementType.EXPLAIN and depth < MAX_EXPLAIN_DEPTH:
        inner = _explained(text)
        statements = _parse(inner)
        if len(statements) != 1:
            raise QueryError(f"mmina sql is read-only: EXPLAIN must explain one query; {ALLOWED}")
        check_statement(connection, statements[0].query, statements[0].type, depth + 1)
    else:
        name = str(kind).rsplit(".", 1)[-1]
        raise QueryError(f"mmina sql is read-only: {name} statements are not allowed; {ALLOWED}")


def _parse(text: str) -> list[duckdb.Statement]:
    try:
        return duckdb.extract_statements(text)
    except duckdb.Error as exc:
        raise QueryError(f"invalid SQL: {one_line(exc)}") from None


def _check_tree(connection: duckdb.DuckDBPyConnection, text: str) -> None:
    """Refuse a SELECT whose syntax tree holds anything but reads."""
    (serialized,) = connection.execute("SELECT json_serialize_sql($1)", [text]).fetchall()[0]
    try:
        tree = json.loads(serialized)
    except RecursionError:
        raise QueryError("mmina sql cannot check this query: it is nested too deeply") from None
    if tree.get("error"):
        raise QueryError(f"mmina sql cannot check this query: {tree.get('error_message', 'unknown error')}")
    for node in _nodes(tree):
        kind, function = node.get("type"), node.get("function_name")
        if isinstance(kind, str) and kind.endswith("_NODE") and kind not in READ_NODES:
            raise QueryError(
                f"mmina sql is read-only: a {kind.removesuffix('_NODE').replace('_QUERY', '')} "
                f"inside a query is not allowed; {ALLOWED}"
            )
        if "info_type" in node or function in HIDDEN_SQL_FUNCTIONS:
            raise QueryError(
                f"mmina sql is read-only: {function or node['info_type']} is not allowed; {ALLOWED}"
            )


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every object of a serialized syntax tree, depth first (iteratively: trees can be deep)."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _explained(text: str) -> str:
    """What an EXPLAIN statement explains: the text after ``EXPLAIN [ANALYZE] [(options)]``,
    found with DuckDB's own tokenizer (comments may sit anywhere in between)."""
    tokens = _tokens(text)
    if not tokens or tokens[0][1].lower() != "explain":
        raise QueryError("mmina sql cannot read this EXPLAIN statement")
    index = 1
    if index < len(tokens) and tokens[index][1].lower() in ("analyze", "analyse"):
        index += 1
    if index < len(tokens) and tokens[index][1] == "(":
        index = _after_parentheses(tokens, index)
    if index >= len(tokens):
        raise QueryError("mmina sql is read-only: EXPLAIN of nothing")
    return text[tokens[index][0] :]


def _tokens(text: str) -> list[tuple[int, str]]:
    """(start, text) of every token but comments; an operator's text has only its parentheses
    (the one kind of token whose parentheses nest)."""
    raw = duckdb.tokenize(text)
    ends = [start for start, _ in raw[1:]] + [len(text)]
    return [
        (start, _token_text(text[start:end].strip(), kind))
        for (start, kind), end in zip(raw, ends)
        if kind != duckdb.token_type.comment
    ]


def _token_text(text: str, kind: Any) -> str:
    if kind == duckdb.token_type.operator:
        return "".join(c for c in text if c in "()") or text
    return text if kind == duckdb.token_type.keyword else f"<{text}>"


def _after_parentheses(tokens: list[tuple[int, str]], index: int) -> int:
    depth = 0
    for position in range(index, len(tokens)):
        token = tokens[position][1]
        if set(token) <= {"(", ")"}:
            depth += token.count("(") - token.count(")")
        if depth <= 0:
            return position + 1
    raise QueryError("invalid SQL: unbalanced parentheses after EXPLAIN")


def one_line(exc: BaseException) -> str:
    """A DuckDB error as one printable line: its first, or for a Python error raised inside
    DuckDB (a traceback) the exception's own line; control characters escaped."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()] or [type(exc).__name__]
    text = lines[0]
    if text.startswith("Traceback"):
        text = next((line for line in reversed(lines) if not line.startswith((" ", "LINE"))), text)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
