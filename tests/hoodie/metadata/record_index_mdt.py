"""A generated metadata table holding one ``record_index`` file group, for tests and ``bench/mdt_scale.py``.

Written with hoodied's own writers: ``hoodie.properties`` of an MDT (the keys Hudi 1.x writes for
its metadata tables), an initial delta commit that wrote the base HFile of ``keys`` record-index
entries (streamed with ``BaseHFileWriter``), then ``deltas`` delta commits whose log file holds
an HFILE_DATA block updating a share of the keys (a new data file for each) and a DELETE block.
The base file and the log blocks use ``block_size`` for their HFile blocks, so a small size
gives a file slice of many blocks from few keys. With ``file_groups`` > 1 the sorted keys are
split into that many contiguous ranges, one file group each (a base file, and one log file per
delta commit): a compaction does not route keys, and this spares hashing every key in Python
(Hudi routes by ``file_group_index``, so lookups by key would need that routing).
"""

from __future__ import annotations

import bisect
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from hoodied.hoodie.filenames import BaseFileName, LogFileName, make_write_token
from hoodied.hoodie.hfile.writer import DEFAULT_BLOCK_SIZE, BaseHFileWriter, encode_log_block_hfile
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log import (
    BlockType,
    DeleteRecord,
    HeaderKey,
    encode_block,
    encode_delete_block,
    write_log_file,
)
from hoodied.hoodie.metadata.encode import encode_value, metadata_schema_json
from hoodied.hoodie.metadata.index_records import record_index_record, record_index_value
from hoodied.hoodie.metadata.merge import with_file_name
from hoodied.hoodie.properties import TableConfig, load_table_config, partition_metadata_text, properties_text
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

__all__ = ["PARTITION", "RecordIndexMdt", "build_record_index_mdt", "record_keys"]

PARTITION = "record_index"
FILE_ID = "record-index-0000-0"
_DATA_PARTITIONS = [f"region={r}" for r in ("eu", "us", "apac", "latam")]
_FAST = TimeSettings(max_expected_clock_skew_ms=5)


def _mdt_properties(table_version: int) -> dict[str, str]:
    return {
        "hoodie.table.name": "generated_metadata",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": str(table_version),
        "hoodie.table.initial.version": str(table_version),
        "hoodie.table.base.file.format": "HFILE",
        "hoodie.table.recordkey.fields": "key",
        "hoodie.table.keygenerator.type": "HOODIE_TABLE_METADATA",
        "hoodie.compaction.payload.class": "org.apache.hudi.metadata.HoodieMetadataPayload",
        "hoodie.populate.meta.fields": "false",
        "hoodie.record.merge.mode": "CUSTOM",
        "hoodie.record.merge.strategy.id": "00000000-0000-0000-0000-000000000000",
        "hoodie.timeline.layout.version": "2",
        "hoodie.timeline.path": "timeline",
        "hoodie.timeline.history.path": "history",
        "hoodie.archivelog.folder": "history",
        "hoodie.datasource.write.drop.partition.columns": "false",
    }


@dataclass(frozen=True)
class RecordIndexMdt:
    """The generated MDT: its storage, config, a timeline writer holding no lock yet, the slice."""

    root: Path
    storage: LocalStorage
    config: TableConfig
    timeline: TimelineWriter
    table_version: int
    base_file: str  # relative to the MDT
    log_files: list[str]
    slices: list[tuple[str, list[str]]] = field(default_factory=list)
    """(base file, log files) of every file group, the first one's being ``base_file``, ``log_files``."""


def record_keys(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct UUID record keys (as a data table's), sorted."""
    rng = random.Random(seed)
    return sorted({str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(n)} if n else set())


def _data_file_ids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{uuid.UUID(int=rng.getrandbits(128))}-0" for _ in range(n)]


def _now_millis() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


def build_record_index_mdt(
    root: Path,
    keys: int,
    *,
    table_version: int = 9,
    deltas: int = 2,
    update_share: float = 0.1,
    delete_share: float = 0.01,
    block_size: int = DEFAULT_BLOCK_SIZE,
    seed: int = 7,
    file_groups: int = 1,
) -> RecordIndexMdt:
    """Write the MDT under ``root`` (its ``.hoodie`` and ``record_index`` folders)."""
    storage = LocalStorage(str(root))
    now = datetime.now(UTC)
    storage.put_if_absent(
        ".hoodie/hoodie.properties", properties_text(_mdt_properties(table_version), now).encode("utf-8")
    )
    config = load_table_config(storage, metadata_table=True)
    lock = InProcessLock(str(root))
    timeline = TimelineWriter(storage, config, lock, time_settings=_FAST)
    schema_json = metadata_schema_json(table_version)
    all_keys = record_keys(keys, seed)
    file_ids = _data_file_ids(64, seed)
    groups = max(1, file_groups)
    starts = [len(all_keys) * g // groups for g in range(groups)]  # index of each group's first key
    bounds = [all_keys[i] for i in starts[1:] if i < len(all_keys)]

    def group_of(key: str) -> int:
        return bisect.bisect_right(bounds, key)

    fids = [FILE_ID if g == 0 else f"record-index-{g:04d}-0" for g in range(groups)]
    md = {
        "partitionToWriteStats": {},
        "compacted": False,
        "extraMetadata": {},
        "version": None,
        "operationType": "UPSERT_PREPPED",
    }
    with lock:
        init = timeline.new_instant_time()
        timeline.create_requested(Action.DELTA_COMMIT, init, None)
        timeline.transition_to_inflight(init, Action.DELTA_COMMIT, md)
        millis = _now_millis()
        plain = {
            (p, f): record_index_value(p, f, millis, table_version)
            for p in _DATA_PARTITIONS
            for f in file_ids
        }
        storage.put_if_absent(
            f"{PARTITION}/.hoodie_partition_metadata", partition_metadata_text(init, 1, now).encode("utf-8")
        )
        base_names = []
        for g in range(groups):
            base_name = BaseFileName(fids[g], make_write_token(g, 0, 0), init, "hfile").format()
            base_names.append(base_name)
            values = plain
            if table_version < 9:  # Hudi 1.0 names the file in every base value
                values = {k: with_file_name(v, base_name) for k, v in plain.items()}
            end = starts[g + 1] if g + 1 < groups else len(all_keys)
            with open(root / PARTITION / base_name, "wb") as f:
                writer = BaseHFileWriter(schema_json, block_size=block_size, create_time_ms=millis, sink=f)
                for i in range(starts[g], end):
                    writer.append(all_keys[i], values[(_DATA_PARTITIONS[i % 4], file_ids[i % len(file_ids)])])
                writer.close()
        timeline.complete(init, Action.DELTA_COMMIT, md)

        rng = random.Random(seed + 1)
        logs: list[list[str]] = [[] for _ in range(groups)]
        for d in range(deltas):
            instant = timeline.new_instant_time()
            timeline.create_requested(Action.DELTA_COMMIT, instant, None)
            timeline.transition_to_inflight(instant, Action.DELTA_COMMIT, md)
            millis = _now_millis()
            updated = sorted(rng.sample(all_keys, int(len(all_keys) * update_share)))
            new_file = _data_file_ids(1, seed + 100 + d)[0]
            updated_by_group: list[list[str]] = [[] for _ in range(groups)]
            for k in updated:
                updated_by_group[group_of(k)].append(k)
            header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: schema_json}
            gone = rng.sample(all_keys, int(len(all_keys) * delete_share))
            gone_by_group: list[list[str]] = [[] for _ in range(groups)]
            for k in gone:
                gone_by_group[group_of(k)].append(k)
            for g in range(groups):
                cells = [
                    (
                        k,
                        encode_value(
                            record_index_record(k, _DATA_PARTITIONS[d % 4], new_file, millis), table_version
                        ),
                    )
                    for k in updated_by_group[g]
                ]
                blocks = [
                    encode_block(
                        BlockType.HFILE_DATA,
                        header,
                        encode_log_block_hfile(cells, schema_json, block_size=block_size,
                                               create_time_ms=millis),
                    )
                ]
                if gone_by_group[g]:
                    deletes = [DeleteRecord(k, PARTITION, 0, "IntWrapper") for k in gone_by_group[g]]
                    blocks.append(encode_block(BlockType.DELETE, header, encode_delete_block(deletes)))
                name = LogFileName(fids[g], instant, 1, make_write_token(d, 0, g)).format()
                write_log_file(storage, f"{PARTITION}/{name}", blocks)
                logs[g].append(f"{PARTITION}/{name}")
            timeline.complete(instant, Action.DELTA_COMMIT, md)
    slices = [(f"{PARTITION}/{base_names[g]}", logs[g]) for g in range(groups)]
    return RecordIndexMdt(root, storage, config, timeline, table_version, slices[0][0], slices[0][1], slices)
