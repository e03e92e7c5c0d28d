"""Log compaction of tables whose metadata table has column_stats, partition_stats, record_index
and secondary indexes (the v8 and v9 merge-on-read fixtures written by Hudi 1.0 and 1.1).

- Hudi's own MDT records of its delta commits that wrote log files are the reference for what a
  new log file gets: each such commit is replayed through ``commit_mdt_records`` (as a
  ``LOG_COMPACT``, whose files, column_stats, partition_stats and record_index records Hudi
  derives by the same code) and must give Hudi's cells byte for byte;
- a log compaction scheduled and executed on each fixture (cut back to before its compaction,
  so slices hold several log blocks): MDT delta commit T before the data instant, hudi-rs reads
  the same rows with and without the MDT, zero listing drift, column stats of the new log file
  as recomputed independently from its records, record-index deletes of its deleted keys,
  nothing for the secondary indexes (the slice's key -> secondary key map is unchanged), and a
  compaction afterwards still gives the same rows;
- kill -9 at ``mdt-log-written`` / ``mdt-done``, then rollback-then-retry;
- refusals (nothing written): a partitioned record index, a key a record-index delete would
  take from another file group, an expression index.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
import struct
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from hoodied.executors.engine import Session, spark_session
from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.filenames import LogFileName
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log import BlockType, avro_block_records, delete_block_records, read_log_blocks
from hoodied.hoodie.metadata.colstats import column_stats_records, index_definitions
from hoodied.hoodie.metadata.commit import commit_mdt_records
from hoodied.hoodie.metadata.encode import encode_value
from hoodied.hoodie.metadata.index_records import (
    record_index_record,
    secondary_index_key,
    secondary_key_strings,
)
from hoodied.hoodie.metadata.log_stats import log_file_stats
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.metadata.writer import MetadataWriter
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline import commit_metadata as cm
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.log_compaction import LogCompactionSettings, schedule_log_compaction
from hoodied.service.spark_jobs import run_compaction, run_spark_service
from tests.executors.test_compaction import EVERYTHING, FAST, _schedule
from tests.executors.test_compaction_mdt import (
    HUDI_COMPACTIONS,
    V8,
    V9,
    _check_readers,
    _cut_back_to_before,
    _declare,
    _mdt_records,
    _mdt_timeline,
    _row,
    _snapshot,
    log_compact_and_check,
)
from tests.executors.test_indexing import live_index_keys
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.mor_tables import hudi_rs_rows

SECONDARY = "secondary_index_"


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


def _log_deltacommits(root: Path) -> list[str]:
    """Hudi's delta commits whose write stats are all log files (the shape of a log compaction)."""
    storage = LocalStorage(str(root))
    timeline = Timeline.load(storage, load_table_config(storage))
    out = []
    for inst in timeline.completed((Action.DELTA_COMMIT,)):
        by_partition = timeline.read_commit_metadata(inst)["partitionToWriteStats"]
        stats = [s for ss in by_partition.values() for s in ss]
        if stats and all(LogFileName.parse(s["path"].rsplit("/", 1)[-1]) for s in stats):
            out.append(inst.requested_time)
    return out


# ---------------------------------------------------------------------------- Hudi's own records


@pytest.mark.parametrize("fid", [V8, V9])
def test_hudis_log_file_records_are_reproduced_byte_for_byte(fid: str, hudi_table) -> None:
    """files, column_stats (single-record and delete-only log files), tight-bound partition_stats
    and the record-index deletes of every Hudi delta commit that wrote only log files."""
    seen = {"delete-only": 0, "records": 0, "record_index": 0}
    for t in _log_deltacommits(hudi_table(fid)):
        root = hudi_table(fid)  # a fresh copy per commit
        hudi = _mdt_records(root, t, raw=True)
        deletes = {p: sorted([d.record_key for f in sorted((root / METADATA_FOLDER / p).glob(f".*_{t}.log.*"))
                              for b in read_log_blocks(LocalStorage(str(root / METADATA_FOLDER)),
                                                       f"{p}/{f.name}")
                              if b.block_type is BlockType.DELETE for d in delete_block_records(b)], key=str)
                   for p in ("record_index",)}
        metadata = _cut_back_to_before(root, fid, keep_mdt_t=False, t=t)
        metadata["operationType"] = "LOG_COMPACT"
        storage = LocalStorage(str(root))
        config = load_table_config(storage)
        ours = commit_mdt_records(storage, config, t, metadata)
        assert not any(p.startswith(SECONDARY) for p in ours)  # Hudi's SI records come from the diff
        for partition in ("files", "column_stats", "partition_stats"):
            cells = {key: encode_value(_row(record), config.version) for key, record in ours[partition]}
            assert cells == hudi[partition], (t, partition)
        ours_deleted = sorted(k for k, r in ours.get("record_index", []) if r is None)
        assert ours_deleted == deletes["record_index"], t
        assert all(r is None for _, r in ours.get("record_index", []))
        payloads = [_row(r)["ColumnStatsMetadata"] for _, r in ours["column_stats"]]
        seen["delete-only"] += any(p["valueCount"] == 0 for p in payloads)
        seen["records"] += any(p["valueCount"] > 0 for p in payloads)
        seen["record_index"] += bool(ours_deleted)
    assert all(seen.values()), seen  # each kind was compared at least once


# ---------------------------------------------------------------------------- scheduled and executed


def _before_hudis_compaction(root: Path, fid: str) -> None:
    """The fixture as it was before Hudi's compaction was even planned (slices of several logs).

    Both secondary indexes of the v9 fixture were built by indexing instants after its
    compaction (MDT init instants 00000000000000004 and 20260307162621933): neither existed
    then. The v8 fixture's secondary index predates its compaction and stays.
    """
    t = HUDI_COMPACTIONS[fid]
    _cut_back_to_before(root, fid, keep_mdt_t=False)
    props = root / ".hoodie" / "hoodie.properties"
    config = load_table_config(LocalStorage(str(root)))
    for partition in config.metadata_partitions:
        folder = root / METADATA_FOLDER / partition
        if partition.startswith(SECONDARY) and not [*folder.glob("*.hfile"), *folder.glob(".*.log.*")]:
            kept = ",".join(p for p in config.metadata_partitions if p != partition)
            declared = ",".join(config.metadata_partitions)
            props.write_text(props.read_text().replace(f"hoodie.table.metadata.partitions={declared}",
                                                       f"hoodie.table.metadata.partitions={kept}"))
            shutil.rmtree(folder)
    for f in (root / ".hoodie" / "timeline").glob(f"{t}.*"):
        f.unlink()
    for f in root.rglob(f"*_{t}.parquet"):
        f.unlink()


def _java_key(value: Any) -> Any:
    """Avro ``GenericData.compare`` order of one Python value (fastavro's decoding)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes):  # Avro "bytes": ByteBuffer.compareTo, signed bytes
        return bytes(b ^ 0x80 for b in value)
    if isinstance(value, float):
        return (math.isnan(value), value, math.copysign(1.0, value) > 0)
    return value


def _bits(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Floats by their bits (NaN equals NaN, -0.0 differs from 0.0)."""
    return tuple(struct.pack(">d", v) if isinstance(v, float) else v for v in values)


def _stored(value: Any, scale: int) -> Any:
    if isinstance(value, dt.datetime):  # timestamp-micros
        return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    if isinstance(value, Decimal):
        unscaled = int(value.scaleb(scale))
        return unscaled.to_bytes(((unscaled if unscaled >= 0 else ~unscaled).bit_length()) // 8 + 1,
                                 "big", signed=True)
    return value


def _expected_stats(root: Path, path: str, columns: list[str]) -> dict[str, dict[str, Any]]:
    """Column stats of a log file recomputed with fastavro (another decoder than hoodied's)."""
    records: list[dict[str, Any]] = []
    scales: dict[str, int] = {}
    for block in read_log_blocks(LocalStorage(str(root)), path):
        if block.block_type is BlockType.AVRO_DATA:
            records.extend(avro_block_records(block))
            for f in json.loads(block.schema_json)["fields"]:  # type: ignore[arg-type]
                kinds = f["type"] if isinstance(f["type"], list) else [f["type"]]
                scales[f["name"]] = max([k.get("scale", 0) for k in kinds if isinstance(k, dict)], default=0)
    out = {}
    for c in columns:
        values = [r[c] for r in records if r[c] is not None]
        out[c] = {"valueCount": len(records), "nullCount": len(records) - len(values),
                  "min": _stored(min(values, key=_java_key), scales.get(c, 0)) if values else None,
                  "max": _stored(max(values, key=_java_key), scales.get(c, 0)) if values else None}
    return out


def _secondary_from_rows(root: Path, column: str) -> set[str]:
    rows = HoodieTable.open(str(root)).to_arrow()
    keys = rows.column("_hoodie_record_key").to_pylist()
    values = secondary_key_strings(rows.column(column), column)
    return {secondary_index_key(v, k) for v, k in zip(values, keys, strict=True)}


@pytest.mark.parametrize("fid", [V8, V9])
def test_log_compaction_keeps_every_mdt_partition_exact(fid: str, hudi_table, tmp_path: Path,
                                                        spark: Session) -> None:
    root = hudi_table(fid)
    _before_hudis_compaction(root, fid)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    declared = config.metadata_partitions
    assert {"column_stats", "partition_stats", "record_index"} <= set(declared)
    secondary = {p: str(index_definitions(storage, config.props)[p]["sourceFields"][0])
                 for p in declared if p.startswith(SECONDARY)}
    assert bool(secondary) == (fid == V8)
    rows = hudi_rs_rows(root)
    _check_readers(root, tmp_path, rows)
    si_before = {p: live_index_keys(root, p) for p in secondary}
    lc = log_compact_and_check(root, tmp_path, spark, rows)
    records = _mdt_records(root, lc)
    new = {p.relative_to(root).as_posix(): p for p in sorted(root.rglob(f".*_{lc}.log.*"))
           if p.relative_to(root).parts[0] != ".hoodie"}
    assert new
    assert set(records) <= {"files", "column_stats", "partition_stats", "record_index"}
    # column_stats: one record per indexed column and new log file, as recomputed independently
    columns = list(index_definitions(storage, config.props)["column_stats"]["sourceFields"])
    by_file: dict[str, dict[str, dict[str, Any]]] = {}
    for r in records["column_stats"].values():
        cs = r["ColumnStatsMetadata"]
        by_file.setdefault(cs["fileName"], {})[cs["columnName"]] = cs
    assert set(by_file) == {p.name for p in new.values()}
    for rel, path in new.items():
        expected = _expected_stats(root, rel, columns)
        for c, want in expected.items():
            got = by_file[path.name][c]
            unwrap = [v[1]["value"] if isinstance(v, tuple) else (v or {}).get("value")
                      for v in (got["minValue"], got["maxValue"])]
            assert (got["valueCount"], got["nullCount"], *unwrap) == (
                want["valueCount"], want["nullCount"], want["min"], want["max"]), (rel, c)
            assert got["totalSize"] == got["totalUncompressedSize"] == 0 and not got["isTightBound"]
    counted = {cs["valueCount"] for f in by_file.values() for cs in f.values()}
    assert counted == ({0} if fid == V8 else {1})  # v8: a delete-only file; v9: a record and a delete
    assert all(r["ColumnStatsMetadata"]["isTightBound"] for r in records["partition_stats"].values())
    # record_index: a delete of every deleted key of the new log files, nothing else
    deleted = sorted((d.record_key for rel in new for b in read_log_blocks(storage, rel)
                      if b.block_type is BlockType.DELETE for d in delete_block_records(b)), key=str)
    mdt_storage = LocalStorage(str(root / METADATA_FOLDER))
    ri_logs = sorted((root / METADATA_FOLDER / "record_index").glob(f".*_{lc}.log.*"))
    mdt_deletes = sorted((d.record_key for f in ri_logs
                          for b in read_log_blocks(mdt_storage, f"record_index/{f.name}")
                          if b.block_type is BlockType.DELETE for d in delete_block_records(b)), key=str)
    assert mdt_deletes == deleted and not records.get("record_index")  # no HFile cells, deletes only
    # Hudi deleted the same key from the record index before: same file group, same block content
    def delete_blocks(files: list[Path]) -> set[tuple[str, tuple[str | None, ...], bytes]]:
        return {(f.name.split("_")[0], tuple(d.record_key for d in delete_block_records(b)), b.content())
                for f in files for b in read_log_blocks(mdt_storage, f"record_index/{f.name}")
                if b.block_type is BlockType.DELETE}

    all_logs = sorted((root / METADATA_FOLDER / "record_index").glob(".*.log.*"))
    hudi_logs = [f for f in all_logs if f not in ri_logs]
    assert delete_blocks(ri_logs) and delete_blocks(ri_logs) <= delete_blocks(hudi_logs)
    # secondary indexes: unchanged, and still the secondary values of the live rows
    for p, column in secondary.items():
        assert live_index_keys(root, p) == si_before[p] == _secondary_from_rows(root, column), p
    # a compaction of the log-compacted slices afterwards
    t = _schedule(root, EVERYTHING)
    run_compaction(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST)
    _check_readers(root, tmp_path, rows)


# ---------------------------------------------------------------------------- many records, many types

TYPED = pa.schema([
    ("id", pa.string()), ("ts", pa.int64()), ("part", pa.string()), ("name", pa.string()),
    ("n", pa.int32()), ("x", pa.float64()), ("z", pa.float64()), ("f", pa.float32()), ("flag", pa.bool_()),
    ("day", pa.date32()), ("at", pa.timestamp("us", tz="UTC")), ("amount", pa.decimal128(12, 3)),
    ("raw", pa.binary()),
])  # fmt: skip


EPOCH_2024 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _typed_rows(keys: range, ts: int) -> list[dict[str, Any]]:
    names = ["zoë", "Zed", "éclair", "a", "\U0001F600 smile", "ｚ", None]
    out = []
    for i in keys:
        out.append({
            "id": f"k{i:03d}", "ts": ts, "part": "p", "name": names[(i + ts) % len(names)],
            "n": None if i % 5 == 0 else (i * 7 + ts) % 23 - 11,
            "x": [-0.0, 0.0, 1.5, -2.25, float("nan"), 3.0][(i // 2 + ts) % 6],
            "z": [0.0, -0.0][(i // 2) % 2],
            "f": float((i * ts) % 9) - 4.5, "flag": (i + ts) % 3 == 0,
            "day": dt.date(2024, 1, 1) + dt.timedelta(days=(i * 13 + ts) % 40 - 20),
            "at": EPOCH_2024 + dt.timedelta(microseconds=(i * 7919 + ts) % 100003),
            "amount": Decimal((i * 37 + ts) % 1000) / 1000 + 1, "raw": bytes([(i * 31 + ts) % 256, i % 7]),
        })  # fmt: skip
    return out


def test_column_ranges_of_a_log_compacted_file_of_many_records(tmp_path: Path, spark: Session) -> None:
    """Several blocks of many records and types stitched into one file: its ranges follow Avro's
    comparison (UTF-8 strings, signed bytes, -0.0 < 0.0 < NaN, dates, timestamps, decimals),
    null counts, and no record of the delete block counts."""
    root = tmp_path / "typed"
    spec = TableSpec("typed", TYPED, "id", "part", "ts", TableType.MERGE_ON_READ, 9)
    writer = create_table(LocalStorage(str(root)), spec)
    writer.insert(pa.Table.from_pylist(_typed_rows(range(60), 1), schema=TYPED))
    for ts in range(2, 6):
        gone_ids = [f"k{i:03d}" for i in range(ts, 60, 9)]
        gone = pa.table({"id": gone_ids, "part": ["p"] * len(gone_ids)})
        writer.upsert(pa.Table.from_pylist(_typed_rows(range(ts % 3, 60, 2), ts), schema=TYPED), deletes=gone)
    storage = LocalStorage(str(root))
    inst, planned = schedule_log_compaction(storage, InProcessLock(storage.base_uri),
                                            LogCompactionSettings(blocks_threshold=2), time_settings=FAST)
    assert inst is not None, planned.summary()
    result = run_spark_service(storage, InProcessLock(storage.base_uri), inst.requested_time, spark,
                               time_settings=FAST)
    assert result is not None
    columns = ["_hoodie_commit_time", "_hoodie_record_key", *TYPED.names]
    paths = [p.relative_to(root).as_posix() for p in root.rglob(f".*_{inst.requested_time}.log.*")]
    assert paths
    nan_max = signs = 0
    for rel in paths:
        partition, name = rel.rsplit("/", 1)
        stats = log_file_stats(storage, partition, name, columns, 9)
        expected = _expected_stats(root, rel, columns)
        deleted = [d.record_key for b in read_log_blocks(storage, rel) if b.block_type is BlockType.DELETE
                   for d in delete_block_records(b)]
        assert sorted(stats.deleted_keys) == sorted(deleted, key=str) and deleted
        assert [r.column for r in stats.ranges] == columns
        for r in stats.ranges:
            want = expected[r.column]
            got = (r.value_count, r.null_count, r.min_value, r.max_value)
            wanted = (want["valueCount"], want["nullCount"], want["min"], want["max"])
            assert _bits(got) == _bits(wanted), r.column
            assert r.total_size == r.total_uncompressed_size == 0
        kinds = {r.column: (r.value_type.name, r.type_info) for r in stats.ranges}
        assert kinds["amount"] == ("DECIMAL", "12,3") and kinds["day"] == ("DATE", None)
        assert kinds["at"] == ("TIMESTAMP_MICROS", None) and kinds["raw"] == ("BYTES", None)
        nan_max += math.isnan(next(r for r in stats.ranges if r.column == "x").max_value)
        z = next(r for r in stats.ranges if r.column == "z")
        signs += (math.copysign(1, z.min_value), math.copysign(1, z.max_value)) == (-1, 1)
        for _, record in column_stats_records(partition, stats.ranges, 9):
            encode_value(record, 9)  # valid HoodieMetadataRecords
    assert nan_max and signs  # NaN is the largest double and -0.0 < 0.0, as in Java


def test_a_column_of_only_nulls_in_a_v9_log_file_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "nulls"
    spec = TableSpec("nulls", SCHEMA_NULLS, "id", None, None, TableType.MERGE_ON_READ, 9)
    writer = create_table(LocalStorage(str(root)), spec)
    nulls = pa.array([None, None], pa.float64())
    writer.insert(pa.table({"id": ["a", "b"], "v": nulls}, schema=SCHEMA_NULLS))
    writer.upsert(pa.table({"id": ["a"], "v": pa.array([None], pa.float64())}, schema=SCHEMA_NULLS))
    log = next(root.rglob(".*.log.*"))
    storage = LocalStorage(str(root))
    with pytest.raises(UnsupportedTableError, match="column v holds only nulls"):
        log_file_stats(storage, "", log.name, ["id", "v"], 9)
    ranges = log_file_stats(storage, "", log.name, ["id", "v"], 8).ranges  # version 8: no value type
    assert [(r.column, r.min_value, r.null_count, r.value_count) for r in ranges] == [
        ("id", "a", 0, 1), ("v", None, 1, 1)]


SCHEMA_NULLS = pa.schema([("id", pa.string()), ("v", pa.float64())])


# ---------------------------------------------------------------------------- crashes and refusals

_DRIVER = """
import sys
from hoodied.executors.engine import spark_session
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.service.spark_jobs import run_spark_service
storage = LocalStorage(sys.argv[1])
with spark_session("local[2]") as spark:
    run_spark_service(storage, InProcessLock(storage.base_uri), sys.argv[2], spark,
                      time_settings=TimeSettings(max_expected_clock_skew_ms=5), heartbeat_interval_ms=100)
"""


@pytest.mark.parametrize("point", ["mdt-log-written", "mdt-done"])
def test_kill_9_around_the_mdt_deltacommit_then_rollback_and_retry(point: str, hudi_table, tmp_path: Path,
                                                                   spark: Session) -> None:
    root = hudi_table(V8)
    _before_hudis_compaction(root, V8)
    rows = hudi_rs_rows(root)
    storage = LocalStorage(str(root))
    inst, _ = schedule_log_compaction(storage, InProcessLock(storage.base_uri),
                                      LogCompactionSettings(blocks_threshold=2), time_settings=FAST)
    assert inst is not None
    lc = inst.requested_time
    proc = start_paused(_DRIVER, [str(root), lc], point, tmp_path / "ready")
    kill_group(proc)
    data = Timeline.load(storage, load_table_config(storage)).get(lc)
    assert data is not None and data.is_pending
    mdt_t = _mdt_timeline(root).get(lc)
    assert mdt_t is not None and mdt_t.is_completed == (point == "mdt-done")
    assert hudi_rs_rows(root) == rows  # readers ignore the MDT T of a pending data instant
    time.sleep(0.3)  # the dead driver's heartbeat (100 ms) expires
    run_spark_service(storage, InProcessLock(storage.base_uri), lc, spark, time_settings=FAST,
                      heartbeat_interval_ms=100)
    data = Timeline.load(storage, load_table_config(storage)).get(lc)
    mdt_t = _mdt_timeline(root).get(lc)
    assert data is not None and data.is_completed and mdt_t is not None and mdt_t.is_completed
    assert mdt_t.completion_time < data.completion_time  # type: ignore[operator]
    _check_readers(root, tmp_path, rows)
    new = [p for p in root.rglob(f".*_{lc}.log.*") if p.relative_to(root).parts[0] != ".hoodie"]
    assert len(new) == 1  # the killed attempt's file was rolled back
    mdt = LocalStorage(str(root / METADATA_FOLDER))
    mdt_logs = {p.relative_to(root / METADATA_FOLDER).as_posix()
                for p in (root / METADATA_FOLDER).rglob(f".*_{lc}.log.*")}
    timeline = _mdt_timeline(root)
    stats = timeline.read_commit_metadata(timeline.get(lc))["partitionToWriteStats"]  # type: ignore[arg-type]
    assert mdt_logs == {s["path"] for ss in stats.values() for s in ss}  # nothing of the killed attempt
    assert "record_index" in stats and all(b.block_type is BlockType.DELETE for p in mdt_logs
                                           if p.startswith("record_index/") for b in read_log_blocks(mdt, p))


def test_a_partitioned_record_index_or_an_expression_index_is_refused(hudi_table, spark: Session) -> None:
    """Planned while the table was maintainable, then refused by the planner and the executor."""
    for change in ("partitioned", "expression"):
        root = hudi_table(V8)
        _before_hudis_compaction(root, V8)
        storage = LocalStorage(str(root))
        inst, _ = schedule_log_compaction(storage, InProcessLock(storage.base_uri),
                                          LogCompactionSettings(blocks_threshold=2), time_settings=FAST)
        assert inst is not None
        if change == "partitioned":
            defs = root / ".hoodie" / ".index_defs" / "index.json"
            doc = json.loads(defs.read_text())
            doc["indexDefinitions"]["record_index"] = {
                "indexName": "record_index", "indexType": "record_index", "sourceFields": [],
                "indexOptions": {"isPartitioned": "true"}}
            defs.write_text(json.dumps(doc))
            match = "record_index is a partitioned record index; log compaction cannot keep it exact"
        else:
            _declare(root, "expr_index_ts_day")
            match = "MDT partition expr_index_ts_day is not maintained by hoodied; log compaction"
        before = _snapshot(root)
        with pytest.raises(UnsupportedTableError, match=match):
            schedule_log_compaction(storage, InProcessLock(storage.base_uri),
                                    LogCompactionSettings(blocks_threshold=2), time_settings=FAST)
        with pytest.raises(UnsupportedTableError, match=match) as err:
            run_spark_service(storage, InProcessLock(storage.base_uri), inst.requested_time, spark,
                              time_settings=FAST)
        assert "\n" not in str(err.value)
        assert _snapshot(root) == before


def test_a_record_index_delete_that_would_drop_a_live_entry_is_refused(hudi_table) -> None:
    """Hudi 1.0/1.1 would delete the key from the record index even when it lives again in
    another file group; hoodied refuses such a log compaction's MDT records instead."""
    root = hudi_table(V8)
    t = "20251220210125441"  # deletes e3cf430c-... from file group 8aa68f7e-...-0
    metadata = _cut_back_to_before(root, V8, keep_mdt_t=False, t=t)
    metadata["operationType"] = "LOG_COMPACT"
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    key = "e3cf430c-889d-4015-bc98-59bdce1e530c"
    assert [k for k, r in commit_mdt_records(storage, config, t, metadata)["record_index"]] == [key]
    # a later write put the key into another file group: the record index points there
    elsewhere = "036ded81-9ed4-479f-bcea-7145dfa0079b-0"
    lock = InProcessLock(storage.base_uri)
    later = "20251220210126500"
    with lock:
        moved = record_index_record(key, "city=san_francisco", elsewhere, 0)
        MetadataWriter(storage, config, lock, time_settings=FAST, upkeep=False).write_deltacommit(
            later, {"record_index": [(key, moved)]})
        data = TimelineWriter(storage, config, lock, time_settings=FAST)
        data.create_requested(Action.DELTA_COMMIT, later, None)
        data.transition_to_inflight(later, Action.DELTA_COMMIT)
        data.complete(later, Action.DELTA_COMMIT,
                      cm.encode_commit_metadata(cm.commit_metadata({}, "UPSERT", None), config.version))
    with pytest.raises(UnsupportedTableError, match=f"record key {key} deleted in .* lives in file group "
                                                     f"{elsewhere}; Hudi's record-index delete"):
        commit_mdt_records(storage, config, t, metadata)
