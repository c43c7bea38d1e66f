"""The third-party software the default test run installs, installed from the run's start.

The real-web and interchange tests install what they test against (Datasette, pywb, inspect-ai,
``datasets``, Harbor, npm packages) into the real-web cache the first time
(``tests/realweb/installs.py``), which on a fresh checkout is a minute or more of a worker's time
spent waiting on pip and npm in the middle of the run. When the whole default suite runs, the
run's main process starts those installs on a thread as it begins (``tests/conftest.py``); a test
that needs one before it is done waits for it on the install's lock, and everything else goes on
meanwhile. Installs run one at a time, the order being the order tests are likely to need them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from tests.interchange_tools import HAR_VALIDATOR, datasets_bin, harbor_bin, inspect_bin, pywb_bin
from tests.realweb.apps import APPS, SAMPLE
from tests.realweb.clock_page import LIBRARIES
from tests.realweb.installs import InstallFailed, app_venv, npm_packages
from tests.realweb.npm_corpus import SAMPLE_FOLDER, SAMPLE_PACKAGES

Install = Callable[[], Path]


def default_run_installs() -> list[Install]:
    """What the default run needs, slowest first."""
    sampled = [a for a in APPS if a.name in SAMPLE and a.requirements]
    return [
        inspect_bin,
        pywb_bin,
        *[lambda app=app: app_venv(app.venv or app.name, app.requirements) for app in sampled],
        lambda: npm_packages(SAMPLE_PACKAGES, SAMPLE_FOLDER),
        lambda: npm_packages(LIBRARIES),
        lambda: npm_packages(HAR_VALIDATOR, name="npm-har-validator"),
        datasets_bin,
        harbor_bin,
    ]


def start() -> threading.Thread:
    """Install everything of :func:`default_run_installs` on a thread of its own (join it before
    the process ends: an install cut short is done again by the test that needs it)."""
    thread = threading.Thread(target=_install_all, name="prewarm-installs", daemon=True)
    thread.start()
    return thread


def _install_all() -> None:
    for install in default_run_installs():
        try:
            install()
        except (InstallFailed, OSError):
            continue  # the test that needs it installs it again and reports the failure
