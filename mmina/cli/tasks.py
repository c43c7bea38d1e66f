"""``mmina tasks validate`` and ``mmina tasks list``: task files in the MMInA format."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mmina.cli.common import SUITE_HELP, format_option, old_arguments
from mmina.cli.render import echo, print_json, render_rows

if TYPE_CHECKING:
    from mmina.tasks.task import Task


@click.group()
def tasks() -> None:
    """Check and list task files in the official MMInA JSON format.

    \b
    Examples:
      mmina tasks validate --tasks path/to/mmina/normal
      mmina tasks list --format json
    """


def suite_option(func: Any) -> Any:
    """``--tasks PATH``, as every command names a suite; the positional PATH these commands took
    before is still accepted, with a warning."""
    func = click.option("--tasks", "tasks_path", metavar="PATH", help=SUITE_HELP)(func)
    return click.argument("old_path", required=False, metavar="")(func)


def _suite_path(tasks_path: str | None, old_path: str | None) -> str | None:
    if old_path and tasks_path:
        raise click.UsageError("give the suite once: --tasks PATH")
    return tasks_path or (old_arguments((old_path,), "PATH", "--tasks PATH")[0] if old_path else None)


@tasks.command()
@suite_option
@format_option()
def validate(old_path: str | None, tasks_path: str | None, fmt: str) -> None:
    """Check every task file under PATH. Each finding is printed as `file: field: what is wrong`.

    Errors make a task impossible to run (no intent, no start URL, a procedure that is not a
    list, an evaluation type nobody can evaluate, a file that is not JSON) and exit 1; `mmina
    record` reads and checks the files the same way and refuses such a suite. Warnings
    (`file: field: warning: ...`) are odd but runnable, as the official MMInA release is
    (lower-case codes, empty or null fields, cnt_hop disagreeing with procedure).
    --tasks is a suite folder, one task file, or the name of a built-in suite folder such as
    `normal` (default: the whole built-in suite).

    \b
    Examples:
      mmina tasks validate
      mmina tasks validate --tasks multi567
      mmina tasks validate --tasks path/to/mmina --format json
    """
    from mmina.tasks.taskcheck import check_suite

    checked = check_suite(_suite_path(tasks_path, old_path))
    root, problems, bad = checked.root, checked.problems, checked.errors
    if fmt == "json":
        print_json(
            {
                "path": str(root),
                "ok": not bad,
                "errors": len(bad),
                "warnings": len(problems) - len(bad),
                "problems": [
                    {"file": p.file, "field": p.field, "message": p.message, "severity": p.severity}
                    for p in problems
                ],
            }
        )
    elif fmt == "csv":
        render_rows(
            ["file", "field", "severity", "message"],
            [(p.file, p.field, p.severity, p.message) for p in problems],
            "csv",
        )
    else:
        for problem in problems:
            echo(str(problem))
        counts = f"{len(bad)} error(s), {len(problems) - len(bad)} warning(s)" if problems else "OK"
        echo(f"{root}: {counts}", err=bool(bad))
    if bad:
        raise click.exceptions.Exit(1)


@tasks.command(name="list")
@suite_option
@format_option()
def list_tasks(old_path: str | None, tasks_path: str | None, fmt: str) -> None:
    """List the tasks of a suite: id, hops, sites and evaluation.

    --tasks is a suite folder, one task file, or the name of a built-in suite folder such as
    `normal` (default: the whole built-in fixture suite).

    \b
    Examples:
      mmina tasks list
      mmina tasks list --tasks multi567 --format json
      mmina tasks list --tasks path/to/mmina/normal --format csv
    """
    from mmina.tasks.taskcheck import load_suite

    suite = load_suite(_suite_path(tasks_path, old_path))
    if fmt == "json":
        print_json([_task_json(t) for t in suite.tasks])
        return
    rows = [
        (
            t.task_id,
            t.n_hops,
            " > ".join(h.keyword or "?" for h in t.hops),
            ", ".join(t.eval_types),
            ", ".join(sorted(t.reference_answers)),
        )
        for t in suite.tasks
    ]
    render_rows(["task", "hops", "sites", "eval", "answers"], rows, fmt)


def _task_json(task: Task) -> dict[str, object]:
    return {
        "id": task.task_id,
        "suite": task.suite,
        "intent": task.intent,
        "n_hops": task.n_hops,
        "hops": [{"hop": h.index + 1, "keyword": h.keyword} for h in task.hops],
        "sites": sorted({h.keyword for h in task.hops if h.keyword}),
        "eval_types": list(task.eval_types),
        "reference_answers": task.reference_answers,
        "start_urls": list(task.start_urls),
        "city": task.city,
        "flight": task.flight,
        "shop": task.shop,
    }
