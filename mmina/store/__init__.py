"""The trajectory store: versioned Parquet tables, blob packs, DuckDB views and SQL."""
from mmina.store.store import DEFAULT_STORE, STORE_ENV, EpisodeWriter, Store, resolve_store_path

__all__ = ["DEFAULT_STORE", "STORE_ENV", "EpisodeWriter", "Store", "resolve_store_path"]
