"""Store rows as JSON and back, typed by the table's schema: what an mmina WARC carries so that
``mmina import warc`` can restore the run, its tasks, episodes and steps exactly.

Timestamps become ISO 8601 strings (UTC, microseconds) and come back as aware datetimes;
every other value of the store's tables is JSON already (strings, numbers, booleans, lists and
structs of them). Columns a reader does not know are dropped, columns it misses are null.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from mmina.store.schema import Table

Row = dict[str, Any]


def row_to_json(row: Row, leave_out: tuple[str, ...] = ()) -> Row:
    """``row`` with its datetimes as ISO strings, without the columns in ``leave_out``."""
    return {key: _plain(value) for key, value in row.items() if key not in leave_out}


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return moment.astimezone(UTC).isoformat(timespec="microseconds")
    return value


def row_from_json(table: Table, data: Row) -> Row:
    """A row of ``table`` from its JSON form (only the table's columns; timestamps parsed)."""
    return {column.name: _typed(column.type, data.get(column.name)) for column in table.columns}


def _typed(kind: pa.DataType, value: Any) -> Any:
    if value is None or not pa.types.is_timestamp(kind):
        return value
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
