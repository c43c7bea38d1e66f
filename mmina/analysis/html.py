"""The HTML report and the episode viewer (no network needed: they work from a file:// URL).

``mmina view`` writes one self-contained file (its screenshots inlined as data URIs). The
report is a page plus a folder next to it (``<name>_files/``) holding plotly.js and the
viewer's screenshots, shrunk and stored once by content: the page stays a few megabytes
whatever the number of steps, and opens at once.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from mmina.analysis.display import display
from mmina.analysis.viewer import shrink, trajectories

if TYPE_CHECKING:  # plotly and the report's charts are imported by the report only, not by ``mmina view``
    from mmina.analysis.report import Report
    from mmina.analysis.tables import Table
    from mmina.store import Store

REPORT_SHOT_WIDTH = 640
"""Width of the report viewer's screenshots: half a 1280-pixel viewport, which JPEG decodes
at that scale directly (no resampling), and the marks' labels stay legible."""
PLOTLY_FILE = "plotly.min.js"

STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 48px;color:#222}
nav{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #ddd;z-index:10}
nav a{margin-right:12px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}
.viewer{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:16px}
.viewer img{max-width:100%;border:1px solid #ccc;display:block}
.shot{position:relative;display:inline-block;max-width:100%}
.shot .box{position:absolute;border:3px solid #e00;box-shadow:0 0 0 2px #fff;pointer-events:none}
pre{white-space:pre-wrap;word-wrap:break-word;background:#f7f7f7;padding:6px;font-size:12px;max-height:320px;overflow:auto}
.hops span{display:inline-block;padding:2px 8px;margin:2px;border-radius:4px;background:#eee}
.hops span.done{background:#8fd18f}.hops span.head{outline:2px solid #e0a000}
.target{background:#ffe066;font-weight:bold}.error{color:#b00}
.pass{color:#070}.fail{color:#b00}
"""

VIEWER_HTML = """
<div class="controls">
  <label>Episode <select id="episode-select"></select></label>
  <button id="prev-step" type="button">&larr; previous</button>
  <span id="step-label"></span>
  <button id="next-step" type="button">next &rarr;</button>
</div>
<h3 id="episode-title"></h3>
<p id="episode-intent"></p>
<div class="viewer">
  <div><div class="shot"><img id="step-shot" alt="screenshot of the step"><div id="step-box" class="box" hidden
    title="the element the action targeted"></div></div><p id="no-shot" hidden>no screenshot</p></div>
  <div>
    <p><b>URL</b> <span id="step-url"></span></p>
    <p><b>Action</b> <code id="step-action"></code> <span id="step-error" class="error"></span></p>
    <p><b>Target</b> <code id="step-target" class="target"></code></p>
    <p><b>Hop progress</b></p><div id="step-hops" class="hops"></div>
    <p><b>Verdicts</b></p><div id="episode-verdicts"></div>
    <details id="step-input-box"><summary><b>Model input</b></summary><pre id="step-input"></pre></details>
    <p><b>Model output</b></p><pre id="step-output"></pre>
    <p><b>Accessibility tree</b></p><pre id="step-tree"></pre>
  </div>
</div>
"""

VIEWER_JS = """
(function () {
  const episodes = JSON.parse(document.getElementById('trajectories').textContent);
  const select = document.getElementById('episode-select');
  let episode = 0, step = 0;
  const text = (id, value) => { document.getElementById(id).textContent = value == null ? '' : value; };
  episodes.forEach((e, i) => {
    const option = document.createElement('option');
    option.value = i; option.textContent = e.task_id + ' - ' + e.episode_id;
    select.appendChild(option);
  });
  function hops(e, s) {
    const box = document.getElementById('step-hops');
    box.replaceChildren();
    (e.procedure || []).filter(k => k !== 'end').forEach((keyword, i) => {
      const span = document.createElement('span');
      span.textContent = (i + 1) + '. ' + keyword;
      if (s.live_hops != null && i < s.live_hops) span.className = 'done';
      if (i === s.live_hops) span.className = 'head';
      box.appendChild(span);
    });
  }
  function verdicts(e) {
    const box = document.getElementById('episode-verdicts');
    box.replaceChildren();
    const byEvaluator = {};
    e.verdicts.forEach(v => { (byEvaluator[v.evaluator] = byEvaluator[v.evaluator] || []).push(v); });
    Object.entries(byEvaluator).forEach(([name, rows]) => {
      const line = document.createElement('div');
      line.textContent = name + ': ' + rows.map(v => (v.level === 'hop' ? 'hop ' + v.hop : v.level)
        + ' ' + v.verdict).join(', ');
      box.appendChild(line);
    });
    if (!e.verdicts.length) box.textContent = 'not scored yet (mmina rescore)';
  }
  function show() {
    const e = episodes[episode];
    if (!e) return;
    const s = e.steps[step] || {};
    text('episode-title', e.task_id + ' (' + e.run_id + '): ' + e.status + ', ' + e.stop_reason
      + (e.final_answer ? ', answer: ' + e.final_answer : '') + (e.error ? ', error: ' + e.error : ''));
    text('episode-intent', e.intent);
    text('step-label', 'step ' + (e.steps.length ? step + 1 : 0) + ' of ' + e.steps.length);
    text('step-url', s.url); text('step-action', s.action || '(unparsable output)');
    text('step-error', s.error); text('step-target', s.target);
    text('step-output', s.output); text('step-tree', s.tree);
    const img = document.getElementById('step-shot');
    img.hidden = !s.shot; document.getElementById('no-shot').hidden = !!s.shot;
    if (s.shot) img.src = s.shot; else img.removeAttribute('src');
    const box = document.getElementById('step-box');
    box.hidden = !(s.shot && s.box);
    if (s.box) ['left', 'top', 'width', 'height'].forEach(k => { box.style[k] = (100 * s.box[k]) + '%'; });
    text('step-input', s.input || 'no model was asked at this step');
    hops(e, s); verdicts(e);
    document.getElementById('prev-step').disabled = step <= 0;
    document.getElementById('next-step').disabled = step >= e.steps.length - 1;
  }
  window.mminaShowEpisode = function (id) {
    const index = episodes.findIndex(e => e.episode_id === id);
    if (index >= 0) { episode = index; step = 0; select.value = index; show(); }
  };
  select.addEventListener('change', () => { episode = Number(select.value); step = 0; show(); });
  document.getElementById('prev-step').addEventListener('click', () => { step = Math.max(0, step - 1); show(); });
  document.getElementById('next-step').addEventListener('click', () => {
    step = Math.min(episodes[episode].steps.length - 1, step + 1); show(); });
  document.addEventListener('keydown', ev => {
    if (ev.key === 'ArrowLeft') document.getElementById('prev-step').click();
    if (ev.key === 'ArrowRight') document.getElementById('next-step').click();
  });
  show();
})();
"""


def _json_script(element_id: str, data: Any) -> str:
    payload = json.dumps(data, ensure_ascii=False, default=str).replace("</", "<\\/")
    return f'<script type="application/json" id="{element_id}">{payload}</script>'


def table_html(table: Table) -> str:
    columns, rows = display(table)
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table data-table="{table.name}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def section(section_id: str, title: str, *parts: str) -> str:
    return f'<section id="{section_id}"><h2>{escape(title)}</h2>{"".join(parts)}</section>'


def page(title: str, nav: list[tuple[str, str]], body: str, script_src: str | None = None) -> str:
    """A complete document, loading ``script_src`` (plotly.js next to the report) when given."""
    script = f'<script src="{escape(script_src)}"></script>' if script_src else ""
    links = "".join(f'<a href="#{i}">{escape(t)}</a>' for i, t in nav)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style>{script}</head>"
        f"<body><h1>{escape(title)}</h1><nav>{links}</nav>{body}</body></html>"
    )


def viewer_section(trajectories: list[dict[str, Any]]) -> str:
    return section(
        "viewer",
        "Trajectory viewer",
        VIEWER_HTML,
        _json_script("trajectories", trajectories),
        f"<script>{VIEWER_JS}</script>",
    )


def _episode_list(report: Report, shown: set[str]) -> str:
    rows = []
    for e in report.scored.episodes:
        link = (
            f'<a href="#viewer" onclick="mminaShowEpisode({escape(json.dumps(e.episode_id))})">view</a>'
            if e.episode_id in shown
            else ""
        )
        verdict = f'<span class="{"pass" if e.passed else "fail"}">{escape(e.verdict)}</span>'
        rows.append(
            f"<tr><td>{escape(e.run_id)}</td><td>{escape(e.task_id)}</td><td>{e.n_hops}</td>"
            f"<td>{e.hops_passed}/{e.hops_total}</td><td>{verdict}</td><td>{escape(e.stop_reason)}</td>"
            f"<td>{e.n_steps}</td><td>{link}</td></tr>"
        )
    head = "".join(
        f"<th>{c}</th>" for c in ("run", "task", "hops", "hops passed", "verdict", "stop", "steps", "")
    )
    return (
        f'<table data-table="episodes"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


SECTIONS = (
    ("sr-by-bucket", "Success by hop count", "sr_by_bucket"),
    ("repeats", "Repeated runs", "repeats"),
    ("consistency", "Consistency over repeats", "consistency"),
    ("flaky-tasks", "Flaky tasks", "flaky_tasks"),
    ("hop-positions", "Hop positions", "hop_positions"),
    ("hop-cost", "Cost per hop", "hop_cost"),
    ("first-failures", "Early failure", "first_failures"),
    ("failure-modes", "Failure modes", "failure_modes"),
    ("per-site", "Per site", "per_site"),
    ("actions", "Actions per task", "actions_by_hops"),
    ("cost", "Tokens and cost", "cost"),
    ("conditioned-hops", "Hop success given a correct prefix", "conditioned_hops"),
)
"""The report's sections: (element id, title, table); a section whose table the report has not
(``conditioned_hops`` without hop-conditioned episodes, the repeats' without repeats) is left out
(:func:`report_sections`)."""


def report_sections(report: Report) -> list[tuple[str, str, str]]:
    """The sections of :data:`SECTIONS` whose table this report has."""
    return [s for s in SECTIONS if report.has(s[2])]


def _charts(report: Report) -> dict[str, list[str]]:
    from mmina.analysis import charts

    parts = {
        name: [charts.to_div(figure, element) for element, figure in figures]
        for name, figures in charts.report_charts(report).items()
    }
    parts["failure_modes"].append(table_html(report.table("episode_failures")))
    return parts


def report_html(report: Report, trajectories: list[dict[str, Any]], plotly_src: str) -> str:
    """The whole report: summary, every table with its chart, the episode list and the viewer;
    ``plotly_src`` is where the page finds plotly.js."""
    scored = report.scored
    summary = section(
        "summary",
        "Summary",
        f"<p>Runs: {escape(', '.join(scored.runs))}; evaluator "
        f"<code>{escape(scored.evaluator)}</code>; {len(scored.episodes)} task(s). Rates carry their "
        "95% Wilson interval in brackets.</p>",
    )
    extra = _charts(report)
    sections = report_sections(report)
    parts = [section(i, t, table_html(report.table(name)), *extra.get(name, [])) for i, t, name in sections]
    shown = {t["episode_id"] for t in trajectories}
    episodes = section("episodes", "Episodes", _episode_list(report, shown))
    nav = [
        ("summary", "Summary"),
        *((i, t) for i, t, _ in sections),
        ("episodes", "Episodes"),
        ("viewer", "Viewer"),
    ]
    body = summary + "".join(parts) + episodes + viewer_section(trajectories)
    return page(f"mmina report: {', '.join(scored.runs)} ({scored.evaluator})", nav, body, plotly_src)


def episode_html(trajectory: dict[str, Any]) -> str:
    """One episode's viewer as a page of its own (``mmina view``)."""
    return page(
        f"mmina episode {trajectory['episode_id']}", [("viewer", "Viewer")], viewer_section([trajectory])
    )


def viewer_episodes(report: Report, limit: int) -> list[str]:
    """The episodes the report's viewer shows: failed ones first (what one wants to look at)."""
    ordered = sorted(report.scored.episodes, key=lambda e: (e.passed, e.run_id, e.task_id))
    return [e.episode_id for e in ordered[:limit]]


class ImageFolder:
    """The report's screenshots as files in its folder: shrunk, named by content, written once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.written: dict[str, int] = {}

    def place(self, image: bytes) -> str:
        """Write the image (if new) and return its address relative to the report page."""
        small = shrink(image, REPORT_SHOT_WIDTH)
        name = hashlib.sha256(small).hexdigest()[:24] + ".jpg"
        if name not in self.written:
            (self.folder / name).write_bytes(small)
            self.written[name] = len(small)
        return f"{quote(self.folder.name)}/{name}"


@dataclass(frozen=True)
class WrittenReport:
    """What ``write_report`` wrote: the page and its folder, with their sizes in bytes."""

    page: Path
    page_bytes: int
    folder: Path
    folder_bytes: int
    images: int


def write_report(store: Store, report: Report, out: Path, viewer_limit: int) -> WrittenReport:
    """The HTML report at ``out`` and its files in ``<stem>_files/`` next to it: plotly.js once,
    and the screenshots of the viewer's episodes (``viewer_limit`` at most, failed first)."""
    folder = out.with_name(f"{out.stem}_files")
    from plotly.offline import get_plotlyjs

    folder.mkdir(parents=True, exist_ok=True)
    plotly = get_plotlyjs().encode()
    (folder / PLOTLY_FILE).write_bytes(plotly)
    images = ImageFolder(folder)
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        shown = trajectories(store, viewer_episodes(report, viewer_limit), images.place, pool.map)
    html = report_html(report, shown, f"{quote(folder.name)}/{PLOTLY_FILE}").encode()
    out.write_bytes(html)
    return WrittenReport(
        out, len(html), folder, len(plotly) + sum(images.written.values()), len(images.written)
    )
