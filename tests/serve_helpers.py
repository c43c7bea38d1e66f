"""``mmina serve`` started for real (its own process, a free port), and requests to it.

Shared by the browser tests, the HTTP tests and the bench.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.store_helpers import REPO_ROOT

START_S = 120.0
"""Bound on the server's start (imports on a busy machine take seconds)."""


def ignore_sigint() -> None:
    """In a child before it runs its program: SIGINT ignored, as a shell starts a background job."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Served:
    """``with Served(store) as app:`` the real command line serving ``store`` on a free port;
    ``app.url`` is the address it printed."""

    def __init__(
        self,
        store: str | Path,
        *args: str,
        env: dict[str, str] | None = None,
        background_job: bool = False,
        program: list[str] | None = None,
        cwd: Path = REPO_ROOT,
        base_env: dict[str, str] | None = None,
    ) -> None:
        """``program``: the ``mmina`` to start (default: this interpreter's, ``-m mmina``), in
        ``cwd``, with ``base_env`` (default: this process's environment) and ``env`` on top."""
        mmina = program or [sys.executable, "-m", "mmina"]
        self.command = [*mmina, "serve", "--store", str(store), "--port", "0", *args]
        self.env = {**(os.environ if base_env is None else base_env), **(env or {})}
        self.cwd = cwd
        self.background_job = background_job
        """Started as a shell starts a background job: with SIGINT ignored."""
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0.0

    def __enter__(self) -> Served:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.cwd,
            env=self.env,
            preexec_fn=ignore_sigint if self.background_job else None,
        )
        assert self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], START_S)[0]:
            self.__exit__(None, None, None)
            raise AssertionError("mmina serve printed no address")
        line = self.proc.stdout.readline()
        found = re.search(r"http://\S+", line)
        if found is None:
            self.__exit__(None, None, None)
            raise AssertionError(
                f"mmina serve did not start: {line}{self.proc.stderr.read() if self.proc.stderr else ''}"
            )
        self.url = found.group(0)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stderr(self) -> str:
        """What the server wrote to its log (after it stopped)."""
        assert self.proc is not None and self.proc.stderr is not None
        return self.proc.stderr.read()

    def get(
        self,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body of one request (errors are answers too, not exceptions)."""
        request = urllib.request.Request(
            self.url.split("?")[0].rstrip("/") + path, data=body, headers=headers or {}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as answer:
            return answer.code, dict(answer.headers), answer.read()

    def json(self, path: str, body: Any = None, expect: int = 200) -> Any:
        data = None if body is None else json.dumps(body).encode()
        status, _, content = self.get(path, data, {"Content-Type": "application/json"} if data else None)
        assert status == expect, (status, content[:500])
        return json.loads(content)

    def wait_for(self, predicate, timeout: float = 120, every: float = 0.2) -> Any:
        """Poll ``predicate()`` until it returns something true (bounded generously)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            time.sleep(every)
        raise AssertionError(f"not within {timeout} s")

    def indexed(self, timeout: float = 120) -> None:
        """Wait until the episode index holds every run."""
        self.wait_for(
            lambda: (lambda p: p["runs_total"] and p["runs_indexed"] == p["runs_total"])(
                self.json("/api/changes?since=-1")
            ),
            timeout,
        )


def files_digest(root: Path) -> str:
    """Every file of a store by name and content: what must not change while it is served."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name not in (".lock", ".commit.lock")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@contextmanager
def served_read_only(store: Path) -> Iterator[Served]:
    """The store served, its index complete; afterwards, the store must be as it was and the
    server's log free of stack traces."""
    before = files_digest(store)
    with Served(store) as served:
        served.indexed()
        yield served
    assert files_digest(store) == before, "serving changed the store"
    log = served.stderr()
    assert "Traceback" not in log, log
