"""The prompt of the ``openai`` agent: the shape of the MMInA paper's (WebArena's CoT) prompt.

One system message (what the agent is, what it sees, the 12 actions, the rules, the reference
websites and, with ``--memory``, earlier trajectories), two few-shot exchanges, then one user
message per step with the objective, URL, tabs, observation and previous actions.

Everything here is pure text building, so a prompt can be checked without a model or browser.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from mmina.actions.grammar import SUMMARY_MARKER
from mmina.observations.observation import Observation
from mmina.tasks.task import Task

INPUT_MODES = ("text", "caption", "multimodal")
FIXTURE_HOST_SUFFIX = ".mmina.test"
FIXTURE_WEBSITES: tuple[tuple[str, str], ...] = (
    ("http://carrental.mmina.test/", "RoadReady Car Hire"),
    ("http://events.mmina.test/", "Gulf Events"),
    ("http://exchange.mmina.test/", "Amaranth Exchange"),
    ("http://flights.mmina.test/", "SkyHop Flights"),
    ("http://food.mmina.test/", "Tablefinder"),
    ("http://guide.mmina.test/", "Wayfarer Travel Guide"),
    ("http://hotels.mmina.test/", "Staywell Hotels"),
    ("http://recipes.mmina.test/", "Gulf Kitchen"),
    ("http://shop.mmina.test/", "One Stop Market"),
    ("http://social.mmina.test/", "Gulfchat"),
    ("http://trains.mmina.test/", "Gulf Rail"),
    ("http://video.mmina.test/", "StreamTide"),
    ("http://wiki.mmina.test/kiwix/", "MMInA Wiki"),
    (
        "http://kiwix.mmina.test/viewer#mmina_wiki_en_all_2026-01/A/Main_Page",
        "MMInA Wiki in the Kiwix viewer",
    ),
)
"""The local fixture web's sites, shown to the agent on tasks that start there (a plain list: the
agent does not import the fixture web; a test checks that the list matches what it serves)."""

INTRO = """You are an autonomous intelligent agent tasked with navigating a web browser. You will be given \
web-based tasks that may span several websites (multihop tasks). These tasks will be accomplished through \
the use of specific actions you can issue."""

SEES = {
    "text": "",
    "caption": "The images visible on the page: one line each with the image's alt text, position and a caption.\n",
    "multimodal": "A screenshot of the page, with each element's id painted on it (the same ids as in the "
    "accessibility tree).\n",
}

OBSERVATION_HELP = """Here's the information you'll have:
The user's objective: This is the task you're trying to complete.
The current web page's URL: This is the page you're currently navigating.
The open tabs: These are the tabs you have open, by index.
The current web page's accessibility tree: A simplified representation of the page. Each element you can \
act on starts with its id in square brackets, e.g. [4821] link "Home"; actions name elements by that id.
{sees}The previous actions: These are the last actions you have performed.
"""

ACTIONS = """The actions you can perform fall into several categories:

Page operation actions:
`click [id]`: Click the element with this id.
`type [id] [content] [press_enter_after=0|1]`: Type the content into the field with this id. Enter is \
pressed after typing unless press_enter_after is set to 0.
`hover [id]`: Hover over the element with this id.
`press [key_comb]`: Press a key combination, e.g. Control+v or Enter.
`scroll [direction=down|up]`: Scroll the page up or down.

Tab management actions:
`new_tab`: Open a new, empty browser tab.
`tab_focus [tab_index]`: Switch to the tab with this index.
`close_tab`: Close the active tab.

URL navigation actions:
`goto [url]`: Go to this URL.
`go_back`: Go back to the previous page.
`go_forward`: Go forward (after a go_back).

Completion action:
`stop [answer]`: Issue this when you believe the task is complete. If the objective asks for a text \
answer, put it in the brackets; otherwise leave them empty.
"""

RULES = f"""To be successful, it is very important to follow these rules:
1. Only issue an action that is valid given the current observation.
2. Issue only one action at a time.
3. Reason step by step about what you see and what is left to do, then issue the next action.
4. End your reply with "{SUMMARY_MARKER}" followed by the action inside triple backticks, e.g. \
"{SUMMARY_MARKER} ```click [1234]```".
5. Issue the stop action when you think you have achieved the objective. Don't generate anything after stop.
6. A multihop task goes through several websites in order: finish what the objective needs on one \
website, then go on to the next one, and stop with the final answer after the last.
"""

EXAMPLES: tuple[tuple[str, str], ...] = (
    (
        """OBJECTIVE: What is the price of the cheapest HDMI cable in the shop?
URL: http://shop.example.com/search?q=hdmi
OPEN TABS:
[0] Search results for "hdmi" (active)
OBSERVATION:
[5120] main
\t[8841] heading "Search results for “hdmi”" [level=1]
\t[2093] link "HDMI Cable, 2 m"
\t[6617] paragraph: $7.99
\t[3305] link "HDMI Cable, 5 m"
\t[9472] paragraph: $12.49
PREVIOUS ACTIONS:
1. type [7168] [hdmi] [press_enter_after=1]""",
        f"""Let's think step by step. The search results list two HDMI cables, at $7.99 and $12.49, so the \
cheapest costs $7.99. I have found the answer and will stop with it. {SUMMARY_MARKER} ```stop [$7.99]```""",
    ),
    (
        """OBJECTIVE: Find the capital of Norland on the wiki, then tell me the earliest flight from there to Ostrand.
URL: http://wiki.example.com/A/Norland
OPEN TABS:
[0] Norland (active)
OBSERVATION:
[5120] main
\t[1946] heading "Norland" [level=1]
\t[7702] rowheader "Capital"
\t[4358] link "Brask"
\t[2881] paragraph: Norland is a country of fjords north of the gulf.
PREVIOUS ACTIONS:
1. click [6093]""",
        f"""Let's think step by step. The article says the capital of Norland is Brask, which finishes the \
wiki part of the objective. The flights are on another website, so I will go to the flight site next. \
{SUMMARY_MARKER} ```goto [http://flights.example.com/]```""",
    ),
)


def system_prompt(task: Task, input_mode: str, memory: str = "") -> str:
    """Instructions, observation format, actions, rules, reference websites and optional memory."""
    parts = [
        INTRO,
        OBSERVATION_HELP.format(sees=SEES[input_mode]),
        ACTIONS,
        RULES,
        "Reference websites:\n" + reference_websites(task),
    ]
    if memory:
        parts.append(memory)
    return "\n\n".join(part.strip() for part in parts)


def reference_websites(task: Task) -> str:
    """Where the task starts, the sites its hops need (MMInA's ``procedure``) and, on the fixture web, every site."""
    lines = [f"The task starts at {' and '.join(task.start_urls)}."]
    if task.hops:
        lines.append("Sites you will need, in this order: " + ", ".join(h.keyword for h in task.hops) + ".")
    if any((urlsplit(u).hostname or "").endswith(FIXTURE_HOST_SUFFIX) for u in task.start_urls):
        lines.append("The websites you can use:")
        lines += [f"- {url} ({brand})" for url, brand in FIXTURE_WEBSITES]
    return "\n".join(lines)


def user_text(
    observation: Observation, history: Sequence[str], max_chars: int, captions: Sequence[str] = ()
) -> str:
    """The per-step message: objective, URL, tabs, observation (truncated), images, previous actions."""
    tabs = "\n".join(
        f"[{i}] {t.title or t.url}{' (active)' if i == observation.active_tab else ''}"
        for i, t in enumerate(observation.tabs)
    )
    sections = [
        f"OBJECTIVE: {observation.intent}",
        f"URL: {observation.url}",
        f"OPEN TABS:\n{tabs or '(none)'}",
        f"OBSERVATION:\n{truncate(observation.tree_text, max_chars)}",
    ]
    if captions:
        sections.append("IMAGES:\n" + "\n".join(captions))
    previous = "\n".join(f"{i}. {a}" for i, a in enumerate(history, start=1)) or "None"
    sections.append(f"PREVIOUS ACTIONS:\n{previous}")
    return "\n".join(sections)


def truncate(text: str, max_chars: int) -> str:
    """The start of the tree up to ``max_chars``, cut at a line end, with a note of what was left out.

    The top of a page carries its navigation and search, which every hop needs; the cut is a pure
    function of the text, so the same page always gives the same prompt.
    """
    if len(text) <= max_chars:
        return text
    cut = text.rfind("\n", 0, max_chars + 1)
    kept = text[: cut if cut > 0 else max_chars]
    return f"{kept}\n[... {len(text) - len(kept)} more characters of the page not shown]"


def caption_line(alt: str, x: float, y: float, caption: str) -> str:
    """How one in-view image is shown in caption mode."""
    return f"image [{alt}] at ({round(x)},{round(y)}): {caption}"
