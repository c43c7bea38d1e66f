"""A user's install (issue 52): a wheel built from the repository, installed into a clean virtual
environment outside it, runs ``mmina record --task normal/1`` (the fixture web and the built-in
tasks come from the wheel), ``mmina serve`` (its pages too) and ``mmina doctor``, from a folder
elsewhere, with no PYTHONPATH.

Cost: the wheel is built from a copy of the sources (``pip wheel --no-deps``, the build backend
from pip's cache, ~3 s), and installed with its dependencies into a new venv pinned to the
versions of the venv running the tests (``pip freeze`` as constraints): those are the wheels
``.ci/setup.sh`` already downloaded, so pip takes them from its cache instead of resolving newer
ones; nothing is byte-compiled ahead. Measured 2026-12-06 on the two-core machine: the install
11 core-seconds (16 s wall when the machine was idle, with byte-compiling; 43 s at load 16); the
whole file 170 s at load 18, most of it waiting on the disk. A fresh venv every run (580 MB),
deleted at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serve_helpers import Served
from tests.store_helpers import REPO_ROOT

pytestmark = pytest.mark.timeout(1200)  # the install is the first test's setup

INSTALL_S = 600
"""Bound on building the wheel and installing it (a busy machine; a pip cache gone cold)."""
RUN_S = 300
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "mmina", "fixtures")
"""What building the wheel reads (``[tool.setuptools]`` in pyproject.toml)."""
PACKAGED = {"mmina": "mmina", "fixtures": "mmina/fixtures"}
"""The repository's folders and where the wheel puts them."""


class Installed:
    """A clean venv holding mmina from a wheel of this repository; commands run from a folder
    outside the repository, without PYTHONPATH."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root = root
        self.wheel = wheel
        self.bin = root / "venv" / "bin"
        self.home = root / "home"
        self.home.mkdir()
        self.env = clean_env(self.bin)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "mmina"), *args],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=RUN_S,
            check=False,
        )


def clean_env(bin_: Path) -> dict[str, str]:
    """This process's environment without what points into the repository or its venv (a
    PYTHONPATH would let pip and Python find the repository's own mmina), ``bin_`` first on the PATH."""
    hidden = {"PYTHONPATH", "VIRTUAL_ENV", "MMINA_STORE", "PYTHONSTARTUP", "PYTHONHOME"}
    path = [
        p
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if p and Path(p) != Path(sys.executable).parent
    ]
    return {
        **{k: v for k, v in os.environ.items() if k not in hidden},
        "PATH": os.pathsep.join([str(bin_), *path]),
    }


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=INSTALL_S,
        env=clean_env(Path(command[0]).parent),
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


def build_wheel(work: Path) -> Path:
    """A wheel of the repository as it is on disk, built from a copy (the build's own folders
    stay out of the tree)."""
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(
                REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            shutil.copy2(REPO_ROOT / name, source / name)
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "-w",
            str(work / "dist"),
            str(source),
        ],
        work,
    )
    (wheel,) = (work / "dist").glob("mmina-*.whl")
    return wheel


def install(work: Path, wheel: Path) -> None:
    """A new venv with the wheel and its dependencies, at the versions of the venv running the tests."""
    frozen = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "freeze",
            "--exclude-editable",
            "--exclude",
            "mmina",
            "--disable-pip-version-check",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (work / "constraints.txt").write_text(frozen.stdout)
    _run([sys.executable, "-m", "venv", str(work / "venv")], work)
    _run(
        [
            str(work / "venv" / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",  # Python compiles what it imports; compiling all of it is time the test does not need
            "-c",
            str(work / "constraints.txt"),
            str(wheel),
        ],
        work,
    )


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    work = Path(tempfile.mkdtemp(prefix="mmina-user-install-"))
    try:
        wheel = build_wheel(work)
        install(work, wheel)
        yield Installed(work, wheel)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_wheel_carries_every_file_of_the_package_and_its_data(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    expected = {
        f"{target}/{path.relative_to(REPO_ROOT / folder).as_posix()}"
        for folder, target in PACKAGED.items()
        for path in (REPO_ROOT / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert sorted(expected - names) == []
    assert {
        "mmina/fixtures/tasks/normal/1.json",
        "mmina/fixtures/web/server.py",
        "mmina/serve/static/index.html",
        "mmina/serve/static/app.js",
    } <= names
    assert len([n for n in names if n.startswith("mmina/fixtures/tasks/") and n.endswith(".json")]) == 100


def test_the_installed_mmina_is_the_wheels_not_the_repositorys(installed: Installed) -> None:
    where = subprocess.run(
        [
            str(installed.bin / "python"),
            "-c",
            "import mmina, mmina.fixtures; print(mmina.__file__); print(mmina.fixtures.__file__)",
        ],
        cwd=installed.home,
        env=installed.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=RUN_S,
    )
    site = installed.root / "venv" / "lib"
    assert where.returncode == 0 and all(Path(line).is_relative_to(site) for line in where.stdout.split()), (
        where
    )


def test_record_one_task_then_serve_it(installed: Installed) -> None:
    recorded = installed.run("record", "--task", "normal/1")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    store = installed.home / "mmina-store"
    stored = installed.run("sql", "select task_id, status, final_answer from episodes", "--format", "csv")
    assert stored.returncode == 0 and stored.stdout.splitlines()[1:] == [
        "normal/1,completed,Vell Mountain Tea costs $23.75"
    ]
    with Served(
        store, program=[str(installed.bin / "mmina")], cwd=installed.home, base_env=installed.env
    ) as app:
        status, _, page = app.get("/")
        assert status == 200 and b"<html" in page.lower()
        status, _, script = app.get("/static/app.js")
        assert status == 200 and script == (REPO_ROOT / "mmina" / "serve" / "static" / "app.js").read_bytes()
        runs = app.json("/api/runs")
        assert "oracle" in str(runs)
    assert "Traceback" not in app.stderr()


def test_doctor_finds_what_the_install_needs(installed: Installed) -> None:
    checked = installed.run("doctor", "--only", "mmina", "--only", "browser", "--only", "store")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0].startswith("OK       mmina: ") and str(installed.root / "venv") in lines[0], lines
    assert "100 built-in tasks" in lines[0] and lines[1].startswith("OK       browser: ")
