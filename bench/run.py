"""``python -m bench``: run the benchmarks, print one table, write the figures as JSON.

Everything is measured in one run on this machine; compare ratios between machines rather
than absolute times. ``--quick`` runs a few tasks and a small synthetic store (a smoke run).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.campaign import campaign_section
from bench.capture import capture_ab_section
from bench.delivery import delivery_section
from bench.epoch import epoch_section
from bench.evidence import evidence_section
from bench.hardweb import hardweb_section
from bench.interchange import interchange_section
from bench.judges import judges_section
from bench.machine import described, machine
from bench.objectstore import objectstore_section
from bench.quiet import quiet_section
from bench.rankings import rankings_section
from bench.realweb import realweb_section, standing_section
from bench.recording import MEMORY_RUNS, MEMORY_TASKS, memory_section, run_recording
from bench.redaction import redaction_section
from bench.repeats import repeats_section
from bench.results import Section
from bench.scale import run_scale
from bench.seeding import seeding_section
from bench.serve import serve_section
from bench.view import view_section
from mmina import __version__
from mmina.tasks.taskcheck import load_suite
from tests.burners import burning

SECTIONS = (
    "recording",
    "memory",
    "evidence",
    "hardweb",
    "realweb",
    "delivery",
    "standing",
    "redaction",
    "scale",
    "epoch",
    "campaign",
    "objectstore",
    "serve",
    "view",
    "interchange",
    "repeats",
    "judges",
    "rankings",
    "seeding",
    "quiet",
)
EVIDENCE_TASKS = (
    "normal/1",
    "normal/2",
    "shopping/6",
    "wikipedia/1",
    "compare/1",
    "multi567/1",
    "normal/10",
    "normal/20",
)
FULL_EPISODES = 100_000
QUICK_EPISODES = 2_000
QUICK_TASKS = ("normal/1", "normal/2", "shopping/6", "compare/1", "multi567/1", "wikipedia/1")
OBJECTSTORE_TASKS = QUICK_TASKS

console = Console(stderr=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example:\n  .venv/bin/python -m bench --out bench/results.json\n  .venv/bin/python -m bench --quick",
    )
    parser.add_argument("--quick", action="store_true", help="a few tasks and 2,000 synthetic episodes")
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run only these parts (repeatable)")
    parser.add_argument("--episodes", type=int, help="synthetic store size (default 100,000; --quick 2,000)")
    parser.add_argument("--out", type=Path, default=Path("bench/results.json"), help="JSON output file")
    parser.add_argument(
        "--work", type=Path, help="working folder to keep (default: a temporary one, removed)"
    )
    parser.add_argument(
        "--burners",
        type=int,
        default=0,
        metavar="N",
        help="measure beside N processes spinning on a core each (tests/burners.py; default 0)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="mmina-bench-"))
    started = time.perf_counter()
    try:
        with burning(args.burners):
            sections = run(args, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print_table(sections)
    write_json(args, sections, time.perf_counter() - started)


def run(args: argparse.Namespace, work: Path) -> list[Section]:
    parts = args.only or list(SECTIONS)
    sections: list[Section] = []
    with console.status("benchmarking") as status:
        log = lambda message: status.update(message)  # noqa: E731
        if "recording" in parts:
            tasks = QUICK_TASKS if args.quick else tuple(t.task_id for t in load_suite().tasks)
            sections += run_recording(work / "recording", tasks, live_rerun=not args.quick, log=log)
            log("an observation's parts one after another, then side by side (capture A/B)")
            sections.append(capture_ab_section(pages=4 if args.quick else 14, rounds=1 if args.quick else 3))
        if "memory" in parts:
            log("one worker recording the same tasks again and again (memory)")
            tasks, runs = (QUICK_TASKS[:3], 2) if args.quick else (MEMORY_TASKS, MEMORY_RUNS)
            sections.append(memory_section(work / "memory", tasks, runs))
        if "evidence" in parts:
            log("the openai agent against the local test server, twice (model input size)")
            sections.append(
                evidence_section(work / "evidence", QUICK_TASKS[:3] if args.quick else EVIDENCE_TASKS)
            )
        if "hardweb" in parts:
            log("each hard-web behaviour recorded, the site restarted, replayed (fidelity)")
            sections.append(hardweb_section(work / "hardweb"))
        if "realweb" in parts:
            log("real applications from PyPI recorded, restarted with new state, replayed (fidelity)")
            sections.append(
                realweb_section(
                    work / "realweb",
                    args.quick,
                    delivery="delivery" not in parts,
                    standing="standing" not in parts,
                )
            )
        if "delivery" in parts:
            log("a 6 MB script from a live server, and from its archive through a replay's router")
            sections.append(delivery_section())
        if "standing" in parts:
            log("a step beside a long-poll and a SharedWorker that never end, and without them")
            sections.append(standing_section(work / "standing", args.quick))
        if "redaction" in parts:
            log("the npm corpus through the redactor (files changed, throughput)")
            sections.append(redaction_section(quick=args.quick))
        if "scale" in parts:
            sections += run_scale(work / "scale", synthetic_episodes(args), log)
        if "epoch" in parts:
            sections.append(epoch_section(work / "epoch", args.quick, log))
        if "campaign" in parts:
            log("a campaign of short tasks without faults, then through 429s, an outage and a killed worker")
            sections.append(campaign_section(args.quick))
        if "serve" in parts:
            sections += serve_section(
                work / "serve", synthetic_episodes(args), log, 4 if args.quick else None
            )
        if "view" in parts:
            sections.append(view_section(work / "view", log))
        if "interchange" in parts:
            tasks = QUICK_TASKS if args.quick else tuple(t.task_id for t in load_suite().tasks)
            sections.append(interchange_section(work / "interchange", tasks, args.quick, log))
        if "repeats" in parts:
            sections.append(repeats_section(work / "repeats", log))
        if "objectstore" in parts:
            tasks = OBJECTSTORE_TASKS[:3] if args.quick else OBJECTSTORE_TASKS
            sections.append(objectstore_section(work / "objectstore", tasks, synthetic_episodes(args), log))
        if "judges" in parts:
            log("four agents on the fixture web, five evaluators and two simulated labellers (judge audit)")
            sections.append(judges_section(work / "judges", log, args.quick))
        if "rankings" in parts:
            log(
                "four agents of different skill live on the drifted fixture web and on its archive (rankings)"
            )
            sections.append(rankings_section(work / "rankings", log, args.quick))
        if "seeding" in parts:
            log("Math.random and crypto drawn unseeded and under each seeding scheme (cost per draw)")
            sections.append(seeding_section())
        if "quiet" in parts:
            sections.append(quiet_section(log, args.quick))
    return sections


def synthetic_episodes(args: argparse.Namespace) -> int:
    """Episodes of the synthetic stores: ``--episodes``, else 100,000 (2,000 with ``--quick``)."""
    return args.episodes or (QUICK_EPISODES if args.quick else FULL_EPISODES)


def print_table(sections: list[Section]) -> None:
    table = Table(title="mmina benchmarks", caption=described(machine()))
    for column in ("section", "figure", "value", "target", "met", "note"):
        table.add_column(column, overflow="fold")
    for figure in (f for s in sections for f in s.figures):
        met = {True: "yes", False: "NO", None: ""}[figure.met]
        table.add_row(
            figure.section,
            figure.name,
            f"{figure.value} {figure.unit}".strip(),
            str(figure.target or ""),
            met,
            figure.note,
        )
    Console(width=160).print(table)


def write_json(args: argparse.Namespace, sections: list[Section], seconds: float) -> None:
    """The figures as JSON. With ``--only``, they replace their sections' figures in an existing
    file and the others are kept (``updated`` says which parts were measured again, and when)."""
    figures = [f.as_json() for s in sections for f in s.figures]
    data = {
        "mmina_version": __version__,
        "measured_at": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "quick": args.quick,
        "burners": args.burners,
        "seconds": round(seconds, 1),
        "figures": figures,
    }
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    if args.only and old:
        partial = {s.name for s in sections if s.partial}
        data = merged(old, data, args.only, partial)
    if "previous_release" in old:
        data["previous_release"] = old["previous_release"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    console.print(f"figures written to {args.out}")


def merged(old: dict, new: dict, parts: list[str], partial: Collection[str] = ()) -> dict:
    """``old`` with the figures of the sections in ``new`` replaced by ``new``'s; of a ``partial``
    section, only the figures ``new`` measured again (by name) are replaced, the others kept."""
    fresh = {f["section"] for f in new["figures"]} - set(partial)
    again = {(f["section"], f["name"]) for f in new["figures"]}
    kept = [
        f
        for f in old.get("figures", [])
        if f["section"] not in fresh and (f["section"], f["name"]) not in again
    ]
    updated = {
        "parts": parts,
        "measured_at": new["measured_at"],
        "quick": new["quick"],
        "burners": new.get("burners", 0),
        "seconds": new["seconds"],
        "machine": new["machine"],
    }
    return {**old, "figures": kept + new["figures"], "updated": updated}
