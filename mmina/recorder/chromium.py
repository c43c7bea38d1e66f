"""Which Chromium mmina runs and with what arguments.

The browser is found in this order (:func:`find_chromium`): an explicit setting (``--browser``,
``MMINA_CHROMIUM``), a headless shell (Playwright's own, then Debian's
``chromium-headless-shell``), then a full Chromium (Playwright's, then the system's). The
headless shell renders pages with the same engine as the full browser, without its UI; it is
what Playwright itself launches for headless runs, and it costs less CPU per step (measured in
``docs/performance.md``: observations, screenshots and replay fidelity are the same).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Playwright
from playwright.async_api import Error as PlaywrightError

from mmina.errors import BrowserNotFoundError

BROWSER_ENV = "MMINA_CHROMIUM"
SYSTEM_HEADLESS_SHELLS = ("/usr/lib/chromium/chromium-headless-shell",)
"""Debian's ``chromium-headless-shell`` (installed by ``.ci/setup.sh``)."""
SYSTEM_CHROMIUMS = ("/usr/lib/chromium/chromium", "/usr/lib/chromium-browser/chromium-browser")
SHELL_COMMANDS = ("chromium-headless-shell",)
SYSTEM_COMMANDS = ("chromium", "chromium-browser", "google-chrome")
PLAYWRIGHT_SHELL = (
    "chromium_headless_shell-*/chrome-*/*headless*shell",
    "chromium_headless_shell-*/*/*headless*shell",
)
"""Where Playwright keeps its own headless shell, beside its Chromium (``playwright install
chromium`` brings both; Playwright launches the shell for headless runs when it picks the browser)."""
QUIET_ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
DISABLE_FEATURES = "--disable-features="
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
)
"""The features Playwright's own ``--disable-features`` switch turns off (Playwright 1.65;
``tests/test_browser_args.py`` compares it with the installed Playwright's). Chromium keeps only
the last ``--disable-features`` on its command line, so every further feature must go into one
switch with these, never beside them."""
UNSHOWN_UI_FEATURES = ("WebUIOmniboxPopup", "WebUIOmniboxAimPopup")
"""Browser UI a headless window never shows, which Chromium loads for every context's window all
the same: the address bar's two popups are web pages of their own, two renderer processes per
context (measured: ~40 MB and ~0.5 s of CPU for every episode, more than its page costs)."""
LOCAL_NETWORK_FEATURES = ("LocalNetworkAccessChecks",)
"""Chromium's Local Network Access checks, off: a page a replay served (from the archive, so
from no address, which Chromium counts as public) that goes on live after a hand-over (``record
--prefix-run``) must reach the sites it came from, which here are local (the fixture web, an
application on 127.0.0.1): with the checks on, Chromium blocks them ("The connection is blocked
because it was initiated by a public page to connect to devices or servers on your local
network"; the kiwix viewer's search frame after a hand-over)."""
MMINA_DISABLED_FEATURES = (*UNSHOWN_UI_FEATURES, *LOCAL_NETWORK_FEATURES)
"""The features mmina turns off besides Playwright's."""


POINT_AT_CHROMIUM = (
    f": point --browser (or {BROWSER_ENV}) at a Chromium executable, e.g. /usr/lib/chromium/chromium"
)
"""What to do about a browser setting that names no Chromium."""


def find_chromium(explicit: str | None, playwright: Any) -> str:
    """An explicit setting, else a headless shell (Playwright's own, then the system's), else
    Playwright's Chromium, else the system's (``playwright``: Playwright's sync or async entry
    object). The headless shell is Chromium's old headless mode built on its own: the same
    engine, without the browser's UI, so a step costs less CPU (``docs/performance.md``)."""
    explicit = explicit or os.environ.get(BROWSER_ENV)
    if explicit:
        problem = _not_a_program(Path(explicit))
        if problem:
            raise BrowserNotFoundError(f"browser executable {explicit} {problem}{POINT_AT_CHROMIUM}")
        return explicit
    own = playwright.chromium.executable_path
    candidates = [
        *playwright_shells(own),
        *SYSTEM_HEADLESS_SHELLS,
        *[shutil.which(c) or "" for c in SHELL_COMMANDS],
        own,
        *SYSTEM_CHROMIUMS,
        *[shutil.which(c) or "" for c in SYSTEM_COMMANDS],
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise BrowserNotFoundError(
        "no Chromium found: install it (apt-get install -y chromium-headless-shell or chromium, or playwright "
        f"install chromium) or point {BROWSER_ENV} / --browser at the executable"
    )


def _not_a_program(path: Path) -> str:
    """What keeps ``path`` from being run as a program ("" when nothing does)."""
    if not path.exists():
        return "does not exist"
    if not path.is_file():
        return "is not a file (a folder?)"
    return "" if os.access(path, os.X_OK) else "is not executable (a file that may not be run)"


def playwright_shells(own_chromium: str) -> list[str]:
    """Playwright's headless shells beside its Chromium (``.../ms-playwright/chromium-N/...``)."""
    parts = Path(own_chromium).parts if own_chromium else ()
    folders = [Path(*parts[:i]) for i, part in enumerate(parts) if part.startswith("chromium-")]
    if not folders:
        return []
    return sorted(str(p) for pattern in PLAYWRIGHT_SHELL for p in folders[-1].glob(pattern) if p.is_file())


def is_headless_shell(executable: str) -> bool:
    """Whether the executable is a headless shell (what ``runs.browser`` notes beside the version)."""
    return "headless" in Path(executable).name and "shell" in Path(executable).name


async def launch_chromium(
    playwright: Playwright, executable: str, extra_args: tuple[str, ...], back_forward_cache: bool
) -> Browser:
    """Chromium with mmina's arguments (see :func:`launch_args`); Playwright's own
    ``--disable-features`` switch is replaced by mmina's, which includes it."""
    ignored = [DISABLE_FEATURES + ",".join(PLAYWRIGHT_DISABLED_FEATURES)]
    return await playwright.chromium.launch(
        executable_path=executable,
        args=launch_args(extra_args),
        ignore_default_args=[*ignored, "--disable-back-forward-cache"] if back_forward_cache else ignored,
    )


def launch_args(extra_args: tuple[str, ...]) -> list[str]:
    """Chromium's arguments beyond Playwright's: quiet ones, the user's, and one
    ``--disable-features`` switch that takes Playwright's features, ``MMINA_DISABLED_FEATURES``
    and the user's own ``--disable-features`` together (in place of Playwright's, see :func:`launch_chromium`)."""
    features = [*PLAYWRIGHT_DISABLED_FEATURES, *MMINA_DISABLED_FEATURES]
    others = []
    for arg in extra_args:
        if arg.startswith(DISABLE_FEATURES):
            features += [f for f in arg[len(DISABLE_FEATURES) :].split(",") if f]
        else:
            others.append(arg)
    return [*QUIET_ARGS, *others, DISABLE_FEATURES + ",".join(dict.fromkeys(features))]


async def shut_down(playwright: Playwright, browser: Browser) -> None:
    try:
        if browser.is_connected():
            await browser.close()
    except PlaywrightError:
        pass  # the browser or Playwright's driver died: nothing left to close
    finally:
        try:
            await playwright.stop()
        except PlaywrightError:
            pass


def launch_failure(executable: str, error: str) -> str:
    """Why Chromium did not start (Playwright's first line, ``error``), and what to do: a program
    that is no Chromium exits before Playwright reaches it, which Playwright calls "closed"."""
    if executable and ("has been closed" in error or "Browser closed" in error):
        return (
            f"the browser {executable} could not be started: it exited before Playwright could connect "
            f"to it (is it a Chromium executable?){POINT_AT_CHROMIUM}"
        )
    return f"cannot start Chromium{' ' + executable if executable else ''}: {error}"
