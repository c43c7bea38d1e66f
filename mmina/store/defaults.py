"""Where a store is when none is named, and how long a query may run: the store's defaults
that the command line shows in its help, kept free of Arrow and DuckDB so that showing them
loads neither."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_STORE = "mmina-store"
STORE_ENV = "MMINA_STORE"
DEFAULT_TIMEOUT_S = 300.0
"""How long one ``mmina sql`` query may run (``--timeout``)."""


def resolve_store_path(option: str | os.PathLike[str] | None) -> str | Path:
    """``--store``, else ``$MMINA_STORE``, else ``./mmina-store``: a folder, or an object-store
    URL (``s3://bucket/prefix``) kept as text so that its ``//`` survives."""
    location = option or os.environ.get(STORE_ENV) or DEFAULT_STORE
    return str(location) if "://" in str(location) else Path(location)
