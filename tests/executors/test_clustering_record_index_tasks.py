"""A clustering's record-index entries are built in Spark tasks, one per MDT file group.

Hudi's clustering of the v9 fixture with a record index (10 record-index file groups) is reopened
and run again on a local Spark session. The driver hands the metadata writer the new base files
(``MovedKeys``), never the moved keys; the record-index log files the Spark tasks wrote hold the
same cells as the same operations run in this process, and the same records as the driver-side
``record_index_updates`` of every moved key, each in the file group ``file_group_index`` names.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodied.executors.clustering import ClusteringResult
from hoodied.executors.engine import Session, SparkOperations
from hoodied.hoodie.actions.clustering import MovedKeys, record_index_updates
from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log import BlockType, hfile_block_content, read_log_blocks
from hoodied.hoodie.metadata.encode import RECORD_INDEX, MetadataRecord, file_group_index
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.metadata.writer import (
    SHARD_RESULT_SCHEMA,
    MdtShardTask,
    MetadataWriter,
    ShardedRecords,
    shard_write_token,
)
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.tasks import OperationRunner, run_in_process
from hoodied.hoodie.timeline.active import Timeline
from hoodied.service.spark_jobs import run_spark_service
from tests.executors.test_clustering import FAST, _reopen, _timeline, spark  # noqa: F401  (module fixture)
from tests.helpers.fixtures import require_fixture, unzip_table

FIXTURE = "cow/v9_txns_simple_meta"


def _cells(storage: LocalStorage, path: str) -> list[tuple[str, dict[str, Any]]]:
    (block,) = list(read_log_blocks(storage, path))
    assert block.block_type is BlockType.HFILE_DATA
    return list(HFileReader(hfile_block_content(block), block.where).records(block.schema_json))


def test_record_index_log_files_are_written_by_the_spark_tasks(
    tmp_path: Path, spark: Session, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    monkeypatch.setenv("TZ", "America/Chicago")  # the fixture's LOCAL timeline zone (index epoch ms)
    root = unzip_table(require_fixture(FIXTURE), tmp_path / "t")
    timeline = _timeline(root)
    t = next(i.requested_time for i in timeline.completed() if timeline.is_clustering(i))
    _reopen(root, t)
    calls: list[tuple[dict[str, list[MetadataRecord]], dict[str, ShardedRecords], OperationRunner]] = []
    write_deltacommit = MetadataWriter.write_deltacommit

    def spy(self: MetadataWriter, instant_time: str, records: Any, **kw: Any) -> Any:
        if instant_time == t:
            calls.append(({p: list(r) for p, r in records.items()}, dict(kw.get("sharded") or {}),
                          self.runner))
        return write_deltacommit(self, instant_time, records, **kw)

    monkeypatch.setattr(MetadataWriter, "write_deltacommit", spy)
    storage = LocalStorage(str(root))
    result = run_spark_service(storage, InProcessLock(str(root)), t, spark, time_settings=FAST)
    assert isinstance(result, ClusteringResult) and result.instant.is_completed

    # the driver handed over the new base files, not the moved keys
    ((records, sharded, runner),) = calls
    assert RECORD_INDEX not in records and set(records) >= {"files"}
    moved = sharded[RECORD_INDEX]
    assert isinstance(moved, MovedKeys) and isinstance(runner, SparkOperations)
    assert moved.files == tuple((s["partitionPath"], s["fileId"], s["path"]) for s in result.write_stats)

    # what the Spark tasks wrote, as the MDT delta commit T lists it
    mdt_storage = LocalStorage(str(root / METADATA_FOLDER))
    mdt_config = load_table_config(mdt_storage, metadata_table=True)
    mdt = Timeline.load(mdt_storage, mdt_config)
    done = mdt.get(t)
    assert done is not None and done.is_completed
    stats = mdt.read_commit_metadata(done)["partitionToWriteStats"][RECORD_INDEX]
    groups = sorted({n.split("_")[0] for n in (i.name for i in mdt_storage.list(RECORD_INDEX))
                     if n.endswith(".hfile")})
    assert len(groups) == 10 and len(stats) > 1
    by_group = {stat["fileId"]: stat for stat in stats}
    for stat in stats:
        assert stat["path"].endswith(f"_{t}.log.1_{shard_write_token(groups.index(stat['fileId']))}")
        assert stat["fileSizeInBytes"] == mdt_storage.size(stat["path"])
    spark_cells = {stat["fileId"]: _cells(mdt_storage, stat["path"]) for stat in stats}

    # the same operations in this process give the same files and cells
    copy = tmp_path / "copy"
    shutil.copytree(root / METADATA_FOLDER, copy)
    for stat in stats:
        (copy / stat["path"]).unlink()
    copy_storage = LocalStorage(str(copy))
    task = MdtShardTask(copy_storage, RECORD_INDEX, tuple(groups), t, mdt_config.version, moved)
    rows = [r for r in run_in_process(len(groups), task, SHARD_RESULT_SCHEMA).to_pylist() if r["name"]]
    assert {r["file_id"] for r in rows} == set(by_group)
    for r in rows:
        stat = by_group[r["file_id"]]
        assert f"{RECORD_INDEX}/{r['name']}" == stat["path"]
        # (sizes may differ: the HFile's create time is the time it was written)
        assert (r["records"], r["deletes"]) == (stat["numWrites"], stat["numDeletes"])
        assert _cells(copy_storage, stat["path"]) == spark_cells[r["file_id"]]

    # and the records the driver-side path built from every moved key, each in its file group
    new_files = [(s["partitionPath"], s["fileId"],
                  pq.read_table(root / s["path"], columns=["_hoodie_record_key"]).column(0).to_pylist())
                 for s in result.write_stats]
    expected = record_index_updates(new_files, t, load_table_config(storage))
    assert len(expected) == sum(len(c) for c in spark_cells.values()) > 0
    for key, record in expected:
        cells = dict(spark_cells[groups[file_group_index(key, len(groups))]])
        assert cells[key]["recordIndexMetadata"] == record["recordIndexMetadata"]


def test_a_key_written_to_two_new_files_is_refused_in_its_file_groups_operation(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    a, b = f"{uuid.uuid4()}-0", f"{uuid.uuid4()}-0"
    for name, keys in (("a.parquet", ["k1", "k2"]), ("b.parquet", ["k3", "k1", "k1"])):
        pq.write_table(pa.table({"_hoodie_record_key": keys}), tmp_path / name)
    moved = MovedKeys(storage, (("p", a, "a.parquet"), ("p", b, "b.parquet")), 1_700_000_000_000)
    count = 4
    bad = file_group_index("k1", count)
    for index in range(count):
        if index == bad:
            with pytest.raises(UnsupportedTableError, match=f"'k1' was written to two new file groups "
                                                            f"\\({a} and {b}\\)"):
                moved.records(index, count)
        else:
            keys = [key for key, _ in moved.records(index, count)]
            assert keys == [k for k in ("k2", "k3") if file_group_index(k, count) == index]

