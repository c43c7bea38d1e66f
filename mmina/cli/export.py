"""``mmina export warc|wacz|har|inspect|dataset|atif``: stored episodes in the neighbours' formats (thin: the work is
``mmina.interchange``, imported when a command runs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mmina.cli.common import LazyGroup, format_option, open_store, output_option, store_option
from mmina.cli.render import echo, print_json, progress_bar

EXPORTERS = {
    "dataset": "mmina.cli.export_dataset:dataset",
    "atif": "mmina.cli.export_atif:atif",
}
"""Exports in modules of their own (imported only when they are used)."""

if TYPE_CHECKING:  # imported when a command runs
    from mmina.interchange.stored import Selection
    from mmina.store import Store


@click.group(name="export", cls=LazyGroup, lazy=EXPORTERS)
def export() -> None:
    """Write stored episodes in other tools' formats. One command each: WARC, WACZ, HAR, an
    Inspect log, a Hugging Face dataset, ATIF.

    \b
    Examples:
      mmina export warc --run latest -o run.warc.gz
      mmina export wacz --run latest -o run.wacz
      mmina export har --episode normal-1-5927965e1abf4459 -o episode.har
      mmina export inspect --run latest -o run.eval && inspect view --log-dir .
      mmina export dataset latest -o my-dataset/
      mmina export atif --run latest -o trajectories/
    """


def _output(default_suffix: str):
    return output_option(
        f"File to write (default: <run or episode>{default_suffix} here); written whole or not at all."
    )


@export.command(name="warc")
@click.option("--run", "run", metavar="REF", help="A run id, an unambiguous prefix of one, or 'latest'.")
@click.option(
    "--episode", "episodes", multiple=True, metavar="ID", help="An episode (repeatable; without --run)."
)
@click.option("--task", "tasks", multiple=True, metavar="ID", help="Only episodes of this task (repeatable).")
@_output(".warc.gz")
@store_option
@format_option("table", "json")
def warc(
    run: str | None,
    episodes: tuple[str, ...],
    tasks: tuple[str, ...],
    output: Path | None,
    fmt: str,
    store_path: str | None,
) -> None:
    """Export episodes as a WARC 1.1 file (gzip per record). It is read by pywb, ReplayWeb.page
    and warcio.

    Every archived exchange becomes request and response records (bodies as the browser
    received them, decoded; secrets as the store keeps them, redacted, and each record says
    which of its parts a redaction touched); each step a metadata record (index, action,
    URL, tree, the records it issued) and its screenshot a resource record. A WebSocket is
    written as IIPC warc-specifications #115 proposes: its handshake, and a resource record at
    its ws(s):// URL holding its frames as JSON lines. `mmina import warc FILE` restores the
    run. Streams: a run of any size is read and written one episode at a time.

    \b
    Examples:
      mmina export warc --run latest -o run.warc.gz
      mmina export warc --run nightly --task normal/1 -o normal-1.warc.gz
      wb-manager init mine && wb-manager add mine run.warc.gz && wayback
    """
    from mmina.interchange.warc_export import export_warc

    store, selection, total, target = _selected(run, episodes, tasks, output, ".warc.gz", store_path)
    with _progress(total) as advance:
        result = export_warc(store, selection, target, advance)
    _render(
        result.as_json(),
        fmt,
        f"wrote {result.path}: {result.episodes} episode(s), {result.exchanges} "
        f"exchange(s), {result.records} record(s) ({result.revisits} revisit(s), "
        f"{result.sockets} socket(s) with {result.socket_frames} frame(s), "
        f"{result.redacted} with redactions, {result.missing_bodies} body(ies) missing)",
    )


@export.command(name="wacz")
@click.option("--run", "run", metavar="REF", help="A run id, an unambiguous prefix of one, or 'latest'.")
@click.option(
    "--episode", "episodes", multiple=True, metavar="ID", help="An episode (repeatable; without --run)."
)
@click.option("--task", "tasks", multiple=True, metavar="ID", help="Only episodes of this task (repeatable).")
@click.option("--title", metavar="TEXT", help="The package's title (default: the run's id).")
@_output(".wacz")
@store_option
@format_option("table", "json")
def wacz(
    run: str | None,
    episodes: tuple[str, ...],
    tasks: tuple[str, ...],
    title: str | None,
    output: Path | None,
    fmt: str,
    store_path: str | None,
) -> None:
    """Export episodes as a WACZ 1.1.1 package for ReplayWeb.page. One page per step.

    The package holds the WARC of `export warc` (every body in full), its CDXJ index,
    pages/pages.jsonl (each step's URL, time, title and text) and datapackage.json with
    every file's sha256. Open it at https://replayweb.page, or serve it beside
    ReplayWeb.page's ui.js and sw.js (`<replay-web-page source=run.wacz url=...>`).

    \b
    Examples:
      mmina export wacz --run latest -o run.wacz
      mmina export wacz --run nightly --task normal/1 --title "normal/1, nightly" -o normal-1.wacz
      wacz validate -f run.wacz
    """
    from mmina.interchange.wacz_export import export_wacz

    store, selection, total, target = _selected(run, episodes, tasks, output, ".wacz", store_path)
    with _progress(total) as advance:
        result = export_wacz(store, selection, target, advance, title)
    _render(
        result.as_json(),
        fmt,
        f"wrote {result.path}: {result.episodes} episode(s), {result.pages} page(s), "
        f"{result.indexed} indexed response(s), {result.records} WARC record(s) "
        f"({result.sockets} socket(s)), {result.bytes} bytes",
    )


@export.command(name="har")
@click.option("--episode", "episode", required=True, metavar="ID", help="The episode to export.")
@_output(".har")
@store_option
@format_option("table", "json")
def har(episode: str, output: Path | None, fmt: str, store_path: str | None) -> None:
    """Export one episode's network traffic as HAR 1.2. Bodies, timings and the step of each entry
    are in it.

    Each step is a HAR page; each entry names the step that issued it (`_mmina_step`).
    Playwright replays it with `context.route_from_har(FILE)`, and browsers' DevTools import it.

    \b
    Example:
      mmina export har --episode normal-1-5927965e1abf4459 -o episode.har
    """
    from mmina.interchange.har_export import export_har

    result = export_har(open_store(store_path), episode, output or Path(f"{episode}.har"))
    _render(
        result.as_json(),
        fmt,
        f"wrote {result.path}: {result.entries} entr(ies) over {result.pages} step(s) "
        f"({result.redacted} with redactions, {result.missing_bodies} body(ies) missing)",
    )


@export.command(name="inspect")
@click.option(
    "--run", "run", required=True, metavar="REF", help="A run id, an unambiguous prefix of one, or 'latest'."
)
@click.option(
    "--evaluator",
    default="hops",
    show_default=True,
    metavar="NAME",
    help="Whose verdicts become the samples' scores (the latest batch, as `mmina report` reads it).",
)
@_output(".eval")
@store_option
@format_option("table", "json")
def inspect(run: str, evaluator: str, output: Path | None, fmt: str, store_path: str | None) -> None:
    """Export a run as an Inspect AI log (.eval). One sample per episode, for `inspect view`.

    A sample holds the task's intent and references, the model's messages, every step as
    events (model calls, and URL, action and screenshot as an info event), the evaluator's
    verdict with its hop verdicts, and tokens and cost; the log's metrics are the task and
    hop success rates of `mmina report`.

    \b
    Examples:
      mmina export inspect --run latest -o run.eval
      mmina export inspect --run nightly --evaluator mmina_official -o nightly.eval
      inspect view --log-dir .
    """
    from mmina.interchange.inspect_export import export_inspect
    from mmina.interchange.stored import Selection, count_episodes

    store = open_store(store_path)
    run_id = store.resolve_run(run)
    with _progress(count_episodes(store, Selection(run=run_id))) as advance:
        result = export_inspect(store, run_id, output or Path(f"{run_id}.eval"), evaluator, advance)
    rates = f"task success {result.task_success:.1%}" if result.task_success is not None else "no verdicts"
    _render(
        result.as_json(),
        fmt,
        f"wrote {result.path}: {result.samples} sample(s), {result.scored} scored by "
        f"{result.evaluator} ({rates}), {result.input_tokens + result.output_tokens} "
        f"token(s)",
    )


def _selected(
    run: str | None,
    episodes: tuple[str, ...],
    tasks: tuple[str, ...],
    output: Path | None,
    suffix: str,
    store_path: Any,
) -> tuple[Store, Selection, int, Path]:
    """The store, the selection (checked: it holds episodes), how many, and the file to write
    (by default the run's or the first episode's id with ``suffix``, here)."""
    from mmina.interchange.stored import Selection, count_episodes, selected_runs

    store = open_store(store_path)
    selection = Selection(run, episodes, tasks)
    total = count_episodes(store, selection)
    return (
        store,
        selection,
        total,
        output or Path(f"{selected_runs(store, selection)[0] if run else episodes[0]}{suffix}"),
    )


def _render(data: dict[str, Any], fmt: str, line: str) -> None:
    if fmt == "json":
        print_json(data)
    else:
        echo(line)


@contextmanager
def _progress(total: int) -> Iterator[Callable[[Any], None] | None]:
    """A transient bar over the episodes (on a terminal only)."""
    with progress_bar(eta=True) as bar:
        if bar is None:
            yield None
            return
        task = bar.add_task("exporting", total=total)
        yield lambda _episode: bar.advance(task)
