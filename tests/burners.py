"""CPU burners: processes that each keep one core busy, to check that something holds under load.

The suite must pass on a busy machine (a contributor's laptop, a shared CI runner), so a timing
assumption — a fixed sleep standing for "by now it has happened", a tight deadline — shows up
when the cores are taken. Run a command beside burners::

    .venv/bin/python -m tests.burners 2 -- .venv/bin/python -m pytest -q tests/test_freezing.py

starts 2 burners, runs the command, stops the burners however the command ends (Ctrl-C
included) and exits with the command's exit code. ``python -m bench --burners 2`` runs the
benchmarks beside them; code uses :func:`burning`.

A burner is a plain ``python -c`` loop at the same priority as everything else (``--nice 19``
makes it yield to everything, which hardly loads the machine at all): with two burners on two
cores, a test's process gets about half a core when it wants one, as on a machine where other
people's runs compete. It ends by itself when the process that started it goes away (it watches
its parent), so a killed run leaves no burner behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

BURN = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "parent, nice = int(sys.argv[1]), int(sys.argv[2])\n"
    "if nice:\n"
    "    os.nice(nice)\n"
    "while os.getppid() == parent:\n"
    "    for _ in range(200_000):\n"
    "        pass\n"
)
"""A burner's program: spin, and every few milliseconds check that its parent is still there
(Ctrl-C is its starter's to handle: it stops the burners once the command has ended)."""
STOP_S = 5.0
"""How long a burner asked to stop has before it is killed."""
USAGE = (
    "usage: python -m tests.burners N [--nice K] -- COMMAND [ARG...]\n"
    "  runs COMMAND beside N processes that each spin on a core, stops them when COMMAND ends,\n"
    "  and exits with COMMAND's exit code.\n"
    "example: .venv/bin/python -m tests.burners 2 -- .venv/bin/python -m pytest -q tests/test_freezing.py"
)


def start(count: int, nice: int = 0) -> list[subprocess.Popen[bytes]]:
    """Start ``count`` burners at niceness ``nice`` (0: as urgent as everything else)."""
    if count < 0:
        raise ValueError(f"a burner count is 0 or more, not {count}")
    return [_one(nice) for _ in range(count)]


def _one(nice: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", BURN, str(os.getpid()), str(nice)],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # a Ctrl-C while it starts up (before it ignores one) ends it quietly
    )


def stop(burners: Sequence[subprocess.Popen[bytes]]) -> None:
    """End every burner: asked first, then killed if it lingers."""
    for burner in burners:
        if burner.poll() is None:
            burner.terminate()
    for burner in burners:
        try:
            burner.wait(STOP_S)
        except subprocess.TimeoutExpired:
            burner.kill()
            burner.wait()


@contextmanager
def burning(count: int, nice: int = 0) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` burners for the time of the ``with`` block, stopped however it ends."""
    burners = start(count, nice)
    try:
        yield burners
    finally:
        stop(burners)


def run_beside(count: int, command: Sequence[str], nice: int = 0) -> int:
    """Run ``command`` beside ``count`` burners; its exit code (128 + N when signal N ended it).

    Ctrl-C reaches the command (same terminal process group) and SIGTERM is passed on to it; this
    process only waits for the command to end, then stops the burners. It catches Ctrl-C with a
    handler that does nothing rather than a KeyboardInterrupt, which could land between reaping
    the command and reading its status (the status is then lost: 0). A caught signal is the
    default again in the command (``exec`` resets handlers), so the command still gets Ctrl-C."""
    with burning(count, nice):
        before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
        signal.signal(signal.SIGINT, lambda *_: None)
        try:
            process = subprocess.Popen(list(command))
            signal.signal(signal.SIGTERM, lambda *_: process.terminate())
            code = process.wait()
        finally:
            for number, handler in before.items():
                signal.signal(number, handler)
    return 128 - code if code < 0 else code


def parse(argv: Sequence[str]) -> tuple[int, int, list[str]]:
    """``N [--nice K] -- COMMAND...`` as (count, nice, command); ValueError with the reason."""
    args = list(argv)
    if "--" not in args:
        raise ValueError("put the command after --")
    split = args.index("--")
    head, command = args[:split], args[split + 1 :]
    nice = 0
    if len(head) == 3 and head[1] == "--nice":
        nice = _number(head[2], "--nice")
        head = head[:1]
    if len(head) != 1:
        raise ValueError("give the number of burners, then --")
    if not command:
        raise ValueError("no command after --")
    return _number(head[0], "the number of burners"), nice, command


def _number(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{what} must be a whole number, not {text!r}") from None
    if value < 0:
        raise ValueError(f"{what} must be 0 or more, not {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    try:
        count, nice, command = parse(args)
    except ValueError as error:
        print(f"error: {error}\n{USAGE}", file=sys.stderr)
        return 2
    try:
        return run_beside(count, command, nice)
    except FileNotFoundError as error:
        print(f"error: cannot run {command[0]!r}: {error.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
