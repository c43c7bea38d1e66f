"""The other side's software for the interchange tests, installed on demand into the shared cache.

pywb and inspect-ai each get a virtualenv of their own (``installs.app_venv``): pywb brings
``brotlipy``, whose ``brotli`` module would replace the one the hard web needs, and gevent;
inspect-ai pins ``fsspec<=2026.6``, older than the store's; ``datasets`` pins an older fsspec
too; Harbor (its ATIF models and validator) asks for Python 3.12 and a cloud of services, so
only its package and pydantic go into its venv (the models and validator need nothing else).
warcio is light and in the test extra; har-validator (the HAR 1.2 JSON schemas) comes from npm
and runs under node.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.realweb.apps import free_port
from tests.realweb.installs import app_venv, npm_pack, npm_packages

PYWB = ("pywb==2.10.0",)
INSPECT = ("inspect-ai==0.3.285",)
HAR_VALIDATOR = ("har-validator@5.1.5",)
DATASETS = ("datasets==5.2.0", "pillow==13.0.0")
HARBOR = (
    "--no-deps",
    "--ignore-requires-python",
    "harbor==0.25.0",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-extensions==4.16.0",
    "typing-inspection==0.4.5",
)
REPLAYWEBPAGE = "replaywebpage@2.5.3"
WACZ = ("wacz==0.6.0",)
START_TIMEOUT_S = 60.0
"""Until a started server answers (inspect view imports a lot)."""


def pywb_bin() -> Path:
    return app_venv("interchange-pywb", PYWB)


def inspect_bin() -> Path:
    return app_venv("interchange-inspect", INSPECT)


def wacz_bin() -> Path:
    """py-wacz (its validator pins frictionless and more: a virtualenv of its own)."""
    return app_venv("interchange-wacz", WACZ)


def replaywebpage() -> Path:
    """ReplayWeb.page's published files (``ui.js``, ``sw.js``) from npm."""
    return npm_pack(REPLAYWEBPAGE, "npm-replaywebpage")


class _RangeHandler(SimpleHTTPRequestHandler):
    """Static files with byte ranges (a WACZ is read by range) and no log on stderr."""

    _left: int | None = None
    """Bytes of a range still to send (None: the whole file, as the base class sends it)."""

    def send_head(self) -> Any:
        self._left = None
        found = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        if not found or not path.is_file():
            return super().send_head()
        size = path.stat().st_size
        start, end = int(found[1]), min(int(found[2] or size - 1), size - 1)
        source = path.open("rb")
        source.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self._left = end - start + 1
        return source

    def copyfile(self, source: Any, outputfile: Any) -> None:
        left = self._left
        if left is None:
            return super().copyfile(source, outputfile)
        while left > 0:
            chunk = source.read(min(left, 1 << 16))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def static_server(folder: Path) -> Iterator[str]:
    """``folder`` served over http://localhost (a secure context: service workers run) with
    byte ranges; yields its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_RangeHandler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def inspect_python(code: str, *args: str) -> str:
    """Runs ``code`` in inspect-ai's own interpreter; its standard output."""
    return _venv_python(inspect_bin(), code, *args)


def datasets_bin() -> Path:
    return app_venv("interchange-datasets", DATASETS)


def harbor_bin() -> Path:
    return app_venv("interchange-harbor", HARBOR)


def _venv_python(bin_: Path, code: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Runs ``code`` in the interpreter of the venv whose ``bin`` folder is ``bin_``; its standard output."""
    done = subprocess.run(
        [str(bin_ / "python"), "-c", code, *args], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


LOAD_DATASET = """
import json, sys
from datasets import load_dataset
found = {}
for config in sys.argv[2:]:
    data = load_dataset(sys.argv[1], config, split="train")
    images = {k: type(v).__name__ for k, v in data.features.items() if k.endswith("_image")}
    first = data[0][next(iter(images))] if images else None
    found[config] = {"rows": data.num_rows, "images": images, "first_image": list(first.size) if first else None}
print(json.dumps(found))
"""


def load_with_datasets(folder: Path, configs: list[str]) -> dict[str, dict]:
    """``datasets.load_dataset(folder, config)`` for each config (offline, in a cache of its own):
    per config its rows, the type of its image features and the size of its first image."""
    cache = folder.parent / f".hf-cache-{folder.name}"
    env = {**os.environ, "HF_HOME": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    try:
        return json.loads(_venv_python(datasets_bin(), LOAD_DATASET, str(folder), *configs, env=env))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


VALIDATE_ATIF = """
import json, pathlib, sys
from harbor.utils.trajectory_validator import TrajectoryValidator
validator = TrajectoryValidator()
validator.validate(pathlib.Path(sys.argv[1]))
print(json.dumps(validator.get_errors()))
"""


def atif_errors(path: Path) -> list[str]:
    """Harbor's ATIF validator's errors for the trajectory file (its pydantic models, and the
    images it names existing beside it); empty when it is valid."""
    return json.loads(_venv_python(harbor_bin(), VALIDATE_ATIF, str(path)))


def validate_har(path: Path) -> list[str]:
    """har-validator's errors for the file (empty when it is valid HAR 1.2)."""
    modules = npm_packages(HAR_VALIDATOR, name="npm-har-validator")
    script = (
        "const v=require(process.argv[1]);const fs=require('fs');"
        "v.har(JSON.parse(fs.readFileSync(process.argv[2],'utf8')))"
        ".then(()=>console.log('[]'),e=>console.log(JSON.stringify((e.errors||[e])"
        ".map(x=>x.message+' '+(x.dataPath||x.instancePath||'')))))"
    )
    done = subprocess.run(
        ["node", "-e", script, str(modules / "har-validator"), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@contextmanager
def server(command: list[str], cwd: Path, port: int, path: str = "/") -> Iterator[str]:
    """A server started in ``cwd`` and stopped again; yields its base URL once it answers."""
    log = (cwd / f"server-{port}.log").open("wb")
    process = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(f"http://127.0.0.1:{port}{path}", process, cwd / f"server-{port}.log")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
        log.close()


def _wait(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"the server did not answer within {START_TIMEOUT_S:.0f} s: {log.read_text()[-2000:]}")


@contextmanager
def pywb(folder: Path, collection: str, warcs: list[Path], *extra: str) -> Iterator[str]:
    """pywb's ``wayback`` over a new collection holding ``warcs`` (``extra``: e.g. ``--record``)."""
    bin_ = pywb_bin()
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(bin_ / "wb-manager"), "init", collection], cwd=folder, check=True, capture_output=True
    )
    for warc in warcs:
        subprocess.run(
            [str(bin_ / "wb-manager"), "add", collection, str(warc)],
            cwd=folder,
            check=True,
            capture_output=True,
        )
    port = free_port()
    with server([str(bin_ / "wayback"), "-p", str(port), "-b", "127.0.0.1", *extra], folder, port) as url:
        yield url


__all__ = [
    "atif_errors",
    "free_port",
    "inspect_python",
    "load_with_datasets",
    "pywb",
    "replaywebpage",
    "server",
    "static_server",
    "validate_har",
    "wacz_bin",
]
