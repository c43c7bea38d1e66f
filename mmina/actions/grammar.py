"""The agent's action grammar (DESIGN.md "Actions"): parsing, canonical rendering.

Pure and browser-free so that model output can be parsed, stored and re-scored anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from mmina.errors import ActionParseError

SUMMARY_MARKER = "In summary, the next action I will perform is"


class ActionKind(str, Enum):
    CLICK = "click"
    TYPE = "type"
    HOVER = "hover"
    PRESS = "press"
    SCROLL = "scroll"
    NEW_TAB = "new_tab"
    TAB_FOCUS = "tab_focus"
    CLOSE_TAB = "close_tab"
    GOTO = "goto"
    GO_BACK = "go_back"
    GO_FORWARD = "go_forward"
    STOP = "stop"


@dataclass(frozen=True)
class Action:
    """One parsed action; only the fields its kind uses are set."""

    kind: ActionKind
    element_id: str | None = None
    text: str | None = None
    press_enter: bool = False
    key: str | None = None
    direction: str | None = None
    url: str | None = None
    tab_index: int | None = None

    @property
    def answer(self) -> str | None:
        """The final answer of a ``stop`` action (None for other kinds)."""
        return self.text if self.kind is ActionKind.STOP else None

    def render(self) -> str:
        """The canonical text of the action, parseable by :func:`parse_action`."""
        return _RENDERERS[self.kind](self)


_ID = r"\[\s*([A-Za-z0-9_-]+)\s*\]"
_NO_ARG = {ActionKind.NEW_TAB, ActionKind.CLOSE_TAB, ActionKind.GO_BACK, ActionKind.GO_FORWARD}
_ID_ONLY = {ActionKind.CLICK, ActionKind.HOVER}

_RENDERERS = {
    ActionKind.CLICK: lambda a: f"click [{a.element_id}]",
    ActionKind.HOVER: lambda a: f"hover [{a.element_id}]",
    ActionKind.TYPE: lambda a: f"type [{a.element_id}] [{a.text}] [press_enter_after={int(a.press_enter)}]",
    ActionKind.PRESS: lambda a: f"press [{a.key}]",
    ActionKind.SCROLL: lambda a: f"scroll [{a.direction}]",
    ActionKind.TAB_FOCUS: lambda a: f"tab_focus [{a.tab_index}]",
    ActionKind.GOTO: lambda a: f"goto [{a.url}]",
    ActionKind.STOP: lambda a: f"stop [{a.text}]",
    **{kind: (lambda a: a.kind.value) for kind in _NO_ARG},
}


def parse_action(text: str) -> Action:
    """Parse one action string such as ``type [12] [hello] [press_enter_after=1]``."""
    text = text.strip()
    head, _, rest = text.partition(" ")
    try:
        kind = ActionKind(head.strip().lower())
    except ValueError:
        raise ActionParseError(f"unknown action {head!r} in {text!r}") from None
    rest = rest.strip()
    if kind in _NO_ARG:
        return Action(kind)
    if kind in _ID_ONLY:
        return Action(kind, element_id=_match(_ID + r"$", rest, text).group(1))
    return _PARSERS[kind](rest, text)


def _match(pattern: str, rest: str, text: str) -> re.Match[str]:
    found = re.match(pattern, rest, flags=re.DOTALL)
    if found is None:
        raise ActionParseError(f"malformed action {text!r}")
    return found


def _bracketed(rest: str, text: str) -> str:
    """The content of one ``[...]`` argument; greedy so answers may contain brackets."""
    return _match(r"\[(.*)\]$", rest, text).group(1).strip()


def _parse_type(rest: str, text: str) -> Action:
    found = re.match(_ID + r"\s*\[(.*)\]\s*\[\s*(?:press_enter_after\s*=\s*)?([01])\s*\]$", rest, re.DOTALL)
    if found is not None:
        return Action(
            ActionKind.TYPE, element_id=found.group(1), text=found.group(2), press_enter=found.group(3) == "1"
        )
    found = _match(_ID + r"\s*\[(.*)\]$", rest, text)
    return Action(ActionKind.TYPE, element_id=found.group(1), text=found.group(2), press_enter=True)


def _parse_scroll(rest: str, text: str) -> Action:
    direction = _bracketed(rest, text).lower().removeprefix("direction=").strip()
    if direction not in ("up", "down"):
        raise ActionParseError(f"scroll direction must be up or down in {text!r}")
    return Action(ActionKind.SCROLL, direction=direction)


def _parse_tab_focus(rest: str, text: str) -> Action:
    index = _bracketed(rest, text)
    if not index.isdigit():
        raise ActionParseError(f"tab_focus needs a tab number in {text!r}")
    return Action(ActionKind.TAB_FOCUS, tab_index=int(index))


def _parse_press(rest: str, text: str) -> Action:
    key = _bracketed(rest, text)
    if not key:
        raise ActionParseError(f"press needs a key combination in {text!r}")
    return Action(ActionKind.PRESS, key=key)


def _parse_goto(rest: str, text: str) -> Action:
    url = _bracketed(rest, text)
    if not url:
        raise ActionParseError(f"goto needs a URL in {text!r}")
    return Action(ActionKind.GOTO, url=url)


def _parse_stop(rest: str, text: str) -> Action:
    return Action(ActionKind.STOP, text=_bracketed(rest, text) if rest else "")


_PARSERS = {
    ActionKind.TYPE: _parse_type,
    ActionKind.SCROLL: _parse_scroll,
    ActionKind.TAB_FOCUS: _parse_tab_focus,
    ActionKind.PRESS: _parse_press,
    ActionKind.GOTO: _parse_goto,
    ActionKind.STOP: _parse_stop,
}


def extract_action_text(output: str) -> str:
    """The action inside triple backticks after the summary marker of an LLM reply.

    Without the marker, the last fenced block counts (models often drop the phrase).
    """
    _, marker, after = output.rpartition(SUMMARY_MARKER)
    blocks = re.findall(r"```(?:[a-zA-Z]*\n)?(.*?)```", after if marker else output, re.DOTALL)
    if not blocks:
        raise ActionParseError("no action in triple backticks found in the model output")
    return (blocks[0] if marker else blocks[-1]).strip()


def parse_model_output(output: str) -> Action:
    """Parse an LLM reply into an action (marker, fenced block, grammar)."""
    return parse_action(extract_action_text(output))


def parse_agent_output(output: str) -> Action:
    """Model replies (marker and fenced block) and plain action text both parse."""
    if SUMMARY_MARKER in output or "```" in output:
        return parse_model_output(output)
    return parse_action(output)
