"""``mmina eval-steps``: teacher-forced next-action prediction over stored steps, scored per step."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mmina.agents.llm import HISTORY_ACTIONS
from mmina.cli.common import (MAX_HISTORY, agent_settings, format_option, open_store, openai_agent_options,
                              print_json, render_rows, stderr, store_option)
from mmina.evaluators.judge import JudgeSettings
from mmina.stepeval import EvalConfig, EvalResult, StepReport, eval_steps as run_eval_steps, stored_report
from mmina.stepeval.action_match import OPS, UNPARSABLE


@click.command(name="eval-steps")
@click.option("--run", "run_id", required=True, metavar="ID", help="The run whose stored steps are the references.")
@click.option("--agent", default="openai", show_default=True,
              help="openai (a model behind an OpenAI-compatible endpoint) or module:Class for your own agent.")
@openai_agent_options("openai agent")
@click.option("--sample", type=click.IntRange(min=1), metavar="N", help="Evaluate N randomly drawn reference steps (default: all).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --sample draw.")
@click.option("--history", type=click.IntRange(0, MAX_HISTORY), default=HISTORY_ACTIONS, show_default=True, metavar="K",
              help="Show the agent the K previous recorded actions.")
@click.option("--all-steps", is_flag=True, help="Use the steps of every episode, not only of those that succeeded.")
@click.option("--episode", "episodes", multiple=True, metavar="ID", help="Only steps of this episode (repeatable).")
@click.option("--value-judge", metavar="MODEL", help="Ask this LLM judge whether typed/selected values and answers "
                                                      "that differ from the recorded ones still mean the same.")
@click.option("--report-only", is_flag=True, help="Ask nothing: report a stored batch (--batch, default the latest).")
@click.option("--batch", "batch_id", metavar="ID", help="--report-only: the batch to report.")
@store_option
@format_option("table", "json")
def eval_steps(fmt: str, **options: Any) -> None:
    """Ask an agent for the next action of stored steps and score it against the recorded one.

    Each sampled step's observation is rebuilt as recorded (tree, screenshots, images, tabs,
    the task and the K previous recorded actions). The prediction is scored on its operation
    (click / type / select / scroll / navigation / stop), target element, value (exact, or
    the --value-judge) and as a whole; rows go to the scores table (evaluator step_action,
    level step). Prints accuracy with 95% Wilson intervals per operation, website, history
    length, hop and position, a confusion table of operations, the commonest wrong targets
    and the cost. Exits 1 when a step could not be asked (its row is not written).

    \b
    Examples:
      mmina eval-steps --run RUN --agent openai --model gpt-4o --sample 200 --seed 1
      mmina eval-steps --run RUN --agent openai --model gpt-4o --input-mode multimodal --history 2
      mmina eval-steps --run mind2web --agent mypkg.agents:MyAgent --all-steps --format json
      mmina eval-steps --run RUN --report-only
    """
    if options["report_only"]:
        _report_only(fmt, options)
        return
    config = EvalConfig(
        run_id=options["run_id"], agent=options["agent"], settings=agent_settings(options),
        sample=options["sample"], seed=options["seed"], history=options["history"], all_steps=options["all_steps"],
        episodes=tuple(options["episodes"]),
        judge=JudgeSettings(model=options["value_judge"], base_url=options["base_url"],
                            max_retries=options["model_retries"], deadline_s=options["model_deadline"]))
    with _progress() as progress:
        result = run_eval_steps(open_store(options["store_path"]), config, progress)
    if fmt == "json":
        print_json(result.as_json())
    else:
        print_step_report(result.report(), f"eval-steps batch {result.batch_id} on run {result.run_id}")
        click.echo(f"{len(result.details)} of {result.references} reference step(s) scored, "
                   f"{len(result.files)} file(s) written")
    _print_problems(result)
    if not result.ok:
        raise click.exceptions.Exit(1)


def _report_only(fmt: str, options: dict[str, Any]) -> None:
    stored = stored_report(open_store(options["store_path"]), options["run_id"], options["batch_id"])
    if fmt == "json":
        print_json(stored.as_json())
    else:
        print_step_report(stored.report, f"eval-steps batch {stored.batch_id} on run {stored.run_id}")


@contextmanager
def _progress() -> Iterator[Callable[[int, int], None] | None]:
    """A transient bar while the agent is asked (on a terminal only)."""
    if not stderr.is_terminal:
        yield None
        return
    columns = (TextColumn("asking the agent"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task("steps", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _accuracy_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["key"], r["steps"], r["correct"], _percent(r["accuracy"]),
             "-" if r["ci_low"] is None else f"{r['ci_low']:.1%}–{r['ci_high']:.1%}", _percent(r["op_accuracy"]), _percent(r["target_accuracy"]),
             _percent(r["value_accuracy"])) for r in rows]


ACCURACY_COLUMNS = ["", "steps", "right", "action acc", "95% CI", "op acc", "target acc", "value acc"]


def print_step_report(report: StepReport, title: str) -> None:
    data = report.as_dict()
    render_rows(ACCURACY_COLUMNS, _accuracy_rows([data["overall"]]), "table", title=title)
    for group, rows in data["groups"].items():
        render_rows([group, *ACCURACY_COLUMNS[1:]], _accuracy_rows(rows), "table", title=f"by {group}")
    predicted = [*OPS, UNPARSABLE]
    render_rows(["recorded \\ predicted", *predicted], [(r["reference"], *(r[p] for p in predicted))
                                                         for r in data["confusion"]], "table", title="operations")
    if data["wrong_targets"]:
        render_rows(["recorded target", "predicted target", "steps"],
                    [(w["reference_target"], w["predicted_target"], w["steps"]) for w in data["wrong_targets"]],
                    "table", title="most common wrong targets")
    cost = data["cost"]
    click.echo(f"cost: {cost['prompt_tokens']} prompt + {cost['completion_tokens']} completion tokens, "
               f"${cost['cost_usd']:.4f} (${(cost['cost_usd_per_step'] or 0):.5f} per step)")


def _print_problems(result: EvalResult) -> None:
    for item in result.skipped:
        click.echo(f"skipped {item.episode_id} step {item.step_index}: {item.reason}", err=True)
    if result.failed:
        click.echo(f"Error: {len(result.failed)} step(s) could not be scored (no row written for them)", err=True)
    for item in result.failed:
        click.echo(f"  failed {item.episode_id} step {item.step_index}: {item.reason}", err=True)
