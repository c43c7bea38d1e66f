"""``mmina export atif``: episodes as Agent Trajectory Interchange Format trajectories (thin: the
work is ``mmina.interchange.atif_export``, imported when the command runs)."""

from __future__ import annotations

from pathlib import Path

import click

from mmina.cli.common import FOLDER, format_option, open_store, output_option, store_option
from mmina.cli.export import _progress, _render


@click.command(name="atif")
@click.option("--run", "run", metavar="REF", help="A run id, an unambiguous prefix of one, or 'latest'.")
@click.option(
    "--episode", "episodes", multiple=True, metavar="ID", help="An episode (repeatable; without --run)."
)
@click.option("--task", "tasks", multiple=True, metavar="ID", help="Only episodes of this task (repeatable).")
@output_option(
    "A new (or empty) folder: one <episode>.json per episode, screenshots in images/.", FOLDER, required=True
)
@click.option("--no-images", is_flag=True, help="Leave the screenshots out (text observations only).")
@store_option
@format_option("table", "json")
def atif(
    run: str | None,
    episodes: tuple[str, ...],
    tasks: tuple[str, ...],
    output: Path,
    no_images: bool,
    fmt: str,
    store_path: str | None,
) -> None:
    """Export episodes as ATIF trajectories. ATIF is Harbor's Agent Trajectory Interchange Format.

    One trajectory per episode: the task and first observation as the user step, then one
    agent step per mmina step (the raw model output, the action as a tool call of the 12
    MMInA actions, the page it led to as the observation with its screenshot, tokens and
    cost), and in `extra` the task, the episode and every evaluator's verdict. Harbor's
    viewer, Docent and other ATIF readers load the files.

    \b
    Examples:
      mmina export atif --run latest -o trajectories/
      mmina export atif --episode normal-1-5927965e1abf4459 --no-images -o one/
      harbor traj validate trajectories/normal-1-5927965e1abf4459.json
    """
    from mmina.interchange.atif_export import export_atif
    from mmina.interchange.stored import Selection, count_episodes

    store = open_store(store_path)
    selection = Selection(run, episodes, tasks)
    with _progress(count_episodes(store, selection)) as advance:
        result = export_atif(store, selection, output, not no_images, advance)
    _render(
        result.as_json(),
        fmt,
        f"wrote {result.path}: {result.trajectories} trajector(ies) of "
        f"{result.schema_version}, {result.steps} step(s), {result.images} screenshot(s), "
        f"verdicts of {', '.join(result.evaluators) or 'no evaluator'}",
    )
