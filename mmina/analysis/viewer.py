"""The trajectory viewer: one episode step by step, as data for the HTML page.

Per step: the set-of-marks screenshot (stored, or painted again from the screenshot and the
step's marks; the target's id is painted on it) with the target element's box drawn on it,
the action with its target element's line from the accessibility tree, the model input (the
messages sent, each shown once: a step lists only the messages that differ from the step
before), the model's raw output, the action error, the hop progress, and the episode's
verdicts; after the last step, the terminal observation (the page after the last action) when
the store has it. Screenshots are shrunk to ``SHOT_WIDTH`` pixels; where they go is the
caller's choice: inlined (``mmina view``: the page stands alone), files next to the report, or
URLs of ``mmina serve``.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from PIL import Image

from mmina.analysis.data import AnalysisError, query
from mmina.errors import SEE_EPISODES, not_found
from mmina.models.model_input import message_digests
from mmina.store import Store
from mmina.store.marks import draw_on, marked_screenshot
from mmina.store.views import StoreConnection, connect

SHOT_WIDTH = 640
"""Pixels: half a 1280-pixel viewport, which a JPEG decodes to directly (quick)."""
QUALITY = 70
TREE_CHARS = 6000
MESSAGE_CHARS = 8000
TARGETED = ("click", "hover", "type")

EPISODES_SQL = """
SELECT e.run_id, e.episode_id, e.task_id, e.status, e.stop_reason, e.final_answer, e.n_steps, e.n_hops,
       e.live_hops, e.error, e.blob_packs, t.intent, t.procedure, e.final_url, e.final_title, e.final_tree_text,
       e.final_screenshot
FROM episodes e LEFT JOIN tasks t ON t.run_id = e.run_id AND t.task_id = e.task_id
WHERE list_contains($episodes, e.episode_id)
"""
STEPS_SQL = """
SELECT episode_id, step_index, url, action, action_kind, action_error, model_output, live_hops, live_hop_completed,
       tree_text, screenshot_som, screenshot, marks, screenshot_width, screenshot_height, target_box,
       model_input
FROM steps WHERE list_contains($episodes, episode_id) ORDER BY episode_id, step_index
"""
VIEWS = ("episodes", "tasks", "steps", "scores", "latest_scores")
"""The views the queries below read (only these are made: a quicker connection)."""
VERDICTS_SQL = """
SELECT episode_id, evaluator, level, hop, verdict FROM latest_scores
WHERE list_contains($episodes, episode_id) ORDER BY episode_id, evaluator, level DESC, hop
"""


def target_line(tree_text: str | None, action: str | None, kind: str | None) -> str | None:
    """The accessibility-tree line of the element the action targets (``[12] link "X"``)."""
    if not tree_text or not action or kind not in TARGETED:
        return None
    element = re.match(r"\w+ \[([^\]]+)\]", action)
    if element is None:
        return None
    found = re.search(rf"^\s*\[{re.escape(element.group(1))}\] .*$", tree_text, re.M)
    return found.group(0).strip() if found else None


def shrink(
    image: bytes, width: int = SHOT_WIDTH, quality: int = QUALITY, marks: Sequence[Mapping[str, Any]] = ()
) -> bytes:
    """A screenshot as a JPEG at most ``width`` pixels wide, with ``marks`` (``steps.marks``,
    measured on the full-size screenshot) painted on it. A JPEG decodes at a reduced scale where
    it can (half a 1280-pixel viewport is :data:`SHOT_WIDTH`: no resizing), and one already small
    enough with nothing to paint is kept as it is."""
    opened = Image.open(io.BytesIO(image))  # in memory: nothing to close
    if opened.format == "JPEG" and opened.width <= width and not marks:
        return image
    full = opened.width
    if opened.width > width:
        opened.draft("RGB", (width, round(opened.height * width / opened.width)))
    picture = opened if opened.mode == "RGB" else opened.convert("RGB")  # no copy of an RGB image
    if picture.width > width:
        size = (width, round(picture.height * width / picture.width))
        picture = picture.resize(size, Image.Resampling.BILINEAR)
    if marks:
        boxes = [(m["id"], (m["x"], m["y"], m["width"], m["height"])) for m in marks]
        draw_on(picture, boxes, picture.width / full)
    out = io.BytesIO()
    picture.save(out, "JPEG", quality=quality)
    return out.getvalue()


def box_share(box: dict[str, float] | None, width: int | None, height: int | None) -> dict[str, float] | None:
    """The target box as shares of the screenshot (left, top, width, height in 0..1), to draw at any size."""
    if not box or not width or not height:
        return None
    return {
        "left": box["x"] / width,
        "top": box["y"] / height,
        "width": box["width"] / width,
        "height": box["height"] / height,
    }


def message_text(message: dict[str, Any]) -> str:
    """One stored message as text: its role, then its text parts; images by the start of their hash."""
    content = message.get("content")
    parts = (
        [content]
        if isinstance(content, str)
        else [
            part.get("text", "")
            if part.get("type") == "text"
            else f"[image {part.get('image_url', {}).get('blob', '')[:12]}]"
            for part in content or []
        ]
    )
    text = "\n".join(parts)
    return f"--- {message.get('role', '?')}\n{text[:MESSAGE_CHARS]}"


def model_inputs(steps: list[dict[str, Any]], blobs: dict[str, bytes]) -> list[str | None]:
    """Each step's model input as text, the messages equal to the step before's left out."""
    shown: list[str | None] = []
    previous: list[str] = []
    for row in steps:
        document = json.loads(blobs[row["model_input"]]) if row["model_input"] in blobs else None
        if document is None:
            shown.append(None)
            continue
        digests = document["messages"]
        new = [d for d in digests if d not in previous]
        same = len(digests) - len(new)
        head = f"model {document['model']}, {json.dumps(document['parameters'], sort_keys=True)}"
        note = [f"({same} message(s) as in the step before)"] if same else []
        shown.append(
            "\n".join([head, *note, *(message_text(json.loads(blobs[d])) for d in new if d in blobs)])
        )
        previous = digests
    return shown


def step_data(row: dict[str, Any], model_input: str | None, shot: str | None) -> dict[str, Any]:
    """One step as the viewer shows it; ``shot`` is where its image is (a data URI, a file, a URL)."""
    tree = row["tree_text"] or ""
    return {
        "index": row["step_index"],
        "url": row["url"] or "",
        "action": row["action"],
        "error": row["action_error"],
        "output": row["model_output"] or "",
        "live_hops": row["live_hops"],
        "live_hop_completed": bool(row["live_hop_completed"]),
        "target": target_line(tree, row["action"], row["action_kind"]),
        "box": box_share(row["target_box"], row["screenshot_width"], row["screenshot_height"]),
        "input": model_input,
        "tree": tree[:TREE_CHARS],
        "shot": shot,
    }


def step_image(row: dict[str, Any], blobs: dict[str, bytes]) -> bytes | None:
    """The step's set-of-marks image (stored, else painted again from its marks), else its screenshot."""
    screenshot = blobs.get(row["screenshot"] or "")
    return marked_screenshot(blobs.get(row["screenshot_som"] or ""), screenshot, row["marks"]) or screenshot


def small_step_image(row: dict[str, Any], blobs: dict[str, bytes], width: int = SHOT_WIDTH) -> bytes | None:
    """:func:`step_image` at most ``width`` pixels wide: the marks painted on the shrunk
    screenshot (one decoding at a reduced scale, one encoding), not on the full-size one."""
    stored, screenshot = blobs.get(row["screenshot_som"] or ""), blobs.get(row["screenshot"] or "")
    if stored is not None or screenshot is None:
        return shrink(stored, width) if stored is not None else None
    return shrink(screenshot, width, marks=row["marks"] or ())


HIDDEN = ("blob_packs", "final_tree_text", "final_screenshot")
"""Episode columns the page does not carry as such (the terminal observation is its last entry)."""
TERMINAL = "(the page after the last action: the terminal observation)"


def terminal_step(
    episode: dict[str, Any], last: dict[str, Any] | None, shot: str | None
) -> dict[str, Any] | None:
    """The terminal observation as a last entry after the steps, when the store has it (the page
    a budget's last action reached is seen nowhere else); ``shot`` is where its image is."""
    if episode["final_url"] is None:
        return None
    return {
        "index": (last["index"] + 1) if last else 0,
        "url": episode["final_url"],
        "action": TERMINAL,
        "error": None,
        "output": "",
        "live_hops": last["live_hops"] if last else 0,
        "live_hop_completed": False,
        "target": None,
        "box": None,
        "input": None,
        "tree": (episode["final_tree_text"] or "")[:TREE_CHARS],
        "shot": shot,
    }


UNREADABLE_IMAGE = (OSError, ValueError, Image.DecompressionBombError)
"""What PIL raises for bytes that are no image it can read (its UnidentifiedImageError is an OSError)."""


def data_uri(image: bytes) -> str:
    """A step's image inline, shrunk: the default of :func:`trajectories` (``mmina view``); ""
    (shown as no screenshot) for a blob that is no image, as a damaged store may hold."""
    try:
        return "data:image/jpeg;base64," + base64.b64encode(shrink(image)).decode()
    except UNREADABLE_IMAGE:
        return ""


def episode_rows(
    db: StoreConnection, episode_ids: Sequence[str]
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The episodes (by id), their steps in order and their current verdicts."""
    params = {"episodes": list(episode_ids)}
    episodes = {e["episode_id"]: e for e in query(db, EPISODES_SQL, params)}
    return episodes, query(db, STEPS_SQL, params), query(db, VERDICTS_SQL, params)


def input_texts(store: Store, steps: list[dict[str, Any]], packs: Sequence[str] | None) -> list[str | None]:
    """Each step's model input as text (:func:`model_inputs`), its blobs read from ``packs``."""
    blobs = store.read_blobs([s["model_input"] for s in steps if s["model_input"]], packs)
    messages = {
        d for s in steps if s["model_input"] in blobs for d in message_digests(blobs[s["model_input"]])
    }
    blobs |= store.read_blobs(sorted(messages), packs) if messages else {}
    return model_inputs(steps, blobs)


def episode_data(
    episode: dict[str, Any],
    steps: list[dict[str, Any]],
    verdicts: list[dict[str, Any]],
    inputs: list[str | None],
    shots: list[str | None],
    final_shot: str | None = None,
) -> dict[str, Any]:
    """One episode as the viewer shows it: its row, its steps (the terminal observation last,
    its image at ``final_shot``) and its verdicts."""
    shown = [step_data(s, text, shot) for s, text, shot in zip(steps, inputs, shots)]
    final = terminal_step(episode, shown[-1] if shown else None, final_shot)
    return {
        **{k: v for k, v in episode.items() if k not in HIDDEN},
        "procedure": list(episode["procedure"] or ()),
        "steps": shown + ([final] if final else []),
        "verdicts": [{k: v for k, v in r.items() if k != "episode_id"} for r in verdicts],
    }


Mapper = Callable[[Callable[[dict[str, Any]], str | None], list[dict[str, Any]]], Iterable[str | None]]


def trajectories(
    store: Store, episode_ids: Sequence[str], place: Callable[[bytes], str] = data_uri, mapper: Mapper = map
) -> list[dict[str, Any]]:
    """Viewer data of the episodes, in the order given. ``place`` puts a step's image where
    the page finds it (inline by default) and returns its reference; ``mapper`` (e.g. a thread
    pool's ``map``) runs that over an episode's steps, as painting and shrinking take a while."""
    if not episode_ids:
        return []
    db = connect(store, only=VIEWS)
    try:
        episodes, steps, verdicts = episode_rows(db, episode_ids)
    finally:
        db.close()
    missing = [e for e in episode_ids if e not in episodes]
    if missing:
        known = store.read("episodes", columns=["episode_id"]).column("episode_id").to_pylist()
        why = store.why_no_episode(missing[0])
        raise AnalysisError(not_found("episode", missing[0], str(store.root), known, SEE_EPISODES) + why)
    by_episode: dict[str, list[dict[str, Any]]] = {e: [] for e in episode_ids}
    for row in steps:
        by_episode[row["episode_id"]].append(row)
    return [
        _trajectory(
            store, episodes[e], by_episode[e], [v for v in verdicts if v["episode_id"] == e], place, mapper
        )
        for e in episode_ids
    ]


def _trajectory(
    store: Store,
    episode: dict[str, Any],
    steps: list[dict[str, Any]],
    verdicts: list[dict[str, Any]],
    place: Callable[[bytes], str],
    mapper: Mapper,
) -> dict[str, Any]:
    packs, final = episode["blob_packs"], episode["final_screenshot"]
    wanted = [s[c] for s in steps for c in ("screenshot_som", "screenshot") if s[c]] + (
        [final] if final else []
    )
    images = store.read_blobs(wanted, packs)

    def shot(row: dict[str, Any]) -> str | None:
        try:
            image = small_step_image(row, images)
        except UNREADABLE_IMAGE:  # a damaged blob: shown as no screenshot
            return None
        return place(image) if image else None

    final_shot = place(images[final]) if final in images else None
    return episode_data(
        episode, steps, verdicts, input_texts(store, steps, packs), list(mapper(shot, steps)), final_shot
    )
