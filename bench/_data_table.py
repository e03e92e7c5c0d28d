"""The data table of ``mdt_scale.py --data-table``: a MOR table whose metadata table has a record index.

Everything is written by hoodied's own code. ``build_data_table``:

1. ``hoodie.demo.writer``: a merge-on-read table (table version 9, partitioned by ``city``, the
   rows of ``read_bench.generate``) of ``keys`` keys in about ``FILE_GROUPS`` file groups
   (``max_file_rows``), then one delta commit updating ``UPDATE_FRACTION`` of the keys: a log
   file on every file group, so a compaction has work; the file groups are small, so a
   clustering plan (Hudi's size-based strategy, defaults) takes them;
2. the metadata table's ``files`` partition, as Hudi's ``initializeFromFilesystem`` writes it: MDT
   delta commit ``00000000000000000``, one file group (an empty init log file and a base HFile
   listing every data file), ``hoodie.table.metadata.partitions=files``, and the record index's
   definition in ``.hoodie/.index_defs/index.json`` (Hudi 1.1's ``createRecordIndexDefinition``);
3. an ``indexing`` instant for ``record_index`` (what ``HoodieIndexer --mode schedule`` writes) that
   ``executors.indexing.execute_indexing`` runs on the given Spark session: the record index of
   every key, built by hoodied's indexing.

``record_index_check`` counts the live record-index entries (hoodied's MDT reader, one merged MDT
file slice at a time) and those pointing at a file group that is not in the table's latest view.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from read_bench import SCHEMA, generate

from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.filenames import PARTITION_METAFILE, BaseFileName, make_write_token
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log import write_log_file
from hoodied.hoodie.metadata.encode import (
    FILES,
    RECORD_INDEX,
    encode_value,
    file_group_id,
    files_record,
    partition_list_record,
)
from hoodied.hoodie.metadata.index_build import init_commit_metadata, init_log_block, init_log_file_name
from hoodied.hoodie.metadata.index_records import (
    base_file_cells,
    encode_index_base_file,
    record_index_file_id,
)
from hoodied.hoodie.metadata.merge import merge_file_slice
from hoodied.hoodie.metadata.reader import MetadataTable
from hoodied.hoodie.properties import TableType, load_table_config, partition_metadata_text, properties_text
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.writer import TimelineWriter
from tests.hoodie.metadata.record_index_mdt import _mdt_properties

FILE_GROUPS = 32
UPDATE_FRACTION = 0.10
FILES_INIT = "00000000000000000"
INDEX_DEFS = ".hoodie/.index_defs/index.json"
RECORD_INDEX_DEFINITION = {
    "indexName": RECORD_INDEX,
    "indexType": RECORD_INDEX,
    "indexFunction": "",
    "sourceFields": [],
    "indexOptions": {"isPartitioned": "false"},
    "version": "V1",
}


def _set_properties(storage: LocalStorage, extra: dict[str, str]) -> None:
    props = dict(load_table_config(storage).props)
    props.update(extra)
    storage.put(".hoodie/hoodie.properties", properties_text(props, datetime.now(UTC)).encode("utf-8"))


def _data_files(root: Path) -> dict[str, dict[str, int]]:
    """Every data file of every partition (all committed: the writer leaves nothing else)."""
    out: dict[str, dict[str, int]] = {}
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.is_dir() and not entry.name.startswith("."):
            files = {f.name: f.stat().st_size for f in os.scandir(entry.path)
                     if f.is_file() and f.name != PARTITION_METAFILE}
            out[entry.name] = files
    return out


def _initialize_files_partition(root: Path, name: str) -> None:
    storage = LocalStorage(str(root))
    listing = _data_files(root)
    storage.put_if_absent(INDEX_DEFS, json.dumps(
        {"indexDefinitions": {RECORD_INDEX: RECORD_INDEX_DEFINITION}}, indent=2).encode("utf-8"))
    mdt_storage = storage.child(".hoodie/metadata")
    props = {**_mdt_properties(9), "hoodie.table.name": f"{name}_metadata"}
    text = properties_text(props, datetime.now(UTC))
    mdt_storage.put_if_absent(".hoodie/hoodie.properties", text.encode("utf-8"))
    mdt_config = load_table_config(mdt_storage, metadata_table=True)
    lock = InProcessLock(mdt_storage.base_uri)
    mdt = TimelineWriter(mdt_storage, mdt_config, lock)
    rows = [partition_list_record(sorted(listing)), *(files_record(p, f) for p, f in listing.items())]
    cells = [(k, encode_value(r, 9)) for k, r in rows]
    with lock:
        mdt_storage.put_if_absent(f"{FILES}/{PARTITION_METAFILE}",
                                  partition_metadata_text(FILES_INIT, 1, datetime.now(UTC)).encode("latin-1"))
        file_id = file_group_id(FILES, 0)
        write_log_file(mdt_storage, f"{FILES}/{init_log_file_name(file_id, FILES_INIT)}",
                       [init_log_block(FILES_INIT)])
        base = BaseFileName(file_id, make_write_token(0, 0, 0), FILES_INIT, "hfile").format()
        data = encode_index_base_file(base_file_cells(cells, 9, base), 9)
        mdt_storage.put_if_absent(f"{FILES}/{base}", data)
        stat = {"fileId": file_id, "path": f"{FILES}/{base}", "partitionPath": FILES,
                "numWrites": len(cells), "numInserts": len(cells), "fileSizeInBytes": len(data)}
        mdt.create_requested(Action.DELTA_COMMIT, FILES_INIT, None)
        mdt.transition_to_inflight(FILES_INIT, Action.DELTA_COMMIT)
        mdt.complete(FILES_INIT, Action.DELTA_COMMIT, init_commit_metadata({FILES: [stat]}, 9))
    _set_properties(storage, {"hoodie.table.metadata.partitions": FILES,
                              "hoodie.table.metadata.partitions.inflight": "",
                              "hoodie.table.index.defs.path": INDEX_DEFS})


def _index_record_keys(root: Path, session: Any) -> dict[str, Any]:
    from hoodied.executors.indexing import execute_indexing

    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    writer = TimelineWriter(storage, config, lock)
    with lock:
        upto = Timeline.load(storage, config).latest_completed()
        assert upto is not None
        instant = writer.new_instant_time()
        info = {"version": 1, "metadataPartitionPath": RECORD_INDEX, "indexUptoInstant": upto.requested_time,
                "extraMetadata": {}}
        writer.create_requested(Action.INDEXING, instant, {"version": 1, "indexPartitionInfos": [info]})
    result = execute_indexing(storage, config, lock, instant, session)
    return {"indexing_instant": instant, "indexing_seconds": round(result.seconds, 2)}


def build_data_table(root: Path, keys: int, session: Any) -> dict[str, Any]:
    """Write the table of ``keys`` keys under ``root`` (must not exist) and build its record index."""
    t0 = time.perf_counter()
    spec = TableSpec("mdt_scale_data", SCHEMA, "id", "city", "ts", TableType.MERGE_ON_READ, 9)
    writer = create_table(LocalStorage(str(root)), spec, max_file_rows=max(1, keys // FILE_GROUPS))
    writer.insert(generate(keys))
    rng = np.random.default_rng(11)
    updated = np.sort(rng.choice(keys, size=int(keys * UPDATE_FRACTION), replace=False))
    result = writer.upsert(generate(keys, ts=2, seed=3).take(pa.array(updated)))
    file_groups = len(list(writer.file_groups()))
    del writer
    written = time.perf_counter()
    _initialize_files_partition(root, spec.name)
    indexed = _index_record_keys(root, session)
    return {"keys": keys, "file_groups": file_groups, "updates": result.num_updates,
            "write_seconds": round(written - t0, 2), **indexed,
            "build_seconds": round(time.perf_counter() - t0, 2)}


def hudi_rs_rows(root: Path) -> int:
    """The rows of a hudi-rs snapshot read of the table."""
    import hudi

    return sum(b.num_rows for b in hudi.HudiTableBuilder.from_base_uri(str(root)).build().read())


def record_index_check(root: Path) -> dict[str, int]:
    """Live record-index entries and how many of them name a file group not in the latest view."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    live = {(s.partition, s.file_id) for s in HoodieTable.open(str(root)).file_system_view().latest_slices()}
    mdt = MetadataTable.open(storage, config, timeline)
    assert mdt is not None, f"{root}: no metadata table"
    count = stale = 0
    for fs in mdt.file_slices(RECORD_INDEX):
        merged = merge_file_slice(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files))
        for entry in merged.entries.values():
            record = entry.record
            record = record[1] if isinstance(record, tuple) else record
            info = record.get("recordIndexMetadata")
            info = info[1] if isinstance(info, tuple) else info
            if info is None:
                continue
            count += 1
            stale += (info["partitionName"], record_index_file_id(info)) not in live
        del merged
    return {"record_index_keys": count, "record_index_stale": stale}


def compact_table(root: Path, session: Any) -> dict[str, Any]:
    """Schedule (every file group with log files) and run a compaction on ``session``."""
    from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction
    from hoodied.service.spark_jobs import run_compaction

    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    everything = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
    inst, plan = schedule_compaction(storage, lock, everything)
    assert inst is not None, plan.reason
    result = run_compaction(storage, lock, inst.requested_time, session)
    return {"instant": inst.requested_time, "file_groups": len(result.write_stats),
            "rows_written": result.rows_written}


def cluster_table(root: Path, session: Any) -> dict[str, Any]:
    """Schedule (Hudi's size-based plan, default settings) and run a clustering on ``session``."""
    from hoodied.executors.clustering import ClusteringResult
    from hoodied.planners.clustering import schedule_clustering
    from hoodied.service.spark_jobs import run_spark_service

    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    inst, plan = schedule_clustering(storage, lock)
    assert inst is not None, plan.summary()
    result = run_spark_service(storage, lock, inst.requested_time, session)
    assert isinstance(result, ClusteringResult)
    return {"instant": inst.requested_time, "file_groups": len(result.write_stats),
            "replaced_file_groups": sum(len(ids) for ids in result.replaced.values()),
            "rows_written": result.rows_written}
