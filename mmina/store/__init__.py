"""The trajectory store: versioned Parquet tables, blob packs, DuckDB views and SQL.

The names below are imported on first use (:mod:`mmina.lazy`): a module of the package, e.g.
``mmina.store.defaults``, can be imported without loading Arrow.
"""

from typing import TYPE_CHECKING

from mmina.lazy import lazy_names

if TYPE_CHECKING:
    from mmina.store.defaults import DEFAULT_STORE, STORE_ENV, resolve_store_path
    from mmina.store.store import Store
    from mmina.store.writers import BatchWriter, EpisodeWriter

__all__ = ["DEFAULT_STORE", "STORE_ENV", "BatchWriter", "EpisodeWriter", "Store", "resolve_store_path"]
__getattr__ = lazy_names(
    __name__,
    {
        "DEFAULT_STORE": "defaults",
        "STORE_ENV": "defaults",
        "resolve_store_path": "defaults",
        "Store": "store",
        "BatchWriter": "writers",
        "EpisodeWriter": "writers",
    },
)
