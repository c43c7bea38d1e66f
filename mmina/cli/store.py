"""``mmina store info`` and ``mmina store verify``."""
from __future__ import annotations

from dataclasses import asdict

import click

from mmina.cli.common import format_option, human_bytes, open_store, print_json, render_rows, stdout, store_option
from mmina.store.inspect import VerifyReport, store_info, verify_store


@click.group()
def store() -> None:
    """Inspect and check a store.

    \b
    Examples:
      mmina store info
      mmina store verify --store runs/mmina-store --format json
    """


@store.command()
@store_option
@format_option("table", "json")
def info(store_path: str | None, fmt: str) -> None:
    """Show runs, episodes, steps and bytes by table.

    \b
    Example:
      mmina store info --store ./mmina-store
    """
    result = store_info(open_store(store_path))
    if fmt == "json":
        print_json({**asdict(result), "total_bytes": result.total_bytes})
        return
    stdout.print(f"store {result.root} (schema version {result.schema_version}): "
                 f"{result.runs} runs, {result.episodes} episodes, {result.steps} steps, "
                 f"{human_bytes(result.total_bytes)}")
    render_rows(["table", "files", "rows", "bytes"],
                [(t.name, t.files, t.rows, human_bytes(t.bytes)) for t in result.tables], "table")


@store.command()
@store_option
@format_option("table", "json")
def verify(store_path: str | None, fmt: str) -> None:
    """Read every file; report partial, corrupt or orphaned ones. Exit 1 if any.

    \b
    Example:
      mmina store verify --store ./mmina-store
    """
    report = verify_store(open_store(store_path))
    if fmt == "json":
        print_json({**asdict(report), "ok": report.ok})
    else:
        _print_report(report)
    if not report.ok:
        raise click.exceptions.Exit(1)


def _print_report(report: VerifyReport) -> None:
    """One line per problem, the path whole so it can be copied or grepped."""
    for problem in report.problems:
        click.echo(f"{problem.kind}: {problem.path}: {problem.message}")
    for path in report.in_progress:
        click.echo(f"in progress (writer running): {path}")
    verdict = "OK" if report.ok else f"{len(report.problems)} problem(s)"
    click.echo(f"{report.files_checked} files checked in {report.root}: {verdict}")
