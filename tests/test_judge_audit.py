"""``mmina agreement --audit``: human–human beside judge–human agreement, the runs' rankings
under several evaluators and Kendall's tau between them, checked against scikit-learn and
scipy on generated data — the statistics alone, and the command over a real store (real
Parquet, labels imported from CSV files by the real command)."""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from random import Random
from statistics import fmean

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import kendalltau
from sklearn.metrics import cohen_kappa_score

from mmina.analysis.judge_audit import Estimate, _place, baseline, pair_kappa, same_model
from mmina.cli import cli
from mmina.evaluators.base import Score
from mmina.evaluators.batch import ScoreBatch, episode_score_rows
from mmina.stats import kendall_tau, percentile_interval, resample_counts
from mmina.store import Store
from tests.store_helpers import episode_row, run_row, step_row, task_row

SKILL = {"strong": 0.85, "good": 0.65, "fair": 0.45, "weak": 0.2}
"""Each run's chance of truly passing a task; the run ``good`` is of the judge's own model."""
MODELS = {"strong": "gpt-5", "good": "openai/judge-model", "fair": None, "weak": "small-model"}
EPISODES_PER_RUN = 40
FLIPS = {"alice": 0.08, "bob": 0.12, "fuzzy": 0.1, "keypoints": 0.3}
"""How often each rater's verdict is the opposite of the truth."""
RESAMPLES = "300"


def mmina(*args: str, exit_code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args), env={"COLUMNS": "220"})
    assert result.exit_code == exit_code, result.output
    return result.stdout


# -- the statistics against scipy and scikit-learn --------------------------------------------


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=30))
@settings(max_examples=80, deadline=None)
def test_kendall_tau_b_is_scipys(pairs: list[tuple[int, int]]) -> None:
    x, y = [float(a) for a, _ in pairs], [float(b) for _, b in pairs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns where tau is undefined (nan): so do we (None)
        theirs = kendalltau(x, y).statistic
    ours = kendall_tau(x, y)
    assert (ours is None) if math.isnan(theirs) else ours == pytest.approx(theirs, abs=1e-12)


def test_kendall_tau_by_hand_and_bad_input() -> None:
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0 and kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert kendall_tau([1, 1, 1], [1, 2, 3]) is None and kendall_tau([1], [1]) is None
    with pytest.raises(ValueError):
        kendall_tau([1, 2], [1])


@given(st.lists(st.tuples(*[st.sampled_from(["pass", "fail", "-"])] * 3), min_size=1, max_size=120))
@settings(max_examples=60, deadline=None)
def test_pair_kappa_is_scikit_learns_over_the_items_both_decided(items: list[tuple[str, str, str]]) -> None:
    counts = Counter(items)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        both = [(i[a], i[b]) for i in items if "-" not in (i[a], i[b])]
        ours = pair_kappa(counts, a, b)
        if not both:
            assert ours is None
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = cohen_kappa_score([p for p, _ in both], [q for _, q in both], labels=["pass", "fail"])
        assert (ours is None) if math.isnan(theirs) else ours == pytest.approx(theirs, abs=1e-12)


def _generated(n: int, seed: int) -> list[tuple[str, ...]]:
    """``n`` items judged by a judge and three labellers, each wrong by its own rate, some unlabelled."""
    draw, found = Random(seed), []
    for _ in range(n):
        truth = draw.random() < 0.5
        found.append(
            tuple(
                "-" if draw.random() < 0.05 else ("pass" if (draw.random() >= flip) == truth else "fail")
                for flip in (0.25, 0.1, 0.1, 0.15)
            )
        )
    return found


def test_the_human_baseline_is_the_mean_of_scikit_learns_pairwise_kappas() -> None:
    items = _generated(300, 5)
    result = baseline("judge", ["ann", "ben", "cy"], Counter(items), ("task", "all", "all"), 400, 1)

    def kappa(a: int, b: int) -> float:
        both = [(i[a], i[b]) for i in items if "-" not in (i[a], i[b])]
        return float(cohen_kappa_score([p for p, _ in both], [q for _, q in both]))

    humans = fmean([kappa(1, 2), kappa(1, 3), kappa(2, 3)])
    judge = fmean([kappa(0, 1), kappa(0, 2), kappa(0, 3)])
    assert result.human.value == pytest.approx(humans, abs=1e-12) and result.judge.value == pytest.approx(
        judge
    )
    assert result.difference.value == pytest.approx(judge - humans)
    assert result.pairs["ann~ben"] == pytest.approx(kappa(1, 2)) and result.pairs[
        "judge~cy"
    ] == pytest.approx(kappa(0, 3))
    assert result.items == 300 and result.place == "below", (
        "a judge wrong 25% of the time against people wrong 10-15%"
    )
    for estimate in (result.human, result.judge, result.difference):
        assert (
            estimate.lo is not None and estimate.hi is not None and estimate.lo < estimate.value < estimate.hi
        )
    again = baseline("judge", ["ann", "ben", "cy"], Counter(items), ("task", "all", "all"), 400, 1)
    assert again == result, "seeded: the same data gives the same intervals"


def test_a_judge_as_good_as_the_people_is_within_their_spread() -> None:
    items = [(i[1], i[2], i[3]) for i in _generated(200, 9)]  # the judge is a labeller like the others
    result = baseline("judge", ["ben", "cy"], Counter(items), ("task", "all", "all"), 400, 2)
    assert result.place == "within" and result.difference.lo < 0 < result.difference.hi
    assert _place(Estimate(0.1, 0.02, 0.2)) == "above" and _place(Estimate(None, None, None)) == "unknown"


def test_resampled_counts_keep_the_items_and_bootstrap_like_items() -> None:
    counts = {("pass",): 30, ("fail",): 10}
    draw = Random(3)
    shares = [resample_counts(draw, counts)[("pass",)] / 40 for _ in range(4000)]
    assert all(sum(resample_counts(draw, counts).values()) == 40 for _ in range(50))
    lo, hi = percentile_interval(shares)
    plain = sorted(sum(draw.random() < 0.75 for _ in range(40)) / 40 for _ in range(4000))
    assert lo == pytest.approx(plain[100], abs=0.03) and hi == pytest.approx(plain[3900], abs=0.03)
    assert percentile_interval([]) == (None, None) and resample_counts(draw, {}) == {}


def test_same_model_ignores_case_and_provider() -> None:
    assert same_model("openai/GPT-4o", "gpt-4o ") and not same_model("gpt-4o", "gpt-4o-mini")
    assert not same_model(None, None) and not same_model("x", None)


# -- the command over a store -----------------------------------------------------------------


Truth = dict[str, dict[str, list[tuple[str, ...]]]]
"""Per rater, per episode: the task verdict then each hop's."""


def _write_store(path: Path) -> tuple[Truth, dict[str, str]]:
    """Four runs of 40 episodes (1 to 3 hops), three judges' verdicts and two labellers' labels,
    each rater wrong at its own rate; returns every rater's verdicts and each episode's run."""
    draw = Random(2026)
    store = Store.open(path, create=True)
    given: Truth = defaultdict(dict)
    run_of = {}
    for run_id, skill in SKILL.items():
        hops = {f"t{n}": 1 + n % 3 for n in range(EPISODES_PER_RUN)}
        store.begin_run(
            run_id,
            run_row(model=MODELS[run_id], task_count=len(hops)),
            [task_row(t, n) for t, n in hops.items()],
        )
        batch = store.batch_writer(run_id)  # the run's episodes in one commit
        for task_id, n_hops in hops.items():
            episode_id = f"{run_id}-{task_id}"
            run_of[episode_id] = run_id
            batch.add_episode(
                {**episode_row(task_id, n_hops=n_hops, hop_steps=[]), "episode_id": episode_id}, [step_row(0)]
            )
            truth = [draw.random() < skill ** (1 / n_hops) for _ in range(n_hops)]
            for rater, flip in FLIPS.items():
                hop_verdicts = ["pass" if (draw.random() >= flip) == t else "fail" for t in truth]
                task = "pass" if all(v == "pass" for v in hop_verdicts) else "fail"
                given[rater][episode_id] = (task, *hop_verdicts)
            # a string check that passes every episode that reached its last hop's page
            given["must_include"][episode_id] = ("pass" if truth[-1] or draw.random() < 0.3 else "fail",)
        batch.commit()
    for rater in ("fuzzy", "keypoints", "must_include"):
        _write_batch(store, rater, given[rater], run_of)
    return given, run_of


def _write_batch(
    store: Store, evaluator: str, verdicts: dict[str, tuple[str, ...]], run_of: dict[str, str]
) -> None:
    model = {"fuzzy": "judge-model", "keypoints": "another-model"}.get(evaluator)
    batch = ScoreBatch.new(evaluator, "1", {"judge_model": model} if model else {})
    rows = defaultdict(list)
    for episode_id, (task, *hops) in verdicts.items():
        scores = [Score(task, float(task == "pass"))] + [
            Score(v, float(v == "pass"), "hop", i) for i, v in enumerate(hops)
        ]
        rows[run_of[episode_id]] += episode_score_rows(episode_id, episode_id.split("-")[1], scores, batch)
    for run_id, run_rows in rows.items():
        store.append("scores", run_rows, stem=batch.batch_id, run_id=run_id)


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Truth, dict[str, str]]:
    root = tmp_path_factory.mktemp("audit")
    given, run_of = _write_store(root / "store")
    for labeller in ("alice", "bob"):
        lines = ["episode_id,hop,label"] + [
            f"{e},{'task' if i == 0 else i},{v}"
            for e, verdicts in given[labeller].items()
            for i, v in enumerate(verdicts)
        ]
        (root / f"{labeller}.csv").write_text("\n".join(lines) + "\n")
        mmina(
            "import",
            "labels",
            str(root / f"{labeller}.csv"),
            "--labeller",
            labeller,
            "--store",
            str(root / "store"),
        )
    return root / "store", given, run_of


def _audit(store: Path, *args: str) -> dict:
    return json.loads(
        mmina(
            "agreement", "--audit", "--store", str(store), "--format", "json", "--bootstrap", RESAMPLES, *args
        )
    )


def _kappa(given: Truth, a: str, b: str, index: int | None, episodes: Sequence[str]) -> float:
    pairs = [
        (given[a][e][i], given[b][e][i])
        for e in episodes
        for i in range(len(given[a][e]))
        if (index is None and i == 0) or (index == -1 and i > 0) or i == index
    ]
    return float(cohen_kappa_score([p for p, _ in pairs], [q for _, q in pairs]))


def test_the_audit_is_what_scikit_learn_and_scipy_say(audited: tuple[Path, Truth, dict[str, str]]) -> None:
    store, given, run_of = audited
    result = _audit(
        store,
        "--evaluator",
        "fuzzy",
        "--evaluator",
        "keypoints",
        "--evaluator",
        "must_include",
        "--evaluator",
        "human",
    )
    assert result["labellers"] == ["alice", "bob"] and len(result["runs"]) == 4
    episodes = list(run_of)
    rows = {(b["evaluator"], b["level"], b["by"], b["group"]): b for b in result["baseline"]}
    for level, index in (("task", None), ("hop", -1)):
        for judge in ("fuzzy", "keypoints"):
            row = rows[(judge, level, "all", "all")]
            assert row["human"]["value"] == pytest.approx(_kappa(given, "alice", "bob", index, episodes))
            assert row["judge"]["value"] == pytest.approx(
                fmean([_kappa(given, judge, name, index, episodes) for name in ("alice", "bob")])
            )
            assert row["human"]["lo"] < row["human"]["value"] < row["human"]["hi"]
    assert rows[("keypoints", "hop", "all", "all")]["place"] == "below", (
        "wrong 30% of the time, the people 8-12%"
    )
    assert rows[("fuzzy", "hop", "all", "all")]["place"] == "within"
    assert [k[3] for k in rows if k[:3] == ("fuzzy", "hop", "hop")] == ["1", "2", "3"]
    by_position = rows[("fuzzy", "hop", "hop", "2")]
    pairs = [(given["fuzzy"][e][2], given["alice"][e][2]) for e in episodes if len(given["fuzzy"][e]) > 2]
    assert by_position["pairs"]["fuzzy~alice"] == pytest.approx(cohen_kappa_score(*zip(*pairs)))
    assert not any(b["evaluator"] == "human" for b in result["baseline"]), (
        "people are the yardstick, not a judge"
    )
    assert {b["level"] for b in result["baseline"] if b["evaluator"] == "must_include"} == {"task"}, (
        "no hop rows: no hop groups"
    )
    _check_rankings(result, given, run_of)


def _check_rankings(result: dict, given: Truth, run_of: dict[str, str]) -> None:
    evaluators = ["fuzzy", "keypoints", "must_include", "human"]
    people = {
        e: given["alice"][e][0] if given["alice"][e][0] == given["bob"][e][0] else "unclear" for e in run_of
    }
    verdicts = {**{n: {e: given[n][e][0] for e in run_of} for n in evaluators[:3]}, "human": people}
    rates = {
        run: [fmean(verdicts[n][e] == "pass" for e in run_of if run_of[e] == run) for n in evaluators]
        for run in SKILL
    }
    ranked = {r["run_id"]: r for r in result["ranking"]}
    assert sorted(ranked) == sorted(SKILL) and all(r["episodes"] == EPISODES_PER_RUN for r in ranked.values())
    for run, expected in rates.items():
        assert [ranked[run]["rates"][n] for n in evaluators] == pytest.approx(expected)
    assert ranked["strong"]["ranks"]["human"] == 1 and ranked["weak"]["ranks"]["human"] == 4
    assert ranked["good"]["model"] == "openai/judge-model"
    taus = {(t["a"], t["b"]): t for t in result["taus"]}
    assert len(taus) == 6
    for (a, b), tau in taus.items():
        runs = list(SKILL)
        theirs = kendalltau(
            [rates[r][evaluators.index(a)] for r in runs], [rates[r][evaluators.index(b)] for r in runs]
        )
        assert tau["runs"] == 4 and tau["tau"]["value"] == pytest.approx(theirs.statistic)
        assert tau["tau"]["lo"] <= tau["tau"]["value"] <= tau["tau"]["hi"]
    assert any(
        "fuzzy's judge model judge-model is also the model of ranked run good" in w
        for w in result["warnings"]
    )
    assert not any("keypoints's judge model" in w for w in result["warnings"])


def test_the_tables_csv_and_warnings(audited: tuple[Path, Truth, dict[str, str]]) -> None:
    store = audited[0]
    result = CliRunner().invoke(
        cli,
        [
            "agreement",
            "--audit",
            "--store",
            str(store),
            "--bootstrap",
            "100",
            "--evaluator",
            "fuzzy",
            "--evaluator",
            "must_include",
        ],
        env={"COLUMNS": "220"},
    )
    assert result.exit_code == 0, result.output
    for text in (
        "Is fuzzy as good as a second human? (labellers alice, bob",
        "human-human kappa",
        "Task SR (rank) under each evaluator",
        "Does the leaderboard depend on the judge?",
        "warning: fuzzy's judge model judge-model is also the model of ranked run good",
        "warning: 2 evaluators: the protocol compares the ranking under three or more",
    ):
        assert text in result.output
    rows = list(
        csv.DictReader(
            io.StringIO(
                mmina(
                    "agreement",
                    "--audit",
                    "--store",
                    str(store),
                    "--format",
                    "csv",
                    "--bootstrap",
                    "50",
                    "--evaluator",
                    "fuzzy",
                    "--evaluator",
                    "human",
                )
            )
        )
    )
    assert {r["evaluator"] for r in rows} == {"fuzzy"} and {r["level"] for r in rows} == {"task", "hop"}
    assert all(r["place"] in ("below", "within", "above") for r in rows if r["by"] == "all")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--audit", "--evaluator", "fuzzy"], "an audit compares evaluators: name two or more"),
        (
            ["--evaluator", "fuzzy", "--evaluator", "keypoints"],
            "name one --evaluator (several are compared with --audit)",
        ),
        (["--audit", "--evaluator", "fuzzy", "--evaluator", "hops"], "no hops verdicts in run(s)"),
        (["--audit", "--evaluator", "fuzzy", "--evaluator", "human:carol"], "no labels by carol"),
    ],
)
def test_clear_errors(audited: tuple[Path, Truth, dict[str, str]], args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["agreement", "--store", str(audited[0]), *args])
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output
