"""The daemon on tables in S3 (a real moto server): discovery, cheap polling, metrics, ``run --once``.

Real Hudi fixture tables (layouts 1 and 2, table versions 6, 8 and 9) are uploaded to a bucket.
Request costs are asserted on the process's request counter (``hoodie.storage.STORAGE_REQUESTS``,
a count, not a timing) and cross-checked against moto's own request log, so the counter is
known to count what really went over the wire.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import obstore
import pytest
from obstore.store import S3Store
from prometheus_client.parser import text_string_to_metric_families

from hoodied.hoodie.errors import LockUnavailableError
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import STORAGE_REQUESTS, LocalStorage, Storage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State, epoch_to_instant_time
from hoodied.service.config import ConfigError, load_config
from hoodied.service.daemon.jobs import table_lock
from hoodied.service.daemon.leases import ProcessLease, make_lease
from hoodied.service.daemon.loop import Daemon
from hoodied.service.daemon.poll import (
    TIMELINE_NAMES_END,
    TIMELINE_NAMES_START,
    PollResult,
    discover_tables,
    poll_table,
)
from hoodied.service.daemon.registry import build_registry
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, written_mor_table
from tests.helpers.object_servers import (  # noqa: F401  (fixtures)
    S3_SECRET,
    AzuriteServer,
    MotoRequestLog,
    MotoServer,
    azure_env,
    azurite_server,
    moto_server,
    s3_env,
    upload_tree,
)

#: (fixture, timeline folder): a v9 and a v8 table (layout 2, with and without a metadata table)
#: and a v6 one (layout 1: the timeline shares ``.hoodie`` with hoodie.properties and sub-folders).
TABLES = [
    ("cow/v9_txns_simple_nometa", ".hoodie/timeline"),
    ("mor/avro/v8_trips_8i3u1d", ".hoodie/timeline"),
    ("mor/parquet/v6_nonpartitioned", ".hoodie"),
]
FUTURE = "20991231235959000"



def _put(uri: str, key: str, data: bytes = b"") -> None:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    obstore.put(S3Store.from_url(f"s3://{bucket}"), f"{prefix}/{key}", data)


def _delete(uri: str, key: str) -> None:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    obstore.delete(S3Store.from_url(f"s3://{bucket}"), f"{prefix}/{key}")


@pytest.fixture
def lake(s3_env: MotoServer, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:  # noqa: F811
    """A bucket with the ``TABLES`` at different depths under ``lake/``; (root URI, table URIs)."""
    bucket = s3_env.new_bucket()
    prefixes = ["lake/a/t0", "lake/b/c/t1", "lake/t2"]
    for (fid, _), prefix in zip(TABLES, prefixes, strict=True):
        upload_tree(unzip_table(require_fixture(fid), tmp_path / prefix), bucket, prefix)
    yield f"s3://{bucket}/lake", [f"s3://{bucket}/{p}" for p in prefixes]


def _poll(storage: ObjectStorage, cached: PollResult | None) -> tuple[PollResult, dict[str, int]]:
    """One poll and the object-store requests it sent, by operation."""
    settings = load_config(overrides={"tables": [storage.base_uri], "http": "off"})
    before = STORAGE_REQUESTS.snapshot()
    result = poll_table(storage, cached, settings.tables[0].policy, build_registry(), settings.heartbeat)
    after = STORAGE_REQUESTS.snapshot()
    return result, {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}


def _open(uri: str) -> ObjectStorage:
    storage = storage_for(uri)
    assert isinstance(storage, ObjectStorage)
    return storage


def _summary(timeline: Timeline) -> list[tuple[str, str, str, str | None]]:
    return [(i.requested_time, i.action.value, i.state.value, i.completion_time) for i in timeline.instants]


def _full_load(storage: ObjectStorage) -> list[tuple[str, str, str, str | None]]:
    return _summary(Timeline.load(storage, load_table_config(storage)))


# ---------------------------------------------------------------------------- listing after a name

#: A folder as a poll sees it: sub-folders around and between the timeline names (v6 keeps
#: ``.aux/``, ``archived/`` and ``metadata/`` beside them), names with dots and underscores.
FOLDER = [".aux/x/y", ".heartbeat/1", "001.commit", "002.clean.requested", "002_003.clean", "003/inner",
          "004.commit", "archived/a", "hoodie.properties", "hoodie.properties.backup", "metadata/files/f"]


def _list_after(storage: Storage, after: str | None, before: str | None) -> list[str]:
    return [i.name for i in storage.list_after(".hoodie", after, before)]


@pytest.mark.parametrize("store", ["s3", "azure"])
def test_list_after_is_the_same_on_local_s3_and_azure(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if store == "s3":
        server: MotoServer = request.getfixturevalue("s3_env")
        uri = f"s3://{server.new_bucket()}/t"
    else:
        azurite: AzuriteServer = request.getfixturevalue("azure_env")
        uri = f"az://{azurite.new_container()}/t"
    local = tmp_path / "t"
    remote = ObjectStorage.connect(uri)
    for name in FOLDER:
        (local / ".hoodie" / name).parent.mkdir(parents=True, exist_ok=True)
        (local / ".hoodie" / name).write_bytes(name.encode())
        remote.put(f".hoodie/{name}", name.encode())
    here = LocalStorage(str(local))
    cases = [(None, None), (TIMELINE_NAMES_START, TIMELINE_NAMES_END), ("001.commit", ":"), ("002", None),
             ("004.commit", ":"), ("hoodie.propertie", "hoodie.propertiet"), (".", "0"), ("zzz", None)]
    for after, before in cases:
        expected = _list_after(here, after, before)
        assert _list_after(remote, after, before) == expected, (after, before)
    assert _list_after(here, "001.commit", ":") == ["002.clean.requested", "002_003.clean", "004.commit"]
    assert _list_after(here, None, None) == [
        "001.commit", "002.clean.requested", "002_003.clean", "004.commit", "hoodie.properties",
        "hoodie.properties.backup",
    ]
    infos = remote.list_after(".hoodie", "002", ":")
    assert infos[0].path == ".hoodie/002.clean.requested" and infos[0].size == len(b"002.clean.requested")
    counted = STORAGE_REQUESTS.snapshot()
    assert _list_after(remote, "0035", ":") == ["004.commit"]
    # one request: the listing stops at the bound, so archived/ and metadata/ are not walked
    assert STORAGE_REQUESTS.snapshot()["list"] - counted["list"] == 1


# ---------------------------------------------------------------------------- locks and leases


def test_object_store_tables_without_redis_get_the_auto_lock_and_an_in_process_lease(
    lake: tuple[str, list[str]],
) -> None:
    storage = _open(lake[1][0])
    settings = load_config(overrides={"tables": [storage.base_uri], "http": "off"})
    lock = table_lock(None, settings, storage)
    assert type(lock).__name__ == "StorageBasedLock"  # service.locks: the lock kept in the bucket
    with lock:
        assert lock.is_held
    first = make_lease(None, storage, FUTURE, LockSettings(wait_ms=0, retries=0))
    second = make_lease(None, storage, FUTURE, LockSettings(wait_ms=0, retries=0))
    assert isinstance(first, ProcessLease)
    first.acquire()
    with pytest.raises(LockUnavailableError):
        second.acquire()  # one job per instant in this process (the one replica without Redis)
    first.release()
    second.acquire()
    second.ensure_held()
    second.release()


# ---------------------------------------------------------------------------- discovery


def test_discovery_under_an_s3_root_finds_exactly_the_tables(
    lake: tuple[str, list[str]], tmp_path: Path
) -> None:
    root, tables = lake
    bucket = root.removeprefix("s3://").split("/")[0]
    extra = unzip_table(require_fixture("cow/v8_nonpartitioned"), tmp_path / "extra")
    upload_tree(extra, bucket, "lake/.trash/t3")  # hidden folders are not searched
    upload_tree(extra, bucket, "lake/d/e/f/t4")  # deeper than max_depth 3
    _put(root, "notes/readme.txt", b"not a table")
    _put(root, "b/c/x/.hoodie/timeline/README", b"a .hoodie without hoodie.properties")
    assert discover_tables(root, 3) == sorted(tables)
    assert discover_tables(root, 4) == sorted([*tables, f"{root}/d/e/f/t4"])
    assert discover_tables(f"{root}/a/t0", 1) == [tables[0]]  # the root itself may be the table
    assert discover_tables(f"{root}/nothing-here", 3) == []


# ---------------------------------------------------------------------------- polling costs


@pytest.mark.parametrize("index", range(len(TABLES)))
def test_a_steady_poll_costs_one_list_and_a_new_file_is_read_alone(
    lake: tuple[str, list[str]], index: int, s3_env: MotoServer  # noqa: F811
) -> None:
    uri = lake[1][index]
    folder = TABLES[index][1]
    storage = _open(uri)
    first, _ = _poll(storage, None)
    assert _summary(first.timeline) == _full_load(storage)
    moto = MotoRequestLog(s3_env, uri.removeprefix("s3://").split("/")[0])
    result = first
    for _ in range(3):
        result, cost = _poll(storage, result)
        assert cost == {"list": 1}
        assert result.timeline is first.timeline
    assert moto.kinds() == {"list": 3}  # what went over the wire: three LISTs, nothing else

    # a new pending clean: seen by the next poll, for one LIST (a clean's plan is not read by a poll)
    _put(uri, f"{folder}/{FUTURE}.clean.requested")
    moto.since_mark()
    result, cost = _poll(storage, result)
    assert cost == {"list": 1}
    pending = [(i.instant.requested_time, i.instant.state) for i in result.pending]
    assert pending == [(FUTURE, State.REQUESTED)]
    assert _summary(result.timeline) == _full_load(storage)
    moto.since_mark()
    result, cost = _poll(storage, result)
    assert cost == {"list": 1} and moto.kinds() == {"list": 1}


def test_a_new_v6_replacecommit_is_read_once_and_state_changes_of_old_pending_instants_are_seen(
    lake: tuple[str, list[str]], s3_env: MotoServer  # noqa: F811
) -> None:
    uri = lake[1][2]  # v6: a pending replacecommit's plan tells a clustering from an insert-overwrite
    storage = _open(uri)
    result, _ = _poll(storage, None)
    older, newer = "20990101000000000", FUTURE
    _put(uri, f".hoodie/{older}.replacecommit.requested")
    moto = MotoRequestLog(s3_env, uri.removeprefix("s3://").split("/")[0])
    result, cost = _poll(storage, result)
    # the new file alone is read (an empty plan: an insert-overwrite, not a service)
    assert cost == {"list": 1, "get": 1}
    lines = moto.since_mark()
    gets = [line for line in lines if line.split('"')[1].startswith("GET") and "list-type" not in line]
    assert len(gets) == 1 and f"{older}.replacecommit.requested" in gets[0]
    assert not result.pending

    # a later completed instant moves the last name past the pending one ...
    _put(uri, f".hoodie/{newer}.deltacommit.requested")
    _put(uri, f".hoodie/{newer}.deltacommit.inflight")
    _put(uri, f".hoodie/{newer}.deltacommit", b"{}")
    result, cost = _poll(storage, result)
    assert cost == {"list": 1}
    # ... yet the older pending instant's next state is seen: listings start at the oldest pending one
    _put(uri, f".hoodie/{older}.replacecommit.inflight")
    result, cost = _poll(storage, result)
    assert cost == {"list": 1}  # its plan was read once, when it appeared
    assert result.timeline.get(older) is not None
    assert result.timeline.get(older).state is State.INFLIGHT  # type: ignore[union-attr]
    assert _summary(result.timeline) == _full_load(storage)


def test_an_instant_arriving_out_of_order_is_seen_within_the_late_window(
    lake: tuple[str, list[str]],
) -> None:
    uri = lake[1][0]
    storage = _open(uri)
    result, _ = _poll(storage, None)
    tz = result.config.tzinfo
    now = time.time()
    later, earlier = epoch_to_instant_time(now - 1, tz), epoch_to_instant_time(now - 20, tz)
    _put(uri, f".hoodie/timeline/{later}.clean.requested")
    result, _ = _poll(storage, result)
    # a concurrent writer took an earlier instant time and creates its requested file after ours
    _put(uri, f".hoodie/timeline/{earlier}.clean.requested")
    result, cost = _poll(storage, result)
    assert cost == {"list": 1}
    assert [i.instant.requested_time for i in result.pending] == [earlier, later]


def test_a_removed_file_is_noticed_by_the_periodic_full_relisting(lake: tuple[str, list[str]]) -> None:
    uri = lake[1][0]
    storage = _open(uri)
    result, _ = _poll(storage, None)
    gone = min(inst.requested_time for inst, _ in result.files.values())
    files = sorted(n for n, (inst, _) in result.files.items() if inst.requested_time == gone)
    for name in files:  # archival removes the oldest completed instants
        _delete(uri, f".hoodie/timeline/{name}")
    result, cost = _poll(storage, result)
    assert cost == {"list": 1} and set(files) <= result.names  # below the listing offset: not seen yet
    result, cost = _poll(storage, dataclasses.replace(result, relist_at=0.0))  # the re-listing is due
    assert cost == {"list": 1, "head": 1, "get": 1}  # the folder, and hoodie.properties looked up and read
    assert not set(files) & result.names and result.timeline.get(gone) is None
    assert _summary(result.timeline) == _full_load(storage)
    assert result.relist_at > time.monotonic()  # the next one is scheduled again


# ---------------------------------------------------------------------------- the daemon


def test_daemon_polls_s3_tables_for_one_list_each_and_reports_requests(lake: tuple[str, list[str]]) -> None:
    root, tables = lake
    for uri, (_, folder) in zip(tables, TABLES, strict=True):
        _put(uri, f"{folder}/{FUTURE}.clean.requested")
    settings = load_config(overrides={"discover": [root], "http": "off", "defaults": {"paused": True}})
    daemon = Daemon(settings, once=True)

    async def main() -> None:
        await daemon._discover()
        await daemon.poll_cycle()  # the first cycle: configs and full listings
        await daemon.poll_cycle()  # a steady one

    anyio.run(main)
    assert sorted(daemon.tables) == sorted(tables)
    assert daemon.last_cycle_requests == {"list": len(tables)}
    status = daemon.status()
    assert status["last_poll"]["storage_requests"] == {"list": len(tables)}
    for t in status["tables"]:
        pending = [(p["instant"], p["action"], p["status"]) for p in t["pending"]]
        assert pending == [(FUTURE, "clean", "paused")]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(daemon.metrics.render().decode())
        for s in family.samples
    }
    counted = STORAGE_REQUESTS.snapshot()
    assert samples[("hoodied_storage_requests_total", (("operation", "list"),))] == counted["list"] > 0
    assert samples[("hoodied_storage_requests_total", (("operation", "get"),))] == counted["get"] > 0


def test_run_once_on_an_s3_discover_root_shows_pending_instants_and_no_secret(
    lake: tuple[str, list[str]], tmp_path: Path, s3_env: MotoServer  # noqa: F811
) -> None:
    root, tables = lake
    for uri, (_, folder) in zip(tables, TABLES, strict=True):
        _put(uri, f"{folder}/{FUTURE}.clean.requested")
    config = tmp_path / "hoodied.yaml"
    # the endpoint from the settings file; credentials from the standard variables only
    config.write_text(json.dumps({"discover": [{"root": root, "max_depth": 3}], "http": "off",
                                  "defaults": {"paused": True},
                                  "object_store": {"endpoint": s3_env.endpoint, "allow_http": True}}))
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP")}
    cli = [sys.executable, "-m", "hoodied.service.cli"]
    done = subprocess.run([*cli, "run", "--once", "--config", str(config)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for uri in tables:
        assert f"{uri}  (" in done.stdout, done.stdout
    assert done.stdout.count(f"pending {FUTURE} clean requested") == len(tables), done.stdout
    checked = subprocess.run([sys.executable, "-m", "hoodied.service.cli", "config", "check", str(config),
                              "--print"], env=env, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert s3_env.endpoint in checked.stdout and root in checked.stdout
    assert S3_SECRET not in done.stdout + done.stderr + checked.stdout + checked.stderr


def _s3_rows(uri: str, server: MotoServer, *, read_optimized: bool = False) -> Counter[Any]:
    return hudi_rs_rows(uri, options=server.hudi_rs_options(), read_optimized=read_optimized)


def test_run_once_plans_and_executes_the_compaction_of_an_s3_table(
    tmp_path: Path, s3_env: MotoServer  # noqa: F811
) -> None:
    """The whole path on S3 without Redis: poll, plan, the lock ``auto`` picks, the in-process
    lease, Spark executing the compaction; hudi-rs then reads the compacted base files alone."""
    local = tmp_path / "written"
    written_mor_table(local)  # six delta commits: the default compaction trigger (5) fires
    rows = hudi_rs_rows(local)
    uri = f"s3://{s3_env.new_bucket()}/warehouse/trips"
    upload_tree(local, uri.removeprefix("s3://").split("/")[0], "warehouse/trips")
    assert _s3_rows(uri, s3_env) == rows and _s3_rows(uri, s3_env, read_optimized=True) != rows
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    done = subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "run", "--once", "--table", uri, "--http", "off",
         "--spark", "local[2]"], env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(x) for x in done.stderr.splitlines() if x.startswith("{")]
    ended = [(e["kind"], e["outcome"]) for e in events if e.get("event") == "job ended"
             and e.get("action") == "compaction"]
    assert ended == [("plan", "planned"), ("execute", "success")], ended
    storage = _open(uri)
    compactions = [i for i in Timeline.load(storage, load_table_config(storage)).instants
                   if i.action is Action.COMPACTION]
    assert len(compactions) == 1 and compactions[0].is_completed
    assert _s3_rows(uri, s3_env) == rows
    assert _s3_rows(uri, s3_env, read_optimized=True) == rows  # the merged rows are in the new base files
    assert S3_SECRET not in done.stdout + done.stderr


def test_settings_accept_object_store_tables_and_client_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HOODIED_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOODIED_OBJECT_STORE__REGION", "eu-west-1")
    settings = load_config(overrides={
        "tables": ["S3A://bucket/warehouse/t1/", "s3://bucket/warehouse/t2"],
        "discover": [{"root": "gs://lake/tables", "max_depth": 2}],
        "object_store": {"endpoint": "http://127.0.0.1:9000/", "allow_http": True},
    })
    assert [t.path for t in settings.tables] == ["s3a://bucket/warehouse/t1", "s3://bucket/warehouse/t2"]
    assert settings.discover[0].root == "gs://lake/tables"
    client = settings.object_store.settings()
    assert (client.endpoint, client.region, client.allow_http) == ("http://127.0.0.1:9000", "eu-west-1", True)
    with pytest.raises(ConfigError) as refused:
        load_config(overrides={"tables": ["s3://bucket/a/../b", "hdfs://nn/t", "s3://bucket/t"],
                               "object_store": {"endpoint": "http://key:s3cr3t@127.0.0.1:9000"}})
    problems = "\n".join(refused.value.problems)
    assert len(refused.value.problems) == 3, problems
    assert "'..' segments" in problems and "hdfs://nn/t" in problems and "without credentials" in problems
    assert "s3cr3t" not in problems  # a refused endpoint is not echoed
    with pytest.raises(ConfigError, match="listed twice"):
        load_config(overrides={"tables": ["s3://bucket/t", "s3://bucket/t/"]})


def test_a_discover_root_that_cannot_be_listed_keeps_its_tables_and_is_reported(
    lake: tuple[str, list[str]],
) -> None:
    root, tables = lake
    missing = "s3://no-such-bucket-for-hoodied/lake"
    settings = load_config(overrides={"discover": [root, missing], "http": "off",
                                      "defaults": {"paused": True}})
    daemon = Daemon(settings, once=True)
    anyio.run(daemon._discover)
    assert sorted(daemon.tables) == sorted(tables)
    assert [e["table"] for e in daemon.recent_errors] == [missing]
    assert "discovery failed" in daemon.recent_errors[0]["error"]
    # the root that worked fails later (its bucket is gone): its tables stay until it answers again
    bucket = root.removeprefix("s3://").split("/")[0]
    gone = settings.discover[0].model_copy(update={"root": f"s3://{bucket}-gone/lake"})
    daemon.settings = settings.model_copy(update={"discover": [gone]})
    for ts in daemon.tables.values():
        ts.source = gone.root
    anyio.run(daemon._discover)
    assert sorted(daemon.tables) == sorted(tables)


def test_run_demo_on_s3_creates_the_table_once_and_serves_it(
    tmp_path: Path, s3_env: MotoServer  # noqa: F811
) -> None:
    """``run --demo s3://...`` writes the demo table to the bucket, compacts and cleans it there; a
    second run finds the table (no local folder named after the URI) and serves it as it is."""
    uri = f"s3://{s3_env.new_bucket()}/demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    runs = [subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "run", "--demo", uri, "--once", "--spark", "local[2]"],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    ) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr[-3000:]
    assert "created the demo table at " + uri in runs[0].stderr
    assert "created the demo table" not in runs[1].stderr
    assert not list(tmp_path.iterdir())
    storage = _open(uri)
    timeline = Timeline.load(storage, load_table_config(storage))
    actions = [i.action for i in timeline.instants if i.is_completed]
    assert actions.count(Action.COMPACTION) == 1 and Action.CLEAN in actions, actions
