"""The store's tables: every column with its type, meaning and unit.

This module is the single source of truth for the store contract. ``docs/store.md``
embeds a rendering of it (``python -m mmina.store.docs``), and a test fails when the two
disagree. Changing a column means a new ``SCHEMA_VERSION`` and a migration in
``mmina.store.migrations``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 11
"""The version written by this mmina; files of older versions are upgraded on read.

History: 1 — first release; 2 — ``steps.som_ms`` and ``steps.images_ms`` (read as NULL in
version-1 files); 3 — ``steps.model_input`` and ``steps.target_box`` (NULL in older files);
4 — ``steps.marks`` (NULL in older files), and ``steps.screenshot_som`` stored only for agents
shown the image; 5 — the episode's terminal observation (``episodes.final_url``,
``final_title``, ``final_tabs``, ``final_tree_text``, ``final_screenshot``,
``final_observed_at``; NULL — unknown — in older files), and ``episodes.hops_completed``
renamed ``live_hops`` (it is live URL tracking, not a verdict); 6 — hop-conditioned episodes
(``episodes.prefix_run``, ``prefix_episode``, ``prefix_steps``, ``start_hop``,
``prefix_hop_steps``, ``prefix_faithful``, ``prefix_mismatch``, ``handover_json``; NULL in
older files and in every episode that started from its task's start page); 7 — one hop
numbering (hop 1 is a task's first hop, as in the MMInA paper; docs/concepts.md): ``scores.hop_index``
(0-based) became ``scores.hop`` (1-based, older files read with 1 added), live tracking is named as
such (``steps.hop_index`` → ``steps.live_hops``, ``steps.hop_completed`` → ``steps.live_hop_completed``),
and ``episodes.start_hop`` (0-based) became ``episodes.hops_given`` (the same number, read as a count);
what the browser received (``requests.received_body_sha256``, ``received_body_size``: a body
redaction changed is a fidelity defect), the recorded pace (``steps.acted_at``; replays of older
files keep no pace) and how long a waiting episode's tabs were frozen (``steps.frozen_ms``); NULL
in older files; 8 — how a replay answered each request (``requests.replay_match``,
``replay_source_episode``, ``replay_source_seq``; NULL in older files and in recordings) and
what the model endpoint cost an episode (``episodes.endpoint_retries``, ``endpoint_wait_s``;
NULL in older files); 9 — whose failure an error was, the re-run that replaced it and the
environment in the agent's way (``episodes.error_kind``, ``supersedes``, ``blocked``; NULL in older
files), and the LLM judge's whole
configuration with every verdict and cached call (``scores.judge_json``, ``judge_cache.judge_json``:
model, endpoint host, sampling parameters as sent, prompt version, what the provider changed or
refused; NULL in older files and for evaluators without a judge), with a judge cache key that
covers it; 10 — how the pages' ``Math.random`` and ``crypto`` were seeded (``episodes.random_seeding``:
NULL in older files, read as scheme 1, which their replays keep); 11 — how long an action's input
took to dispatch, before the page settled (``steps.dispatch_ms``: a replay lets the page's time run
no further during the replayed input; NULL in older files, whose replays do not hold it).
"""

TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADERS = pa.list_(pa.struct([("name", pa.string()), ("value", pa.string())]))
TAB = pa.struct([("url", pa.string()), ("title", pa.string())])
BOX = pa.struct([("x", pa.float64()), ("y", pa.float64()), ("width", pa.float64()), ("height", pa.float64())])
MARK = pa.struct(
    [
        ("id", pa.string()),
        ("role", pa.string()),
        ("x", pa.float64()),
        ("y", pa.float64()),
        ("width", pa.float64()),
        ("height", pa.float64()),
    ]
)
IMAGE = pa.struct(
    [
        ("blob", pa.string()),
        ("src", pa.string()),
        ("alt", pa.string()),
        ("x", pa.float64()),
        ("y", pa.float64()),
        ("width", pa.float64()),
        ("height", pa.float64()),
        ("caption", pa.string()),
    ]
)


RUN_ID_DOC = "Run id, from the `run_id=...` folder (not stored in the file)."


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str


@dataclass(frozen=True)
class Table:
    """One table of the store; run-partitioned tables get ``run_id`` from the folder name."""

    name: str
    doc: str
    columns: tuple[Column, ...]
    partitioned_by_run: bool = True

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the table's files (without the ``run_id`` partition column)."""
        return pa.schema([pa.field(c.name, c.type) for c in self.columns])

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def column_docs(self) -> dict[str, str]:
        """The meaning of each column the table's view shows (its files' columns, and ``run_id`` when
        partitioned: the view takes it from the folder name)."""
        run_id = {"run_id": RUN_ID_DOC} if self.partitioned_by_run else {}
        return run_id | {c.name: c.doc for c in self.columns}


def _cols(*specs: tuple[str, pa.DataType, str]) -> tuple[Column, ...]:
    return tuple(Column(*spec) for spec in specs)


S, I32, I64, F64, B = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()
STRINGS, INTS = pa.list_(pa.string()), pa.list_(pa.int32())

RUNS = Table(
    "runs",
    "One row per run: who ran what, with which software, on which browser settings.",
    _cols(
        ("created_at", TIMESTAMP, "When the run was started (UTC)."),
        ("agent", S, "Agent name as given to `--agent` (e.g. `oracle`, `openai`, `module:Class`)."),
        ("model", S, "Model name for model-backed agents; null otherwise."),
        ("config_json", S, "The run's full configuration as JSON (secrets removed)."),
        ("task_suite", S, "Name of the task suite (`builtin` for the fixture suite)."),
        ("task_suite_path", S, "Path the suite was loaded from."),
        (
            "task_suite_sha256",
            S,
            "SHA-256 over the suite's task ids and file contents: same value, same tasks.",
        ),
        ("task_count", I32, "Number of tasks selected for the run."),
        ("mmina_version", S, "Version of mmina that recorded the run."),
        ("python_version", S, "Python version of the recording process."),
        ("playwright_version", S, "Playwright version used to drive the browser."),
        ("browser_version", S, "Browser name and version (e.g. `chromium 156.0.8078.73`)."),
        ("viewport_width", I32, "Viewport width in CSS pixels."),
        ("viewport_height", I32, "Viewport height in CSS pixels."),
        ("hostname", S, "Host name of the machine that started the run."),
    ),
)

TASKS = Table(
    "tasks",
    "The tasks of a run, normalized, with the original MMInA JSON kept verbatim.",
    _cols(
        (
            "task_id",
            S,
            "Task id: the task file's path below the suite folder, without `.json` (e.g. `normal/1`).",
        ),
        (
            "suite",
            S,
            "Suite folder of the task (`normal`, `multi567`, `compare`, `multipro`, `shopping`, `wikipedia`).",
        ),
        ("intent", S, "The task instruction given to the agent."),
        ("start_urls", STRINGS, "Start URLs (the official `start_url` split on ` |AND| `)."),
        (
            "cnt_hop",
            I32,
            "The official `cnt_hop` (counts the END marker: hops + 1; the official runner never reads "
            "it, and `n_hops` comes from `procedure`).",
        ),
        (
            "n_hops",
            I32,
            "Number of hops: procedure entries before the first `end`; without a procedure, "
            "`cnt_hop` - 1 or the official count of the suite (`normal` 2, others 1).",
        ),
        ("procedure", STRINGS, "The official `procedure`: site keyword per hop, ending with `end`."),
        ("eval_types", STRINGS, "The official `eval.eval_types`."),
        ("reference_answers_json", S, "The official `eval.reference_answers` as JSON."),
        ("reference_url", S, "The official `eval.reference_url` (empty when none)."),
        ("city", S, "The official `city` field (empty when none)."),
        (
            "flight",
            S,
            "The official `flight` field: an airport or city code as the file gives it (lower case in the "
            "official release, e.g. `tyo`; empty when none or null).",
        ),
        ("shop", S, "The official `shop` field (empty when none)."),
        ("original_json", S, "The task file's JSON, verbatim content (keys sorted)."),
        ("task_sha256", S, "SHA-256 of the task file's bytes."),
    ),
)

EPISODES = Table(
    "episodes",
    "One row per finished episode (one attempt at one task). An episode exists in the store "
    "exactly when its row here exists: this file is made visible last (renamed into place on a disk, PUT on "
    "object storage).",
    _cols(
        ("episode_id", S, "Globally unique episode id."),
        ("task_id", S, "The task attempted (see `tasks.task_id`)."),
        (
            "attempt",
            I32,
            "Which repeat of the task in this run the episode is: 1..K of `mmina record --repeats "
            "K` (1 without it); a replay numbers its episodes of a task as its source run did.",
        ),
        (
            "status",
            S,
            "`completed` (the agent or a budget ended it) or `error` (the browser, agent or endpoint failed).",
        ),
        (
            "stop_reason",
            S,
            "`stop` (agent answered), `max_steps`, `repeated_action`, `unparsable_output`, `script_end`, or `error`.",
        ),
        ("final_answer", S, "The answer of the final `stop` action; null when the agent did not stop."),
        ("n_steps", I32, "Number of steps (observation + action pairs) recorded."),
        ("n_hops", I32, "Number of hops of the task."),
        (
            "live_hops",
            I32,
            "Hops the recorder's live URL tracking saw reached (the hop's procedure keyword in an "
            "observed URL, in queue order), 0..n_hops: a progress gauge while recording, never a "
            "verdict; verdicts are the `scores` rows (`episode_scores`). Named `hops_completed` "
            "before schema version 5.",
        ),
        (
            "hop_steps",
            INTS,
            "Step index at which live tracking saw each of the `live_hops` hops reached, in hop order.",
        ),
        ("started_at", TIMESTAMP, "Start of the episode (UTC)."),
        ("ended_at", TIMESTAMP, "End of the episode (UTC)."),
        ("duration_ms", F64, "Wall time of the episode in milliseconds."),
        ("prompt_tokens", I64, "Model input tokens over all steps (0 for agents without a model)."),
        ("completion_tokens", I64, "Model output tokens over all steps."),
        ("cost_usd", F64, "Model cost over all steps in US dollars (0 when unknown or free)."),
        ("error", S, "Error message when `status` is `error`; null otherwise."),
        (
            "error_kind",
            S,
            "Whose failure an error was: `infrastructure` (the browser or its driver died, a renderer "
            "crashed, the store, the model endpoint failing for everyone) or `agent` (the agent or its "
            "output, or the task's site); null without an error and before schema version 9. An "
            "infrastructure error is counted in no rate, and `record --resume` records its task again.",
        ),
        (
            "blocked",
            S,
            "The environment in the agent's way where the episode ended (`mmina.tasks.blocking`), as JSON: "
            "`rule` (`start_page`, `site_down`, `bot_wall`, `login_wall`), `url` and the evidence (an "
            "HTTP `status`, Chromium's `error`, the page's `title`, the text `matched`, the address "
            "`asked_for`); null when nothing was, and before schema version 9. An episode that did not pass "
            "is then `blocked` in `episode_scores`, in no rate.",
        ),
        (
            "supersedes",
            S,
            "The episode of the same task, repeat (`attempt`) and run that this one recorded again "
            "(`record --resume` after an infrastructure error, or `--rerun-errors`): that one is kept "
            "but counted in no table; "
            "null otherwise and before schema version 9.",
        ),
        (
            "endpoint_retries",
            I32,
            "Attempts of the agent's model calls that failed for the endpoint's sake (a 429, "
            "a 5xx, no connection) and were tried again; null before schema version 8.",
        ),
        (
            "endpoint_wait_s",
            F64,
            "Seconds the agent's model calls waited for an endpoint that was down or refusing "
            "everyone (`--endpoint-patience`): not counted in the steps' `agent_ms`; null "
            "before schema version 8.",
        ),
        (
            "random_seeding",
            I32,
            "How the pages' `Math.random` and `crypto` were seeded (a replay seeds as its "
            "source episode was): `3`, as `2` in documents and in Web Workers (dedicated and "
            "shared) too; `2`, a stream per place a draw is called from (the page's "
            "calling stack), so a draw does not depend on how many draws other scripts made "
            "before it, workers unseeded; `1` (and null: stores before schema version 10), one "
            'stream per document for each (docs/replay.md, "Random draws").',
        ),
        ("n_requests", I32, "Number of network requests recorded for the episode."),
        (
            "blob_packs",
            STRINGS,
            "Blob pack files holding this episode's blobs (paths relative to the store).",
        ),
        ("worker", S, "`host:pid` of the process that recorded the episode."),
        (
            "final_url",
            S,
            "The terminal observation: URL of the active tab after the episode's last action (the page "
            "a `stop` answered on, or the one the last action reached when a budget or an error ended "
            "the episode); the page the official runner checks last. Null when unknown: the page was "
            "gone, the episode never opened its start page, or the store predates schema version 5.",
        ),
        ("final_title", S, "Title of the active tab in the terminal observation; null when unknown."),
        ("final_tabs", pa.list_(TAB), "All open tabs in the terminal observation; null when unknown."),
        (
            "final_tree_text",
            S,
            "Accessibility tree of the terminal observation (as `steps.tree_text`); null when unknown.",
        ),
        (
            "final_screenshot",
            S,
            "SHA-256 of the terminal observation's screenshot blob (JPEG); null when screenshots "
            "are off or unknown.",
        ),
        ("final_observed_at", TIMESTAMP, "When the terminal observation was taken (UTC); null when unknown."),
        (
            "prefix_run",
            S,
            "Hop-conditioned episodes (`mmina record --prefix-run`): the run of the reference episode "
            "whose steps were replayed from its archive before the agent took over; null for an "
            "episode that started from its task's start page (and in stores before schema version 6).",
        ),
        (
            "prefix_episode",
            S,
            "The reference episode whose first `prefix_steps` actions were replayed; null when not "
            "conditioned.",
        ),
        (
            "prefix_steps",
            I32,
            "Steps replayed from the reference before the hand-over: steps 0 .. prefix_steps - 1 "
            "are the reference's actions (stored like any step), the agent's first step is "
            "`prefix_steps`; null when not conditioned.",
        ),
        (
            "hops_given",
            I32,
            "Hops the replayed prefix gave the agent (`--at-hop K` gives K - 1: the agent starts on "
            "hop K): hops 1 .. hops_given are not credited to the agent (the `hops` evaluator writes "
            "no row for them, and analysis leaves out any evaluator's rows for them); null when not "
            "conditioned. Named `start_hop` before schema version 7.",
        ),
        (
            "prefix_hop_steps",
            INTS,
            "Step at which the reference's `hops` verdicts completed each given hop (one per "
            "hop given, see `hops_given`); live tracking and `hops` count them as completed there; "
            "null when not conditioned.",
        ),
        (
            "prefix_faithful",
            B,
            "Whether every prefix step, and the observation handed over, replayed faithfully "
            "(URL and accessibility tree equal to the reference's, as `mmina replay` judges "
            "fidelity); analysis of hop success given a correct prefix leaves out episodes where "
            "it is false; null when not conditioned.",
        ),
        (
            "prefix_mismatch",
            S,
            "The first prefix step that did not replay faithfully and how (`step 3: url ... != ...` "
            "or `step 3: tree differs`); null when faithful or not conditioned.",
        ),
        (
            "handover_json",
            S,
            "What the agent was handed, as JSON: `handed_over_at`, the clock, the open tabs with "
            "their history lengths, the names of the cookies kept and of those dropped (values the "
            "archive holds redacted), the web-storage keys per origin (names only, never values); "
            "null when not conditioned.",
        ),
    ),
)

STEPS = Table(
    "steps",
    "One row per step: the observation the agent saw, what it answered, and what happened.",
    _cols(
        ("episode_id", S, "The episode (see `episodes.episode_id`)."),
        ("step_index", I32, "0-based step number within the episode."),
        ("started_at", TIMESTAMP, "When capturing this step's observation began (UTC)."),
        ("url", S, "URL of the active tab when observed."),
        ("title", S, "Title of the active tab."),
        ("tabs", pa.list_(TAB), "All open tabs, in order."),
        ("active_tab", I32, "Index of the active tab in `tabs`."),
        ("tree_text", S, "Accessibility tree as text; `[N]` before an element is the id actions refer to."),
        ("screenshot", S, "SHA-256 of the viewport screenshot blob (JPEG); null when capture is off."),
        (
            "screenshot_som",
            S,
            "SHA-256 of the set-of-marks screenshot blob (ids painted on elements); null when not "
            "captured, and since schema version 4 also when the agent was not shown it (repaint it "
            "from `screenshot` and `marks`).",
        ),
        (
            "marks",
            pa.list_(MARK),
            "The elements painted on the set-of-marks image, in painting order: id as the agent "
            "sees it, ARIA role, box in CSS pixels of the screenshot. With the screenshot they "
            "paint the image again (`mmina.store.marks.repaint`); null without a screenshot "
            "(since schema version 4).",
        ),
        ("screenshot_width", I32, "Screenshot width in pixels."),
        ("screenshot_height", I32, "Screenshot height in pixels."),
        (
            "images",
            pa.list_(IMAGE),
            "Images in the viewport: blob hash, source URL, alt text, box in CSS pixels, caption.",
        ),
        (
            "model_input",
            S,
            "SHA-256 of the model-input blob: the exact request the agent sent to its model for this "
            "step (model, parameters, messages; each message and image a blob of its own, so what "
            "steps share is stored once; see `mmina.models.model_input` and the `step_messages` view); "
            "null for agents that call no model (since schema version 3).",
        ),
        ("model_output", S, "The agent's raw output for this step (model text, or the scripted action)."),
        ("action", S, "The parsed action in canonical form (e.g. `click [12]`); null when unparsable."),
        ("action_kind", S, "The action's kind (`click`, `type`, ..., `stop`); null when unparsable."),
        ("action_error", S, "Why the action failed or could not be parsed; null when it succeeded."),
        (
            "target_box",
            BOX,
            "Box of the element the action targeted (click, hover, type), in CSS pixels of this step's "
            "viewport as the observation saw it (the screenshot's coordinates); null for actions "
            "without a target or a target the page did not show (since schema version 3).",
        ),
        (
            "live_hops",
            I32,
            "Live URL tracking (a progress gauge, never a verdict): hops it had seen reached when this "
            "observation was checked, 0..n_hops (the agent is then on hop live_hops + 1). Named "
            "`hop_index` before schema version 7.",
        ),
        (
            "live_hop_completed",
            B,
            "Live URL tracking: true when this observation reached a hop. Named `hop_completed` "
            "before schema version 7.",
        ),
        ("prompt_tokens", I64, "Model input tokens for this step."),
        ("completion_tokens", I64, "Model output tokens for this step."),
        ("cost_usd", F64, "Model cost of this step in US dollars."),
        (
            "observe_ms",
            F64,
            "Observation capture time on the step's critical path (tree, images and screenshot, "
            "read side by side; the set-of-marks wait only for agents that read it), in milliseconds.",
        ),
        ("tree_ms", F64, "Accessibility-tree capture time in milliseconds (overlaps the screenshot's)."),
        ("screenshot_ms", F64, "Screenshot capture time in milliseconds."),
        (
            "som_ms",
            F64,
            "Time to paint the set-of-marks screenshot, in milliseconds; done on a worker thread "
            "while the agent chooses (since schema version 2).",
        ),
        (
            "images_ms",
            F64,
            "Time to list (and, with a captioner, caption) the in-viewport images, in milliseconds "
            "(since schema version 2).",
        ),
        ("agent_ms", F64, "Time the agent took to choose the action, in milliseconds."),
        ("action_ms", F64, "Time to execute the action, in milliseconds."),
        (
            "acted_at",
            TIMESTAMP,
            "When the action was sent to the page (UTC), after the agent chose it: with "
            "`started_at` and the episode's `started_at` it is the page's timeline, which a "
            "replay keeps (see docs/replay.md); null for a step whose action did not parse, "
            "and in stores before schema version 7.",
        ),
        (
            "frozen_ms",
            F64,
            "How long the episode's tabs were frozen while the agent chose this action, in "
            "milliseconds: 0 when the agent answered before the freeze (see `mmina.recorder.freezing`), "
            "null when freezing was off or the step came from a store older than version 7 (since "
            "schema version 7).",
        ),
        (
            "dispatch_ms",
            F64,
            "How long the action's input took to dispatch (the target found, clicked, every key typed; "
            "a click that navigates: until the new document committed), before the page settled, in "
            "milliseconds: part of `action_ms`. A replay lets the page's time run no further than this "
            "during the replayed input (docs/replay.md); null for a step whose action did not parse, and "
            "in stores before schema version 11.",
        ),
    ),
)

REQUESTS = Table(
    "requests",
    "The episode's network trace (from the browser's HAR), secrets redacted.",
    _cols(
        ("episode_id", S, "The episode (see `episodes.episode_id`)."),
        ("seq", I32, "0-based order of the request within the episode (by start time)."),
        ("step_index", I32, "Step whose action issued the request; -1 for the initial page load."),
        ("started_at", TIMESTAMP, "When the request started (UTC)."),
        ("method", S, "HTTP method."),
        ("url", S, "Full request URL."),
        ("status", I32, "HTTP status code; 0 when the request failed without a response."),
        (
            "request_headers",
            HEADERS,
            "Request headers, credentials redacted (`Authorization: Bearer [REDACTED]`, "
            "`Cookie: sid=[REDACTED]`, `X-Access-Token: [REDACTED]`).",
        ),
        (
            "response_headers",
            HEADERS,
            "Response headers, credentials redacted (`Set-Cookie: sid=[REDACTED]; Path=/`, "
            "a token in `Location`). Four headers are mmina's own (never served by a "
            "replay): `x-mmina-chunks` — how a fetch/XHR body arrived, `size@ms` per chunk "
            "(milliseconds after the headers), comma-separated, when it came in more than "
            "one chunk; `x-mmina-body: missing` — the response had a body that neither the "
            "HAR nor the body tap kept; `x-mmina-handed` — in a replay's row, when the replay "
            "began handing the response over (after any hold for the recorded pace), in "
            "milliseconds after the request started: `time_ms` less it is the hand-over's own time; "
            "`x-mmina-taken` — for a fetch/XHR answer, when the page's own code got it (its `fetch` "
            "promise resolved, its XHR reached `readyState` 4), in milliseconds after the request "
            "started: a replay on the recording's timeline hands the answer over then.",
        ),
        (
            "request_body",
            S,
            "SHA-256 of the request body blob (secret-named form and JSON fields redacted); null when none.",
        ),
        ("request_body_size", I64, "Request body size in bytes."),
        ("response_body", S, "SHA-256 of the response body blob; null when none was captured."),
        ("response_body_size", I64, "Response body size in bytes (decoded)."),
        (
            "received_body_sha256",
            S,
            "SHA-256 of the response body as the browser received it, before redaction: equal "
            "to `response_body` unless redaction changed the body (a fidelity defect: the "
            "replay serves the stored one; `mmina store verify --redacted` lists them); null "
            "when no body was captured, or recorded before schema version 7.",
        ),
        (
            "received_body_size",
            I64,
            "Size in bytes of the response body as the browser received it (see "
            "`received_body_sha256`); null when unknown.",
        ),
        ("mime_type", S, "Response content type."),
        ("redirect_url", S, "Location of a redirect response; empty otherwise."),
        ("time_ms", F64, "Total request time in milliseconds."),
        (
            "replay_match",
            S,
            "How a replay answered the request from its archive: `exact`, `fuzzy` or `nearest` (a "
            "recorded request served it), `unmatched` (the archive has none: a synthetic answer, a "
            "coverage gap) or `failed` (the replay could not answer in time and answered with an "
            "error); null in a recording and in files before schema version 8.",
        ),
        (
            "replay_source_episode",
            S,
            "The recorded episode whose request answered it (see `replay_match`); null when none did.",
        ),
        (
            "replay_source_seq",
            I32,
            "That recorded request's `seq` in its episode; null when none answered it.",
        ),
    ),
)

SCORES = Table(
    "scores",
    "Verdicts of evaluators on episodes; appended by `mmina rescore`, never overwritten silently.",
    _cols(
        ("episode_id", S, "The episode scored."),
        ("task_id", S, "The episode's task."),
        ("evaluator", S, "Evaluator name (e.g. `must_include`, `fuzzy`, `hops`, `mmina_official`)."),
        ("evaluator_version", S, "Evaluator version, so a changed evaluator never mixes with an old one."),
        ("args_json", S, "Evaluator arguments as JSON, enough to rebuild the score."),
        ("level", S, "`task`, `hop` or `step`."),
        (
            "hop",
            I32,
            "Hop-level rows: the hop, 1-based (hop 1 is the task's first hop, as in the MMInA paper's "
            "Table 3); null otherwise. `hop_index` (0-based) before schema version 7.",
        ),
        ("step_index", I32, "Step index for step-level rows; null otherwise."),
        (
            "verdict",
            S,
            "`pass`, `fail`, `unclear` (cannot be decided), or `n/a` (nothing to judge: the task has no "
            "reference of the kind the evaluator reads; in no rate).",
        ),
        ("value", F64, "Numeric score in [0, 1] (1 = pass)."),
        ("detail_json", S, "Evaluator-specific detail as JSON."),
        ("batch_id", S, "Id of the scoring invocation that wrote the row."),
        ("scored_at", TIMESTAMP, "When the score was computed (UTC)."),
        (
            "judge_json",
            S,
            "An LLM judge's verdicts (`fuzzy`, `keypoints`, `task` with fuzzy references): the judge's "
            "whole configuration as JSON — `model`, `endpoint` (host and port only), `prompt_version`, "
            "`asked` (temperature, top_p, seed as configured), `max_tokens` sent, `refused` (parameters "
            "the provider refused, dropped from what was sent), `reply_models` (the models its replies "
            "reported), `fingerprints`, `calls` and `cached` (docs/judges.md). Null for verdicts without "
            "a judge and before schema version 9.",
        ),
    ),
)

JUDGE_CACHE = Table(
    "judge_cache",
    "Every LLM-judge call, keyed by prompt hash, so re-scoring makes no repeated request.",
    _cols(
        (
            "prompt_sha256",
            S,
            "The cache key: SHA-256 of the judge's configuration (model, endpoint host, sampling "
            "parameters, max tokens, prompt version) and the prompt, as JSON; of the model name and "
            "prompt alone before schema version 9 (such rows are never hit again).",
        ),
        ("model", S, "Judge model name."),
        ("prompt", S, "The prompt sent."),
        ("response", S, "The judge's raw reply."),
        ("prompt_tokens", I64, "Input tokens of the call."),
        ("completion_tokens", I64, "Output tokens of the call."),
        ("created_at", TIMESTAMP, "When the call was made (UTC)."),
        (
            "judge_json",
            S,
            "The call as sent and answered, as JSON: `model`, `endpoint`, `prompt_version`, `sent` (the "
            "sampling parameters and max tokens sent), `refused` (parameters the provider refused and "
            "that were dropped), `reply_model` and `fingerprint` (what the reply reported). Null before "
            "schema version 9.",
        ),
    ),
    partitioned_by_run=False,
)

BLOBS = Table(
    "blobs",
    "Content-addressed blobs (screenshots, images, bodies), each stored once, packed many per file.",
    _cols(
        ("sha256", S, "SHA-256 of `data`: the reference other tables hold."),
        ("media_type", S, "MIME type (e.g. `image/jpeg`, `text/html`)."),
        ("size", I64, "Size of `data` in bytes."),
        ("data", pa.binary(), "The content."),
    ),
    partitioned_by_run=False,
)

TABLES: dict[str, Table] = {
    t.name: t for t in (RUNS, TASKS, EPISODES, STEPS, REQUESTS, SCORES, JUDGE_CACHE, BLOBS)
}
PREFIX_COLUMNS = (
    "prefix_run",
    "prefix_episode",
    "prefix_steps",
    "hops_given",
    "prefix_hop_steps",
    "prefix_faithful",
    "prefix_mismatch",
    "handover_json",
)
"""The ``episodes`` columns of a hop-conditioned episode (schema version 6); null in any other."""
