"""Task files of the official MMInA release: every variant loads, validates with warnings at
most, and records up to the network (tests/data/official is the corpus; see its README)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.recorder.browser import BrowserConfig
from mmina.recorder.recording import RecordConfig, record_run
from mmina.store import Store
from mmina.tasks.task import SUITE_HOPS, HopTracker, task_from_dict
from mmina.tasks.taskcheck import check_path, errors, load_suite
from tests.heavy import sized

CORPUS = Path(__file__).parent / "data" / "official"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())["files"]
RUNNABLE = sorted(path for path, facts in EXPECTED.items() if facts["runnable"])
BROKEN = sorted(path for path, facts in EXPECTED.items() if not facts["runnable"])
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost"
"""Every name but localhost unresolvable, as on a machine without the live web."""


RECORD_SAMPLE = (
    "mmina/compare/5.json",
    "mmina/multi567/6.json",
    "mmina/multipro/3.json",
    "mmina/normal/17.json",
    "mmina/shopping/7.json",
    "mmina/wikipedia/1.json",
)
"""What the default run records (every runnable file with MMINA_HEAVY=1): one task of each folder,
among them the published example and files that validate with warnings."""


def laid_out(folder: Path, files: list[str] | tuple[str, ...]) -> Path:
    """``files`` of the corpus laid out as the official release is (mmina/<suite>/N.json)."""
    root = folder / "mmina"
    for relative in files:
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CORPUS / relative, target)
    return root


@pytest.fixture(scope="module")
def runnable_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus without its broken files."""
    return laid_out(tmp_path_factory.mktemp("official"), RUNNABLE)


def test_only_the_broken_files_have_errors() -> None:
    problems = check_path(CORPUS / "mmina")
    failing = {str(Path(p.file).relative_to(CORPUS)) for p in errors(problems)}
    assert failing == set(BROKEN)
    assert all(len([p for p in errors(problems) if p.file.endswith(b)]) == 1 for b in BROKEN), (
        "one clear error each"
    )


@pytest.mark.parametrize("relative", RUNNABLE)
def test_every_variant_loads_with_the_official_hop_count(relative: str) -> None:
    facts = EXPECTED[relative]
    suite, number = relative.split("/")[1:]
    raw = json.loads((CORPUS / relative).read_text())
    task = task_from_dict(raw, f"{suite}/{Path(number).stem}")
    if facts["hops_normalized"] is not None:
        assert task.n_hops == facts["hops_normalized"], facts["why"]
    else:  # no procedure: cnt_hop - 1 when it says so, else what the official runner counts for the suite
        counted = int(raw.get("cnt_hop") or 0)
        assert (
            task.n_hops
            == max(counted - 1, SUITE_HOPS.get(suite, 1))
            == max(counted - 1, facts["hops_official"])
        )
        assert all(hop.keyword == "" for hop in task.hops)
    assert task.start_urls and all(u.startswith(("http://", "https://")) for u in task.start_urls)
    assert isinstance(task.city, str) and isinstance(task.flight, str) and isinstance(task.shop, str)


def test_the_published_example_is_two_hops_with_a_lower_case_code() -> None:
    raw = json.loads((CORPUS / "mmina" / "normal" / "17.json").read_text())
    task = task_from_dict(raw, "normal/17")
    assert (raw["flight"], raw["cnt_hop"], raw["procedure"]) == ("tyo", 3, ["kiwix", "event", "end"])
    assert [h.keyword for h in task.hops] == ["kiwix", "event"] and task.flight == "tyo"
    findings = check_path(CORPUS / "mmina" / "normal" / "17.json")
    assert [(p.field, p.severity) for p in findings] == [
        ("storage_state", "warning")
    ]  # a login file only its
    assert "./.auth/shopping_state.json: no such file" in findings[0].message  # authors have


def test_a_hop_without_keyword_never_completes_by_url() -> None:
    task = task_from_dict({"intent": "x", "start_url": "http://a/", "cnt_hop": 3}, "mine/1")
    tracker = HopTracker(task)
    assert task.n_hops == 2 and not tracker.observe("http://anything/at/all", 0) and tracker.current == 0


def test_validate_prints_warnings_and_exits_0_without_errors(runnable_suite: Path) -> None:
    result = CliRunner().invoke(cli, ["tasks", "validate", "--tasks", str(runnable_suite)])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert all(": warning: " in line for line in lines[:-1]) and len(lines) > 1
    assert lines[-1] == f"{runnable_suite}: 0 error(s), {len(lines) - 1} warning(s)"
    data = json.loads(
        CliRunner()
        .invoke(cli, ["tasks", "validate", "--tasks", str(runnable_suite), "--format", "json"])
        .output
    )
    assert data["ok"] and data["errors"] == 0 and {p["severity"] for p in data["problems"]} == {"warning"}


def test_validate_exits_1_on_the_broken_files() -> None:
    result = CliRunner().invoke(cli, ["tasks", "validate", "--tasks", str(CORPUS / "mmina")])
    assert result.exit_code == 1
    assert (
        f"{CORPUS / 'mmina' / 'multi567' / '990.json'}: procedure: not a list of site keywords"
        in result.output
    )
    assert "'trip_match' cannot be evaluated" in result.output


def test_the_official_suite_records_up_to_the_network(tmp_path: Path) -> None:
    """Every task starts (ids as the official folders give them); an unreachable site is that episode's error."""
    files = sized(RECORD_SAMPLE, RUNNABLE)
    runnable_suite = laid_out(tmp_path / "suite", files)
    suite = load_suite(runnable_suite)
    assert len(suite.tasks) == len(files) and "normal/17" in {t.task_id for t in suite.tasks}
    store = Store.open(tmp_path / "store", create=True)
    summary = record_run(
        store,
        RecordConfig(
            tasks=str(runnable_suite), agent="heuristic", browser=BrowserConfig(extra_args=(OFFLINE,))
        ),
    )
    assert len(summary.episodes) == len(files) and summary.task_warnings
    for episode in summary.episodes:
        assert episode.status == "error" and episode.error.startswith("cannot open the start page http"), (
            episode
        )
        assert "net::ERR_" in episode.error
    assert set(store.read("episodes", columns=["task_id"]).column("task_id").to_pylist()) == {
        t.task_id for t in suite.tasks
    }


def test_an_unachievable_task_passes_only_with_the_answer_na() -> None:
    from mmina.evaluators import EpisodeView, get

    raw = json.loads((CORPUS / "mmina" / "shopping" / "4.json").read_text())
    task = task_from_dict(raw, "shopping/4")
    fuzzy = get("fuzzy", judge_model="any")
    for answer, verdict in (("N/A", "pass"), ('"n/a"', "pass"), ("It costs $3", "fail")):
        view = EpisodeView("r", "e", task, {"final_answer": answer}, ())
        assert fuzzy.judge_prompts(view) == [], "no judge is asked"
        assert fuzzy.score(view)[0].verdict == verdict, answer
