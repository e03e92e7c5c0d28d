"""Executing Hudi's ``indexing`` instants (async MDT indexing of secondary indexes).

The fixtures hold Hudi's own completed builds: ``v8_trips_8i3u1d`` (secondary index
``rider_idx``, Hudi 1.0) and the v9 ``v9_txns_simple_meta`` (``merchant_idx`` then
``txn_date_idx``, Hudi 1.1). ``derive_pending`` undoes what Hudi's indexing changed (its
inflight and completed timeline files, the MDT partition and the MDT delta commit that
initialized it, the partition in ``hoodie.properties``; optionally every later instant), which
leaves exactly the state ``CREATE INDEX`` had scheduled. hoodied then executes the instant and
its result is compared with Hudi's, field by field (``compare_with_hudi``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import fastavro
import pytest

from hoodied.executors.engine import Session, spark_session
from hoodied.executors.indexing import execute_indexing, rollback_failed_indexing
from hoodied.hoodie.errors import (
    HoodieFormatError,
    InstantNotReadyError,
    InstantStateError,
    UnsupportedTableError,
)
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.index_build import FileGroupSizing, estimate_file_group_count
from hoodied.hoodie.metadata.index_records import escape_key, secondary_index_file_group, secondary_index_key
from hoodied.hoodie.metadata.merge import merge_file_slice
from hoodied.hoodie.metadata.reader import METADATA_FOLDER, MetadataTable
from hoodied.hoodie.properties import (
    PROPERTIES_BACKUP_FILE,
    PROPERTIES_FILE,
    load_table_config,
    parse_java_properties,
    properties_text,
    read_table_properties,
)
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table_config_update import modify_table_properties, set_metadata_partition_state
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from tests.helpers.mor_tables import hudi_rs_rows

V8 = "mor/avro/v8_trips_8i3u1d"
V9 = "mor/avro/v9_txns_simple_meta"
V8_INDEXING, V8_PARTITION, V8_INIT = "20251220210117766", "secondary_index_rider_idx", "00000000000000004"
V9_MERCHANT, V9_MERCHANT_INIT = "20260307162621933", "00000000000000004"
V9_TXN_DATE = "20260307162622789"  # initialized at MDT instant V9_MERCHANT (the first indexing's time)
FAST = TimeSettings(max_expected_clock_skew_ms=5)
_TOKEN = re.compile(r"_\d+-\d+-\d+_")


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


# ---------------------------------------------------------------------------- deriving the pending state


def _instant_of(name: str) -> str | None:
    parsed = BaseFileName.parse(name) or LogFileName.parse(name)
    return parsed.instant_time if parsed is not None else None


def _requested_time(timeline_file: str) -> str:
    return timeline_file.split(".")[0].split("_")[0]


def derive_pending(root: Path, indexing: str, *, drop_later: bool) -> None:
    """Undo Hudi's execution of ``indexing`` (and with ``drop_later`` every later instant)."""
    storage = LocalStorage(str(root))
    timeline = Timeline.load(storage, load_table_config(storage))
    target = timeline.get(indexing)
    assert target is not None, indexing
    plan = timeline.read_plan(target) or {}
    partitions = [i["metadataPartitionPath"] for i in plan["indexPartitionInfos"]]
    mdt = root / METADATA_FOLDER
    inits = set()
    for p in partitions:
        inits |= {_instant_of(f.name) for f in (mdt / p).iterdir() if f.name.endswith(".log.1_0-0-0")}
        shutil.rmtree(mdt / p)
    for f in (mdt / ".hoodie/timeline").iterdir():
        if f.is_file() and _requested_time(f.name) in inits:
            f.unlink()
    for f in (root / ".hoodie/timeline").iterdir():
        if f.name.startswith(indexing) and ".indexing" in f.name and not f.name.endswith(".requested"):
            f.unlink()
    if drop_later:
        for folder in (root / ".hoodie/timeline", mdt / ".hoodie/timeline"):
            for f in folder.iterdir():
                if f.is_file() and _requested_time(f.name) > indexing:
                    f.unlink()
        for base in (root, mdt):
            for dirpath, _, names in os.walk(base):
                if Path(dirpath).relative_to(base).parts[:1] == (".hoodie",):
                    continue
                for n in names:
                    if (_instant_of(n) or "") > indexing:
                        os.unlink(os.path.join(dirpath, n))
    props, _ = read_table_properties(storage)
    done = [p for p in props["hoodie.table.metadata.partitions"].split(",") if p and p not in partitions]
    props["hoodie.table.metadata.partitions"] = ",".join(done)
    props["hoodie.table.metadata.partitions.inflight"] = ""  # Hudi 1.x schedules without marking it
    (root / PROPERTIES_FILE).write_text(properties_text(props, datetime.now(UTC)), encoding="latin-1")


# ---------------------------------------------------------------------------- comparing with Hudi


def _avro(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return cast(dict[str, Any], next(iter(fastavro.reader(f))))  # a container of records


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, f"{folder}/{pattern}: {found}"
    return found[0]


def _normalized_cells(root: Path, partition: str, init: str) -> dict[str, list[Any]]:
    out = {}
    for f in sorted((root / METADATA_FOLDER / partition).glob(f"*_{init}.hfile")):
        records = []
        for key, value in HFileReader(f.read_bytes(), f.name).records():
            name = value.get("_hoodie_file_name")
            records.append((key, {**value, "_hoodie_file_name": _TOKEN.sub("_T_", name) if name else name}))
        out[_TOKEN.sub("_T_", f.name)] = records
    return out


def compare_with_hudi(hudi: Path, ours: Path, partition: str, init: str, indexing: str) -> dict[str, Any]:
    """Assert hoodied's build equals Hudi's; returns the figures compared."""
    folder_h, folder_o = hudi / METADATA_FOLDER / partition, ours / METADATA_FOLDER / partition

    def names(folder: Path) -> list[str]:
        return sorted(_TOKEN.sub("_T_", p.name) for p in folder.iterdir()
                      if _instant_of(p.name) == init or p.name == ".hoodie_partition_metadata")

    assert names(folder_o) == names(folder_h)
    cells_h, cells_o = _normalized_cells(hudi, partition, init), _normalized_cells(ours, partition, init)
    assert cells_o == cells_h
    for log in folder_h.glob(f".*_{init}.log.1_0-0-0"):  # empty DELETE block, byte for byte
        assert (folder_o / log.name).read_bytes() == log.read_bytes()
    mdt_h, mdt_o = hudi / METADATA_FOLDER / ".hoodie/timeline", ours / METADATA_FOLDER / ".hoodie/timeline"
    for state in ("requested", "inflight"):
        name = f"{init}.deltacommit.{state}"
        assert (mdt_o / name).read_bytes() == (mdt_h / name).read_bytes()
    md_h = _avro(_one(mdt_h, f"{init}_*.deltacommit"))
    md_o = _avro(_one(mdt_o, f"{init}_*.deltacommit"))
    assert {k: v for k, v in md_o.items() if k != "partitionToWriteStats"} == \
        {k: v for k, v in md_h.items() if k != "partitionToWriteStats"}
    stats_h = {s["fileId"]: s for s in md_h["partitionToWriteStats"][partition]}
    stats_o = {s["fileId"]: s for s in md_o["partitionToWriteStats"][partition]}
    assert sorted(stats_o) == sorted(stats_h)
    sizes = {}
    varying = ("path", "totalWriteBytes", "fileSizeInBytes", "runtimeStats")  # token, HFile bytes, timing
    for file_id, s in stats_h.items():
        assert {k: v for k, v in stats_o[file_id].items() if k not in varying} == \
            {k: v for k, v in s.items() if k not in varying}
        assert _TOKEN.sub("_T_", stats_o[file_id]["path"]) == _TOKEN.sub("_T_", s["path"])
        sizes[file_id] = (s["fileSizeInBytes"], stats_o[file_id]["fileSizeInBytes"])
    props_h = parse_java_properties((hudi / PROPERTIES_FILE).read_text("latin-1"))
    props_o = parse_java_properties((ours / PROPERTIES_FILE).read_text("latin-1"))
    assert props_o == props_h
    assert not (ours / PROPERTIES_BACKUP_FILE).exists()
    index_defs = ".hoodie/.index_defs/index.json"
    assert (ours / index_defs).read_bytes() == (hudi / index_defs).read_bytes()
    tl_h, tl_o = hudi / ".hoodie/timeline", ours / ".hoodie/timeline"
    assert _avro(_one(tl_o, f"{indexing}_*.indexing")) == _avro(_one(tl_h, f"{indexing}_*.indexing"))
    assert (tl_o / f"{indexing}.indexing.inflight").read_bytes() == b""
    return {"files": len(names(folder_o)), "records": sum(len(v) for v in cells_o.values()), "sizes": sizes}


def _without_mdt(root: Path, tmp: Path) -> Path:
    copy = tmp / f"{root.name}-nomdt"
    shutil.copytree(root, copy)
    shutil.rmtree(copy / METADATA_FOLDER)
    props, _ = read_table_properties(LocalStorage(str(copy)))
    props["hoodie.table.metadata.partitions"] = ""
    (copy / PROPERTIES_FILE).write_text(properties_text(props, datetime.now(UTC)), encoding="latin-1")
    return copy


def live_index_keys(root: Path, partition: str) -> set[str]:
    """The secondary index as hoodied's metadata reader sees it (latest merged slices)."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    mdt = MetadataTable.open(storage, config, Timeline.load(storage, config))
    assert mdt is not None
    keys: set[str] = set()
    for fs in mdt.file_slices(partition):
        merged = merge_file_slice(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files))
        for key, entry in merged.entries.items():
            info = entry.record.get("SecondaryIndexMetadata")
            info = info[1] if isinstance(info, tuple) else info  # (record name, record)
            if info is not None and not info.get("isDeleted"):
                keys.add(key)
    return keys


def _execute(root: Path, spark: Session, instant: str) -> Any:
    storage = LocalStorage(str(root))
    return execute_indexing(storage, load_table_config(storage), InProcessLock(storage.base_uri), instant,
                            spark, time_settings=FAST, heartbeat_interval_ms=100)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------- pure rules


def test_secondary_index_keys_escape_as_hudi() -> None:
    assert escape_key(None) == "\0"
    assert secondary_index_key("a$b\\c", "k$1") == "a\\$b\\\\c$k\\$1"
    assert secondary_index_key(None, "TXN-003") == "\0$TXN-003"
    # V2 routes by "<escaped secondary key>$" only (values seen in the v9 fixture)
    assert secondary_index_file_group("19743$TXN-017", 10, "V2") == 0
    assert secondary_index_file_group("\0$TXN-003", 10, "V2") == 6
    assert secondary_index_file_group("rider-J$c8abbe79-8d89-47ea-b4ce-4d224bae5bfa", 10, "V1") == 0


def test_file_group_count_estimate() -> None:
    assert estimate_file_group_count(8) == 10
    assert estimate_file_group_count(0) == 10
    big = FileGroupSizing(min_count=1, max_count=100)
    assert estimate_file_group_count(30_000_000, big) == 30_000_000 * 2 // (2**30 // 48)
    assert estimate_file_group_count(10**10, big) == 100
    assert estimate_file_group_count(5, FileGroupSizing(min_count=3, max_count=3)) == 3


def test_properties_update_recovers_like_hudi(hudi_table: Any) -> None:
    root = hudi_table(V8)
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    original = (root / PROPERTIES_FILE).read_bytes()
    # a crash after step 3 (backup written, hoodie.properties deleted): readers use the backup
    (root / PROPERTIES_BACKUP_FILE).write_bytes(original)
    (root / PROPERTIES_FILE).unlink()
    assert load_table_config(storage).metadata_partitions
    with lock:
        props = set_metadata_partition_state(storage, lock, ["secondary_index_x"], state="inflight")
    assert props["hoodie.table.metadata.partitions.inflight"] == "secondary_index_x"
    assert not (root / PROPERTIES_BACKUP_FILE).exists()
    config = load_table_config(storage)
    assert config.metadata_partitions_inflight == ("secondary_index_x",)
    assert "secondary_index_rider_idx" in config.metadata_partitions
    with lock:
        set_metadata_partition_state(storage, lock, ["secondary_index_x"], state="completed")
        set_metadata_partition_state(storage, lock, ["secondary_index_rider_idx"], state="absent")
        unchanged = modify_table_properties(storage, lock, lambda p: p)
    config = load_table_config(storage)
    assert config.metadata_partitions == ("column_stats", "files", "partition_stats", "record_index",
                                          "secondary_index_x")
    assert config.metadata_partitions_inflight == ()
    assert unchanged == read_table_properties(storage)[0]
    # a crash after the new file was written but before the backup was deleted
    (root / PROPERTIES_BACKUP_FILE).write_bytes(original)
    with lock:
        set_metadata_partition_state(storage, lock, ["secondary_index_y"], state="inflight")
    assert not (root / PROPERTIES_BACKUP_FILE).exists()
    assert load_table_config(storage).metadata_partitions_inflight == ("secondary_index_y",)


# ---------------------------------------------------------------------------- against Hudi's own builds


def test_v8_secondary_index_equals_hudis(
    hudi_table: Any, shared_table: Any, spark: Session, tmp_path: Path
) -> None:
    hudi = shared_table(V8)
    root = hudi_table(V8)
    derive_pending(root, V8_INDEXING, drop_later=True)
    before = hudi_rs_rows(root)
    assert before == hudi_rs_rows(_without_mdt(root, tmp_path / "a"))
    result = _execute(root, spark, V8_INDEXING)
    assert result.init_instant == V8_INIT and result.file_groups == 10 and result.records == 8
    assert result.instant.is_completed and "10 file groups, 6 base files, 8 records" in result.summary()
    figures = compare_with_hudi(hudi, root, V8_PARTITION, V8_INIT, V8_INDEXING)
    assert figures["files"] == 17 and figures["records"] == 8  # 10 log files, 6 HFiles, partition metadata
    assert hudi_rs_rows(root) == before == hudi_rs_rows(_without_mdt(root, tmp_path / "b"))
    assert len(live_index_keys(root, V8_PARTITION)) == 8
    again = _execute(root, spark, V8_INDEXING)
    assert again.was_completed and "already completed" in again.summary()


def test_v9_second_index_initialized_at_first_indexing_time(hudi_table: Any, shared_table: Any,
                                                           spark: Session) -> None:
    hudi = shared_table(V9)
    root = hudi_table(V9)
    derive_pending(root, V9_TXN_DATE, drop_later=False)
    before = hudi_rs_rows(root)
    result = _execute(root, spark, V9_TXN_DATE)
    assert result.init_instant == V9_MERCHANT
    figures = compare_with_hudi(hudi, root, "secondary_index_txn_date_idx", V9_MERCHANT, V9_TXN_DATE)
    assert figures["records"] == 12
    assert hudi_rs_rows(root) == before
    assert {k.split("$")[0] for k in live_index_keys(root, "secondary_index_txn_date_idx")} == \
        {"19737", "19738", "19740", "19741", "19742", "19743"}


def test_v9_index_with_null_values_equals_hudis(hudi_table: Any, shared_table: Any, spark: Session) -> None:
    hudi = shared_table(V9)
    root = hudi_table(V9)
    derive_pending(root, V9_TXN_DATE, drop_later=False)
    derive_pending(root, V9_MERCHANT, drop_later=True)
    # the second index was scheduled after the first had completed; its plan stays for the comparison
    (root / ".hoodie/timeline" / f"{V9_TXN_DATE}.indexing.requested").unlink(missing_ok=True)
    result = _execute(root, spark, V9_MERCHANT)
    assert result.init_instant == V9_MERCHANT_INIT
    expected = shutil.copytree(hudi, root.parent / "hudi-merchant-only")
    derive_pending(expected, V9_TXN_DATE, drop_later=False)  # Hudi's state right after the first index
    (expected / ".hoodie/timeline" / f"{V9_TXN_DATE}.indexing.requested").unlink()
    figures = compare_with_hudi(expected, root, "secondary_index_merchant_idx", V9_MERCHANT_INIT, V9_MERCHANT)
    assert figures["records"] == 12
    assert "\0$TXN-003" in live_index_keys(root, "secondary_index_merchant_idx")


def test_v8_build_catches_up_to_the_latest_snapshot(
    hudi_table: Any, shared_table: Any, spark: Session
) -> None:
    """With every later write kept, the index is built from the latest merged slices: the same live
    records as Hudi's index after its own catch-up, compaction and log files."""
    hudi = shared_table(V8)
    root = hudi_table(V8)
    derive_pending(root, V8_INDEXING, drop_later=False)
    before = hudi_rs_rows(root)
    result = _execute(root, spark, V8_INDEXING)
    assert result.init_instant == V8_INIT
    assert live_index_keys(root, V8_PARTITION) == live_index_keys(hudi, V8_PARTITION)
    assert len(live_index_keys(root, V8_PARTITION)) == 6  # F and J deleted
    assert hudi_rs_rows(root) == before


# ---------------------------------------------------------------------------- refusals


def _request(root: Path, partition: str, instant: str = "20251220210200000") -> str:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    with lock:
        info = {"version": 1, "metadataPartitionPath": partition, "indexUptoInstant": "20251220210130911",
                "extraMetadata": {}}
        TimelineWriter(storage, config, lock, time_settings=FAST).create_requested(
            Action.INDEXING, instant, {"version": 1, "indexPartitionInfos": [info]})
    return instant


@pytest.mark.parametrize(("partition", "error", "says"), [
    ("expr_index_fare", UnsupportedTableError, "builds secondary indexes"),
    ("column_stats", InstantStateError, "already exist or are inflight"),
    ("partition_stats", InstantStateError, "already exist or are inflight"),
    ("record_index", InstantStateError, "already exist or are inflight"),
    ("bloom_filters", UnsupportedTableError, "not supported"),
    ("files", UnsupportedTableError, "not supported"),
    ("secondary_index_nope", HoodieFormatError, "no index definition"),
    ("secondary_index_rider_idx", InstantStateError, "already exist or are inflight"),
])
def test_refused_without_changes(
    hudi_table: Any, spark: Session, partition: str, error: type, says: str
) -> None:
    root = hudi_table(V8)
    t = _request(root, partition)
    before = _snapshot(root)
    with pytest.raises(error, match=says) as raised:
        _execute(root, spark, t)
    assert "\n" not in str(raised.value)
    assert _snapshot(root) == before


def test_refused_for_table_version_6(hudi_table: Any, spark: Session) -> None:
    root = hudi_table("mor/avro/v6_trips_8i1u")
    t = _request(root, "secondary_index_rider_idx", "20250331030700000")
    before = _snapshot(root)
    with pytest.raises(UnsupportedTableError, match="version 6"):
        _execute(root, spark, t)
    assert _snapshot(root) == before


def test_waits_for_pending_writes(hudi_table: Any, spark: Session) -> None:
    root = hudi_table(V8)
    derive_pending(root, V8_INDEXING, drop_later=False)
    (root / ".hoodie/timeline/20251220210130911_20251220210131755.deltacommit").unlink()
    before = _snapshot(root)
    with pytest.raises(InstantNotReadyError, match="pending .*20251220210130911 deltacommit.*retry later"):
        _execute(root, spark, V8_INDEXING)
    assert _snapshot(root) == before


def test_failed_attempt_is_refused_then_undone(hudi_table: Any, shared_table: Any, spark: Session) -> None:
    root = hudi_table(V8)
    derive_pending(root, V8_INDEXING, drop_later=True)
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    assert rollback_failed_indexing(storage, lock, V8_INDEXING) is None  # only requested: nothing to do
    (root / ".hoodie/timeline" / f"{V8_INDEXING}.indexing.inflight").write_bytes(b"")
    with pytest.raises(InstantStateError, match="failed attempt"):
        _execute(root, spark, V8_INDEXING)
    undone = rollback_failed_indexing(storage, lock, V8_INDEXING, heartbeat_interval_ms=100)
    assert undone is not None and "requested again" in undone.summary()
    _execute(root, spark, V8_INDEXING)
    compare_with_hudi(shared_table(V8), root, V8_PARTITION, V8_INIT, V8_INDEXING)


# ---------------------------------------------------------------------------- column_stats

COW9 = "cow/v9_txns_simple_meta"


def _drop_partition(root: Path, partition: str) -> None:
    """Remove an MDT partition Hudi initialized (its folder, its init delta commit, the property)."""
    mdt = root / METADATA_FOLDER
    inits = {_instant_of(f.name) for f in (mdt / partition).iterdir() if f.name.endswith(".log.1_0-0-0")}
    shutil.rmtree(mdt / partition)
    for f in (mdt / ".hoodie/timeline").iterdir():
        if f.is_file() and _requested_time(f.name) in inits:
            f.unlink()
    props, _ = read_table_properties(LocalStorage(str(root)))
    props["hoodie.table.metadata.partitions"] = ",".join(
        p for p in props["hoodie.table.metadata.partitions"].split(",") if p != partition)
    (root / PROPERTIES_FILE).write_text(properties_text(props, datetime.now(UTC)), encoding="latin-1")


def _unwrap(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return _unwrap(value[1])
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    return value


def live_records(root: Path, partition: str) -> dict[str, Any]:
    """Key -> payload of the live records of an MDT partition (hoodied's metadata reader)."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    mdt = MetadataTable.open(storage, config, Timeline.load(storage, config))
    assert mdt is not None
    out = {}
    for fs in mdt.file_slices(partition):
        merged = merge_file_slice(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files))
        for key, entry in merged.entries.items():
            record = _unwrap(entry.record)
            out[key] = {k: v for k, v in record.items() if not k.startswith("_hoodie") and k != "key"}
    return out


def test_column_stats_rebuilt_equal_to_hudis_records(
    hudi_table: Any, shared_table: Any, spark: Session
) -> None:
    """No fixture holds Hudi's async build of column_stats: the rebuilt partition is compared with
    the records Hudi's own MDT holds after all its writes (init + updates + MDT compaction)."""
    hudi = shared_table(COW9)
    root = hudi_table(COW9)
    _drop_partition(root, "column_stats")
    t = _request(root, "column_stats", "20260307162500000")
    rows = hudi_rs_rows(root)
    result = _execute(root, spark, t)
    # the data timeline's latest completed instant is an indexing: its time initializes the partition
    assert result.init_instant == "20260307162458438" and result.file_groups == 2
    ours, theirs = live_records(root, "column_stats"), live_records(hudi, "column_stats")
    assert len(ours) == len(theirs) > 100
    assert ours == theirs
    assert "column_stats" in load_table_config(LocalStorage(str(root))).metadata_partitions
    assert hudi_rs_rows(root) == rows


def test_partition_stats_rebuilt_equal_to_hudis_records(
    hudi_table: Any, shared_table: Any, spark: Session
) -> None:
    hudi = shared_table(COW9)
    root = hudi_table(COW9)
    _drop_partition(root, "partition_stats")
    t = _request(root, "partition_stats", "20260307162500000")
    result = _execute(root, spark, t)
    assert result.file_groups == 1
    ours, theirs = live_records(root, "partition_stats"), live_records(hudi, "partition_stats")
    assert sorted(ours) == sorted(theirs) and len(ours) == 48  # 16 columns x 3 partitions
    sums = ("valueCount", "totalSize", "totalUncompressedSize")
    differing = set()
    for key, record in ours.items():
        a, b = record["ColumnStatsMetadata"], theirs[key]["ColumnStatsMetadata"]
        # bounds, null counts and tightness: as Hudi's
        assert {k: v for k, v in a.items() if k not in sums} == {k: v for k, v in b.items() if k not in sums}
        if any(a[k] != b[k] for k in sums):
            differing.add(a["fileName"])
    # Hudi's writers merge partition stats incrementally (counts and sizes summed across commits);
    # the clustering of region=apac left sums over replaced files there. An initialization (Hudi's
    # or hoodied's) counts the latest base files only.
    assert differing == {"region=apac"}


def test_column_stats_of_log_files_refused(hudi_table: Any, spark: Session) -> None:
    root = hudi_table(V8)
    _drop_partition(root, "column_stats")
    t = _request(root, "column_stats")
    before = _snapshot(root)
    with pytest.raises(UnsupportedTableError, match="column stats of log files"):
        _execute(root, spark, t)
    assert _snapshot(root) == before


# ---------------------------------------------------------------------------- record_index


def test_record_index_rebuilt_equal_to_hudis_records(
    hudi_table: Any, shared_table: Any, spark: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """v9 fixtures were written on a UTC-6 machine with a LOCAL timeline: the record index holds
    base instants as epoch milliseconds of that zone."""
    monkeypatch.setenv("TZ", "America/Chicago")
    for fid in (COW9, V9):
        hudi, root = shared_table(fid), hudi_table(fid)
        _drop_partition(root, "record_index")
        result = _execute(root, spark, _request(root, "record_index", "20260307162700000"))
        assert result.file_groups == 10 and result.records == 12
        assert live_records(root, "record_index") == live_records(hudi, "record_index")


def test_record_index_after_compaction_points_at_the_compacted_slice(
    hudi_table: Any, shared_table: Any, spark: Session
) -> None:
    """Hudi does not rewrite record index entries on compaction (same file group), so its entries
    keep the insert's instant; an initialization takes the slice's base instant (the compaction)."""
    hudi, root = shared_table(V8), hudi_table(V8)
    _drop_partition(root, "record_index")
    _execute(root, spark, _request(root, "record_index"))
    ours, theirs = live_records(root, "record_index"), live_records(hudi, "record_index")
    assert sorted(ours) == sorted(theirs) and len(ours) == 6
    for key, record in ours.items():
        a, b = record["recordIndexMetadata"], theirs[key]["recordIndexMetadata"]
        assert {**a, "instantTime": None} == {**b, "instantTime": None}
        assert (a["instantTime"], b["instantTime"]) == (1766264489235, 1766264468078)  # ...29235 / ...08078


def test_record_index_refuses_duplicate_keys(hudi_table: Any, spark: Session) -> None:
    root = hudi_table("cow/v9_timebasedkeygen_nonhivestyle")  # TXN-001 twice (two file groups)
    _drop_partition(root, "record_index")
    t = _request(root, "record_index", "20260403183900000")
    with pytest.raises(Exception, match="more than one file group"):
        _execute(root, spark, t)
    assert (root / ".hoodie/timeline" / f"{t}.indexing.inflight").exists()  # a failed attempt
    storage = LocalStorage(str(root))
    deadline = datetime.now(UTC).timestamp() + 30
    while True:
        try:
            assert rollback_failed_indexing(storage, InProcessLock(storage.base_uri), t,
                                            heartbeat_interval_ms=100) is not None
            break
        except InstantStateError:
            assert datetime.now(UTC).timestamp() < deadline
    assert "record_index" not in load_table_config(storage).metadata_partitions_inflight
