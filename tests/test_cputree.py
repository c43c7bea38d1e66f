"""The bench's CPU accounting by process kind (``bench/cputree.py``): command lines are told
apart as Chromium's, Playwright's driver's and mmina's, a child's CPU is counted under its kind,
and a process given as apart is counted apart."""

from __future__ import annotations

import subprocess
import sys

from bench.cputree import CpuTree, kind_of

BURN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass"


def test_command_lines_are_told_apart() -> None:
    assert kind_of(["/usr/lib/chromium/chromium-headless-shell", "--headless"]) == "browser"
    assert kind_of("/usr/lib/chromium/chromium --type=renderer --lang=en-US".split(" ")) == "renderer"
    assert kind_of(["/usr/lib/chromium/chromium", "--type=gpu-process"]) == "gpu"
    assert kind_of(["/usr/lib/chromium/chromium", "--type=zygote", "--no-sandbox"]) == "zygote"
    assert kind_of(["/usr/lib/chromium/chromium", "--type=utility", "--utility-sub-type=x"]) == "utility"
    assert kind_of(["/x/playwright/driver/node", "cli.js", "run-driver"]) == "driver"
    assert kind_of(["/work/.venv/bin/python", "-m", "bench"]) == "mmina"
    assert kind_of(["/bin/sh", "-c", "true"]) == "other"


def test_a_child_is_counted_under_its_kind_and_an_apart_one_apart() -> None:
    apart = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = CpuTree({apart.pid: "model server"})
        with tree.sampling():
            subprocess.run([sys.executable, "-c", BURN], check=True)
    finally:
        apart.kill()
        apart.wait()
    seconds = tree.split.seconds
    assert seconds.get("mmina", 0.0) >= 0.15, seconds  # the child's 0.4 s, less what its last 0.2 s may hide
    assert seconds.get("model server", 0.0) < 0.05, seconds
    assert tree.split.side() >= seconds.get("mmina", 0.0)
