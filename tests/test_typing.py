"""``type`` as keystrokes, as the official harness types: a page that listens to ``keyup`` (an
autocomplete) reacts, which Playwright's ``fill`` does not make it do (checked on the same page)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import sync_playwright

from mmina.actions.grammar import parse_action
from mmina.observations.observation import Observation
from mmina.recorder.browser import BrowserConfig, BrowserSession, EpisodeBrowser, find_chromium
from tests.harbour_site import HarbourSite


@pytest.fixture(scope="module")
def site() -> Iterator[HarbourSite]:
    with HarbourSite() as running:
        yield running


@pytest.fixture
def browser(site: HarbourSite) -> Iterator[EpisodeBrowser]:
    session = BrowserSession(BrowserConfig())
    try:
        episode = session.episode(None)
        episode.open((site.url("/search"),))
        yield episode
        episode.close()
    finally:
        session.close()


def _act(browser: EpisodeBrowser, observation: Observation, action: str, role: str, name: str) -> Observation:
    element = observation.find(role, name)
    assert element is not None, observation.tree_text
    browser.execute(parse_action(action.format(id=element.id)))
    return browser.observe(observation.step_index + 1, "")[0]


def test_fill_does_not_trigger_the_keyup_autocomplete(site: HarbourSite) -> None:
    """The fixture is what it claims: filling the box leaves the suggestions empty."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=find_chromium(None, playwright))
        page = chromium.new_page()
        page.goto(site.url("/search"))
        page.get_by_role("textbox", name="Find a tea").fill("oo")
        page.wait_for_timeout(500)
        assert (
            page.locator("#suggestions li").count() == 0
            and page.locator("#keys").text_content() == "no keys yet"
        )
        chromium.close()


def test_typing_sends_every_keystroke(browser: EpisodeBrowser) -> None:
    first = browser.observe(0, "")[0]
    typed = _act(browser, first, "type [{id}] [oo] [press_enter_after=0]", "textbox", "Find a tea")
    lines = typed.tree_text
    assert "listitem: Oolong Breeze" in lines and "listitem: Oolong Reserve" in lines, lines
    assert "paragraph: keyups: 2" in lines, lines
    entered = _act(browser, typed, "type [{id}] [assam] [press_enter_after=1]", "textbox", "Find a tea")
    assert "searched for assam" in entered.tree_text, "the box was emptied first, and Enter pressed as a key"
    # 2 keys before, then Backspace (emptying "oo"), 5 letters and Enter: all keystrokes the page saw
    assert "listitem: Assam Gold" in entered.tree_text and "keyups: 9" in entered.tree_text, entered.tree_text


def test_typing_replaces_text_keeps_secrets_and_selects_options(browser: EpisodeBrowser) -> None:
    first = browser.observe(0, "")[0]
    assert 'textbox "Note": old text' in first.tree_text
    noted = _act(browser, first, "type [{id}] [new words] [press_enter_after=0]", "textbox", "Note")
    assert 'textbox "Note" [active]: new words' in noted.tree_text, noted.tree_text
    secret = _act(browser, noted, "type [{id}] [hunter2] [press_enter_after=0]", "textbox", "Password")
    assert browser.secrets == ["hunter2"]
    sized = _act(browser, secret, "type [{id}] [Large] [press_enter_after=0]", "combobox", "Size")
    assert 'option "Large" [selected]' in sized.tree_text, sized.tree_text


def test_enter_submits_and_the_next_observation_is_the_result(browser: EpisodeBrowser) -> None:
    """Enter submits the form (its answer comes slowly) and the next observation is of the answer.
    (The race this guards against — a submission whose request starts after settling looked —
    showed only on a machine under heavy load, in the built-in suite; it is not forced here.)"""
    first = browser.observe(0, "")[0]
    found = _act(browser, first, "type [{id}] [oolong] [press_enter_after=1]", "textbox", "Order a tea")
    assert found.url.endswith("/found?tea=oolong") and "Found: oolong" in found.tree_text, found.tree_text
