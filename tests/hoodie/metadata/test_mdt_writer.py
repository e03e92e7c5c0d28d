"""MDT delta commits for the ``files`` partition on real tables: hudi-rs (which lists through the
MDT) and hoodied's own MDT reader see the files we add and stop seeing the files we delete."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import hudi
import pyarrow.parquet as pq
import pytest

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.fsview import list_storage
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log import BlockType, hfile_block_content, read_log_blocks
from hoodied.hoodie.metadata.encode import encode_hfile_data_block, files_record, partition_list_record
from hoodied.hoodie.metadata.reader import MetadataTable, listing_drift
from hoodied.hoodie.metadata.writer import MetadataWriter, unmaintained_partitions
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.commit_metadata import write_stat
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

FAST = TimeSettings(max_expected_clock_skew_ms=5)
V8 = "mor/avro/v8_trips_8i3u1d"
V9_MOR = "mor/avro/v9_txns_simple_meta"
V9_COW = "cow/v9_txns_simple_meta"


def _hudi_rs(root: Path) -> tuple[list[tuple[str, str, str, tuple[str, ...]]], int]:
    table = hudi.HudiTableBuilder.from_base_uri(str(root)).build()
    slices = sorted(
        (s.partition_path, s.file_id, s.base_file_name, tuple(s.log_file_names))
        for s in table.get_file_slices()
    )
    return slices, sum(b.num_rows for b in table.read())


def _without_mdt(root: Path, tmp: Path) -> Path:
    copy = tmp / f"nomdt-{uuid.uuid4().hex[:6]}" / root.name
    shutil.copytree(root, copy)
    shutil.rmtree(copy / ".hoodie" / "metadata")
    return copy


def _drift(root: Path) -> int:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    mdt = MetadataTable.open(storage, config, Timeline.load(storage, config))
    assert mdt is not None
    return listing_drift(list_storage(storage, config), mdt.all_files()).count


def _commit_md(stats: dict[str, list[dict[str, Any]]], operation: str) -> dict[str, Any]:
    return {
        "partitionToWriteStats": stats,
        "compacted": False,
        "extraMetadata": {},
        "version": None,
        "operationType": operation,
    }


class Table:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.storage = LocalStorage(str(root))
        self.config = load_table_config(self.storage)
        self.lock = InProcessLock(str(root))
        self.timeline = TimelineWriter(self.storage, self.config, self.lock, time_settings=FAST)

    def mdt(self) -> MetadataWriter:
        return MetadataWriter(self.storage, self.config, self.lock, time_settings=FAST)


def _add_base_file(t: Table, partition: str, source: str) -> tuple[str, str, str, int]:
    """A delta commit that adds a copy of ``source`` as a new file group (MDT first, then data)."""
    instant = t.timeline.new_instant_time()
    file_id = f"{uuid.uuid4()}-0"
    name = f"{file_id}_0-1-1_{instant}.parquet"
    data = (t.root / partition / source).read_bytes()
    t.timeline.create_requested(Action.DELTA_COMMIT, instant, None)
    t.timeline.transition_to_inflight(instant, Action.DELTA_COMMIT, _commit_md({}, "INSERT"))
    t.storage.put_if_absent(f"{partition}/{name}", data)
    t.mdt().write_deltacommit(
        instant, {"files": [partition_list_record([partition]), files_record(partition, {name: len(data)})]}
    )
    stat = write_stat(
        file_id=file_id,
        path=f"{partition}/{name}",
        partition_path=partition,
        num_writes=1,
        file_size=len(data),
    )
    t.timeline.complete(instant, Action.DELTA_COMMIT, _commit_md({partition: [stat]}, "INSERT"))
    return instant, file_id, name, len(data)


@pytest.mark.parametrize("fid", [V9_MOR, V9_COW])
def test_added_file_appears_in_hudi_rs_listing(fid: str, hudi_table, tmp_path: Path) -> None:
    root = hudi_table(fid)
    before_slices, before_rows = _hudi_rs(root)
    eu = next(s for s in before_slices if s[0] == "region=eu")
    t = Table(root)
    with t.lock:
        instant, file_id, name, size = _add_base_file(t, "region=eu", eu[2])
    copied_rows = pq.read_metadata(root / "region=eu" / name).num_rows
    after_slices, after_rows = _hudi_rs(root)
    assert ("region=eu", file_id, name, ()) in after_slices
    assert sorted(set(after_slices) - {("region=eu", file_id, name, ())}) == before_slices
    assert after_rows == before_rows + copied_rows and copied_rows
    assert _hudi_rs(_without_mdt(root, tmp_path)) == (after_slices, after_rows)
    assert _drift(root) == 0
    # the MDT timeline: T completed before the data instant, with one files log file
    mdt_storage = t.storage.child(".hoodie/metadata")
    mdt_tl = Timeline.load(mdt_storage, load_table_config(mdt_storage, metadata_table=True))
    data_tl = Timeline.load(t.storage, t.config)
    mdt_done, data_done = mdt_tl.get(instant), data_tl.get(instant)
    assert (
        mdt_done is not None and mdt_done.state is State.COMPLETED and mdt_done.action is Action.DELTA_COMMIT
    )
    assert data_done is not None and (mdt_done.completion_time or "") < (data_done.completion_time or "")
    md = mdt_tl.read_commit_metadata(mdt_done)
    (stat,) = md["partitionToWriteStats"]["files"]
    assert stat["path"] == f"files/{stat['logFiles'][0]}" and stat["prevCommit"] == instant
    assert stat["fileSizeInBytes"] == mdt_storage.size(stat["path"]) and stat["numWrites"] == 2
    assert md["operationType"] == "UPSERT_PREPPED" and md["extraMetadata"]["schema"].startswith(
        '{"type":"record","name":"HoodieMetadataRecord"'
    )
    (block,) = list(read_log_blocks(mdt_storage, stat["path"]))
    assert block.block_type is BlockType.HFILE_DATA and block.instant_time == instant
    cells = dict(HFileReader(hfile_block_content(block), block.where).records(block.schema_json))
    assert cells["region=eu"]["filesystemMetadata"] == {name: {"size": size, "isDeleted": False}}


def test_deleted_files_disappear(hudi_table, tmp_path: Path) -> None:
    """A clean of the v8 table's older chennai slice: tombstones in the MDT, files gone,
    hudi-rs reads the same rows with and without the MDT, zero drift."""
    root = hudi_table(V8)
    before = _hudi_rs(root)
    old = [
        "6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0_2-986-2794_20251220210108078.parquet",
        ".6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0_20251220210127080.log.1_0-1072-3078",
        ".6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0_20251220210128625.log.1_0-1097-3150",
    ]
    assert all((root / "city=chennai" / n).exists() for n in old)
    assert _drift(root) == 0
    t = Table(root)
    with t.lock:
        instant = t.timeline.new_instant_time()
        t.timeline.create_requested(Action.CLEAN, instant, {"policy": "KEEP_LATEST_COMMITS", "version": 2})
        t.timeline.transition_to_inflight(instant, Action.CLEAN)
        t.mdt().write_deltacommit(instant, {"files": [files_record("city=chennai", {}, old)]})
        for n in old:
            t.storage.delete(f"city=chennai/{n}")
        t.timeline.complete(
            instant,
            Action.CLEAN,
            {
                "startCleanTime": instant,
                "timeTakenInMillis": 1,
                "totalFilesDeleted": len(old),
                "earliestCommitToRetain": "",
                "partitionMetadata": {},
                "version": 2,
            },
        )
    after = _hudi_rs(root)
    assert after == before  # the cleaned slice was not the latest one
    assert _hudi_rs(_without_mdt(root, tmp_path)) == after
    assert _drift(root) == 0
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    mdt = MetadataTable.open(storage, config, Timeline.load(storage, config))
    assert mdt is not None and not set(old) & set(mdt.files("city=chennai"))


def test_rerun_after_a_crash_and_after_completion(hudi_table) -> None:
    root = hudi_table(V9_MOR)
    before_slices, _ = _hudi_rs(root)
    eu = next(s for s in before_slices if s[0] == "region=eu")
    t = Table(root)
    with t.lock:
        instant = t.timeline.new_instant_time()
        file_id = f"{uuid.uuid4()}-0"
        name = f"{file_id}_0-1-1_{instant}.parquet"
        data = (root / "region=eu" / eu[2]).read_bytes()
        t.timeline.create_requested(Action.DELTA_COMMIT, instant, None)
        t.timeline.transition_to_inflight(instant, Action.DELTA_COMMIT, _commit_md({}, "INSERT"))
        t.storage.put_if_absent(f"region=eu/{name}", data)
        records = {
            "files": [partition_list_record(["region=eu"]), files_record("region=eu", {name: len(data)})]
        }
        # a first attempt died after writing a (torn) log file, with the MDT instant inflight
        writer = t.mdt()
        writer.timeline.create_requested(Action.DELTA_COMMIT, instant, None)
        writer.timeline.transition_to_inflight(instant, Action.DELTA_COMMIT, None)
        torn = encode_hfile_data_block(records["files"], instant, 9)[:-100]
        writer.storage.put_if_absent(f"files/.files-0000-0_{instant}.log.1_7-7-7", torn)
        assert _hudi_rs(root)[0] == before_slices  # pending on both timelines: invisible
        done = t.mdt().write_deltacommit(instant, records)
        assert done.state is State.COMPLETED
        logs = sorted(
            p.name for p in (root / ".hoodie/metadata/files").glob(f".files-0000-0_{instant}.log.*")
        )
        assert logs == [f".files-0000-0_{instant}.log.1_0-0-0"]
        # the torn attempt was rolled back as Hudi does: an MDT rollback instant at a new time
        mdt_tl = Timeline.load(writer.storage, writer.config)
        (rb,) = mdt_tl.completed((Action.ROLLBACK,))
        assert rb.requested_time > instant
        md = mdt_tl.read_commit_metadata(rb)
        assert md["commitsRollback"] == [instant]
        assert md["partitionMetadata"]["files"]["successDeleteFiles"] == [
            f"{writer.storage.base_uri}/files/.files-0000-0_{instant}.log.1_7-7-7"
        ]
        # completed in the MDT, data instant still pending: a retry rolls it back and rewrites it
        again = t.mdt().write_deltacommit(instant, records)
        assert again.completion_time is not None and done.completion_time is not None
        assert again.state is State.COMPLETED and again.completion_time > done.completion_time
        assert len(Timeline.load(writer.storage, writer.config).completed((Action.ROLLBACK,))) == 2
        assert (
            sorted(p.name for p in (root / ".hoodie/metadata/files").glob(f".files-0000-0_{instant}*"))
            == logs
        )
        done = again
        # MDT completed, data instant still pending: readers ignore the MDT records
        assert _hudi_rs(root)[0] == before_slices
        stat = write_stat(
            file_id=file_id, path=f"region=eu/{name}", partition_path="region=eu", file_size=len(data)
        )
        t.timeline.complete(instant, Action.DELTA_COMMIT, _commit_md({"region=eu": [stat]}, "INSERT"))
    assert ("region=eu", file_id, name, ()) in _hudi_rs(root)[0]
    assert _drift(root) == 0
    with t.lock:  # both completed: nothing is written again
        assert t.mdt().write_deltacommit(instant, records) == done
    assert len(Timeline.load(writer.storage, writer.config).completed((Action.ROLLBACK,))) == 2


def test_refusals(hudi_table, shared_table) -> None:
    root = shared_table(V9_MOR)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    assert unmaintained_partitions(config, ["files"]) == [
        "column_stats",
        "partition_stats",
        "record_index",
        "secondary_index_merchant_idx",
        "secondary_index_txn_date_idx",
    ]
    assert unmaintained_partitions(config, config.metadata_partitions) == []
    t = Table(hudi_table(V9_MOR))
    with t.lock, pytest.raises(UnsupportedTableError, match="MDT partition bloom_filters is not among"):
        t.mdt().write_deltacommit("20990101000000000", {"bloom_filters": []})
    key, bad = files_record("region=eu", {"x.parquet": 1})
    with t.lock, pytest.raises(ValueError, match="different key"):
        t.mdt().write_deltacommit("20990101000000000", {"files": [(key, {**bad, "key": "region=us"})]})
    assert not list((t.root / ".hoodie/metadata/.hoodie/timeline").glob("20990101000000000*"))
    v6 = Table(hudi_table("mor/parquet/v6_nonpartitioned"))
    with pytest.raises(UnsupportedTableError, match="version 6"):
        v6.mdt()
    nometa = Table(hudi_table("mor/avro/v9_txns_simple_nometa"))
    with pytest.raises(UnsupportedTableError, match="no metadata table"):
        nometa.mdt()
