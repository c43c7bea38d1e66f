"""Every option is checked before a command writes anything: out-of-range, empty or non-finite
values are one-line errors (exit 2, click's usage error), and the store is left untouched."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from mmina.cli import cli

REFUSED = [
    ("record", "--task", ""),
    ("record", "--task", ",,,"),
    ("record", "--task-ids", " , ,"),
    ("record", "--viewport", "100000x100000"),
    ("record", "--viewport", "0x600"),
    ("record", "--viewport", "1280x"),
    ("record", "--drift", "999999999999"),
    ("record", "--drift", "-1"),
    ("record", "--temperature", "nan"),
    ("record", "--temperature", "inf"),
    ("record", "--price-in", "nan"),
    ("record", "--price-out", "1e308"),
    ("record", "--max-steps", "100000000"),
    ("record", "--concurrency", "100000"),
    ("record", "--workers", "0"),
    ("record", "--memory", "10000000"),
    ("replay", "--min-fidelity", "nan"),
    ("replay", "--max-steps", "0"),
    ("replay", "--concurrency", "1000000"),
    ("rescore", "--judge-concurrency", "100000"),
    ("rescore", "--concurrency", "100000"),  # its old name
    ("eval-steps", "--history", "100000000"),
    ("fixtures", "serve", "--drift", "999999999999"),
]


@pytest.mark.parametrize("args", REFUSED, ids=[" ".join(a) for a in REFUSED])
def test_out_of_range_options_are_refused_before_anything_is_written(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    store = tmp_path / "store"
    command, *rest = args
    result = CliRunner().invoke(
        cli, [command, *rest, *([] if command == "fixtures" else ["--store", str(store)])]
    )
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Invalid value for" in errors[0], result.output
    assert not store.exists()


def test_the_allowed_viewport_range_is_in_the_message(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["record", "--viewport", "100000x100000", "--store", str(tmp_path / "s")]
    )
    assert "100000x100000 is outside the allowed range: width 200..4096, height 200..8192" in result.output


@settings(max_examples=60, deadline=None)
@given(
    viewport=st.text(max_size=20),
    task_ids=st.text(max_size=20),
    drift=st.text(max_size=12),
    temperature=st.text(max_size=12),
)
def test_any_option_text_is_a_clear_error_never_a_traceback(
    viewport: str, task_ids: str, drift: str, temperature: str
) -> None:
    """With a task path that does not exist, no value can start a run: each is refused by its
    option or by the task check, in one line, before a store exists."""
    store = Path("/nonexistent-mmina-store-for-options")
    args = [
        "record",
        "--tasks",
        "/nonexistent-mmina-tasks",
        "--store",
        str(store),
        "--viewport",
        viewport,
        "--task",
        task_ids,
        "--drift",
        drift,
        "--temperature",
        temperature,
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output and not store.exists()


def test_an_unexpected_error_is_one_line_from_the_script() -> None:
    """The ``mmina`` script's last line of defence: a bug is named in one line, not a traceback."""
    script = (
        "import sys; from mmina.cli import main, cli; import click\n"
        "@cli.command('boom')\ndef boom():\n    raise RuntimeError('a bug\\nsecond line')\n"
        "sys.argv = ['mmina', 'boom']; main()"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip() == (
        "Error: unexpected RuntimeError: a bug (a bug in mmina; set MMINA_TRACEBACK=1 to see where)"
    )


@pytest.mark.parametrize(
    "agent, message",
    [
        ("os:system", "Error: agent os:system is a function, not a class: name your agent class"),
        ("builtins:int", "Error: agent builtins:int has no act(observation) method"),
        ("os:...", "Error: cannot load agent os:...: module 'os' has no attribute '...'"),
        ("no such module:X", "Error: cannot load agent no such module:X: No module named 'no such module'"),
    ],
)
def test_an_agent_that_cannot_be_made_is_one_line(tmp_path: Path, agent: str, message: str) -> None:
    result = CliRunner().invoke(cli, ["record", "--agent", agent, "--store", str(tmp_path / "store")])
    assert result.exit_code == 1 and result.output.startswith(message), result.output
    assert not (tmp_path / "store").exists()


# -- option bundles: each option declared once, commands get typed bundles ---------------------------


def test_a_command_gets_its_options_as_typed_bundles() -> None:
    from mmina.cli.bundles import BrowserOptions, ScaleOptions
    from mmina.executors.interface import Layout

    seen: list[tuple[ScaleOptions, BrowserOptions]] = []

    @click.command()
    @ScaleOptions.options(omit=("concurrency",), workers="Workers of the probe.")
    @BrowserOptions.options()
    def probe(scale: ScaleOptions, browser: BrowserOptions) -> None:
        seen.append((scale, browser))

    result = CliRunner().invoke(probe, ["--workers", "3", "--browser-arg", "--x", "--browser-arg", "--y"])
    assert result.exit_code == 0, result.output
    assert seen == [(ScaleOptions(workers=3), BrowserOptions(browser_args=("--x", "--y")))]
    assert seen[0][0].layout() == Layout(3, 1, "local", None)
    text = CliRunner().invoke(probe, ["--help"]).output
    assert "Workers of the probe." in text and "--concurrency" not in text


UNSET = click.Option(["--x"]).default
"""What click keeps as the default of an option given none."""
OWN_FLAGS = {("eval-steps", "--seed"), ("agreement", "--seed"), ("rankings", "--seed")}
"""Options a command declares itself under a bundle's flag: eval-steps' --seed draws its sample
(and seeds the agent's requests, as the agent bundle's --seed does on record and replay);
agreement's and rankings' draw their bootstrap resamples."""


def test_every_shared_option_is_its_bundles_on_every_command() -> None:
    """An option of a bundle has the same destination, type and default wherever it appears,
    and no command takes its options as loose keyword arguments."""
    from mmina.cli.bundles import AgentOptions, BrowserOptions, JudgeOptions, ScaleOptions
    from tests.test_cli_start import every_command

    bundles = (AgentOptions, BrowserOptions, JudgeOptions, ScaleOptions)
    defaults = {flag: (bundle, name) for bundle in bundles for flag, name in bundle.flags().items()}
    offered: dict[str, int] = {}
    for path in every_command():
        command = cli
        for name in path:
            command = command.get_command(click.Context(command), name)
        if command.callback is not None:
            parameters = inspect.signature(inspect.unwrap(command.callback)).parameters.values()
            assert not [p for p in parameters if p.kind is p.VAR_KEYWORD], path
        for option in (p for p in command.params if isinstance(p, click.Option) and not p.hidden):
            flag = next((f for f in option.opts if f in defaults), None)
            if flag is None or (path[0], flag) in OWN_FLAGS:
                continue
            bundle, field = defaults[flag]
            offered[flag] = offered.get(flag, 0) + 1
            assert option.name == field, (path, flag)
            default = next(f.default for f in dataclasses.fields(bundle) if f.name == field)
            given = None if option.default is UNSET else option.default
            assert given in (default, None if default == () else default), (path, flag, given)
    assert offered["--judge-model"] == 2 and offered["--model"] == 4 and offered["--workers"] >= 3
