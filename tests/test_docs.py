"""The documentation: the MkDocs site builds with --strict (no broken link or anchor, no page
left out of the nav), its command-line reference is every command's --help verbatim, and the
README stays a tour whose commands are the ones the project runs."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click

from mmina.cli import cli
from mmina.cli.reference import WIDTH, render, walk
from tests.docs_pages import ROOT

README = ROOT / "README.md"
SETUP = "bash .ci/setup.sh && .venv/bin/mmina record"
TESTS = "bash .ci/setup.sh && .venv/bin/python -m pytest -q"


def build_site(target: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the repository's site into ``target``, as a user runs it."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(target),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def code_blocks(page: str) -> str:
    """The text of every code block of a built page, unescaped (highlighting spans removed)."""
    blocks = re.findall(r"<pre[^>]*>(.*?)</pre>", page, re.S)
    return "\n".join(html.unescape(re.sub(r"<[^>]+>", "", block)) for block in blocks)


def test_the_site_builds_strictly_with_every_commands_help(tmp_path: Path) -> None:
    built = build_site(tmp_path / "site")
    assert built.returncode == 0 and "WARNING" not in built.stderr, built.stderr
    reference = code_blocks((tmp_path / "site" / "cli" / "index.html").read_text())
    for ctx, command in walk(cli):
        assert command.get_help(ctx).rstrip() in reference, (
            f"{ctx.command_path} is missing from the CLI reference"
        )
    assert (tmp_path / "site" / "serve.png").exists() and (
        tmp_path / "site" / "changelog" / "index.html"
    ).exists()
    benchmarks = (tmp_path / "site" / "benchmarks" / "index.html").read_text()
    memory = next(
        f
        for f in json.loads((ROOT / "bench" / "results.json").read_text())["figures"]
        if f["name"] == "concurrency 32, MMInA-length tasks: memory per episode in flight beyond the first"
    )
    assert f"<strong>{memory['value']:g} MB</strong>" in benchmarks and "<!-- bench:" not in benchmarks


def test_the_reference_is_what_help_prints_at_a_wide_terminal() -> None:
    contexts = {ctx.command_path: (ctx, command) for ctx, command in walk(cli)}
    assert set(contexts) >= {"mmina", "mmina record", "mmina store verify", "mmina import harness"}
    mmina = Path(sys.executable).with_name("mmina")
    for path in ("mmina", "mmina store verify"):  # the root, and a command of a group (its context's parents)
        printed = subprocess.run(
            [str(mmina), *path.split()[1:], "--help"],
            capture_output=True,
            text=True,
            env=dict(os.environ, COLUMNS=str(WIDTH)),
            timeout=60,
        )
        ctx, command = contexts[path]
        assert printed.returncode == 0 and printed.stdout.rstrip() == command.get_help(ctx).rstrip(), path


def test_a_new_command_appears_in_the_reference_without_editing_a_page() -> None:
    @click.group()
    def tool() -> None:
        """A tool."""

    @tool.command(name="frobnicate")
    @click.option("--level", type=int, help="How hard to frobnicate.")
    def frobnicate(level: int) -> None:
        """Frobnicate the store."""

    text = render(tool)
    assert (
        "## `mmina frobnicate`" in text
        and "How hard to frobnicate." in text
        and "Usage: mmina frobnicate" in text
    )


def test_the_readme_is_a_tour_with_the_projects_own_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    assert f"```bash\n{SETUP}\n```" in text and f"```bash\n{TESTS}\n```" in text
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == TESTS, (
        ".ci/run must run the README's tests"
    )
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local and [link for link in local if not (ROOT / link).exists()] == []


def test_every_command_is_in_the_readmes_table() -> None:
    text = README.read_text()
    leaves = [ctx.command_path for ctx, command in walk(cli) if not isinstance(command, click.Group)]
    assert [path for path in leaves if f"`{path}" not in text] == []


def test_the_readme_names_every_built_in_evaluator() -> None:
    from mmina.evaluators.registry import BUILTINS

    bullet = README.read_text().split("* **Evaluator**", 1)[1].split("\n* ", 1)[0]
    assert [name for name in sorted(BUILTINS) if f"`{name}`" not in bullet] == []
