"""``mmina record``: run an agent on tasks in a real browser and store every step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import click

from mmina.actions.navigation import check_schemes
from mmina.cli.bundles import AgentOptions, BrowserOptions, Bundle, ScaleOptions, option
from mmina.cli.common import (
    MAX_BUDGET_HOURS,
    MAX_BUDGET_USD,
    MAX_DRIFT,
    MAX_REPEATS,
    MAX_STEPS,
    RUN_REF,
    SUITE_HELP,
    Bounded,
    check_model_endpoint,
    format_option,
    open_store,
    store_option,
)
from mmina.cli.render import echo, print_json, print_tables, progress_bar, render_rows, stderr_is_terminal
from mmina.errors import INFRASTRUCTURE, MminaError

if TYPE_CHECKING:
    from mmina.analysis.tables import Table
    from mmina.executors.interface import Layout
    from mmina.recorder.browser import BrowserConfig
    from mmina.recorder.episode import EpisodeResult
    from mmina.recorder.recording import RecordConfig, RunSummary
    from mmina.replayer.conditioned import ConditionedEpisode, ConditionedSummary
    from mmina.replayer.prefixes import PrefixSpec
    from mmina.store import Store
    from mmina.tasks.task import Task


VIEWPORT_WIDTHS = (200, 4096)
VIEWPORT_HEIGHTS = (200, 8192)
"""What a viewport may be (pixels, both ends included): Chromium renders and screenshots every
step at this size, so a huge one stalls the browser before the first step."""


def _at_hop(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, ...] | str | None:
    """``all``, or hops as ``K`` or ``K,K``, each a whole number from 1."""
    if value is None or value.strip().lower() == "all":
        return value and "all"
    try:
        hops = tuple(dict.fromkeys(int(part) for part in value.split(",") if part.strip()))
    except ValueError:
        raise click.BadParameter("use a hop number from 1 (e.g. 2), several (1,3), or all") from None
    if not hops or min(hops) < 1:
        raise click.BadParameter("hops are counted from 1 (e.g. --at-hop 2), or say all")
    return hops


def _viewport(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in value.lower().split("x"))
    except ValueError:
        raise click.BadParameter("use WIDTHxHEIGHT, e.g. 1280x2048") from None
    (low_w, high_w), (low_h, high_h) = VIEWPORT_WIDTHS, VIEWPORT_HEIGHTS
    if not (low_w <= width <= high_w and low_h <= height <= high_h):
        raise click.BadParameter(
            f"{width}x{height} is outside the allowed range: width {low_w}..{high_w}, "
            f"height {low_h}..{high_h}"
        )
    return width, height


def _schemes(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    try:
        return check_schemes(value)
    except MminaError as exc:
        raise click.BadParameter(str(exc)) from None


def _task_ids(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """``--task ID`` (repeatable, each value may list ``ID,ID``); a value that names no id
    (``""``, ``",,"``) is refused: it would otherwise record the whole suite."""
    ids: list[str] = []
    for value in values:
        named = [t.strip() for t in value.split(",") if t.strip()]
        if not named:
            raise click.BadParameter(
                f"{value!r} names no task id (give ID or ID,ID, or leave the option out for every task)"
            )
        ids += named
    return tuple(dict.fromkeys(ids))


@dataclass(frozen=True, kw_only=True)
class TaskSelection(Bundle):
    """Which tasks: a suite, some of its ids, at most so many."""

    PARAM: ClassVar[str] = "selection"

    tasks_path: str | None = option("--tasks", metavar="PATH", help=SUITE_HELP)
    task_ids: tuple[str, ...] = option(
        "--task",
        multiple=True,
        metavar="ID",
        callback=_task_ids,
        help="Only this task id (e.g. normal/1); repeatable, or several at once as ID,ID.",
    )
    limit: int | None = option(
        "--limit", type=click.IntRange(min=1), help="Record at most this many of the selected tasks."
    )


@dataclass(frozen=True, kw_only=True)
class PrefixOptions(Bundle):
    """A hop-conditioned run: where each task starts, from which reference run."""

    PARAM: ClassVar[str] = "prefix"

    prefix_run: str | None = option(
        "--prefix-run",
        metavar="RUN",
        help="Hop-conditioned: start each task of this reference run where its episode reached --at-hop (or "
        "--at-step), replaying its steps from the archive, then hand over to --agent on the live web. The "
        f"tasks are the reference run's (select with --task/--limit). RUN: {RUN_REF}.",
    )
    at_hop: tuple[int, ...] | str | None = option(
        "--at-hop",
        metavar="K|all",
        callback=_at_hop,
        help="--prefix-run: the hop the agent starts at (1 = the first; K,K for several; all: one episode per hop "
        "of each task). The reference's hops verdicts say where each hop started.",
    )
    at_step: int | None = option(
        "--at-step",
        type=click.IntRange(min=0),
        metavar="N",
        help="--prefix-run: hand over after the reference's first N steps instead.",
    )
    hide_prefix: bool = option(
        "--hide-prefix",
        is_flag=True,
        help="--prefix-run: do not show the agent the prefix's actions as its own earlier actions.",
    )

    def spec(self, repeats: int | None) -> PrefixSpec | None:
        """Where a hop-conditioned run hands over (None: a run from the start pages)."""
        from mmina.replayer.prefixes import PrefixSpec

        at_hop, at_step = self.at_hop, self.at_step
        if not self.prefix_run:
            if at_hop is not None or at_step is not None or self.hide_prefix:
                raise click.UsageError("--at-hop, --at-step and --hide-prefix go with --prefix-run RUN")
            return None
        if repeats is not None:
            raise click.UsageError(
                "--repeats records runs from the start pages: it does not go with --prefix-run"
            )
        if (at_hop is None) == (at_step is None):
            raise click.UsageError(
                "--prefix-run needs where to hand over: --at-hop K (or all) or --at-step N"
            )
        return PrefixSpec(
            self.prefix_run, at_hop if isinstance(at_hop, tuple) else (), at_hop == "all", at_step
        )


@dataclass(frozen=True, kw_only=True)
class RunOptions(Bundle):
    """The run: its name, resuming it, repeats and budgets."""

    PARAM: ClassVar[str] = "run"

    run_id: str | None = option(
        "--run-id", help="Name of the run (default: time, agent and a random suffix)."
    )
    resume: bool = option(
        "--resume",
        is_flag=True,
        help="Continue a run (--run-id, else the latest): record its tasks (and repeats) not yet recorded, and "
        "again those whose episode an infrastructure error ended (the browser, the store or the endpoint "
        "failed).",
    )
    rerun_errors: bool = option(
        "--rerun-errors",
        is_flag=True,
        help="--resume: record again also the tasks whose episode an agent or task error ended.",
    )
    repeats: int | None = option(
        "--repeats",
        type=click.IntRange(1, MAX_REPEATS),
        metavar="K",
        help="Record each task K times (attempts 1..K, each seeded apart): `mmina report` then gives the success "
        "rate's mean with a bootstrap interval over repeats, pass@k, pass^k and the flakiest tasks. A resumed "
        "run keeps its own.  [default: 1]",
    )
    max_steps: int = option(
        "--max-steps",
        type=click.IntRange(1, MAX_STEPS),
        default=30,
        show_default=True,
        help="Step budget per episode.",
    )
    max_cost: float | None = option(
        "--max-cost",
        type=Bounded(0, MAX_BUDGET_USD),
        metavar="USD",
        help="Start no episode once this session's episodes cost this much (from --price-in/--price-out); those "
        "in flight finish, and --resume continues the run.",
    )
    max_hours: float | None = option(
        "--max-hours",
        type=Bounded(0, MAX_BUDGET_HOURS),
        metavar="HOURS",
        help="Start no episode once this session has run this long; those in flight finish, and --resume "
        "continues the run.",
    )


@dataclass(frozen=True, kw_only=True)
class CaptureOptions(Bundle):
    """What the browser shows and keeps: viewport, schemes, screenshots, marks, drift."""

    PARAM: ClassVar[str] = "capture"

    viewport: tuple[int, int] = option(
        "--viewport",
        default="1280x2048",
        show_default=True,
        callback=_viewport,
        help=f"Viewport WIDTHxHEIGHT (width {VIEWPORT_WIDTHS[0]}..{VIEWPORT_WIDTHS[1]}, height "
        f"{VIEWPORT_HEIGHTS[0]}..{VIEWPORT_HEIGHTS[1]}).",
    )
    allowed_schemes: tuple[str, ...] = option(
        "--allow-scheme",
        multiple=True,
        metavar="SCHEME",
        callback=_schemes,
        help="Let tabs go to URLs of this scheme too, e.g. file (repeatable; by default agents stay on http, https "
        "and about:blank: a goto elsewhere is an action error).",
    )
    no_screenshots: bool = option(
        "--no-screenshots", is_flag=True, help="Do not capture screenshots (nor set-of-marks)."
    )
    no_marks: bool = option(
        "--no-marks",
        is_flag=True,
        help="Do not paint set-of-marks screenshots (painted only for agents shown them; marks are stored).",
    )
    drift: int = option(
        "--drift",
        type=click.IntRange(0, MAX_DRIFT),
        default=0,
        show_default=True,
        help=f"Drift level of the fixture web (0..{MAX_DRIFT}).",
    )

    def browser(self, browser: BrowserOptions) -> BrowserConfig:
        from mmina.recorder.browser import BrowserConfig

        width, height = self.viewport
        return BrowserConfig(
            executable=browser.browser_path,
            extra_args=browser.browser_args,
            viewport_width=width,
            viewport_height=height,
            screenshots=not self.no_screenshots,
            set_of_marks=not self.no_marks,
            allowed_schemes=self.allowed_schemes,
        )


@click.command()
@store_option
@TaskSelection.options(renamed={"--task": "--task-ids"})
@click.option(
    "--agent",
    default="oracle",
    show_default=True,
    help="oracle, heuristic (a rule-based baseline that fails like a weak model), replay, openai (a model "
    "behind an OpenAI-compatible endpoint), human (you type "
    "each action), or module:Class for your own agent.",
)
@AgentOptions.options()
@PrefixOptions.options()
@RunOptions.options()
@CaptureOptions.options()
@BrowserOptions.options()
@ScaleOptions.options(what="recorded")
@format_option()
def record(
    store_path: str | None,
    selection: TaskSelection,
    agent: str,
    agent_options: AgentOptions,
    prefix: PrefixOptions,
    run: RunOptions,
    capture: CaptureOptions,
    browser: BrowserOptions,
    scale: ScaleOptions,
    fmt: str,
) -> None:
    """Record an agent on tasks in Chromium, step by step. Every step's observation, action and
    network trace go to the store.

    With no options, records the built-in fixture suite with the oracle agent into the
    default store, starting and stopping the local fixture web itself. Each episode's
    deterministic verdicts (evaluators task and hops) are stored as it ends, so
    `mmina report` works right after; the run's Table 2 is printed at the end.

    \b
    Examples:
      mmina record --task normal/1                  # one task, a few seconds
      mmina record                                  # the built-in suite: 100 tasks, 3-6 minutes
      mmina record --task normal/1 --store /tmp/demo-store
      mmina record --agent heuristic --workers 2
      mmina record --agent mypkg.agents:MyAgent --tasks path/to/mmina/normal
      mmina record --agent replay --from-run 20261122-120439-oracle-fd2d80 --drift 3
      mmina record --agent openai --model gpt-4o --input-mode multimodal --memory 2
      mmina record --agent openai --model gpt-4o --model-deadline 60 --model-retries 2
      mmina record --tasks my-local-pages --allow-scheme file
      mmina record --run-id nightly --resume
      mmina record --run-id nightly --resume --rerun-errors
      mmina record --agent heuristic --limit 10 --repeats 3
      mmina record --agent oracle --error-rate 0.1 --seed 7 --repeats 5
      mmina record --workers 2 --limit 20
      mmina record --agent openai --model gpt-4o --workers 2 --concurrency 32
      mmina record --executor ray --workers 4 --concurrency 16 --ray-address auto
      mmina record --agent heuristic --prefix-run ORACLE_RUN --at-hop all
      mmina record --agent openai --model gpt-4o --prefix-run ORACLE_RUN --at-hop 2 --hide-prefix

    With --prefix-run the agent starts in the middle of each task: the reference run's episode
    is replayed from its archive up to the start of hop K (by its hops verdicts), then the
    agent goes on on the live web from there; `mmina report --table conditioned_hops` sets hop
    success given a correct prefix beside the free-running Table 3.
    """
    spec = prefix.spec(run.repeats)
    config = _config(
        selection, agent, agent_options, prefix, run, capture.browser(browser), capture.drift, scale.layout()
    )
    endpoint = check_model_endpoint(config.agent, config.agent_settings)
    store = open_store(store_path, create=True)
    if spec is not None:
        _record_conditioned(store, config, spec, fmt)
        return
    summary = _record_with_progress(store, config)
    table = _sr_by_bucket(store, summary.run_id)
    repeats = _run_table(store, summary.run_id, "repeats") if summary.repeats > 1 else None
    if fmt == "json":
        print_json(
            {
                **summary.as_json(),
                "endpoint": endpoint,
                "sr_by_bucket": table.records() if table else None,
                **({"repeats_table": repeats.records()} if repeats else {}),
            }
        )
    elif fmt == "csv":
        render_rows(SUMMARY_COLUMNS, _summary_rows(summary), "csv")
    else:
        _print_summary(summary)
        if table is not None:
            print_tables([t for t in (table, repeats) if t is not None])
            echo(
                f"full report: mmina report --run {summary.run_id} --format html -o report.html "
                f"--store {summary.store}"
            )


def _record_conditioned(store: Store, config: RecordConfig, spec: PrefixSpec, fmt: str) -> None:
    """A hop-conditioned run, its episodes and skipped prefixes, then its conditioned_hops table."""
    from mmina.replayer.conditioned import record_conditioned

    summary = record_conditioned(store, config, spec, on_start=_log_start, on_episode=_log_conditioned())
    table = _run_table(store, summary.run.run_id, "conditioned_hops")
    if fmt == "json":
        print_json({**summary.as_json(), "conditioned_hops": table.records() if table else None})
    elif fmt == "csv":
        render_rows(CONDITIONED_COLUMNS, _conditioned_rows(summary), "csv")
    else:
        _print_conditioned(summary)
        if table is not None:
            print_tables([table])


def _sr_by_bucket(store: Store, run_id: str) -> Table | None:
    """The run's Table 2 from the verdicts the recorder stored (None, with a note, if it cannot be made)."""
    return _run_table(store, run_id, "sr_by_bucket")


def _run_table(store: Store, run_id: str, name: str) -> Table | None:
    """One report table of the run from the verdicts the recorder stored (None, with a note, if
    it cannot be made)."""
    from mmina.analysis.report import build_report

    try:
        (table,) = build_report(store, [run_id]).chosen([name])
        return table
    except MminaError as exc:
        echo(f"no {name} table for run {run_id}: {exc}", err=True)
        return None


def _config(
    selection: TaskSelection,
    agent: str,
    agent_options: AgentOptions,
    prefix: PrefixOptions,
    run: RunOptions,
    browser: BrowserConfig,
    drift: int,
    layout: Layout,
) -> RecordConfig:
    """The run configuration from the command-line options."""
    from mmina.recorder.recording import RecordConfig
    from mmina.tasks.budget import Limits

    if agent_options.error_rate and agent != "oracle":
        raise click.UsageError(
            "--error-rate is the oracle agent's (a noisy oracle): use it with --agent oracle"
        )
    return RecordConfig(
        tasks=selection.tasks_path,
        task_ids=selection.task_ids,
        limit=selection.limit,
        agent=agent,
        run_id=run.run_id,
        resume=run.resume,
        rerun_errors=run.rerun_errors,
        limits=Limits(max_steps=run.max_steps),
        drift=drift,
        layout=layout,
        browser=browser,
        agent_settings=replace(agent_options.settings(), show_prefix=not prefix.hide_prefix),
        max_cost_usd=run.max_cost,
        max_hours=run.max_hours,
        repeats=run.repeats,
    )


def _record_with_progress(store: Store, config: RecordConfig) -> RunSummary:
    """A live progress bar (ETA, running SR) on a terminal; one line per episode in logs
    and for agents that talk to the terminal themselves (a bar would redraw over them)."""
    from mmina.agents.registry import INTERACTIVE_AGENTS
    from mmina.recorder.recording import record_run

    if not stderr_is_terminal() or config.agent in INTERACTIVE_AGENTS:
        return record_run(store, config, on_start=_log_start, on_episode=_log_episode())
    with progress_bar("sr", "workers", eta=True) as progress:
        assert progress is not None  # stderr is a terminal
        bar = progress.add_task("recording", total=None, sr="", workers="")
        results: list[EpisodeResult] = []

        def on_start(run_id: str, total: int) -> None:
            progress.update(bar, description=f"run {run_id}", total=total)

        def on_episode(_task: Task, result: EpisodeResult) -> None:
            results.append(result)
            progress.update(bar, advance=1, sr=_running_sr(results))

        def on_workers(alive: int, lost: int) -> None:
            progress.update(bar, workers=workers_line(alive, lost))

        return record_run(store, config, on_start=on_start, on_episode=on_episode, on_workers=on_workers)


def workers_line(alive: int, lost: int) -> str:
    """The workers at work, and those lost so far (a progress bar's field)."""
    return f"{alive} worker{'s' if alive != 1 else ''}" + (f" ({lost} lost)" if lost else "")


def _running_sr(results: list[EpisodeResult]) -> str:
    """The verdict-based SR so far (``hops`` verdicts written with each episode; infrastructure errors left out)."""
    counted = [r for r in results if r.error_kind != INFRASTRUCTURE]
    hops = sum(r.hops_to_do for r in counted) or 1
    passed = sum(r.hops_credited for r in counted)
    return f"task SR {sum(r.success for r in counted) / (len(counted) or 1):.0%} hop SR {passed / hops:.0%}"


def _log_start(run_id: str, total: int) -> None:
    echo(f"recording run {run_id}: {total} task(s)", err=True)


def _log_episode() -> Callable[[Task, EpisodeResult], None]:
    results: list[EpisodeResult] = []

    def log(task: Task, result: EpisodeResult) -> None:
        results.append(result)
        status = f"{result.status} ({result.error_kind})" if result.error_kind else result.status
        repeat = f" (repeat {result.attempt})" if result.attempt > 1 else ""
        echo(
            f"[{len(results)}] {task.task_id}{repeat}: {status}, {result.stop_reason}, "
            f"{result.hops_credited}/{result.n_hops} hops, {result.n_steps} steps ({_running_sr(results)})",
            err=True,
        )

    return log


def _log_conditioned() -> Callable[[ConditionedEpisode], None]:
    count = [0]

    def log(episode: ConditionedEpisode) -> None:
        count[0] += 1
        result, prefix = episode.result, episode.prefix
        echo(
            f"[{count[0]}] {result.task_id} from hop {prefix.start_hop + 1} ({prefix.steps} prefix step(s), "
            f"{'faithful' if episode.check.faithful else 'NOT faithful'}): {result.status}, "
            f"{result.stop_reason}, {result.hops_credited}/{result.hops_to_do} hops",
            err=True,
        )

    return log


CONDITIONED_COLUMNS = [
    "task",
    "from hop",
    "prefix steps",
    "prefix faithful",
    "status",
    "stop",
    "hops",
    "steps",
    "answer",
    "error",
]


def _conditioned_rows(summary: ConditionedSummary) -> list[tuple[Any, ...]]:
    return [
        (
            e.result.task_id,
            e.prefix.start_hop + 1,
            e.prefix.steps,
            "yes" if e.check.faithful else f"no: {e.check.mismatch}",
            e.result.status,
            e.result.stop_reason,
            f"{e.result.hops_credited}/{e.result.hops_to_do}",
            e.result.n_steps,
            e.result.final_answer or "",
            e.result.error or "",
        )
        for e in summary.episodes
    ]


def _print_conditioned(summary: ConditionedSummary) -> None:
    render_rows(
        CONDITIONED_COLUMNS,
        _conditioned_rows(summary),
        "table",
        title=f"run {summary.run.run_id} (prefixes of run {summary.prefix_run})",
    )
    for skipped in summary.skipped:
        hop = f" hop {skipped.hop}" if skipped.hop is not None else ""
        echo(f"skipped {skipped.task_id}{hop}: {skipped.reason}")
    if summary.run.skipped:
        echo(f"skipped {len(summary.run.skipped)} episode(s) already recorded in this run")
    run = summary.run
    echo(
        f"{len(summary.episodes)} episode(s) in {run.duration_s:.1f} s: prefix fidelity "
        f"{summary.prefix_fidelity:.1%} ({summary.faithful_episodes} of {len(summary.episodes)} prefixes "
        f"faithful); from the start hop: task SR {run.task_sr:.1%}, hop SR {run.hop_sr:.1%} (hops verdicts), "
        f"{run.errors} error(s), {run.tokens} tokens, {_cost(run.cost_usd, run.steps)}; stored in {run.store}"
    )


SUMMARY_COLUMNS = ["task", "repeat", "status", "stop", "hops", "steps", "answer", "error"]


def _summary_rows(summary: RunSummary) -> list[tuple[Any, ...]]:
    return [
        (
            e.task_id,
            e.attempt,
            e.status,
            e.stop_reason,
            f"{e.hops_credited}/{e.n_hops}",
            e.n_steps,
            e.final_answer if e.final_answer is not None else "",
            e.error or "",
        )
        for e in summary.episodes
    ]


def _print_summary(summary: RunSummary) -> None:
    render_rows(SUMMARY_COLUMNS, _summary_rows(summary), "table", title=f"run {summary.run_id}")
    if summary.skipped:
        echo(
            f"skipped {len(summary.skipped)} {'episode' if summary.repeats > 1 else 'task'}(s) already recorded "
            "in this run"
        )
    if summary.rerun:
        echo(
            f"recorded {len(summary.rerun)} {'episode' if summary.repeats > 1 else 'task'}(s) again whose episode "
            "had ended in an error; the new episodes supersede the old ones, which stay in the store but count in "
            "no table"
        )
    if summary.verdicts_added:
        echo(
            f"scored {len(summary.verdicts_added)} episode(s) committed without their verdicts "
            "(an earlier recording was cut short between an episode and its verdicts)"
        )
    if summary.task_warnings:
        echo(
            f"{len(summary.task_warnings)} warning(s) about the task files (odd but runnable): "
            "`mmina tasks validate --tasks PATH` lists them"
        )
    if summary.stopped is not None:
        spent = "--max-cost" if summary.stopped == "max_cost" else "--max-hours"
        echo(
            f"stopped on budget ({spent}): {summary.left} task(s) not started; mmina record --resume --run-id "
            f"{summary.run_id} continues the run"
        )
    if summary.workers_lost:
        echo(
            f"{summary.workers_lost} worker(s) lost during the run; what they had in flight was recorded again "
            "(each task once)"
        )
    faults = summary.endpoint
    if faults["retries"]:
        echo(
            f"the model endpoint failed {faults['retries']} attempt(s), retried; {faults['episodes_held']} "
            f"episode(s) waited {faults['waited_s']:.0f} s in all for it to answer again (none failed for it)"
        )
    echo(
        f"{len(summary.episodes)} episode(s) in {summary.duration_s:.1f} s: task SR {summary.task_sr:.1%}, "
        f"hop SR {summary.hop_sr:.1%} (hops verdicts; live tracking reached {summary.live_hop_sr:.1%}), "
        f"{summary.errors} error(s){_infrastructure(summary)}, {summary.tokens} tokens, "
        f"{_cost(summary.cost_usd, summary.steps)}; stored in {summary.store}"
    )
    if summary.infrastructure_errors:
        echo(
            f"{summary.infrastructure_errors} episode(s) ended in an infrastructure error (the browser, the store "
            f"or the endpoint failed: not the agent's); they count in no rate, and mmina record --resume --run-id "
            f"{summary.run_id} records them again"
        )


def _infrastructure(summary: RunSummary) -> str:
    count = summary.infrastructure_errors
    return f" and {count} infrastructure error(s), not counted" if count else ""


def _cost(cost_usd: float, steps: int) -> str:
    """The run's cost, and per step when it cost anything."""
    per_step = f" (${cost_usd / steps:.5f} per step)" if cost_usd and steps else ""
    return f"${cost_usd:.4f}{per_step}"
