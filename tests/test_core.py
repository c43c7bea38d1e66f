"""The pure core: action grammar, tasks and hops, observation text, redaction, budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmina.actions.grammar import Action, ActionKind, parse_action, parse_agent_output, parse_model_output
from mmina.errors import ActionParseError, TaskError
from mmina.observations.observation import ElementIds, flatten_snapshot
from mmina.redaction.redact import REDACTED, Redactor
from mmina.redaction.secret_rules import STRICT
from mmina.tasks.budget import Budget, Limits
from mmina.tasks.task import HopTracker, task_from_dict
from mmina.tasks.taskcheck import load_suite

ROUND_TRIP = [
    "click [12]",
    "hover [f1e3]",
    "type [3] [hello [world]] [press_enter_after=0]",
    "type [3] [x] [press_enter_after=1]",
    "press [Control+a]",
    "scroll [up]",
    "scroll [down]",
    "new_tab",
    "tab_focus [2]",
    "close_tab",
    "goto [http://wiki.mmina.test/kiwix/?q=a]",
    "go_back",
    "go_forward",
    "stop [$24.00 (two items)]",
    "stop []",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_every_action_round_trips(text: str) -> None:
    assert parse_action(text).render() == text
    assert parse_action(parse_action(text).render()) == parse_action(text)


def test_grammar_variants() -> None:
    assert parse_action("type [5] [abc]") == Action(
        ActionKind.TYPE, element_id="5", text="abc", press_enter=True
    )
    assert parse_action("type [5] [abc] [0]").press_enter is False
    assert parse_action("scroll [direction=down]").direction == "down"
    assert parse_action("STOP [Yes]").answer == "Yes"


@pytest.mark.parametrize(
    "bad", ["jump [3]", "click", "click [a b]", "scroll [left]", "tab_focus [x]", "goto []", ""]
)
def test_bad_actions_raise(bad: str) -> None:
    with pytest.raises(ActionParseError):
        parse_action(bad)


def test_model_output_uses_the_summary_block() -> None:
    text = "```click [1]``` is wrong. In summary, the next action I will perform is ```type [4] [tea] [1]```"
    assert parse_model_output(text).render() == "type [4] [tea] [press_enter_after=1]"
    assert parse_agent_output("```\nstop [ok]\n```").answer == "ok"
    with pytest.raises(ActionParseError, match="backticks"):
        parse_model_output("In summary, the next action I will perform is click [1]")


def test_builtin_suite_and_hop_semantics() -> None:
    suite = load_suite()
    assert suite.tasks and len(suite.sha256) == 64
    task = suite.select(["normal/1"]).tasks[0]
    assert task.cnt_hop == task.n_hops + 1 and task.procedure[-1] == "end"
    with pytest.raises(TaskError, match="no task 'normal/999' in suite"):
        suite.select(["normal/999"])


def test_official_example_has_two_hops() -> None:
    task = task_from_dict(
        {
            "intent": "x",
            "procedure": ["kiwix", "event", "end"],
            "cnt_hop": 3,
            "start_url": "http://a |AND| http://b",
        },
        "normal/7",
    )
    assert task.n_hops == 2 and [h.keyword for h in task.hops] == ["kiwix", "event"]
    assert task.start_urls == ("http://a", "http://b") and task.suite == "normal"


def test_hop_tracker_only_completes_the_head() -> None:
    tracker = HopTracker(task_from_dict({"intent": "x", "procedure": ["kiwix", "shop", "end"]}, "t"))
    assert not tracker.observe("http://shop.mmina.test/", 0)  # hop 1 cannot complete before hop 0
    assert tracker.observe("http://wiki.mmina.test/kiwix/A", 1) and tracker.current == 1
    assert not tracker.observe("http://wiki.mmina.test/kiwix/B", 2)
    assert tracker.observe("http://SHOP.mmina.test/p", 3) and tracker.done
    assert tracker.completed_at == [1, 3]


def test_bad_task_files(tmp_path: Path) -> None:
    (tmp_path / "1.json").write_text("{not json")
    with pytest.raises(TaskError, match="1.json: -: not valid JSON"):
        load_suite(tmp_path)
    (tmp_path / "1.json").write_text(json.dumps({"no": "intent"}))
    with pytest.raises(TaskError, match="1.json: intent: missing \\(the instruction"):
        load_suite(tmp_path)
    with pytest.raises(TaskError, match="does not exist"):
        load_suite(tmp_path / "missing")


def test_snapshot_flattening() -> None:
    snapshot = (
        '- main [ref=e1]:\n  - link "Tea \\"green\\"" [ref=f2e12] [cursor=pointer]:\n'
        "    - /url: /tea\n  - text: hi"
    )
    text, elements = flatten_snapshot(snapshot)
    main, tea = elements
    assert text.splitlines() == [
        f"[{main.id}] main",
        f'\t[{tea.id}] link "Tea \\"green\\""',
        "\t\t/url: /tea",
        "\ttext: hi",
    ]
    assert [(e.role, e.name, e.ref) for e in elements] == [
        ("main", "", "e1"),
        ("link", 'Tea "green"', "f2e12"),
    ]
    assert all(len(e.id) == 4 and e.id.isdigit() for e in elements)
    ids = ElementIds()
    ids.show(elements)
    assert ids.ref_for(tea.id) == "f2e12" and ids.ref_for("1") is None
    # the same elements have the same ids in another snapshot of the page, whatever their refs
    again, _ = flatten_snapshot(snapshot.replace("f2e12", "e7").replace("e1]", "e3]"))
    assert again == text


def test_boxes_inside_iframes_are_in_page_coordinates() -> None:
    """Boxes of frame content are relative to the frame: moved by each enclosing iframe's position."""
    snapshot = "\n".join(
        [
            "- generic [ref=e1] [box=0,0,1280,900]:",
            '  - searchbox "Search" [ref=e2] [box=12,6,293,27]',
            "  - iframe [ref=e3] [box=0,40,1280,860]:",
            '    - link "Solaria" [ref=f1e7] [box=200,195,50,17]',
            "    - iframe [ref=f1e8] [box=100,300,400,200]:",
            '      - button "Play" [ref=f2e1] [box=10,20,30,40]',
            '    - link "Estravia" [ref=f1e9] [box=200,219,58,17]',
            '  - link "After" [ref=e4] [box=5,880,40,10]',
        ]
    )
    _, elements = flatten_snapshot(snapshot)
    boxes = {e.name or e.ref: e.box for e in elements}
    assert boxes["Search"] == (12, 6, 293, 27) and boxes["e3"] == (0, 40, 1280, 860)
    assert boxes["f1e8"] == (100, 340, 400, 200)
    assert boxes["Solaria"] == (200, 235, 50, 17) and boxes["Estravia"] == (200, 259, 58, 17)
    assert boxes["Play"] == (110, 360, 30, 40), "nested frames add up"
    assert boxes["After"] == (5, 880, 40, 10), "leaving the iframe leaves its offset"


def test_redaction() -> None:
    redactor = Redactor()
    headers = redactor.headers([("Authorization", "Bearer sk"), ("Cookie", "a=b"), ("Accept", "*/*")])
    assert [h["value"] for h in headers] == [f"Bearer {REDACTED}", f"a={REDACTED}", "*/*"]
    assert STRICT.url("http://x/?api_key=sk-1&q=tea") == "http://x/?api_key=%5BREDACTED%5D&q=tea"
    assert (
        redactor.body(b"user=a&password=hunter2", "application/x-www-form-urlencoded", response=False)
        == b"user=a&password=%5BREDACTED%5D"
    )
    assert b"hunter2" not in redactor.body(
        b'{"auth": {"token": "hunter2"}, "q": 1}', "application/json", response=False
    )
    assert (
        redactor.body(b'{"auth": {"token": "Zq81fKx02LmA9w"}, "q": 1}', "application/json")
        == b'{"auth": {"token": "[REDACTED]"}, "q": 1}'
    ), "a response's credential, in place"
    redactor.learn_secret("hunter2")
    assert (
        redactor.text("typed hunter2 at http://x/?token=abc")
        == f"typed {REDACTED} at http://x/?token=%5BREDACTED%5D"
    )


def test_budget_reasons() -> None:
    budget = Budget(Limits(max_steps=10))
    for action in ("click [1]", "click [1]", None, "click [1]", "click [1]"):
        budget.record(action)
        assert budget.exceeded is None
    budget.record("click [1]")
    assert budget.exceeded == "repeated_action"
