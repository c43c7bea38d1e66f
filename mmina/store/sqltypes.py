"""DuckDB type names of the schema's Arrow types (for typed empty views, migrations and docs)."""

from __future__ import annotations

import pyarrow as pa


def duckdb_type(arrow_type: pa.DataType) -> str:
    """The DuckDB type name of an Arrow type used in the schema (for typed empty views)."""
    if pa.types.is_list(arrow_type):
        return f"{duckdb_type(arrow_type.value_type)}[]"
    if pa.types.is_struct(arrow_type):
        fields = ", ".join(f'"{f.name}" {duckdb_type(f.type)}' for f in arrow_type)
        return f"STRUCT({fields})"
    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMP WITH TIME ZONE" if arrow_type.tz else "TIMESTAMP"
    simple = {
        pa.string(): "VARCHAR",
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.binary(): "BLOB",
    }
    return simple[arrow_type]
