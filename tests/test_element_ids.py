"""Element ids derived from the elements: the same page shows the same ids whenever it was
observed — proven on a real page whose follow-up request lands a step later in one recording
than in the other — and episodes stored with the old first-seen ids still replay."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from mmina.actions.grammar import parse_action
from mmina.observations.aria_snapshot import parse_snapshot
from mmina.observations.element_ids import assign_ids, id_digits
from mmina.observations.observation import elements_from_tree, flatten_snapshot
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.replayer.replays import compare_runs, replay_run
from mmina.store import Store
from tests.aria_render import nodes, render
from tests.harbour_site import HarbourSite
from tests.heavy import sized

# ---------------------------------------------------------------- pure


@settings(max_examples=sized(100, 300), deadline=None)
@given(st.lists(nodes(), min_size=1, max_size=5), st.integers(0, 10_000))
def test_ids_are_unique_numbers_that_only_the_page_decides(tree: list[dict[str, Any]], shift: int) -> None:
    text, elements = flatten_snapshot(render(tree))
    ids = [e.id for e in elements]
    assert len(set(ids)) == len(ids) and all(i.isdigit() and len(i) == id_digits(len(ids)) for i in ids)
    assert flatten_snapshot(render([_moved(node, shift) for node in tree]))[0] == text


def _moved(node: dict[str, Any], shift: int) -> dict[str, Any]:
    """The node as another snapshot of the same page may have it: other refs, other boxes."""
    moved = {**node, "ref": f"f{shift}{node['ref']}"}
    if "box" in node:
        moved["box"] = {**node["box"], "y": node["box"]["y"] + shift}
    moved["children"] = [c if isinstance(c, str) else _moved(c, shift) for c in node.get("children", [])]
    return moved


def _page(links: list[str], before: str = "") -> str:
    lines = ["- main [ref=e1]:", *([before] if before else [])]
    lines += [
        f'  - link "{name}" [ref=e{i + 2}]:\n    - /url: /{name.replace(" ", "/")}'
        for i, name in enumerate(links)
    ]
    return "\n".join(lines)


def test_an_element_keeps_its_id_when_others_come_and_go() -> None:
    """Removing a link and adding a heading elsewhere changes no other id — except where two
    numbers collided: an element then moves only when the number it has in one observation is
    held by another element in the other (documented in mmina.observations.element_ids)."""
    names = [f"Boat {i}" for i in range(300)]
    _, before = flatten_snapshot(_page(names))
    _, after = flatten_snapshot(
        _page(names[:100] + names[101:], '  - heading "Storm warning" [level=2] [ref=e999]')
    )
    old = {e.name: e.id for e in before if e.role == "link" and e.name != "Boat 100"}
    new = {e.name: e.id for e in after if e.role == "link"}
    moved = {name for name in old if old[name] != new[name]}
    assert len(moved) <= 3, moved
    for name in moved:
        assert new[name] in {e.id for e in before if e.name != name} or old[name] in {
            e.id for e in after if e.name != name
        }, name


def test_the_id_space_grows_with_the_page() -> None:
    assert [id_digits(n) for n in (0, 1, 1125, 1126, 11_250, 11_251)] == [4, 4, 4, 5, 5, 6]
    lines = parse_snapshot(_page([f"Link {i}" for i in range(2000)]))
    ids = assign_ids(lines)
    assert len(set(ids.values())) == 2001 and {len(i) for i in ids.values()} == {5}


# ---------------------------------------------------------------- a follow-up request a step late


def _harbour_task(folder: Path, site: HarbourSite) -> Path:
    """A one-task suite on the harbour page: click "More boats", scroll down, stop."""
    script = [
        {"action": "click", "target": {"role": "button", "name": "More boats"}},
        {"action": "scroll", "direction": "down"},
        {"action": "stop", "answer": "Puffin"},
    ]
    task = {
        "task_id": 1,
        "intent": "Which boats are in the harbour?",
        "start_url": site.url("/"),
        "eval": {
            "eval_types": ["string_match"],
            "reference_answers": {"must_include": ["Puffin"]},
            "reference_url": "",
            "program_html": [],
            "string_note": "",
            "reference_answer_raw_annotation": "Puffin",
        },
        "cnt_hop": 2,
        "procedure": ["harbour", "end"],
        "reference_script": script,
    }
    path = folder / "harbour" / "1.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(task))
    return path.parent


def _trees(store: Store, run: RunSummary) -> list[str]:
    rows = store.read("steps", run_id=run.run_id, columns=["step_index", "tree_text"]).to_pylist()
    return [r["tree_text"] for r in sorted(rows, key=lambda r: r["step_index"])]


def test_a_follow_up_landing_a_step_later_changes_only_that_step(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "store", create=True)
    with HarbourSite() as site:
        suite = str(_harbour_task(tmp_path / "tasks", site))
        prompt = record_run(store, RecordConfig(tasks=suite))
        site.hold_late, site.released = True, type(site.released)()  # /late now waits for /more
        late = record_run(store, RecordConfig(tasks=suite))
    first, second = _trees(store, prompt), _trees(store, late)
    assert len(first) == len(second) == 3
    assert "Storm warning" in first[0] and "Storm warning" not in second[0], "the news came a step later"
    assert first[1:] == second[1:], "from then on the same page shows the same text, ids included"
    shown = {(e.role, e.name): e.id for e in elements_from_tree(second[0])}
    assert {
        (e.role, e.name): e.id for e in elements_from_tree(first[0]) if (e.role, e.name) in shown
    } == shown
    steps = compare_runs(store, prompt.run_id, late.run_id)[0].steps
    assert [s.tree_equal for s in steps] == [False, True, True]
    assert steps[0].tree_change == (
        'first difference at line 4 (in main > region "Latest"): recorded `paragraph: Storm warning: small craft '
        "stay in port`, replayed `list`; 3 element(s) only in the recording: paragraph: Storm warning: small craft "
        'stay in port, paragraph: Ferry at 10:40, link "Tide tables: today"'
    )


# ---------------------------------------------------------------- episodes stored with first-seen ids


def _as_first_seen(trees: list[str], actions: list[str | None]) -> tuple[list[str], list[str | None]]:
    """An episode as mmina stored it before: ids numbered in the order elements were first seen."""
    numbers: dict[tuple[str, str, int], str] = {}
    old_trees, old_actions = [], []
    for tree, action in zip(trees, actions):
        seen: Counter[tuple[str, str]] = Counter()
        renumbered: dict[str, str] = {}
        for element in elements_from_tree(tree):
            key = (element.role, element.name, seen[(element.role, element.name)])
            seen[(element.role, element.name)] += 1
            renumbered[element.id] = numbers.setdefault(key, str(len(numbers) + 1))
        old_trees.append(
            re.sub(r"^(\t*)\[(\d+)\] ", lambda m: f"{m[1]}[{renumbered[m[2]]}] ", tree, flags=re.M)  # noqa: B023
        )
        parsed = parse_action(action) if action else None
        old_actions.append(
            action
            if parsed is None or parsed.element_id is None
            else replace(parsed, element_id=renumbered[parsed.element_id]).render()
        )
    return old_trees, old_actions


def _rewrite_steps(store: Path, run_id: str) -> list[str | None]:
    """Rewrite a run's stored steps with first-seen ids; returns the old-style actions."""
    path = next((store / "steps" / f"run_id={run_id}").glob("*.parquet"))
    table = pq.read_table(path).sort_by("step_index")
    trees, actions = _as_first_seen(table.column("tree_text").to_pylist(), table.column("action").to_pylist())
    for name, values in (("tree_text", trees), ("action", actions)):
        column = table.schema.get_field_index(name)
        table = table.set_column(column, table.schema.field(column), pa.array(values, pa.string()))
    pq.write_table(table, path)
    return actions


def test_an_episode_stored_with_first_seen_ids_still_replays(
    recorded_copy: Path, recorded: tuple[Path, RunSummary]
) -> None:
    run_id = recorded[1].run_id
    old_actions = _rewrite_steps(recorded_copy, run_id)
    targeted = [a for a in old_actions if a and parse_action(a).element_id]
    assert targeted and all(len(parse_action(a).element_id or "") < 4 for a in targeted), old_actions
    report = replay_run(Store.open(recorded_copy), run_id)
    episode = report.episodes[0]
    assert (episode.fidelity, episode.status) == (1.0, "completed"), [s.tree_change for s in episode.steps]
    rows = sorted(
        Store.open(recorded_copy).read("steps", run_id=report.replay_run).to_pylist(),
        key=lambda r: r["step_index"],
    )
    assert [r["action_error"] for r in rows] == [None] * len(rows)
    replayed = [r["action"] for r in rows if r["action"] and parse_action(r["action"]).element_id]
    assert all(len(parse_action(a).element_id or "") == 4 for a in replayed), "aimed at today's ids"
    assert len(replayed) == len(targeted)
