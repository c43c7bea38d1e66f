"""The ``runs`` row: who ran what, with which software (one builder for every kind of run).

Recording, replay and the importers all describe their run here, so the columns mean the
same whatever made the run.
"""

from __future__ import annotations

import json
import platform
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NamedTuple, Protocol

from mmina import __version__
from mmina.redaction.redact import redact_configured

VERDICTS_KEY = "verdicts_with_episodes"
"""The key of a run's configuration that lists the evaluators whose verdicts are stored with
each of its episodes (the recorder's, ``mmina.recorder.verdicts``): ``store verify`` reports a
committed episode without them and ``record --resume`` adds them (a crash between an
episode's commit and its verdicts)."""


def verdicts_expected(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The evaluators a run's configuration says every committed episode has verdicts of."""
    value = config.get(VERDICTS_KEY)
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


class SuiteRef(NamedTuple):
    """Which tasks a run ran: the suite's name, where it came from, and its checksum."""

    name: str
    path: str
    sha256: str


class NamedSuite(Protocol):
    """Anything that says which tasks a run ran (a :class:`SuiteRef`, a loaded ``TaskSuite``)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def sha256(self) -> str: ...


def run_row(
    agent: str,
    model: str | None,
    config: Mapping[str, Any],
    suite: NamedSuite,
    task_count: int,
    browser_version: str | None = None,
    viewport: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    """The ``runs`` row of a run starting now on this machine; ``browser_version`` is None for
    runs that drove no browser (imports), and then so is the Playwright version. Redacted:
    a configuration may hold an endpoint's ``user:PASS@`` or a key (see ``redact.py``)."""
    return redact_configured(
        {
            "created_at": datetime.now(UTC),
            "agent": agent,
            "model": model,
            "config_json": json.dumps(dict(config), sort_keys=True, default=str),
            "task_suite": suite.name,
            "task_suite_path": suite.path,
            "task_suite_sha256": suite.sha256,
            "task_count": task_count,
            "mmina_version": __version__,
            "python_version": platform.python_version(),
            "playwright_version": _playwright_version() if browser_version is not None else None,
            "browser_version": browser_version,
            "viewport_width": viewport[0],
            "viewport_height": viewport[1],
            "hostname": socket.gethostname(),
        }
    )


def run_config(config_json: str | None) -> dict[str, Any]:
    """A run's ``config_json`` read back: ``{}`` when it is missing, not JSON or not an object."""
    try:
        config = json.loads(config_json or "{}")
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def _playwright_version() -> str | None:
    try:
        return version("playwright")
    except PackageNotFoundError:
        return None
