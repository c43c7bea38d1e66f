"""A smoke run of bench/ with tiny sizes: every benchmark runs end to end and reports its figures.

Timings are not asserted (machines are noisy); what must hold whatever the machine is: the
capture-off run repeats the recorded actions, the replay reproduces the recording without
touching the live web, and the synthetic store has the size asked for.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.store_helpers import REPO_ROOT

WAIT_S = 1800
"""The quick bench takes minutes on an idle machine and several times that on a loaded one; speed
is what it measures and prints, never what this test asserts."""
SECTIONS = {"capture", "capture A/B", "parallel", "replay", "size", "memory", "model input", "hardweb", "realweb",
            "redaction", "rescore", "store", "epoch", "objectstore", "serve", "report-html", "interchange"}


@pytest.mark.timeout(WAIT_S + 60)
def test_the_quick_bench_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    run = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(out)], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=WAIT_S)
    assert run.returncode == 0, run.stderr[-2000:]
    figures = {(f["section"], f["name"]): f for f in json.loads(out.read_text())["figures"]}
    assert {section for section, _ in figures} == SECTIONS
    assert "same actions: True" in figures["capture", "same actions, capture off"]["note"]
    assert figures["capture A/B", "side by side, p50"]["note"].startswith("4 observations")
    assert figures["replay", "steps with URL and tree reproduced"]["value"] == 1.0
    assert figures["replay", "requests reaching the live drift-3 web"]["value"] == 0
    assert figures["replay", "requests unmatched by the archive"]["value"] == 0
    assert figures["store", "synthetic store"]["value"] == 20_000
    assert figures["objectstore", "synthetic store written to s3://"]["value"] == 20_000
    assert figures["hardweb", "requests reaching the live site during replays"]["value"] == 0
    assert all(f["value"] == 0 for (section, name), f in figures.items()
               if section == "realweb" and "connections reaching the live app" in name)
    assert figures["serve", "a newly committed episode shown"]["note"].startswith("slowest of 5 commits")
    assert figures["report-html", "HTML report page"]["note"].startswith("4 episodes")
    assert figures["redaction", "npm corpus: files changed or learned from"]["value"] == 0
    assert all(f["value"] == 0 for (section, name), f in figures.items() if "body redaction changed" in name)
    assert all(f["value"] == 100.0 for (section, name), f in figures.items() if name.endswith(": fidelity"))
    assert figures["rescore", "fuzzy, warm judge cache"]["note"].startswith("0 requests sent")
    few, whole = (figures["interchange", f"WARC export, {n}: peak RSS"]["value"] for n in ("10 tasks of the run",
                                                                                          "the whole run"))
    assert whole < 1.5 * few, "the WARC export's memory grows with the run"
    assert 0 < figures["model input", "model input bytes per step (stored by content)"]["value"] < \
        figures["model input", "store bytes per step, with model input"]["value"]
    for section, name in figures:
        value = figures[section, name]["value"]
        assert value is not None and value == value, f"{section}/{name} has no value"  # NaN != NaN
    assert "mmina benchmarks" in run.stdout and "capture per step" in run.stdout
