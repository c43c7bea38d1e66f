"""``mmina fixtures serve``: the local fixture web, for trying agents by hand."""

from __future__ import annotations

import shlex
import threading

import click

from mmina.cli.common import MAX_DRIFT


@click.group()
def fixtures() -> None:
    """The local fixture web that stands in for MMInA's websites.

    \b
    Example:
      mmina fixtures serve --port 8765 --drift 0
    """


@fixtures.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port on 127.0.0.1 (0: any free port).",
)
@click.option(
    "--drift",
    type=click.IntRange(0, MAX_DRIFT),
    default=0,
    show_default=True,
    help=f"Site version: 0 is the reference state (0..{MAX_DRIFT}).",
)
def serve(port: int, drift: int) -> None:
    """Serve every fixture site on one local port until Ctrl-C.

    Sites are reached by host name (wiki.mmina.test, shop.mmina.test, ...): start Chromium
    with the printed --host-resolver-rules flag to browse them. kiwix.mmina.test is the wiki
    as a ZIM file in a real kiwix-serve, opened in the viewer as MMInA's Wikipedia hops are.

    \b
    Example:
      mmina fixtures serve --port 8765
      chromium --host-resolver-rules="MAP *.mmina.test 127.0.0.1:8765" http://wiki.mmina.test/
    """
    from mmina.fixtures.web import FixtureWeb
    from mmina.fixtures.web.kiwix import viewer_url

    try:
        web = FixtureWeb(drift=drift, port=port).start()
    except OSError as exc:
        raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    try:  # entered before anything is printed, so a Ctrl-C right after the output still stops cleanly
        click.echo(
            f"serving {len(web.hosts)} sites on 127.0.0.1:{web.port} (drift {drift}): {', '.join(web.hosts)}"
        )
        click.echo(f"browser flag: {shlex.quote(web.chromium_args()[0])}")
        click.echo(
            f"kiwix viewer: {viewer_url()} "
            + (
                f"(not available: {web.kiwix.reason})"
                if web.kiwix.reason
                else "(a real kiwix-serve, started on the first visit)"
            )
        )
        threading.Event().wait()
    except KeyboardInterrupt:
        click.echo("stopped")
    finally:
        web.stop()
