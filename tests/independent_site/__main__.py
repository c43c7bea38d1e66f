"""Serve the independent shop by hand: ``python -m tests.independent_site [--no-store]``.

Prints the Chromium flag that maps shop.indie.test to it and a task folder for
``mmina record --tasks``; stops on Ctrl-C. For the CLI, which has no flag for extra Chromium
arguments, point ``--browser`` at a wrapper script that adds the printed flag.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.independent_site.agent import write_task
from tests.independent_site.server import IndieShop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-store", action="store_true", help="Cache-Control: no-store on every response")
    options = parser.parse_args()
    tasks = write_task(Path(tempfile.mkdtemp(prefix="indie-tasks-")))
    with IndieShop(no_store=options.no_store) as shop:
        print(f"{shop.url} on 127.0.0.1:{shop.port}")
        print("chromium flag:", *shop.chromium_args())
        print("tasks:", tasks)
        print("agent: tests.independent_site.agent:SixSteps (or the oracle)")
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
