"""``mmina agreement``: how far an evaluator agrees with another (a judge with people's labels)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mmina.cli.common import format_option, open_store, store_option
from mmina.cli.render import echo, print_json, render_rows

if TYPE_CHECKING:
    from mmina.analysis.agreement import Agreement, Group
    from mmina.analysis.judge_audit import Audit, Estimate

COLUMNS = (
    "level",
    "by",
    "group",
    "items",
    "pairs",
    "agreement",
    "kappa",
    "kappa_lo",
    "kappa_hi",
    "precision",
    "recall",
    "f1",
    "tp",
    "fp",
    "fn",
    "tn",
    "unsure_evaluator",
    "unsure_reference",
    "missing_evaluator",
    "missing_reference",
)
SHOWN = 30
"""Disagreeing items listed on the terminal (--format json lists all)."""


@click.command()
@click.option(
    "--run", "runs", multiple=True, metavar="REF", help="Run to compare on (repeatable; default: every run)."
)
@click.option(
    "--evaluator",
    "evaluators",
    required=True,
    multiple=True,
    metavar="NAME",
    help="The evaluator measured: a name (fuzzy, keypoints, hops, ...), human, or human:LABELLER. With "
    "--audit, repeat it: every evaluator to compare.",
)
@click.option(
    "--reference",
    default="human",
    show_default=True,
    metavar="NAME",
    help="What it is measured against (the truth for precision and recall): human (every labeller: "
    "their verdict where they agree, unsure where they differ), human:LABELLER, or an evaluator.",
)
@click.option(
    "--audit",
    is_flag=True,
    help="The judge audit: each evaluator's agreement with every labeller beside the labellers' with each "
    "other (is the judge as good as a second human?), the runs ranked under each evaluator with "
    "Kendall's tau between the rankings (does the leaderboard depend on the judge?), and a warning "
    "when a judge's model is also a ranked run's.",
)
@click.option(
    "--bootstrap",
    "resamples",
    type=click.IntRange(0, 100_000),
    default=1000,
    show_default=True,
    metavar="N",
    help="Bootstrap resamples for the 95% intervals (0: none).",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap (same seed, same interval)."
)
@click.option(
    "--serve-url",
    default="http://127.0.0.1:8787",
    show_default=True,
    metavar="URL",
    help="Where mmina serve runs, for the links to the disagreeing episodes.",
)
@store_option
@format_option("table", "json", "csv")
def agreement(
    runs: tuple[str, ...],
    evaluators: tuple[str, ...],
    reference: str,
    audit: bool,
    resamples: int,
    seed: int,
    serve_url: str,
    fmt: str,
    store_path: str | None,
) -> None:
    """Agreement of an evaluator with a reference, per task and hop. It shows observed agreement,
    Cohen's kappa with a 95% bootstrap interval, precision / recall / F1 of "pass", and the
    confusion counts, overall, by hop-count bucket (1, 2-4, 5+) and by hop position. Items
    either side called unsure, or did not judge, are counted apart and left out of the
    figures. The disagreeing episodes are listed with links into mmina serve.

    With --audit and several evaluators: for each judge, human-human kappa (every pair of
    labellers) beside judge-human kappa (the judge with each labeller) and their difference,
    with intervals, and whether the judge lies below, within or above the human spread; the
    runs' task SR and rank under each evaluator (over the episodes all of them judged) and
    Kendall's tau-b between every two rankings with a 95% interval; warnings (a judge whose
    model is a ranked run's, fewer than three evaluators, runs or two labellers).

    \b
    Examples:
      mmina agreement --run nightly --evaluator fuzzy --reference human
      mmina agreement --evaluator keypoints --reference human:alice --format json
      mmina agreement --evaluator human:alice --reference human:bob
      mmina agreement --run nightly --evaluator fuzzy --reference mmina_official --format csv
      mmina agreement --audit --evaluator fuzzy --evaluator keypoints --evaluator must_include --evaluator human
    """
    store = open_store(store_path)
    if audit:
        from mmina.analysis.judge_audit import audit as run_audit

        _show_audit(run_audit(store, runs, evaluators, resamples, seed), fmt)
        return
    if len(evaluators) != 1:
        raise click.UsageError("name one --evaluator (several are compared with --audit)")
    from mmina.analysis.agreement import agreement as measure

    result = measure(store, runs, evaluators[0], reference, resamples, seed, serve_url)
    if fmt == "json":
        print_json(result.as_json())
    elif fmt == "csv":
        render_rows(COLUMNS, [[g.as_json()[c] for c in COLUMNS] for g in result.groups], "csv")
    else:
        _print_table(result)


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _kappa(group: Group) -> str:
    kappa = group.confusion.kappa
    if kappa is None:
        return "–"
    interval = (
        f" [{_number(group.kappa_lo, 2)}, {_number(group.kappa_hi, 2)}]" if group.kappa_lo is not None else ""
    )
    return f"{kappa:.3f}{interval}"


def _row(group: Group) -> list[Any]:
    c = group.confusion
    return [
        group.group if group.by == "all" else f"{group.by} {group.group}",
        group.items,
        c.n,
        _number(c.agreement),
        _kappa(group),
        _number(c.precision),
        _number(c.recall),
        _number(c.f1),
        f"{c.tp} / {c.fp} / {c.fn} / {c.tn}",
        f"{group.unsure_evaluator} / {group.unsure_reference}",
        f"{group.missing_evaluator} / {group.missing_reference}",
    ]


def _print_table(result: Agreement) -> None:
    head = [
        "group",
        "items",
        "pairs",
        "agreement",
        "kappa [95% CI]",
        "precision",
        "recall",
        "F1",
        "TP / FP / FN / TN",
        "unsure (eval / ref)",
        "missing (eval / ref)",
    ]
    for level in ("task", "hop"):
        groups = [g for g in result.groups if g.level == level]
        if groups:
            render_rows(
                head,
                [_row(g) for g in groups],
                "table",
                title=f"{result.evaluator} against {result.reference}, per {level} "
                f"(run(s) {', '.join(result.runs)}; pass is positive)",
            )
    found = result.disagreements
    if not found:
        echo("no item on which both decided differently")
        return
    render_rows(
        ["run", "task", "item", str(result.evaluator), str(result.reference), "episode"],
        [
            [
                d.run_id,
                d.task_id,
                "task" if d.hop is None else f"hop {d.hop}",
                d.evaluator,
                d.reference,
                d.link,
            ]
            for d in found[:SHOWN]
        ],
        "table",
        title=f"{len(found)} disagreeing item(s)",
    )
    if len(found) > SHOWN:
        echo(f"... and {len(found) - SHOWN} more (--format json lists all)")


BASELINE_COLUMNS = (
    "evaluator",
    "level",
    "by",
    "group",
    "items",
    "human_kappa",
    "human_lo",
    "human_hi",
    "judge_kappa",
    "judge_lo",
    "judge_hi",
    "difference",
    "difference_lo",
    "difference_hi",
    "place",
)


def _estimate(value: Estimate) -> str:
    interval = f" [{_number(value.lo, 2)}, {_number(value.hi, 2)}]" if value.lo is not None else ""
    return f"{_number(value.value)}{interval}"


def _flat(estimate: Estimate) -> list[float | None]:
    return [estimate.value, estimate.lo, estimate.hi]


def _show_audit(result: Audit, fmt: str) -> None:
    """The audit as JSON, as CSV (the baseline rows), or as three tables and the warnings."""
    if fmt == "json":
        print_json(result.as_json())
        return
    if fmt == "csv":
        render_rows(
            BASELINE_COLUMNS,
            [
                [
                    b.evaluator,
                    b.level,
                    b.by,
                    b.group,
                    b.items,
                    *_flat(b.human),
                    *_flat(b.judge),
                    *_flat(b.difference),
                    b.place,
                ]
                for b in result.baseline
            ],
            "csv",
        )
        return
    for evaluator in dict.fromkeys(b.evaluator for b in result.baseline):
        render_rows(
            [
                "level",
                "group",
                "items",
                "human-human kappa",
                f"{evaluator}-human kappa",
                "difference",
                "judge",
            ],
            [
                [
                    b.level,
                    b.group if b.by == "all" else f"{b.by} {b.group}",
                    b.items,
                    _estimate(b.human),
                    _estimate(b.judge),
                    _estimate(b.difference),
                    b.place,
                ]
                for b in result.baseline
                if b.evaluator == evaluator
            ],
            "table",
            title=f"Is {evaluator} as good as a second human? (labellers {', '.join(result.labellers)}; "
            "95% bootstrap intervals)",
        )
    render_rows(
        ["run", "model", "episodes", *result.evaluators],
        [
            [
                r.run_id,
                r.model or "–",
                r.episodes,
                *(f"{_number(r.rates[e])} (#{r.ranks[e]})" for e in result.evaluators),
            ]
            for r in result.ranking
        ],
        "table",
        title="Task SR (rank) under each evaluator, over the episodes all of them judged",
    )
    render_rows(
        ["evaluator A", "evaluator B", "runs", "Kendall tau-b [95% CI]"],
        [[t.a, t.b, t.runs, _estimate(t.tau)] for t in result.taus],
        "table",
        title="Does the leaderboard depend on the judge?",
    )
    for warning in result.warnings:
        echo(f"warning: {warning}", err=True)
