"""DuckDB views named after the store's tables, in a sandboxed connection (``sandbox.py``).

Each view reads an explicit list of files, the ones ``footers.py`` found readable and of
the right table, routed by the schema version in their footer: current files are read as
they are, older ones through their migrations' SQL, and all are unioned by column name.
Steps and requests of uncommitted episodes (a writer killed between renames) are filtered
out, and an episode whose row is in two files (a copied file) is shown once.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import PurePath

import duckdb

from mmina.errors import CorruptFileError, MminaError, QueryError
from mmina.store.footers import candidates, table_files
from mmina.store.migrations import chain
from mmina.store.sandbox import Sandbox, open_sandbox
from mmina.store.schema import EPISODES, TABLES, Table
from mmina.store.sqlcheck import one_line
from mmina.store.sqltypes import duckdb_type
from mmina.store.store import EPISODE_CHILDREN, Store
from mmina.tasks import HOP_BUCKETS


def bucket_sql(column: str) -> str:
    """SQL giving the hop-count bucket of ``column`` (the same rule as :func:`mmina.tasks.hop_bucket`)."""
    bounded = " ".join(f"WHEN {column} <= {most} THEN '{name}'" for name, most in HOP_BUCKETS if most is not None)
    return f"CASE {bounded} ELSE '{HOP_BUCKETS[-1][0]}' END"

CONVENIENCE_VIEWS: dict[str, tuple[str, str]] = {
    "episode_hops": (
        "One row per episode per hop (`hop` 1-based, as every table numbers hops): the hop's keyword, whether the "
        "recorder's live URL tracking saw it reached (`live_reached`) and at which step (`live_reached_step`): a "
        "progress gauge, not a verdict (verdicts: `scores` rows of level `hop`); `given` marks the hops a replayed "
        "prefix gave a hop-conditioned episode (hops 1 .. `episodes.hops_given`: reached at the reference's step, "
        "not credited to the agent).",
        """
        SELECT e.run_id, e.episode_id, e.task_id, h.hop, t.n_hops,
               t.procedure[h.hop] AS keyword,
               h.hop <= e.live_hops AS live_reached,
               CASE WHEN h.hop <= e.live_hops THEN e.hop_steps[h.hop] END AS live_reached_step,
               h.hop <= coalesce(e.hops_given, 0) AS given
        FROM episodes e
        JOIN tasks t ON t.run_id = e.run_id AND t.task_id = e.task_id
        CROSS JOIN LATERAL (SELECT unnest(range(1, e.n_hops + 1)) AS hop) h
        """,
    ),
    "hop_buckets": (
        "One row per episode with its hop-count bucket (`1`, `2-4`, `5+`) as the MMInA paper groups tasks.",
        f"""
        SELECT e.*, {bucket_sql("e.n_hops")} AS bucket
        FROM episodes e
        """,
    ),
    "step_messages": (
        "One row per message of each step's model input (`steps.model_input`): its position, the model, the "
        "role, the text (text parts joined by newlines) and the hashes of its images (blobs); steps of agents "
        "that call no model have none. Reads the blob packs, so filter by episode.",
        """
        WITH inputs AS (
            SELECT s.run_id, s.episode_id, s.step_index, json(decode(b.data)) AS doc
            FROM steps s JOIN blobs b ON b.sha256 = s.model_input
        ), listed AS (
            SELECT run_id, episode_id, step_index, json_extract_string(doc, '$.model') AS model,
                   unnest(json_extract_string(doc, '$.messages[*]')) AS message,
                   generate_subscripts(json_extract_string(doc, '$.messages[*]'), 1) - 1 AS position
            FROM inputs
        ), decoded AS (
            SELECT l.*, json(decode(m.data)) AS msg FROM listed l JOIN blobs m ON m.sha256 = l.message
        )
        SELECT run_id, episode_id, step_index, position, model, json_extract_string(msg, '$.role') AS role,
               CASE WHEN json_type(msg, '$.content') = 'VARCHAR' THEN json_extract_string(msg, '$.content')
                    ELSE array_to_string(json_extract_string(msg, '$.content[*].text'), chr(10)) END AS text,
               list_filter(json_extract_string(msg, '$.content[*].image_url.blob'), lambda x: x IS NOT NULL)
                   AS images
        FROM decoded
        """,
    ),
    "latest_scores": (
        "The current verdicts: the rows of the latest `scores` batch per (episode, evaluator); "
        "earlier batches stay in `scores`.",
        """
        SELECT * FROM scores
        QUALIFY batch_id = first_value(batch_id) OVER (PARTITION BY episode_id, evaluator
                                                       ORDER BY scored_at DESC, batch_id DESC)
        """,
    ),
    "episode_scores": (
        "One row per scored task per run and evaluator (the latest attempt; a hop-conditioned run: per task and "
        "hops given): the current task verdict (`passed`; NULL when the verdict is `n/a`: the evaluator had "
        "nothing to judge, so the task is in no rate), hops passed of `hops_total` hop verdicts, the first "
        "failed hop (1-based), the hop-count `bucket` and the episode's stop reason, steps, tokens and cost; what "
        "`mmina report` is computed from. Hops a prefix gave (1 .. `hops_given`) are left out of the hop "
        "counts, whichever evaluator wrote rows for them.",
        f"""
        SELECT e.run_id, e.episode_id, e.task_id, e.attempt, s.evaluator, e.n_hops,
               {bucket_sql("e.n_hops")} AS bucket,
               s.verdict, CASE WHEN s.verdict <> 'n/a' THEN s.verdict = 'pass' END AS passed,
               coalesce(h.hops_passed, 0) AS hops_passed, coalesce(h.hops_total, 0) AS hops_total,
               h.first_failed_hop, e.status, e.stop_reason, e.final_answer, e.n_steps,
               e.prompt_tokens, e.completion_tokens, e.cost_usd, e.hops_given, e.prefix_faithful
        FROM episodes e
        JOIN latest_scores s ON s.episode_id = e.episode_id AND s.level = 'task'
        LEFT JOIN (SELECT l.episode_id, l.evaluator, count(*) FILTER (WHERE l.verdict = 'pass') AS hops_passed,
                          count(*) AS hops_total,
                          min(l.hop) FILTER (WHERE l.verdict <> 'pass') AS first_failed_hop
                   FROM latest_scores l JOIN episodes g ON g.episode_id = l.episode_id
                   WHERE l.level = 'hop' AND l.hop > coalesce(g.hops_given, 0)
                   GROUP BY l.episode_id, l.evaluator) h
               ON h.episode_id = e.episode_id AND h.evaluator = s.evaluator
        QUALIFY row_number() OVER (PARTITION BY e.run_id, e.task_id, e.hops_given, e.prefix_steps, s.evaluator
                                   ORDER BY e.attempt DESC, e.started_at DESC) = 1
        """,
    ),
}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _read_parquet(table: Table, uris: list[str]) -> str:
    hive = ", hive_partitioning = true, hive_types = {'run_id': 'VARCHAR'}" if table.partitioned_by_run else ""
    filename = ", filename = true" if table is EPISODES else ""
    return f"SELECT * FROM read_parquet([{', '.join(map(_quote, uris))}]{hive}{filename})"


def _empty(table: Table) -> str:
    columns = [f"NULL::{duckdb_type(c.type)} AS \"{c.name}\"" for c in table.columns]
    if table.partitioned_by_run:
        columns.append('NULL::VARCHAR AS "run_id"')
    return f"SELECT {', '.join(columns)} WHERE false"


def table_sql(table: Table, files: dict[int, list[str]], store: Store) -> str:
    """The SELECT behind one table's view over ``files`` (``mmina://`` names by schema version)."""
    if not files:
        return _empty(table)
    parts = []
    for version, uris in sorted(files.items()):
        sql = _read_parquet(table, uris)
        for migration in chain(table, version, store.migrations):
            sql = migration.view_sql.format(inner=sql)
        parts.append(sql)
    body = " UNION ALL BY NAME ".join(f"({p})" for p in parts)
    columns = ", ".join(f'"{name}"' for name in _view_columns(table))
    if table is EPISODES:  # one row per episode, the first file's, even if a file was copied
        return f"SELECT {columns} FROM ({body}) QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY filename) = 1"
    where = " WHERE episode_id IN (SELECT episode_id FROM episodes)" if table in EPISODE_CHILDREN else ""
    return f"SELECT {columns} FROM ({body}){where}"


def _view_columns(table: Table) -> list[str]:
    """The schema's column order, whichever versions of files are present."""
    return [*table.column_names, *(["run_id"] if table.partitioned_by_run else [])]


def views_sql(store: Store, sandbox: Sandbox, listed: dict[Table, list[PurePath]],
              checked: Collection[Table]) -> dict[str, str]:
    """CREATE VIEW statements for every table and convenience view, over the ``listed`` files
    (those of ``checked`` tables found readable)."""
    files = table_files(store, sandbox, listed, checked)
    statements = {t.name: f"CREATE OR REPLACE VIEW {t.name} AS {table_sql(t, files[t.name], store)}"
                  for t in TABLES.values()}
    statements |= {name: f"CREATE OR REPLACE VIEW {name} AS {sql.strip()}" for name, (_, sql) in CONVENIENCE_VIEWS.items()}
    return statements


@dataclass
class StoreConnection:
    """A sandboxed DuckDB connection (or a cursor of one) with the store's views; ``broken``
    maps views that could not be created to the reason, so only queries that use them fail."""

    connection: duckdb.DuckDBPyConnection
    broken: dict[str, MminaError] = field(default_factory=dict)
    sandbox: Sandbox | None = None
    """The sandbox this connection owns (None for a cursor), closed with it."""

    def close(self) -> None:
        if self.sandbox is None:
            self.connection.close()
        else:
            self.sandbox.close()


def used_tables(sql: str) -> list[Table]:
    """The tables ``sql`` may read, directly or through the views: every name of a view among
    its tokens (identifiers, keywords, strings: ``query_table('steps')``), so a name too many
    at worst, with the tables those views read (the convenience views' tables; ``episodes``
    for ``steps`` and ``requests``, whose views keep committed episodes only: left unchecked,
    an unreadable ``episodes`` file broke them); all tables when it does not tokenize."""
    try:
        tokens = {text.strip().strip("'\"").lower() for text in _token_texts(sql)}
    except (duckdb.Error, TypeError):  # not SQL, or not UTF-8: refused later, whatever it reads
        return list(TABLES.values())
    names = {name for name in [*TABLES, *CONVENIENCE_VIEWS] if name in tokens}
    for name in [n for n in CONVENIENCE_VIEWS if n in names]:
        names |= {t.name for t in used_tables(CONVENIENCE_VIEWS[name][1])}
    if any(t.name in names for t in EPISODE_CHILDREN):  # their views keep the committed episodes' rows
        names.add(EPISODES.name)
    return [table for table in TABLES.values() if table.name in names]


def _token_texts(sql: str) -> list[str]:
    tokens = duckdb.tokenize(sql)
    ends = [start for start, _ in tokens[1:]] + [len(sql)]
    return [sql[start:end] for (start, _), end in zip(tokens, ends)]


def connect(store: Store, runs: Collection[str] | None = None, only: Collection[str] | None = None,
            sql: str | None = None) -> StoreConnection:
    """An in-memory DuckDB connection over the store that can read its files and nothing else
    (see ``sandbox.py``); an object store is read through the same fsspec filesystem mmina
    uses (credentials from the environment), so DuckDB needs no httpfs extension.

    With ``runs``, the run-partitioned views read only those runs' folders: the same rows for
    those runs as an unscoped connection gives (every row of a run lives in its folder), at
    a cost that no longer grows with the rest of the store. With ``only``, just the views named
    are made (e.g. for a server that keeps a connection per run). With ``sql`` (what will run),
    only the tables it uses have every file's footer checked (see ``footers.py``)."""
    listed = candidates(store, runs)
    checked = used_tables(sql) if sql is not None else used_tables(" ".join(only)) if only is not None \
        else list(TABLES.values())
    sandbox = open_sandbox(store.backend, [path for paths in listed.values() for path in paths])
    db = StoreConnection(sandbox.connection, sandbox=sandbox)
    try:
        for name, statement in views_sql(store, sandbox, listed, checked).items():
            if only is not None and name not in only:
                continue
            try:
                db.connection.execute(statement)
            except duckdb.Error as exc:
                db.broken[name] = read_error(exc)
    except BaseException:
        db.close()
        raise
    return db


def read_error(exc: duckdb.Error) -> MminaError:
    """A DuckDB error as one line: unreadable store files point to ``store verify``."""
    message = one_line(exc)
    lowered = message.lower()
    if "parquet" in lowered and any(w in lowered for w in ("corrupt", "magic", "too small", "no magic", "invalid")):
        return CorruptFileError(f"cannot read the store: {message} (run `mmina store verify`)")
    if isinstance(exc, duckdb.PermissionException) or message.startswith("PermissionError"):
        return QueryError(f"mmina sql reads the store's own files only, and never writes: {message}")
    return QueryError(message)
