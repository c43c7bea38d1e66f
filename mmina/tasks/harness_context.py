"""A task's browser context as the official harness sets it up: its logged-in session
(``storage_state``) and its position (``geolocation``). Pure: standard library only.

The official MMInA harness (``browser_env/envs.py`` of shulin16/MMInA at 9b0a707, lines 153-166,
the same in WebArena's ``browser_env/envs.py`` at f62e0b9, lines 138-147) reads both fields of
the task file and hands them to Playwright as they are::

    storage_state = instance_config.get("storage_state", None)
    geolocation = instance_config.get("geolocation", None)
    self.context = self.browser.new_context(viewport=..., storage_state=storage_state,
                                            geolocation=geolocation, device_scale_factor=1)

``storage_state`` is the path of a file Playwright wrote with ``context.storage_state(path=...)``
(cookies, and ``localStorage`` by origin): the session of a user who logged in. The harness runs
from its repository's root, so the release's ``./.auth/shopping_state.json`` is read from there;
mmina looks for a relative path in the current folder first, then in the task file's folder and
each folder above it (a suite kept inside a copy of that repository finds its ``.auth``). A file
found nowhere leaves the episode logged out, with a warning when the suite is read (the release
names files nobody has but its authors); a file that is there but is no storage state refuses
the task. ``geolocation`` is ``{"latitude", "longitude", "accuracy"?}`` or null.

One difference, on purpose: the harness sets the position without granting the page the
permission to read it, so a page that asks is refused (Chromium: "User denied Geolocation");
every task of the release has ``null`` there, so no published number depends on it. mmina
grants the permission when a task gives a position, so the page sees the position the task says.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmina.errors import TaskError

STATE_FIELD = "storage_state"
GEOLOCATION_FIELD = "geolocation"
MAX_STATE_BYTES = 64 * 2**20
"""A storage state is a few kB of cookies and storage; a bigger file is not one."""


@dataclass(frozen=True)
class Geolocation:
    latitude: float
    longitude: float
    accuracy: float = 0.0


@dataclass(frozen=True)
class HarnessContext:
    """What a task asks of its browser context: a storage state (Playwright's format, read from
    its file) and a position; ``None`` for what it does not ask (or a state file not found)."""

    storage_state: dict[str, Any] | None = None
    geolocation: Geolocation | None = None
    state_file: Path | None = None


def harness_context(raw: dict[str, Any], folder: str = "") -> HarnessContext:
    """The context a task's JSON asks for; ``folder`` is the task file's (see the module).
    Raises :class:`TaskError` for a state file that cannot be read as one, or a bad position."""
    found = state_file(raw, folder)
    return HarnessContext(read_state(found) if found else None, geolocation_of(raw), found)


def state_file(raw: dict[str, Any], folder: str = "") -> Path | None:
    """Where the task's ``storage_state`` file is (see the module), or None: no such field, or
    no such file in any of the places looked in."""
    value = raw.get(STATE_FIELD)
    if not isinstance(value, str) or not value.strip():
        return None
    return next((place for place in state_places(value.strip(), folder) if place.is_file()), None)


def state_places(value: str, folder: str = "") -> list[Path]:
    """The paths a ``storage_state`` value may name, in the order they are tried."""
    path = Path(os.path.expanduser(value))
    if path.is_absolute():
        return [path]
    bases = [Path.cwd()]
    if folder:
        start = Path(folder).resolve()
        bases += [start, *start.parents]
    return list(dict.fromkeys(base / path for base in bases))


def read_state(path: Path) -> dict[str, Any]:
    """A storage state file as Playwright takes it (``cookies`` and ``origins`` lists)."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_STATE_BYTES + 1)
    except OSError as exc:
        raise TaskError(f"{STATE_FIELD}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        state = json.loads(data.decode("utf-8-sig")) if len(data) <= MAX_STATE_BYTES else None
    except (UnicodeDecodeError, ValueError, RecursionError):
        state = None
    if not isinstance(state, dict) or not all(
        isinstance(state.get(k, []), list) for k in ("cookies", "origins")
    ):
        raise TaskError(
            f"{STATE_FIELD}: {path} is not a storage state (the JSON Playwright's "
            "context.storage_state(path=...) writes: cookies and origins)"
        )
    return {"cookies": state.get("cookies", []), "origins": state.get("origins", [])}


def geolocation_of(raw: dict[str, Any]) -> Geolocation | None:
    """The task's position (null or absent: none); :class:`TaskError` when it is not one."""
    value = raw.get(GEOLOCATION_FIELD)
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise TaskError(f"{GEOLOCATION_FIELD}: not an object with latitude and longitude")
    numbers: dict[str, Any] = {
        key: value.get(key, 0.0 if key == "accuracy" else None)
        for key in ("latitude", "longitude", "accuracy")
    }
    if not all(_is_number(n) for n in numbers.values()):
        raise TaskError(
            f"{GEOLOCATION_FIELD}: latitude and longitude (and accuracy, if given) must be numbers"
        )
    latitude, longitude, accuracy = (float(numbers[k]) for k in ("latitude", "longitude", "accuracy"))
    if not (-90 <= latitude <= 90 and -180 <= longitude <= 180 and accuracy >= 0):
        raise TaskError(
            f"{GEOLOCATION_FIELD}: latitude must be within -90..90, longitude within -180..180, "
            "accuracy at least 0"
        )
    return Geolocation(latitude, longitude, accuracy)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def context_findings(raw: dict[str, Any], folder: str = "") -> list[tuple[str, str, str]]:
    """``mmina tasks validate``'s findings about both fields as (severity, field, message): a
    state file found nowhere is a warning (the episode runs logged out), one that is no storage
    state and a bad position are errors."""
    try:
        harness_context(raw, folder)
    except TaskError as exc:
        field, _, message = str(exc).partition(": ")
        return [("error", field, message)]
    value = raw.get(STATE_FIELD)
    if value in (None, ""):
        return []
    if not isinstance(value, str):
        return [
            ("warning", STATE_FIELD, "not a path: ignored (the episode runs without a logged-in session)")
        ]
    if state_file(raw, folder) is None:
        return [
            (
                "warning",
                STATE_FIELD,
                f"{value.strip()}: no such file (looked in the current folder, the task "
                "file's folder and the folders above it): the episode runs without "
                "the logged-in session",
            )
        ]
    return []
