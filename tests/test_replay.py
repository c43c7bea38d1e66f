"""Replay from the archive: the matcher's rules, fidelity, and real replays against a drifted web.

The built-in tasks are recorded once at drift 0; the fixture web is then up at drift 3 (the
live site has changed since). A live re-run of the stored actions diverges there, while the
replay reproduces the recording without a single request reaching the live server.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

from mmina.agents import AgentReply
from mmina.agents.settings import AgentSettings
from mmina.cli import cli
from mmina.fixtures.web import FixtureWeb
from mmina.fixtures.web.base import Request, Response
from mmina.observations.observation import Observation
from mmina.recorder.browser import BrowserConfig, BrowserSession
from mmina.recorder.recording import RecordConfig, RunSummary, record_run
from mmina.replayer.archive import (
    REDACTED,
    Archive,
    Exchange,
    Matcher,
    MatchKind,
    is_volatile,
    redirect_target,
    redirected_method,
    reply_for,
    unmatched_reply,
)
from mmina.replayer.fidelity import (
    EpisodeFidelity,
    StepView,
    compare_steps,
    pixel_difference,
    screenshot_differ,
    summarize,
)
from mmina.replayer.replays import compare_runs, replay_run
from mmina.store import Store

TASKS = ("normal/1", "shopping/6", "normal/2")
"""normal/1: wiki then shop (two hops, the product page fills its reviews by XHR);
shopping/6: a form POST answered by a 303 redirect and a cookie; normal/2: recipe search."""


# ---------------------------------------------------------------- the matcher (pure)


def _exchange(
    order: int,
    url: str,
    body: bytes = b"",
    method: str = "GET",
    status: int = 200,
    request_body: bytes | None = None,
    request_type: str = "",
    **extra,
) -> Exchange:
    return Exchange(
        order, method, url, status, body=body, request_body=request_body, request_type=request_type, **extra
    )


def test_repeated_requests_are_answered_first_in_first_out_then_the_last_repeats() -> None:
    matcher = Matcher(
        Archive(
            [
                _exchange(0, "http://a.test/live", b"1"),
                _exchange(1, "http://a.test/live", b"2"),
                _exchange(2, "http://a.test/other", b"x"),
            ]
        )
    )
    bodies = [matcher.match("GET", "http://a.test/live").exchange.body for _ in range(4)]
    assert bodies == [b"1", b"2", b"2", b"2"]
    assert matcher.counts[MatchKind.EXACT] == 4


def test_a_request_repeated_while_the_page_clock_stood_still_takes_the_next_repeat() -> None:
    """A page whose clock stands still (τ held on the timeline) stamps two requests with the same
    bare cache-buster (JupyterLab: ``/checkpoints?1796552964508``) where the recording's page
    stamped two; once the exact ones are served, the repeat not served yet answers, not the
    last exact one again (which left a stale checkpoint list for later: "Last Checkpoint: 22 seconds ago")."""
    base = "http://j.test/api/contents/h.ipynb/checkpoints"
    matcher = Matcher(
        Archive(
            [
                _exchange(0, f"{base}?1796552964508", b"a"),
                _exchange(1, f"{base}?1796552964526", b"b"),
                _exchange(2, f"{base}?1796552971127", b"c"),
            ]
        )
    )
    served = [matcher.match("GET", f"{base}?1796552964508") for _ in range(2)]
    assert [(m.kind, m.exchange.body) for m in served] == [(MatchKind.EXACT, b"a"), (MatchKind.FUZZY, b"b")]
    assert matcher.match("GET", f"{base}?1796552971108").exchange.body == b"c"
    assert (
        matcher.match("GET", f"{base}?1796552964508").exchange.body == b"a"
    )  # nothing left: the exact one again
    assert is_volatile("1796552964508", "") and not is_volatile("1796552964508", "x")


def test_cache_busters_and_clock_values_are_ignored() -> None:
    archive = Archive(
        [
            _exchange(0, "http://shop.test/api/reviews?product=tea&_=1768469400000", b"tea"),
            _exchange(1, "http://shop.test/api/reviews?product=mug&_=1768469400001", b"mug"),
        ]
    )
    matcher = Matcher(archive)
    match = matcher.match("GET", "http://shop.test/api/reviews?_=1799999999999&product=mug")
    assert (match.kind, match.exchange.body) == (MatchKind.FUZZY, b"mug")
    assert matcher.match("GET", "http://shop.test/api/reviews?product=tea&t=abc&cb=7").exchange.body == b"tea"
    assert all(
        is_volatile(n, v)
        for n, v in [
            ("_", "1"),
            ("ts", "x"),
            ("cachebust", "1"),
            ("utm_source", "m"),
            ("since", "1768469400"),
            ("r", "0.12345678"),
        ]
    )
    assert not any(
        is_volatile(n, v) for n, v in [("product", "tea"), ("page", "2"), ("id", "1234567890123456")]
    )


def test_post_bodies_match_by_fields_in_any_order_and_redacted_values_match_anything() -> None:
    form = "application/x-www-form-urlencoded"
    archive = Archive(
        [
            _exchange(
                0,
                "http://a.test/login",
                b"ok",
                "POST",
                request_body=f"user=ann&password={REDACTED}".encode(),
                request_type=form,
            ),
            _exchange(
                1,
                "http://a.test/search",
                b"tea",
                "POST",
                request_body=b'{"q": "tea", "page": 1}',
                request_type="application/json",
            ),
            _exchange(
                2,
                "http://a.test/search",
                b"mug",
                "POST",
                request_body=b'{"q": "mug", "page": 1}',
                request_type="application/json",
            ),
        ]
    )
    matcher = Matcher(archive)
    login = matcher.match("POST", "http://a.test/login", b"password=hunter2&user=ann", form)
    assert (login.kind, login.exchange.body) == (MatchKind.FUZZY, b"ok")
    search = matcher.match("POST", "http://a.test/search", b'{"page": 1, "q": "mug"}', "application/json")
    assert (search.kind, search.exchange.body) == (MatchKind.FUZZY, b"mug")
    exact = matcher.match("POST", "http://a.test/search", b'{"q": "tea", "page": 1}', "application/json")
    assert (exact.kind, exact.exchange.body) == (MatchKind.EXACT, b"tea")
    other_user = matcher.match("POST", "http://a.test/login", b"user=bob&password=x", form)
    assert other_user.kind is MatchKind.NEAREST


def test_a_body_the_recorder_did_not_keep_matches_any_body() -> None:
    archive = Archive(
        [
            _exchange(
                0,
                "http://shop.test/cart/add",
                method="POST",
                status=303,
                redirect_url="http://shop.test/cart",
            )
        ]
    )
    match = Matcher(archive).match(
        "POST", "http://shop.test/cart/add", b"product=mug&qty=3", "application/x-www-form-urlencoded"
    )
    assert match.kind is MatchKind.FUZZY


def test_nearest_candidate_shares_the_most_parameters() -> None:
    archive = Archive(
        [
            _exchange(0, "http://a.test/list?cat=tea&sort=price&page=1", b"first"),
            _exchange(1, "http://a.test/list?cat=tea&sort=name&page=2", b"second"),
            _exchange(2, "http://b.test/list?cat=tea&sort=price&page=3", b"other host"),
        ]
    )
    match = Matcher(archive).match("GET", "http://a.test/list?cat=tea&sort=price&page=3")
    assert (match.kind, match.exchange.body) == (MatchKind.NEAREST, b"first")


def test_unmatched_requests_are_counted_and_get_an_error() -> None:
    matcher = Matcher(
        Archive([_exchange(0, "http://a.test/list?x=1"), _exchange(1, "http://a.test/gone", status=0)])
    )
    assert matcher.match("GET", "http://a.test/elsewhere").kind is MatchKind.UNMATCHED
    assert matcher.match("POST", "http://a.test/list?x=1").kind is MatchKind.UNMATCHED  # another method
    gone = matcher.match("GET", "http://a.test/gone")  # never got a response: it fails again, as recorded
    assert gone.kind is MatchKind.EXACT and gone.exchange is not None and gone.exchange.status == 0
    assert matcher.counts[MatchKind.UNMATCHED] == 2
    reply = unmatched_reply("GET", "http://a.test/elsewhere")
    assert reply.status == 404 and b"not in the archive" in reply.body


def test_served_headers_drop_framing_and_redacted_values() -> None:
    exchange = _exchange(
        0,
        "http://a.test/",
        b"<p>hi</p>",
        headers=(
            ("Content-Type", "text/html"),
            ("Content-Length", "999"),
            ("Content-Encoding", "gzip"),
            ("Set-Cookie", REDACTED),
            ("Cache-Control", "no-cache"),
        ),
    )
    reply = reply_for(exchange)
    assert reply.headers == {"content-type": "text/html", "cache-control": "no-cache"}
    assert (reply.status, reply.body) == (200, b"<p>hi</p>")


def test_redirects_point_at_the_recorded_target() -> None:
    moved = _exchange(0, "http://a.test/old", status=301, headers=(("Location", "/new?x=1"),))
    assert redirect_target(moved, "http://a.test/old") == "http://a.test/new?x=1"
    see_other = _exchange(
        1, "http://a.test/cart/add", method="POST", status=303, redirect_url="http://a.test/cart"
    )
    assert redirect_target(see_other, "http://a.test/cart/add") == "http://a.test/cart"
    assert redirect_target(_exchange(2, "http://a.test/"), "http://a.test/") is None
    assert [redirected_method(s, "POST") for s in (301, 303, 307)] == ["GET", "GET", "POST"]


# ---------------------------------------------------------------- fidelity (pure)


def _jpeg(color: tuple[int, int, int], patch: tuple[int, int, int] | None = None) -> bytes:
    image = Image.new("RGB", (64, 64), color)
    if patch:
        image.paste(patch, (0, 0, 16, 16))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=80)
    return out.getvalue()


def test_pixel_difference_counts_changed_pixels_beyond_jpeg_noise() -> None:
    white, patched = _jpeg((255, 255, 255)), _jpeg((255, 255, 255), (0, 0, 0))
    assert pixel_difference(white, white) == 0.0
    assert 0.05 < pixel_difference(white, patched) < 0.1  # a 16x16 patch of 64x64 is 6.25 %
    assert pixel_difference(_jpeg((200, 200, 200)), _jpeg((203, 203, 203))) == 0.0  # within the tolerance


def test_step_comparison_diffs_trees_and_counts_missing_steps() -> None:
    recorded = [
        StepView(0, "http://a.test/", '[1] main\n\t[2] link "Tea"', "s0"),
        StepView(1, "http://a.test/tea", "x", "s1"),
    ]
    replayed = [StepView(0, "http://a.test/", '[7301] main\n\t[4410] link "Mug"', "s0")]
    steps = compare_steps(recorded, replayed, screenshot_differ({"s0": _jpeg((1, 2, 3))}))
    assert [(s.url_equal, s.tree_equal, s.screenshot_diff) for s in steps] == [
        (True, False, 0.0),
        (False, False, None),
    ]
    assert '-\tlink "Tea"' in steps[0].tree_diff and '+\tlink "Mug"' in steps[0].tree_diff
    assert steps[0].tree_change == (
        'first difference at line 2 (in main): recorded `link "Tea"`, replayed '
        '`link "Mug"`; 1 element(s) only in the recording: link "Tea"; '
        '1 element(s) only in the replay: link "Mug"'
    )
    assert steps[1].tree_change == "(step missing in the replay)"
    episode = EpisodeFidelity(
        task_id="t", source_episode="a", replay_episode="b", recorded_steps=2, replayed_steps=1, steps=steps
    )
    assert episode.fidelity == 0.0 and summarize([episode])["steps"] == 2


def test_trees_compare_by_what_they_show_not_by_ids_or_quoting() -> None:
    """A tree stored with first-seen ids and Playwright's YAML quoting equals today's rendering of
    the same page; a changed text deep inside is named with the elements it sits in."""
    old = '[1] main\n\t[3] \'link "Next: Setup"\'\n\t\t/url: /setup\n\t[4] paragraph: "Rating: 4.5"'
    new = '[5120] main\n\t[8841] link "Next: Setup"\n\t\t/url: /setup\n\t[2210] paragraph: Rating: 4.5'
    changed = new.replace("4.5", "4.6")
    steps = compare_steps(
        [StepView(0, "http://a.test/", old, None), StepView(1, "http://a.test/", new, None)],
        [StepView(0, "http://a.test/", new, None), StepView(1, "http://a.test/", changed, None)],
        screenshot_differ({}),
    )
    assert [(s.tree_equal, s.tree_diff, s.tree_change) for s in steps[:1]] == [(True, "", "")]
    assert not steps[1].tree_equal
    assert steps[1].tree_change == (
        "first difference at line 4 (in main): recorded `paragraph: Rating: 4.5`, "
        "replayed `paragraph: Rating: 4.6`; 1 element(s) only in the recording: "
        "paragraph: Rating: 4.5; 1 element(s) only in the replay: paragraph: Rating: 4.6"
    )


# ---------------------------------------------------------------- real replays


@pytest.fixture(scope="module")
def drift0(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunSummary]:
    """The tasks recorded at drift 0 with the oracle (the store is shared: tests add runs only)."""
    store = tmp_path_factory.mktemp("replay") / "store"
    summary = record_run(Store.open(store, create=True), RecordConfig(task_ids=TASKS))
    assert [e.status for e in summary.episodes] == ["completed"] * len(TASKS)
    return store, summary


class CountingWeb:
    """The fixture web at drift 3 with every request it receives counted."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, str]] = []
        self.web = FixtureWeb(drift=3)
        serve = self.web.dispatch

        def dispatch(host: str, request: Request) -> Response:
            self.hits.append((host, request.path))
            return serve(host, request)

        self.web.dispatch = dispatch  # type: ignore[method-assign]

    def browser(self) -> BrowserConfig:
        """A browser whose *.mmina.test names reach this live server."""
        return BrowserConfig(extra_args=tuple(self.web.chromium_args()))


@pytest.fixture(scope="module")
def live() -> Iterator[CountingWeb]:
    counting = CountingWeb()
    counting.web.start()
    try:
        yield counting
    finally:
        counting.web.stop()


def test_the_drifted_live_web_is_reachable_from_a_browser(live: CountingWeb) -> None:
    """So the zero below means the replay did not ask, not that it could not reach the site."""
    session = BrowserSession(live.browser())
    try:
        browser = session.episode(None)
        browser.open(("http://wiki.mmina.test/kiwix/",))
        browser.close()
    finally:
        session.close()
    assert ("wiki.mmina.test", "/kiwix/") in live.hits
    live.hits.clear()


def test_a_live_rerun_at_drift_3_diverges(drift0: tuple[Path, RunSummary]) -> None:
    store, source = drift0
    rerun = record_run(
        Store.open(store, create=True),
        RecordConfig(
            task_ids=TASKS, agent="replay", drift=3, agent_settings=AgentSettings(from_run=source.run_id)
        ),
    )
    summary = summarize(compare_runs(Store.open(store), source.run_id, rerun.run_id))
    assert summary["steps"] == sum(e.n_steps for e in source.episodes)
    assert summary["tree_equal"] == 0 and summary["fidelity"] == 0.0  # measured: every tree changed
    assert summary["screenshots_identical"] == 0.0


def test_replay_reproduces_the_recording_without_touching_the_live_web(
    drift0: tuple[Path, RunSummary], live: CountingWeb
) -> None:
    store, source = drift0
    live.hits.clear()
    report = replay_run(Store.open(store), source.run_id, browser=live.browser())
    assert live.hits == []
    summary = summarize(report.episodes)
    steps = sum(e.n_steps for e in source.episodes)
    assert (summary["steps"], summary["url_equal"], summary["tree_equal"], summary["fidelity"]) == (
        steps,
        steps,
        steps,
        1.0,
    )
    assert summary["screenshots_identical"] >= 0.99
    assert summary["requests"].unmatched == 0 and summary["requests"].exact > 0
    shop = next(e for e in report.episodes if e.task_id == "shopping/6")
    assert (shop.requests.fuzzy, shop.requests.nearest) == (0, 0), (
        "the POST is matched exactly by its recorded body"
    )
    run = Store.open(store).read("runs", run_id=report.replay_run).to_pylist()[0]
    config = json.loads(run["config_json"])
    assert (run["agent"], config["mode"], config["source_run"]) == ("replay", "replay", source.run_id)


def test_redirects_replay_without_playwrights_private_redirect(
    drift0: tuple[Path, RunSummary], live: CountingWeb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback for a Playwright without ``Route._redirect_navigation_request``: a page that
    calls ``location.replace`` gives the same steps (the POST answered 303 in shopping/6)."""
    from playwright._impl.network import Route as RouteImpl

    monkeypatch.delattr(RouteImpl, "_redirect_navigation_request")
    store, source = drift0
    episode = next(e.episode_id for e in source.episodes if e.task_id == "shopping/6")
    live.hits.clear()
    report = replay_run(Store.open(store), episode_id=episode, browser=live.browser())
    assert live.hits == [] and report.fidelity == 1.0
    assert report.episodes[0].steps[-1].replayed_url == "http://shop.mmina.test/cart"


def _damage_one_tree(store: Path, episode_id: str) -> None:
    """Make the recording disagree with what the archive serves (a step's stored tree edited)."""
    path = next((store / "steps").glob(f"run_id=*/{episode_id}*.parquet"))
    table = pq.read_table(path)
    trees = table.column("tree_text").to_pylist()
    trees[1] = trees[1].replace("Add to cart", "Add to basket")
    column = table.schema.get_field_index("tree_text")
    table = table.set_column(column, table.schema.field(column), pa.array(trees, pa.string()))
    pq.write_table(table, path)


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_min_fidelity_sets_the_exit_code(drift0: tuple[Path, RunSummary], tmp_path: Path) -> None:
    store, source = drift0
    episode = next(e.episode_id for e in source.episodes if e.task_id == "shopping/6")
    passed = invoke(
        "replay", "--episode", episode, "--store", str(store), "--min-fidelity", "1", "--format", "json"
    )
    assert passed.exit_code == 0, passed.output
    assert json.loads(passed.output[passed.output.index("{") :])["passed"] is True
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    _damage_one_tree(copy, episode)
    failed = invoke("replay", "--episode", episode, "--store", str(copy), "--min-fidelity", "0.9")
    assert failed.exit_code == 1
    assert "Error: fidelity 66.7% is below --min-fidelity 90.0%" in failed.output
    # the differing part is named (by role and name), and the diff of the lines without ids shown
    assert "tree: first difference at line" in failed.output
    assert 'element(s) only in the recording: button "Add to basket"' in failed.output
    assert '-\t\t\tbutton "Add to basket"' in failed.output


class OffArchive:
    """A new agent that visits a product the recorded run never opened, then stops."""

    def __init__(self) -> None:
        self.calls = 0

    def act(self, observation: Observation) -> AgentReply:
        self.calls += 1
        if self.calls == 1:
            return AgentReply(output="goto [http://shop.mmina.test/product/knit-beanie]")
        return AgentReply(output=f"stop [{observation.title}]")


def test_a_new_agent_on_the_archive_reports_coverage_gaps(drift0: tuple[Path, RunSummary]) -> None:
    store, source = drift0
    result = invoke(
        "replay",
        "--run",
        source.run_id,
        "--store",
        str(store),
        "--agent",
        "tests.test_replay:OffArchive",
        "--task",
        "normal/1",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    assert report["coverage_gaps"] == ["GET http://shop.mmina.test/product/knit-beanie"]
    episode = report["episodes"][0]
    assert episode["task_id"] == "normal/1" and episode["requests"]["unmatched"] == 1
    assert episode["requests"]["exact"] >= 1, "the start page still came from the archive"
    run = Store.open(store).read("runs", run_id=report["replay_run"]).to_pylist()[0]
    assert (run["agent"], json.loads(run["config_json"])["mode"]) == ("tests.test_replay:OffArchive", "agent")


def test_unknown_sources_are_one_line_errors(drift0: tuple[Path, RunSummary]) -> None:
    store = str(drift0[0])
    for args, message in (
        (("--run", "nope"), "Error: no run 'nope' in "),
        (("--episode", "nope"), "Error: no episode 'nope' in "),
    ):
        result = invoke("replay", *args, "--store", store)
        assert result.exit_code == 1 and result.output.startswith(message) and result.output.count("\n") == 1
    both = invoke("replay", "--run", "a", "--episode", "b", "--store", store)
    assert both.exit_code == 2 and "exactly one source" in both.output
