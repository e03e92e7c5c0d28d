"""What a clean writes to the metadata table, and which tables a clean can keep exact.

A clean at instant T only removes files, so Hudi's MDT delta commit T holds deletions only
(``HoodieTableMetadataUtil.convertMetadataToRecords`` for ``HoodieCleanMetadata``, Hudi 1.x):

- ``files``: one type-2 record per partition of the clean metadata, with every name of the
  partition's ``deletePathPatterns`` as a tombstone (a partition with no names still gets its,
  empty, record);
- ``column_stats``: for every name of ``deletePathPatterns`` (base and log files alike) and every
  indexed column, a column-stats tombstone built from Hudi's stub range: no min/max, counts and
  sizes -1, ``isDeleted`` true; table version 9 records the stub's value type NULL. The indexed
  columns are the ``sourceFields`` of the table's ``column_stats`` index definition (the list Hudi
  registers when it builds the index);
- ``bloom_filters``: for every deleted *base* file a bloom-filter tombstone (type "", timestamp
  T, empty filter, ``isDeleted`` true);
- ``partition_stats``, ``record_index`` and secondary indexes: nothing (a clean removes older
  file versions only; keys and partition ranges are unchanged).

Anything else (expression indexes, unknown partitions, a clean that deletes whole partitions,
an MDT being built, table version 6) is refused by ``require_clean_maintainable`` before
anything is written: a partial MDT update would leave readers silently wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName
from hoodied.hoodie.metadata.colstats import column_stats_columns
from hoodied.hoodie.metadata.encode import (
    BLOOM_FILTERS,
    COLUMN_STATS,
    FILES,
    PARTITION_STATS,
    RECORD_INDEX,
    MetadataRow,
    bloom_filter_key,
    column_stats_key,
    empty_record,
    files_record,
)
from hoodied.hoodie.metadata.reader import metadata_table_in_use
from hoodied.hoodie.metadata.records import RecordType
from hoodied.hoodie.metadata.writer import require_mdt_maintainable
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage

__all__ = [
    "SECONDARY_INDEX_PREFIX",
    "clean_maintained_partitions",
    "clean_records",
    "require_clean_maintainable",
]

SECONDARY_INDEX_PREFIX = "secondary_index_"
#: MDT partitions a clean keeps exact (secondary indexes: every ``secondary_index_*``).
_MAINTAINED = (FILES, COLUMN_STATS, BLOOM_FILTERS, PARTITION_STATS, RECORD_INDEX)
#: ``ValueType.NULL``: the value type of Hudi's stub range in a version-2 column stats index.
_NULL_VALUE_TYPE = 1


def clean_maintained_partitions(config: TableConfig) -> list[str]:
    """The table's declared MDT partitions that a clean keeps exact."""
    declared = [*config.metadata_partitions, *config.metadata_partitions_inflight]
    return [p for p in declared if p in _MAINTAINED or p.startswith(SECONDARY_INDEX_PREFIX)]


def require_clean_maintainable(
    storage: Storage, config: TableConfig, what: str, partitions_to_delete: Sequence[str] = ()
) -> None:
    """Refuse ``what`` when a clean could not keep this table's metadata table exact.

    A table without a metadata table always passes. ``partitions_to_delete``: the plan's
    ``partitionsToBeDeleted`` (Hudi also drops those from the partition list; hoodied does not).
    """
    require_mdt_maintainable(storage, config, what, clean_maintained_partitions(config))
    if partitions_to_delete and metadata_table_in_use(storage, config) is not None:
        raise UnsupportedTableError(
            f"{storage.base_uri}: the clean deletes partition {', '.join(partitions_to_delete)}; "
            f"dropping partitions from the metadata table is not supported, {what} refused "
            "(nothing was changed)"
        )


def _column_stats_tombstone(
    partition: str, file_name: str, column: str, table_version: int
) -> MetadataRow:
    key = column_stats_key(column, partition, file_name)
    payload: dict[str, Any] = {
        "fileName": file_name,
        "columnName": column,
        "minValue": None,
        "maxValue": None,
        "valueCount": -1,
        "nullCount": -1,
        "totalSize": -1,
        "totalUncompressedSize": -1,
        "isDeleted": True,
        "isTightBound": False,
    }
    if table_version >= 9:
        payload["valueType"] = {"typeOrdinal": _NULL_VALUE_TYPE, "additionalInfo": None}
    record = empty_record(key, RecordType.COLUMN_STATS)
    record["ColumnStatsMetadata"] = payload
    return key, record


def _bloom_tombstone(partition: str, file_name: str, instant_time: str) -> MetadataRow:
    key = bloom_filter_key(partition, file_name)
    record = empty_record(key, RecordType.BLOOM_FILTER)
    record["BloomFilterMetadata"] = {
        "type": "",
        "timestamp": instant_time,
        "bloomFilter": b"",
        "isDeleted": True,
    }
    return key, record


def clean_records(
    storage: Storage,
    config: TableConfig,
    instant_time: str,
    deleted: Mapping[str, Iterable[str]],
) -> dict[str, list[MetadataRow]]:
    """The MDT records of clean ``instant_time``, per MDT partition that gets any.

    ``deleted``: partition -> the file names of its ``deletePathPatterns`` (every partition of
    the clean metadata, including those with no names). The caller has passed
    ``require_clean_maintainable``.
    """
    declared = set(config.metadata_partitions)
    names = {p: sorted(set(v)) for p, v in deleted.items()}
    out: dict[str, list[MetadataRow]] = {FILES: [files_record(p, {}, n) for p, n in sorted(names.items())]}
    if COLUMN_STATS in declared:
        columns = column_stats_columns(storage, config.props) or ()
        out[COLUMN_STATS] = [
            _column_stats_tombstone(p, f, c, config.version)
            for p, files in sorted(names.items()) for f in files for c in columns
        ]
    if BLOOM_FILTERS in declared:
        out[BLOOM_FILTERS] = [
            _bloom_tombstone(p, f, instant_time)
            for p, files in sorted(names.items()) for f in files if BaseFileName.parse(f) is not None
        ]
    return {k: v for k, v in out.items() if v or k == FILES}

