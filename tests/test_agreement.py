"""``mmina agreement`` and its statistics: Cohen's kappa, its bootstrap interval, precision /
recall / F1 of "pass", checked by hand on a small case and against scikit-learn on generated
data; the command over a real store with labels imported from CSV and JSON."""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from collections import Counter
from pathlib import Path
from random import Random

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score, f1_score, precision_score, recall_score

from mmina.cli import cli
from mmina.stats import Confusion, binomial, kappa_interval
from tests.judge_helpers import synthetic_store, write_verdicts

EPISODES = [
    ("r1", "e1", "t1", 1),
    ("r1", "e2", "t2", 3),
    ("r1", "e3", "t3", 3),
    ("r1", "e4", "t4", 5),
    ("r1", "e5", "t5", 1),
    ("r1", "e6", "t6", 1),
    ("r2", "f1", "t1", 1),
]
FUZZY = {
    "e1": ("pass", []),
    "e2": ("pass", []),
    "e3": ("fail", []),
    "e4": ("fail", []),
    "e5": ("unclear", []),
    "e6": ("pass", []),
    "f1": ("pass", []),
}
KEYPOINTS = {
    "e1": (None, ["pass"]),
    "e2": (None, ["pass", "pass", "fail"]),
    "e3": (None, ["fail"] * 3),
    "e4": (None, ["pass", "pass", "fail", "pass", "fail"]),
    "e5": (None, ["fail"]),
    "e6": (None, ["pass"]),
}
ALICE_FIRST = "episode_id,hop,label,note\ne1,task,fail,changed my mind later\n"
ALICE = """episode_id,hop,label,note
e1,,pass,
e1,1,pass,
e2,task,fail,the price is wrong
e2,1,pass,
e2,2,fail,
e2,3,fail,
e3,,fail,
e3,1,fail,
e3,2,fail,
e3,3,unsure,cannot tell from the screenshots
e4,,pass,
e4,1,pass,
e4,2,pass,
e4,3,pass,
e4,4,pass,
e4,5,fail,
e5,task,pass,
"""
BOB = [
    {"episode_id": "e1", "hop": None, "label": "fail", "labeller": "bob"},
    {"episode_id": "e2", "hop": "task", "label": "fail", "labeller": "bob", "note": "agreed"},
]


def mmina(*args: str, exit_code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == exit_code, result.output
    return result.output


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seven episodes, fuzzy task verdicts, hop verdicts of a judge, alice's labels (CSV, the
    second file replacing her first label of e1) and bob's (JSON)."""
    root = tmp_path_factory.mktemp("agreement")
    path = root / "store"
    store = synthetic_store(path, EPISODES)
    write_verdicts(store, "fuzzy", FUZZY, EPISODES)
    write_verdicts(store, "keypoints", KEYPOINTS, EPISODES)
    (root / "first.csv").write_text(ALICE_FIRST)
    (root / "alice.csv").write_text(ALICE)
    (root / "bob.json").write_text(json.dumps(BOB))
    for name in ("first.csv", "alice.csv"):
        mmina("import", "labels", str(root / name), "--labeller", "alice", "--store", str(path))
    mmina("import", "labels", str(root / "bob.json"), "--store", str(path))
    return path


def measure(store: Path, *args: str) -> dict:
    return json.loads(mmina("agreement", "--store", str(store), "--run", "r1", "--format", "json", *args))


def group(result: dict, level: str, by: str = "all", name: str = "all") -> dict:
    return next(g for g in result["groups"] if (g["level"], g["by"], g["group"]) == (level, by, name))


def counts(found: dict) -> tuple[int, ...]:
    return tuple(
        found[k]
        for k in (
            "tp",
            "fp",
            "fn",
            "tn",
            "unsure_evaluator",
            "unsure_reference",
            "missing_evaluator",
            "missing_reference",
        )
    )


# -- the statistics ---------------------------------------------------------------------------


def test_a_hand_computed_case() -> None:
    # 50 items: the judge passes 25, the people 30; they agree on 20 passes and 15 fails.
    c = Confusion(tp=20, fp=5, fn=10, tn=15)
    assert (c.n, c.agreement) == (50, 0.7)
    # chance agreement 0.5 * 0.6 + 0.5 * 0.4 = 0.5, so kappa = (0.7 - 0.5) / (1 - 0.5)
    assert c.kappa == pytest.approx(0.4)
    assert (c.precision, c.recall) == (0.8, pytest.approx(2 / 3))
    assert c.f1 == pytest.approx(2 * 0.8 * (2 / 3) / (0.8 + 2 / 3))
    lo, hi = kappa_interval(c)
    assert lo is not None and hi is not None and lo < 0.4 < hi
    assert kappa_interval(c) == (lo, hi), "seeded: the same data gives the same interval"
    wider = kappa_interval(Confusion(2, 1, 1, 2))
    narrower = kappa_interval(Confusion(200, 100, 100, 200))
    assert wider[1] - wider[0] > 3 * (narrower[1] - narrower[0])


def test_undefined_kappa_and_empty_groups() -> None:
    assert Confusion(tp=7).kappa is None and Confusion().kappa is None, (
        "one verdict everywhere: kappa is undefined"
    )
    assert Confusion(tp=7).agreement == 1.0 and kappa_interval(Confusion(tp=7)) == (None, None)
    assert Confusion(tn=3).precision is None and Confusion(tn=3).f1 is None
    assert Confusion(tp=5, tn=5).kappa == 1.0 and Confusion(fp=5, fn=5).kappa == -1.0


@given(
    st.lists(
        st.tuples(st.sampled_from(["pass", "fail"]), st.sampled_from(["pass", "fail"])),
        min_size=1,
        max_size=200,
    )
)
@settings(max_examples=60, deadline=None)
def test_kappa_precision_recall_f1_equal_scikit_learns(pairs: list[tuple[str, str]]) -> None:
    judged, truth = [j for j, _ in pairs], [t for _, t in pairs]
    cells = Counter(pairs)
    c = Confusion(
        cells[("pass", "pass")], cells[("pass", "fail")], cells[("fail", "pass")], cells[("fail", "fail")]
    )
    with warnings.catch_warnings():  # scikit-learn warns where a figure is undefined (nan): so do we (None)
        warnings.simplefilter("ignore")
        theirs = cohen_kappa_score(judged, truth, labels=["pass", "fail"])
        scores = [
            metric(truth, judged, pos_label="pass", zero_division=math.nan)
            for metric in (precision_score, recall_score, f1_score)
        ]
    assert (c.kappa is None) if math.isnan(theirs) else c.kappa == pytest.approx(theirs, abs=1e-12)
    for ours, score in zip((c.precision, c.recall, c.f1), scores):
        assert (ours is None) if math.isnan(score) else ours == pytest.approx(score, abs=1e-12)


def test_the_bootstrap_interval_is_the_item_resampling_ones() -> None:
    """Drawing the four cells as one multinomial is resampling the items: the intervals match
    a plain bootstrap over the items (to Monte Carlo error)."""
    c = Confusion(tp=22, fp=6, fn=9, tn=23)
    items = ["tp"] * c.tp + ["fp"] * c.fp + ["fn"] * c.fn + ["tn"] * c.tn
    draw, plain = Random(7), []
    for _ in range(4000):
        got = Counter(draw.choices(items, k=len(items)))
        kappa = Confusion(got["tp"], got["fp"], got["fn"], got["tn"]).kappa
        if kappa is not None:
            plain.append(kappa)
    plain.sort()
    lo, hi = kappa_interval(c, resamples=4000, seed=3)
    assert lo == pytest.approx(plain[int(0.025 * len(plain))], abs=0.05)
    assert hi == pytest.approx(plain[int(0.975 * len(plain))], abs=0.05)


@pytest.mark.parametrize("n, p", [(1, 0.5), (7, 0.1), (40, 0.5), (1000, 0.3), (1000, 0.999)])
def test_binomial_draws_have_the_binomials_mean_and_variance(n: int, p: float) -> None:
    draw = Random(11)
    values = [binomial(draw, n, p) for _ in range(6000)]
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / len(values)
    assert all(0 <= v <= n for v in values)
    assert mean == pytest.approx(n * p, abs=4 * math.sqrt(n * p * (1 - p) / len(values)) + 1e-9)
    assert variance == pytest.approx(n * p * (1 - p), rel=0.1, abs=0.01)


# -- the command --------------------------------------------------------------------------------


def test_a_judge_against_one_labeller_per_task_and_per_hop(store: Path) -> None:
    result = measure(store, "--evaluator", "keypoints", "--reference", "human:alice")
    assert (
        result["evaluator"] == "keypoints"
        and result["reference"] == "human:alice"
        and result["runs"] == ["r1"]
    )
    hops = group(result, "hop")
    assert counts(hops) == (5, 1, 1, 4, 0, 1, 0, 2)
    assert hops["agreement"] == pytest.approx(9 / 11) and hops["kappa"] == pytest.approx(38 / 60)
    assert hops["precision"] == pytest.approx(5 / 6) and hops["recall"] == pytest.approx(5 / 6)
    assert hops["f1"] == pytest.approx(5 / 6) and hops["kappa_lo"] < hops["kappa"] < hops["kappa_hi"]
    assert counts(group(result, "hop", "hop", "1")) == (3, 0, 0, 1, 0, 0, 0, 2)
    assert group(result, "hop", "hop", "1")["kappa"] == 1.0
    assert counts(group(result, "hop", "hop", "3")) == (0, 0, 1, 1, 0, 1, 0, 0)
    assert group(result, "hop", "hop", "3")["kappa"] == 0.0
    assert [g["group"] for g in result["groups"] if g["by"] == "hop"] == ["1", "2", "3", "4", "5"]
    assert counts(group(result, "hop", "bucket", "5+")) == (3, 0, 1, 1, 0, 0, 0, 0)
    assert group(result, "task")["pairs"] == 0 and group(result, "task")["missing_evaluator"] == 6
    assert [(d["episode_id"], d["hop"], d["evaluator"], d["reference"]) for d in result["disagreements"]] == [
        ("e2", 2, "pass", "fail"),
        ("e4", 3, "fail", "pass"),
    ]
    assert result["disagreements"][0]["link"] == "http://127.0.0.1:8787/#/episode/e2"


def test_fuzzy_against_every_labeller_counts_unsure_and_missing_apart(store: Path) -> None:
    alone = measure(store, "--evaluator", "fuzzy", "--reference", "human:alice")
    task = group(alone, "task")
    assert counts(task) == (1, 1, 1, 1, 1, 0, 0, 1) and task["kappa"] == 0.0 and task["agreement"] == 0.5
    assert counts(group(alone, "task", "bucket", "1")) == (1, 0, 0, 0, 1, 0, 0, 1)
    assert task["matrix"]["unclear"]["pass"] == 1 and task["matrix"]["pass"]["missing"] == 1
    # bob says e1 fails where alice says it passes: for "human" that item is unsure
    both = measure(store, "--evaluator", "fuzzy")
    task = group(both, "task")
    assert both["reference"] == "human" and counts(task) == (0, 1, 1, 1, 1, 1, 0, 1)
    assert task["kappa"] == pytest.approx(-0.5) and task["f1"] == 0.0
    people = measure(store, "--evaluator", "human:alice", "--reference", "human:bob")
    assert counts(group(people, "task")) == (0, 1, 0, 1, 0, 0, 1, 4)
    assert group(people, "hop")["missing_reference"] == 14


def test_the_table_and_csv(store: Path) -> None:
    table = mmina(
        "agreement",
        "--store",
        str(store),
        "--run",
        "r1",
        "--evaluator",
        "keypoints",
        "--reference",
        "human:alice",
        "--serve-url",
        "http://localhost:9000/",
    )
    assert "keypoints against human:alice, per hop" in table and "0.633 [" in table
    assert "5 / 1 / 1 / 4" in table and "2 disagreeing item(s)" in table
    assert "http://localhost:9000/#/episode/e2" in table
    rows = list(
        csv.DictReader(
            io.StringIO(
                mmina(
                    "agreement",
                    "--store",
                    str(store),
                    "--run",
                    "r1",
                    "--evaluator",
                    "keypoints",
                    "--reference",
                    "human:alice",
                    "--format",
                    "csv",
                )
            )
        )
    )
    overall = next(r for r in rows if (r["level"], r["by"]) == ("hop", "all"))
    assert (overall["tp"], overall["fp"], overall["fn"], overall["tn"]) == ("5", "1", "1", "4")
    assert float(overall["kappa"]) == pytest.approx(38 / 60)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--evaluator", "fuzzy", "--reference", "fuzzy"], "both fuzzy: compare two different ones"),
        (
            ["--evaluator", "hops"],
            "no hops verdicts in run(s) r1; the store holds verdicts of fuzzy, human, keypoints, "
            "and `mmina rescore --list` names every evaluator: run `mmina rescore --evaluator hops "
            "--run r1` first",
        ),
        (
            ["--evaluator", "fuzzy", "--reference", "human:carol"],
            "no labels by carol in run(s) r1 (labellers there: alice, bob)",
        ),
        (["--evaluator", "fuzzy", "--run", "nope"], "no run 'nope' in"),
    ],
)
def test_clear_errors(store: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["agreement", "--store", str(store), "--run", "r1", *args])
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


def test_no_labels_names_the_two_ways_to_label(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "store", EPISODES[:2])
    write_verdicts(store, "fuzzy", {"e1": ("pass", []), "e2": ("fail", [])}, EPISODES[:2])
    output = mmina("agreement", "--store", str(tmp_path / "store"), "--evaluator", "fuzzy", exit_code=1)
    assert (
        "no human labels in run(s) r1: label episodes in `mmina serve` or with `mmina import labels FILE`"
        in output
    )


def test_help_has_examples() -> None:
    assert "mmina agreement --run nightly --evaluator fuzzy --reference human" in mmina("agreement", "--help")
    assert "mmina import labels labels.csv --labeller alice" in mmina("import", "labels", "--help")
