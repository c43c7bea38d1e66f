"""Failure modes of an episode, read off its trajectory (definitions in docs/analysis.md).

Only failed episodes (task verdict not ``pass``) get modes; an episode may have several.
The *anchor* is the step whose URL completed the last hop before the first failed one (the
evaluator's ``completed_step``, else the live-tracked ``hop_steps``); with no hop completed
it is step 0. The anchor's *site* is the host of that step's URL.
"""

from __future__ import annotations

import re

from mmina.analysis.data import Episode, StepRow

MODES = ("wandered", "lingered", "wrong_answer", "out_of_budget", "unparsable", "action_error", "error")
LINGER_STEPS = 3
BUDGET_REASONS = ("max_steps", "repeated_action")
_HOST = re.compile(r"^[a-z][a-z0-9+.-]*://([^/?#:@]+)")


def host(url: str) -> str:
    """The lowercased host of a URL; empty for URLs without one (``about:blank``)."""
    found = _HOST.match(url.lower())
    return found.group(1) if found else ""


def anchor_step(episode: Episode) -> int | None:
    """Step at which the last hop before the first failure completed; None when no hop did."""
    failed = episode.first_failed_hop  # 1-based: the hops before it, 1 .. failed - 1, passed
    last = (episode.hops_total if failed is None else failed - 1) - 1  # the last passed one's index
    if last < 0:
        return None
    verdict = next((h for h in episode.hops if h.hop_index == last), None)
    if verdict is not None and verdict.completed_step is not None:
        return verdict.completed_step
    return episode.live_hop_steps[last] if last < len(episode.live_hop_steps) else None


def _step_host(steps: tuple[StepRow, ...], index: int) -> str | None:
    return next((host(s.url) for s in steps if s.step_index == index), None)


def wandered(episode: Episode, anchor: int | None) -> bool:
    """After the anchor, a page on a third site: neither the anchor's nor the failed hop's."""
    if episode.first_failed_hop is None:
        return False
    failed = episode.first_failed_hop - 1  # its index in the procedure
    if failed >= len(episode.procedure) or episode.procedure[failed] == "end":
        return False
    keyword, start = episode.procedure[failed], anchor or 0
    home = _step_host(episode.steps, start)
    return home is not None and any(
        s.step_index > start and host(s.url) not in ("", home) and keyword not in s.url.lower()
        for s in episode.steps
    )


def lingered(episode: Episode, anchor: int | None) -> bool:
    """From the completing step on, at least LINGER_STEPS steps, all on that hop's site."""
    if anchor is None:
        return False
    home = _step_host(episode.steps, anchor)
    after = [s for s in episode.steps if s.step_index >= anchor]
    return home is not None and len(after) >= LINGER_STEPS and all(host(s.url) == home for s in after)


def modes(episode: Episode) -> dict[str, bool]:
    """Every mode's flag for one episode (all False for a passed episode)."""
    if episode.passed:
        return dict.fromkeys(MODES, False)
    anchor = anchor_step(episode)
    return {
        "wandered": wandered(episode, anchor),
        "lingered": lingered(episode, anchor),
        "wrong_answer": episode.stop_reason == "stop",
        "out_of_budget": episode.stop_reason in BUDGET_REASONS,
        "unparsable": any(s.action is None for s in episode.steps),
        "action_error": any(s.action is not None and s.action_error is not None for s in episode.steps),
        "error": episode.status == "error",
    }
