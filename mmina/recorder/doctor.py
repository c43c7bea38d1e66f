"""``mmina doctor``: what this machine has of what mmina needs, and how to get what it lacks.

Each check is one :class:`Check`: the installed package and its data (built-in tasks, the
fixture web, serve's pages), the browser (found, and launched headless with mmina's own
arguments), kiwix-serve (found and runs; only the fixture web's Wikipedia viewer needs it), a
store (opens, its schema version, damage as ``mmina store verify`` finds it) and a model
endpoint (the same one-token chat completion ``record --agent openai`` sends before its first
episode, :func:`mmina.agents.endpoint.check_endpoint`). A check that fails says how to mend it;
``required`` says whether its failure makes the command fail: the browser always, a store or a
model only when one was named.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from mmina import __version__
from mmina.agents.settings import AgentSettings
from mmina.errors import BrowserNotFoundError, MminaError, StoreNotFoundError, first_line, plural
from mmina.model_client import API_KEY_ENV
from mmina.tasks import builtin_suite_path

OK, MISSING, FAILED, SKIPPED = "ok", "missing", "failed", "skipped"
BROWSER_FIX = (
    "apt-get install -y chromium (or chromium-headless-shell; elsewhere: python -m playwright install "
    "chromium), or point --browser PATH / $MMINA_CHROMIUM at a Chromium executable"
)
KIWIX_FIX = "apt-get install -y kiwix-tools"
KIWIX_USE = "only the fixture web's Wikipedia viewer (the kiwix hops of the built-in tasks) needs it"
ENDPOINT_FIX = (
    f"--base-url URL (or $OPENAI_BASE_URL; default OpenAI's), ${API_KEY_ENV} (any non-empty value for a "
    "local server) and --model NAME"
)
LAUNCH_S = 60.0
"""The most the browser may take to start and open a page (a busy two-core machine: seconds)."""
VERSION_S = 20.0
ENDPOINT_DEADLINE_S = 20.0
ENDPOINT_RETRIES = 1
"""The endpoint check's deadline and retries: a doctor answers quickly (a run retries more)."""


class LaunchFailed(MminaError):
    """A browser was found but did not start headless and open a page."""


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    status: str
    """``ok``, ``missing`` (not there), ``failed`` (there, but does not work) or ``skipped``."""
    detail: str
    fix: str = ""
    """How to get or mend it (empty when nothing is to be done)."""
    required: bool = True
    """Whether a ``missing`` or ``failed`` makes the doctor fail."""

    @property
    def failing(self) -> bool:
        return self.required and self.status in (MISSING, FAILED)


@dataclass(frozen=True)
class DoctorSettings:
    """What to check besides the machine: which browser, store and endpoint."""

    browser: str | None = None
    store: str | None = None
    store_named: bool = False
    """Whether the store was named (``--store``, ``$MMINA_STORE``): then it must be there."""
    base_url: str | None = None
    model: str | None = None


CHECKS = ("mmina", "browser", "kiwix-serve", "store", "endpoint")
"""The checks by name, in the order a user meets the need (install, record, store, model)."""


def diagnose(settings: DoctorSettings, only: tuple[str, ...] = ()) -> list[Check]:
    """The checks named in ``only`` (every one when empty), in the order of :data:`CHECKS`."""
    run = {
        "mmina": check_package,
        "browser": lambda: check_browser(settings.browser),
        "kiwix-serve": check_kiwix,
        "store": lambda: check_store(settings.store, settings.store_named),
        "endpoint": lambda: check_model(settings.base_url, settings.model),
    }
    return [run[name]() for name in CHECKS if not only or name in only]


def check_package() -> Check:
    """mmina itself and the data a wheel must carry: the built-in tasks, the fixture web, serve's pages."""
    python = ".".join(map(str, sys.version_info[:3]))
    head = f"{__version__} (Python {python}) at {Path(__file__).resolve().parents[1]}"
    try:
        tasks = len(list(builtin_suite_path().rglob("*.json")))
        official = len(list(Path(str(resources.files("mmina.fixtures") / "tasks_official")).rglob("*.json")))
        web = (resources.files("mmina.fixtures") / "web" / "server.py").is_file()
    except ModuleNotFoundError:
        tasks, official, web = 0, 0, False
    static = resources.files("mmina.serve") / "static"
    pages = [name for name in ("index.html", "app.js", "app.css") if not (static / name).is_file()]
    lacking = [
        *(["built-in tasks"] if not tasks else []),
        *(["official-shaped tasks"] if not official else []),
        *(["the fixture web"] if not web else []),
        *([f"serve's {', '.join(pages)}"] if pages else []),
    ]
    if lacking:
        fix = "reinstall mmina from a wheel built from the repository (pip install mmina-*.whl)"
        return Check("mmina", FAILED, f"{head} lacks {', '.join(lacking)}", fix)
    found = f"{plural(tasks, 'built-in task')}, {official} official-shaped, the fixture web, serve's pages"
    return Check("mmina", OK, f"{head}: {found}")


def check_browser(explicit: str | None) -> Check:
    """A Chromium found as a recording finds it, started headless, a page opened in it."""
    try:
        executable, version, seconds = asyncio.run(asyncio.wait_for(_launch(explicit), LAUNCH_S))
    except BrowserNotFoundError as exc:
        return Check("browser", MISSING, first_line(exc), BROWSER_FIX)
    except LaunchFailed as exc:
        return Check("browser", FAILED, first_line(exc), BROWSER_FIX)
    except TimeoutError:
        return Check("browser", FAILED, f"Chromium did not start within {LAUNCH_S:g} s", BROWSER_FIX)
    return Check(
        "browser", OK, f"{executable} ({version}) starts headless and opens a page in {seconds:.1f} s"
    )


async def _launch(explicit: str | None) -> tuple[str, str, float]:
    """The executable, its version and the seconds it took to start and open a blank page."""
    from playwright.async_api import async_playwright

    from mmina.recorder.chromium import find_chromium, launch_chromium, shut_down

    started = time.perf_counter()
    playwright = await async_playwright().start()
    try:
        executable = find_chromium(explicit, playwright)
    except BaseException:
        await playwright.stop()
        raise
    if not os.access(executable, os.X_OK):
        await playwright.stop()
        raise LaunchFailed(f"{executable} is not an executable file (is it a Chromium?)")
    browser = None
    try:
        browser = await launch_chromium(playwright, executable, (), False)
        page = await browser.new_page()
        await page.goto("about:blank")
        return executable, f"{browser.browser_type.name} {browser.version}", time.perf_counter() - started
    except Exception as exc:  # noqa: BLE001 - Playwright's errors: no Chromium, a driver that died
        raise LaunchFailed(f"{executable} did not start as a headless Chromium: {first_line(exc)}") from None
    finally:
        if browser is None:
            await playwright.stop()
        else:
            await shut_down(playwright, browser)


def check_kiwix() -> Check:
    """kiwix-serve on the PATH and running (``--version``); never required."""
    found = shutil.which("kiwix-serve")
    if found is None:
        return Check("kiwix-serve", MISSING, f"not found on the PATH; {KIWIX_USE}", KIWIX_FIX, required=False)
    try:
        done = subprocess.run(
            [found, "--version"], capture_output=True, text=True, timeout=VERSION_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(
            "kiwix-serve", FAILED, f"{found} does not run: {first_line(exc)}", KIWIX_FIX, required=False
        )
    version = next((line.strip() for line in done.stdout.splitlines() if line.strip()), "")
    if done.returncode != 0 or not version:
        return Check(
            "kiwix-serve",
            FAILED,
            f"{found} --version failed (exit {done.returncode})",
            KIWIX_FIX,
            required=False,
        )
    return Check("kiwix-serve", OK, f"{found} ({version}); {KIWIX_USE}", required=False)


def check_store(location: str | None, named: bool) -> Check:
    """The store opens, its schema version is one this mmina reads, and ``verify`` finds no damage."""
    from mmina.store import Store
    from mmina.store.defaults import resolve_store_path
    from mmina.store.inspect import store_info, verify_store
    from mmina.store.schema import SCHEMA_VERSION

    path = resolve_store_path(location)
    try:
        store = Store.open(path)
    except StoreNotFoundError as exc:
        if not named:
            return Check(
                "store",
                SKIPPED,
                f"no store at {path} yet",
                "`mmina record` makes one; --store names another",
                required=False,
            )
        return Check("store", MISSING, first_line(exc), "`mmina record --store DIR` makes one")
    except MminaError as exc:
        return Check("store", FAILED, first_line(exc), "--store DIR|URL names another store", required=named)
    try:
        info = store_info(store)
        report = verify_store(store)
    except MminaError as exc:  # a store of a newer mmina, an object store that refuses us
        return Check(
            "store", FAILED, f"{path}: {first_line(exc)}", "`mmina store verify` says more", required=named
        )
    head = (
        f"{store.root}: schema version {info.schema_version} (this mmina writes {SCHEMA_VERSION}), "
        f"{plural(info.runs, 'run')}, {plural(info.episodes, 'episode')}, "
        f"{plural(report.files_checked, 'file')} read"
    )
    if not report.ok:
        kinds = sorted({problem.kind for problem in report.problems})
        return Check(
            "store",
            FAILED,
            f"{head}: {plural(len(report.problems), 'problem')} ({', '.join(kinds)})",
            f"`mmina store verify --store {store.root}` lists them; --repair removes leftovers",
            required=named,
        )
    return Check("store", OK, f"{head}, no damage", required=named)


def check_model(base_url: str | None, model: str | None) -> Check:
    """The endpoint answers a one-token chat completion for ``model`` (skipped without a model:
    there is nothing to ask for; required once one is named)."""
    from mmina.agents.endpoint import OPENAI_URL, check_endpoint

    if not model:
        where = f"endpoint {base_url} set, " if base_url else ""
        return Check(
            "endpoint",
            SKIPPED,
            f"{where}no --model to ask it for; only --agent openai and the LLM judges need an endpoint",
            ENDPOINT_FIX,
            required=False,
        )
    settings = AgentSettings(
        model=model, base_url=base_url, model_deadline_s=ENDPOINT_DEADLINE_S, max_retries=ENDPOINT_RETRIES
    )
    try:
        found = check_endpoint(settings)
    except MminaError as exc:
        return Check("endpoint", FAILED, first_line(exc), ENDPOINT_FIX)
    return Check(
        "endpoint",
        OK,
        f"{found.base_url or OPENAI_URL} answers a chat completion for model {found.model} "
        f"in {found.seconds:.1f} s",
    )
