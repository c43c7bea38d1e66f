"""``mmina doctor`` (issue 52): the real Chromium started headless, a browser path that is not
there or is no Chromium, the real kiwix-serve (and one taken off the PATH), real stores (whole,
damaged, missing) and a model endpoint (the test OpenAI server, a closed port, no key), each line
saying what holds and how to get what is missing; exit 1 only when something required fails."""

from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.recorder.doctor import KIWIX_FIX, check_kiwix
from mmina.store import Store
from mmina.store.schema import SCHEMA_VERSION
from tests.fake_openai import FakeOpenAI
from tests.store_helpers import begin, write_episode
from tests.test_endpoint_check import closed_url

NO_ENDPOINT = {"OPENAI_BASE_URL": None, "MMINA_STORE": None, "OPENAI_API_KEY": "sk-test"}


def doctor(*args: str, env: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """The exit code and the JSON report, by check name."""
    result = CliRunner().invoke(
        cli, ["doctor", "--format", "json", *args], env={**NO_ENDPOINT, **(env or {})}
    )
    report = json.loads(result.stdout)
    assert report["ok"] == (result.exit_code == 0), result.output
    return result.exit_code, {check["name"]: check for check in report["checks"]}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store of one run with three committed episodes."""
    opened = Store.open(tmp_path / "store", create=True)
    begin(opened, "r1")
    for index in range(3):
        write_episode(opened, "r1", f"ep{index}")
    return tmp_path / "store"


def test_this_machine_passes_with_the_real_chromium_and_no_store_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, checks = doctor()
    assert code == 0
    assert checks["mmina"]["status"] == "ok" and "100 built-in tasks" in checks["mmina"]["detail"]
    browser = checks["browser"]
    assert browser["status"] == "ok" and "starts headless and opens a page" in browser["detail"], browser
    assert (checks["store"]["status"], checks["store"]["required"]) == ("skipped", False)
    assert (
        "no store at mmina-store yet" in checks["store"]["detail"] and not (tmp_path / "mmina-store").exists()
    )
    assert checks["endpoint"]["status"] == "skipped" and "--model NAME" in checks["endpoint"]["fix"]


def test_the_table_says_each_check_and_how_to_get_what_is_missing(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["doctor", "--browser", str(tmp_path / "chromium"), "--store", str(tmp_path)], env=NO_ENDPOINT
    )
    lines = result.output.splitlines()
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert lines[0].startswith("OK       mmina: ")
    assert lines[1].startswith(f"MISSING  browser: browser executable {tmp_path / 'chromium'} does not exist")
    assert lines[2].strip().startswith("how: apt-get install -y chromium") and "--browser PATH" in lines[2]
    assert any(line.startswith("FAILED   store: ") and "is not an mmina store" in line for line in lines)
    assert lines[-1] == "2 required checks failed: browser, store"


def test_a_program_that_is_no_chromium_fails_with_its_path(tmp_path: Path) -> None:
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    code, checks = doctor("--only", "browser", "--browser", str(fake))
    assert code == 1 and checks["browser"]["status"] == "failed"
    assert checks["browser"]["detail"].startswith(f"{fake} did not start as a headless Chromium: ")


def test_kiwix_serve_is_found_and_runs_or_is_missing_but_not_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    found = check_kiwix()
    if shutil.which("kiwix-serve"):
        assert found.status == "ok" and "kiwix-tools" in found.detail, found  # the real one, --version run
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = check_kiwix()
    assert (missing.status, missing.fix, missing.failing) == ("missing", KIWIX_FIX, False)
    assert "Wikipedia viewer" in missing.detail


def test_a_whole_store_is_opened_versioned_and_verified(store: Path) -> None:
    code, checks = doctor("--only", "store", "--store", str(store))
    assert code == 0 and checks["store"]["status"] == "ok"
    assert f"schema version {SCHEMA_VERSION}" in checks["store"]["detail"]
    assert "1 run, 3 episodes" in checks["store"]["detail"] and "no damage" in checks["store"]["detail"]


def test_a_damaged_store_fails_and_points_to_store_verify(store: Path) -> None:
    damaged = next((store / "steps").rglob("*.parquet"))
    damaged.write_bytes(damaged.read_bytes()[:100])
    before = sorted(p.name for p in store.rglob("*"))
    code, checks = doctor("--only", "store", "--store", str(store))
    assert code == 1 and checks["store"]["status"] == "failed" and "corrupt" in checks["store"]["detail"]
    assert "mmina store verify --store" in checks["store"]["fix"]
    assert sorted(p.name for p in store.rglob("*")) == before  # looked at, never repaired


def test_a_named_store_that_is_not_there_is_missing(tmp_path: Path) -> None:
    code, checks = doctor("--only", "store", "--store", str(tmp_path / "nowhere"))
    assert (
        code == 1
        and checks["store"]["status"] == "missing"
        and "mmina record --store" in checks["store"]["fix"]
    )
    code, checks = doctor("--only", "store", env={"MMINA_STORE": str(tmp_path / "nowhere")})
    assert code == 1 and checks["store"]["status"] == "missing"
    assert not (tmp_path / "nowhere").exists()


def test_an_endpoint_that_answers_passes() -> None:
    with FakeOpenAI(models=("good-model",)) as server:
        code, checks = doctor("--only", "endpoint", "--base-url", server.url, "--model", "good-model")
        assert code == 0 and checks["endpoint"]["status"] == "ok", checks["endpoint"]
        assert checks["endpoint"]["detail"].startswith(
            f"{server.url} answers a chat completion for model good-model"
        )
        assert [r["max_tokens"] for r in server.requests] == [1]
        code, checks = doctor(
            "--only", "endpoint", "--model", "good-model", env={"OPENAI_BASE_URL": server.url}
        )  # the variable is enough
        assert code == 0 and checks["endpoint"]["status"] == "ok"
        code, checks = doctor("--only", "endpoint", "--base-url", server.url, "--model", "no-such-model")
        assert code == 1 and "no-such-model" in checks["endpoint"]["detail"]


def test_a_closed_port_or_no_key_fails_quickly_with_the_fix() -> None:
    url = closed_url()
    started = time.monotonic()
    code, checks = doctor("--only", "endpoint", "--base-url", url, "--model", "m")
    assert code == 1 and checks["endpoint"]["status"] == "failed" and time.monotonic() - started < 60
    assert checks["endpoint"]["detail"].startswith(f"model m at {url} cannot be used: ")
    assert "--base-url URL" in checks["endpoint"]["fix"]
    code, checks = doctor(
        "--only", "endpoint", "--base-url", url, "--model", "m", env={"OPENAI_API_KEY": None}
    )
    assert code == 1 and "OPENAI_API_KEY" in checks["endpoint"]["detail"]


def test_only_runs_the_checks_it_names_in_their_order() -> None:
    code, checks = doctor("--only", "endpoint", "--only", "mmina")
    assert code == 0 and list(checks) == ["mmina", "endpoint"]
    result = CliRunner().invoke(cli, ["doctor", "--only", "brower"])
    assert result.exit_code == 2 and "brower" in result.output and "Traceback" not in result.output


def test_csv_has_a_row_per_check() -> None:
    result = CliRunner().invoke(
        cli, ["doctor", "--only", "mmina", "--only", "endpoint", "--format", "csv"], env=NO_ENDPOINT
    )
    rows = list(csv.reader(result.stdout.splitlines()))
    assert result.exit_code == 0 and rows[0] == ["name", "status", "required", "failing", "detail", "fix"]
    assert [(row[0], row[1]) for row in rows[1:]] == [("mmina", "ok"), ("endpoint", "skipped")]


def test_an_endpoint_without_a_model_is_not_checked() -> None:
    code, checks = doctor("--only", "endpoint", env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert code == 0 and checks["endpoint"]["status"] == "skipped"
    assert checks["endpoint"]["detail"].startswith("endpoint http://127.0.0.1:9/v1 set, no --model")
