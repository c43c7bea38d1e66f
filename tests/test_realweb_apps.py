"""Real web applications nobody on this project wrote (issue 23): each installed from PyPI into
a virtualenv of its own, started on a free port with new random state, its scripted episode
recorded, the application restarted with new random state, and the episode replayed.

For each: the recording (by an agent that thinks before each action) went through without an
action error, and the replay has every step with URL and tree equal, no connection reaching
the restarted application, no request left unmatched, no matched request with a missing body,
every socket message said before the last observation repeated (the server's in order, the
page's by content; heartbeats and acks apart) and the replay's own socket rows stored, and no
step past its deadline.

By default one application runs (``SAMPLE``: Datasette, server-rendered pages and history
navigation, which replays the same way on a busy machine; the socket applications, whose pushes a
loaded machine can shift, are in the full set); the others are ``heavy`` (``MMINA_HEAVY=1``), and
``MMINA_REALWEB=all`` runs every one (as ``python -m bench --only realweb`` does, five times each),
``MMINA_REALWEB=gradio,trac`` the ones named.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.realweb.apps import APPS, SAMPLE
from tests.realweb.check import check
from tests.realweb.installs import INSTALL_TIMEOUT_S, _runnable

CHOSEN = os.environ.get("MMINA_REALWEB", "")
NAMES = (
    [a.name for a in APPS] if CHOSEN == "all" else (CHOSEN.split(",") if CHOSEN else [a.name for a in APPS])
)
CASES = [name if CHOSEN or name in SAMPLE else pytest.param(name, marks=pytest.mark.heavy) for name in NAMES]


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 900)  # a first run installs the application (cached after)
@pytest.mark.parametrize("name", CASES)
def test_each_application_replays_exactly_after_a_restart_with_new_state(tmp_path: Path, name: str) -> None:
    outcome = check(tmp_path, tuple(a for a in APPS if a.name == name))[0]
    steps = len(outcome.app.script) + 1
    assert [s["action_error"] for s in outcome.recorded] == [None] * steps
    replay = outcome.replay
    assert (replay.status, replay.error) == ("completed", None)
    diffs = [
        (s.step_index, s.recorded_url, s.replayed_url, s.tree_diff) for s in replay.steps if not s.faithful
    ]
    assert replay.fidelity == 1.0, diffs
    assert outcome.live_connections == 0, "a replay must not reach the live application"
    assert replay.requests.unmatched == 0 and replay.unmatched_urls == ()
    assert replay.requests.missing_body == 0 and replay.requests.failed == 0
    assert all(s.faithful for s in replay.sockets), [s.first_difference for s in replay.sockets]
    assert len(outcome.replayed_sockets) == len(replay.sockets)  # the replay stores its own socket rows
    assert all(row["response_body"] for row in outcome.replayed_sockets)
    assert outcome.slowest_share < 1.0


def test_the_applications_are_of_different_kinds() -> None:
    assert len(APPS) >= 9 and len({a.kind for a in APPS}) == len(APPS)
    assert all(6 <= len(a.script) + 1 <= 10 for a in APPS)
    assert all(0 < step["think"] for a in APPS for step in a.task(1)["reference_script"])
    assert all(
        "id" not in step.get("target", {}) for a in APPS for step in a.script
    )  # found by role and name


def test_a_cached_virtualenv_whose_scripts_name_a_gone_folder_is_made_again(tmp_path: Path) -> None:
    """A virtualenv made through a link that was removed since (a worktree's ``.realweb``) has scripts
    naming an interpreter that is gone: the cache must not take it as ready."""
    made = tmp_path / "venv" / "bin"
    made.mkdir(parents=True)
    (made / "pip").write_text(f"#!{tmp_path / 'gone' / 'bin' / 'python3.11'}\nimport pip\n")
    assert not _runnable(made)
    (made / "pip").write_text(f"#!{sys.executable}\nimport pip\n")
    assert _runnable(made)
    assert not _runnable(tmp_path / "nothing")
