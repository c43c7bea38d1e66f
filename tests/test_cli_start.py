"""``mmina --help`` and every command's ``--help`` start without the heavy libraries: commands
are loaded from one table only when asked for (a lazy group), and a command module imports its
library only inside the command. Checked in a fresh interpreter, by what ``sys.modules`` holds
after each ``--help`` — not by a time, which this shared machine would make noisy."""

from __future__ import annotations

import json
import subprocess
import sys

import click
from click.testing import CliRunner

from mmina.cli import COMMANDS, cli
from mmina.cli.common import LazyGroup

HEAVY = (
    "duckdb",
    "pyarrow",
    "playwright",
    "PIL",
    "plotly",
    "fsspec",
    "openai",
    "numpy",
    "starlette",
    "uvicorn",
)

PROBE = """
import json, sys
from mmina.cli import cli
heavy = {heavy!r}
found = {{}}
for args in {commands!r}:
    try:
        cli([*args, "--help"], prog_name="mmina", standalone_mode=False)
    except SystemExit:
        pass
    found[" ".join(args)] = sorted({{m.split(".")[0] for m in sys.modules}} & set(heavy))
print(json.dumps(found))
"""


def every_command(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path, groups and their subcommands included (loading each one)."""
    context = click.Context(group)
    paths = []
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, name
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths += every_command(command, (*prefix, name))
    return paths


def test_no_help_imports_a_heavy_library() -> None:
    commands = [(), *every_command()]
    code = PROBE.format(heavy=HEAVY, commands=[list(c) for c in commands])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(found) == len(commands) > 20
    assert {command: heavy for command, heavy in found.items() if heavy} == {}


def test_the_probe_sees_a_command_that_loads_them() -> None:
    """The probe could pass by looking in the wrong place: running a command (not its help) does
    load what it needs, and the probe says so."""
    code = PROBE.replace('[*args, "--help"]', '[*args, "--format", "csv"]').format(
        heavy=HEAVY, commands=[["sql", "--schema"]]
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert {"duckdb", "pyarrow"} <= set(json.loads(run.stdout.strip().splitlines()[-1])["sql --schema"]), (
        run.stderr
    )


def test_one_table_names_every_command_and_each_has_help_with_an_example() -> None:
    assert isinstance(cli, LazyGroup) and set(COMMANDS) <= set(cli.list_commands(click.Context(cli)))
    for path in every_command():
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0 and "Example" in result.output, path


def test_a_command_added_to_the_table_is_loaded_when_used() -> None:
    group = LazyGroup(name="demo", lazy={"info": "mmina.cli.store:info"})
    assert group.list_commands(click.Context(group)) == ["info"] and group.commands == {}
    assert group.get_command(click.Context(group), "info").name == "info"
    assert CliRunner().invoke(group, ["info", "--help"]).exit_code == 0
