"""Third-party software for the real-web tests, installed on demand and cached.

Each application goes into a virtualenv of its own (they pin conflicting versions, and none of
them belongs in mmina's ``.venv``); JavaScript libraries come from npm. Everything lands under
one gitignored folder (``.realweb/`` at the repository's top, or ``$MMINA_REALWEB_CACHE``) and is
installed once: a second call finds it ready (a marker file is written last, so an install cut
short is done again), by one process at a time (the test run's workers may ask together). Only
the package registries are needed, through pip and npm.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from contextlib import AbstractContextManager
from pathlib import Path

from tests.built_once import locked

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 1_200
"""One application's install, generously (a cold pip cache on a busy two-core machine)."""


class InstallFailed(RuntimeError):
    """A package could not be installed here (the message has the installer's last lines)."""


def cache_root() -> Path:
    """The cache's real path: a virtualenv writes its own path into its scripts, so one made through
    a link (a worktree's ``.realweb`` linked to another's) must not name the link, which may go."""
    return Path(os.environ.get("MMINA_REALWEB_CACHE") or ROOT / ".realweb").resolve()


def app_venv(name: str, requirements: tuple[str, ...]) -> Path:
    """The virtualenv ``name`` with ``requirements`` installed (created once); its ``bin`` folder.
    An application that needs nothing installed (a hand-written one) runs on this interpreter."""
    if not requirements:
        return Path(sys.executable).parent
    folder = cache_root() / "venvs" / name
    marker = folder / ".mmina-ready"
    wanted = "\n".join(requirements)
    with _installing(folder):
        if marker.exists() and marker.read_text() == wanted and _runnable(folder / "bin"):
            return folder / "bin"
        shutil.rmtree(folder, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(folder)], name)
        _run(
            [
                str(folder / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *requirements,
            ],
            name,
        )
        marker.write_text(wanted)
    return folder / "bin"


def _runnable(bin_folder: Path) -> bool:
    """Whether the virtualenv's scripts start: each names its interpreter by the path the virtualenv
    was made at (``pip``'s first line), which a moved or linked-then-removed folder no longer has."""
    try:
        first = (bin_folder / "pip").read_bytes().split(b"\n", 1)[0]
    except OSError:
        return False
    return first.startswith(b"#!") and Path(os.fsdecode(first[2:].strip())).exists()


def npm_packages(specs: tuple[str, ...], name: str = "npm") -> Path:
    """A ``node_modules`` folder with ``specs`` (``rxjs@7`` ...) installed from npm (once), in the
    cache's folder ``name`` (one per set of specs: two sets sharing a folder would reinstall in turn)."""
    folder = cache_root() / name
    marker = folder / ".mmina-ready"
    wanted = "\n".join(specs)
    with _installing(folder):
        if marker.exists() and marker.read_text() == wanted:
            return folder / "node_modules"
        if shutil.which("npm") is None:
            raise InstallFailed("npm is not installed (apt-get install -y npm)")
        folder.mkdir(parents=True, exist_ok=True)
        _run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(folder), *specs], "npm"
        )
        marker.write_text(wanted)
    return folder / "node_modules"


def npm_pack(spec: str, name: str) -> Path:
    """The files of the npm package ``spec`` (``replaywebpage@2.5.3``) as published, without its
    dependencies (``npm pack``: a bundle that ships built files needs none), extracted once into
    the cache's folder ``name``; returns the package's folder."""
    folder = cache_root() / name
    marker = folder / ".mmina-ready"
    with _installing(folder):
        if marker.exists() and marker.read_text() == spec:
            return folder / "package"
        if shutil.which("npm") is None:
            raise InstallFailed("npm is not installed (apt-get install -y npm)")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        _run(["npm", "pack", "--silent", "--pack-destination", str(folder), spec], "npm")
        tarball = next(folder.glob("*.tgz"))
        with tarfile.open(tarball) as archive:
            archive.extractall(folder, filter="data")
        tarball.unlink()
        marker.write_text(spec)
    return folder / "package"


def _installing(folder: Path) -> AbstractContextManager[None]:
    """One process at a time installs into ``folder`` (the test run's workers may ask together)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    return locked(folder.parent / f"{folder.name}.lock")


def _run(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InstallFailed(f"installing {what} took over {INSTALL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).splitlines()[-5:])
        raise InstallFailed(f"installing {what} failed:\n{tail}")
