"""``mmina serve``: the local web application over a store."""

from __future__ import annotations

import click

from mmina.analysis.names import DEFAULT_EVALUATOR
from mmina.cli.common import open_store, store_option
from mmina.cli.render import echo


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Anything but a loopback address needs --expose (and a token).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8787,
    show_default=True,
    help="Port to listen on (0: any free port; the address is printed).",
)
@click.option(
    "--expose",
    is_flag=True,
    help="Allow a non-loopback --host: the store becomes readable by whoever "
    "reaches this machine and holds the token.",
)
@click.option(
    "--token",
    envvar="MMINA_SERVE_TOKEN",
    show_envvar=True,
    metavar="TEXT",
    help="Token every request must carry (default with --expose: a random one, printed in the address).",
)
@click.option(
    "--evaluator",
    default=DEFAULT_EVALUATOR,
    show_default=True,
    metavar="NAME",
    help="Whose verdicts the runs page and the episodes table show first (each page can switch).",
)
@click.option(
    "--labeller",
    metavar="NAME",
    help="The name labels saved from the pages carry (default: the "
    "operating-system user; the Label page can set another).",
)
@click.option("--read-only", is_flag=True, help="Save no labels: the store is only read.")
@store_option
def serve(
    host: str,
    port: int,
    expose: bool,
    token: str | None,
    evaluator: str,
    labeller: str | None,
    read_only: bool,
    store_path: str | None,
) -> None:
    """Browse a store in a web browser and label its episodes. It shows runs (live while they are
    recorded), the report's analysis of any run and evaluator, every episode in a filtered table,
    the trajectory viewer with each step's network requests, two runs side by side, read-only SQL,
    and labelling: a person marks each hop and the task pass / fail / unsure with the keyboard,
    saved as verdicts of the human evaluator (the only thing the server ever writes; not at all with
    --read-only). Ctrl-C stops the server.

    \b
    Examples:
      mmina serve                                   # http://127.0.0.1:8787/
      mmina serve --labeller alice                  # then the Label page: p / f / u, Enter for the next
      mmina serve --store s3://my-bucket/mmina --port 9000 --read-only
      mmina serve --host 0.0.0.0 --expose --token "$(openssl rand -hex 16)"
    """
    from mmina.serve.launch import Binding, Labelling, is_loopback  # uvicorn only here
    from mmina.serve.launch import serve as run_server

    store = open_store(store_path)

    def ready(binding: Binding) -> None:
        echo(f"mmina serve: {binding.url}  (store {store.location}; Ctrl-C stops)")
        if binding.token and not is_loopback(binding.host):
            echo(
                "every request needs the token: open the address above once, or send "
                "'Authorization: Bearer <token>'",
                err=True,
            )

    run_server(store, host, port, token, expose, evaluator, ready, Labelling(labeller, not read_only))
