"""Named, recorded schema migrations: how files of an older version are read today.

Each migration lifts one table from ``from_version`` to ``from_version + 1`` twice over:
as an Arrow function (for mmina's own reader) and as a SQL template (for the DuckDB
views, where ``{inner}`` is the older files' relation). A column added in a version gets
a migration too (:func:`added_columns`): the Arrow side fills it with nulls by itself, but
a view over only older files would not know the column at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from mmina.errors import SchemaVersionError
from mmina.store.schema import (
    EPISODES,
    JUDGE_CACHE,
    PREFIX_COLUMNS,
    REQUESTS,
    SCHEMA_VERSION,
    SCORES,
    STEPS,
    Table,
)
from mmina.store.sqltypes import duckdb_type

V6_PREFIX_COLUMNS = tuple("start_hop" if name == "hops_given" else name for name in PREFIX_COLUMNS)
"""The hop-conditioned columns as schema version 6 named them."""


@dataclass(frozen=True)
class Migration:
    table: str
    from_version: int
    description: str
    upgrade: Callable[[pa.Table], pa.Table]
    view_sql: str = "SELECT * FROM ({inner})"


def added_columns(
    table: Table, from_version: int, *names: str, renamed_since: Mapping[str, str] | None = None
) -> Migration:
    """The migration of a purely additive change: the new columns read as typed NULLs
    (``renamed_since``: the names a later version gave some of them, where their type is found)."""
    later = renamed_since or {}
    types = {c.name: c.type for c in table.columns}
    nulls = ", ".join(f'NULL::{duckdb_type(types[later.get(n, n)])} AS "{n}"' for n in names)
    return Migration(
        table.name,
        from_version,
        f"{table.name}: added {', '.join(names)}",
        upgrade=lambda data: data,
        view_sql=f"SELECT *, {nulls} FROM ({{inner}})",
    )


def renamed_and_added(
    table: Table,
    from_version: int,
    renamed: dict[str, str],
    *added: str,
    shifted: Mapping[str, int] | None = None,
) -> Migration:
    """Columns renamed (``old -> new``) and columns added (typed NULLs: unknown) in one version;
    ``shifted`` adds a number to a renamed integer column (``{"hop": 1}``: 0-based became 1-based)."""
    types = {c.name: c.type for c in table.columns}
    shift = dict(shifted or {})
    moved = ", ".join(
        f'"{old}"{f" + {shift[new]}" if new in shift else ""} AS "{new}"' for old, new in renamed.items()
    )
    nulls = "".join(f', NULL::{duckdb_type(types[n])} AS "{n}"' for n in added)
    kept = ", ".join(f'"{old}"' for old in renamed)

    def upgrade(data: pa.Table) -> pa.Table:
        data = data.rename_columns([renamed.get(name, name) for name in data.column_names])
        for name, offset in shift.items():
            if name in data.column_names:
                column = pc.add(data.column(name), pa.scalar(offset, data.column(name).type))
                data = data.set_column(data.column_names.index(name), name, column)
        return data

    changes = [
        f"{old} renamed {new}{f' (+{shift[new]})' if new in shift else ''}" for old, new in renamed.items()
    ]
    changes += [f"added {', '.join(added)}"] if added else []
    return Migration(
        table.name,
        from_version,
        f"{table.name}: {'; '.join(changes)}",
        upgrade=upgrade,
        view_sql=f"SELECT * EXCLUDE ({kept}), {moved}{nulls} FROM ({{inner}})",
    )


MIGRATIONS: tuple[Migration, ...] = (
    added_columns(STEPS, 1, "som_ms", "images_ms"),
    added_columns(STEPS, 2, "model_input", "target_box"),
    added_columns(STEPS, 3, "marks"),
    renamed_and_added(
        EPISODES,
        4,
        {"hops_completed": "live_hops"},
        "final_url",
        "final_title",
        "final_tabs",
        "final_tree_text",
        "final_screenshot",
        "final_observed_at",
    ),
    added_columns(EPISODES, 5, *V6_PREFIX_COLUMNS, renamed_since={"start_hop": "hops_given"}),
    renamed_and_added(EPISODES, 6, {"start_hop": "hops_given"}),
    renamed_and_added(
        STEPS, 6, {"hop_index": "live_hops", "hop_completed": "live_hop_completed"}, "acted_at", "frozen_ms"
    ),
    added_columns(REQUESTS, 6, "received_body_sha256", "received_body_size"),
    renamed_and_added(SCORES, 6, {"hop_index": "hop"}, shifted={"hop": 1}),
    added_columns(REQUESTS, 7, "replay_match", "replay_source_episode", "replay_source_seq"),
    added_columns(EPISODES, 7, "endpoint_retries", "endpoint_wait_s"),
    added_columns(EPISODES, 8, "error_kind", "blocked", "supersedes"),
    added_columns(SCORES, 8, "judge_json"),
    added_columns(JUDGE_CACHE, 8, "judge_json"),
    added_columns(EPISODES, 9, "random_seeding"),
    added_columns(STEPS, 10, "dispatch_ms"),
)
"""The migrations of the released schema versions, oldest first (see ``SCHEMA_VERSION``'s history)."""


def check_readable(version: int, where: str) -> None:
    """Refuse data written by a newer mmina: guessing its meaning could corrupt analyses."""
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where} has store schema version {version}, but this mmina reads up to version "
            f"{SCHEMA_VERSION}; upgrade mmina (pip install -U mmina)"
        )


def chain(table: Table, from_version: int, migrations: Sequence[Migration] = MIGRATIONS) -> list[Migration]:
    """The migrations that lift ``table`` from ``from_version`` to the current version."""
    steps = {m.from_version: m for m in migrations if m.table == table.name}
    return [steps[v] for v in range(from_version, SCHEMA_VERSION) if v in steps]


def upgrade(
    table: Table, data: pa.Table, from_version: int, migrations: Sequence[Migration] = MIGRATIONS
) -> pa.Table:
    """Apply the migration chain, then conform to the current schema (missing columns as nulls)."""
    for migration in chain(table, from_version, migrations):
        data = migration.upgrade(data)
    return conform(table, data)


def conform(table: Table, data: pa.Table) -> pa.Table:
    """Exactly the current columns, in order, with the current types."""
    columns = []
    for field in table.schema:
        if field.name in data.column_names:
            columns.append(data.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(data.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=table.schema)
