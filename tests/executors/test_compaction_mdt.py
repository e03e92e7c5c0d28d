"""Compaction (and log compaction) of tables with a metadata table (table versions 8 and 9).

The strongest check replays Hudi's own last compaction T of each fixture: the table is cut back
to the moment before T completed (later instants and T's completion removed), then

- ``commit_mdt_records`` for Hudi's commit metadata of T gives, cell for cell and byte for byte,
  the records of Hudi's MDT delta commit T (files, column_stats, tight-bound partition_stats);
- hoodied re-executes T (rollback of the failed attempt, which rolls back Hudi's MDT T, then
  the compaction): its MDT delta commit T completes before the data instant, its statistics
  equal Hudi's for the same file groups, hudi-rs reads the same rows with the MDT and without
  it, and the listing drift is zero.

Crash safety: the driver is killed with SIGKILL in the middle of the MDT log write and between
the MDT delta commit and the data completion; the rollback-then-retry converges.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from hoodied.executors.engine import Session, spark_session
from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log import BlockType, hfile_block_content, read_log_blocks
from hoodied.hoodie.metadata.commit import commit_mdt_records
from hoodied.hoodie.metadata.encode import bloom_filter_key, encode_value
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.metadata.records import RecordType
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.planners.log_compaction import LogCompactionSettings, schedule_log_compaction
from hoodied.service.cli.report import committed_listing_drift
from hoodied.service.spark_jobs import run_compaction, run_spark_service
from tests.executors.test_compaction import EVERYTHING, FAST, _schedule, start_execute
from tests.helpers.crash_driver import kill_group
from tests.helpers.mor_tables import hudi_rs_rows

V8 = "mor/avro/v8_trips_8i3u1d"
V9 = "mor/avro/v9_txns_simple_meta"
#: Hudi's last compaction of each fixture (a completed MDT delta commit T exists for it)
HUDI_COMPACTIONS = {V8: "20251220210129235", V9: "20260307162618152"}
HUDI_CLUSTERING = "20260307162619269"  # V9's clustering right after its compaction
#: An index an indexing instant after that compaction built: (MDT partition, its MDT init instant)
LATER_INDEXES = {V9: ("secondary_index_txn_date_idx", "00000000000000004")}


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


def _mdt_records(root: Path, t: str, *, raw: bool = False) -> dict[str, dict[str, Any]]:
    """The records (``raw``: the encoded cell values) of the MDT log files of delta commit ``t``,
    per MDT partition and row key."""
    mdt = LocalStorage(str(root / METADATA_FOLDER))
    out: dict[str, dict[str, Any]] = {}
    for f in sorted((root / METADATA_FOLDER).glob(f"*/.*_{t}.log.*")):
        for block in read_log_blocks(mdt, f"{f.parent.name}/{f.name}"):
            if block.block_type is not BlockType.HFILE_DATA:
                continue
            reader = HFileReader(hfile_block_content(block), f.name)
            cells = ((k.decode(), v) for k, v in reader.iter_cells())
            rows = cells if raw else reader.records(block.schema_json)
            out.setdefault(f.parent.name, {}).update(rows)
    return out


def _instant_of(name: str) -> str | None:
    base = BaseFileName.parse(name)
    if base is not None:
        return base.instant_time
    lf = LogFileName.parse(name)
    return lf.instant_time if lf is not None else None


def _row(record: dict[str, Any] | None) -> dict[str, Any]:
    """An MDT record that is not a delete (None)."""
    assert record is not None, "a delete where a record was expected"
    return record


def _cut_back_to_before(root: Path, fid: str, *, keep_mdt_t: bool, t: str | None = None) -> dict[str, Any]:
    """Make Hudi's compaction (or ``t``) T of fixture ``fid`` a failed attempt of a table whose
    history ends there.

    Data and MDT instants after T go (timeline files and the files they wrote; the index a
    later indexing instant built too), T loses its data completion file. Its base files stay
    (the failed attempt's output); ``keep_mdt_t`` keeps Hudi's completed MDT delta commit T.
    Returns Hudi's commit metadata of T.
    """
    t = t or HUDI_COMPACTIONS[fid]
    later_index, later_init = LATER_INDEXES.get(fid, ("", ""))
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    metadata = timeline.read_commit_metadata(timeline.get(t))  # type: ignore[arg-type]
    mdt_timeline = root / METADATA_FOLDER / ".hoodie" / "timeline"

    def gone(ts: str, *, mdt: bool) -> bool:
        return ts > t or ts == later_init or (mdt and ts == t and not keep_mdt_t)

    for folder in (root / ".hoodie" / "timeline", mdt_timeline):
        for f in list(folder.iterdir()):
            stem = f.name.split(".")[0]
            ts = stem.split("_")[0]
            completion = folder != mdt_timeline and stem.startswith(f"{t}_")
            if f.is_file() and ts.isdigit() and (gone(ts, mdt=folder == mdt_timeline) or completion):
                f.unlink()
    for f in list(root.rglob("*")):
        if f.is_file() and f.relative_to(root).parts[0] != ".hoodie":
            written = _instant_of(f.name)
            if written is not None and written > t:
                f.unlink()
    for f in list((root / METADATA_FOLDER).glob("*/*")):
        written = _instant_of(f.name)
        if written is not None and gone(written, mdt=True):
            f.unlink()
    if later_index:
        props = root / ".hoodie" / "hoodie.properties"
        declared = ",".join(config.metadata_partitions)
        kept = ",".join(p for p in config.metadata_partitions if p != later_index)
        props.write_text(props.read_text().replace(f"hoodie.table.metadata.partitions={declared}",
                                                   f"hoodie.table.metadata.partitions={kept}"))
        shutil.rmtree(root / METADATA_FOLDER / later_index)
        assert later_index not in load_table_config(storage).metadata_partitions
    return metadata


def _without_mdt(root: Path, tmp: Path) -> Path:
    copy = tmp / f"nomdt-{uuid.uuid4().hex[:6]}" / root.name
    shutil.copytree(root, copy)
    shutil.rmtree(copy / METADATA_FOLDER)
    return copy


def _mdt_timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root / METADATA_FOLDER))
    return Timeline.load(storage, load_table_config(storage, metadata_table=True))


def _check_readers(root: Path, tmp: Path, rows: Any) -> None:
    assert hudi_rs_rows(root) == rows
    assert hudi_rs_rows(_without_mdt(root, tmp)) == rows
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0


def log_compact_and_check(root: Path, tmp: Path, spark: Session, rows: Any) -> str:
    """Schedule (threshold 2) and execute a log compaction; its MDT delta commit T completes
    before the data instant T, and readers with and without the MDT still read ``rows``."""
    storage = LocalStorage(str(root))
    inst, planned = schedule_log_compaction(storage, InProcessLock(storage.base_uri),
                                            LogCompactionSettings(blocks_threshold=2), time_settings=FAST)
    assert inst is not None, planned.summary()
    lc = inst.requested_time
    result = run_spark_service(storage, InProcessLock(storage.base_uri), lc, spark, time_settings=FAST)
    data = Timeline.load(storage, load_table_config(storage)).get(lc)
    mdt = _mdt_timeline(root).get(lc)
    assert data is not None and data.is_completed and data.action is Action.LOG_COMPACTION, result
    assert mdt is not None and mdt.is_completed and mdt.action is Action.DELTA_COMMIT
    assert mdt.completion_time < data.completion_time  # type: ignore[operator]
    _check_readers(root, tmp, rows)
    return lc


def _check_mdt_deltacommit(root: Path, t: str) -> None:
    """MDT delta commit T completed, before the data instant T."""
    data = Timeline.load(LocalStorage(str(root)), load_table_config(LocalStorage(str(root))))
    inst = data.get(t)
    assert inst is not None and inst.is_completed and inst.action is Action.COMPACTION
    mdt = _mdt_timeline(root).get(t)
    assert mdt is not None and mdt.is_completed and mdt.action is Action.DELTA_COMMIT
    assert mdt.completion_time < inst.completion_time  # type: ignore[operator]


# ---------------------------------------------------------------------------- Hudi's own compaction


@pytest.mark.parametrize("fid,t", [(V8, HUDI_COMPACTIONS[V8]), (V9, HUDI_COMPACTIONS[V9]),
                                   (V9, HUDI_CLUSTERING)],
                         ids=["v8-compaction", "v9-compaction", "v9-clustering"])
def test_mdt_records_of_hudis_commit_are_byte_identical(fid: str, t: str, hudi_table) -> None:
    """A clustering's record_index records come from the caller (the keys it moved): Hudi's are
    passed; its replaced file groups stay listed in ``files``."""
    root = hudi_table(fid)
    hudi = _mdt_records(root, t, raw=True)
    moved = [(key, record) for key, record in _mdt_records(root, t).get("record_index", {}).items()]
    assert set(hudi) == {"files", "column_stats", "partition_stats"} | ({"record_index"} if moved else set())
    metadata = _cut_back_to_before(root, fid, keep_mdt_t=False, t=t)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    ours = commit_mdt_records(storage, config, t, metadata, record_index=moved)
    assert set(ours) == set(hudi)
    for partition, records in ours.items():
        cells = {key: encode_value(_row(record), config.version) for key, record in records}
        assert cells == hudi[partition], partition
    # the partition stats are tight bounds over the latest slices (v9: not over the new files alone)
    assert all(_row(r)["ColumnStatsMetadata"]["isTightBound"] for _, r in ours["partition_stats"])


def test_bloom_filter_records_of_new_base_files(hudi_table) -> None:
    """``bloom_filters`` (no fixture has it): the footer's filter text of each new base file, the
    writer's filter type (DYNAMIC_V0) and the instant; none for log files."""
    root = hudi_table(V8)
    t = HUDI_COMPACTIONS[V8]
    metadata = _cut_back_to_before(root, V8, keep_mdt_t=False)
    props = root / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("record_index,", "record_index,bloom_filters,"))
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    ours = commit_mdt_records(storage, config, t, metadata)
    new = {(p, s["path"].rsplit("/", 1)[-1])
           for p, ss in metadata["partitionToWriteStats"].items() for s in ss}
    assert len(ours["bloom_filters"]) == len(new) > 0
    for key, record in ours["bloom_filters"]:
        partition, name = next((p, n) for p, n in new if bloom_filter_key(p, n) == key)
        footer = pq.ParquetFile(root / partition / name).metadata.metadata[b"org.apache.hudi.bloomfilter"]
        assert record is not None and record["type"] == RecordType.BLOOM_FILTER
        assert record["BloomFilterMetadata"] == {
            "type": "DYNAMIC_V0", "timestamp": t, "bloomFilter": footer, "isDeleted": False}
        encode_value(record, config.version)  # a valid HoodieMetadataRecord


def _stats_by_file_group(records: dict[str, dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Column stats by (file id, column), without the names and sizes that differ between writers."""
    out = {}
    for record in records.values():
        cs = record["ColumnStatsMetadata"]
        file_id = BaseFileName.parse(cs["fileName"]).file_id  # type: ignore[union-attr]
        out[(file_id, cs["columnName"])] = {
            k: v for k, v in cs.items() if k not in ("fileName", "totalSize", "totalUncompressedSize")}
    return out


def _without_sizes(records: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    sizes = ("totalSize", "totalUncompressedSize")
    return {k: {f: v for f, v in r["ColumnStatsMetadata"].items() if f not in sizes}
            for k, r in records.items()}


def test_reexecuting_hudis_compaction_writes_hudis_mdt_records(hudi_table, tmp_path: Path,
                                                               spark: Session) -> None:
    root = hudi_table(V9)
    t = HUDI_COMPACTIONS[V9]
    hudi = _mdt_records(root, t)
    _cut_back_to_before(root, V9, keep_mdt_t=True)  # Hudi's MDT T completed, the data T failed
    rows = hudi_rs_rows(root)
    storage = LocalStorage(str(root))
    result = run_compaction(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST)
    assert not result.was_completed
    _check_mdt_deltacommit(root, t)
    assert _mdt_timeline(root).completed((Action.ROLLBACK,)), "Hudi's MDT T was not rolled back first"
    _check_readers(root, tmp_path, rows)
    ours = _mdt_records(root, t)
    assert set(ours) == set(hudi)
    # files: the same partitions and file groups, each new base file with its size
    assert ours["files"]["__all_partitions__"] == hudi["files"]["__all_partitions__"]
    for key in hudi["files"]:
        if key == "__all_partitions__":
            continue
        names = ours["files"][key]["filesystemMetadata"]
        assert {BaseFileName.parse(n).file_id for n in names} == {  # type: ignore[union-attr]
            BaseFileName.parse(n).file_id for n in hudi["files"][key]["filesystemMetadata"]}  # type: ignore[union-attr]
        for name, info in names.items():
            assert info == {"size": (root / key / name).stat().st_size, "isDeleted": False}
    assert _stats_by_file_group(ours["column_stats"]) == _stats_by_file_group(hudi["column_stats"])
    assert _without_sizes(ours["partition_stats"]) == _without_sizes(hudi["partition_stats"])


def test_schedule_and_execute_on_a_version_8_mdt_table(hudi_table, tmp_path: Path, spark: Session) -> None:
    root = hudi_table(V8)
    rows = hudi_rs_rows(root)
    t = _schedule(root, EVERYTHING)
    storage = LocalStorage(str(root))
    result = run_compaction(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST)
    assert result.write_stats
    _check_mdt_deltacommit(root, t)
    _check_readers(root, tmp_path, rows)
    records = _mdt_records(root, t)
    new = {s["path"].rsplit("/", 1)[-1] for s in result.write_stats}
    listed = {n for k, r in records["files"].items() if k != "__all_partitions__"
              for n in r["filesystemMetadata"]}
    assert listed == new
    assert {r["ColumnStatsMetadata"]["fileName"] for r in records["column_stats"].values()} == new
    assert all(r["ColumnStatsMetadata"]["isTightBound"] for r in records["partition_stats"].values())


# ---------------------------------------------------------------------------- refusals


def _declare(root: Path, partition: str) -> None:
    props = root / ".hoodie" / "hoodie.properties"
    lines = props.read_text().splitlines()
    out = [line + f",{partition}" if line.startswith("hoodie.table.metadata.partitions=") else line
           for line in lines]
    props.write_text("\n".join(out) + "\n")


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_an_mdt_partition_compaction_cannot_maintain_is_refused(hudi_table, spark: Session) -> None:
    root = hudi_table(V8)
    t = _schedule(root, EVERYTHING)  # planned while the table was maintainable
    _declare(root, "expr_index_ts_day")
    before = _snapshot(root)
    with pytest.raises(UnsupportedTableError, match="MDT partition expr_index_ts_day is not maintained"):
        _schedule(root, EVERYTHING)
    storage = LocalStorage(str(root))
    with pytest.raises(UnsupportedTableError, match="MDT partition expr_index_ts_day is not maintained"):
        run_compaction(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST)
    assert _snapshot(root) == before


def test_log_compaction_records_list_the_new_log_files(hudi_table) -> None:
    """A log compaction's MDT delta commit on a table whose MDT keeps ``files`` only: the new log
    file with its size (Hudi lists log files like base files); with column_stats declared, the
    log file's column stats come along (``tests/executors/test_log_compaction_mdt.py`` checks
    their values)."""
    root = hudi_table(V8)
    storage = LocalStorage(str(root))
    log = next(p for p in sorted(root.rglob(".*.log.*")) if p.relative_to(root).parts[0] != ".hoodie")
    partition = log.parent.name
    stat = {"fileId": LogFileName.parse(log.name).file_id, "path": f"{partition}/{log.name}",  # type: ignore[union-attr]
            "partitionPath": partition, "fileSizeInBytes": log.stat().st_size, "logFiles": [log.name]}
    metadata = {"partitionToWriteStats": {partition: [stat]}, "operationType": "LOG_COMPACT"}
    t = "20991231000000000"
    full = commit_mdt_records(storage, load_table_config(storage), t, metadata)
    assert {_row(r)["ColumnStatsMetadata"]["fileName"] for _, r in full["column_stats"]} == {log.name}
    props = root / ".hoodie" / "hoodie.properties"
    text = props.read_text()
    declared = ",".join(load_table_config(storage).metadata_partitions)
    props.write_text(text.replace(f"hoodie.table.metadata.partitions={declared}",
                                  "hoodie.table.metadata.partitions=files"))
    config = load_table_config(storage)
    ours = commit_mdt_records(storage, config, t, metadata)
    assert list(ours) == ["files"]
    (_, all_partitions), (key, files) = ours["files"]
    assert all_partitions is not None and files is not None
    assert all_partitions["filesystemMetadata"] == {partition: {"size": 0, "isDeleted": False}}
    assert key == partition and files["filesystemMetadata"] == {
        log.name: {"size": log.stat().st_size, "isDeleted": False}}


def test_log_compaction_on_a_files_only_mdt_table(hudi_table, tmp_path: Path,
                                                  spark: Session) -> None:
    """The v8 fixture before its compaction (several log blocks per slice), its MDT declared as
    ``files`` only: the log compaction's MDT delta commit lists the new log files, completes
    before the data instant, and readers with and without the MDT agree."""
    root = hudi_table(V8)
    t = HUDI_COMPACTIONS[V8]
    _cut_back_to_before(root, V8, keep_mdt_t=False)
    for f in (root / ".hoodie" / "timeline").glob(f"{t}.*"):
        f.unlink()  # the compaction never happened
    for f in root.rglob(f"*_{t}.parquet"):
        f.unlink()
    props = root / ".hoodie" / "hoodie.properties"
    storage = LocalStorage(str(root))
    declared = ",".join(load_table_config(storage).metadata_partitions)
    props.write_text(props.read_text().replace(f"hoodie.table.metadata.partitions={declared}",
                                               "hoodie.table.metadata.partitions=files"))
    rows = hudi_rs_rows(root)
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
    lc = log_compact_and_check(root, tmp_path, spark, rows)
    records = _mdt_records(root, lc)
    assert list(records) == ["files"]
    listed = {n: i["size"] for k, r in records["files"].items() if k != "__all_partitions__"
              for n, i in r["filesystemMetadata"].items()}
    new = [p for p in sorted(root.rglob(f".*_{lc}.log.*")) if p.relative_to(root).parts[0] != ".hoodie"]
    assert new and listed == {p.name: p.stat().st_size for p in new}


# ---------------------------------------------------------------------------- crashes


@pytest.mark.parametrize("point", ["mdt-log-written", "mdt-done"])
def test_kill_9_around_the_mdt_deltacommit_then_retry(point: str, hudi_table, tmp_path: Path,
                                                      spark: Session) -> None:
    root = hudi_table(V8)
    rows = hudi_rs_rows(root)
    t = _schedule(root, EVERYTHING)
    ready = tmp_path / "ready"
    proc = start_execute(root, point, ready)
    kill_group(proc)
    storage = LocalStorage(str(root))
    data = Timeline.load(storage, load_table_config(storage)).get(t)
    assert data is not None and data.is_pending
    mdt_t = _mdt_timeline(root).get(t)
    assert mdt_t is not None
    assert mdt_t.is_completed == (point == "mdt-done")
    assert hudi_rs_rows(root) == rows  # readers ignore the MDT T of a pending data instant
    time.sleep(0.3)  # the dead driver's heartbeat (100 ms) expires
    result = run_compaction(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST,
                            heartbeat_interval_ms=100)
    assert not result.was_completed
    _check_mdt_deltacommit(root, t)
    _check_readers(root, tmp_path, rows)
    new = {s["path"].rsplit("/", 1)[-1] for s in result.write_stats}
    assert {p.name for p in root.rglob(f"*_{t}.parquet")} == new  # nothing of the killed attempt is left
