"""Package namespaces that import their modules on first use (PEP 562).

``from mmina.store import Store`` keeps working, but importing any module of the package no
longer loads Arrow or DuckDB through the package's ``__init__``: the command line shows its
help, and a light module such as ``mmina.store.defaults`` is imported, without them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``modules`` maps each exported name to the
    submodule (relative to ``package``) that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{modules[name]}"), name)

    return __getattr__
