"""Acting on the tabs: the twelve actions of the grammar, each run on Playwright's async API.

An action that cannot be done raises :class:`ActionFailed` with a one-line reason; it is
recorded on its step and the episode goes on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Locator

from mmina.actions.grammar import Action, ActionKind
from mmina.actions.navigation import BLANK, refusal
from mmina.errors import MminaError
from mmina.recorder.settling import ACTION_DEADLINE_S
from mmina.redaction.redact import is_secret_input

if TYPE_CHECKING:
    from mmina.recorder.tabs import Tabs


class ActionFailed(MminaError):
    """An action could not be executed; recorded on the step, the episode goes on."""


Dispatched = Callable[[float], None]
"""Told, from the browser's event loop, that an action's input was dispatched (the target found,
clicked, every key typed; a click that navigates: until the new document committed), with how long
that took in seconds, before the page settles: a replay lets the page's time run no further than the
recording's input took (``steps.dispatch_ms``, ``mmina.replayer.pace``)."""


async def execute(tabs: Tabs, action: Action, dispatched: Dispatched | None = None) -> None:
    """Run one action on the browser and let the page settle, within ``ACTION_DEADLINE_S``;
    raises :class:`ActionFailed` with a one-line reason (after settling: a navigation the
    action started may still be under way, and the next observation should see its end).
    ``dispatched`` hears when the input is done, failed or not, before settling."""
    deadline = time.monotonic() + ACTION_DEADLINE_S
    started = time.perf_counter()
    try:
        try:
            await _EXECUTORS[action.kind](tabs, action)
        finally:
            if dispatched is not None:
                dispatched(time.perf_counter() - started)
    except PlaywrightError as exc:
        tabs.raise_if_gone(exc)
        await tabs.settle(deadline)
        raise ActionFailed(str(exc).splitlines()[0]) from None
    await tabs.settle(deadline)


@dataclass(frozen=True)
class Target:
    """The element an action names: its locator, the selector behind it, and what a script
    asked of it while finding it (None when none was asked)."""

    locator: Locator
    selector: str
    answer: Any = None


async def locate(tabs: Tabs, element: str | None, script: str | None = None) -> Target:
    """The element an action names, on the active tab, and the value of ``script`` (a function
    of the element, run in the page) on it: finding it and asking it are one call."""
    if element is None:
        raise ActionFailed("the action names no element")
    ref = tabs.ids.ref_for(element)
    target = await _ref_target(tabs, ref, script) if ref else None
    if target is None:
        raise ActionFailed(f"element [{element}] is not on the current page")
    return target


async def _ref_target(tabs: Tabs, ref: str, script: str | None) -> Target | None:
    """The element a snapshot's ref names, also on a page restored from the back-forward cache
    (None when the page has no such element).

    Playwright numbers a main frame anew at each navigation and prefixes the refs of a
    document's snapshots with the number its frame had when the document loaded (``f1e7``);
    it finds a prefixed ref's frame by that number. A restored document still prefixes with
    its old number, which no frame has any more ("Invalid frame in aria-ref selector"); its
    refs are the main frame's, looked up there (after a first part that is not ``aria-ref``,
    Playwright does not jump frames)."""
    try:
        return await _target(tabs, f"aria-ref={ref}", script)
    except PlaywrightError as exc:
        if STALE_FRAME not in str(exc):
            raise
    return await _target(tabs, f"html >> aria-ref={ref}", script)


async def _target(tabs: Tabs, selector: str, script: str | None) -> Target | None:
    """Counting the matches is asked in Playwright's isolated world; a script, in the page's own
    (where the element's properties are what the page sees), finds its element by itself."""
    locator = tabs.page.locator(selector)
    if script is None:
        return Target(locator, selector) if await locator.count() else None
    try:
        return Target(locator, selector, await tabs.page.eval_on_selector(selector, script, strict=True))
    except PlaywrightError as exc:
        if NOT_FOUND not in str(exc):
            raise
        return None


STALE_FRAME = "Invalid frame in aria-ref selector"
NOT_FOUND = "Failed to find element matching selector"


async def _click(tabs: Tabs, action: Action) -> None:
    await (await locate(tabs, action.element_id)).locator.click()


async def _hover(tabs: Tabs, action: Action) -> None:
    await (await locate(tabs, action.element_id)).locator.hover()


# What the target is, read in one call: a <select>, what says whether it takes a secret (see
# :func:`mmina.redaction.redact.is_secret_input`), and whether it holds text one types over (a text field's
# value, an editable element's text; not a checkbox's "on").
_FIELD = """e => ({select: e.tagName === "SELECT",
  secret: [String(e.type || ""), String(e.name || ""), String(e.id || ""), String(e.autocomplete || "")],
  filled: ((e.matches("textarea, input:not([type=checkbox], [type=radio], [type=button], [type=submit], " +
                      "[type=reset], [type=file], [type=image], [type=color], [type=range], [type=hidden])")
            ? e.value : e.isContentEditable ? e.textContent : "") || "").length > 0})"""


async def _type(tabs: Tabs, action: Action) -> None:
    """Type as the official harness does, so the page sees every keystroke (keydown, keypress,
    input, keyup: search-as-you-type, autocomplete and key handlers react as to a person).

    MMInA (shulin16/MMInA@9b0a707, browser_env/actions.py lines 1186-1192, ``execute_action``,
    ``case ActionTypes.TYPE``) and WebArena (web-arena-x/webarena@f62e0b9, the same file, lines
    1163-1168) click the element's centre, then ``page.keyboard.type(text)`` (``execute_type``,
    MMInA line 893), with ``"\\n"`` appended when ``press_enter_after`` is 1 (MMInA line 1565),
    which ``keyboard.type`` presses as Enter. Here the click is ``locator.click()`` (which scrolls
    the element into view first, where the harness clicks the centre it recorded), and Enter is
    pressed after the text (see :func:`_press_enter`). One difference, kept on purpose: the harness types after whatever
    the field holds, while mmina (as with ``fill`` before, and as stored episodes were recorded)
    first empties a field that holds text — by keystrokes too: the text selected, then Backspace.
    A ``<select>`` gets the option with this label (the grammar's way to pick one), and a
    password typed is kept as a secret so it never reaches the store.
    """
    target = await locate(tabs, action.element_id, _FIELD)
    locator, field, text = target.locator, target.answer, action.text or ""
    if field["select"]:
        await locator.select_option(label=text)
        return
    if is_secret_input(*field["secret"]):
        tabs.secrets.append(text)
    await locator.click()
    if field["filled"]:
        await locator.select_text()
        await tabs.page.keyboard.press("Backspace")
    await tabs.page.keyboard.type(text)
    if action.press_enter:
        await _press_enter(tabs, target)


async def _press_enter(tabs: Tabs, target: Target) -> None:
    """Enter, pressed where the focus is, as the harness does. While the focus is still in the
    field typed into (as it is unless the page moved it), ``locator.press`` sends the page the
    same key events and also waits for the navigation it starts (a form submitted), which
    ``keyboard.press`` does not: without it the next observation could race the submission."""
    if await _focused(tabs, target.selector):
        await target.locator.press("Enter")
    else:
        await tabs.page.keyboard.press("Enter")


async def _focused(tabs: Tabs, selector: str) -> bool:
    """Whether the focus is in the element (False once typing took it off the page, or its
    document away: a submission as the text went in)."""
    try:
        return bool(
            await tabs.page.eval_on_selector(
                selector, "e => e.getRootNode().activeElement === e", strict=True
            )
        )
    except PlaywrightError as exc:
        if NOT_FOUND not in str(exc) and STALE_FRAME not in str(exc):
            raise
        return False


async def _press(tabs: Tabs, action: Action) -> None:
    await tabs.page.keyboard.press(action.key or "")


async def _scroll(tabs: Tabs, action: Action) -> None:
    sign = -1 if action.direction == "up" else 1
    await tabs.page.evaluate(f"window.scrollBy(0, {sign} * window.innerHeight)")


async def _tab_focus(tabs: Tabs, action: Action) -> None:
    index = action.tab_index or 0
    if not 0 <= index < len(tabs.pages):
        raise ActionFailed(f"there is no tab {index} (open tabs: {len(tabs.pages)})")
    tabs.active = index
    await tabs.page.bring_to_front()


async def _close_tab(tabs: Tabs, action: Action) -> None:
    if len(tabs.pages) == 1:
        raise ActionFailed("cannot close the last tab")
    await tabs.pages.pop(tabs.active).close()
    tabs.active = len(tabs.pages) - 1
    await tabs.page.bring_to_front()


async def _new_tab(tabs: Tabs, action: Action) -> None:
    await tabs.context.new_page()


# Navigations wait for their commit only; settle then waits for the load. Playwright's own
# wait for "load" never ends for a page the back-forward cache restores (no load event).
# A URL off the web is refused before the browser sees it (a javascript: URL would run).
async def _goto(tabs: Tabs, action: Action) -> None:
    url = action.url or BLANK
    refused = refusal(url, tabs.allowed_schemes)
    if refused:
        raise ActionFailed(refused)
    await tabs.page.goto(url, wait_until="commit")


async def _go_back(tabs: Tabs, action: Action) -> None:
    await tabs.page.go_back(wait_until="commit")


async def _go_forward(tabs: Tabs, action: Action) -> None:
    await tabs.page.go_forward(wait_until="commit")


async def _stop(tabs: Tabs, action: Action) -> None:
    return None


_EXECUTORS: dict[ActionKind, Callable[[Tabs, Action], Awaitable[None]]] = {
    ActionKind.CLICK: _click,
    ActionKind.HOVER: _hover,
    ActionKind.TYPE: _type,
    ActionKind.PRESS: _press,
    ActionKind.SCROLL: _scroll,
    ActionKind.NEW_TAB: _new_tab,
    ActionKind.TAB_FOCUS: _tab_focus,
    ActionKind.CLOSE_TAB: _close_tab,
    ActionKind.GOTO: _goto,
    ActionKind.GO_BACK: _go_back,
    ActionKind.GO_FORWARD: _go_forward,
    ActionKind.STOP: _stop,
}
