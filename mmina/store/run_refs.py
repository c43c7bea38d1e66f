"""How a run is named on the command line: its id, an unambiguous prefix of it, or ``latest``.

Run ids are long (``20261127-101502-oracle-d29014``); a prefix that names one run is enough, and
``latest`` is the run created last. An id that exists is always taken as itself, even when it
is also a prefix of another id (or is the word ``latest``).
"""

from __future__ import annotations

from collections.abc import Sequence

from mmina.errors import SEE_RUNS, UnknownRunError, not_found

LATEST = "latest"
LISTED = 5
"""Run ids an error message names before saying how many more there are."""


def resolve_run_ref(ref: str, runs: Sequence[str], where: object) -> str:
    """The run id ``ref`` names among ``runs`` (oldest first) of the store at ``where``."""
    if ref in runs:
        return ref
    if ref == LATEST and runs:
        return runs[-1]
    matches = [run for run in runs if ref and run.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UnknownRunError(
            f"run {ref!r} is ambiguous in {where}: it starts {len(matches)} run ids "
            f"({_listing(matches)}); give more of the id"
        )
    raise UnknownRunError(not_found("run", ref, str(where), runs, SEE_RUNS, _known(runs)))


def _known(runs: Sequence[str]) -> str:
    return f"runs: {_listing(list(reversed(runs)))}" if runs else "it holds no run"


def _listing(runs: Sequence[str]) -> str:
    more = len(runs) - LISTED
    return ", ".join(runs[:LISTED]) + (f" and {more} more" if more > 0 else "")
