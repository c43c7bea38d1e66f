"""``mmina report``, ``mmina compare``, ``mmina view``: the analysis over the store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from mmina.analysis.names import DEFAULT_EVALUATOR, TABLE_NAMES
from mmina.cli.common import (
    FILE_OR_FOLDER,
    old_arguments,
    open_store,
    output_option,
    run_option,
    store_option,
    wide_option,
)
from mmina.cli.render import csv_text, echo, jsonable, print_json, print_tables, say, status, write_csv
from mmina.outputs import output_path

if TYPE_CHECKING:
    from mmina.analysis.data import Scored
    from mmina.analysis.paired import Comparison, Side
    from mmina.analysis.report import Report
    from mmina.analysis.tables import Table
    from mmina.store import Store


def _write_csv(tables: Sequence[Table], out: Path | None) -> None:
    texts = {t.name: csv_text(t.columns, t.rows) for t in tables}
    if out is None:
        click.echo(
            "\n".join((f"# {name}\n" if len(texts) > 1 else "") + text for name, text in texts.items()),
            nl=False,
            color=True,
        )
    elif len(tables) == 1:
        output_path(out).write_text(*texts.values())
    else:
        output_path(out, folder=True).mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (out / f"{name}.csv").write_text(text)


def _write_html(store: Store, report: Report, out: Path, limit: int) -> None:
    from mmina.analysis.html import write_report

    with status("rendering the HTML report"):
        written = write_report(store, report, out, limit)
    echo(
        f"wrote {written.page} ({written.page_bytes / 1e6:.1f} MB) and its files in {written.folder} "
        f"(plotly.js and {written.images} screenshot(s), {written.folder_bytes / 1e6:.1f} MB)",
        err=True,
    )


@click.command()
@run_option("Run to analyse (default: every run)", multiple=True)
@click.option(
    "--evaluator",
    default=DEFAULT_EVALUATOR,
    show_default=True,
    metavar="NAME",
    help="Whose verdicts to analyse (the latest batch of `mmina rescore --evaluator NAME`).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(("table", "json", "csv", "html")),
    default="table",
    show_default=True,
    help="Terminal tables, JSON or CSV for scripts, or an HTML page (its plotly.js "
    "and screenshots go to a folder <name>_files next to it).",
)
@output_option(
    "Write here instead of stdout (html: default mmina-report.html; csv with every table: a folder).",
    FILE_OR_FOLDER,
    checked=False,
    old="--out",
)
@click.option(
    "--table",
    "table_names",
    multiple=True,
    type=click.Choice(TABLE_NAMES),
    help="Only this table (repeatable; table, json and csv formats).",
)
@click.option(
    "--viewer-episodes",
    type=click.IntRange(0),
    default=50,
    show_default=True,
    help="Episodes in the HTML trajectory viewer (failed ones first).",
)
@store_option
@wide_option
def report(
    runs: tuple[str, ...],
    evaluator: str,
    fmt: str,
    output: Path | None,
    table_names: tuple[str, ...],
    viewer_episodes: int,
    store_path: str | None,
) -> None:
    """Hop-by-hop analysis of scored runs. SR by hop count, hop positions, early failure, failure
    modes, per-site success, actions, tokens and cost, each rate with its 95% CI.

    Verdicts come from `mmina rescore` (the latest batch per episode and evaluator); the
    default evaluator is `hops`, the clean hop queue; with `--evaluator mmina_official` the
    first table, runner_log, gives the official runner's log figures (PASS lines, tasks with
    no result line, all_pass/all_all) per rule set beside the hops figures.
    `--evaluator step_action` shows the step-level figures of the run's latest `mmina
    eval-steps` batch instead. The tables, and the SQL that reproduces each one, are in the
    documentation's Analysis page (docs/analysis.md).

    \b
    Examples:
      mmina rescore --evaluator hops && mmina report
      mmina report --run latest --format html -o report.html
      mmina report --evaluator mmina_official --table runner_log
      mmina report --format csv -o tables/
      mmina report --evaluator step_action --run nightly   # eval-steps figures
    """
    from mmina.analysis.report import build_report
    from mmina.stepeval import EVALUATOR as STEP_EVALUATOR

    store = open_store(store_path)
    if output is not None and (fmt == "table" or evaluator == STEP_EVALUATOR):
        raise click.UsageError(
            f"-o/--output writes --format json, csv or html{IN_TERMINAL}: give one of "
            "those formats with it, or leave it out"
        )
    if evaluator == STEP_EVALUATOR:
        _step_report(store, runs, fmt)
        return
    page = output_path(output or Path("mmina-report.html")) if fmt == "html" else None
    with status("computing the report"):
        result = build_report(store, runs, evaluator)
    if page is not None:
        _write_html(store, result, page, viewer_episodes)
        return
    tables = result.chosen(table_names)
    if fmt == "csv":
        _write_csv(tables, output)
    elif fmt == "json":
        _emit_json(result.as_json(table_names), output)
    else:
        repeats = f" (episodes: up to {result.repeats} repeats of a task)" if result.repeats > 1 else ""
        say(
            f"runs: {', '.join(result.scored.runs)} — evaluator {evaluator} — {len(result.scored.episodes)} task(s)"
            f"{repeats}{_left_out(result.scored)}; rates with 95% Wilson intervals"
        )
        print_tables(tables)


def _left_out(scored: Scored) -> str:
    """The episodes in no rate: those with nothing to judge, those the environment blocked, and
    those an infrastructure error ended."""
    parts = [f"{scored.not_applicable} with nothing to judge (n/a)"] if scored.not_applicable else []
    if scored.blocked:
        parts.append(f"{scored.blocked} blocked by the environment (a site down, a bot check, a login wall)")
    if scored.infrastructure:
        parts.append(
            f"{scored.infrastructure} ended by an infrastructure error (`mmina record --resume` records "
            "them again)"
        )
    return f" (and {' and '.join(parts)}: in no rate)" if parts else ""


IN_TERMINAL = " (the table format, and --evaluator step_action, print to the terminal)"


def _step_report(store: Store, runs: tuple[str, ...], fmt: str) -> None:
    """The step-level figures of ``mmina eval-steps`` (its latest batch on the run)."""
    from mmina.cli.eval_steps import print_step_report
    from mmina.stepeval import EVALUATOR as STEP_EVALUATOR
    from mmina.stepeval import stored_report

    if len(runs) != 1 or fmt not in ("table", "json"):
        raise click.UsageError(
            f"--evaluator {STEP_EVALUATOR} reports one run's eval-steps figures: "
            "pass one --run and --format table or json"
        )
    stored = stored_report(store, runs[0])
    if fmt == "json":
        print_json(stored.as_json())
    else:
        print_step_report(stored.report, f"eval-steps batch {stored.batch_id} on run {stored.run_id}")


def _emit_json(data: object, out: Path | None) -> None:
    if out is None:
        print_json(data)
    else:
        output_path(out).write_text(json.dumps(jsonable(data), indent=2, ensure_ascii=False))


def _sides(runs: tuple[str, ...], evaluators: tuple[str, ...]) -> tuple[Side, Side]:
    from mmina.analysis.paired import Side

    if not runs:
        raise click.UsageError(
            "name the run(s) to compare: --run A --run B, or one --run with two --evaluator"
        )
    if len(runs) > 2 or len(evaluators) > 2:
        raise click.UsageError("give at most two runs and at most two --evaluator values")
    names = evaluators or (DEFAULT_EVALUATOR,)
    run_b = runs[1] if len(runs) == 2 else runs[0]
    return Side(runs[0], names[0]), Side(run_b, names[-1])


def _print_comparison(result: Comparison) -> None:
    print_tables([result.summary()])
    data = result.as_json()
    echo(
        f"paired tasks {data['paired_tasks']}: both passed {data['both_passed']}, both failed "
        f"{data['both_failed']}, pass→fail {data['pass_to_fail']}, fail→pass {data['fail_to_pass']}; "
        f"McNemar exact p = {data['mcnemar_p']:.4g}"
    )
    for side, tasks in (("a", result.only_a), ("b", result.only_b)):
        if tasks:
            echo(f"only in {side}: {', '.join(tasks)}")
    if result.flips().rows:
        print_tables([result.flips()])


@click.command()
@click.argument("old_runs", nargs=-1, metavar="")
@run_option("Run of a side: give --run twice (A, then B), or once with two --evaluator", multiple=True)
@click.option(
    "--evaluator",
    "evaluators",
    multiple=True,
    metavar="NAME",
    help=f"Evaluator (default {DEFAULT_EVALUATOR}); give it twice to compare two evaluators (on one run).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(("table", "json", "csv")),
    default="table",
    show_default=True,
    help="csv prints the flips.",
)
@store_option
@wide_option
def compare(
    old_runs: tuple[str, ...],
    runs: tuple[str, ...],
    evaluators: tuple[str, ...],
    fmt: str,
    store_path: str | None,
) -> None:
    """Paired per-task comparison of two runs or two evaluators. Two runs, or two evaluators on one
    run: success of each side, the tasks that flipped either way, and McNemar's exact test.

    \b
    Examples:
      mmina compare --run memory-k0 --run memory-k2
      mmina compare --run nightly --evaluator hops --evaluator mmina_official
      mmina compare --run run-a --run latest --format json
    """
    from mmina.analysis.paired import compare as run_compare

    a, b = _sides(runs + old_arguments(old_runs, "RUN_A [RUN_B]", "--run A --run B"), evaluators)
    result = run_compare(open_store(store_path), a, b)
    if fmt == "json":
        print_json(result.as_json())
    elif fmt == "csv":
        flips = result.flips()
        write_csv(flips.columns, flips.rows)
    else:
        _print_comparison(result)


@click.command()
@click.argument("old_episode", required=False, metavar="")
@click.option("--episode", metavar="ID", help="The episode to show.")
@output_option("Output file (default: episode-<EPISODE>.html).", checked=False, old="--out")
@store_option
def view(old_episode: str | None, episode: str | None, output: Path | None, store_path: str | None) -> None:
    """Write one episode's trajectory viewer as an HTML file. A self-contained page: per step the
    screenshot, the action and its target element, the raw model output, the hop progress and the
    verdicts (previous/next buttons or the arrow keys move between steps).

    \b
    Example:
      mmina view --episode normal-1-3f2a9c0d1e2b4a5c -o episode.html
    """
    from mmina.analysis.html import episode_html
    from mmina.analysis.viewer import trajectories

    given = (episode,) if episode else ()
    episodes = given + old_arguments((old_episode,) if old_episode else (), "EPISODE", "--episode ID")
    if len(episodes) != 1:
        raise click.UsageError("name one episode: --episode ID")
    episode = episodes[0]
    target = output_path(output or Path(f"episode-{episode}.html"))
    store = open_store(store_path)
    with status("rendering the episode"):
        found = trajectories(store, [episode])
    target.write_text(episode_html(found[0]), encoding="utf-8")
    echo(f"wrote {target}", err=True)
