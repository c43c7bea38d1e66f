"""The convenience views: the questions people ask a store most often, as views over the
table views (``views.py`` creates them in every connection, in this order).

Each view says what one row is, its SQL, and what its columns mean: the columns it computes
are described here, one line each; those it passes through from a table keep that table's
meaning (``like``). ``mmina sql --schema`` and docs/store.md show both, and a test fails
when a column of a view has no meaning or a meaning names no column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mmina.store.schema import EPISODES, SCORES, STEPS, TASKS, Table
from mmina.tasks.task import HOP_BUCKETS


def bucket_sql(column: str) -> str:
    """SQL giving the hop-count bucket of ``column`` (the same rule as :func:`mmina.tasks.task.hop_bucket`)."""
    bounded = " ".join(
        f"WHEN {column} <= {most} THEN '{name}'" for name, most in HOP_BUCKETS if most is not None
    )
    return f"CASE {bounded} ELSE '{HOP_BUCKETS[-1][0]}' END"


@dataclass(frozen=True)
class View:
    """A convenience view: what a row is (``doc``), its SQL, and its columns' meanings."""

    doc: str
    sql: str
    columns: Mapping[str, str]
    """Meaning of each column the view computes, or whose meaning differs from its table's."""
    like: tuple[Table, ...] = ()
    """Tables whose columns the view passes through unchanged: their meaning holds (first match)."""

    def source(self, column: str) -> Table | None:
        """The table ``column`` passes through from; None when the view describes it itself."""
        if column in self.columns:
            return None
        return next((table for table in self.like if column in table.column_docs), None)

    def column_doc(self, column: str) -> str:
        """What ``column`` means in this view (empty when nobody documented it)."""
        table = self.source(column)
        return table.column_docs[column] if table is not None else self.columns.get(column, "")


BUCKET_DOC = (
    "Hop-count bucket of the task, as the MMInA paper groups tasks: "
    + ", ".join(f"`{name}`" for name, _ in HOP_BUCKETS)
    + "."
)

EPISODE_HOPS = View(
    "One row per episode per hop (`hop` 1-based, as every table numbers hops): the hop's keyword, whether the "
    "recorder's live URL tracking saw it reached (`live_reached`) and at which step (`live_reached_step`): a "
    "progress gauge, not a verdict (verdicts: `scores` rows of level `hop`); `given` marks the hops a replayed "
    "prefix gave a hop-conditioned episode (hops 1 .. `episodes.hops_given`: reached at the reference's step, "
    "not credited to the agent).",
    """
    SELECT e.run_id, e.episode_id, e.task_id, h.hop, t.n_hops,
           t.procedure[h.hop] AS keyword,
           h.hop <= e.live_hops AS live_reached,
           CASE WHEN h.hop <= e.live_hops THEN e.hop_steps[h.hop] END AS live_reached_step,
           h.hop <= coalesce(e.hops_given, 0) AS given
    FROM episodes e
    JOIN tasks t ON t.run_id = e.run_id AND t.task_id = e.task_id
    CROSS JOIN LATERAL (SELECT unnest(range(1, e.n_hops + 1)) AS hop) h
    """,
    {
        "hop": "The hop, 1-based (hop 1 is the task's first hop).",
        "keyword": "The hop's site keyword, from the task's `procedure` (e.g. `kiwix`).",
        "live_reached": "Whether live URL tracking saw the hop reached while recording (a gauge, not a verdict).",
        "live_reached_step": "Step index at which live tracking saw the hop reached; null when it did not.",
        "given": "Whether a replayed prefix gave this hop (hop-conditioned episodes): not credited to the agent.",
    },
    like=(EPISODES, TASKS),
)

HOP_BUCKETS_VIEW = View(
    "One row per episode with its hop-count bucket (`1`, `2-4`, `5+`) as the MMInA paper groups tasks.",
    f"""
    SELECT e.*, {bucket_sql("e.n_hops")} AS bucket
    FROM episodes e
    """,
    {"bucket": BUCKET_DOC},
    like=(EPISODES,),
)

STEP_MESSAGES = View(
    "One row per message of each step's model input (`steps.model_input`): its position, the model, the "
    "role, the text (text parts joined by newlines) and the hashes of its images (blobs); steps of agents "
    "that call no model have none. Reads the blob packs, so filter by episode.",
    """
    WITH inputs AS (
        SELECT s.run_id, s.episode_id, s.step_index, json(decode(b.data)) AS doc
        FROM steps s JOIN blobs b ON b.sha256 = s.model_input
    ), listed AS (
        SELECT run_id, episode_id, step_index, json_extract_string(doc, '$.model') AS model,
               unnest(json_extract_string(doc, '$.messages[*]')) AS message,
               generate_subscripts(json_extract_string(doc, '$.messages[*]'), 1) - 1 AS position
        FROM inputs
    ), decoded AS (
        SELECT l.*, json(decode(m.data)) AS msg FROM listed l JOIN blobs m ON m.sha256 = l.message
    )
    SELECT run_id, episode_id, step_index, position, model, json_extract_string(msg, '$.role') AS role,
           CASE WHEN json_type(msg, '$.content') = 'VARCHAR' THEN json_extract_string(msg, '$.content')
                ELSE array_to_string(json_extract_string(msg, '$.content[*].text'), chr(10)) END AS text,
           list_filter(json_extract_string(msg, '$.content[*].image_url.blob'), lambda x: x IS NOT NULL)
               AS images
    FROM decoded
    """,
    {
        "position": "0-based position of the message in the step's model input.",
        "model": "The model the request was sent to.",
        "role": "The message's role: `system`, `user` or `assistant`.",
        "text": "The message's text (its text parts joined by newlines).",
        "images": "SHA-256 of each image of the message (blobs), in order.",
    },
    like=(STEPS,),
)

LATEST_SCORES = View(
    "The current verdicts: the rows of the latest `scores` batch per (episode, evaluator); "
    "earlier batches stay in `scores`.",
    """
    SELECT * FROM scores
    QUALIFY batch_id = first_value(batch_id) OVER (PARTITION BY episode_id, evaluator
                                                   ORDER BY scored_at DESC, batch_id DESC)
    """,
    {},
    like=(SCORES,),
)

EPISODE_SCORES = View(
    "One row per scored task per run and evaluator, and per repeat (`attempt`, `mmina record --repeats`; the "
    "latest episode of each, never one a re-run superseded; a hop-conditioned run: per task and hops given): "
    "the current task verdict (`passed`; NULL when the verdict is `n/a`: the evaluator had nothing to judge, "
    "or `blocked`: the environment's failure, or when an infrastructure error ended the episode: the task is "
    "then in no rate), hops passed of `hops_total` hop verdicts, the first failed hop (1-based), the "
    "hop-count `bucket` and the episode's stop reason, steps, tokens and cost; what `mmina report` is computed "
    "from. Hops a prefix gave (1 .. `hops_given`) are left out of the hop "
    "counts, whichever evaluator wrote rows for them.",
    f"""
    SELECT e.run_id, e.episode_id, e.task_id, e.attempt, s.evaluator, e.n_hops,
           {bucket_sql("e.n_hops")} AS bucket,
           CASE WHEN e.blocked IS NOT NULL AND s.verdict <> 'pass' THEN 'blocked' ELSE s.verdict END AS verdict,
           CASE WHEN s.verdict NOT IN ('n/a', 'blocked') AND e.error_kind IS DISTINCT FROM 'infrastructure'
                     AND (e.blocked IS NULL OR s.verdict = 'pass') THEN s.verdict = 'pass' END AS passed,
           coalesce(h.hops_passed, 0) AS hops_passed, coalesce(h.hops_total, 0) AS hops_total,
           h.first_failed_hop, e.status, e.stop_reason, e.final_answer, e.n_steps,
           e.prompt_tokens, e.completion_tokens, e.cost_usd, e.hops_given, e.prefix_faithful, e.error_kind,
           e.blocked
    FROM episodes e
    JOIN latest_scores s ON s.episode_id = e.episode_id AND s.level = 'task'
    LEFT JOIN (SELECT l.episode_id, l.evaluator, count(*) FILTER (WHERE l.verdict = 'pass') AS hops_passed,
                      count(*) AS hops_total,
                      min(l.hop) FILTER (WHERE l.verdict <> 'pass') AS first_failed_hop
               FROM latest_scores l JOIN episodes g ON g.episode_id = l.episode_id
               WHERE l.level = 'hop' AND l.hop > coalesce(g.hops_given, 0)
               GROUP BY l.episode_id, l.evaluator) h
           ON h.episode_id = e.episode_id AND h.evaluator = s.evaluator
    WHERE e.episode_id NOT IN (SELECT supersedes FROM episodes WHERE supersedes IS NOT NULL)
    QUALIFY row_number() OVER (PARTITION BY e.run_id, e.task_id, e.attempt, e.hops_given, e.prefix_steps,
                                            s.evaluator
                               ORDER BY e.started_at DESC) = 1
    """,
    {
        "attempt": "The repeat scored (1..K of `mmina record --repeats K`); an episode recorded again for the "
        "same repeat (`record --resume` after an error) supersedes the earlier one.",
        "bucket": BUCKET_DOC,
        "verdict": "The current task-level verdict of `evaluator`: `pass`, `fail`, `unclear` or `n/a`; `blocked` "
        "when the environment was in the agent's way where the episode ended (`episodes.blocked`) and "
        "it did not pass, or a person labelled it so.",
        "passed": "Whether `verdict` is `pass`; null when it is `n/a` (nothing to judge) or `blocked` (the "
        "environment's failure), or the episode ended in an infrastructure error (`error_kind`): the task "
        "is then in no rate.",
        "hops_passed": "Hop verdicts `pass` of `evaluator` (hops a prefix gave left out).",
        "hops_total": "Hop verdicts of `evaluator` (0 when it judges no hops; hops a prefix gave left out).",
        "first_failed_hop": "The first hop (1-based) whose verdict is not `pass`; null when none failed.",
    },
    like=(EPISODES, SCORES),
)

CONVENIENCE_VIEWS: dict[str, View] = {
    "episode_hops": EPISODE_HOPS,
    "hop_buckets": HOP_BUCKETS_VIEW,
    "step_messages": STEP_MESSAGES,
    "latest_scores": LATEST_SCORES,
    "episode_scores": EPISODE_SCORES,
}
"""Every convenience view by name, in creation order (a view may read the ones before it)."""
