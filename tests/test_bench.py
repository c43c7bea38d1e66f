"""Smoke runs of bench/ with tiny sizes: the benchmarks run end to end and report their figures.

Timings are not asserted (machines are noisy); what must hold whatever the machine is: the
capture-off run repeats the recorded actions, the replay reproduces the recording without
touching the live web, and the synthetic store has the size asked for.

The default run tries a sample of the bench's parts (the model-input evidence, and the synthetic
store of 100 episodes with its rescoring and queries); the whole ``--quick`` bench runs with
MMINA_HEAVY=1. What the other parts measure is each checked, on a smaller scale, by a default
test of its own: recording and capture (test_record.py, test_shots.py), replay at drift 3
(test_replay.py), workers and episodes in flight (test_concurrency.py), the hard web
(test_hard_web.py), the real applications (test_realweb_apps.py), stores on S3
(test_s3_store.py), the server and its live updates (test_serve.py, test_serve_http.py), the
HTML report (test_view_html.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.machine import HUGE_PAGES, described, huge_pages, machine
from bench.synthetic import STEPS
from tests.store_helpers import REPO_ROOT

WAIT_S = 1800
"""The quick bench takes minutes on an idle machine and several times that on a loaded one; speed
is what it measures and prints, never what this test asserts."""
SECTIONS = {
    "capture",
    "capture A/B",
    "parallel",
    "replay",
    "size",
    "memory",
    "model input",
    "hardweb",
    "realweb",
    "redaction",
    "rescore",
    "store",
    "epoch",
    "objectstore",
    "serve",
    "report-html",
    "view",
    "interchange",
    "repeats",
    "judges",
    "rankings",
    "seeding",
    "quiet",
}
SAMPLE_PARTS = ("evidence", "scale")
"""The bench's parts (``--only``) the default run tries, and the sections they report."""
SAMPLE_SECTIONS = {"model input", "rescore", "store"}
SAMPLE_EPISODES = 100
VALUES: dict[tuple[str, str], float] = {
    ("replay", "steps with URL and tree reproduced"): 1.0,
    ("replay", "requests reaching the live drift-3 web"): 0,
    ("replay", "requests unmatched by the archive"): 0,
    ("hardweb", "requests reaching the live site during replays"): 0,
    ("redaction", "npm corpus: files changed or learned from"): 0,
    ("redaction", "applications' traffic: changed non-secrets"): 0,
}
NOTES = {
    ("capture A/B", "side by side, p50"): "4 observations",
    ("serve", "a newly committed episode shown"): "slowest of 5 commits",
    ("report-html", "HTML report page"): "4 episodes",
    ("rescore", "fuzzy, warm judge cache"): "0 requests sent",
}


def run_bench(tmp_path: Path, *args: str) -> tuple[dict[tuple[str, str], dict[str, Any]], str]:
    """``python -m bench --quick`` with ``args``: its figures by (section, name), and its output."""
    out = tmp_path / "results.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "mmina benchmarks" in run.stdout
    return {(f["section"], f["name"]): f for f in json.loads(out.read_text())["figures"]}, run.stdout


def check_figures(figures: dict[tuple[str, str], dict[str, Any]], episodes: int) -> None:
    """What must hold of every section present, whatever the machine."""
    sections = {section for section, _ in figures}
    for key, value in VALUES.items():
        assert key[0] not in sections or figures[key]["value"] == value, (key, figures[key])
    for key, note in NOTES.items():
        assert key[0] not in sections or figures[key]["note"].startswith(note), (key, figures[key])
    if "capture" in sections:
        assert "same actions: True" in figures["capture", "same actions, capture off"]["note"]
    if "store" in sections:
        assert figures["store", "synthetic store"]["value"] == STEPS * episodes
    if "objectstore" in sections:
        assert figures["objectstore", "synthetic store written to s3://"]["value"] == STEPS * episodes
    if "model input" in sections:
        assert (
            0
            < figures["model input", "model input bytes per step (stored by content)"]["value"]
            < figures["model input", "store bytes per step, with model input"]["value"]
        )
    assert all(
        f["value"] == 0
        for (section, name), f in figures.items()
        if section == "realweb" and "connections reaching the live app" in name
    )
    assert all(f["value"] == 0 for (section, name), f in figures.items() if "body redaction changed" in name)
    assert all(
        f["value"] == int(f["note"].split()[1])
        for (section, name), f in figures.items()
        if section == "redaction" and name.endswith("planted credentials found")
    )
    assert all(f["value"] == 100.0 for (section, name), f in figures.items() if name.endswith(": fidelity"))
    if "interchange" in sections:
        few, whole = (
            figures["interchange", f"WARC export, {n}: peak RSS"]["value"]
            for n in ("10 tasks of the run", "the whole run")
        )
        assert whole < 1.5 * few, "the WARC export's memory grows with the run"
    for section, name in figures:
        value = figures[section, name]["value"]
        assert value is not None and value == value, f"{section}/{name} has no value"  # NaN != NaN


@pytest.mark.timeout(WAIT_S + 60)
def test_a_sample_of_the_bench_reports_its_figures(tmp_path: Path) -> None:
    only = [arg for part in SAMPLE_PARTS for arg in ("--only", part)]
    figures, _ = run_bench(tmp_path, *only, "--episodes", str(SAMPLE_EPISODES))
    assert {section for section, _ in figures} == SAMPLE_SECTIONS
    check_figures(figures, SAMPLE_EPISODES)


@pytest.mark.heavy
@pytest.mark.timeout(WAIT_S + 60)
def test_the_quick_bench_reports_every_figure(tmp_path: Path) -> None:
    figures, stdout = run_bench(tmp_path)
    assert {section for section, _ in figures} == SECTIONS
    check_figures(figures, 2_000)
    assert "capture per step" in stdout


def test_the_bench_records_the_machines_huge_pages(tmp_path: Path) -> None:
    """The figures move with the kernel's huge pages (bench/machine.py): results.json says which."""
    root = tmp_path / "transparent_hugepage"
    choices = {
        "enabled": "always [madvise] never",
        "shmem_enabled": "always within_size advise [never] deny force",
        "hugepages-64kB/enabled": "[always] inherit madvise never",
        "hugepages-16kB/enabled": "always [inherit] madvise never",
        "hugepages-2048kB/enabled": "always inherit madvise [never]",
    }
    for name, text in choices.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    assert huge_pages(root) == {"anon": "madvise", "shmem": "never", "sizes always (kB)": [64]}
    (root / "enabled").write_text("[always] madvise never\n")
    assert huge_pages(root)["sizes always (kB)"] == [16, 64]  # 16 kB inherits "always"
    assert huge_pages(tmp_path / "absent") == {}
    here = machine()
    assert described(here).startswith(f"{here['cpus']} cores")
    pages = {"anon": "always", "shmem": "never", "sizes always (kB)": [64]}
    line = described({**here, "transparent huge pages": pages})
    assert line.endswith("anonymous always, shared never, sizes always 64 kB")
    assert not HUGE_PAGES.exists() or here["transparent huge pages"]["anon"] in {"always", "madvise", "never"}


def test_a_partial_section_replaces_only_the_figures_measured_again() -> None:
    """``MMINA_REALWEB=shiny`` measures one application: the others' figures in results.json stay."""
    from bench.run import merged

    def figure(section: str, name: str, value: float) -> dict[str, Any]:
        return {"section": section, "name": name, "value": value}

    old = {
        "figures": [
            figure("realweb", "shiny: fidelity", 86.0),
            figure("realweb", "dash: fidelity", 100.0),
            figure("view", "gone", 1.0),
            figure("size", "kept", 2.0),
        ]
    }
    new = {
        "measured_at": "now",
        "quick": False,
        "seconds": 1.0,
        "machine": {},
        "figures": [figure("realweb", "shiny: fidelity", 100.0), figure("view", "new", 0.5)],
    }
    data = merged(old, new, ["realweb", "view"], partial={"realweb"})
    assert sorted((f["section"], f["name"], f["value"]) for f in data["figures"]) == [
        ("realweb", "dash: fidelity", 100.0),
        ("realweb", "shiny: fidelity", 100.0),
        ("size", "kept", 2.0),
        ("view", "new", 0.5),
    ]
    whole = merged(old, new, ["realweb", "view"])
    assert ("realweb", "dash: fidelity") not in {(f["section"], f["name"]) for f in whole["figures"]}


def test_the_large_bodies_hand_over_is_their_time_after_the_hold_against_the_recorded_one() -> None:
    """``bench --only realweb``'s hand-over figure: a replayed large body's time less its hold
    (``x-mmina-handed``), against its recorded exchange; the worst body of the worst run."""
    from bench.realweb import HANDOVER_MARGIN_MS, add_handover
    from bench.results import Section
    from tests.realweb.check import LARGE_BODY, large_bodies

    def row(url: str, size: int, time_ms: float, handed: str | None = None) -> dict[str, Any]:
        headers = [{"name": "content-type", "value": "application/javascript"}]
        headers += [{"name": "x-mmina-handed", "value": handed}] if handed is not None else []
        return {"url": url, "response_body_size": size, "time_ms": time_ms, "response_headers": headers}

    recorded = [
        row("http://a.test/plotly.js", 4_800_000, 180.0),
        row("http://a.test/small.js", LARGE_BODY - 1, 5.0),
        row("http://a.test/dcc.js", 350_000, 70.0),
        row("http://a.test/dcc.js", 350_000, 900.0),  # a repeat: each URL's first counts
    ]
    first = large_bodies(
        recorded,
        [
            row("http://a.test/plotly.js", 4_800_000, 1_400.0, "1200"),  # held 1.2 s, handed over in 200 ms
            row("http://a.test/dcc.js", 350_000, 400.0, "390"),
            row("http://a.test/dcc.js", 350_000, 9_000.0, "10"),  # the replay's repeat: not this one
            row("http://a.test/small.js", LARGE_BODY - 1, 500.0, "0"),
        ],
    )
    assert [(b.url.rsplit("/", 1)[1], b.handover_ms, b.beyond_ms) for b in first] == [
        ("plotly.js", 200.0, 20.0),
        ("dcc.js", 10.0, -60.0),
    ]
    assert [b.ratio for b in first] == [1_400.0 / 180.0, 400.0 / 70.0]  # the whole exchange, hold and all
    second = large_bodies(
        recorded,
        [row("http://a.test/plotly.js", 4_800_000, 300.0, "40"), row("http://a.test/dcc.js", 350_000, 90.0)],
    )
    assert [(b.handover_ms, b.beyond_ms) for b in second] == [(260.0, 80.0), (None, None)]  # dcc: not told
    section = Section("realweb")
    add_handover(section, "dash", [first, second, ()])
    (figure,) = section.figures
    assert (figure.name, figure.value, figure.unit) == (
        "dash: large bodies' hand-over beyond their recorded exchange",
        80,
        "ms",
    )
    assert figure.target is not None and figure.target.bound == HANDOVER_MARGIN_MS and figure.met is False
    assert "4.8 MB plotly.js handed over in 260 ms against 180 ms recorded (held 40 ms" in figure.note
    assert "each run's worst, handed over / recorded: 200/180, 260/180 ms, of up to 2 " in figure.note
    empty = Section("realweb")
    add_handover(empty, "datasette", [(), ()])  # no large body: no figure
    assert empty.figures == []
