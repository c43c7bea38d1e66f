"""``mmina store info``, ``verify`` and ``compact``."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from mmina.cli.common import format_option, human_bytes, open_store, run_option, store_option
from mmina.cli.render import echo, print_json, render_rows, say, status
from mmina.errors import plural

if TYPE_CHECKING:
    from mmina.store.inspect import VerifyReport


@click.group()
def store() -> None:
    """Inspect, check and compact a store.

    \b
    Examples:
      mmina store info
      mmina store verify --store runs/mmina-store --format json
      mmina store info --store s3://my-bucket/mmina
      mmina store compact
    """


@store.command()
@store_option
@format_option()
def info(store_path: str | None, fmt: str) -> None:
    """Show runs, episodes, steps and bytes by table. (`mmina runs` lists the runs themselves.)

    \b
    Example:
      mmina store info --store ./mmina-store
    """
    from mmina.store.inspect import store_info

    result = store_info(open_store(store_path))
    if fmt == "json":
        print_json({**asdict(result), "total_bytes": result.total_bytes})
        return
    if fmt == "csv":
        render_rows(
            ["table", "files", "rows", "bytes", "unreadable"],
            [(t.name, t.files, t.rows, t.bytes, t.unreadable) for t in result.tables],
            "csv",
        )
        return
    say(
        f"store {result.root} (schema version {result.schema_version}): {plural(result.runs, 'run')}, "
        f"{plural(result.episodes, 'episode')}, {plural(result.steps, 'step')}, {human_bytes(result.total_bytes)}; "
        "`mmina runs` lists the runs"
    )
    render_rows(
        ["table", "files", "rows", "bytes", "unreadable"],
        [(t.name, t.files, t.rows, human_bytes(t.bytes), t.unreadable) for t in result.tables],
        "table",
    )


@store.command()
@store_option
@click.option(
    "--repair",
    is_flag=True,
    help="First remove what writers that are gone left behind: unfinished temporary files, files of "
    "episodes never committed, abandoned uploads. Damaged or missing data is reported, never touched.",
)
@click.option(
    "--redacted",
    is_flag=True,
    help="Also list the response bodies redaction changed (stored other than the browser received them: "
    "a replay serves other bytes there). Listed, not counted as problems.",
)
@format_option()
def verify(store_path: str | None, repair: bool, redacted: bool, fmt: str) -> None:
    """Read every file and report what is damaged or missing. Duplicated and left-over files too;
    exit 1 if any.

    Reports, with their paths: unfinished files of writers that are gone (partial, upload),
    files of episodes never committed (orphan), unreadable files (corrupt), files of a newer
    mmina (newer_version), files a commit listed that are gone or differ (missing, changed),
    copies (unlisted, duplicate), blobs stored nowhere (missing_blob). Readers skip damaged
    files with a warning; --repair removes the leftovers (never committed data).
    --redacted also lists each response body redaction changed (the browser received other
    bytes than the store holds, so a replay serves those): run, episode, step, URL, sizes.

    \b
    Examples:
      mmina store verify --store ./mmina-store
      mmina store verify --repair
      mmina store verify --redacted --format json
    """
    from mmina.store.inspect import verify_store

    report = verify_store(open_store(store_path), repair=repair, redacted=redacted)
    if fmt == "json":
        print_json({**asdict(report), "ok": report.ok})
    elif fmt == "csv":
        render_rows(
            ["kind", "path", "message"], [(p.kind, p.path, p.message) for p in report.problems], "csv"
        )
    else:
        _print_report(report)
    if not report.ok:
        raise click.exceptions.Exit(1)


def _print_report(report: VerifyReport) -> None:
    """One line per problem, the path whole so it can be copied or grepped."""
    for item in report.repaired:
        echo(f"removed {item.kind}: {item.path}: {item.message}")
    for problem in report.problems:
        echo(f"{problem.kind}: {problem.path}: {problem.message}")
    for path in report.in_progress:
        echo(f"in progress (a writer may be at work): {path}")
    for note in report.unchecked:
        echo(f"not checked: {note}")
    for body in report.redacted_bodies or ():
        echo(
            f"redacted body: run {body.run_id} episode {body.episode_id} step {body.step_index}: {body.url} "
            f"({body.mime_type or 'no type'}, {body.received_size} bytes received, {body.stored_size} stored)"
        )
    if report.redacted_bodies is not None:
        echo(f"{len(report.redacted_bodies)} response bodies changed by redaction")
    verdict = "OK" if report.ok else f"{len(report.problems)} problem(s)"
    echo(f"{plural(report.files_checked, 'file')} checked in {report.root}: {verdict}")


@store.command()
@store_option
@run_option("Compact only this run (default: all)", multiple=True)
@format_option()
def compact(store_path: str | None, runs: tuple[str, ...], fmt: str) -> None:
    """Merge each run's per-episode files into one file per table. Queries then stay fast.

    Recording writes a few small files per episode; compaction rewrites the episodes, steps
    and requests of each run into one file per table and swaps them in atomically: readers
    see the same rows before, during and after, recorders writing the run wait for the
    swap, and a crash leaves the store as it was or compacted. Blob packs are kept.
    Local stores only: an object store (s3://...) has no rename to swap folders with.

    \b
    Examples:
      mmina store compact
      mmina store compact --run 20261122-120439-oracle-fd2d80 --format json
    """
    from mmina.store.compact import compact_store

    opened = open_store(store_path)
    with status("compacting") as update:
        results = compact_store(opened, list(runs) or None, lambda run: update(f"compacting run {run}"))
    columns = ["run", "episodes", "files before", "files after", "bytes before", "bytes after"]
    if fmt == "json":
        print_json([asdict(r) for r in results])
    elif fmt == "csv":
        render_rows(
            columns,
            [
                (r.run_id, r.episodes, r.files_before, r.files_after, r.bytes_before, r.bytes_after)
                for r in results
            ],
            "csv",
        )
    elif not results:
        echo("nothing to compact: every run is already one file per table")
    else:
        render_rows(
            columns,
            [
                (
                    r.run_id,
                    r.episodes,
                    r.files_before,
                    r.files_after,
                    human_bytes(r.bytes_before),
                    human_bytes(r.bytes_after),
                )
                for r in results
            ],
            "table",
        )
