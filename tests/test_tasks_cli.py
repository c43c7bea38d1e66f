"""`mmina tasks validate|list` and `mmina fixtures serve`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from mmina.cli import cli
from mmina.fixtures.web import FixtureWeb
from mmina.tasks.taskcheck import load_suite
from tests.serve_helpers import ignore_sigint

OFFICIAL_EXAMPLE = {
    "intent": "Find the event ...",
    "start_url": "http://wiki.mmina.test/kiwix/",
    "eval": {
        "eval_types": ["string_match"],
        "reference_answers": {"must_include": ["x"]},
        "reference_url": "",
    },
    "cnt_hop": 3,
    "procedure": ["kiwix", "event", "end"],
    "city": "",
    "flight": "",
    "shop": "",
}


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_builtin_suite_validates() -> None:
    result = invoke("tasks", "validate", "--format", "json")
    assert result.exit_code == 0 and json.loads(result.output)["ok"] is True


def test_every_problem_is_one_line(tmp_path: Path) -> None:
    bad = {
        **OFFICIAL_EXAMPLE,
        "intent": "",
        "cnt_hop": 2,
        "flight": "pmr",
        "eval": {"eval_types": ["magic"], "reference_answers": {"must_include": "x"}},
    }
    (tmp_path / "normal").mkdir()
    (tmp_path / "normal" / "1.json").write_text(json.dumps(bad))
    (tmp_path / "normal" / "2.json").write_text("{broken")
    (tmp_path / "normal" / "3.json").write_text(json.dumps(OFFICIAL_EXAMPLE))
    result = invoke("tasks", "validate", "--tasks", str(tmp_path))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    first = str(tmp_path / "normal" / "1.json")
    assert f"{first}: intent: empty (the instruction for the agent)" in lines
    assert (
        f"{first}: eval.eval_types: unknown type 'magic' (known: program_html, string_match, url_match)"
        in lines
    )
    assert (
        f"{first}: cnt_hop: warning: is 2 but procedure has 3 entries (cnt_hop counts the END marker); "
        "the procedure decides" in lines
    )
    assert (
        f"{first}: eval.reference_answers.must_include: warning: not a list of strings: compared as text "
        "(null entries dropped)" in lines
    )
    assert not any("flight" in line for line in lines), "a lower-case airport code is what the release writes"
    assert any(line.startswith(f"{tmp_path / 'normal' / '2.json'}: -: not valid JSON") for line in lines)
    assert not any("3.json" in line for line in lines)
    assert lines[-1] == f"{tmp_path}: 3 error(s), 2 warning(s)"


def test_record_refuses_an_invalid_suite_before_starting(tmp_path: Path) -> None:
    (tmp_path / "1.json").write_text(json.dumps({**OFFICIAL_EXAMPLE, "procedure": "kiwix, event, end"}))
    result = invoke("record", "--tasks", str(tmp_path), "--store", str(tmp_path / "store"))
    assert result.exit_code == 1 and "procedure: not a list of site keywords" in result.output
    assert not (tmp_path / "store").exists()


def test_warnings_do_not_refuse_a_run(tmp_path: Path) -> None:
    (tmp_path / "1.json").write_text(
        json.dumps({**OFFICIAL_EXAMPLE, "procedure": ["kiwix", "event"], "cnt_hop": "9"})
    )
    result = invoke("tasks", "validate", "--tasks", str(tmp_path))
    assert (
        result.exit_code == 0 and "procedure: warning: no 'end' marker: every entry is a hop" in result.output
    )


def test_list_one_file_and_the_suite(tmp_path: Path) -> None:
    (tmp_path / "7.json").write_text(json.dumps(OFFICIAL_EXAMPLE))
    listed = json.loads(
        invoke("tasks", "list", "--tasks", str(tmp_path / "7.json"), "--format", "json").output
    )
    assert listed == [
        {
            **listed[0],
            "id": "7",
            "n_hops": 2,
            "hops": [{"hop": 1, "keyword": "kiwix"}, {"hop": 2, "keyword": "event"}],
        }
    ]  # hops from 1
    everything = json.loads(invoke("tasks", "list", "--format", "json").output)
    assert [t["id"] for t in everything] == [t.task_id for t in load_suite().tasks]
    table = invoke("tasks", "list")
    assert table.exit_code == 0 and "normal/1" in table.output


@pytest.mark.parametrize("command", [["mmina", "fixtures", "serve"], ["mmina.fixtures.web"]])
def test_fixtures_serve_starts_and_stops(command: list[str]) -> None:
    """Started with SIGINT ignored, as a script's background job is: it stops on it all the same."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *command, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ignore_sigint,
    )
    try:
        first = proc.stdout.readline()
        port = int(first.split("127.0.0.1:")[1].split(" ")[0])
        assert "wiki.mmina.test" in first
        assert f"'--host-resolver-rules=MAP *.mmina.test 127.0.0.1:{port}'" in proc.stdout.readline()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/kiwix/", headers={"Host": "wiki.mmina.test"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200 and b"<html" in response.read().lower()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and "stopped" in out and "Traceback" not in err


def test_fixtures_serve_port_in_use() -> None:
    with FixtureWeb() as web:
        result = invoke("fixtures", "serve", "--port", str(web.port))
    assert result.exit_code == 1 and result.output.startswith(f"Error: cannot listen on 127.0.0.1:{web.port}")


def test_suite_names_and_official_folders_keep_their_ids(tmp_path: Path) -> None:
    by_name = json.loads(invoke("tasks", "list", "--tasks", "multi567", "--format", "json").output)
    assert by_name and all(t["id"].startswith("multi567/") for t in by_name)
    official = tmp_path / "mmina" / "normal"
    official.mkdir(parents=True)
    (official / "3.json").write_text(json.dumps(OFFICIAL_EXAMPLE))
    for path in (official, official / "3.json"):
        assert [
            t["id"]
            for t in json.loads(invoke("tasks", "list", "--tasks", str(path), "--format", "json").output)
        ] == ["normal/3"]
