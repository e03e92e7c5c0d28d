"""The records of MDT partitions built by an ``indexing`` instant, as Hudi's initializers write them.

- secondary index (type 7, ``SecondaryIndexMetadata{isDeleted: false}``): key
  ``escape(secondary value) + "$" + escape(record key)`` (``SecondaryIndexKeyUtils``: ``\\``, ``$``
  and NUL are escaped with ``\\``; a null value is one NUL); values are Java's ``toString`` of
  the Avro value (strings, ints, longs, booleans, dates as days, timestamps as the raw long);
  routed by ``|String.hashCode| % n`` of the whole key (index version V1, Hudi 1.0) or of
  ``<escaped secondary key>$`` (V2, Hudi 1.1: one file group per secondary value);
- record index (type 5, ``createRecordIndexUpdate``): key = record key; partition, file id as
  UUID high/low bits + file index (encoding 0), base instant in epoch ms (timeline time zone);
- column stats (type 3) of every listed base file and partition stats (type 6) of the latest
  base files of a partition, from parquet footers (``hoodie.metadata.colstats``). Partition stats
  take each column's type from the table schema before the files' ranges are merged, as Hudi's
  initialization does (``HoodieTableMetadataUtil.convertFilesToPartitionStatsRecords`` resolves
  the schema with ``tryResolveSchemaForTable`` / ``TableSchemaResolver.getTableAvroSchema``, meta
  fields included when populated, and ``collectAndProcessColumnMetadata`` hands it to
  ``FileFormatUtils.getColumnRangeInPartition``): the rules are ``hoodie.metadata.range_types``,
  the same the commit path applies with the commit's writer schema, so files that disagree on a
  column's type (a long in older files, a string in newer ones) merge as Hudi merges them;
- base HFiles: cells sorted and de-duplicated; table version 8 (Hudi 1.0, HBase's writer) sets
  ``_hoodie_file_name`` to the file's own name, sizes the bloom filter with 60000 entries and
  writes creation time 0; version 9 (Hudi 1.1) leaves the name null and uses 10000 entries.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.hfile.writer import encode_base_hfile
from hoodied.hoodie.metadata.colstats import (
    column_ranges,
    column_stats_records,
    partition_stats_records,
    read_parquet_metadata,
)
from hoodied.hoodie.metadata.encode import empty_record, encode_value, file_group_index, metadata_schema_json
from hoodied.hoodie.metadata.merge import with_file_name
from hoodied.hoodie.metadata.range_types import ValueTypes, schema_typed_ranges
from hoodied.hoodie.metadata.records import RecordType
from hoodied.hoodie.storage import Storage

__all__ = [
    "HUDI_10_BLOOM_ENTRIES",
    "base_file_cells",
    "column_stats_cells",
    "encode_index_base_file",
    "escape_key",
    "partition_stats_cells",
    "record_index_file_id",
    "record_index_record",
    "record_index_value",
    "secondary_index_file_group",
    "secondary_index_key",
    "secondary_index_value",
    "secondary_key_strings",
]

SEPARATOR = "$"
ESCAPE = "\\"
NULL_CHAR = "\0"
#: ``hoodie.index.bloom.num_entries`` default: the bloom size of Hudi 1.0's MDT base HFiles.
HUDI_10_BLOOM_ENTRIES = 60_000
_UUID_FILE_ID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-(\d+)")


def record_index_value(partition: str, file_id: str, instant_millis: int, table_version: int) -> bytes:
    """``HoodieMetadataPayload.createRecordIndexUpdate`` with the UUID file id encoding (0), encoded."""
    return encode_value(record_index_record("", partition, file_id, instant_millis), table_version)


def record_index_record(key: str, partition: str, file_id: str, instant_millis: int) -> dict[str, Any]:
    """The ``record_index`` record of ``key`` (``createRecordIndexUpdate``, UUID file id encoding 0)."""
    m = _UUID_FILE_ID.fullmatch(file_id)
    if m is None:
        raise UnsupportedTableError(
            f"{partition}/{file_id}: file id is not <UUID>-<index>; its record index entry needs the raw "
            "file id encoding, which hoodied does not write")
    bits = uuid.UUID(m.group(1)).int
    record = empty_record(key, RecordType.RECORD_INDEX)
    record["recordIndexMetadata"] = {
        "partitionName": partition,
        "fileIdHighBits": _signed64(bits >> 64),
        "fileIdLowBits": _signed64(bits & (2**64 - 1)),
        "fileIndex": int(m.group(2)),
        "fileId": "",
        "instantTime": instant_millis,
        "fileIdEncoding": 0,
        "position": None,
    }
    return record


def record_index_file_id(info: dict[str, Any]) -> str:
    """The data file id a ``recordIndexMetadata`` payload points to (both file id encodings)."""
    if info.get("fileIdEncoding") == 1:
        return str(info.get("fileId"))
    bits = ((info["fileIdHighBits"] & (2**64 - 1)) << 64) | (info["fileIdLowBits"] & (2**64 - 1))
    return f"{uuid.UUID(int=bits)}-{info['fileIndex']}"


def _signed64(value: int) -> int:
    return value - 2**64 if value >= 2**63 else value


def partition_stats_cells(
    storage: Storage,
    partition: str,
    file_names: Iterable[str],
    columns: tuple[str, ...],
    table_version: int,
    column_types: ValueTypes | None = None,
) -> list[tuple[str, bytes]]:
    """The ``partition_stats`` cells of one data partition: the stats of its latest base files merged,
    each column first given its type in ``column_types`` (``range_types.column_value_types`` of the
    table schema; None or {}: the footers' types, which must then agree)."""
    ranges = []
    for name in file_names:
        path = f"{partition}/{name}" if partition else name
        ranges.extend(column_ranges(read_parquet_metadata(storage, path), name, columns, table_version))
    typed = schema_typed_ranges(ranges, column_types or {}, table_version, partition)
    return [(key, encode_value(record, table_version))
            for key, record in partition_stats_records(partition, typed, table_version)]


def column_stats_cells(
    storage: Storage, partition: str, file_name: str, columns: tuple[str, ...], table_version: int
) -> list[tuple[str, bytes]]:
    """The ``column_stats`` cells (key, encoded value) of one parquet base file."""
    path = f"{partition}/{file_name}" if partition else file_name
    ranges = column_ranges(read_parquet_metadata(storage, path), file_name, columns, table_version)
    return [(key, encode_value(record, table_version))
            for key, record in column_stats_records(partition, ranges, table_version)]


def escape_key(text: str | None) -> str:
    """``SecondaryIndexKeyUtils.escapeSpecialChars``."""
    if text is None:
        return NULL_CHAR
    out = []
    for c in text:
        if c in (ESCAPE, SEPARATOR, NULL_CHAR):
            out.append(ESCAPE)
        out.append(c)
    return "".join(out)


def secondary_index_key(secondary: str | None, record_key: str) -> str:
    return escape_key(secondary) + SEPARATOR + escape_key(record_key)


def _separator_position(key: str) -> int:
    escaped = False
    for i, c in enumerate(key):
        if c == ESCAPE and not escaped:
            escaped = True
        elif c == SEPARATOR and not escaped:
            return i
        else:
            escaped = False
    raise ValueError(f"secondary index key {key!r} has no separator")


def secondary_index_file_group(key: str, num_file_groups: int, index_version: str) -> int:
    """The file group of a secondary index record (``getSecondaryKeyToFileGroupMappingFunction``).

    Index version V1 hashes the whole key; V2 hashes ``<escaped secondary key>$`` only, so that
    every record of one secondary value lives in one file group.
    """
    if index_version.upper() != "V1":
        key = key[: _separator_position(key) + 1]
    return file_group_index(key, num_file_groups)


def secondary_key_strings(column: pa.Array | pa.ChunkedArray, where: str) -> list[str | None]:
    """Java ``toString`` of each value of the secondary key column (None for null)."""
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return column.to_pylist()
    if pa.types.is_integer(t):
        return [None if v is None else str(v) for v in column.to_pylist()]
    if pa.types.is_boolean(t):
        return [None if v is None else ("true" if v else "false") for v in column.to_pylist()]
    if pa.types.is_date32(t):
        return [None if v is None else str(v) for v in pc.cast(column, pa.int32()).to_pylist()]
    if pa.types.is_timestamp(t):
        return [None if v is None else str(v) for v in pc.cast(column, pa.int64()).to_pylist()]
    raise UnsupportedTableError(f"{where}: secondary key values of type {t} are not supported")


def secondary_index_value(table_version: int) -> bytes:
    """The value of every secondary index record: ``SecondaryIndexMetadata{isDeleted: false}``."""
    record = empty_record("", RecordType.SECONDARY_INDEX)
    record["SecondaryIndexMetadata"] = {"isDeleted": False}
    return encode_value(record, table_version)


def base_file_cells(
    rows: Iterable[tuple[str, bytes | None]], table_version: int, file_name: str, *, unique: bool = False
) -> list[tuple[str, bytes]]:
    """Sorted, de-duplicated cells of one base HFile; a ``None`` value is a secondary index record.

    Table version 8 (Hudi 1.0) sets ``_hoodie_file_name`` to the file's own name; 9 leaves it null.
    ``unique``: a key seen twice is an error (a record key in two file groups: no global record index).
    """
    secondary = secondary_index_value(table_version)
    cells: list[tuple[str, bytes]] = []
    last = None
    for key, value in sorted(rows, key=lambda r: r[0]):
        if key == last:
            if unique:
                raise HoodieFormatError(f"{file_name}: record key {key!r} is in more than one file group; "
                                        "a global record index cannot be built")
            continue
        value = secondary if value is None else value
        cells.append((key, with_file_name(value, file_name) if table_version < 9 else value))
        last = key
    return cells


def encode_index_base_file(cells: list[tuple[str, bytes]], table_version: int) -> bytes:
    """The base HFile bytes. Hudi 1.0 (table version 8) sizes the ``bloomFilter`` meta block with
    ``hoodie.index.bloom.num_entries`` (60000) and writes creation time 0 (HBase's writer); 1.1
    uses 10000 entries (``hoodie.metadata.encode``'s default)."""
    if table_version < 9:
        return encode_base_hfile(cells, metadata_schema_json(table_version),
                                 bloom_num_entries=HUDI_10_BLOOM_ENTRIES, create_time_ms=0)
    return encode_base_hfile(cells, metadata_schema_json(table_version))
