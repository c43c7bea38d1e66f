"""``mmina rescore``: new verdicts for stored episodes with any evaluator, without a browser."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from mmina.cli.bundles import JudgeOptions, ScaleOptions
from mmina.cli.common import format_option, open_store, run_option, store_option
from mmina.cli.render import echo, plain_text, print_json, print_tables, progress_bar, render_rows, write_csv
from mmina.errors import MminaError
from mmina.evaluators.rescore_settings import ACTIONS, RescoreConfig

if TYPE_CHECKING:
    from mmina.analysis.tables import Table
    from mmina.evaluators.rescore import RescoreResult

OLD_JUDGE_NAMES = {
    "--judge-base-url": "--base-url",
    "--judge-concurrency": "--concurrency",
    "--judge-deadline": "--model-deadline",
    "--judge-retries": "--model-retries",
}
"""What rescore called the judge's options before every command spoke of the judge alike."""


@click.command()
@click.option("--evaluator", metavar="NAME", help="Evaluator to score with (see --list).")
@run_option("Run to score (default: every run)", multiple=True)
@click.option(
    "--episode", "episodes", multiple=True, metavar="ID", help="Score only this episode (repeatable)."
)
@click.option(
    "--arg",
    "evaluator_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="Evaluator argument (repeatable; JSON values such as 3 or true are parsed).",
)
@JudgeOptions.options(
    scope="fuzzy, keypoints (and task with fuzzy_match references)", renamed=OLD_JUDGE_NAMES
)
@click.option(
    "--action",
    type=click.Choice(ACTIONS),
    default="append",
    show_default=True,
    help="append: add a batch; overwrite: add a batch that marks the earlier ones superseded.",
)
@click.option("--list", "list_only", is_flag=True, help="List the known evaluators and exit.")
@ScaleOptions.options(
    omit=("concurrency",),
    workers="Worker processes (or Ray actors) scoring groups of runs side by side into the same batch.",
)
@store_option
@format_option()
def rescore(
    evaluator: str | None,
    runs: tuple[str, ...],
    episodes: tuple[str, ...],
    evaluator_args: tuple[str, ...],
    judge: JudgeOptions,
    action: str,
    list_only: bool,
    scale: ScaleOptions,
    store_path: str | None,
    fmt: str,
) -> None:
    """Score stored episodes with an evaluator; append the verdicts. They go to the store as a new
    batch.

    Prints task SR and hop SR (overall and by hop count 1 / 2-4 / 5+, with 95% intervals) and
    the episodes whose task verdict flipped against the previous scoring by the same
    evaluator. Built-in evaluators: exact_match, must_include, url_match, fuzzy (LLM judge,
    cached), keypoints (a multimodal LLM judge per hop: key points, relevant screenshots, verdicts
    with reasons; cached), hops (clean hop queue), mmina_official (the official runner's rules, transplanted
    from its code: the rule set follows the task's folder, --arg domain=NAME forces one), task
    (each task's own eval). An episode with nothing to judge (no reference of the kind the
    evaluator reads) is "n/a", counted neither as passed nor as failed; when no episode has
    one, nothing is written and the command says which references there are. Exits 1,
    writing nothing for the affected runs, when an episode cannot be scored. Measure a judge
    against people's labels with mmina agreement.

    \b
    Examples:
      mmina rescore --evaluator hops
      mmina rescore --run latest --evaluator mmina_official --format json
      mmina rescore --run mine --evaluator mmina_official --arg domain=multi567
      mmina rescore --evaluator url_match --arg where=any
      mmina rescore --evaluator fuzzy --judge-model gpt-4o-mini --judge-concurrency 8
      mmina rescore --evaluator fuzzy --arg reference=must_include \
--judge-base-url http://localhost:8000/v1 --judge-model m
      mmina rescore --evaluator keypoints --judge-model gpt-4o --judge-price-in 2.5 --judge-price-out 10
      mmina rescore --evaluator task --action overwrite
      mmina rescore --evaluator hops --workers 4 --executor ray --store s3://bucket/evals
      mmina rescore --list
    """
    from mmina.evaluators.registry import parse_args
    from mmina.evaluators.rescore import rescore as run_rescore

    if list_only:
        _list_evaluators(fmt)
        return
    if not evaluator:
        raise click.UsageError("give --evaluator NAME (mmina rescore --list shows the names)")
    config = RescoreConfig(
        evaluator=evaluator,
        args=parse_args(evaluator_args),
        runs=runs,
        episodes=episodes,
        action=action,
        judge=judge.settings(),
    )
    with _progress() as progress:
        result = run_rescore(open_store(store_path), config, progress, scale.layout())
    if fmt == "json":
        print_json(result.as_json())
    else:
        _print_buckets(result, fmt)
    for change in result.judge_changes:
        echo(f"warning: {change}", err=True)
    _report_unscored(result)
    if not result.ok:
        raise click.exceptions.Exit(1)


PHASES = {"judge": "asking the judge", "score": "scoring", "runs": "scoring runs"}


@contextmanager
def _progress() -> Iterator[Any]:
    """A transient bar per phase (judge requests, scoring) on a terminal; nothing in logs."""
    with progress_bar() as bar:
        if bar is None:
            yield None
            return
        tasks: dict[str, Any] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(PHASES.get(phase, "scoring"), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        yield update


def _list_evaluators(fmt: str) -> None:
    from mmina.evaluators.registry import factory, names

    rows = []
    for name in names():
        try:
            make = factory(name)
        except MminaError as exc:  # a broken entry point is listed, not fatal
            rows.append((name, "", f"cannot load: {exc}"))
            continue
        rows.append((name, str(getattr(make, "version", "")), plain_text(_first_paragraph(make.__doc__))))
    render_rows(["evaluator", "version", "description"], rows, fmt)


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _buckets_table(result: RescoreResult) -> Table:
    """SR by hop-count bucket with 95% intervals; n/a episodes are counted apart and in no rate."""
    from mmina.analysis.tables import Table, rate_columns, rate_values

    rows = tuple(
        (
            b.name,
            b.episodes,
            b.tasks_passed,
            b.tasks_unclear,
            b.tasks_na,
            *rate_values(b.tasks_passed, b.judged),
            b.hops_passed,
            b.hops_total,
            *rate_values(b.hops_passed, b.hops_total),
        )
        for b in result.buckets()
    )
    columns = (
        "bucket",
        "episodes",
        "passed",
        "unclear",
        "n/a",
        *rate_columns("task_sr"),
        "hops_passed",
        "hops_total",
        *rate_columns("hop_sr"),
    )
    return Table("rescore", f"{result.evaluator} v{result.version} — batch {result.batch_id}", columns, rows)


def _print_buckets(result: RescoreResult, fmt: str) -> None:
    table = _buckets_table(result)
    if fmt == "csv":
        write_csv(table.columns, table.rows)
        return
    print_tables([table])
    if result.flips:
        render_rows(
            ["episode", "task", "before", "after", "previous batch"],
            [(f.episode_id, f.task_id, f.before, f.after, f.previous_batch) for f in result.flips],
            "table",
            title=f"{len(result.flips)} verdict(s) flipped against the previous {result.evaluator} scoring",
        )
    else:
        echo(f"no task verdict flipped against the previous {result.evaluator} scoring")
    if result.judge_cached or result.judge_requested:
        echo(
            f"judge: {result.judge_cached} cached, {result.judge_requested} requested, "
            f"{result.judge_failed} failed{_spend(result)}"
        )
    if result.judge_config:
        judge = result.judge_config
        asked = ", ".join(f"{k} {v:g}" for k, v in judge["asked"].items() if v is not None)
        echo(
            f"judge: {judge['model']} at {judge['endpoint']}, prompt {judge['prompt_version']}"
            f"{f', {asked}' if asked else ''} (each verdict's judge_json has its whole configuration)"
        )
    written = sum(s.written for s in result.scored)
    echo(f"{written} episode(s) scored, {len(result.files)} file(s) written ({result.action})")


def _spend(result: RescoreResult) -> str:
    """Tokens and cost of the judge calls the verdicts rest on, and what this run spent."""
    usage = result.judge_spend.as_json()
    text = f"; {usage['prompt_tokens']:,} + {usage['completion_tokens']:,} tokens"
    if usage["cost_usd"]:
        costs = [s.cost_usd for s in result.scored if s.cost_usd is not None]
        each = f", ${sum(costs) / len(costs):.4f} per episode" if costs else ""
        text += f", ${usage['cost_usd']:.4f}{each} (${usage['spent_usd']:.4f} spent now)"
    return text


def _report_unscored(result: RescoreResult) -> None:
    if not result.unscored:
        return
    runs = sorted({u.run_id for u in result.unscored})
    echo(
        f"Error: {len(result.unscored)} episode(s) could not be scored; nothing written for run(s) "
        f"{', '.join(runs)}",
        err=True,
    )
    for item in result.unscored:
        echo(f"  unscored {item.episode_id} ({item.task_id}): {item.reason}", err=True)
