"""``mmina replay``: re-drive stored episodes (or a new agent) on the archived web."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from mmina.cli.bundles import PRICES, AgentOptions, BrowserOptions, ScaleOptions
from mmina.cli.common import (
    MAX_STEPS,
    Bounded,
    check_model_endpoint,
    format_option,
    open_store,
    run_option,
    store_option,
)
from mmina.cli.render import echo, print_json, progress_bar, render_rows
from mmina.errors import MminaError

if TYPE_CHECKING:
    from mmina.executors.interface import Layout
    from mmina.recorder.browser import BrowserConfig
    from mmina.replayer.fidelity import EpisodeFidelity, RequestCounts
    from mmina.replayer.replays import AgentEpisode, AgentReplayReport, ReplayReport
    from mmina.store import Store

MAX_DIFFS_SHOWN = 5


class BelowMinimumFidelity(MminaError):
    """The replay reproduced less than ``--min-fidelity`` of the steps."""


@click.command()
@store_option
@run_option("Replay every episode of this run")
@click.option("--episode", "episode_id", metavar="ID", help="Replay this one episode.")
@click.option(
    "--min-fidelity",
    type=Bounded(0, 1),
    metavar="X",
    help="Exit 1 when the share of steps with URL and tree reproduced is below X (0..1).",
)
@click.option(
    "--run-id", "new_run", metavar="NAME", help="Name of the new (replay) run (default: time, agent, suffix)."
)
@BrowserOptions.options()
@click.option(
    "--agent",
    metavar="NAME",
    help="Run this agent (as for record) on the archived web instead of the stored actions.",
)
@click.option(
    "--task",
    "task_ids",
    multiple=True,
    metavar="ID",
    help="--agent: only this task of the source; repeatable.",
)
@click.option(
    "--max-steps",
    type=click.IntRange(1, MAX_STEPS),
    default=30,
    show_default=True,
    help="--agent: step budget per episode.",
)
@AgentOptions.options(
    omit=(*PRICES, "memory_by", "caption_model"),
    openai="--agent openai",
    oracle="--agent oracle",
    replay="--agent replay",
)
@ScaleOptions.options(what="replayed")
@format_option()
def replay(
    run_id: str | None,
    episode_id: str | None,
    min_fidelity: float | None,
    new_run: str | None,
    browser: BrowserOptions,
    agent: str | None,
    task_ids: tuple[str, ...],
    max_steps: int,
    agent_options: AgentOptions,
    scale: ScaleOptions,
    store_path: str | None,
    fmt: str,
) -> None:
    """Replay stored episodes from the archive and report fidelity. Every request is answered from
    the archive.

    Each episode is re-driven with its stored actions in a fresh Chromium whose requests are
    all served from the recorded traffic (never the live network), in the recording's time (the
    page clock follows the recorded timeline: where the replay is slower, the page's time waits)
    and with Math.random and crypto seeded. The replay is stored as a new run (agent
    `replay`); the report compares every step's URL, accessibility tree and screenshot with
    the recording and counts requests served exactly, fuzzily, by nearest match, or not at all.

    With --agent, a new agent runs on the archived web of the run instead (a counterfactual
    on a frozen site); requests the archive cannot answer are listed as coverage gaps.

    \b
    Examples:
      mmina replay --run 20261122-120439-oracle-fd2d80
      mmina replay --run latest
      mmina replay --episode normal-1-3f2a9c0d1e2b4a5c --format json
      mmina replay --run nightly --min-fidelity 0.99
      mmina replay --run nightly --agent openai --model gpt-4o
      mmina replay --run nightly --agent mypkg.agents:MyAgent --task normal/1
      mmina replay --run nightly --concurrency 8
      mmina replay --run nightly --executor ray --workers 4 --concurrency 8
    """
    if bool(run_id) == bool(episode_id):
        raise click.UsageError("name exactly one source: --run ID or --episode ID")
    source = _Source(run_id, episode_id, new_run, _browser(browser), scale.layout())
    if agent:
        if min_fidelity is not None:
            raise click.UsageError(
                "--min-fidelity compares a replay with its recording; it does not apply to --agent"
            )
        _agent_mode(open_store(store_path), source, agent, agent_options, task_ids, max_steps, fmt)
    else:
        _replay_mode(open_store(store_path), source, min_fidelity, fmt)


@dataclass(frozen=True)
class _Source:
    """What is replayed, into which run, in which browser and spread how."""

    run_id: str | None
    episode_id: str | None
    new_run: str | None
    browser: BrowserConfig
    layout: Layout


def _replay_mode(store: Store, source: _Source, minimum: float | None, fmt: str) -> None:
    from mmina.replayer.replays import replay_run

    with _progress("replaying") as (on_start, advance):
        report = replay_run(
            store,
            source.run_id,
            source.episode_id,
            browser=source.browser,
            new_run=source.new_run,
            layout=source.layout,
            on_start=on_start,
            on_episode=lambda e: advance(_episode_line(e)),
        )
    if fmt == "json":
        print_json(
            {
                **report.as_json(),
                "min_fidelity": minimum,
                "passed": minimum is None or report.fidelity >= minimum,
            }
        )
    elif fmt == "csv":
        render_rows(REPLAY_COLUMNS, _replay_rows(report), "csv")
    else:
        _print_replay(report)
    if minimum is not None and report.fidelity < minimum:
        raise BelowMinimumFidelity(f"fidelity {report.fidelity:.1%} is below --min-fidelity {minimum:.1%}")


def _agent_mode(
    store: Store,
    source: _Source,
    agent: str,
    agent_options: AgentOptions,
    task_ids: tuple[str, ...],
    max_steps: int,
    fmt: str,
) -> None:
    from mmina.replayer.replays import replay_agent
    from mmina.tasks.budget import Limits

    settings = agent_options.settings()
    endpoint = check_model_endpoint(agent, settings)
    with _progress("agent on the archive") as (on_start, advance):
        report = replay_agent(
            store,
            agent,
            source.run_id,
            source.episode_id,
            settings=settings,
            limits=Limits(max_steps=max_steps),
            task_ids=task_ids,
            browser=source.browser,
            new_run=source.new_run,
            layout=source.layout,
            on_start=on_start,
            on_episode=lambda e: advance(_agent_line(e)),
        )
    if fmt == "json":
        print_json({**report.as_json(), "endpoint": endpoint})
    elif fmt == "csv":
        render_rows(AGENT_COLUMNS, _agent_rows(report), "csv")
    else:
        _print_agent(report)


def _browser(browser: BrowserOptions) -> BrowserConfig:
    """The executable and extra flags given; viewport and capture come from the source run."""
    from mmina.recorder.browser import BrowserConfig

    return BrowserConfig(executable=browser.browser_path, extra_args=browser.browser_args)


# ---------------------------------------------------------------- progress


@contextmanager
def _progress(what: str) -> Iterator[tuple[Callable[[str, int], None], Callable[[str], None]]]:
    """A progress bar on a terminal, one stderr line per episode otherwise."""
    with progress_bar() as progress:
        if progress is None:

            def log_start(run_id: str, total: int) -> None:
                echo(f"{what}: {total} episode(s) into run {run_id}", err=True)

            yield log_start, lambda line: echo(line, err=True)
            return
        bar = progress.add_task(what, total=None)

        def on_start(run_id: str, total: int) -> None:
            progress.update(bar, description=f"{what} → {run_id}", total=total)

        yield on_start, lambda _line: progress.update(bar, advance=1)


def _episode_line(episode: EpisodeFidelity) -> str:
    return (
        f"{episode.task_id}: fidelity {episode.fidelity:.0%}, "
        f"{episode.screenshots_identical}/{episode.screenshots_compared} screenshots identical, "
        f"{episode.requests.unmatched} unmatched request(s), {episode.requests.missing_body} with a missing body, "
        f"{episode.requests.redacted_body} with a body redaction changed"
    )


def _agent_line(episode: AgentEpisode) -> str:
    result = episode.result
    return (
        f"{result.task_id}: {result.status}, {result.stop_reason}, {result.hops_credited}/{result.n_hops} hops, "
        f"{len(episode.coverage_gaps)} coverage gap(s)"
    )


# ---------------------------------------------------------------- rendering


def _counts(counts: RequestCounts) -> str:
    return f"{counts.exact}/{counts.fuzzy}/{counts.nearest}/{counts.unmatched}"


REPLAY_COLUMNS = [
    "task",
    "source episode",
    "steps",
    "URL",
    "tree",
    "screenshots",
    "requests e/f/n/u",
    "fidelity",
]


def _replay_rows(report: ReplayReport) -> list[tuple[Any, ...]]:
    return [
        (
            e.task_id,
            e.source_episode,
            f"{e.recorded_steps}→{e.replayed_steps}",
            f"{e.url_equal}/{len(e.steps)}",
            f"{e.tree_equal}/{len(e.steps)}",
            f"{e.screenshots_identical}/{e.screenshots_compared}",
            _counts(e.requests),
            f"{e.fidelity:.1%}",
        )
        for e in report.episodes
    ]


def _print_replay(report: ReplayReport) -> None:
    render_rows(
        REPLAY_COLUMNS,
        _replay_rows(report),
        "table",
        title=f"replay {report.replay_run} of run {report.source_run}",
        secondary=("screenshots", "tree", "URL", "steps"),
    )
    _print_differences(report)
    summary = report.summary()
    shots = summary["screenshots_identical"]
    echo(
        f"fidelity {summary['fidelity']:.1%} over {summary['steps']} step(s) "
        f"(URL {summary['url_equal']}, tree {summary['tree_equal']}); screenshots identical "
        f"{'n/a' if shots is None else f'{shots:.1%}'}; requests: {_counts(summary['requests'])} "
        f"(exact/fuzzy/nearest/unmatched), {summary['requests'].missing_body} matched with a missing "
        f"body, {summary['requests'].redacted_body} served a body redaction changed, "
        f"{summary['requests'].failed} the router failed to answer; stored as run {report.replay_run}"
    )
    _print_redacted_steps(report)


def _print_redacted_steps(report: ReplayReport) -> None:
    """Every step served a body that redaction changed: the page did not get the bytes it got
    when recorded (``mmina store verify --redacted`` lists the bodies)."""
    steps = [
        f"{e.task_id} step {s.step_index} ({s.requests.redacted_body})"
        for e in report.episodes
        for s in e.steps
        if s.requests.redacted_body
    ]
    if steps:
        echo(f"served a body redaction changed: {', '.join(steps)}")


def _print_differences(report: ReplayReport) -> None:
    """The first few steps that were not reproduced, with their tree diffs."""
    shown = 0
    for episode in report.episodes:
        for step in episode.steps:
            if step.faithful or shown >= MAX_DIFFS_SHOWN:
                continue
            shown += 1
            echo(f"\n{episode.task_id} step {step.step_index}: URL {step.recorded_url} → {step.replayed_url}")
            if step.tree_change:
                echo(f"tree: {step.tree_change}")
            if step.tree_diff and step.tree_diff != step.tree_change:
                echo(step.tree_diff)
            for match in step.matches:
                served = (
                    f"served by recorded {match.recorded_url}" if match.recorded_url else "a synthetic answer"
                )
                echo(f"{match.kind}: {match.method} {match.url} — {served}")
        for url in episode.unmatched_urls:
            echo(f"{episode.task_id}: not in the archive: {url}")
        for socket in episode.sockets:
            if not socket.faithful:
                echo(
                    f"{episode.task_id}: socket {socket.url}: {socket.equal} of {socket.recorded} recorded "
                    f"message(s) repeated ({socket.replayed} in the replay); {socket.first_difference}"
                )


AGENT_COLUMNS = ["task", "status", "stop", "hops", "steps", "answer", "requests e/f/n/u", "gaps"]


def _agent_rows(report: AgentReplayReport) -> list[tuple[Any, ...]]:
    return [
        (
            e.result.task_id,
            e.result.status,
            e.result.stop_reason,
            f"{e.result.hops_credited}/{e.result.n_hops}",
            e.result.n_steps,
            e.result.final_answer or "",
            _counts(e.requests),
            len(e.coverage_gaps),
        )
        for e in report.episodes
    ]


def _print_agent(report: AgentReplayReport) -> None:
    render_rows(
        AGENT_COLUMNS,
        _agent_rows(report),
        "table",
        title=f"{report.agent} on the archive of run {report.source_run} → run {report.replay_run}",
    )
    gaps = report.coverage_gaps
    echo(f"{len(gaps)} coverage gap(s): request(s) outside the archive, answered with an error")
    for gap in gaps:
        echo(f"  {gap}")
