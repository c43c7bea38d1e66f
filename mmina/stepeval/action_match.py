"""Scoring one predicted action against the recorded one (pure: no store, no model).

An action is reduced to three facts, as Multimodal-Mind2Web scores steps:

* **operation** — one of :data:`OPS`. ``hover`` and ``press`` count as ``click`` (Mind2Web
  maps HOVER and ENTER to CLICK); ``type`` into a ``combobox`` or ``listbox`` is ``select``
  (that is how the grammar selects an option); ``goto``, ``go_back``, ``go_forward`` and the
  tab actions are ``navigation``.
* **target** — the element id of ``click``, ``hover`` and ``type``; None otherwise.
* **value** — typed or selected text, the ``stop`` answer, the ``goto`` URL, the scroll
  direction, the pressed key, the tab index, or the kind name of argument-less navigation.

The whole action is right when the operation is, and the target and value are wherever the
recorded action has them. ``press_enter_after`` is not scored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mmina.actions.grammar import Action, ActionKind
from mmina.observations.observation import Element
from mmina.tasks.answers import normalize

OPS = ("click", "type", "select", "scroll", "navigation", "stop")
UNPARSABLE = "unparsable"
SELECT_ROLES = frozenset({"combobox", "listbox"})
TEXT_VALUE_OPS = frozenset({"type", "select", "stop"})

_OP_OF_KIND = {
    ActionKind.CLICK: "click",
    ActionKind.HOVER: "click",
    ActionKind.PRESS: "click",
    ActionKind.TYPE: "type",
    ActionKind.SCROLL: "scroll",
    ActionKind.STOP: "stop",
    **{
        k: "navigation"
        for k in (
            ActionKind.GOTO,
            ActionKind.GO_BACK,
            ActionKind.GO_FORWARD,
            ActionKind.NEW_TAB,
            ActionKind.TAB_FOCUS,
            ActionKind.CLOSE_TAB,
        )
    },
}


@dataclass(frozen=True)
class ActionFacts:
    """What is scored of one action."""

    op: str
    target: str | None
    value: str | None
    action: str


@dataclass(frozen=True)
class StepScore:
    """The verdicts of one step; ``target_ok``/``value_ok`` are None where the reference has none."""

    op_ok: bool
    target_ok: bool | None
    value_ok: bool | None
    value_method: str | None

    @property
    def action_ok(self) -> bool:
        return self.op_ok and self.target_ok is not False and self.value_ok is not False


def facts(action: Action, roles: dict[str, str]) -> ActionFacts:
    """Operation, target and value of ``action``; ``roles`` maps element ids to ARIA roles."""
    op = _OP_OF_KIND[action.kind]
    if action.kind is ActionKind.TYPE and roles.get(action.element_id or "") in SELECT_ROLES:
        op = "select"
    return ActionFacts(op, action.element_id, _value(action), action.render())


def _value(action: Action) -> str | None:
    kind = action.kind
    if kind in (ActionKind.TYPE, ActionKind.STOP):
        return action.text or ""
    if kind is ActionKind.GOTO:
        return (action.url or "").rstrip("/")
    if kind is ActionKind.TAB_FOCUS:
        return str(action.tab_index)
    if kind in (ActionKind.GO_BACK, ActionKind.GO_FORWARD, ActionKind.NEW_TAB, ActionKind.CLOSE_TAB):
        return kind.value
    return action.direction or action.key


def values_equal(reference: str, predicted: str) -> bool:
    """Exact match after lowercasing, stripping quotes and collapsing white space."""
    return " ".join(normalize(reference).split()) == " ".join(normalize(predicted).split())


Judge = Callable[[str, str], bool | None]
"""``(predicted, reference)`` → the fuzzy judge's verdict (None: no verdict available)."""


def score(reference: ActionFacts, predicted: ActionFacts | None, judge: Judge | None = None) -> StepScore:
    """Compare a prediction (None when it did not parse) with the recorded action."""
    if predicted is None:
        return StepScore(
            False,
            None if reference.target is None else False,
            None if reference.value is None else False,
            None,
        )
    op_ok = predicted.op == reference.op
    target_ok = None if reference.target is None else predicted.target == reference.target
    if reference.value is None:
        return StepScore(op_ok, target_ok, None, None)
    if not op_ok or predicted.value is None:
        return StepScore(op_ok, target_ok, False, "exact")
    if values_equal(reference.value, predicted.value):
        return StepScore(op_ok, target_ok, True, "exact")
    if judge is not None and reference.op in TEXT_VALUE_OPS:
        verdict = judge(predicted.value, reference.value)
        return StepScore(op_ok, target_ok, bool(verdict), "fuzzy")
    return StepScore(op_ok, target_ok, False, "exact")


def judge_pairs(pairs: Sequence[tuple[ActionFacts, ActionFacts | None]]) -> list[tuple[str, str]]:
    """The (predicted, reference) values the fuzzy judge must see: text values that differ exactly."""
    return [
        (p.value, r.value)
        for r, p in pairs
        if p is not None
        and p.op == r.op
        and r.op in TEXT_VALUE_OPS
        and r.value is not None
        and p.value is not None
        and not values_equal(r.value, p.value)
    ]


def element_label(element_id: str | None, elements: dict[str, Element]) -> str | None:
    """How a target is shown in reports: ``[12] link "Solaria"`` (the bare id when not on the page)."""
    if element_id is None:
        return None
    element = elements.get(element_id)
    return (
        f'[{element_id}] {element.role} "{element.name}"' if element else f"[{element_id}] (not on the page)"
    )
