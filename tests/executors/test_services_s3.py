"""Every table service on a table in S3 (a real moto server), run through the command line.

Real Hudi fixture tables (the ones the local suites use) are uploaded to a fresh bucket; each
service is planned by ``hoodied schedule`` and run by ``hoodied execute`` on the ``s3a://`` URI,
with the standard AWS variables as the only credentials and a real Redis lock. hudi-rs reads the
table from the same server before and after, through the metadata table and through a storage
listing: the rows must not change. Timeline files stay write-once on S3, the metadata table
compacts itself there, ``rollback`` undoes a failed attempt once its heartbeat expired, a driver
killed with SIGKILL mid-compaction is rolled back and completed by the next ``execute``,
``hoodied demo`` writes a table hudi-rs reads, a missing bucket fails in one line, and base-file
uploads the store refuses (an endpoint in front of moto that answers 403 to them, as a bucket
policy would) fail in one line with no object left under their names, while the tasks read base
files by ranged GETs only.

One local Spark session serves the module; its Python workers get the moto credentials through
``spark.executorEnv`` (a JVM started earlier in the same test process keeps the environment it
was started with).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore
import pytest
from click.testing import CliRunner, Result
from obstore.exceptions import GenericError
from obstore.store import S3Store

from hoodied.executors.engine import Session, spark_session
from hoodied.hoodie.errors import FileAlreadyExistsError
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.service.cli.main import EXIT_STORAGE, cli
from tests.executors.test_clustering import _reopen
from tests.executors.test_indexing import (
    V8,
    V8_INDEXING,
    V8_INIT,
    V8_PARTITION,
    compare_with_hudi,
    derive_pending,
    live_index_keys,
)
from tests.executors.test_rollback import CASES as ROLLBACK_CASES
from tests.executors.test_rollback import _fail_service
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.fault_proxy import Fault, FaultProxy, fault_proxy  # noqa: F401  (fixture)
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, multiset, written_mor_table
from tests.helpers.object_servers import (  # noqa: F401  (fixtures)
    S3_KEY_ID,
    S3_SECRET,
    MotoServer,
    moto_server,
    s3_env,
    upload_tree,
)
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401

PROJECT = Path(__file__).resolve().parents[2]
SKEW = ["--clock-skew-ms", "5"]
HEARTBEAT = ["--heartbeat-interval-ms", "100"]
COW = "cow/v9_txns_simple_nometa"
HUDIS_LAST_MDT_COMPACTION = "20251220210130942"  # in V8's metadata table
COMPACT_ALL = ["-o", "hoodie.compact.inline.max.delta.commits=1",
               "-o", "hoodie.compaction.strategy=UnBoundedCompactionStrategy"]


def _aws(server: MotoServer) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": S3_KEY_ID, "AWS_SECRET_ACCESS_KEY": S3_SECRET}


@pytest.fixture(scope="module")
def spark(moto_server: MotoServer) -> Iterator[Session]:  # noqa: F811
    conf = {f"spark.executorEnv.{k}": v for k, v in _aws(moto_server).items()}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _aws(moto_server).items():
            mp.setenv(key, value)
        with spark_session("local[2]", conf) as session:
            yield session


# ---------------------------------------------------------------------------- helpers


def upload(root: Path, bucket: str, prefix: str = "t") -> str:
    """The local table ``root`` copied to ``s3a://bucket/prefix``; returns that URI."""
    return upload_tree(root, bucket, prefix, scheme="s3a")


def download(uri: str, dest: Path) -> Path:
    """Every object of the table at ``uri`` copied to the local folder ``dest`` (for file-by-file checks)."""
    storage = storage_for(uri)
    for info in storage.walk():
        target = dest.joinpath(*info.path.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(storage.read(info.path))
    return dest


def objects(bucket: str) -> dict[str, str]:
    store = S3Store.from_url(f"s3://{bucket}")
    return {o["path"]: str(o["e_tag"]) for batch in obstore.list(store) for o in batch}


def hudi_rs(uri: str, server: MotoServer, *, metadata: bool, read_optimized: bool = False) -> Counter[Any]:
    """The snapshot hudi-rs reads from S3, listing through the metadata table or through storage."""
    return hudi_rs_rows(uri, options=server.hudi_rs_options(), metadata=metadata,
                        read_optimized=read_optimized)


def rows_both_ways(uri: str, server: MotoServer) -> Counter[Any]:
    """hudi-rs's rows, the same with and without the metadata table, and hoodied's own reader agrees."""
    listed = hudi_rs(uri, server, metadata=False)
    assert hudi_rs(uri, server, metadata=True) == listed
    assert multiset(HoodieTable.open(uri).to_arrow()) == listed
    assert sum(listed.values()) > 0
    return listed


def hoodied(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def timeline(uri: str) -> Timeline:
    storage = storage_for(uri)
    return Timeline.load(storage, load_table_config(storage))


def schedule(uri: str, service: str, redis: RedisServer, *options: str) -> str:
    out = hoodied("schedule", service, uri, "--lock", redis.url, *options, *SKEW)
    assert out.exit_code == 0, out.output
    t, rest = out.stdout.split(" ", 1)
    assert rest.startswith(f"{service.replace('-', ' ')} requested"), out.stdout
    return t


def execute(uri: str, redis: RedisServer, *args: str) -> Result:
    done = hoodied("execute", uri, "--lock", redis.url, "--spark", "local[2]", *HEARTBEAT, *SKEW, *args)
    assert done.exit_code == 0, done.output
    return done


def deleted_names(metadata: dict[str, Any]) -> set[str]:
    """The names of the files a clean's or a rollback's metadata says it deleted."""
    parts = metadata["partitionMetadata"].values()
    return {f.rsplit("/", 1)[-1] for p in parts for f in p["successDeleteFiles"]}


def no_leftovers(uri: str, t: str) -> None:
    """No marker and no heartbeat of ``t`` left in the bucket."""
    storage = storage_for(uri)
    assert not list(storage.walk(f".hoodie/.temp/{t}"))
    assert not storage.exists(f".hoodie/.heartbeat/{t}")


# ---------------------------------------------------------------------------- compaction


@pytest.mark.parametrize("fid", ["mor/avro/v8_trips_8i3u1d", "mor/avro/v6_trips_8i3d"])
def test_compaction_on_s3(fid: str, s3_env: MotoServer, redis_server: RedisServer,  # noqa: F811
                          spark: Session, tmp_path: Path) -> None:
    uri = upload(unzip_table(require_fixture(fid), tmp_path / "local"), s3_env.new_bucket())
    before = rows_both_ways(uri, s3_env)
    t = schedule(uri, "compaction", redis_server, *COMPACT_ALL)
    assert rows_both_ways(uri, s3_env) == before
    done = execute(uri, redis_server)
    assert done.stdout.startswith(f"{t} compaction: "), done.stdout
    inst = timeline(uri).get(t)
    assert inst is not None and inst.is_completed and inst.action is Action.COMPACTION
    assert rows_both_ways(uri, s3_env) == before
    assert hudi_rs(uri, s3_env, metadata=False, read_optimized=True) == before
    no_leftovers(uri, t)
    # the commit's file is write-once: a second create of it fails and leaves it as it was
    storage = storage_for(uri)
    state_file = timeline(uri).state_file(inst)
    first = storage.read(state_file)
    with pytest.raises(FileAlreadyExistsError):
        storage.put_if_absent(state_file, b"{}")
    assert storage.read(state_file) == first
    again = execute(uri, redis_server, "--instant", t)
    assert again.stdout.strip() == f"{t} compaction: already completed, nothing to do"


def test_compaction_then_clean_on_an_s3_table_with_a_metadata_table(
    s3_env: MotoServer, redis_server: RedisServer, spark: Session, tmp_path: Path  # noqa: F811
) -> None:
    """The clean deletes the slices the compaction replaced, in the bucket and in the MDT's listing.
    With ``hoodie.metadata.compact.max.delta.commits=1`` the MDT compacts itself (HFile base files
    streamed to S3) before the data compaction's MDT delta commit, and cleans itself later."""
    local = unzip_table(require_fixture(V8), tmp_path / "local")
    with (local / ".hoodie" / "hoodie.properties").open("a", encoding="latin-1") as props:
        props.write("hoodie.metadata.compact.max.delta.commits=1\n")
    uri = upload(local, s3_env.new_bucket())
    before = rows_both_ways(uri, s3_env)
    mdt_before = {f.path for f in storage_for(f"{uri}/.hoodie/metadata").walk() if f.name.endswith(".hfile")}
    t = schedule(uri, "compaction", redis_server, *COMPACT_ALL)
    execute(uri, redis_server)
    assert rows_both_ways(uri, s3_env) == before
    files_before = set(storage_for(uri).walk())
    c = schedule(uri, "clean", redis_server, "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1")
    done = execute(uri, redis_server)
    assert done.stdout.startswith(f"{c} clean: "), done.stdout
    gone = {f.path for f in files_before} - {f.path for f in storage_for(uri).walk()}
    deleted = {p for p in gone if not p.startswith(".hoodie/")}
    assert deleted and all(not p.endswith(f"_{t}.parquet") for p in deleted)
    inst = timeline(uri).get(c)
    assert inst is not None and inst.is_completed and inst.action is Action.CLEAN
    metadata = timeline(uri).read_commit_metadata(inst)
    assert deleted_names(metadata) == {p.rsplit("/", 1)[-1] for p in deleted}
    # the clean's MDT delta commit found one delta commit since the MDT's last compaction: compacted
    mdt = storage_for(f"{uri}/.hoodie/metadata")
    mdt_timeline = Timeline.load(mdt, load_table_config(mdt, metadata_table=True))
    (compacted,) = [i for i in mdt_timeline.completed((Action.COMPACTION, Action.COMMIT))
                    if i.requested_time > HUDIS_LAST_MDT_COMPACTION]
    new_hfiles = {f.path for f in mdt.walk() if f.name.endswith(".hfile")} - mdt_before
    assert any(p.endswith(f"_{compacted.requested_time}.hfile") for p in new_hfiles), new_hfiles
    assert rows_both_ways(uri, s3_env) == before
    no_leftovers(uri, c)


def test_clean_on_s3(s3_env: MotoServer, redis_server: RedisServer, tmp_path: Path) -> None:  # noqa: F811
    uri = upload(unzip_table(require_fixture(COW), tmp_path / "local"), s3_env.new_bucket())
    before = rows_both_ways(uri, s3_env)
    files_before = {f.path for f in storage_for(uri).walk()}
    c = schedule(uri, "clean", redis_server, "--retained", "1")
    done = execute(uri, redis_server)
    assert done.stdout.startswith(f"{c} clean: "), done.stdout
    deleted = files_before - {f.path for f in storage_for(uri).walk()}
    assert deleted and all(p.endswith(".parquet") for p in deleted)
    assert rows_both_ways(uri, s3_env) == before
    no_leftovers(uri, c)


# ---------------------------------------------------------------------------- clustering, log compaction


def test_clustering_on_s3(s3_env: MotoServer, redis_server: RedisServer, spark: Session,  # noqa: F811
                          tmp_path: Path) -> None:
    uri = upload(unzip_table(require_fixture(COW), tmp_path / "local"), s3_env.new_bucket())
    before = rows_both_ways(uri, s3_env)
    t = schedule(uri, "clustering", redis_server)
    done = execute(uri, redis_server)
    assert done.stdout.startswith(f"{t} clustering: "), done.stdout
    tl = timeline(uri)
    inst = tl.get(t)
    assert inst is not None and inst.is_completed and tl.is_clustering(inst)
    assert rows_both_ways(uri, s3_env) == before
    no_leftovers(uri, t)


def test_hudis_clustering_retried_on_an_s3_table_with_a_metadata_table(
    s3_env: MotoServer, redis_server: RedisServer, spark: Session, tmp_path: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hudi's own clustering turned into a failed attempt (its outputs and completion gone, its MDT
    delta commit left): ``execute`` rolls it back on S3 (data and MDT) and runs it again."""
    monkeypatch.setenv("TZ", "America/Chicago")  # the fixture's LOCAL timeline zone
    local = unzip_table(require_fixture("mor/avro/v9_txns_simple_meta"), tmp_path / "local")
    tl = Timeline.load(LocalStorage(str(local)), load_table_config(LocalStorage(str(local))))
    t = next(i.requested_time for i in tl.completed() if tl.is_clustering(i))
    uri = upload(local, s3_env.new_bucket())
    before = rows_both_ways(uri, s3_env)
    _reopen(local, t)
    uri = upload(local, s3_env.new_bucket())
    assert hudi_rs(uri, s3_env, metadata=False) == before
    done = execute(uri, redis_server)
    assert done.stdout.startswith(f"{t} clustering: "), done.stdout
    tl = timeline(uri)
    rollbacks = tl.completed((Action.ROLLBACK,))
    assert [tl.read_commit_metadata(r)["commitsRollback"] for r in rollbacks] == [[t]]
    assert tl.get(t).is_completed  # type: ignore[union-attr]
    assert rows_both_ways(uri, s3_env) == before
    no_leftovers(uri, t)


def test_log_compaction_on_s3(s3_env: MotoServer, redis_server: RedisServer, spark: Session,  # noqa: F811
                              tmp_path: Path) -> None:
    local = unzip_table(require_fixture("mor/avro/v9_txns_simple_nometa"), tmp_path / "local")
    for t in ("20260307135840454", "20260307135839895"):  # its clustering and compaction taken out
        for p in [*(local / ".hoodie" / "timeline").glob(f"{t}*"), *local.rglob(f"*_{t}.parquet")]:
            p.unlink()
    uri = upload(local, s3_env.new_bucket())
    before = rows_both_ways(uri, s3_env)
    t = schedule(uri, "log-compaction", redis_server, "-o", "hoodie.log.compaction.blocks.threshold=2")
    done = execute(uri, redis_server)
    assert done.stdout.startswith(f"{t} logcompaction: "), done.stdout
    names = sorted(f.name for f in storage_for(uri).list(".hoodie/timeline") if f.name.startswith(t))
    assert names[:2] == [f"{t}.logcompaction.inflight", f"{t}.logcompaction.requested"]
    assert len(names) == 3 and names[2].startswith(f"{t}_") and names[2].endswith(".deltacommit")
    assert rows_both_ways(uri, s3_env) == before
    no_leftovers(uri, t)


@pytest.mark.parametrize("fid,action", ROLLBACK_CASES)
def test_rollback_command_on_s3(
    fid: str, action: str, s3_env: MotoServer, redis_server: RedisServer, tmp_path: Path  # noqa: F811
) -> None:
    """Hudi's completed service made a failed attempt (its completed file dropped), uploaded with
    a fresh heartbeat: ``rollback`` refuses while the heartbeat is alive by the given interval, then
    deletes the attempt's files from the bucket; the plan is requested again, the rows unchanged."""
    local = unzip_table(require_fixture(fid), tmp_path / "local")
    t, outputs = _fail_service(local, action)
    uri = upload(local, s3_env.new_bucket())
    rows = hudi_rs(uri, s3_env, metadata=False)
    storage = storage_for(uri)
    requested = storage.read(f".hoodie/timeline/{t}.{action}.requested")
    storage.put(f".hoodie/.heartbeat/{t}", b"")
    args = ["rollback", uri, "--instant", t, "--lock", redis_server.url, *SKEW]
    alive = hoodied(*args, "--heartbeat-interval-ms", "2000")
    assert alive.exit_code != 0 and "has a live heartbeat" in alive.stderr, alive.output
    assert all(storage.exists(o) for o in outputs)
    time.sleep(4.5)  # two missed beats of 2 s (the store's times are whole seconds)
    by_default = hoodied(*args)  # Hudi's default interval, 60 s: still alive
    assert by_default.exit_code != 0 and "has a live heartbeat" in by_default.stderr, by_default.output
    done = hoodied(*args, "--heartbeat-interval-ms", "2000")
    assert done.exit_code == 0, done.output
    assert not any(storage.exists(o) for o in outputs)
    inst = timeline(uri).get(t)
    assert inst is not None and inst.state is State.REQUESTED
    assert storage.read(f".hoodie/timeline/{t}.{action}.requested") == requested
    assert hudi_rs(uri, s3_env, metadata=False) == rows
    assert not storage.exists(f".hoodie/.heartbeat/{t}")


# ---------------------------------------------------------------------------- indexing


def test_hudis_indexing_on_s3_builds_what_hudi_built(
    s3_env: MotoServer, redis_server: RedisServer, spark: Session, tmp_path: Path  # noqa: F811
) -> None:
    """Hudi's secondary-index build undone (``derive_pending``), uploaded, executed on S3: the
    partition built in the bucket equals Hudi's own, file by file."""
    hudis = unzip_table(require_fixture(V8), tmp_path / "hudi")
    local = unzip_table(require_fixture(V8), tmp_path / "local")
    derive_pending(local, V8_INDEXING, drop_later=True)
    uri = upload(local, s3_env.new_bucket())
    before = rows_both_ways(uri, s3_env)
    done = execute(uri, redis_server)
    assert done.stdout.startswith(f"{V8_INDEXING} indexing: "), done.stdout
    inst = timeline(uri).get(V8_INDEXING)
    assert inst is not None and inst.is_completed
    assert rows_both_ways(uri, s3_env) == before
    copy = download(uri, tmp_path / "after")
    figures = compare_with_hudi(hudis, copy, V8_PARTITION, V8_INIT, V8_INDEXING)
    assert figures["records"] == 8
    assert len(live_index_keys(copy, V8_PARTITION)) == 8
    no_leftovers(uri, V8_INDEXING)


# ---------------------------------------------------------------------------- demo


def test_demo_on_s3_then_compaction_and_clean(s3_env: MotoServer, redis_server: RedisServer,  # noqa: F811
                                              spark: Session, tmp_path: Path) -> None:
    """``hoodied demo s3://bucket/t`` writes a table hudi-rs reads (as a local demo table reads), and
    the daemon's demo work (compaction, then the clean of the replaced slices) runs on it."""
    bucket = s3_env.new_bucket()
    uri = f"s3://{bucket}/demo"
    made = hoodied("demo", uri, "--json")
    assert made.exit_code == 0, made.output
    summary = json.loads(made.stdout)
    assert summary["path"] == uri and summary["rows"] > 0
    rows = rows_both_ways(uri, s3_env)
    assert sum(rows.values()) == summary["rows"]
    local = hoodied("demo", str(tmp_path / "demo"), "--json")
    assert local.exit_code == 0, local.output
    assert multiset(HoodieTable.open(str(tmp_path / "demo")).to_arrow()).total() == summary["rows"]
    again = hoodied("demo", uri)
    assert again.exit_code == 1 and again.output.count("\n") == 1 and "already holds" in again.output
    schedule(uri, "compaction", redis_server)  # six delta commits: due by Hudi's default trigger
    execute(uri, redis_server)
    schedule(uri, "clean", redis_server, "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1")
    execute(uri, redis_server)
    assert rows_both_ways(uri, s3_env) == rows
    assert hudi_rs(uri, s3_env, metadata=False, read_optimized=True) == rows
    assert not [f for f in storage_for(uri).walk() if ".log." in f.name]  # every slice compacted, cleaned


# ---------------------------------------------------------------------------- kill -9


def _outputs(uri: str, t: str) -> set[str]:
    return {f.path for f in storage_for(uri).walk() if f.name.endswith(f"_{t}.parquet")}


def test_kill_9_during_a_compaction_on_s3(
    s3_env: MotoServer, redis_server: RedisServer, spark: Session, tmp_path: Path  # noqa: F811
) -> None:
    """A driver SIGKILLed after one task uploaded its base file and while the next one runs: the
    table reads as before; ``execute`` rolls the attempt back and runs it again, and nothing of the
    killed attempt is left in the bucket."""
    root = tmp_path / "local"
    written_mor_table(root, 9)
    uri = upload(root, s3_env.new_bucket())
    before = rows_both_ways(uri, s3_env)
    t = schedule(uri, "compaction", redis_server, *COMPACT_ALL)
    tl = timeline(uri)
    plan = tl.read_plan(tl.get(t))  # type: ignore[arg-type]
    assert plan is not None and len(plan["operations"]) >= 3
    # one core: operation 0 finishes (its file uploaded), operation 1 waits after its marker
    args = ["execute", uri, "--lock", redis_server.url, "--spark", "local[1]", *HEARTBEAT, *SKEW]
    proc = start_paused("from hoodied.service.cli.main import main; main()", args, "task:1",
                        tmp_path / "ready", timeout=120)
    try:
        deadline = time.monotonic() + 60
        while not _outputs(uri, t):
            assert time.monotonic() < deadline, "operation 0 never uploaded its file"
            time.sleep(0.1)
        killed = _outputs(uri, t)
    finally:
        kill_group(proc)
    names = sorted(f.name for f in storage_for(uri).list(".hoodie/timeline") if f.name.startswith(t))
    assert names == [f"{t}.compaction.inflight", f"{t}.compaction.requested"]
    assert storage_for(uri).exists(f".hoodie/.temp/{t}")  # the killed attempt's markers
    assert rows_both_ways(uri, s3_env) == before  # partial output is invisible
    # by Hudi's default interval (60 s) the dead driver's heartbeat looks alive: refused, one line
    alive = hoodied("rollback", uri, "--instant", t, "--lock", redis_server.url, *SKEW)
    assert alive.exit_code != 0 and "has a live heartbeat" in alive.stderr, alive.output
    time.sleep(0.3)  # by the driver's own interval (100 ms) it has expired
    done = execute(uri, redis_server)
    assert done.stdout.startswith(f"{t} compaction: {len(plan['operations'])} file groups"), done.stdout
    tl = timeline(uri)
    (rollback,) = tl.completed((Action.ROLLBACK,))
    rolled = tl.read_commit_metadata(rollback)
    assert {p.rsplit("/", 1)[-1] for p in killed} <= deleted_names(rolled)
    commit = tl.read_commit_metadata(tl.get(t))  # type: ignore[arg-type]
    final = {s["path"] for ss in commit["partitionToWriteStats"].values() for s in ss}
    # nothing of the killed attempt is left (a retried task of the same write token reuses its name)
    assert _outputs(uri, t) == final
    assert rows_both_ways(uri, s3_env) == before
    assert hudi_rs(uri, s3_env, metadata=False, read_optimized=True) == before
    no_leftovers(uri, t)


# ---------------------------------------------------------------------------- errors


def test_a_missing_bucket_is_one_line_and_exit_code_6(s3_env: MotoServer, tmp_path: Path,  # noqa: F811
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command that writes names the bucket and the refused request, on one line, exit 6
    (``EXIT_STORAGE``), and creates nothing (no local folder named after the URI either)."""
    monkeypatch.chdir(tmp_path)
    bucket = f"missing-{s3_env.new_bucket()[-12:]}"
    uri = f"s3a://{bucket}/t"
    for args in (["execute", uri], ["rollback", uri, "--instant", "20250101000000000"],
                 ["schedule", "clean", uri], ["schedule", "compaction", uri], ["demo", uri]):
        lock = ["--lock", "redis://127.0.0.1:1/0"] if args[0] != "demo" else []  # never reached
        done = CliRunner().invoke(cli, [*args, *lock])
        assert done.exit_code == EXIT_STORAGE, (args, done.output)
        errors = [line for line in done.stderr.splitlines() if line.startswith("hoodied: error: ")]
        assert len(errors) == 1 and not done.stdout, (args, done.output)
        assert f"list failed on bucket {bucket!r}" in errors[0] and "NoSuchBucket" in errors[0], errors[0]
    assert not list(tmp_path.iterdir())  # no local folder named after the URI
    with pytest.raises(GenericError, match="NoSuchBucket"):  # none created on the way
        objects(bucket)


#: What a bucket policy denying writes answers to every PUT of a ``.parquet`` object.
REFUSE_DATA_FILE_UPLOADS = Fault(403, "AccessDenied", frozenset({"PUT"}), ".parquet")


def test_a_refused_upload_fails_in_one_line_and_leaves_nothing(
    s3_env: MotoServer, redis_server: RedisServer, fault_proxy: FaultProxy, tmp_path: Path  # noqa: F811
) -> None:
    """Every base-file upload of a compaction refused by the store: ``execute`` (its own process,
    driver and tasks on that endpoint) exits 6 with one line naming the bucket and the refused
    create; no object of the instant's data files exists; ``rollback`` undoes the failed attempt
    and ``execute`` completes the instant."""
    bucket = s3_env.new_bucket()
    uri = upload(unzip_table(require_fixture("mor/avro/v6_trips_8i3d"), tmp_path / "local"), bucket)
    before = rows_both_ways(uri, s3_env)
    t = schedule(uri, "compaction", redis_server, *COMPACT_ALL)
    fault_proxy.fault = REFUSE_DATA_FILE_UPLOADS
    env = dict(os.environ, AWS_ENDPOINT_URL=fault_proxy.endpoint, PYTHONPATH=str(PROJECT))
    failed = subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "execute", uri, "--lock", redis_server.url,
         "--spark", "local[1]", *HEARTBEAT, *SKEW],
        env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )
    assert failed.returncode == EXIT_STORAGE, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("hoodied: error: ")]
    # (Spark's own log shows the task's traceback; hoodied says it in one line)
    assert len(errors) == 1, failed.stderr[-3000:]
    assert f"bucket {bucket!r}" in errors[0] and "create refused: permission denied" in errors[0], errors[0]
    refused = [key for _, key, _ in fault_proxy.answered]
    assert refused and all(p.endswith(f"_{t}.parquet") for p in refused)
    assert not _outputs(uri, t)  # nothing partial: no object under any refused name
    # the tasks read the base files by ranged GETs (``Storage.open``), never by whole-object GETs
    gets = [r for method, key, r in fault_proxy.forwarded if method == "GET" and key.endswith(".parquet")]
    assert gets and all(r is not None and r.startswith("bytes=") for r in gets), gets
    assert rows_both_ways(uri, s3_env) == before
    assert timeline(uri).get(t).state is State.INFLIGHT  # type: ignore[union-attr]
    assert not storage_for(uri).exists(f".hoodie/.heartbeat/{t}")  # the failed driver let go of it
    # ``hoodied rollback`` undoes the failed attempt, then ``execute`` runs the instant
    undone = hoodied("rollback", uri, "--instant", t, "--lock", redis_server.url, *SKEW)
    assert undone.exit_code == 0, undone.output
    assert timeline(uri).get(t).state is State.REQUESTED  # type: ignore[union-attr]
    (rollback,) = timeline(uri).completed((Action.ROLLBACK,))
    assert timeline(uri).read_commit_metadata(rollback)["commitsRollback"] == [t]
    done = execute(uri, redis_server)
    assert done.stdout.startswith(f"{t} compaction: "), done.stdout
    assert rows_both_ways(uri, s3_env) == before
    no_leftovers(uri, t)
