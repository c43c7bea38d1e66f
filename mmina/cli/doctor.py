"""``mmina doctor``: what this machine has of what mmina needs, and how to get what it lacks."""

from __future__ import annotations

import os
from dataclasses import asdict

import click

from mmina.cli.common import format_option, store_option
from mmina.cli.render import echo, print_json, write_csv
from mmina.errors import plural
from mmina.recorder.doctor import CHECKS
from mmina.store.defaults import STORE_ENV

COLUMNS = ("name", "status", "required", "failing", "detail", "fix")


@click.command()
@click.option(
    "--browser",
    "browser_path",
    metavar="PATH",
    help="Chromium executable to check (default: $MMINA_CHROMIUM, Playwright's, the system's).",
)
@store_option
@click.option(
    "--base-url",
    metavar="URL",
    envvar="OPENAI_BASE_URL",
    show_envvar=True,
    help="The OpenAI-compatible endpoint to check (default: OpenAI's); the key is $OPENAI_API_KEY.",
)
@click.option(
    "--model",
    metavar="NAME",
    help="Check the endpoint with one one-token chat completion of this model (without it the endpoint "
    "is not checked).",
)
@click.option(
    "--only",
    multiple=True,
    type=click.Choice(CHECKS),
    metavar="CHECK",
    help=f"Run only this check (repeatable): {', '.join(CHECKS)}.",
)
@format_option()
def doctor(
    browser_path: str | None,
    store_path: str | None,
    base_url: str | None,
    model: str | None,
    only: tuple[str, ...],
    fmt: str,
) -> None:
    """Check what mmina needs here and how to get what is missing.

    The checks: the installed package and its data (built-in tasks, fixture web, serve's
    pages), a Chromium (found and started headless), kiwix-serve (for the fixture web's
    Wikipedia viewer; optional), the store (opens, schema version, damage as `mmina store
    verify` finds it; a missing default store is fine) and, with --model, the model endpoint
    (one chat completion, as record --agent openai sends first). One line per check: ok,
    missing, failed or skipped, with the fix. Exit 1 when something required is missing or
    broken: the browser, or a store or model that was named.

    \b
    Examples:
      mmina doctor
      mmina doctor --browser /usr/lib/chromium/chromium --store runs/mmina-store
      OPENAI_API_KEY=any mmina doctor --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-VL-7B-Instruct
      mmina doctor --only endpoint --model gpt-4o-mini --format json
    """
    from mmina.recorder.doctor import DoctorSettings, diagnose

    named = store_path is not None or bool(os.environ.get(STORE_ENV))
    checks = diagnose(DoctorSettings(browser_path, store_path, named, base_url, model), only)
    failing = [check.name for check in checks if check.failing]
    if fmt == "json":
        print_json(
            {"ok": not failing, "checks": [{**asdict(check), "failing": check.failing} for check in checks]}
        )
    elif fmt == "csv":
        write_csv(COLUMNS, [[getattr(check, column) for column in COLUMNS] for check in checks])
    else:
        for check in checks:
            echo(f"{check.status.upper():8} {check.name}: {check.detail}")
            if check.fix and check.status != "ok":
                echo(f"{'':8} how: {check.fix}")
        echo(
            "all required checks pass"
            if not failing
            else f"{plural(len(failing), 'required check')} failed: {', '.join(failing)}"
        )
    if failing:
        raise click.exceptions.Exit(1)
