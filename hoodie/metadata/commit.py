"""What a table service's commit writes to the metadata table, and which tables it can keep exact.

For a data commit T with ``HoodieCommitMetadata`` M (the metadata T completes with), Hudi 1.x's
``HoodieBackedTableMetadataWriter.update(HoodieCommitMetadata)`` writes the MDT delta commit T
with, per MDT partition (``HoodieTableMetadataUtil.convertMetadataToRecords``):

- ``files``: one type-1 ``__all_partitions__`` record naming *every* partition of M's
  ``partitionToWriteStats`` (``getPartitionsAdded`` takes them all, new or not), and one type-2
  record per partition adding the file of each write stat with a path (the largest reported size
  per name). Nothing is deleted: a clustering's replaced file groups stay listed until a clean
  removes their files (``convertMetadataToFilesPartitionRecords``);
- ``column_stats``: the stats of every new file (``convertMetadataToColumnStatsRecords``). A base
  file's come from its parquet footer (``hoodie.metadata.colstats``), a log file's from the records
  the append handle wrote (``hoodie.metadata.log_stats``: re-read from the written file);
- ``partition_stats`` (``PartitionStatsIndexer`` / ``convertMetadataToPartitionStatRecords``):
  per partition of M, with ``column_stats`` available ("tight bound"): the stats of M's new
  files plus the ``column_stats`` records the MDT holds for the files of the partition's latest
  file slices (pending ones included: the new files are in them), each given the type of the
  column in the commit's writer schema (``hoodie.metadata.range_types``), merged per column,
  written with ``isTightBound`` true so readers replace rather than widen the older record;
- ``bloom_filters``: for every new *base* file, its footer's bloom filter (the Base64 text as
  UTF-8 bytes), type = the writer's ``hoodie.bloom.index.filter.type`` (DYNAMIC_V0), timestamp T
  (``convertMetadataToBloomFilterRecords``; delta write stats get none);
- ``record_index``: nothing for ``COMPACT`` (``convertMetadataToRecordIndexRecords`` returns
  early); a clustering passes its moved keys (``sharded``: built per MDT file group by the
  writer's operations, never in the driver; ``record_index`` for keys already in memory); a ``LOG_COMPACT``
  is not among the early returns in Hudi 1.0.x/1.1.x: the write stat of each new log file
  names only that file, so Hudi reads it alone and writes a record-index delete (a DELETE
  block entry) for every key of its delete blocks (``getRevivedAndDeletedKeysFromMergedLogs``,
  "only current log file" branch). Re-deleting a deleted key changes nothing, except when the
  key lives again in another file group (deleted here, inserted there later): the delete
  would then drop a live entry (newer Hudi skips ``LOG_COMPACT`` here). hoodied refuses that
  case (the MDT untouched) rather than corrupt the index;
- secondary indexes: nothing for ``COMPACT`` and ``CLUSTER``
  (``updateSecondaryIndexIfPresent`` / ``getSecondaryIndexUpdates`` return early: the
  record key -> secondary key mapping does not change). A ``LOG_COMPACT`` goes through
  ``convertWriteStatsToSecondaryIndexRecords``, which diffs record key -> secondary key of the
  file group's previous slice against the same slice plus the new log file: a log compaction
  writes exactly the merged records of the slice's blocks, and re-merging a merge result over
  its inputs gives it back, so the diff is empty and Hudi writes nothing either.

``write_commit_to_metadata_table`` writes and completes that delta commit (``MetadataWriter``:
a partial or orphaned MDT delta commit T of an earlier attempt is rolled back first), with the
crash points ``mdt-log-written`` (after each MDT log file) and ``mdt-done`` (MDT T completed,
data T not yet).

Tables with an MDT partition an operation cannot keep exact (``maintained_partitions``:
expression indexes, a partitioned record index for ``CLUSTER`` and ``LOG_COMPACT``) are refused
by ``require_commit_maintainable`` before anything is written. The data-dependent refusals (a
log file's column statistics ``hoodie.metadata.log_stats`` cannot write exactly, the record-index
case above) come from ``commit_mdt_records``, before any MDT file is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hoodied.hoodie.basefile import KEY_BLOOM
from hoodied.hoodie.config_keys import HUDI_KEYS
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName
from hoodied.hoodie.fsview import FileSystemView, list_storage
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.metadata.colstats import (
    ColumnRange,
    ValueType,
    column_ranges,
    column_stats_columns,
    column_stats_records,
    index_definitions,
    partition_stats_records,
    read_parquet_metadata,
)
from hoodied.hoodie.metadata.encode import (
    BLOOM_FILTERS,
    COLUMN_STATS,
    FILES,
    PARTITION_STATS,
    RECORD_INDEX,
    MetadataRecord,
    bloom_filter_key,
    empty_record,
    file_group_index,
    files_record,
    hash_id_64,
    partition_list_record,
)
from hoodied.hoodie.metadata.index_records import record_index_file_id
from hoodied.hoodie.metadata.log_stats import LogFileStats, log_file_stats
from hoodied.hoodie.metadata.merge import merge_slice_keys
from hoodied.hoodie.metadata.range_types import column_value_types, schema_typed_ranges
from hoodied.hoodie.metadata.reader import MetadataTable, metadata_table_in_use
from hoodied.hoodie.metadata.records import RecordType, partition_to_key
from hoodied.hoodie.metadata.writer import MetadataWriter, ShardedRecords, require_mdt_maintainable
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.tasks import OperationRunner, run_in_process
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Instant
from hoodied.hoodie.timeline.truetime import TimeSettings

__all__ = [
    "CLUSTER",
    "COMPACT",
    "LOG_COMPACT",
    "SECONDARY_INDEX_PREFIX",
    "commit_mdt_records",
    "maintained_partitions",
    "require_commit_maintainable",
    "write_commit_to_metadata_table",
]

COMPACT = "COMPACT"
LOG_COMPACT = "LOG_COMPACT"
CLUSTER = "CLUSTER"
SECONDARY_INDEX_PREFIX = "secondary_index_"
#: ``hoodie.bloom.index.filter.type``: the type Hudi records in ``bloom_filters`` (its default).
BLOOM_TYPE_PROPERTY = HUDI_KEYS.BLOOM_FILTER_TYPE.key
DEFAULT_BLOOM_TYPE = "DYNAMIC_V0"

#: Per operation, the MDT partitions whose records hoodied writes exactly as Hudi (secondary
#: indexes: every ``secondary_index_*``, when the operation leaves them unchanged).
_MAINTAINED: dict[str, tuple[frozenset[str], bool]] = {
    COMPACT: (frozenset({FILES, COLUMN_STATS, PARTITION_STATS, BLOOM_FILTERS, RECORD_INDEX}), True),
    CLUSTER: (frozenset({FILES, COLUMN_STATS, PARTITION_STATS, BLOOM_FILTERS, RECORD_INDEX}), True),
    LOG_COMPACT: (frozenset({FILES, COLUMN_STATS, PARTITION_STATS, BLOOM_FILTERS, RECORD_INDEX}), True),
}
#: Wrapper names of a table version 8 ("V1") column stats value -> the value type it stands for.
_V1_WRAPPERS = {
    "BooleanWrapper": ValueType.BOOLEAN, "IntWrapper": ValueType.INT, "LongWrapper": ValueType.LONG,
    "FloatWrapper": ValueType.FLOAT, "DoubleWrapper": ValueType.DOUBLE,
    "StringWrapper": ValueType.STRING, "BytesWrapper": ValueType.BYTES,
}


def _operation_rules(operation: str) -> tuple[frozenset[str], bool]:
    rules = _MAINTAINED.get(operation)
    if rules is None:
        raise UnsupportedTableError(
            f"operation {operation}: hoodied writes metadata-table delta commits for "
            f"{', '.join(sorted(_MAINTAINED))} only"
        )
    return rules


def maintained_partitions(config: TableConfig, operation: str) -> list[str]:
    """The table's declared MDT partitions that a commit of ``operation`` keeps exact."""
    fixed, secondary = _operation_rules(operation)
    declared = [*config.metadata_partitions, *config.metadata_partitions_inflight]
    return [p for p in declared if p in fixed or (secondary and p.startswith(SECONDARY_INDEX_PREFIX))]


def require_commit_maintainable(storage: Storage, config: TableConfig, operation: str, what: str) -> None:
    """Refuse ``what`` (nothing written) when a commit of ``operation`` could not keep this table's
    metadata table exact. A table without a metadata table always passes."""
    require_mdt_maintainable(storage, config, what, maintained_partitions(config, operation))
    if operation in (CLUSTER, LOG_COMPACT) and RECORD_INDEX in config.metadata_partitions:
        options = (index_definitions(storage, config.props).get(RECORD_INDEX) or {}).get("indexOptions") or {}
        if str(options.get("isPartitioned", "false")).lower() == "true":
            raise UnsupportedTableError(
                f"{storage.base_uri}: MDT partition record_index is a partitioned record index; {what} "
                "cannot keep it exact (nothing was changed)"
            )


# ---------------------------------------------------------------------------- the records


def _new_files(commit_metadata: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Partition -> file name -> size of every write stat with a path (largest size per name)."""
    out: dict[str, dict[str, int]] = {}
    for partition, stats in (commit_metadata.get("partitionToWriteStats") or {}).items():
        files = out.setdefault(partition, {})
        for stat in stats or ():
            path = stat.get("path")
            if not path:
                continue  # an empty partition: Hudi skips the stat too
            if stat.get("cdcStats"):
                raise UnsupportedTableError(f"{path}: write stat with CDC files; hoodied writes no CDC logs")
            name = path.rsplit("/", 1)[-1]
            files[name] = max(files.get(name, 0), int(stat.get("fileSizeInBytes") or 0))
    return out


def _bloom_record(
    storage: Storage, partition: str, name: str, instant_time: str, bloom_type: str
) -> MetadataRecord:
    path = f"{partition}/{name}" if partition else name
    footer = read_parquet_metadata(storage, path).metadata or {}
    text = footer.get(KEY_BLOOM.encode())
    if not text:
        raise HoodieFormatError(f"{path}: base file has no bloom filter in its footer")
    key = bloom_filter_key(partition, name)
    record = empty_record(key, RecordType.BLOOM_FILTER)
    record["BloomFilterMetadata"] = {
        "type": bloom_type, "timestamp": instant_time, "bloomFilter": bytes(text), "isDeleted": False,
    }
    return key, record


def _file_ranges(
    storage: Storage, partition: str, names: Iterable[str], columns: tuple[str, ...], version: int,
    logs: Mapping[tuple[str, str], LogFileStats],
) -> list[ColumnRange]:
    ranges: list[ColumnRange] = []
    for name in names:
        if BaseFileName.parse(name) is None:
            ranges.extend(logs[(partition, name)].ranges)
            continue
        path = f"{partition}/{name}" if partition else name
        ranges.extend(column_ranges(read_parquet_metadata(storage, path), name, columns, version))
    return ranges


def _log_stats(
    storage: Storage, new: Mapping[str, Mapping[str, int]], columns: tuple[str, ...], version: int
) -> dict[tuple[str, str], LogFileStats]:
    """Ranges and deleted keys of every new log file (each file read once, one at a time)."""
    return {(p, name): log_file_stats(storage, p, name, columns, version)
            for p, files in sorted(new.items()) for name in sorted(files)
            if BaseFileName.parse(name) is None}


def _log_compaction_deletes(
    data_storage: Storage, data_config: TableConfig, commit_metadata: Mapping[str, Any],
    logs: Mapping[tuple[str, str], LogFileStats],
) -> list[MetadataRecord]:
    """The record-index deletes of a log compaction: every deleted key of its new log files,
    once. Refused when a key's live entry is in another file group (see the module docstring)."""
    owner: dict[str, tuple[str, str]] = {}
    for partition, stats in (commit_metadata.get("partitionToWriteStats") or {}).items():
        for stat in stats or ():
            name = (stat.get("path") or "").rsplit("/", 1)[-1]
            if (partition, name) in logs:
                for key in logs[(partition, name)].deleted_keys:
                    owner[key] = (partition, str(stat.get("fileId")))
    if not owner:
        return []
    mdt = MetadataTable.open(data_storage, data_config, Timeline.load(data_storage, data_config))
    assert mdt is not None
    slices = mdt.file_slices(RECORD_INDEX)
    wanted: dict[int, list[str]] = {}
    for key in owner:
        wanted.setdefault(file_group_index(key, len(slices)), []).append(key)
    for index, keys in sorted(wanted.items()):
        fs = slices[index]
        # only the deleted keys: the base HFile through its block index, the log blocks filtered
        entries = merge_slice_keys(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files),
                                   keys=keys).entries
        for key in keys:
            live = entries.get(key)
            info = live.record.get("recordIndexMetadata") if live is not None else None
            info = info[1] if isinstance(info, tuple) else info
            if info and (info.get("partitionName"), record_index_file_id(info)) != owner[key]:
                raise UnsupportedTableError(
                    f"{data_storage.base_uri}: record key {key} deleted in {'/'.join(owner[key])} lives in "
                    f"file group {record_index_file_id(info)}; Hudi's record-index delete of a log "
                    "compaction would drop that entry (the metadata table was not changed)")
    return [(key, None) for key in sorted(owner)]


def _unwrap(value: Any) -> tuple[str | None, Any]:
    """A min/max union value read with record names -> (wrapper name, primitive)."""
    if value is None:
        return None, None
    name, inner = value if isinstance(value, tuple) else (None, value)
    return (name.rsplit(".", 1)[-1] if name else None), (inner or {}).get("value")


def _stored_range(payload: Mapping[str, Any], where: str) -> ColumnRange:
    """``HoodieColumnRangeMetadata.fromColumnStats``: an MDT column stats record as a range."""
    (low_name, low), (high_name, high) = _unwrap(payload.get("minValue")), _unwrap(payload.get("maxValue"))
    value_type = payload.get("valueType")
    value_type = value_type[1] if isinstance(value_type, tuple) else value_type
    if value_type is not None:
        vtype, info = ValueType(value_type["typeOrdinal"]), value_type.get("additionalInfo")
    else:  # table version 8: the wrapper says what the value is
        wrapper = low_name or high_name
        vtype, info = _V1_WRAPPERS.get(wrapper or "", ValueType.NULL), None
        if wrapper is not None and wrapper not in _V1_WRAPPERS:
            raise UnsupportedTableError(f"{where}: column stats value of {wrapper} is not merged by hoodied")
    return ColumnRange(
        payload["fileName"], payload["columnName"], vtype, info, low, high,
        int(payload.get("nullCount") or 0), int(payload.get("valueCount") or 0),
        int(payload.get("totalSize") or 0), int(payload.get("totalUncompressedSize") or 0),
    )


def _latest_file_names(
    storage: Storage, config: TableConfig, partitions: Iterable[str]
) -> dict[str, set[str]]:
    """Per partition, the base and log file names of its latest file slices, pending writes
    included (``getLatestFileSlicesIncludingInflight``; replaced file groups left out)."""
    wanted = set(partitions)
    listing = {p: files for p, files in list_storage(storage, config).items() if p in wanted}
    view = FileSystemView.build(listing, Timeline.load(storage, config), config, include_pending=True)
    names: dict[str, set[str]] = {p: set() for p in wanted}
    for partition in wanted:
        for fs in view.latest_slices(partition):
            if fs.base_file is not None:
                names[partition].add(fs.base_file.file_name)
            names[partition].update(lf.file_name for lf in fs.log_files)
    return names


def _stored_ranges(
    mdt: MetadataTable, columns: tuple[str, ...], files: Mapping[str, set[str]]
) -> dict[str, list[ColumnRange]]:
    """Per data partition, the ``column_stats`` records the MDT holds for its ``files``
    (Hudi reads them by key prefix: column + partition; so does this, through the block index
    of each slice's HFiles, so what is read is bounded by the touched partitions' records)."""
    prefixes = {hash_id_64(c) + hash_id_64(partition_to_key(p)): p for p in files for c in columns}
    out: dict[str, list[ColumnRange]] = {p: [] for p in files}
    if not prefixes:
        return out
    for fs in mdt.file_slices(COLUMN_STATS):
        merged = merge_slice_keys(mdt.storage, mdt.timeline, fs.base_file, list(fs.log_files),
                                  prefixes=prefixes)
        for key, entry in sorted(merged.entries.items()):
            partition = prefixes.get(key[:24])  # two 12-character hashes
            if partition is None:
                continue
            payload = entry.record.get("ColumnStatsMetadata")
            payload = payload[1] if isinstance(payload, tuple) else payload
            if payload is None or payload.get("isDeleted") or payload.get("fileName") not in files[partition]:
                continue
            out[partition].append(_stored_range(payload, f"{mdt.storage.base_uri}/{COLUMN_STATS}"))
    return out


def commit_mdt_records(
    data_storage: Storage,
    data_config: TableConfig,
    instant_time: str,
    commit_metadata: Mapping[str, Any],
    *,
    record_index: Sequence[MetadataRecord] = (),
) -> dict[str, list[MetadataRecord]]:
    """The MDT records, per MDT partition, of data commit ``instant_time`` completing with
    ``commit_metadata`` (see the module docstring). The caller has passed
    ``require_commit_maintainable``; its new files are written, the instant is not completed."""
    operation = str(commit_metadata.get("operationType") or "")
    _operation_rules(operation)
    declared = set(data_config.metadata_partitions)
    version = data_config.version
    new = _new_files(commit_metadata)
    files: list[MetadataRecord] = [partition_list_record(sorted(new))]
    files += [files_record(p, f) for p, f in sorted(new.items())]
    out: dict[str, list[MetadataRecord]] = {FILES: files}
    if BLOOM_FILTERS in declared:
        bloom_type = data_config.props.get(BLOOM_TYPE_PROPERTY, DEFAULT_BLOOM_TYPE)
        out[BLOOM_FILTERS] = [
            _bloom_record(data_storage, p, name, instant_time, bloom_type)
            for p, files in sorted(new.items())
            for name in sorted(files) if BaseFileName.parse(name) is not None
        ]
    columns = column_stats_columns(data_storage, data_config.props) or ()
    deletes_due = operation == LOG_COMPACT and RECORD_INDEX in declared
    logs = _log_stats(data_storage, new, columns, version) if COLUMN_STATS in declared or deletes_due else {}
    ranges = {p: _file_ranges(data_storage, p, sorted(files), columns, version, logs)
              for p, files in sorted(new.items())} if COLUMN_STATS in declared else {}
    if COLUMN_STATS in declared:
        out[COLUMN_STATS] = [r for p, rs in ranges.items() for r in column_stats_records(p, rs, version)]
    if PARTITION_STATS in declared:
        if COLUMN_STATS not in declared:  # Hudi: checkState(COLUMN_STATS.isMetadataPartitionAvailable)
            raise UnsupportedTableError(
                f"{data_storage.base_uri}: MDT partition partition_stats without column_stats "
                "(nothing was changed)"
            )
        mdt = MetadataTable.open(data_storage, data_config, Timeline.load(data_storage, data_config))
        assert mdt is not None
        latest = _latest_file_names(data_storage, data_config, ranges)
        stored = _stored_ranges(mdt, columns, {p: latest[p] - set(new[p]) for p in ranges})
        # the writer schema's column types (files may disagree: hoodie.metadata.range_types)
        types = column_value_types((commit_metadata.get("extraMetadata") or {}).get("schema"),
                                   meta_fields=data_config.populate_meta_fields)
        stats: list[MetadataRecord] = []
        for partition, partition_ranges in ranges.items():
            # the commit's files first, then the stored ones (Hudi's order; the merge keeps the first
            # range's value type, which a stored all-null column of table version 8 does not know)
            typed = schema_typed_ranges([*partition_ranges, *stored[partition]], types, version, partition)
            stats.extend(partition_stats_records(partition, typed, version))
        out[PARTITION_STATS] = stats
    if record_index:
        if RECORD_INDEX not in declared:
            raise UnsupportedTableError(f"{data_storage.base_uri}: record index records, no record_index")
        out[RECORD_INDEX] = list(record_index)
    if deletes_due:
        out[RECORD_INDEX] = [*out.get(RECORD_INDEX, ()),
                             *_log_compaction_deletes(data_storage, data_config, commit_metadata, logs)]
    return {k: v for k, v in out.items() if v or k == FILES}



def write_commit_to_metadata_table(
    data_storage: Storage,
    data_config: TableConfig,
    lock: TableLock,
    instant_time: str,
    commit_metadata: Mapping[str, Any],
    *,
    time_settings: TimeSettings | None = None,
    record_index: Sequence[MetadataRecord] = (),
    runner: OperationRunner = run_in_process,
    sharded: Mapping[str, ShardedRecords] | None = None,
) -> Instant | None:
    """Write and complete the MDT delta commit of data commit ``instant_time`` (the caller holds
    ``lock`` and completes the data instant right after); None for a table without an MDT.
    ``runner``: who runs the operations of an MDT compaction the upkeep runs first and those of
    the ``sharded`` MDT partitions (``MetadataWriter.write_deltacommit``) (``hoodie.tasks``)."""
    if metadata_table_in_use(data_storage, data_config) is None:
        return None
    records = commit_mdt_records(data_storage, data_config, instant_time, commit_metadata,
                                 record_index=record_index)
    writer = MetadataWriter(data_storage, data_config, lock, time_settings=time_settings, runner=runner)
    done = writer.write_deltacommit(instant_time, records, after_log=lambda: crash_point("mdt-log-written"),
                                    sharded=sharded)
    crash_point("mdt-done")
    return done
