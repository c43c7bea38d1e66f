"""``mmina rankings``: does the archived web keep the live ranking of agents?"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from mmina.analysis.names import DEFAULT_EVALUATOR
from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import echo, print_json, render_rows

if TYPE_CHECKING:
    from mmina.analysis.replay_ranking import RankingShift

COLUMNS = ("agent", "tasks", "live_run", "live_sr", "archived_run", "archived_sr", "change")


@click.command()
@click.option(
    "--pair",
    "pairs",
    multiple=True,
    required=True,
    nargs=2,
    metavar="LIVE ARCHIVED",
    help="An agent's run on the live web and its run on the archived web (mmina replay --agent), "
    "as run references (repeatable: one per agent, two or more).",
)
@click.option(
    "--evaluator",
    default=DEFAULT_EVALUATOR,
    show_default=True,
    metavar="NAME",
    help="Whose verdicts give the success rates (the latest batch per episode).",
)
@click.option(
    "--bootstrap",
    "resamples",
    type=click.IntRange(0, 100_000),
    default=1000,
    show_default=True,
    metavar="N",
    help="Bootstrap resamples for tau's 95% interval (0: none).",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap (same seed, same interval)."
)
@store_option
@format_option("table", "csv", "json")
def rankings(
    pairs: tuple[tuple[str, str], ...],
    evaluator: str,
    resamples: int,
    seed: int,
    store_path: str | None,
    fmt: str,
) -> None:
    """Whether agents rank alike on the archived and the live web. It shows each agent's task SR
    live and archived (95% Wilson intervals, over the tasks both of its runs scored) and the change,
    then Kendall's tau-b between the live and the archived rates with a 95% bootstrap interval (each
    run's task outcomes resampled), and whether every two agents keep their order.

    \b
    Examples:
      mmina record --agent oracle --run-id ref --drift 2
      mmina record --agent heuristic --run-id heuristic-live --drift 2
      mmina replay --run ref --agent heuristic --new-run heuristic-archived
      mmina rankings --pair oracle-live oracle-archived --pair heuristic-live heuristic-archived \\
          --pair noisy-live noisy-archived
      mmina rankings --pair A-live A-archived --pair B-live B-archived --format json
    """
    from mmina.analysis.replay_ranking import replay_rankings

    shift = replay_rankings(open_store(store_path), pairs, evaluator, resamples, seed)
    if fmt == "json":
        print_json(shift.as_json())
        return
    render_rows(
        list(COLUMNS),
        _rows(shift, fmt == "table"),
        fmt,
        title=f"live and archived task SR ({evaluator} verdicts)",
    )
    if fmt == "table":
        echo(_verdict(shift))


def _rows(shift: RankingShift, shown: bool) -> list[tuple[object, ...]]:
    """One row per agent: rates as percentages on the terminal, as numbers in CSV."""

    def rate(value: float, sign: str = "") -> object:
        return f"{value:{sign}.1%}" if shown else value

    return [
        (
            a.agent,
            a.live.tasks,
            a.live.run_id,
            rate(a.live.rate),
            a.archived.run_id,
            rate(a.archived.rate),
            rate(a.change, "+"),
        )
        for a in shift.agents
    ]


def _verdict(shift: RankingShift) -> str:
    tau = "undefined (the rates tie)" if shift.tau is None else f"{shift.tau:.2f}"
    interval = (
        f" [{shift.low:.2f}, {shift.high:.2f}]" if shift.low is not None and shift.high is not None else ""
    )
    order = "the same order" if shift.same_order else "a different order"
    return f"Kendall's tau of the rankings: {tau}{interval}; the archived web puts the agents in {order}"
