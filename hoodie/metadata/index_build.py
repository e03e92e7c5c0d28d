"""Async metadata-table indexing (``indexing`` instants): the rules and the bytes, engine-free.

Apache Hudi 1.x schedules an index with ``ScheduleIndexActionExecutor`` (``HoodieIndexer
--mode schedule`` or SQL ``CREATE INDEX``): it writes ``<T>.indexing.requested`` holding a
``HoodieIndexPlan`` (one ``HoodieIndexPartitionInfo`` per MDT partition: ``metadataPartitionPath``
and ``indexUptoInstant``, the last instant of the contiguous completed write timeline) and
nothing else; ``CREATE INDEX`` registers the index definition in ``.hoodie/.index_defs/index.json``
before that. ``RunIndexActionExecutor`` executes it; this module keeps its rules:

- it refuses partitions already listed in ``hoodie.table.metadata.partitions`` or
  ``...partitions.inflight`` ("already exist or inflight") and needs the instant *requested*;
- ``indexing`` requested -> inflight (empty file); the partition is marked inflight in the data
  table's ``hoodie.properties`` (``buildMetadataPartitions``);
- the partition is built from the table's latest merged file slices (``initializeFromFilesystem``,
  the snapshot of the latest completed instant, not ``indexUptoInstant``) as one MDT delta
  commit at the *init instant* (``init_instant_time``): the partition folder is cleared, every
  file group gets an empty log file ``.<fileId>_<init>.log.1_0-0-0`` (one empty DELETE block,
  ``initializeFileGroups``), then the records are bulk-inserted into one base HFile
  ``<fileId>_<token>_<init>.hfile`` per file group that receives records
  (``BULK_INSERT``, table version 9: ``BULK_INSERT_PREPPED``; requested and inflight empty);
- the partition moves to ``hoodie.table.metadata.partitions`` (``setMetadataPartitionState``);
- catch-up (``AbstractIndexingCatchupTask``): data instants after ``indexUptoInstant`` that have an
  MDT instant are skipped; the others are waited for and applied. The executor builds from the
  latest snapshot and refuses to start while a data write is pending, so nothing is left to apply;
- ``<T>_<completion>.indexing``: ``HoodieIndexCommitMetadata`` version 1 whose partition infos
  keep the plan's ``indexUptoInstant`` (the executor's ``currentCaughtupInstant`` is never
  advanced by its task, as the fixtures show).

Built here: secondary indexes (``secondary_index_<name>``, index type ``secondary_index``,
function ``identity``), ``record_index`` (global), ``column_stats`` and ``partition_stats`` (of the
columns the table's ``column_stats`` definition names; parquet base files only). Their records
are in ``hoodie.metadata.index_records``. File group counts: ``estimateFileGroupCount`` with the record
index settings for secondary and record indexes (10..10000 file groups, 48 bytes a record,
growth 2.0, 1 GiB a file group), ``hoodie.metadata.index.column.stats.file.group.count`` (2) and
``...partition.stats.file.group.count`` (1). Not built: ``files``, ``bloom_filters``, expression
indexes, partitioned record indexes, stats of log files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hoodied.hoodie.config_keys import HUDI_KEYS, ConfigKey
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.log import BlockType, HeaderKey, encode_block
from hoodied.hoodie.log.blocks import encode_delete_block
from hoodied.hoodie.metadata.colstats import index_definitions
from hoodied.hoodie.metadata.encode import (
    COLUMN_STATS,
    PARTITION_STATS,
    RECORD_INDEX,
    file_group_id,
    file_group_index,
    metadata_payload_schema_json,
)
from hoodied.hoodie.metadata.index_records import secondary_index_file_group
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.commit_metadata import write_stat
from hoodied.hoodie.timeline.instant import Action, Instant, State

__all__ = [
    "INDEX_COMMIT_METADATA_VERSION",
    "SECONDARY_INDEX",
    "SECONDARY_INDEX_PREFIX",
    "FileGroupSizing",
    "IndexPartitionInfo",
    "IndexSpec",
    "base_file_stat",
    "estimate_file_group_count",
    "file_group_ids",
    "index_commit_metadata",
    "init_commit_metadata",
    "init_instant_time",
    "init_log_block",
    "init_log_file_name",
    "read_index_plan",
    "require_indexable",
    "require_not_started",
]

SECONDARY_INDEX_PREFIX = "secondary_index_"
SECONDARY_INDEX = "secondary_index"
#: ``hoodie.metadata.index.column.stats.file.group.count`` and its default.
COLUMN_STATS_FILE_GROUPS_KEY = HUDI_KEYS.METADATA_INDEX_COLUMN_STATS_FILE_GROUP_COUNT.key
COLUMN_STATS_FILE_GROUPS = 2
PARTITION_STATS_FILE_GROUPS_KEY = HUDI_KEYS.METADATA_INDEX_PARTITION_STATS_FILE_GROUP_COUNT.key
PARTITION_STATS_FILE_GROUPS = 1
EXPRESSION_INDEX_PREFIX = "expr_index_"
INDEX_COMMIT_METADATA_VERSION = 1
#: ``MetadataPartitionType`` partitions hoodied does not build (yet).
_OTHER_PARTITIONS = ("files", "bloom_filters")
#: ``SOLO_COMMIT_TIMESTAMP`` as a 17-digit instant (``00000000000000000``).
_SOLO = 0


@dataclass(frozen=True, slots=True)
class IndexPartitionInfo:
    """One ``HoodieIndexPartitionInfo`` of an index plan."""

    version: int
    partition: str
    index_upto_instant: str
    extra_metadata: Mapping[str, str]

    def to_avro(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "metadataPartitionPath": self.partition,
            "indexUptoInstant": self.index_upto_instant,
            "extraMetadata": dict(self.extra_metadata),
        }


@dataclass(frozen=True, slots=True)
class IndexSpec:
    """What one planned MDT partition indexes."""

    partition: str
    kind: str  # SECONDARY_INDEX or COLUMN_STATS
    source_fields: tuple[str, ...]
    version: str = "V1"  # index definition version; a V2 secondary index routes by secondary key
    file_groups: int | None = None  # a fixed count; None: estimated from the record count

    def file_group_of(self, key: str, num_file_groups: int) -> int:
        if self.kind == SECONDARY_INDEX:
            return secondary_index_file_group(key, num_file_groups, self.version)
        return file_group_index(key, num_file_groups)


@dataclass(frozen=True, slots=True)
class FileGroupSizing:
    """``estimateFileGroupCount`` inputs (record index settings, which secondary indexes use)."""

    min_count: int = 10
    max_count: int = 10_000
    growth_factor: float = 2.0
    max_file_group_bytes: int = 1024 * 1024 * 1024
    average_record_bytes: int = 48

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> FileGroupSizing:
        """From Hudi's keys (``HUDI_KEYS.RECORD_INDEX_*``, each under any of its names) where present."""
        d = cls()

        def given(key: ConfigKey, default: float) -> str:
            name = key.given_as(options)
            return options[name] if name is not None else str(default)

        try:
            return cls(
                int(given(HUDI_KEYS.RECORD_INDEX_MIN_FILE_GROUP_COUNT, d.min_count)),
                int(given(HUDI_KEYS.RECORD_INDEX_MAX_FILE_GROUP_COUNT, d.max_count)),
                float(given(HUDI_KEYS.RECORD_INDEX_GROWTH_FACTOR, d.growth_factor)),
                int(given(HUDI_KEYS.RECORD_INDEX_MAX_FILE_GROUP_SIZE_BYTES, d.max_file_group_bytes)),
            )
        except ValueError as exc:
            raise HoodieFormatError(f"record index file group settings: {exc}") from None


def estimate_file_group_count(record_count: int, sizing: FileGroupSizing = FileGroupSizing()) -> int:
    """``HoodieTableMetadataUtil.estimateFileGroupCount``."""
    if sizing.min_count == sizing.max_count and sizing.min_count != 0:
        return sizing.min_count
    expected = math.ceil(record_count * sizing.growth_factor)
    per_group = sizing.max_file_group_bytes // max(sizing.average_record_bytes, 1)
    estimated = expected // per_group
    if estimated >= sizing.max_count:
        return sizing.max_count
    if estimated <= sizing.min_count:
        return sizing.min_count
    return max(1, estimated)


# ---------------------------------------------------------------------------- the plan


def read_index_plan(timeline: Timeline, inst: Instant) -> list[IndexPartitionInfo]:
    """The partition infos of the ``HoodieIndexPlan`` of ``inst`` (HoodieFormatError when unusable)."""
    where = timeline.state_file(inst, State.REQUESTED)
    plan = timeline.read_plan(inst)
    infos = (plan or {}).get("indexPartitionInfos") or []
    if not infos:
        raise HoodieFormatError(f"{where}: index plan has no partitions to index")
    out = []
    for info in infos:
        partition = str(info.get("metadataPartitionPath") or "")
        upto = str(info.get("indexUptoInstant") or "")
        if not partition or not upto:
            raise HoodieFormatError(f"{where}: index plan entry without partition or indexUptoInstant")
        out.append(IndexPartitionInfo(int(info.get("version") or 1), partition, upto,
                                      dict(info.get("extraMetadata") or {})))
    return out


def require_indexable(
    storage: Storage, config: TableConfig, infos: list[IndexPartitionInfo], where: str
) -> list[IndexSpec]:
    """What to build for each planned partition; UnsupportedTableError for anything hoodied does not build."""
    if config.version not in (8, 9):
        raise UnsupportedTableError(
            f"{where}: indexing needs table version 8 or 9, this table is version {config.version}")
    if not config.metadata_table_available:
        raise UnsupportedTableError(f"{where}: the table has no metadata table (files partition)")
    if not config.populate_meta_fields:
        raise UnsupportedTableError(f"{where}: indexing tables without meta fields is not supported")
    if len(infos) != 1:
        raise UnsupportedTableError(f"{where}: Hudi initializes one secondary index at a time; "
                                    f"the plan names {len(infos)} partitions")
    defs = index_definitions(storage, config.props)
    specs = []
    for info in infos:
        p = info.partition
        if p in (COLUMN_STATS, PARTITION_STATS):
            specs.append(_column_stats_spec(config, defs, where, p))
            continue
        if p == RECORD_INDEX:
            specs.append(_record_index_spec(config, defs, where))
            continue
        if p in _OTHER_PARTITIONS or p.startswith(EXPRESSION_INDEX_PREFIX):
            raise UnsupportedTableError(
                f"{where}: building MDT partition {p} is not supported "
                "(hoodied builds secondary indexes, column_stats, partition_stats and record_index)")
        if not p.startswith(SECONDARY_INDEX_PREFIX):
            raise UnsupportedTableError(f"{where}: unknown MDT partition type {p}")
        d = defs.get(p)
        if d is None:
            raise HoodieFormatError(f"{where}: no index definition for {p} in the table's index definitions")
        fields = list(d.get("sourceFields") or [])
        if d.get("indexType") != "secondary_index" or d.get("indexFunction", "identity") != "identity":
            raise UnsupportedTableError(
                f"{where}: {p} is a {d.get('indexType')} index with function {d.get('indexFunction')}; "
                "only identity secondary indexes are built")
        if len(fields) != 1:
            raise UnsupportedTableError(f"{where}: {p} indexes {len(fields)} fields; one is supported")
        specs.append(IndexSpec(p, SECONDARY_INDEX, (str(fields[0]),), str(d.get("version") or "V1")))
    return specs


def _column_stats_spec(config: TableConfig, defs: Mapping[str, Any], where: str, partition: str) -> IndexSpec:
    """Column (or partition) stats of the columns the table's ``column_stats`` definition names
    (Hudi writes it when it first initializes column stats; hoodied does not pick the columns)."""
    d = defs.get(COLUMN_STATS)
    if d is None or not d.get("sourceFields"):
        raise UnsupportedTableError(f"{where}: the table has no column_stats index definition "
                                    f"(hoodied does not choose the columns {partition} indexes)")
    if partition == PARTITION_STATS and not config.partition_fields:
        raise UnsupportedTableError(f"{where}: partition_stats of a non-partitioned table (Hudi skips it)")
    key, default = ((COLUMN_STATS_FILE_GROUPS_KEY, COLUMN_STATS_FILE_GROUPS) if partition == COLUMN_STATS
                    else (PARTITION_STATS_FILE_GROUPS_KEY, PARTITION_STATS_FILE_GROUPS))
    raw = config.props.get(key, str(default))
    try:
        groups = int(raw)
    except ValueError:
        raise HoodieFormatError(f"{where}: {key}={raw!r} is not a number") from None
    fields = tuple(str(f) for f in d["sourceFields"])
    return IndexSpec(partition, partition, fields, str(d.get("version") or "V1"), groups)


def _record_index_spec(config: TableConfig, defs: Mapping[str, Any], where: str) -> IndexSpec:
    """The global record index. Hudi 1.1 (table version 9) registers its definition
    (``createRecordIndexDefinition``); hoodied needs it there and does not build a partitioned one."""
    d = defs.get(RECORD_INDEX)
    if config.version >= 9 and d is None:
        raise UnsupportedTableError(f"{where}: the table has no record_index index definition")
    if d is not None and str((d.get("indexOptions") or {}).get("isPartitioned", "false")).lower() == "true":
        raise UnsupportedTableError(f"{where}: a partitioned record index is not built by hoodied")
    return IndexSpec(RECORD_INDEX, RECORD_INDEX, (), str((d or {}).get("version") or "V1"))


def require_not_started(config: TableConfig, infos: list[IndexPartitionInfo], where: str) -> None:
    """Hudi's "Following partitions already exist or inflight" refusal."""
    taken = {i.partition for i in infos} & {*config.metadata_partitions, *config.metadata_partitions_inflight}
    if taken:
        raise InstantStateError(
            f"{where}: MDT partitions already exist or are inflight: {', '.join(sorted(taken))}")


# ---------------------------------------------------------------------------- MDT instants and files


def init_instant_time(data: Timeline, mdt: Timeline) -> str:
    """The MDT instant that initializes the partition (``generateUniqueInstantTime``).

    When the data timeline's latest completed instant is an ``indexing`` instant, its time;
    otherwise the first of ``00000000000000000``, ``...01``, ... (``SOLO_COMMIT_TIMESTAMP`` plus
    milliseconds) not yet on the MDT timeline. (Both seen in Hudi 1.0/1.1 fixtures: the second
    index built right after a first one initializes at the first indexing instant's time.)
    """
    latest = data.latest_completed()
    taken = {i.requested_time for i in mdt.instants}
    if latest is not None and latest.action is Action.INDEXING:
        if latest.requested_time in taken:  # Hudi would write over that MDT instant; refuse instead
            raise InstantStateError(f"metadata table: initialization instant {latest.requested_time} "
                                    "(the latest indexing) is already on the MDT timeline")
        return latest.requested_time
    for offset in range(60_000):
        candidate = f"{_SOLO + offset:017d}"
        if candidate not in taken:
            return candidate
    raise InstantStateError("metadata table: no free initialization instant")


def init_log_file_name(file_id: str, instant_time: str) -> str:
    """``.<fileId>_<instant>.log.1_0-0-0`` (log version 1, ``DEFAULT_WRITE_TOKEN``)."""
    return f".{file_id}_{instant_time}.log.1_0-0-0"


def init_log_block(instant_time: str) -> bytes:
    """The empty DELETE block every new file group starts with (header INSTANT_TIME only)."""
    return encode_block(BlockType.DELETE, {HeaderKey.INSTANT_TIME: instant_time}, encode_delete_block([]))


def file_group_ids(partition: str, count: int) -> list[str]:
    return [file_group_id(partition, i) for i in range(count)]


# ---------------------------------------------------------------------------- secondary index records


# ---------------------------------------------------------------------------- metadata


def base_file_stat(partition: str, file_id: str, name: str, records: int, size: int) -> dict[str, Any]:
    """The ``HoodieWriteStat`` of a bulk-inserted base HFile."""
    return write_stat(file_id=file_id, path=f"{partition}/{name}", partition_path=partition,
                      num_writes=records, num_inserts=records, file_size=size)


def init_commit_metadata(stats: Mapping[str, list[dict[str, Any]]], table_version: int) -> dict[str, Any]:
    """Commit metadata of the MDT delta commit that initializes a partition."""
    return {
        "partitionToWriteStats": dict(stats),
        "compacted": False,
        "extraMetadata": {"schema": metadata_payload_schema_json(table_version)},
        "version": None,
        "operationType": "BULK_INSERT" if table_version < 9 else "BULK_INSERT_PREPPED",
    }


def index_commit_metadata(infos: Iterable[IndexPartitionInfo]) -> dict[str, Any]:
    """``HoodieIndexCommitMetadata`` of the completed ``indexing`` instant."""
    return {
        "version": INDEX_COMMIT_METADATA_VERSION,
        "operationType": None,
        "indexPartitionInfos": [i.to_avro() for i in infos],
    }
