"""Sharing a run: ``export dataset`` checked by the real ``datasets`` library (every config loads,
screenshots decode as images) and by ``import dataset`` (the store comes back row for row and
replays at 100 %), and ``export atif`` checked by Harbor's own ATIF validator. Each checking
tool runs in a virtualenv of its own (tests/interchange_tools.py)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from mmina import __version__
from mmina.cli import cli
from mmina.models.model_input import load_request
from mmina.store import Store
from mmina.store.schema import SCHEMA_VERSION
from tests.built_once import built_once
from tests.fake_openai import FakeOpenAI
from tests.interchange_tools import atif_errors, load_with_datasets
from tests.store_helpers import begin, episode_row, request_row, step_row, write_episode

SHARD_MB = 0.25
COMPARED = {"runs": (), "tasks": (), "episodes": ("blob_packs",), "steps": (), "scores": (), "requests": ()}
"""The tables an import restores, and the columns it may set anew."""


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.fixture(scope="session")
def model_run() -> tuple[Path, str]:
    """normal/1 recorded once per test run by the openai agent against the local fake endpoint:
    model input, tokens and cost on every step."""
    folder = built_once("recorded-openai-normal-1", _record_with_a_model)
    return folder / "store", pickle.loads((folder / "run.pickle").read_bytes())


def _record_with_a_model(folder: Path) -> None:
    from mmina.agents.settings import AgentSettings
    from mmina.recorder.recording import RecordConfig, record_run

    with pytest.MonkeyPatch.context() as patch, FakeOpenAI() as fake:
        patch.setenv("OPENAI_API_KEY", "sk-test-share")
        settings = AgentSettings(model="fake-model", base_url=fake.url, max_retries=1)
        config = RecordConfig(agent="openai", task_ids=("normal/1",), agent_settings=settings)
        summary = record_run(Store.open(folder / "store", create=True), config)
    (folder / "run.pickle").write_bytes(pickle.dumps(summary.run_id))


def _rows(store: Store, table: str, run_id: str) -> list[dict]:
    rows = [
        {k: v for k, v in row.items() if k not in COMPARED[table]}
        for row in store.read(table, run_id=run_id).to_pylist()
    ]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


# ---------------------------------------------------------------- dataset


@pytest.fixture(scope="module")
def dataset(model_run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("dataset") / "ds"
    code, output = _cli(
        "export",
        "dataset",
        model_run[1],
        "--requests",
        "--max-shard-mb",
        str(SHARD_MB),
        "--author",
        "A. Tester",
        "--store",
        str(model_run[0]),
        "-o",
        str(folder),
        "--format",
        "json",
    )
    assert code == 0, output
    return folder, json.loads(output)


def test_every_config_loads_with_the_datasets_library_and_screenshots_are_images(model_run, dataset) -> None:
    folder, result = dataset
    store, run_id = Store.open(model_run[0]), model_run[1]
    manifest = json.loads((folder / "mmina.json").read_text())
    configs = sorted(manifest["configs"])
    assert configs == ["blobs", "episodes", "requests", "runs", "scores", "steps", "tasks"]
    loaded = load_with_datasets(folder, configs)
    for table in ("runs", "tasks", "episodes", "steps", "scores", "requests"):
        assert loaded[table]["rows"] == store.read(table, run_id=run_id).num_rows > 0, table
    assert loaded["steps"]["images"] == {"screenshot_image": "Image", "screenshot_som_image": "Image"}
    assert loaded["steps"]["first_image"] == [1280, 2048]
    assert loaded["episodes"]["images"] == {"final_screenshot_image": "Image"}
    assert (manifest["mmina_version"], manifest["schema_version"]) == (__version__, SCHEMA_VERSION)
    card = (folder / "README.md").read_text()
    assert f"store schema version {SCHEMA_VERSION}" in card and "[REDACTED]" in card and "config_name" in card
    assert "A. Tester" in (folder / "CITATION.cff").read_text()
    assert str(model_run[0]) not in card + json.dumps(manifest)  # where the store was is not published


def test_shards_stay_under_the_bound(dataset) -> None:
    folder, result = dataset
    shards = result["configs"]["steps"]["files"]
    assert len(shards) > 1
    for name in shards:
        size, groups = (folder / name).stat().st_size, pq.ParquetFile(folder / name).num_row_groups
        assert size <= SHARD_MB * 2**20 or groups == 1, (name, size, groups)


def test_the_import_restores_the_run_row_for_row_and_it_replays_faithfully(
    model_run, dataset, tmp_path
) -> None:
    source, run_id = Store.open(model_run[0]), model_run[1]
    code, output = _cli(
        "import", "dataset", str(dataset[0]), "--store", str(tmp_path / "s"), "--format", "json"
    )
    assert code == 0, output
    assert json.loads(output)["runs"] == [run_id]
    restored = Store.open(tmp_path / "s")
    for table in COMPARED:
        assert _rows(restored, table, run_id) == _rows(source, table, run_id), table
    for step in source.read("steps", run_id=run_id).to_pylist():
        assert load_request(step["model_input"], lambda d: restored.read_blobs([d])[d]) == load_request(
            step["model_input"], lambda d: source.read_blobs([d])[d]
        )
    code, output = _cli("replay", "--run", run_id, "--store", str(tmp_path / "s"), "--format", "json")
    assert code == 0, output
    summary = json.loads(output[output.index("{") :])["summary"]
    assert (summary["fidelity"], summary["requests"]["unmatched"]) == (1.0, 0), summary
    code, output = _cli("import", "dataset", str(dataset[0]), "--store", str(tmp_path / "s"))
    assert code == 1 and output.startswith("Error: run ") and "already" in output


def test_a_damaged_or_foreign_folder_gets_one_line_and_writes_nothing(dataset, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(dataset[0], damaged)
    [shard] = json.loads((damaged / "mmina.json").read_text())["configs"]["blobs"]["files"]
    table = pq.read_table(damaged / shard)
    data = table.column("data").to_pylist()
    data[0] = data[0] + b" "
    pq.write_table(table.set_column(table.column_names.index("data"), "data", [data]), damaged / shard)
    for folder, message in ((damaged, "does not match its hash"), (tmp_path, "not an mmina dataset")):
        code, output = _cli("import", "dataset", str(folder), "--store", str(tmp_path / "s"))
        assert code == 1 and output.startswith("Error: ") and message in output and output.count("\n") == 1, (
            output
        )
    assert not Store.open(tmp_path / "s").read("episodes").num_rows


def test_redactions_are_counted_and_bad_exports_get_one_line(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    begin(store, "r")
    batch = store.batch_writer("r")
    secret = [{"name": "authorization", "value": "Bearer [REDACTED]"}]
    requests = [
        request_row(0, batch.put_blob(b'{"token": "[REDACTED]"}', "application/json")),
        request_row(1, None, request_headers=secret),
    ]
    batch.add_episode({**episode_row(n_steps=1), "episode_id": "e1"}, [step_row(0)], requests)
    batch.commit()
    code, output = _cli(
        "export",
        "dataset",
        "r",
        "--requests",
        "--store",
        str(store.root),
        "-o",
        str(tmp_path / "d"),
        "--format",
        "json",
    )
    assert code == 0, output
    manifest = json.loads((tmp_path / "d" / "mmina.json").read_text())
    assert manifest["redacted"] == {"requests": 2, "blobs": 1}
    assert "| `requests` | 2 |" in (tmp_path / "d" / "README.md").read_text()
    for args, message in (
        (["r", "-o", str(tmp_path / "d")], "is not empty"),
        (["nope", "-o", str(tmp_path / "e")], "no run 'nope'"),
    ):
        code, output = _cli("export", "dataset", *args, "--store", str(store.root))
        assert code == 1 and output.startswith("Error: ") and message in output, output
    assert not (tmp_path / "e").exists()


def _jpeg(shade: int) -> bytes:
    from io import BytesIO

    from PIL import Image

    out = BytesIO()
    Image.new("RGB", (8, 8), (shade, shade, shade)).save(out, "JPEG")
    return out.getvalue()


def test_several_runs_round_trip_and_a_task_filter_narrows_them(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    shots = [_jpeg(10), _jpeg(200)]
    for run_id in ("a", "b"):
        begin(store, run_id, tasks=("normal/1", "normal/2"))
        write_episode(store, run_id, f"{run_id}-1", blobs=shots, n_steps=3)
    code, output = _cli(
        "export",
        "dataset",
        "a",
        "b",
        "--store",
        str(store.root),
        "-o",
        str(tmp_path / "d"),
        "--format",
        "json",
    )
    assert code == 0, output
    assert (
        "blobs" not in json.loads(output)["configs"]
    )  # both screenshots are in the image columns: no blob left
    code, output = _cli("import", "dataset", str(tmp_path / "d"), "--store", str(tmp_path / "s"))
    assert code == 0, output
    restored = Store.open(tmp_path / "s")
    assert sorted(restored.run_ids()) == ["a", "b"]
    for run_id in ("a", "b"):
        [step] = [s for s in restored.read("steps", run_id=run_id).to_pylist() if s["step_index"] == 2]
        assert restored.read_blobs([step["screenshot"]])[step["screenshot"]] == shots[0]
    code, output = _cli(
        "export", "dataset", "a", "--task", "normal/2", "--store", str(store.root), "-o", str(tmp_path / "e")
    )
    assert code == 1 and "no finished episode" in output and not (tmp_path / "e").exists()


# ---------------------------------------------------------------- ATIF


def test_atif_trajectories_pass_harbors_validator(model_run, tmp_path: Path) -> None:
    store, run_id = Store.open(model_run[0]), model_run[1]
    code, output = _cli(
        "export",
        "atif",
        "--run",
        run_id,
        "--store",
        str(model_run[0]),
        "-o",
        str(tmp_path / "t"),
        "--format",
        "json",
    )
    assert code == 0, output
    [path] = sorted((tmp_path / "t").glob("*.json"))
    assert atif_errors(path) == []
    trajectory = json.loads(path.read_text())
    episode = store.read("episodes", run_id=run_id).to_pylist()[0]
    steps = sorted(store.read("steps", run_id=run_id).to_pylist(), key=lambda s: s["step_index"])
    agent_steps = [s for s in trajectory["steps"] if s["source"] == "agent"]
    assert [s["source"] for s in trajectory["steps"][:2]] == ["system", "user"] and len(agent_steps) == len(
        steps
    )
    assert [c["function_name"] for s in agent_steps for c in s["tool_calls"]] == [
        s["action_kind"] for s in steps
    ]
    assert sum(s["metrics"]["prompt_tokens"] for s in agent_steps) == episode["prompt_tokens"] > 0
    assert trajectory["final_metrics"]["total_completion_tokens"] == episode["completion_tokens"]
    assert trajectory["extra"]["verdicts"]["hops"]["hops_total"] == episode["n_hops"]
    assert trajectory["extra"]["mmina"]["schema_version"] == SCHEMA_VERSION
    image = agent_steps[0]["observation"]["results"][0]["content"][1]["source"]["path"]
    (path.parent / image).unlink()
    assert any("not found" in error or "does not exist" in error for error in atif_errors(path))


def test_an_agent_without_a_model_exports_deterministic_steps(recorded, tmp_path: Path) -> None:
    code, output = _cli(
        "export",
        "atif",
        "--run",
        recorded[1].run_id,
        "--store",
        str(recorded[0]),
        "--no-images",
        "-o",
        str(tmp_path / "t"),
    )
    assert code == 0 and "ATIF-v1.7" in output, output
    [path] = sorted((tmp_path / "t").glob("*.json"))
    assert atif_errors(path) == [] and not (tmp_path / "t" / "images").exists()
    steps = json.loads(path.read_text())["steps"]
    assert steps[0]["source"] == "user" and all(
        s["llm_call_count"] == 0 and "metrics" not in s for s in steps[1:]
    )
    code, output = _cli(
        "export", "atif", "--run", recorded[1].run_id, "--store", str(recorded[0]), "-o", str(tmp_path / "t")
    )
    assert code == 1 and "is not empty" in output


def test_every_share_command_has_help_with_an_example_and_is_documented() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "interchange.md").read_text()
    for command in (["export", "dataset"], ["export", "atif"], ["import", "dataset"]):
        code, output = _cli(*command, "--help")
        assert code == 0 and "Example" in output, command
        assert f"mmina {' '.join(command)}" in page, command
