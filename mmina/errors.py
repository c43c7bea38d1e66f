"""Errors a user can cause or fix.

Library code raises these; the CLI turns them into one clear line and a non-zero exit,
so a user mistake never shows a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

INFRASTRUCTURE, AGENT = "infrastructure", "agent"
"""The values of ``episodes.error_kind``: whose failure ended an episode with an error (see
:attr:`MminaError.infrastructure`)."""


class MminaError(Exception):
    """Base of every error meant for the user; ``str(error)`` is the one-line message."""

    exit_code = 1
    infrastructure = False
    """Whether an episode this error ends failed for the infrastructure's sake (the browser or
    its driver, the store, the model endpoint), not the agent's or its task's: such an episode is
    stored with ``error_kind`` ``infrastructure``, counted in no rate, and ``record --resume``
    records its task again."""


class StoreError(MminaError):
    """The store cannot be opened, read or written."""

    infrastructure = True


class StoreNotFoundError(StoreError):
    """The store directory does not exist."""


class UnknownRunError(StoreError):
    """A run reference (an id, an unambiguous prefix of one, or ``latest``) that names no run,
    or more than one."""


class NotAStoreError(StoreError):
    """A directory exists but is not an mmina store."""


class SchemaVersionError(StoreError):
    """A file or store was written by a newer mmina than this one."""


class AlreadyExistsError(StoreError):
    """A file the store would write exists already: the store is append-only."""


class CorruptFileError(StoreError):
    """A Parquet file in the store cannot be read (its bytes are bad, or it is not what its
    place in the store says); ``reason`` says why without naming the file."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class QueryError(MminaError):
    """A SQL query failed or is not allowed (``mmina sql`` is read-only)."""


class OutputError(MminaError):
    """A file or folder a command was asked to write (``-o/--output``) cannot be written there."""


class TaskError(MminaError):
    """A task file is missing or not in the MMInA format."""


class ActionParseError(MminaError):
    """Model output or an action string does not follow the action grammar."""


class BrowserNotFoundError(MminaError):
    """No Chromium executable could be found."""


class AgentError(MminaError):
    """An agent could not be created or failed to produce an action."""


class StartPageError(MminaError):
    """A task's start page could not be opened (an unreachable site): that episode errors, the run
    goes on; ``url``, ``status`` (a 5xx) and ``error`` (Chromium's) are the evidence that the
    environment blocked the task (``mmina.tasks.blocking``)."""

    def __init__(
        self, message: str, url: str | None = None, status: int | None = None, error: str | None = None
    ) -> None:
        super().__init__(message)
        self.url, self.status, self.error = url, status, error


class MminaWarning(UserWarning):
    """Something the user should know that does not stop the command (the CLI prints it as
    one ``Warning:`` line)."""


class StoreWarning(MminaWarning):
    """A damaged file was skipped: the rest of the store still reads (``mmina store verify``)."""


DAMAGED_RUN_HINT = (
    "restore that file from a backup, or record into a new run (another --run-id); "
    "`mmina store verify` lists every damaged file (its --repair removes leftovers of writers that are "
    "gone, never damaged data)"
)
"""What to do about a run whose ``runs`` (or ``tasks``) file cannot be read: what it held is lost."""


def unreadable_file(table: str, path: object, reason: str) -> str:
    """The one wording of a damaged store file: ``the runs file PATH cannot be read (why)``."""
    return f"the {table} file {path} cannot be read ({reason})"


def first_line(exc: BaseException) -> str:
    """An exception as one line (its first), or its type name when it has no message."""
    text = str(exc)
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` with its noun in the right number: ``1 retry``, ``2 retries`` (``nouns``: the
    plural when it is not the noun and an ``s``)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def not_found(
    kind: str,
    name: str,
    where: str | None = None,
    known: Iterable[str] = (),
    see: str | None = None,
    listing: str | None = None,
) -> str:
    """How every command says that something named is not there, one wording for every kind
    (run, episode, task, evaluator, agent...): ``no run 'nightlx' in /data/store (did you mean
    'nightly'? see mmina runs)``. ``known``: the names there are, for the nearest one;
    ``listing``: what is there, said in a few words; ``see``: the command that lists them."""
    close = difflib.get_close_matches(name, [k for k in known if k != name], n=1, cutoff=0.6)
    hints = "; ".join([*([listing] if listing else []), *([f"see {see}"] if see else [])])
    guess = f"did you mean {close[0]!r}?" if close else ""
    said = " ".join(part for part in (guess, hints) if part)
    place = f" in {where}" if where else ""
    return f"no {kind} {name!r}{place}" + (f" ({said})" if said else "")


SEE_RUNS = "mmina runs"
SEE_EPISODES = 'mmina sql "select episode_id, task_id from episodes"'
SEE_TASKS = "mmina tasks list"
"""The commands that list what :func:`not_found` says is not there."""
