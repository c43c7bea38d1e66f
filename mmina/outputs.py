"""Where a command or an export may write its output: checked before any work is done, so a
bad path is one line of error and nothing computed is lost (``report -o``, ``view -o``,
``export ... -o``)."""

from __future__ import annotations

import os
from pathlib import Path

from mmina.errors import OutputError


def output_path(path: Path, folder: bool = False) -> Path:
    """``path`` when a command can write its output there (a file, or with ``folder`` a folder
    it makes, parents and all); else one line saying why, before any work is done or lost."""
    if folder:
        if path.exists() and not path.is_dir():
            raise OutputError(f"cannot write into {path}: it is a file, not a folder")
        return path
    parent = path.parent
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder (name a file in it)")
    if not parent.is_dir():
        raise OutputError(f"cannot write {path}: no folder {parent}")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"cannot write {path}: the folder {parent} is not writable")
    return path
