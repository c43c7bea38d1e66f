"""``mmina tasks validate`` and ``mmina tasks list``: task files in the MMInA format."""
from __future__ import annotations


import click

from mmina.cli.common import format_option, print_json, render_rows
from mmina.taskcheck import check_path
from mmina.tasks import Task, load_suite, resolve_suite_path

@click.group()
def tasks() -> None:
    """Check and list task files in the official MMInA JSON format.

    \b
    Examples:
      mmina tasks validate path/to/mmina/normal
      mmina tasks list --format json
    """


@tasks.command()
@click.argument("path", required=False)
@format_option("table", "json")
def validate(path: str | None, fmt: str) -> None:
    """Check every task file under PATH; print each problem as `file: field: what is wrong`.

    Exits 1 when any file has a problem. PATH is a suite folder, one task file, or the
    name of a built-in suite folder such as `normal` (default: the whole built-in suite).

    \b
    Example:
      mmina tasks validate fixtures/tasks
    """
    root = resolve_suite_path(path)
    problems = check_path(root)
    if fmt == "json":
        print_json({"path": str(root), "ok": not problems,
                    "problems": [{"file": p.file, "field": p.field, "message": p.message} for p in problems]})
    else:
        for problem in problems:
            click.echo(str(problem))
        click.echo(f"{root}: {'OK' if not problems else f'{len(problems)} problem(s)'}", err=bool(problems))
    if problems:
        raise click.exceptions.Exit(1)


@tasks.command(name="list")
@click.argument("path", required=False)
@format_option("table", "json", "csv")
def list_tasks(path: str | None, fmt: str) -> None:
    """List the tasks under PATH: id, hops, sites and evaluation.

    PATH is a suite folder, one task file, or the name of a built-in suite folder such as
    `normal` (default: the whole built-in fixture suite).

    \b
    Examples:
      mmina tasks list
      mmina tasks list fixtures/tasks/multi567 --format json
    """
    suite = load_suite(path)
    if fmt == "json":
        print_json([_task_json(t) for t in suite.tasks])
        return
    rows = [(t.task_id, t.n_hops, " > ".join(h.keyword for h in t.hops), ", ".join(t.eval_types),
             ", ".join(sorted(t.reference_answers))) for t in suite.tasks]
    render_rows(["task", "hops", "sites", "eval", "answers"], rows, fmt)


def _task_json(task: Task) -> dict[str, object]:
    return {
        "id": task.task_id,
        "suite": task.suite,
        "intent": task.intent,
        "n_hops": task.n_hops,
        "hops": [{"index": h.index, "keyword": h.keyword} for h in task.hops],
        "sites": sorted({h.keyword for h in task.hops}),
        "eval_types": list(task.eval_types),
        "reference_answers": task.reference_answers,
        "start_urls": list(task.start_urls),
        "city": task.city,
        "flight": task.flight,
        "shop": task.shop,
    }
