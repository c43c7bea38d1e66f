"""``mmina rescore``: new verdicts for stored episodes with any evaluator, without a browser."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mmina.cli.common import (MAX_PRICE_USD, Bounded, executor_options, format_option, layout, model_call_options,
                              open_store, print_json, render_rows, stderr, store_option)
from mmina.errors import MminaError
from mmina.evaluators.judge import DEFAULT_CONCURRENCY, DEFAULT_MAX_RETRIES as JUDGE_RETRIES, JudgeSettings
from mmina.evaluators.registry import factory, names, parse_args
from mmina.evaluators.rescore import ACTIONS, RescoreConfig, RescoreResult, rescore as run_rescore


@click.command()
@click.option("--evaluator", metavar="NAME", help="Evaluator to score with (see --list).")
@click.option("--run", "runs", multiple=True, metavar="ID", help="Run to score (repeatable; default: every run).")
@click.option("--episode", "episodes", multiple=True, metavar="ID", help="Score only this episode (repeatable).")
@click.option("--arg", "evaluator_args", multiple=True, metavar="KEY=VALUE",
              help="Evaluator argument (repeatable; JSON values such as 3 or true are parsed).")
@click.option("--judge-model", metavar="MODEL",
              help="Model of the LLM judge (fuzzy, keypoints; task with fuzzy_match references).")
@click.option("--judge-base-url", "--base-url", "base_url", metavar="URL",
              help="OpenAI-compatible endpoint of the judge (default: $OPENAI_BASE_URL; --base-url is the old name).")
@click.option("--judge-concurrency", "--concurrency", "concurrency", type=click.IntRange(1, 64),
              default=DEFAULT_CONCURRENCY, show_default=True,
              help="Judge requests in flight at once (--concurrency is the old name).")
@click.option("--judge-price-in", type=Bounded(0, MAX_PRICE_USD), metavar="USD",
              help="The judge's price per million prompt tokens, for the cost keypoints records per hop and episode.")
@click.option("--judge-price-out", type=Bounded(0, MAX_PRICE_USD), metavar="USD",
              help="The judge's price per million completion tokens.")
@click.option("--action", type=click.Choice(ACTIONS), default="append", show_default=True,
              help="append: add a batch; overwrite: add a batch that marks the earlier ones superseded.")
@model_call_options("judge", JUDGE_RETRIES)
@click.option("--list", "list_only", is_flag=True, help="List the known evaluators and exit.")
@executor_options("Worker processes (or Ray actors) scoring groups of runs side by side into the same batch.")
@store_option
@format_option("table", "json")
def rescore(evaluator: str | None, list_only: bool, fmt: str, **options: Any) -> None:
    """Score stored episodes with an evaluator and append the verdicts to the store.

    Prints task SR and hop SR (overall and by hop count 1 / 2-4 / 5+) and the episodes whose
    task verdict flipped against the previous scoring by the same evaluator. Built-in
    evaluators: exact_match, must_include, url_match, fuzzy (LLM judge, cached), keypoints
    (a multimodal LLM judge per hop: key points, relevant screenshots, verdicts with reasons;
    cached), hops (clean hop queue), mmina_official (the official runner's rules, transplanted
    from its code: the rule set follows the task's folder, --arg domain=NAME forces one), task
    (each task's own eval). Exits 1, writing nothing for the affected runs, when an episode
    cannot be scored. Measure a judge against people's labels with mmina agreement.

    \b
    Examples:
      mmina rescore --evaluator hops
      mmina rescore --run nightly --evaluator mmina_official --format json
      mmina rescore --run mine --evaluator mmina_official --arg domain=multi567
      mmina rescore --evaluator url_match --arg where=any
      mmina rescore --evaluator fuzzy --judge-model gpt-4o-mini --judge-concurrency 8
      mmina rescore --evaluator fuzzy --arg reference=must_include --judge-base-url http://localhost:8000/v1 --judge-model m
      mmina rescore --evaluator keypoints --judge-model gpt-4o --judge-price-in 2.5 --judge-price-out 10
      mmina rescore --evaluator task --action overwrite
      mmina rescore --evaluator hops --workers 4 --executor ray --store s3://bucket/evals
      mmina rescore --list
    """
    if list_only:
        _list_evaluators(fmt)
        return
    if not evaluator:
        raise click.UsageError("give --evaluator NAME (mmina rescore --list shows the names)")
    config = RescoreConfig(
        evaluator=evaluator, args=parse_args(options["evaluator_args"]),
        runs=tuple(options["runs"]), episodes=tuple(options["episodes"]), action=options["action"],
        judge=JudgeSettings(model=options["judge_model"], base_url=options["base_url"],
                            concurrency=options["concurrency"], max_retries=options["model_retries"],
                            deadline_s=options["model_deadline"], price_in=options["judge_price_in"],
                            price_out=options["judge_price_out"]))
    with _progress() as progress:
        result = run_rescore(open_store(options["store_path"]), config, progress, layout(options, concurrency=1))
    _print_json(result) if fmt == "json" else _print_table(result)
    if not result.ok:
        raise click.exceptions.Exit(1)


PHASES = {"judge": "asking the judge", "score": "scoring", "runs": "scoring runs"}


@contextmanager
def _progress() -> Iterator[Any]:
    """A transient bar per phase (judge requests, scoring) on a terminal; nothing in logs."""
    if not stderr.is_terminal:
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(PHASES.get(phase, "scoring"), total=total)
            bar.update(tasks[phase], completed=done, total=total)

        yield update


def _list_evaluators(fmt: str) -> None:
    rows = []
    for name in names():
        try:
            make = factory(name)
        except MminaError as exc:  # a broken entry point is listed, not fatal
            rows.append((name, "", f"cannot load: {exc}"))
            continue
        rows.append((name, str(getattr(make, "version", "")), _first_paragraph(make.__doc__)))
    render_rows(["evaluator", "version", "description"], rows, fmt)


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _print_table(result: RescoreResult) -> None:
    rows = [(b.name, b.episodes, b.tasks_passed, b.tasks_unclear, _percent(b.task_sr),
             f"{b.hops_passed}/{b.hops_total}", _percent(b.hop_sr)) for b in result.buckets()]
    render_rows(["hops", "episodes", "passed", "unclear", "task SR", "hops passed", "hop SR"], rows, "table",
                title=f"{result.evaluator} v{result.version} — batch {result.batch_id}")
    if result.flips:
        render_rows(["episode", "task", "before", "after", "previous batch"],
                    [(f.episode_id, f.task_id, f.before, f.after, f.previous_batch) for f in result.flips], "table",
                    title=f"{len(result.flips)} verdict(s) flipped against the previous {result.evaluator} scoring")
    else:
        click.echo(f"no task verdict flipped against the previous {result.evaluator} scoring")
    if result.judge_cached or result.judge_requested:
        click.echo(f"judge: {result.judge_cached} cached, {result.judge_requested} requested, "
                   f"{result.judge_failed} failed{_spend(result)}")
    written = sum(s.written for s in result.scored)
    click.echo(f"{written} episode(s) scored, {len(result.files)} file(s) written ({result.action})")
    _report_unscored(result)


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
    click.echo(f"Error: {len(result.unscored)} episode(s) could not be scored; nothing written for run(s) "
               f"{', '.join(runs)}", err=True)
    for item in result.unscored:
        click.echo(f"  unscored {item.episode_id} ({item.task_id}): {item.reason}", err=True)


def _print_json(result: RescoreResult) -> None:
    print_json(result.as_json())
    _report_unscored(result)
