"""A store of varied episodes for checking the evaluators, written through the real store writer.

Tasks: every official-format task file of ``tests/data/official`` (mixed case, punctuation,
numbers, lists of acceptable answers, ``N/A``, ``|OR|`` URLs, cities with spaces, upper-case
codes, no procedure), a fifth of the built-in suite (``mmina_hops``), and hand-made edge
cases (unicode, quotes, list-valued ``exact_match``, a string ``must_include``, references
that are not text, empty ones). Episodes: answers right, wrong, differently cased, quoted,
padded, unicode, missing or empty; zero to ten steps whose URLs come from the task (its hop
URLs, keywords, city, codes, gold URLs, in changing case), with gaps, repeats and rows stored
out of order, null URLs; statuses with errors. Runs: two of the same suite (tasks shared),
one whose tasks have no checksum, and ``broken``, whose references are not text (compared
as text since task normalization turns them into text; older versions left them unscored).
Deterministic; importable by older mmina versions too (it only uses the store writer), so their
verdicts can be compared.
"""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mmina.store import Store
from mmina.tasks.task import Task, task_from_dict, task_row
from mmina.tasks.taskcheck import load_suite

OFFICIAL = Path(__file__).parent / "data" / "official" / "mmina"
T0 = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
EPISODES_PER_TASK = 6
RUNS = ("alpha", "beta", "gamma")
EDGE = {
    "edge/list-exact": {
        "eval": {
            "eval_types": ["string_match"],
            "reference_answers": {"exact_match": ["Paris", "paris, France"], "must_include": "paris"},
        },
        "procedure": ["kiwix", "hotels", "end"],
        "city": "Paris",
        "flight": "PAR",
    },
    "edge/unicode": {
        "eval": {
            "eval_types": ["string_match"],
            "reference_answers": {"exact_match": "ΣΊΣΥΦΟΣ", "must_include": ["İstanbul", "Straße", "  "]},
        },
        "procedure": ["kiwix", "event", "end"],
        "city": "İstanbul",
    },
    "edge/quoted": {
        "eval": {
            "eval_types": ["string_match"],
            "reference_answers": {"exact_match": ' "Canberra" ', "must_include": ["$23.75"]},
        }
    },
    "edge/empty": {
        "eval": {
            "eval_types": ["string_match"],
            "reference_answers": {"exact_match": "", "must_include": []},
        },
        "cnt_hop": 3,
    },
    "edge/urls": {
        "eval": {
            "eval_types": ["url_match"],
            "reference_url": " http://Shop.test/item/ |OR| http://shop.test/cat/ |OR|  |OR| http://x.test/ ",
        },
        "procedure": ["7770", "momondo", "hotels", "end"],
        "city": "Rio de Janeiro",
        "flight": "RIO",
        "shop": "Head Phones",
    },
    "edge/fuzzy": {
        "eval": {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["a red tower"]}},
        "procedure": ["kiwix", "end"],
    },
    "edge/hops": {
        "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["42"]}},
        "procedure": ["kiwix", "shop", "end"],
        "mmina_hops": [
            {"reference_url": "", "answer": "tea"},
            {"reference_url": "http://shop.test/tea", "answer": "42"},
        ],
    },
}
BROKEN = {
    "edge/not-text": {
        "eval": {
            "eval_types": ["string_match"],
            "reference_answers": {"exact_match": 12, "must_include": 42},
        },
        "procedure": ["kiwix", "end"],
    },
    "edge/mixed-list": {
        "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["tea", 42]}},
        "procedure": ["kiwix", "end"],
    },
}


def tasks() -> list[Task]:
    """The official-format tasks that load, a fifth of the built-in suite and the edge cases."""
    edge = [
        task_from_dict(
            {"intent": task_id, "start_url": "http://wiki.test/", **raw}, task_id, f"sha-{task_id}"
        )
        for task_id, raw in EDGE.items()
    ]
    return official_tasks() + list(load_suite().tasks)[::5] + edge


def official_tasks() -> list[Task]:
    found = []
    for path in sorted(OFFICIAL.glob("*/*.json")):
        raw = json.loads(path.read_text())
        if isinstance(raw, dict) and isinstance(raw.get("intent"), str):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found.append(task_from_dict(raw, f"{path.parent.name}/{path.stem}", digest))
    return found


def broken_tasks() -> list[Task]:
    return [
        task_from_dict({"intent": i, "start_url": "http://wiki.test/", **raw}, i, f"sha-{i}")
        for i, raw in BROKEN.items()
    ]


def right_answer(task: Task) -> str:
    refs = task.reference_answers
    exact = refs.get("exact_match")
    if isinstance(exact, list) and exact:
        return str(exact[-1])
    if exact:
        return str(exact)
    keywords = refs.get("must_include")
    return ", ".join(map(str, keywords)) if isinstance(keywords, list) else str(keywords or "")


def answers(task: Task) -> list[str | None]:
    right = right_answer(task)
    return [
        None,
        "",
        right,
        right.upper(),
        f'  "{right}"  ',
        f"{right} (I think)",
        right.lower().replace(",", ""),
        "İSTANBUL, STRASSE",
        "straße ıstanbul",
        "$23.75",
        "23.75 USD",
        "N/A",
        '"n/a"',
        " \t\n",
        "I could not find it",
    ]


def urls(task: Task) -> list[str | None]:
    hops = task.original.get("mmina_hops") if isinstance(task.original.get("mmina_hops"), list) else []
    city, code, shop = task.city or "tokyo", task.flight or "tyo", task.shop or "tea"
    keyword_urls = [
        f"https://www.{k or 'site'}.com/{path}"
        for k in task.procedure
        for path in (
            f"search?city={city}&code={code}&q={shop}",
            f"search?code={code}",
            f"search?q={shop}",
            city,
        )
    ]
    golds = [u.strip() for u in task.reference_url.split(" |OR| ") if u.strip()]
    return [
        *(h.get("reference_url") for h in hops if isinstance(h, dict)),
        *keyword_urls,
        *(u.upper() for u in keyword_urls[:8:3]),
        *golds,
        *(g.rstrip("/") + "/page?x=1" for g in golds),
        f"http://localhost:8888/viewer#wikipedia/A/{city}",
        f"https://x.test/{city}/{code.upper()}",
        None,
        "",
        "http://wiki.mmina.test/kiwix/search?q=lost",
    ]


def steps(rng: random.Random, task: Task) -> list[dict[str, Any]]:
    count = rng.choice((0, 1, 2, 3, 5, 8, 10))
    pool = urls(task)
    indexes = sorted(rng.sample(range(count + 3), count)) if rng.random() < 0.3 else list(range(count))
    if count > 2 and rng.random() < 0.2:
        indexes[1] = indexes[0]  # a repeated step index: the stored order decides
    rows = [
        {
            "step_index": i,
            "url": rng.choice(pool),
            "action": "click [3]",
            "action_kind": "click",
            "started_at": T0 + timedelta(seconds=i),
        }
        for i in indexes
    ]
    if rng.random() < 0.4:
        rng.shuffle(rows)
    return rows


def episode(rng: random.Random, task: Task, number: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    status = rng.choice(("completed", "completed", "completed", "error", "max_steps"))
    row = {
        "episode_id": f"case-{number:05d}",
        "task_id": task.task_id,
        "attempt": 1,
        "status": status,
        "stop_reason": "stop" if status == "completed" else status,
        "final_answer": rng.choice(answers(task)),
        "started_at": T0 + timedelta(seconds=number // 3),
        "error": "browser crashed" if status == "error" else None,
    }
    return row, steps(rng, task)


def build(root: Path) -> Store:
    """The store (see the module docstring) at ``root``."""
    store = Store.open(root, create=True)
    rng, number = random.Random(16), 0
    suites = {"alpha": tasks(), "beta": tasks(), "gamma": tasks(), "broken": tasks()[:10] + broken_tasks()}
    for run_id, run_tasks in suites.items():
        rows = [{**task_row(t), "task_sha256": None if run_id == "gamma" else t.sha256} for t in run_tasks]
        store.begin_run(run_id, run_row(len(run_tasks)), rows)
        batch = store.batch_writer(run_id)
        for task in run_tasks:
            for _ in range(EPISODES_PER_TASK if run_id != "broken" else 4):
                batch.add_episode(*episode(rng, task, number))
                number += 1
        batch.commit()
    return store


def run_row(task_count: int) -> dict[str, Any]:
    return {
        "created_at": T0,
        "agent": "cases",
        "model": None,
        "config_json": "{}",
        "task_suite": "cases",
        "task_suite_path": "tests/rescore_cases.py",
        "task_suite_sha256": "c" * 64,
        "task_count": task_count,
        "mmina_version": "test",
        "python_version": "",
        "playwright_version": "",
        "browser_version": "",
        "viewport_width": 1280,
        "viewport_height": 720,
        "hostname": "test",
    }
