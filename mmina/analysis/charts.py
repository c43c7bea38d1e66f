"""Plotly charts of the report tables (plotly.js ships with the page or its server, never fetched)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from mmina.analysis.report import Report
from mmina.analysis.tables import Table

CONFIG = {"displaylogo": False, "responsive": True}
LAYOUT: dict[str, Any] = {
    "height": 380,
    "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    "template": "plotly_white",
}


def to_div(figure: go.Figure, div_id: str) -> str:
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG)


def _error_bars(records: list[dict[str, Any]], name: str) -> dict[str, Any]:
    values = [(r[name] or 0, r[f"{name}_lo"] or 0, r[f"{name}_hi"] or 0) for r in records]
    return {
        "type": "data",
        "symmetric": False,
        "array": [hi - v for v, _, hi in values],
        "arrayminus": [v - lo for v, lo, _ in values],
    }


def sr_by_bucket(table: Table) -> go.Figure:
    records = table.records()
    buckets = [r["bucket"] for r in records]
    figure = go.Figure(
        [
            go.Bar(name=label, x=buckets, y=[r[key] for r in records], error_y=_error_bars(records, key))
            for key, label in (("task_sr", "task SR"), ("hop_sr", "hop SR"))
        ]
    )
    return figure.update_layout(
        title="Success rate by hop count (95% Wilson CI)",
        yaxis={"range": [0, 1.05], "tickformat": ".0%"},
        xaxis_title="hops per task",
        barmode="group",
        **LAYOUT,
    )


def hop_heatmap(table: Table, key: str, title: str) -> go.Figure:
    records = table.records()
    totals = sorted({r["n_hops"] for r in records})
    positions = list(range(1, max(totals, default=0) + 1))
    cells = {(r["n_hops"], r["hop"]): r for r in records}
    z = [[cells[(n, p)][key] if (n, p) in cells else None for p in positions] for n in totals]
    text = [
        [
            f"{cells[(n, p)][key]:.0%}" if (n, p) in cells and cells[(n, p)][key] is not None else ""
            for p in positions
        ]
        for n in totals
    ]
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=[f"hop {p}" for p in positions],
            y=[f"{n} hops" for n in totals],
            text=text,
            texttemplate="%{text}",
            zmin=0,
            zmax=1,
            colorscale="RdYlGn",
        )
    )
    return figure.update_layout(title=title, **LAYOUT)


def first_failures(table: Table) -> go.Figure:
    records = [r for r in table.records() if r["first_failure"] != "passed"]
    categories = sorted(
        {r["first_failure"] for r in records}, key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0)
    )
    traces = []
    for n_hops in sorted({r["n_hops"] for r in records}):
        counts = {r["first_failure"]: r["tasks"] for r in records if r["n_hops"] == n_hops}
        traces.append(
            go.Bar(
                name=f"{n_hops} hops",
                x=[f"hop {c}" if c.isdigit() else c for c in categories],
                y=[counts.get(c, 0) for c in categories],
            )
        )
    return go.Figure(traces).update_layout(
        title="First failed hop of failed tasks", barmode="stack", yaxis_title="tasks", **LAYOUT
    )


def failure_modes(table: Table) -> go.Figure:
    records = table.records()
    figure = go.Figure(go.Bar(x=[r["mode"] for r in records], y=[r["episodes"] for r in records]))
    return figure.update_layout(
        title="Failure modes of failed episodes (an episode may have several)",
        yaxis_title="episodes",
        **LAYOUT,
    )


def actions_by_hops(table: Table) -> go.Figure:
    records = table.records()
    x = [str(r["n_hops"]) for r in records]
    traces = [
        go.Bar(name=label, x=x, y=[r[key] for r in records])
        for key, label in (
            ("mean_steps", "all"),
            ("mean_steps_passed", "passed"),
            ("mean_steps_failed", "failed"),
        )
    ]
    return go.Figure(traces).update_layout(
        title="Mean actions per task by hop count",
        barmode="group",
        xaxis_title="hops per task",
        yaxis_title="steps",
        **LAYOUT,
    )


def report_charts(report: Report) -> dict[str, list[tuple[str, go.Figure]]]:
    """Every chart of the report by the table it draws: (element id, figure) in page order.
    The HTML report and ``mmina serve`` both show these."""
    positions = report.table("hop_positions")
    return {
        "sr_by_bucket": [("chart-sr-by-bucket", sr_by_bucket(report.table("sr_by_bucket")))],
        "hop_positions": [
            ("chart-hop-heatmap", hop_heatmap(positions, "sr", "Hop success by position")),
            (
                "chart-hop-heatmap-conditional",
                hop_heatmap(positions, "conditional_sr", "Hop success given the previous hop passed"),
            ),
        ],
        "first_failures": [("chart-first-failures", first_failures(report.table("first_failures")))],
        "failure_modes": [("chart-failure-modes", failure_modes(report.table("failure_modes")))],
        "actions_by_hops": [("chart-actions", actions_by_hops(report.table("actions_by_hops")))],
    }
