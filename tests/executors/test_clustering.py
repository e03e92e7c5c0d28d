"""Clustering on PySpark (local mode): Hudi's own plans re-executed, hoodied's plans on v6/v8/v9 tables.

Hudi's completed clusterings in the v9 fixtures are reopened (completion file and outputs gone,
the inflight file left: a failed attempt) and executed again through the rollback-then-retry
runner; the result is compared with what Hudi wrote: replaced file groups, output files per
partition, write-stat counts, and the rows of every output file in order. Written tables of
versions 6, 8 and 9 (merge-on-read, log files merged) are planned with sort columns and executed:
outputs sorted and split at the target size, rows unchanged for hudi-rs, time travel to before
the clustering unchanged. The conflict rule, kill -9 mid-job and bad plans leave a readable table.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from hoodied.executors.clustering import ClusteringResult, _order, execute_clustering
from hoodied.executors.engine import Session, spark_session
from hoodied.executors.rollback import RollbackResult
from hoodied.hoodie.actions.clustering import (
    WriteConflictError,
    conflicting_writes,
    record_index_updates,
    split_points,
)
from hoodied.hoodie.avro.container import write_single_record
from hoodied.hoodie.basefile import read_footer
from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.encode import metadata_schema
from hoodied.hoodie.metadata.index_records import record_index_value
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline import commit_metadata as cm
from hoodied.hoodie.timeline.active import (
    Timeline,
    datetime_to_instant_time,
    decode_metadata,
    instant_time_to_datetime,
)
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import ClusteringPlan, SliceInfo
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clustering import ClusteringSettings, schedule_clustering
from hoodied.service.cli.main import cli
from hoodied.service.cli.report import committed_listing_drift
from hoodied.service.operations import rollback_failed_attempt
from hoodied.service.spark_jobs import ClusteringDropped, run_spark_service
from tests.executors.test_compaction_mdt import _declare, _snapshot
from tests.executors.test_indexing import live_records
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.hudi_schemas import REFERENCE
from tests.helpers.mor_tables import (
    CITIES,
    SCHEMA,
    hudi_rs_rows,
    hudi_rs_slices,
    mor_table_writer,
    multiset,
    written_mor_table,
)

PROJECT = Path(__file__).resolve().parents[2]
FAST = TimeSettings(max_expected_clock_skew_ms=5)
#: The v9 fixtures and their completed clustering (a real Hudi plan, SparkSortAndSizeExecutionStrategy).
HUDI_CLUSTERINGS = {
    "cow/v9_txns_simple_nometa": "20260307135709297",
    "mor/avro/v9_txns_simple_nometa": "20260307135840454",
    "cow/v9_txns_complex_nometa": "",  # found from the timeline
}


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


def _storage(root: Path) -> LocalStorage:
    return LocalStorage(str(root))


def _timeline(root: Path) -> Timeline:
    storage = _storage(root)
    return Timeline.load(storage, load_table_config(storage))


def _instant(root: Path, t: str) -> Instant:
    inst = _timeline(root).get(t)
    assert inst is not None, t
    return inst


def _plan(root: Path, t: str) -> ClusteringPlan:
    plan = _timeline(root).plan(_instant(root, t))
    assert isinstance(plan, ClusteringPlan), t
    return plan


def _base_path(root: Path, s: SliceInfo) -> Path:
    assert s.base_file_name is not None, s
    return root / s.partition_path / s.base_file_name


def _timeline_dir(root: Path) -> Path:
    return root / ".hoodie" / ("timeline" if (root / ".hoodie" / "timeline").is_dir() else "")


def _outputs(root: Path, t: str) -> list[Path]:
    return sorted(p for p in root.rglob(f"*_{t}.parquet") if ".hoodie" not in p.relative_to(root).parts)


def _rows_in_order(path: Path) -> list[tuple[Any, ...]]:
    table = pq.read_table(path).drop_columns(["_hoodie_file_name"])
    return [tuple(sorted(r.items())) for r in table.to_pylist()]


def _run(root: Path, t: str, spark: Session, **kw: Any) -> ClusteringResult:
    storage = _storage(root)
    return execute_clustering(storage, load_table_config(storage), InProcessLock(storage.base_uri), t, spark,
                              time_settings=FAST, **kw)


def _rs_rows_as_of(root: Path, instant: str) -> Counter[Any]:
    import hudi

    options = hudi.HudiReadOptions().with_as_of_timestamp(instant)
    batches = hudi.HudiTableBuilder.from_base_uri(str(root)).build().read(options)
    return multiset(pa.Table.from_batches(batches)) if batches else Counter()


def _completed_file(root: Path, t: str) -> Path:
    (done,) = [p for p in _timeline_dir(root).glob(f"{t}*replacecommit") if not p.name.endswith(".requested")
               and not p.name.endswith(".inflight")]
    return done


def _decode_replace(data: bytes) -> dict[str, Any]:
    """A completed replacecommit read with the writer schema Hudi 1.1 embeds in its own (reader schema)."""
    path = REFERENCE / "writer-schemas-observed" / "HoodieReplaceCommitMetadata.writer-schema.json"
    if not path.is_file():
        pytest.skip(f"{path.name} not found under {REFERENCE} (set HOODIED_REFERENCE)")
    schema = fastavro.parse_schema(json.loads(path.read_text()))
    (record,) = list(fastavro.reader(io.BytesIO(data), reader_schema=schema))
    assert isinstance(record, dict)
    return record


def _check_clustered(root: Path, t: str, result: ClusteringResult, plan_groups: set[tuple[str, str]],
                     before: Counter[Any], previous: tuple[str, Counter[Any]]) -> dict[str, Any]:
    """What every completed clustering must satisfy; returns the decoded commit metadata."""
    config = load_table_config(_storage(root))
    done = _completed_file(root, t)
    data = done.read_bytes()
    if config.version >= 8:
        meta = _decode_replace(data)
        assert done.name.startswith(f"{t}_")
    else:
        meta = json.loads(data)
        assert done.name == f"{t}.replacecommit" and data.startswith(b'{\n  "partitionToWriteStats" : {')
        assert list(meta) == ["partitionToWriteStats", "compacted", "extraMetadata", "operationType",
                              "partitionToReplaceFileIds"]
    assert meta["operationType"] == "CLUSTER" and meta["compacted"] is False
    assert json.loads(meta["extraMetadata"]["schema"])["type"] == "record"
    replaced = {(p, f) for p, ids in meta["partitionToReplaceFileIds"].items() for f in ids}
    assert replaced == plan_groups
    stats = [s for ss in meta["partitionToWriteStats"].values() for s in ss]
    assert len(stats) == len(result.write_stats) == len(_outputs(root, t))
    slices = hudi_rs_slices(root)
    assert not replaced & set(slices), "replaced file groups must vanish from the latest slices"
    for s in stats:
        name = s["path"].rsplit("/", 1)[-1]
        parsed = BaseFileName.parse(name)
        assert parsed is not None and parsed.file_id == s["fileId"] and parsed.instant_time == t
        assert (s["partitionPath"], s["fileId"]) in slices
        assert s["prevCommit"] == "null" and s["numWrites"] == s["numInserts"] > 0
        assert s["numUpdateWrites"] == s["numDeletes"] == 0
        assert s["fileSizeInBytes"] == s["totalWriteBytes"] == (root / s["path"]).stat().st_size
        table = pq.read_table(root / s["path"])
        assert table.num_rows == s["numWrites"]
        assert set(table.column("_hoodie_file_name").to_pylist()) == {name}
        footer = read_footer(_storage(root), s["path"])
        keys = table.column("_hoodie_record_key").to_pylist()
        assert footer["hoodie_min_record_key"] == min(keys) and footer["hoodie_max_record_key"] == max(keys)
        assert "org.apache.hudi.bloomfilter" in footer and "parquet.avro.schema" in footer
    markers = root / ".hoodie" / ".temp" / t
    assert not markers.exists() or not list(markers.rglob("*.marker.*"))
    assert not (root / ".hoodie" / ".heartbeat" / t).exists()
    assert hudi_rs_rows(root) == before
    assert _rs_rows_as_of(root, previous[0]) == previous[1]  # time travel to before T unchanged
    return meta


# ---------------------------------------------------------------------------- Hudi's own plans


def _hudi_clustering(root: Path, fid: str) -> str:
    t = HUDI_CLUSTERINGS[fid]
    if t:
        return t
    timeline = _timeline(root)
    (inst,) = [i for i in timeline.completed() if timeline.is_clustering(i)]
    return inst.requested_time


def _reopen(root: Path, t: str) -> None:
    """Hudi's completed clustering becomes a failed attempt: completion file and outputs gone."""
    (_completed_file(root, t)).unlink()
    for p in _outputs(root, t):
        p.unlink()


def _previous_instant(root: Path, t: str) -> str:
    return max(i.requested_time for i in _timeline(root).completed() if i.requested_time < t)


@pytest.mark.parametrize("fid", list(HUDI_CLUSTERINGS))
def test_executes_the_plan_hudi_wrote(tmp_path: Path, spark: Session, fid: str) -> None:
    root = unzip_table(require_fixture(fid), tmp_path / "t")
    t = _hudi_clustering(root, fid)
    before = hudi_rs_rows(root)
    previous = _previous_instant(root, t)
    as_of = (previous, _rs_rows_as_of(root, previous))
    hudi_meta = decode_metadata(_completed_file(root, t).read_bytes(), "hudi")
    hudi_files = {p.relative_to(root).parent.as_posix(): p for p in _outputs(root, t)}
    hudi_rows = {part: _rows_in_order(p) for part, p in hudi_files.items()}
    plan = _plan(root, t)
    _reopen(root, t)
    assert hudi_rs_rows(root) == before
    result = run_spark_service(_storage(root), InProcessLock(str(root)), t, spark, time_settings=FAST)
    assert isinstance(result, ClusteringResult) and result.instant.is_completed
    timeline = _timeline(root)
    rollbacks = timeline.completed((Action.ROLLBACK,))
    assert [timeline.read_commit_metadata(r)["commitsRollback"] for r in rollbacks] == [[t]]
    meta = _check_clustered(root, t, result, set(plan.file_groups), before, as_of)
    # as Hudi did it: same replaced groups, one output per group, same counts, same rows in the same order
    assert {p: sorted(ids) for p, ids in meta["partitionToReplaceFileIds"].items()} == {
        p: sorted(ids) for p, ids in hudi_meta["partitionToReplaceFileIds"].items()}

    def counts(m: dict[str, Any]) -> dict[str, list[tuple[int, int]]]:
        stats = m["partitionToWriteStats"].items()
        return {p: sorted((s["numWrites"], s["numInserts"]) for s in ss) for p, ss in stats}

    assert counts(meta) == counts(hudi_meta)
    varying = ("fileId", "path", "totalWriteBytes", "fileSizeInBytes", "runtimeStats")

    def fields(m: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:  # every other write-stat field
        stats = m["partitionToWriteStats"].items()
        return {p: sorted(({k: v for k, v in s.items() if k not in varying} for s in ss),
                          key=lambda d: d["numWrites"]) for p, ss in stats}

    assert fields(meta) == fields(hudi_meta)
    assert meta["extraMetadata"] == hudi_meta["extraMetadata"]
    ours = {p.relative_to(root).parent.as_posix(): p for p in _outputs(root, t)}
    assert {part: _rows_in_order(p) for part, p in ours.items()} == hudi_rows


def _without_mdt(root: Path, tmp: Path) -> Path:
    copy = tmp / f"nomdt-{uuid.uuid4().hex[:6]}" / root.name
    shutil.copytree(root, copy)
    shutil.rmtree(copy / METADATA_FOLDER)
    return copy


def _record_index(root: Path, keys: set[str]) -> dict[str, dict[str, Any]]:
    return {k: v["recordIndexMetadata"] for k, v in live_records(root, "record_index").items() if k in keys}


@pytest.mark.parametrize("fid", ["cow/v9_txns_simple_meta", "mor/avro/v9_txns_simple_meta",
                                 "cow/v9_txns_nonpart_meta"])
def test_hudis_plan_on_a_metadata_table(
    tmp_path: Path, spark: Session, fid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed attempt (and its MDT delta commit) rolled back, the plan executed with its MDT
    delta commit: readers agree with and without the MDT, no listing drift, and the record index
    entries of the moved keys are Hudi's own but for the new file ids."""
    monkeypatch.setenv("TZ", "America/Chicago")  # the fixtures' LOCAL timeline zone (index epoch ms)
    root = unzip_table(require_fixture(fid), tmp_path / "t")
    timeline = _timeline(root)
    t = next(i.requested_time for i in timeline.completed() if timeline.is_clustering(i))
    before = hudi_rs_rows(root)
    moved = {k for p in _outputs(root, t) for k in pq.read_table(p).column("_hoodie_record_key").to_pylist()}
    hudis = _record_index(root, moved)
    assert len(hudis) == len(moved) > 0
    _reopen(root, t)  # the MDT still holds Hudi's delta commit T: rolled back with the attempt
    result = run_spark_service(_storage(root), InProcessLock(str(root)), t, spark, time_settings=FAST)
    assert isinstance(result, ClusteringResult) and result.instant.is_completed
    mdt_storage = LocalStorage(str(root / METADATA_FOLDER))
    mdt = Timeline.load(mdt_storage, load_table_config(mdt_storage, metadata_table=True))
    assert [i.action for i in mdt.completed() if i.requested_time == t] == [Action.DELTA_COMMIT]
    assert mdt.get(t).completion_time < result.instant.completion_time  # type: ignore[union-attr,operator]
    assert hudi_rs_rows(root) == before
    assert hudi_rs_rows(_without_mdt(root, tmp_path)) == before
    assert set(hudi_rs_slices(_without_mdt(root, tmp_path))) == set(hudi_rs_slices(root))
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
    ours = _record_index(root, moved)
    new_groups = {(s["partitionPath"], s["fileId"]) for s in result.write_stats}
    for key in moved:
        a, b = ours[key], hudis[key]
        bits = (a["fileIdHighBits"] % 2**64) << 64 | a["fileIdLowBits"] % 2**64
        assert (a["partitionName"], f"{uuid.UUID(int=bits)}-{a['fileIndex']}") in new_groups
        ids = {"fileIdHighBits": 0, "fileIdLowBits": 0}
        assert {**a, **ids} == {**b, **ids}  # same partition, file index, encoding and instant (T)


def test_hoodieds_plan_on_a_version_8_metadata_table(tmp_path: Path, spark: Session) -> None:
    """v8 MDT with record_index, column_stats, partition_stats and a secondary index: a sorted
    clustering (one slice with a log file) keeps both readers and the listing exact, and every
    record index entry now names a new file group."""
    root = unzip_table(require_fixture("mor/avro/v8_trips_8i3u1d"), tmp_path / "t")
    before = hudi_rs_rows(root)
    t, plan = _schedule(root, ClusteringSettings(sort_columns=("rider",)))
    assert any(s.delta_file_paths for g in plan.input_groups for s in g.slices)
    result = _run(root, t, spark)
    assert hudi_rs_rows(root) == before == hudi_rs_rows(_without_mdt(root, tmp_path))
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
    new_groups = {(s["partitionPath"], s["fileId"]) for s in result.write_stats}
    index = live_records(root, "record_index")
    assert len(index) == len(before) == 6
    for entry in index.values():
        a = entry["recordIndexMetadata"]
        bits = (a["fileIdHighBits"] % 2**64) << 64 | a["fileIdLowBits"] % 2**64
        assert (a["partitionName"], f"{uuid.UUID(int=bits)}-{a['fileIndex']}") in new_groups


# ---------------------------------------------------------------------------- hoodied's plans, v6 / v8 / v9


def _schedule(root: Path, settings: ClusteringSettings) -> tuple[str, ClusteringPlan]:
    storage = _storage(root)
    inst, result = schedule_clustering(storage, InProcessLock(storage.base_uri), settings, time_settings=FAST)
    assert inst is not None, result.summary()
    return inst.requested_time, _plan(root, inst.requested_time)


def _sorted_by(table: pa.Table, columns: tuple[str, ...]) -> bool:
    rows = list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))
    keyed = [tuple((v is not None, v) for v in r) for r in rows]  # nulls first
    return keyed == sorted(keyed)


@pytest.mark.parametrize("version", [6, 8, 9])
def test_sorts_merges_logs_and_replaces(tmp_path: Path, spark: Session, version: int) -> None:
    root = tmp_path / "table"
    written_mor_table(root, version)  # several file groups per partition, log files with updates and deletes
    before = hudi_rs_rows(root)
    previous = _timeline(root).completed()[-1].requested_time
    as_of = (previous, _rs_rows_as_of(root, previous))
    sort = ("v", "id")
    t, plan = _schedule(root, ClusteringSettings(sort_columns=sort))
    requested = "replacecommit" if version == 6 else "clustering"
    assert (_timeline_dir(root) / f"{t}.{requested}.requested").is_file()
    assert any(s.delta_file_paths for g in plan.input_groups for s in g.slices)
    result = _run(root, t, spark)
    _check_clustered(root, t, result, set(plan.file_groups), before, as_of)
    for s in result.write_stats:
        assert _sorted_by(pq.read_table(root / s["path"]), sort)
    assert len(result.write_stats) == len(plan.input_groups)  # one output file group per group (1 GB target)
    inflight = _timeline_dir(root) / f"{t}.{requested}.inflight"
    assert inflight.read_bytes() == b""
    # a second run finds it completed
    assert _run(root, t, spark).was_completed


@pytest.mark.parametrize("sort", [("v",), ()], ids=["sorted", "unsorted"])
def test_splits_into_output_groups_and_at_the_target_size(
    tmp_path: Path, spark: Session, sort: tuple[str, ...]
) -> None:
    """Sorted: three parts of equal rows, each in sort order. Unsorted: the slices dealt to the
    three outputs in contiguous runs, rows in read order. Every part rolls over at the target."""
    root = tmp_path / "table"
    spec = TableSpec("trips", SCHEMA, "id", "city", "ts", TableType.COPY_ON_WRITE, 9)
    writer = create_table(_storage(root), spec, max_file_rows=100)
    for r in range(4):
        rows = [{"id": f"key-{i:05d}", "ts": r, "city": CITIES[i % 3], "v": float((i * 7919) % 1000)}
                for i in range(r * 600, (r + 1) * 600)]
        writer.insert(pa.Table.from_pylist(rows, schema=SCHEMA))
    before = hudi_rs_rows(root)
    folders = [d for d in root.iterdir() if d.name != ".hoodie"]
    totals = [sum(p.stat().st_size for p in d.glob("*.parquet")) for d in folders]
    # a target of about a third of each partition's bytes: three output file groups per group
    target = max(-(-p // 3) for p in totals)
    assert 2 * target < min(totals)
    t, plan = _schedule(root, ClusteringSettings(sort_columns=sort, target_file_max_bytes=target))
    assert {g.num_output_file_groups for g in plan.input_groups} == {3}
    # executing with a small target (and small row groups): each output part rolls over into -1, -2...
    requested = _timeline_dir(root) / f"{t}.clustering.requested"
    raw = _timeline(root).read_plan(_instant(root, t))
    assert raw is not None
    params = raw["clusteringPlan"]["strategy"]["strategyParams"]
    params["hoodie.clustering.plan.strategy.target.file.max.bytes"] = "2000"
    requested.unlink()
    requested.write_bytes(write_single_record(raw, "HoodieRequestedReplaceMetadata"))
    result = _run(root, t, spark, row_group_rows=100)
    assert hudi_rs_rows(root) == before
    by_prefix: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in result.write_stats:
        prefix, n = s["fileId"].rsplit("-", 1)
        by_prefix.setdefault((s["partitionPath"], prefix), []).append(s)
    assert len(by_prefix) == 3 * len(plan.input_groups)
    parts_rows = set()
    for part in by_prefix.values():
        part.sort(key=lambda s: int(s["fileId"].rsplit("-", 1)[1]))
        assert [int(s["fileId"].rsplit("-", 1)[1]) for s in part] == list(range(len(part)))
        assert len(part) > 1  # rolled over at the target size
        tables = [pq.read_table(root / s["path"]) for s in part]
        assert all(tb.num_rows % 100 == 0 or tb is tables[-1] for tb in tables)  # closed at a row group
        rows = pa.concat_tables(tables)
        assert not sort or _sorted_by(rows, sort)
        parts_rows.add(tuple(rows.column("_hoodie_record_key").to_pylist()))
    if not sort:  # each part is a run of whole slices, in the plan's order
        expected: set[tuple[Any, ...]] = set()
        for group in plan.input_groups:
            keys = [pq.read_table(_base_path(root, s)).column("_hoodie_record_key").to_pylist()
                    for s in group.slices]
            points = split_points(len(keys), 3)
            expected.update(tuple(k for ks in keys[a:b] for k in ks) for a, b in itertools.pairwise(points))
        assert parts_rows == expected
        return
    for partition, _ in by_prefix:
        others = [p for (q, _), p in by_prefix.items() if q == partition]
        counts = sorted(sum(s["numWrites"] for s in p) for p in others)
        assert counts[-1] - counts[0] <= 1  # the three parts differ by at most one row


# ---------------------------------------------------------------------------- conflicts, bad input


def _live_row(root: Path, partition: str, file_id: str) -> dict[str, Any]:
    """A row of the file group ``file_id`` that the snapshot still has, updated (ts 99, v 99.0)."""
    import hudi

    live = set()
    for b in hudi.HudiTableBuilder.from_base_uri(str(root)).build().read(hudi.HudiReadOptions()):
        live.update(b.column(b.schema.get_field_index("id")).to_pylist())
    base = pq.read_table(next((root / partition).glob(f"{file_id}_*.parquet")))
    row = next(r for r in base.select(["id", "city"]).to_pylist() if r["id"] in live)
    return {**row, "ts": 99, "v": 99.0}


def test_a_write_to_a_planned_file_group_after_planning_is_a_conflict(tmp_path: Path, spark: Session) -> None:
    root = tmp_path / "table"
    writer = mor_table_writer(root, 9)
    t, plan = _schedule(root, ClusteringSettings())
    partition, file_id = sorted(plan.file_groups)[0]
    # an update of a key that lives in that file group, written after the plan (a log file in it)
    writer.upsert(pa.Table.from_pylist([_live_row(root, partition, file_id)], schema=SCHEMA))
    after = hudi_rs_rows(root)
    found = conflicting_writes(_timeline(root), _instant(root, t), plan)
    found_groups = [(i.requested_time, groups) for i, groups in found]
    assert found_groups == [(writer.instants[-1], [(partition, file_id)])]
    with pytest.raises(WriteConflictError, match=f"changed file group {file_id}"):
        _run(root, t, spark)
    assert _instant(root, t).state is State.REQUESTED
    assert not _outputs(root, t) and hudi_rs_rows(root) == after


@pytest.mark.parametrize("update", [False, True], ids=["copied", "copied+updated"])
def test_a_copied_version_6_timeline(tmp_path: Path, spark: Session, update: bool) -> None:
    """Layout 1 backfills completion times from file modification times: after a copy every
    commit looks completed just now, but a commit that wrote a base file no newer than the one
    the plan reads was there before the plan. An update after the plan still conflicts."""
    root = tmp_path / "table"
    spec = TableSpec("trips", SCHEMA, "id", "city", "ts", TableType.COPY_ON_WRITE, 6)
    writer = create_table(_storage(root), spec, max_file_rows=40)
    writer.insert(pa.Table.from_pylist([{"id": f"k{i:03d}", "ts": 1, "city": CITIES[i % 3], "v": 1.0}
                                        for i in range(200)], schema=SCHEMA))
    writer.upsert(pa.Table.from_pylist([{"id": f"k{i:03d}", "ts": 2, "city": CITIES[i % 3], "v": 2.0}
                                        for i in range(0, 200, 3)], schema=SCHEMA))
    before = hudi_rs_rows(root)
    t, plan = _schedule(root, ClusteringSettings(sort_columns=("id",)))
    time.sleep(0.01)
    for f in (root / ".hoodie").glob("*.commit"):
        os.utime(f)  # as a copy leaves them
    assert all(i.completion_time > t for i in _timeline(root).completed((Action.COMMIT,)))  # type: ignore[operator]
    if update:
        partition, file_id = sorted(plan.file_groups)[0]
        writer.upsert(pa.Table.from_pylist([_live_row(root, partition, file_id)], schema=SCHEMA))
        after = hudi_rs_rows(root)
        with pytest.raises(WriteConflictError, match=f"changed file group {file_id}"):
            _run(root, t, spark)
        assert hudi_rs_rows(root) == after and not _outputs(root, t)
        return
    result = _run(root, t, spark)
    assert result.instant.is_completed and hudi_rs_rows(root) == before


_COW, _MOR = TableType.COPY_ON_WRITE, TableType.MERGE_ON_READ


def _planned_then_updated(root: Path, version: int, table_type: TableType) -> tuple[str, ClusteringPlan, Any]:
    """A written table, a clustering planned over it, then an update of a row of the plan's first
    file group (a write requested after the plan): (the clustering, its plan, the update)."""
    spec = TableSpec("trips", SCHEMA, "id", "city", "ts", table_type, version)
    writer = create_table(_storage(root), spec, max_file_rows=40)
    writer.insert(pa.Table.from_pylist([{"id": f"k{i:03d}", "ts": 1, "city": CITIES[i % 3], "v": 1.0}
                                        for i in range(200)], schema=SCHEMA))
    t, plan = _schedule(root, ClusteringSettings())
    partition, file_id = sorted(plan.file_groups)[0]
    write = writer.upsert(pa.Table.from_pylist([_live_row(root, partition, file_id)], schema=SCHEMA))
    return t, plan, write


@pytest.mark.parametrize(("version", "table_type"), [(6, _COW), (6, _MOR), (8, _COW), (9, _MOR)],
                         ids=["v6-cow", "v6-mor", "v8-cow", "v9-mor"])
def test_a_write_started_after_planning_conflicts_whatever_its_file_time(
    tmp_path: Path, spark: Session, version: int, table_type: TableType
) -> None:
    """A write requested after the clustering was planned completed after it, whatever time its
    completed file carries: layout 1 keeps no completion time but the file's modification time,
    which a writer whose clock is behind (or a storage that keeps whole seconds) sets to the
    planning time or before. The timeline's order still says the write came after the plan."""
    root = tmp_path / "table"
    t, plan, write = _planned_then_updated(root, version, table_type)
    partition, file_id = sorted(plan.file_groups)[0]
    assert write.instant_time > t
    planned_at = instant_time_to_datetime(t, load_table_config(_storage(root)).tzinfo).timestamp()
    for f in _timeline_dir(root).glob(f"{write.instant_time}*"):
        os.utime(f, (planned_at, planned_at))  # its file says: completed when the plan was made
    after = hudi_rs_rows(root)
    found = conflicting_writes(_timeline(root), _instant(root, t), plan)
    assert [(i.requested_time, g) for i, g in found] == [(write.instant_time, [(partition, file_id)])]
    with pytest.raises(WriteConflictError, match=f"changed file group {file_id}"):
        _run(root, t, spark)
    assert _instant(root, t).state is State.REQUESTED
    assert not _outputs(root, t) and hudi_rs_rows(root) == after


@pytest.mark.parametrize("fid", ["cow/v6_simplekeygen_nonhivestyle", "cow/v6_nonpartitioned"])
def test_hudis_version_6_tables_refuse_a_clustering_over_a_later_commit(
    tmp_path: Path, spark: Session, fid: str
) -> None:
    """Hudi's own v6 copy-on-write tables: after the plan, a commit writes a new version of a planned
    file group (as Hudi's upsert does: a base file at its instant, a ``.commit`` naming it) and its
    completed file carries the planning time. The clustering must not replace that file group."""
    root = unzip_table(require_fixture(fid), tmp_path / "t")
    t, plan = _schedule(root, ClusteringSettings())
    s = plan.input_groups[0].slices[0]
    tz = load_table_config(_storage(root)).tzinfo
    time.sleep(0.002)
    w = datetime_to_instant_time(datetime.now(tz), tz)
    assert w > t
    assert s.base_file_name is not None
    name = BaseFileName.parse(s.base_file_name)
    assert name is not None
    path = "/".join(p for p in (s.partition_path, f"{s.file_id}_0-1-0_{w}.{name.extension}") if p)
    shutil.copyfile(_base_path(root, s), root / path)
    stat = {"fileId": s.file_id, "path": path, "prevCommit": name.instant_time, "numWrites": 1,
            "numUpdateWrites": 1, "partitionPath": s.partition_path}
    commit = {"partitionToWriteStats": {s.partition_path: [stat]}, "compacted": False,
              "extraMetadata": {}, "operationType": "UPSERT"}
    for state, text in ((".commit.requested", ""), (".inflight", ""), (".commit", json.dumps(commit))):
        (root / ".hoodie" / f"{w}{state}").write_text(text)
    planned_at = instant_time_to_datetime(t, tz).timestamp()
    os.utime(root / ".hoodie" / f"{w}.commit", (planned_at, planned_at))
    with pytest.raises(WriteConflictError, match=f"commit {w} completed, after the clustering was planned"):
        _run(root, t, spark)
    assert _instant(root, t).state is State.REQUESTED and not _outputs(root, t)
    before = hudi_rs_rows(root)
    # the runner rolls the plan that can never complete back and removes it (Hudi's writer does so
    # with a pending clustering it conflicts with): the file group can be planned again
    dropped = run_spark_service(_storage(root), InProcessLock(str(root)), t, spark, time_settings=FAST)
    assert isinstance(dropped, ClusteringDropped) and f"commit {w} completed" in dropped.summary()
    _assert_removed(root, t, dropped)
    assert hudi_rs_rows(root) == before
    t2, plan2 = _schedule(root, ClusteringSettings())
    assert (s.partition_path, s.file_id) in plan2.file_groups


def test_a_conflicting_write_during_the_job_leaves_a_recoverable_attempt(
    tmp_path: Path, spark: Session
) -> None:
    root = tmp_path / "table"
    writer = mor_table_writer(root, 9)
    written = len(writer.instants)
    t, plan = _schedule(root, ClusteringSettings())
    partition, file_id = sorted(plan.file_groups)[-1]
    row = _live_row(root, partition, file_id)

    def concurrent_write(done: int, total: int) -> None:  # a writer commits while the groups are written
        if done == total and len(writer.instants) == written:
            writer.upsert(pa.Table.from_pylist([row], schema=SCHEMA))

    with pytest.raises(WriteConflictError):
        _run(root, t, spark, progress=concurrent_write)
    after = hudi_rs_rows(root)
    assert _instant(root, t).state is State.INFLIGHT
    assert _outputs(root, t)  # written, not committed: invisible
    assert ("99.0" in str(after)) and hudi_rs_rows(root) == after
    storage = _storage(root)
    rolled = rollback_failed_attempt(storage, t, InProcessLock(storage.base_uri), time_settings=FAST)
    assert isinstance(rolled, RollbackResult) and not _outputs(root, t)
    assert hudi_rs_rows(root) == after
    # the plan's file group changed, it cannot complete any more: its rollback removed it
    assert rolled.target_deleted and _timeline(root).get(t) is None
    assert not list(_timeline_dir(root).glob(f"{t}.*"))


def _assert_removed(root: Path, t: str, dropped: ClusteringDropped) -> None:
    """The clustering ``t`` is gone from the timeline, its files and markers too, a completed
    rollback naming it stays; ``hoodied timeline`` shows no pending instant."""
    timeline = _timeline(root)
    assert timeline.get(t) is None and not list(_timeline_dir(root).glob(f"{t}.*"))
    assert not _outputs(root, t)
    assert not [p for p in (root / ".hoodie" / ".temp" / t).rglob("*") if p.is_file()]  # markers
    assert not (root / ".hoodie" / ".heartbeat" / t).exists()
    r = dropped.rollback.rollback
    rollback = timeline.get(r.requested_time)
    assert rollback is not None and rollback.is_completed and rollback.action is Action.ROLLBACK
    assert timeline.read_commit_metadata(rollback)["commitsRollback"] == [t]
    shown = CliRunner().invoke(cli, ["timeline", str(root), "--json"])
    assert shown.exit_code == 0, shown.output
    rows = json.loads(shown.output)
    assert t not in {row["requested_time"] for row in rows}
    assert [row for row in rows if row["state"] != "completed"] == []


@pytest.mark.parametrize(("version", "table_type"), [(6, _COW), (6, _MOR), (8, _COW), (9, _MOR)],
                         ids=["v6-cow", "v6-mor", "v8-cow", "v9-mor"])
def test_a_clustering_that_lost_a_conflict_is_rolled_back_and_removed(
    tmp_path: Path, spark: Session, version: int, table_type: TableType
) -> None:
    """Each run of a clustering whose file group a later write changed failed and left it requested,
    and every planner skipped its file groups: a dead end. Hudi's writer rolls back such a pending
    clustering and deletes its instant; the runner does the same, once, and the group is planned again."""
    root = tmp_path / "table"
    t, plan, _ = _planned_then_updated(root, version, table_type)
    partition, file_id = sorted(plan.file_groups)[0]
    after = hudi_rs_rows(root)
    storage = _storage(root)
    dropped = run_spark_service(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST)
    assert isinstance(dropped, ClusteringDropped), dropped
    assert f"changed file group {file_id}" in dropped.summary()
    assert "removed from the timeline" in dropped.summary()
    _assert_removed(root, t, dropped)
    assert hudi_rs_rows(root) == after
    # the next planning pass takes the file group again, and that clustering completes
    t2, plan2 = _schedule(root, ClusteringSettings())
    assert t2 > t and (partition, file_id) in plan2.file_groups
    done = run_spark_service(storage, InProcessLock(storage.base_uri), t2, spark, time_settings=FAST)
    assert done.instant.is_completed and hudi_rs_rows(root) == after


def test_an_inflight_attempt_that_lost_a_conflict_is_dropped_by_the_next_run(
    tmp_path: Path, spark: Session
) -> None:
    """A failed attempt whose file group a write changed meanwhile: the rollback before the retry
    removes it (the retry could only fail again)."""
    root = tmp_path / "table"
    writer = mor_table_writer(root, 8)
    t, plan = _schedule(root, ClusteringSettings())
    partition, file_id = sorted(plan.file_groups)[-1]
    row = _live_row(root, partition, file_id)
    written = len(writer.instants)

    def concurrent_write(done: int, total: int) -> None:
        if done == total and len(writer.instants) == written:
            writer.upsert(pa.Table.from_pylist([row], schema=SCHEMA))

    with pytest.raises(WriteConflictError):
        _run(root, t, spark, progress=concurrent_write)
    assert _instant(root, t).state is State.INFLIGHT and _outputs(root, t)
    after = hudi_rs_rows(root)
    storage = _storage(root)
    dropped = run_spark_service(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST)
    assert isinstance(dropped, ClusteringDropped) and dropped.rollback.deleted
    assert "after the clustering was planned, and changed file group" in dropped.summary()
    _assert_removed(root, t, dropped)
    assert hudi_rs_rows(root) == after


def test_a_plan_naming_a_missing_file_fails_and_changes_nothing(tmp_path: Path, spark: Session) -> None:
    root = unzip_table(require_fixture("mor/avro/v9_txns_simple_nometa"), tmp_path / "t")
    t = HUDI_CLUSTERINGS["mor/avro/v9_txns_simple_nometa"]
    _reopen(root, t)
    (_timeline_dir(root) / f"{t}.clustering.inflight").unlink()
    before = hudi_rs_rows(root)
    slice_info = _plan(root, t).input_groups[0].slices[0]
    missing = _base_path(root, slice_info)
    missing.rename(missing.with_name("moved-away"))
    name = slice_info.base_file_name
    with pytest.raises(HoodieFormatError, match=f"plan names base file .*{name}, which is missing"):
        _run(root, t, spark)
    assert _instant(root, t).state is State.REQUESTED
    assert not (root / ".hoodie" / ".heartbeat" / t).exists() and not _outputs(root, t)
    missing.with_name("moved-away").rename(missing)
    assert hudi_rs_rows(root) == before


def test_refusals(tmp_path: Path, spark: Session) -> None:
    root = unzip_table(require_fixture("cow/v9_txns_simple_meta"), tmp_path / "meta")
    t, _ = _schedule(root, ClusteringSettings())  # planned while every MDT partition was maintainable
    _declare(root, "expr_index_ts_day")
    before = _snapshot(root)
    with pytest.raises(UnsupportedTableError, match="MDT partition expr_index_ts_day is not maintained"):
        _schedule(root, ClusteringSettings())
    with pytest.raises(UnsupportedTableError, match="MDT partition expr_index_ts_day is not maintained"):
        _run(root, t, spark)
    assert _snapshot(root) == before
    root = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "nometa")
    with pytest.raises(InstantStateError, match="no clustering instant 20260307135707243"):
        _run(root, "20260307135707243", spark)  # an insert-overwrite replacecommit
    t = HUDI_CLUSTERINGS["cow/v9_txns_simple_nometa"]
    assert _run(root, t, spark).was_completed
    _reopen(root, t)
    (_timeline_dir(root) / f"{t}.clustering.inflight").unlink()
    requested = _timeline_dir(root) / f"{t}.clustering.requested"
    original = requested.read_bytes()
    raw = decode_metadata(original, "plan")
    strategy = raw["clusteringPlan"]["strategy"]
    bad_plans = [
        ({**strategy, "strategyClassName": "org.apache.hudi.client.clustering.run.strategy."
          "SparkConsistentBucketClusteringExecutionStrategy"}, True,
         "execution strategy .* is not supported"),
        (strategy, False, "does not preserve record metadata"),
        ({**strategy, "strategyParams": {"hoodie.clustering.plan.strategy.sort.columns": "nope"}}, True,
         "sort column 'nope' is not a top-level column"),
    ]
    before = _snapshot(root)
    for bad_strategy, preserve, message in bad_plans:
        plan = {**raw, "clusteringPlan": {**raw["clusteringPlan"], "strategy": bad_strategy,
                                          "preserveHoodieMetadata": preserve}}
        requested.unlink()
        requested.write_bytes(write_single_record(plan, "HoodieRequestedReplaceMetadata"))
        with pytest.raises(UnsupportedTableError, match=message):
            _run(root, t, spark)
        assert _instant(root, t).state is State.REQUESTED
    requested.unlink()
    requested.write_bytes(original)
    assert _snapshot(root) == before


# ---------------------------------------------------------------------------- kill -9

_DRIVER = """
import sys
from hoodied.executors.engine import spark_session
from hoodied.executors.clustering import execute_clustering
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.truetime import TimeSettings
storage = LocalStorage(sys.argv[1])
with spark_session("local[2]") as spark:
    execute_clustering(storage, load_table_config(storage), InProcessLock(storage.base_uri), sys.argv[2],
                       spark, time_settings=TimeSettings(max_expected_clock_skew_ms=5),
                       heartbeat_interval_ms=100)
"""


@pytest.mark.parametrize("case", ["v9-hudi-plan:task:1", "v6-written:written", "v9-mdt:mdt-done"])
def test_kill_9_then_rollback_and_retry(tmp_path: Path, spark: Session, case: str) -> None:
    table, point = case.split(":", 1)
    if table in ("v9-hudi-plan", "v9-mdt"):
        fid = "mor/avro/v9_txns_simple_nometa" if table == "v9-hudi-plan" else "cow/v9_txns_simple_meta"
        root = unzip_table(require_fixture(fid), tmp_path / "t")
        timeline = _timeline(root)
        t = next(i.requested_time for i in timeline.completed() if timeline.is_clustering(i))
        _reopen(root, t)
        (_timeline_dir(root) / f"{t}.clustering.inflight").unlink()
        pending = [f"{t}.clustering.inflight", f"{t}.clustering.requested"]
    else:
        root = tmp_path / "table"
        written_mor_table(root, 6)
        t, _ = _schedule(root, ClusteringSettings(sort_columns=("v",)))
        pending = [f"{t}.replacecommit.inflight", f"{t}.replacecommit.requested"]
    before = hudi_rs_rows(root)
    slices_before = set(hudi_rs_slices(root))
    groups = len(_plan(root, t).input_groups)
    proc = start_paused(_DRIVER, [str(root), t], point, tmp_path / "ready")
    try:
        deadline = time.monotonic() + 180
        if point in ("written", "mdt-done"):
            assert len(_outputs(root, t)) == groups
        else:  # group 1 paused after its marker, before its file; the others finish
            assert list((root / ".hoodie" / ".temp" / t).rglob("*.marker.CREATE"))
            while len(_outputs(root, t)) < groups - 1:
                assert time.monotonic() < deadline, "the other groups never finished"
                time.sleep(0.05)
    finally:
        kill_group(proc)
    written = [p.name for p in _outputs(root, t)]
    assert written
    assert sorted(p.name for p in _timeline_dir(root).glob(f"{t}*")) == pending
    assert hudi_rs_rows(root) == before  # the uncommitted files are invisible
    assert set(hudi_rs_slices(root)) == slices_before  # and the planned groups are not replaced
    if table == "v9-mdt":  # MDT delta commit T completed, data T pending: readers ignore it
        assert hudi_rs_rows(_without_mdt(root, tmp_path)) == before
    time.sleep(0.5)  # the dead driver's heartbeat (100 ms) expires
    storage = _storage(root)
    result = run_spark_service(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST,
                               heartbeat_interval_ms=100)
    timeline = _timeline(root)
    (rollback,) = timeline.completed((Action.ROLLBACK,))
    meta = timeline.read_commit_metadata(rollback)
    parts = meta["partitionMetadata"].values()
    deleted = {f.rsplit("/", 1)[-1] for p in parts for f in p["successDeleteFiles"]}
    assert set(written) <= deleted
    assert isinstance(result, ClusteringResult) and result.instant.is_completed
    assert {p.name for p in _outputs(root, t)} == {s["path"].rsplit("/", 1)[-1] for s in result.write_stats}
    assert not set(written) & {p.name for p in _outputs(root, t)}
    assert hudi_rs_rows(root) == before
    if table == "v9-mdt":
        assert hudi_rs_rows(_without_mdt(root, tmp_path)) == before
        assert committed_listing_drift(HoodieTable.open(str(root))).count == 0


# ---------------------------------------------------------------------------- pure rules


def test_split_points() -> None:
    assert split_points(0, 3) == [0]
    assert split_points(10, 1) == [0, 10]
    assert split_points(10, 3) == [0, 3, 6, 10]
    assert split_points(2, 5) == [0, 1, 2]  # never an empty part


def test_record_index_updates_point_at_the_new_file_groups(tmp_path: Path) -> None:
    root = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "t")
    config = load_table_config(_storage(root))
    file_id = "e7a919f0-d0f4-4bd5-82ee-32f7e35168b8-3"
    moved = [("region=apac", file_id, ["TXN-007", "TXN-015"])]
    updates = record_index_updates(moved, "20260307135709297", config)
    assert [k for k, _ in updates] == ["TXN-007", "TXN-015"]
    key, record = updates[0]
    assert record["key"] == key and record["type"] == 5
    info = record["recordIndexMetadata"]
    assert info["partitionName"] == "region=apac" and info["fileIndex"] == 3 and info["fileIdEncoding"] == 0
    bits = (info["fileIdHighBits"] % 2**64) << 64 | info["fileIdLowBits"] % 2**64
    assert f"{uuid.UUID(int=bits)}-3" == file_id
    expected = int(instant_time_to_datetime("20260307135709297", config.tzinfo).timestamp() * 1000)
    assert info["instantTime"] == expected
    # it encodes as the value Hudi's record index stores (the indexing build's encoding)
    value = record_index_value("region=apac", file_id, expected, config.version)
    decoded = fastavro.schemaless_reader(io.BytesIO(value), metadata_schema(config.version))
    decoded = cast(dict[str, Any], decoded)  # a HoodieMetadataRecord
    assert decoded["recordIndexMetadata"] == info


def test_sort_order_is_sparks() -> None:
    """Ascending, nulls first, NaN above every number (Spark's ordering), several columns."""
    rows = pa.table({"a": [3.0, None, 1.0, float("nan"), 1.0], "b": ["x", "y", None, "z", "a"]})
    job = SimpleNamespace(sort_columns=("a", "b"))
    order = _order(job, rows)  # type: ignore[arg-type]
    assert order is not None and order.to_pylist() == [1, 2, 4, 0, 3]
    assert _order(SimpleNamespace(sort_columns=()), rows) is None  # type: ignore[arg-type]


def test_replace_commit_metadata_bytes_as_hudi_writes_them(tmp_path: Path) -> None:
    """Version 6: Hudi's Jackson JSON byte for byte; version 9: Avro that decodes to Hudi's record."""
    root = unzip_table(require_fixture("cow/v6_simplekeygen_nonhivestyle_overwritetable"), tmp_path / "v6")
    (done,) = (root / ".hoodie").glob("*.replacecommit")
    raw = done.read_bytes()
    assert cm.encode_replace_commit_metadata(json.loads(raw), 6) == raw
    root = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "v9")
    raw = _completed_file(root, HUDI_CLUSTERINGS["cow/v9_txns_simple_nometa"]).read_bytes()
    assert _decode_replace(cm.encode_replace_commit_metadata(_decode_replace(raw), 9)) == _decode_replace(raw)
