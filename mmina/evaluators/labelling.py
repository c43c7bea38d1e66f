"""A person's labels: pass / fail / unsure per hop and per task, stored as ``human`` verdicts.

Labels are verdicts like any evaluator's, so they are score batches: evaluator ``human``,
arguments ``{"labeller": NAME}``, one row per labelled hop (``level = 'hop'``, ``hop``
1-based as in every ``scores`` row) or task, ``unsure`` stored as the verdict ``unclear`` (the
label itself, and the note, are in ``detail_json``). Batches are only ever appended: every
save in ``mmina serve`` and every ``mmina import labels`` is a new batch, so two people's
labels sit side by side and nothing a person said is lost. A labeller's *current* labels of
an episode are those of their latest batch naming it (``scored_at``, then ``batch_id``) —
a save replaces that labeller's earlier labels of the episode, never anyone else's.

Hop positions are 1-based wherever a person sees or writes them (:class:`Label.hop`).
"""

from __future__ import annotations

import getpass
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from mmina.errors import SEE_EPISODES, not_found
from mmina.evaluators.base import BLOCKED, EvaluatorError, Score
from mmina.evaluators.batch import ScoreBatch, episode_score_rows
from mmina.store import Store

HUMAN = "human"
VERSION = "1"
LABELS = ("pass", "fail", "unsure", "blocked")
VERDICTS = {"pass": "pass", "fail": "fail", "unsure": "unclear", "blocked": BLOCKED}
"""A label as a stored verdict (``scores.verdict`` says ``unclear`` for every evaluator; ``blocked``:
the environment kept the agent from the task, Online-Mind2Web's "not executable", in no rate)."""
MAX_NAME = 80
MAX_NOTE = 2000
_NAME = re.compile(r"^[^\x00-\x1f\x7f]+$")


class LabelError(EvaluatorError):
    """Labels that cannot be stored as given (an unknown episode, a hop it does not have, a bad label)."""


@dataclass(frozen=True)
class Label:
    """One label: an episode's task (``hop`` None) or one of its hops (``hop``: 1-based)."""

    episode_id: str
    label: str
    hop: int | None = None
    note: str = ""

    @property
    def item(self) -> str:
        """What is labelled, as people read it: ``task`` or ``hop N``."""
        return "task" if self.hop is None else f"hop {self.hop}"


@dataclass(frozen=True)
class EpisodeRef:
    """What labelling needs of an episode: where it is and how many hops its task has."""

    episode_id: str
    run_id: str
    task_id: str
    n_hops: int


@dataclass(frozen=True)
class Saved:
    """A written batch of labels: its id, who labelled, how many labels of how many episodes."""

    batch_id: str
    labeller: str
    labels: int
    episodes: int
    runs: tuple[str, ...]


def default_labeller() -> str:
    """The name labels carry when none is given: the operating-system user."""
    try:
        return getpass.getuser() or "unknown"
    except (KeyError, OSError):  # no user name for this uid (a container), no USER variable
        return "unknown"


def checked_labeller(name: str) -> str:
    """A labeller's name, stripped: 1 to ``MAX_NAME`` printable characters."""
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME or not _NAME.match(name):
        raise LabelError(
            f"a labeller's name is 1 to {MAX_NAME} printable characters, not {name[:MAX_NAME]!r}"
        )
    return name


def checked_label(label: str) -> str:
    """``pass``, ``fail``, ``unsure`` or ``blocked`` (``unclear``, the stored word, is taken for ``unsure``)."""
    value = str(label).strip().lower()
    value = "unsure" if value == "unclear" else value
    if value not in LABELS:
        raise LabelError(f"a label is pass, fail, unsure or blocked, not {str(label)[:40]!r}")
    return value


def episode_refs(store: Store, episode_ids: Iterable[str]) -> dict[str, EpisodeRef]:
    """The named episodes that exist in the store (others are absent from the answer)."""
    wanted = pa.array(sorted(set(episode_ids)), pa.string())
    table = store.read("episodes", columns=["episode_id", "run_id", "task_id", "n_hops"])
    table = table.filter(pc.is_in(table.column("episode_id"), wanted))
    return {
        row["episode_id"]: EpisodeRef(row["episode_id"], row["run_id"], row["task_id"], row["n_hops"] or 0)
        for row in table.to_pylist()
    }


def check_labels(labels: Sequence[Label], refs: Mapping[str, EpisodeRef]) -> None:
    """Refuse, naming the first culprit, labels of unknown episodes or hops, bad labels, notes
    too long, and the same item labelled twice."""
    if not labels:
        raise LabelError("no labels to save")
    seen: set[tuple[str, int | None]] = set()
    for label in labels:
        ref = refs.get(label.episode_id)
        if ref is None:
            raise LabelError(not_found("episode", label.episode_id[:100], "the store", refs, SEE_EPISODES))
        checked_label(label.label)
        if label.hop is not None and not 1 <= label.hop <= ref.n_hops:
            raise LabelError(
                f"episode {ref.episode_id} ({ref.task_id}) has hops 1 to {ref.n_hops}, not hop {label.hop}"
            )
        if len(label.note) > MAX_NOTE:
            raise LabelError(
                f"a note is at most {MAX_NOTE} characters ({label.item} of episode {ref.episode_id})"
            )
        if (label.episode_id, label.hop) in seen:
            raise LabelError(f"{label.item} of episode {ref.episode_id} is labelled twice")
        seen.add((label.episode_id, label.hop))


def write_labels(
    store: Store,
    labels: Sequence[Label],
    labeller: str,
    source: str,
    refs: Mapping[str, EpisodeRef] | None = None,
) -> Saved:
    """Check the labels, then append them as one ``human`` batch (a file per run); ``source``
    (``serve``, ``import:FILE``) is kept in each row's detail. Nothing is written when any
    label is refused."""
    labeller = checked_labeller(labeller)
    refs = refs if refs is not None else episode_refs(store, (label.episode_id for label in labels))
    check_labels(labels, refs)
    batch = ScoreBatch.new(HUMAN, VERSION, {"labeller": labeller})
    by_run: dict[str, list[dict[str, object]]] = defaultdict(list)
    for episode_id, own in _by_episode(labels).items():
        ref = refs[episode_id]
        by_run[ref.run_id] += episode_score_rows(
            episode_id, ref.task_id, [_score(label, source) for label in own], batch
        )
    for run_id, rows in by_run.items():
        store.append("scores", rows, stem=batch.batch_id, run_id=run_id)
    return Saved(batch.batch_id, labeller, len(labels), len(_by_episode(labels)), tuple(by_run))


def _by_episode(labels: Sequence[Label]) -> dict[str, list[Label]]:
    """Labels by episode, each episode's task label first, then its hops in order."""
    found: dict[str, list[Label]] = defaultdict(list)
    for label in labels:
        found[label.episode_id].append(label)
    return {
        e: sorted(own, key=lambda label: -1 if label.hop is None else label.hop) for e, own in found.items()
    }


def _score(label: Label, source: str) -> Score:
    """A label as a verdict row: pass 1, fail, unsure and blocked 0; the label, note and source in the detail."""
    value = checked_label(label.label)
    detail = {"label": value, "source": source, **({"note": label.note} if label.note else {})}
    return Score(
        VERDICTS[value],
        float(value == "pass"),
        "task" if label.hop is None else "hop",
        None if label.hop is None else label.hop - 1,
        detail=detail,
    )
