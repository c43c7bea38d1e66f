"""Stores on object storage, against a real S3-compatible server (moto, in its own process).

Every command on ``s3://bucket/prefix`` after a real recording (Chromium against the fixture
web); crashes at any moment, including between an episode's steps object and its episodes
object; writers in several processes on one prefix, racing for one run and for one episode
id; append-only writes; no credential ever stored; one-line errors for bad URLs and
credentials. No mocks: the one fault injected is a writer process that kills itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from mmina.cli import cli
from mmina.errors import AlreadyExistsError, MminaError, StoreError
from mmina.store import Store, inspect, leftovers, objects
from mmina.store.inspect import store_info, verify_store
from mmina.store.objects import ObjectPath
from mmina.store.schema import SCHEMA_VERSION
from mmina.store.sql import run_query
from tests.heavy import sized
from tests.s3_server import ACCESS_KEY, SECRET_KEY, S3Server
from tests.sql_attacks import CANARY, OTHER, leaks, outside_reads, statements, wrapped
from tests.store_helpers import REPO_ROOT, begin, write_episode
from tests.test_store_robustness import spawn, wait_for_line

BUCKET = "mmina-test"
V = f".v{SCHEMA_VERSION}.parquet"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """One server for the module, its bucket made, and the environment pointing at it."""
    with S3Server() as server, pytest.MonkeyPatch.context() as patch:
        server.make_bucket(BUCKET)
        for name, value in server.env.items():
            patch.setenv(name, value)
        yield server


@pytest.fixture
def url(s3: S3Server) -> str:
    """A fresh prefix of the bucket for each test."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"


def mmina(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real command line in its own process (the environment holds the endpoint and keys)."""
    return subprocess.run(
        [sys.executable, "-m", "mmina", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
    )


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env)


def sql(store: Store, query: str) -> list[tuple]:
    return run_query(store, query).rows


# -- every command on a really recorded store ------------------------------------------------


@pytest.fixture(scope="module")
def recorded(s3: S3Server) -> str:
    """normal/1 and normal/2 recorded by ``mmina record`` with two worker processes, each
    reopening the store from its URL."""
    location = f"s3://{BUCKET}/recorded"
    proc = mmina(
        "record",
        "--task",
        "normal/1,normal/2",
        "--workers",
        "2",
        "--run-id",
        "r1",
        "--store",
        location,
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["store"] == location and [e["status"] for e in summary["episodes"]] == ["completed"] * 2
    return location


def test_sql_report_rescore_info_verify_on_a_recorded_s3_store(recorded: str) -> None:
    """The reading commands in this process (the recording was ``mmina record``'s own): each
    opens the store from its URL as a command line does."""
    rows = json.loads(
        invoke(
            "sql",
            "select task_id, n_steps, worker from episodes order by task_id",
            "--store",
            recorded,
            "--format",
            "json",
        ).stdout
    )
    assert [r["task_id"] for r in rows] == ["normal/1", "normal/2"] and all(r["n_steps"] > 0 for r in rows)
    steps = sql(Store.open(recorded), "select count(*) from steps")[0][0]
    assert steps == sum(r["n_steps"] for r in rows)
    report = invoke("report", "--store", recorded, "--run", "r1", "--format", "json")
    assert report.exit_code == 0, report.output
    assert json.loads(report.stdout)["tasks"] == 2
    rescore = invoke("rescore", "--store", recorded, "--evaluator", "hops", "--format", "json")
    assert rescore.exit_code == 0, rescore.output
    assert len(json.loads(rescore.stdout)["episodes"]) == 2
    info = json.loads(invoke("store", "info", "--store", recorded, "--format", "json").stdout)
    assert info["root"] == recorded and info["episodes"] == 2 and info["steps"] == steps
    verify = invoke("store", "verify", "--store", recorded)
    assert verify.exit_code == 0 and verify.stdout.strip().endswith(f"checked in {recorded}: OK"), (
        verify.output
    )


# -- nothing left running at exit (issue 35, item 1) ------------------------------------------


@pytest.fixture(scope="module")
def sixty(s3: S3Server) -> str:
    """A finished store of 66 objects: 16 episodes of steps, requests, a pack and a commit."""
    location = f"s3://{BUCKET}/sixty"
    store = Store.open(location, create=True)
    begin(store, "r1")
    for index in range(16):
        write_episode(store, "r1", f"ep{index}", [os.urandom(50_000)], n_steps=3, n_requests=2)
    assert len([key for key in s3.objects(BUCKET) if key.startswith(f"{BUCKET}/sixty/")]) >= 60
    return location


@pytest.mark.timeout(1800)  # twenty commands on a loaded machine
@pytest.mark.parametrize("times", [1, pytest.param(20, marks=pytest.mark.heavy)])
def test_verify_on_s3_exits_0_every_time(sixty: str, times: int) -> None:
    """It aborted after its report in 4 runs of 8 ("terminate called without an active
    exception", exit 134): Arrow's threads called into Python (files read through fsspec) as
    the interpreter finalized. One run by default, twenty with MMINA_HEAVY=1."""
    for _ in range(times):
        verify = mmina("store", "verify", "--store", sixty)
        assert (verify.returncode, verify.stderr) == (0, ""), verify.stderr
        assert verify.stdout.strip() == f"66 files checked in {sixty}: OK"


LIVING_AT_EXIT = """
import atexit, sys, threading
atexit.register(lambda: print("alive:", ",".join(sorted(t.name for t in threading.enumerate())), flush=True))
sys.argv = ["mmina", *sys.argv[1:]]
from mmina.cli import main
main()
"""


@pytest.mark.parametrize(
    "command",
    [("store", "verify"), pytest.param(("sql", "select count(*) from steps"), marks=pytest.mark.heavy)],
)
def test_no_thread_of_the_object_store_outlives_a_command(sixty: str, command: tuple[str, ...]) -> None:
    """The clients' connections and fsspec's event loop are ended before the interpreter's
    teardown, which would stop them mid-way (``mmina.store.objects.close_filesystems``)."""
    done = subprocess.run(
        [sys.executable, "-c", LIVING_AT_EXIT, *command, "--store", sixty],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("alive: MainThread"), (
        done.stdout,
        done.stderr,
    )


def test_verify_reads_each_file_once_and_arrow_never_calls_into_python(
    sixty: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each file is fetched whole and decoded from memory Arrow owns: no fsspec file is opened
    for Arrow (whose threads would read it through Python), and no file twice."""
    import fsspec.spec

    opened: list[str] = []
    fetched: list[str] = []
    real_open, real_read = fsspec.spec.AbstractFileSystem.open, objects.ObjectBackend.read_bytes
    monkeypatch.setattr(
        fsspec.spec.AbstractFileSystem,
        "open",
        lambda self, path, *a, **k: (opened.append(path), real_open(self, path, *a, **k))[1],
    )
    monkeypatch.setattr(
        objects.ObjectBackend,
        "read_bytes",
        lambda self, path: (fetched.append(str(path)), real_read(self, path))[1],
    )
    report = verify_store(Store.open(sixty))
    assert report.ok and report.files_checked == 66
    files = [path for path in fetched if path.endswith(".parquet")]
    assert opened == [] and len(files) == len(set(files)) == 66


def test_replay_reads_its_archive_from_s3_and_writes_its_run_there(recorded: str) -> None:
    proc = mmina("replay", "--run", "r1", "--store", recorded, "--format", "json", "--run-id", "replayed")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)["summary"]
    assert summary["fidelity"] == 1.0 and summary["episodes"] == 2, summary
    store = Store.open(recorded)
    assert sql(store, "select count(*) from episodes where run_id = 'replayed'") == [(2,)]
    assert verify_store(store).ok


def test_compaction_is_refused_on_object_storage_in_one_line(recorded: str) -> None:
    proc = mmina("store", "compact", "--store", recorded)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "compact works on local stores only" in proc.stderr


def test_no_credential_reaches_the_store(s3: S3Server, recorded: str) -> None:
    objects = s3.objects(BUCKET)
    assert any("/steps/" in key for key in objects)
    for key, data in objects.items():
        for secret in (ACCESS_KEY, SECRET_KEY):
            assert secret.encode() not in data and secret not in key, key
    config = sql(Store.open(recorded), "select config_json from runs")
    assert config and all(ACCESS_KEY not in c and SECRET_KEY not in c for (c,) in config)


def test_a_url_with_credentials_is_refused_before_anything_is_written(s3: S3Server, url: str) -> None:
    bucket_path = url.removeprefix("s3://")
    proc = mmina("record", "--task", "normal/1", "--store", f"s3://{ACCESS_KEY}:{SECRET_KEY}@{bucket_path}")
    assert proc.returncode == 1 and proc.stderr.startswith("Error: the store URL must not carry credentials")
    assert SECRET_KEY not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    assert not [key for key in s3.objects(BUCKET) if key.startswith(bucket_path)]


def test_imports_write_to_s3(url: str) -> None:
    mind2web = REPO_ROOT / "tests" / "data" / "mind2web" / "sample.json"
    result = invoke(
        "import", "mind2web", str(mind2web), "--store", url, "--run-id", "m2w", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    harness = REPO_ROOT / "tests" / "data" / "harness" / "results"
    result = invoke(
        "import", "harness", str(harness), "--store", url, "--run-id", "harness", "--format", "json"
    )
    assert result.exit_code == 0, result.output
    store = Store.open(url)
    assert {run for (run,) in sql(store, "select distinct run_id from episodes")} == {"m2w", "harness"}
    assert sql(store, "select count(*) from steps where run_id = 'm2w'")[0][0] > 0
    assert verify_store(store).ok


# -- crashes ---------------------------------------------------------------------------------


def test_a_sigkilled_recording_leaves_only_whole_episodes(s3: S3Server, url: str) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mmina",
            "record",
            "--task",
            "normal/1,normal/2,normal/3",
            "--run-id",
            "k",
            "--store",
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
    )
    try:
        _wait_for_episodes(url, 1, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    store = Store.open(url)
    episodes = sql(store, "select episode_id, n_steps from episodes")
    assert 1 <= len(episodes) < 3
    for episode_id, n_steps in episodes:
        assert sql(store, f"select count(*) from steps where episode_id = '{episode_id}'") == [(n_steps,)]
    problems = verify_store(store).problems
    # what a kill may leave: files of an episode never committed, and a committed episode whose
    # verdicts were not written yet (the kill fell between the two; --resume adds them)
    assert all(p.kind in ("orphan", "unscored") for p in problems), problems
    resumed = mmina(
        "record", "--task", "normal/1,normal/2,normal/3", "--run-id", "k", "--resume", "--store", url
    )
    assert resumed.returncode == 0, resumed.stderr
    assert not [p for p in verify_store(Store.open(url)).problems if p.kind == "unscored"]
    assert sql(Store.open(url), "select task_id, count(*) from episodes group by 1 order by 1") == [
        ("normal/1", 1),
        ("normal/2", 1),
        ("normal/3", 1),
    ]
    verify = mmina("store", "verify", "--store", url)
    assert verify.returncode == 0, verify.stdout  # what the kill left is young: a commit may be under way


def _wait_for_episodes(url: str, count: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if len(Store.open(url).files("episodes")) >= count:
                return
        except StoreError:
            pass  # the store is not there yet
        time.sleep(0.2)
    raise AssertionError(
        f"no episode committed in time: {proc.stderr.read().decode() if proc.stderr else ''}"
    )


KILL_BEFORE_EPISODES = """
import signal
from mmina.store import Store
from mmina.store.objects import ObjectBackend
from tests.store_helpers import begin, write_episode
store = Store.open({url!r}, create=True)
begin(store, "r1")
write_episode(store, "r1", "ep-done", [b"first episode"], n_steps=2)
put = ObjectBackend.put_new
def put_then_die(self, path, data):
    if "/episodes/" in str(path):  # the commit point: die just before it
        os.kill(os.getpid(), signal.SIGKILL)
    put(self, path, data)
ObjectBackend.put_new = put_then_die
write_episode(store, "r1", "ep-killed", [b"never seen"], n_steps=3, n_requests=1)
"""


def test_a_writer_killed_before_its_episodes_object_leaves_nothing_visible(s3: S3Server, url: str) -> None:
    proc = spawn(KILL_BEFORE_EPISODES.format(url=url))
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    keys = [key for key in s3.objects(BUCKET) if f"/ep-killed{V}" in key]
    assert sorted(key.split("/")[2] for key in keys) == ["blobs", "requests", "steps"], (
        "landed before the kill"
    )

    store = Store.open(url)
    assert sql(store, "select episode_id from episodes") == [("ep-done",)]
    assert sql(store, "select distinct episode_id from steps") == [("ep-done",)]
    assert sql(store, "select distinct episode_id from requests") == []
    assert set(store.read("steps")["episode_id"].to_pylist()) == {"ep-done"}
    assert store_info(store).steps == 2
    report = verify_store(store)  # young: as far as anyone can tell, a commit under way
    assert report.ok and sorted(report.in_progress) == [f"s3://{key}" for key in sorted(keys)]
    write_episode(
        store, "r1", "ep-after", [b"never seen"], n_steps=1
    )  # the orphan pack is never deduplicated against
    assert sql(store, "select blob_packs from episodes where episode_id = 'ep-after'") == [
        ([f"blobs/ep-after{V}"],)
    ]
    assert len([key for key in s3.objects(BUCKET) if f"/ep-killed{V}" in key]) == 3, "young orphans are kept"


def test_orphans_older_than_the_grace_are_removed(
    s3: S3Server, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawn(KILL_BEFORE_EPISODES.format(url=url)).communicate(timeout=120)
    keys = sorted(
        f"s3://{key}" for key in s3.objects(BUCKET) if f"s3://{key}".startswith(url) and "/ep-killed" in key
    )
    for module in (leftovers, inspect):  # as if an hour had passed
        monkeypatch.setattr(module, "ORPHAN_GRACE_S", 0.0)
    assert sorted((p.kind, p.path) for p in verify_store(Store.open(url)).problems) == [
        ("orphan", k) for k in keys
    ]
    repaired = invoke("store", "verify", "--repair", "--store", url, "--format", "json")
    assert repaired.exit_code == 0, repaired.output
    assert sorted(item["path"] for item in json.loads(repaired.stdout)["repaired"]) == keys
    assert not [key for key in s3.objects(BUCKET) if f"s3://{key}".startswith(url) and "/ep-killed" in key]
    assert sql(Store.open(url), "select episode_id from episodes") == [("ep-done",)]


def test_an_abandoned_multipart_upload_is_aborted(
    s3: S3Server, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a writer killed while uploading a pack larger than the client's part size leaves."""
    begin(Store.open(url, create=True), "r1")
    key = f"{url.removeprefix(f's3://{BUCKET}/')}/blobs/ep-big{V}"
    client = s3.client()
    upload = client.call_s3("create_multipart_upload", Bucket=BUCKET, Key=key)
    client.call_s3(
        "upload_part",
        Bucket=BUCKET,
        Key=key,
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=b"x" * (5 << 20),
    )
    monkeypatch.setattr(objects, "UPLOAD_GRACE_S", 1e12)  # moto dates every upload 2010: as if it were young
    report = verify_store(Store.open(url))
    assert report.ok and report.in_progress == [f"s3://{BUCKET}/{key}"]
    assert (
        invoke("store", "verify", "--repair", "--store", url).exit_code == 0
    )  # a young upload is left alone
    monkeypatch.setattr(objects, "UPLOAD_GRACE_S", 0.0)  # as if its writer had been gone for hours
    assert [(p.kind, p.path) for p in verify_store(Store.open(url)).problems] == [
        ("upload", f"s3://{BUCKET}/{key}")
    ]
    assert invoke("store", "verify", "--repair", "--store", url).exit_code == 0
    assert client.call_s3("list_multipart_uploads", Bucket=BUCKET, Prefix=key).get("Uploads", []) == []


# -- the SQL sandbox on an object store ------------------------------------------------------


GUARDED = "mmina-guarded"
"""The sandbox's bucket: moto lists a whole bucket for any prefix, and the other tests' objects
would slow each of the many queries here."""


@pytest.fixture(scope="module")
def guarded(s3: S3Server) -> str:
    """A store of three episodes, with a canary object beside its prefix."""
    s3.make_bucket(GUARDED)
    location = f"s3://{GUARDED}/guarded"
    store = Store.open(location, create=True)
    begin(store, "r1")
    for index in range(3):
        write_episode(store, "r1", f"ep{index}", [b"shot %d" % index], n_steps=2, n_requests=1)
    s3.client().pipe(f"{GUARDED}/guarded-outside/canary.csv", f"secret\n{CANARY}\n".encode())
    return location


S3_READERS = sized(
    ("read_text", "read_csv", "read_parquet"),
    (
        "read_text",
        "read_blob",
        "read_csv",
        "sniff_csv",
        "read_parquet",
        "glob",
        "parquet_metadata",
        "read_json",
    ),
)
"""The table functions an attack on S3 reads through: a text, a CSV and a Parquet reader by
default (test_sql_sandbox tries every one on a local store), all of them with MMINA_HEAVY=1."""


def s3_attacks(location: str) -> list[str]:
    """The issue's write through EXPLAIN ANALYZE (and through a WITH) at committed objects, the
    marker, a new object in a table, elsewhere in the bucket; reads beside the prefix."""
    targets = [
        f"{location}/episodes/run_id=r1/ep0{V}",
        f"{location}/mmina-store.json",
        f"{location}/episodes/run_id=r1/extra{V}",
        f"mmina://episodes/run_id=r1/ep0{V}",
        f"mmina://steps/run_id=r1/extra{V}",
        f"s3://{GUARDED}/elsewhere.csv",
        "mmina://../guarded-outside/x.csv",
    ]
    writes_ = [
        wrapped(f"copy (select * from episodes) to '{target}' (format parquet)")[index]
        for target in targets
        for index in sized((2,), (2, 7))
    ]  # test_sql_sandbox tries seven wrappers
    reads = [f"s3://{GUARDED}/guarded-outside/canary.csv", "mmina://../guarded-outside/canary.csv"]
    reads_ = [query for query in outside_reads(reads) if any(f" {reader}(" in query for reader in S3_READERS)]
    return [
        *writes_,
        f"export database '{location}/x'",
        f"attach '{location}/x.db'",
        *reads_,
        f"select * from glob('s3://{GUARDED}/**')",
        "select * from glob('mmina://../**')",
    ]


def etags(s3: S3Server) -> dict[str, tuple[int, str]]:
    """Every object of the bucket with its size and ETag (a rewrite changes the ETag): one listing."""
    return {key: (info["size"], info["ETag"]) for key, info in s3.client().find(GUARDED, detail=True).items()}


@pytest.mark.timeout(1800)  # some forty queries, each listing and opening the store over HTTP
def test_sql_on_s3_writes_nothing_and_reads_nothing_outside(s3: S3Server, guarded: str) -> None:
    before, contents = etags(s3), s3.objects(GUARDED)
    for query in s3_attacks(guarded):
        result = invoke("sql", query, "--store", guarded)
        assert CANARY not in result.output, (query, result.output)  # a read may find nothing, or fail
        assert result.exit_code == 1 or not query.startswith(("explain", "with", "export", "attach")), query
        if result.exit_code:
            assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, (
                query,
                result.output,
            )
        assert etags(s3) == before, query
    assert s3.objects(GUARDED) == contents
    assert sql(Store.open(guarded), "select count(*) from episodes") == [(3,)]


@pytest.mark.timeout(1800)
@settings(
    max_examples=sized(6, 25), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=statements(
        [
            f"copy (select 1) to 's3://{GUARDED}/guarded/episodes/run_id=r1/ep0{V}'",
            "copy (select 1) to 'mmina://episodes/run_id=r1/ep9.v4.parquet'",
            f"select * from read_csv('s3://{GUARDED}/guarded-outside/canary.csv')",
            "select * from read_csv('mmina://../guarded-outside/canary.csv')",
            *OTHER,
        ]
    )
)
def test_generated_statements_on_s3(s3: S3Server, guarded: str, query: str) -> None:
    before = etags(s3)
    try:
        rows = run_query(Store.open(guarded), query, timeout_s=120).rows
    except MminaError as exc:
        assert "\n" not in str(exc) and CANARY not in str(exc)
    else:
        assert not any(leaks(value, [CANARY]) for row in rows for value in row), (query, rows)
    assert etags(s3) == before


# -- writers side by side --------------------------------------------------------------------

WRITER = """
from mmina.store import Store
from tests.store_helpers import begin, write_episode
store = Store.open({url!r}, create=True)
print("READY", flush=True)
while not os.path.exists({go!r}):
    time.sleep(0.005)
created = begin(store, "shared-run")
for i in range({episodes}):
    write_episode(store, "shared-run", f"w{k}-ep{{i}}", \
[b"common asset" * 500, b"page %d" % i * 300, b"own {k} %d" % i],
                  n_steps=3, n_requests=1)
print(created, flush=True)
"""


def test_writers_in_several_processes_share_one_prefix(url: str, tmp_path) -> None:
    go, workers, episodes = tmp_path / "go", sized(2, 3), sized(4, 8)
    procs = [spawn(WRITER.format(url=url, go=str(go), k=k, episodes=episodes)) for k in range(workers)]
    for proc in procs:
        wait_for_line(proc, "READY")
    go.touch()
    outputs = [proc.communicate(timeout=180) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * workers, [err for _, err in outputs]
    assert sorted(out.strip() for out, _ in outputs) == ["False"] * (workers - 1) + ["True"], (
        "one run, begun once"
    )

    store = Store.open(url)
    assert len(store.files("runs")) == len(store.files("tasks")) == 1
    assert sql(store, "select count(*), count(distinct episode_id) from episodes") == [
        (episodes * workers,) * 2
    ]
    assert sql(store, "select count(*) from steps") == [(3 * episodes * workers,)]
    assert sql(store, "select count(distinct sha256) from blobs") == [(1 + episodes + episodes * workers,)]
    assert verify_store(store).ok
    digests = store.read("steps", columns=["episode_id", "screenshot"]).to_pylist()
    for episode_id, packs in sql(store, "select episode_id, blob_packs from episodes"):
        wanted = {row["screenshot"] for row in digests if row["episode_id"] == episode_id}
        assert set(store.read_blobs(sorted(wanted), packs)) == wanted, episode_id


SAME_EPISODE = """
from mmina.store import Store
from tests.store_helpers import episode_row, step_row
store = Store.open({url!r})
writer = store.episode_writer("r1", "ep-same")
for index in range({steps}):
    writer.add_step(step_row(index, writer.put_blob(b"shot of writer {k} %d" % index, "image/jpeg")))
print("READY", flush=True)
while not os.path.exists({go!r}):
    time.sleep(0.001)
writer.commit(episode_row(n_steps={steps}))
"""


def test_two_writers_committing_one_episode_id_never_both_land(url: str, tmp_path) -> None:
    begin(Store.open(url, create=True), "r1")
    go = tmp_path / "go"
    procs = [spawn(SAME_EPISODE.format(url=url, go=str(go), k=k, steps=2 + k)) for k in range(2)]
    for proc in procs:
        wait_for_line(proc, "READY")
    go.touch()
    outputs = [proc.communicate(timeout=120) for proc in procs]
    codes = sorted(proc.returncode for proc in procs)
    assert codes == [0, 1], outputs
    loser = next(err for proc, (_, err) in zip(procs, outputs) if proc.returncode)
    assert "append-only" in loser.strip().splitlines()[-1]
    store = Store.open(url)
    [(n_steps,)] = sql(store, "select n_steps from episodes where episode_id = 'ep-same'")
    assert sql(store, "select count(*) from steps where episode_id = 'ep-same'") == [(n_steps,)]


def test_the_store_is_append_only(url: str) -> None:
    store = Store.open(url, create=True)
    begin(store, "r1")
    write_episode(store, "r1", "ep1", [b"x"], n_steps=2)
    with pytest.raises(StoreError, match="ep1 already exists in s3://.*append-only"):
        write_episode(store, "r1", "ep1", [b"y"], n_steps=1)
    steps = store.files("steps")[0]
    with pytest.raises(AlreadyExistsError, match=f"refusing to overwrite {steps}: the store is append-only"):
        store.backend.put(steps, b"not parquet")
    assert sql(store, "select count(*) from steps") == [(2,)] and verify_store(store).ok


# -- locations and errors --------------------------------------------------------------------


def test_an_object_path_prints_as_its_url() -> None:
    root = ObjectPath("s3:", "bucket/prefix")
    assert str(root / "blobs" / "x.parquet") == "s3://bucket/prefix/blobs/x.parquet"
    assert (root / "blobs" / "x.parquet").relative_to(root).as_posix() == "blobs/x.parquet"


def test_memory_and_file_urls_are_stores_too(tmp_path) -> None:
    memory = Store.open(f"memory://mmina-{uuid.uuid4().hex[:6]}/store", create=True)
    begin(memory, "r1")
    write_episode(memory, "r1", "ep1", [b"x"], n_steps=2)
    assert sql(memory, "select count(*) from steps") == [(2,)] and verify_store(memory).ok
    local = Store.open(f"file://{tmp_path}/store", create=True)
    begin(local, "r1")
    assert local.backend.local and (tmp_path / "store" / "mmina-store.json").exists()


@pytest.fixture(scope="module")
def strict_s3() -> Iterator[S3Server]:
    """A server that checks credentials: the test keys are not among its users."""
    with S3Server(auth=True) as server:
        yield server


@pytest.mark.parametrize(
    ("command", "location", "env", "message"),
    [
        (("record",), "s3://bkt/x", {}, "Error: access to s3://bkt/x denied: "),
        (
            ("sql", "select 1"),
            "s3://bkt/x",
            {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""},
            "Error: cannot reach s3://bkt/x: NoCredentialsError",
        ),
        (
            ("store", "info"),
            "s3://bkt/x",
            {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
            "Error: cannot reach s3://bkt/x: Endpoint",
        ),
        (("report",), "s3://", {}, "Error: the store URL 's3://' names no bucket"),
        (("store", "verify"), "nosuchfs://bkt/x", {}, "Error: unknown store URL scheme nosuchfs://"),
        (
            ("rescore", "--evaluator", "hops"),
            "s3://bkt/x?region=eu",
            {},
            "Error: the store URL s3://bkt/x takes no '?' or '#' part",
        ),
    ],
)
def test_bad_urls_and_credentials_are_one_line(
    strict_s3: S3Server, command: tuple[str, ...], location: str, env: dict[str, str], message: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mmina", *command, "--store", location],
        capture_output=True,
        text=True,
        env={**os.environ, **strict_s3.env, **env},
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(message), proc.stderr


def test_a_missing_bucket_is_named(url: str) -> None:
    result = invoke("sql", "select 1", "--store", "s3://no-such-bucket/x")
    assert result.exit_code == 1 and result.output.startswith(
        "Error: no bucket no-such-bucket for s3://no-such-bucket/x"
    )


def test_every_store_option_says_a_url_is_accepted() -> None:
    def commands(group, path):  # every command, the lazily loaded ones too
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if isinstance(command, click.Group):
                yield from commands(command, [*path, name])
            else:
                yield [*path, name], command

    with_store = [(path, c) for path, c in commands(cli, []) if any(o.name == "store_path" for o in c.params)]
    assert len(with_store) >= 10
    for path, command in with_store:
        option = next(o for o in command.params if o.name == "store_path")
        assert "s3://bucket/prefix" in option.help and "URL" in option.metavar, path
