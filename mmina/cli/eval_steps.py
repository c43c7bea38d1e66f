"""``mmina eval-steps``: teacher-forced next-action prediction over stored steps, scored per step."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from mmina.agents.settings import HISTORY_ACTIONS
from mmina.cli.bundles import OPENAI_ONLY, AgentOptions, JudgeOptions
from mmina.cli.common import (
    MAX_HISTORY,
    check_model_endpoint,
    format_option,
    open_store,
    run_option,
    store_option,
)
from mmina.cli.render import echo, print_json, progress_bar, render_rows

if TYPE_CHECKING:
    from mmina.stepeval import EvalResult, StepReport
    from mmina.store import Store


@click.command(name="eval-steps")
@run_option("The run whose stored steps are the references", required=True)
@click.option(
    "--agent",
    default="openai",
    show_default=True,
    help="openai (a model behind an OpenAI-compatible endpoint) or module:Class for your own agent (not "
    "record's default oracle: it follows its task's script and predicts nothing from a step).",
)
@AgentOptions.options(omit=OPENAI_ONLY)
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    metavar="N",
    help="Evaluate N randomly drawn reference steps (default: all).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --sample draw.")
@click.option(
    "--history",
    type=click.IntRange(0, MAX_HISTORY),
    default=HISTORY_ACTIONS,
    show_default=True,
    metavar="K",
    help="Show the agent the K previous recorded actions.",
)
@click.option(
    "--all-steps", is_flag=True, help="Use the steps of every episode, not only of those that succeeded."
)
@click.option(
    "--episode", "episodes", multiple=True, metavar="ID", help="Only steps of this episode (repeatable)."
)
@JudgeOptions.options(
    omit=("judge_price_in", "judge_price_out"),
    renamed={"--judge-model": "--value-judge"},
    scope="value judge (typed values and answers that differ from the recorded ones: do they mean the same?)",
    base_url="--base-url",
)
@click.option(
    "--report-only", is_flag=True, help="Ask nothing: report a stored batch (--batch, default the latest)."
)
@click.option("--batch", "batch_id", metavar="ID", help="--report-only: the batch to report.")
@store_option
@format_option()
def eval_steps(
    run_id: str,
    agent: str,
    agent_options: AgentOptions,
    sample: int | None,
    seed: int,
    history: int,
    all_steps: bool,
    episodes: tuple[str, ...],
    judge: JudgeOptions,
    report_only: bool,
    batch_id: str | None,
    store_path: str | None,
    fmt: str,
) -> None:
    """Score an agent's next action on stored steps. The agent is asked for the next action of each
    stored step, and its answer is scored against the recorded one.

    Each sampled step's observation is rebuilt as recorded (tree, screenshots, images, tabs,
    the task and the K previous recorded actions). The prediction is scored on its operation
    (click / type / select / scroll / navigation / stop), target element, value (exact, or
    the --judge-model's judgement) and as a whole; rows go to the scores table (evaluator step_action,
    level step). Prints accuracy with 95% Wilson intervals per operation, website, history
    length, hop and position, a confusion table of operations, the commonest wrong targets
    and the cost. Exits 1 when a step could not be asked (its row is not written).

    \b
    Examples:
      mmina eval-steps --run RUN --agent openai --model gpt-4o --sample 200 --seed 1
      mmina eval-steps --run RUN --agent openai --model gpt-4o --input-mode multimodal --history 2
      mmina eval-steps --run mind2web --agent mypkg.agents:MyAgent --all-steps --format json
      mmina eval-steps --run RUN --agent openai --model gpt-4o --judge-model gpt-4o-mini
      mmina eval-steps --run latest --report-only
    """
    from mmina.stepeval import EvalConfig
    from mmina.stepeval import eval_steps as run_eval_steps

    if report_only:
        _report_only(open_store(store_path), run_id, batch_id, fmt)
        return
    settings = replace(agent_options.settings(), seed=seed)  # the draw's seed also seeds the agent's requests
    config = EvalConfig(
        run_id=run_id,
        agent=agent,
        settings=settings,
        sample=sample,
        seed=seed,
        history=history,
        all_steps=all_steps,
        episodes=episodes,
        judge=judge.settings(base_url=agent_options.base_url),
    )
    endpoint = check_model_endpoint(agent, settings)
    with _progress() as progress:
        result = run_eval_steps(open_store(store_path), config, progress)
    if fmt == "json":
        print_json({**result.as_json(), "endpoint": endpoint})
    elif fmt == "csv":
        _write_step_csv(result.report())
    else:
        print_step_report(result.report(), f"eval-steps batch {result.batch_id} on run {result.run_id}")
        echo(
            f"{len(result.details)} of {result.references} reference step(s) scored, "
            f"{len(result.files)} file(s) written"
        )
    _print_problems(result)
    if not result.ok:
        raise click.exceptions.Exit(1)


def _report_only(store: Store, run_id: str, batch_id: str | None, fmt: str) -> None:
    from mmina.stepeval import stored_report

    stored = stored_report(store, run_id, batch_id)
    if fmt == "json":
        print_json(stored.as_json())
    elif fmt == "csv":
        _write_step_csv(stored.report)
    else:
        print_step_report(stored.report, f"eval-steps batch {stored.batch_id} on run {stored.run_id}")


@contextmanager
def _progress() -> Iterator[Callable[[int, int], None] | None]:
    """A transient bar while the agent is asked (on a terminal only)."""
    with progress_bar() as bar:
        if bar is None:
            yield None
            return
        task = bar.add_task("asking the agent", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


ACCURACY_KEYS = (
    "steps",
    "correct",
    "accuracy",
    "ci_low",
    "ci_high",
    "op_accuracy",
    "target_accuracy",
    "value_accuracy",
)


def _accuracy_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Accuracy rows as cells: the action accuracy with its 95% interval in one cell."""
    from mmina.analysis.display import percent, rate_cell

    return [
        (
            r["key"],
            r["steps"],
            r["correct"],
            rate_cell(r["accuracy"], r["ci_low"], r["ci_high"]),
            percent(r["op_accuracy"]),
            percent(r["target_accuracy"]),
            percent(r["value_accuracy"]),
        )
        for r in rows
    ]


ACCURACY_COLUMNS = ["", "steps", "right", "action acc [95% CI]", "op acc", "target acc", "value acc"]


def _write_step_csv(report: StepReport) -> None:
    """Every accuracy row (overall, then by group) as one CSV, values as computed."""
    data = report.as_dict()
    groups = [("overall", [data["overall"]]), *data["groups"].items()]
    render_rows(
        ["group", "key", *ACCURACY_KEYS],
        [(group, r["key"], *(r[k] for k in ACCURACY_KEYS)) for group, rows in groups for r in rows],
        "csv",
    )


def print_step_report(report: StepReport, title: str) -> None:
    from mmina.stepeval.action_match import OPS, UNPARSABLE

    data = report.as_dict()
    render_rows(ACCURACY_COLUMNS, _accuracy_rows([data["overall"]]), "table", title=title)
    for group, rows in data["groups"].items():
        render_rows([group, *ACCURACY_COLUMNS[1:]], _accuracy_rows(rows), "table", title=f"by {group}")
    predicted = [*OPS, UNPARSABLE]
    render_rows(
        ["recorded \\ predicted", *predicted],
        [(r["reference"], *(r[p] for p in predicted)) for r in data["confusion"]],
        "table",
        title="operations",
    )
    if data["wrong_targets"]:
        render_rows(
            ["recorded target", "predicted target", "steps"],
            [(w["reference_target"], w["predicted_target"], w["steps"]) for w in data["wrong_targets"]],
            "table",
            title="most common wrong targets",
        )
    cost = data["cost"]
    echo(
        f"cost: {cost['prompt_tokens']} prompt + {cost['completion_tokens']} completion tokens, "
        f"${cost['cost_usd']:.4f} (${(cost['cost_usd_per_step'] or 0):.5f} per step)"
    )


def _print_problems(result: EvalResult) -> None:
    for item in result.skipped:
        echo(f"skipped {item.episode_id} step {item.step_index}: {item.reason}", err=True)
    if result.failed:
        echo(f"Error: {len(result.failed)} step(s) could not be scored (no row written for them)", err=True)
    for item in result.failed:
        echo(f"  failed {item.episode_id} step {item.step_index}: {item.reason}", err=True)
