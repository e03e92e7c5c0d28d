"""Column statistics of parquet base files for the MDT ``column_stats`` and ``partition_stats``.

This module owns how Hudi turns a parquet footer into ``HoodieMetadataColumnStats``
(``ParquetUtils.readColumnStatsFromMetadata``, ``HoodieColumnRangeMetadata``, ``ValueType``):

- per indexed column, over all row groups: min of the chunk minimums, max of the maximums
  (statistics of the physical values, as parquet stores them), ``nullCount`` = sum of null
  counts, ``valueCount`` = sum of the chunks' ``num_values`` (nulls included), ``totalSize`` /
  ``totalUncompressedSize`` = sums of the chunks' compressed / uncompressed sizes;
- a file without row groups (every row deleted) gets no records at all;
- the indexed columns are the ``sourceFields`` of the ``column_stats`` index definition
  (``.hoodie/.index_defs/index.json``); columns missing from a file are skipped;
- table version 9 ("V2" value types) wraps min/max by the column's parquet logical type and
  records ``valueType`` = (ordinal of Hudi's ``ValueType``, extra info): strings and UUIDs as
  StringWrapper, decimals as BytesWrapper of the unscaled value's minimal two's-complement bytes
  (Java ``BigInteger.toByteArray``) with "precision,scale", dates and millisecond times as
  IntWrapper, timestamps and microsecond times as LongWrapper, unannotated types as their
  primitive wrapper (binary and fixed as BytesWrapper). Other logical types (INT(8/16/unsigned),
  ENUM, JSON, BSON, INTERVAL) make Hudi's parquet adapter throw; they are refused here too;
- table version 8 ("V1") has no ``valueType``; only unannotated primitives and strings are
  written (their wrappers are the same in both versions); other types are refused because their
  V1 encoding could not be checked against a Hudi-written table;
- partition stats (type 6): per column the same aggregation over the given files of one
  partition, ``fileName`` = partition path, ``isTightBound`` true.

The files of one partition need not agree on a column's type; ``hoodie.metadata.range_types``
gives their ranges the writer schema's type before they are merged here (Hudi's
``FileFormatUtils.getColumnRangeInPartition``); ``partition_ranges`` merges ranges of one type.

The ranges of a log file (no footer) come from ``hoodie.metadata.log_stats`` in the same model.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import pyarrow.parquet as pq

from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.metadata.encode import column_stats_key, empty_record, partition_stats_key
from hoodied.hoodie.metadata.records import RecordType, partition_to_key
from hoodied.hoodie.storage import Storage

__all__ = [
    "INDEX_DEFS_PROPERTY",
    "V1_TYPES",
    "ColumnRange",
    "ValueType",
    "column_ranges",
    "column_stats_columns",
    "column_stats_records",
    "index_definitions",
    "java_bytes",
    "partition_ranges",
    "partition_stats_records",
    "read_parquet_metadata",
]

_WRAPPER_NS = "org.apache.hudi.avro.model."
INDEX_DEFS_PROPERTY = "hoodie.table.index.defs.path"


class ValueType(IntEnum):
    """Hudi's ``org.apache.hudi.stats.ValueType``; the ordinal is what is stored."""

    V1 = 0
    NULL = 1
    BOOLEAN = 2
    INT = 3
    LONG = 4
    FLOAT = 5
    DOUBLE = 6
    STRING = 7
    BYTES = 8
    FIXED = 9
    DECIMAL = 10
    UUID = 11
    DATE = 12
    TIME_MILLIS = 13
    TIME_MICROS = 14
    TIMESTAMP_MILLIS = 15
    TIMESTAMP_MICROS = 16
    TIMESTAMP_NANOS = 17
    LOCAL_TIMESTAMP_MILLIS = 18
    LOCAL_TIMESTAMP_MICROS = 19
    LOCAL_TIMESTAMP_NANOS = 20


_WRAPPER = {
    ValueType.BOOLEAN: "BooleanWrapper",
    ValueType.INT: "IntWrapper",
    ValueType.LONG: "LongWrapper",
    ValueType.FLOAT: "FloatWrapper",
    ValueType.DOUBLE: "DoubleWrapper",
    ValueType.STRING: "StringWrapper",
    ValueType.BYTES: "BytesWrapper",
    ValueType.FIXED: "BytesWrapper",
    ValueType.DECIMAL: "BytesWrapper",
    ValueType.UUID: "StringWrapper",
    ValueType.DATE: "IntWrapper",
    ValueType.TIME_MILLIS: "IntWrapper",
    ValueType.TIME_MICROS: "LongWrapper",
    **{t: "LongWrapper" for t in ValueType if "TIMESTAMP" in t.name},
}
_PLAIN = {
    "BOOLEAN": ValueType.BOOLEAN,
    "INT32": ValueType.INT,
    "INT64": ValueType.LONG,
    "FLOAT": ValueType.FLOAT,
    "DOUBLE": ValueType.DOUBLE,
    "BYTE_ARRAY": ValueType.BYTES,
    "FIXED_LEN_BYTE_ARRAY": ValueType.FIXED,
}
_TIME_UNITS = {"milliseconds": "MILLIS", "microseconds": "MICROS", "nanoseconds": "NANOS"}
#: Types whose V1 (table version 8) wrapper is the V2 one: the plain Java value wrapped by its
#: primitive wrapper (strings, longs and doubles are in the v8 fixture).
V1_TYPES = frozenset({ValueType.BOOLEAN, ValueType.INT, ValueType.LONG, ValueType.FLOAT,
                       ValueType.DOUBLE, ValueType.STRING, ValueType.BYTES})  # fmt: skip


@dataclass(frozen=True, slots=True)
class ColumnRange:
    """``HoodieColumnRangeMetadata``: the statistics of one column in one file (or partition).

    ``min_value`` / ``max_value`` are the stored primitives (str, int, float, bool, bytes) or
    None when the column holds only nulls.
    """

    file_name: str
    column: str
    value_type: ValueType
    type_info: str | None
    min_value: Any
    max_value: Any
    null_count: int
    value_count: int
    total_size: int
    total_uncompressed_size: int


def java_bytes(unscaled: int) -> bytes:
    """``BigInteger.toByteArray``: minimal big-endian two's complement, sign bit included."""
    bits = (unscaled if unscaled >= 0 else ~unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


def _order_key(vtype: ValueType, value: Any) -> Any:
    """How Java compares two values of a column (``Comparable.compareTo`` of the internal type)."""
    if vtype in (ValueType.STRING, ValueType.UUID):
        return value.encode("utf-16-be")  # String.compareTo: UTF-16 code units
    if vtype is ValueType.DECIMAL:
        return int.from_bytes(value, "big", signed=True)
    if vtype in (ValueType.BYTES, ValueType.FIXED):
        return bytes(b ^ 0x80 for b in value)  # ByteBuffer.compareTo: signed bytes
    return value


def _value_type(col: Any, where: str) -> tuple[ValueType, str | None]:
    """(ValueType, additional info) of a parquet leaf column (``ValueType.fromParquetPrimitiveType``)."""
    logical = json.loads(col.logical_type.to_json())
    kind = logical.get("Type", "None")
    if kind == "None":
        if col.physical_type not in _PLAIN:
            raise UnsupportedTableError(
                f"{where}: column {col.name} of parquet type {col.physical_type} has no MDT column statistics"
            )
        return _PLAIN[col.physical_type], None
    if kind == "String":
        return ValueType.STRING, None
    if kind == "Decimal":
        return ValueType.DECIMAL, f"{col.precision},{col.scale}"
    if kind == "Date":
        return ValueType.DATE, None
    if kind == "UUID":
        return ValueType.UUID, None
    if kind in ("Time", "Timestamp"):
        unit = _TIME_UNITS.get(logical.get("timeUnit", ""))
        if kind == "Time" and unit in ("MILLIS", "MICROS"):
            return ValueType[f"TIME_{unit}"], None
        if kind == "Timestamp" and unit:
            local = "" if logical.get("isAdjustedToUTC") else "LOCAL_"
            return ValueType[f"{local}TIMESTAMP_{unit}"], None
    raise UnsupportedTableError(
        f"{where}: column {col.name} has parquet logical type {kind}, unsupported by Hudi's column stats"
    )


def _primitive(vtype: ValueType, raw: Any) -> Any:
    """The stored primitive of a parquet statistic (``min_raw`` / ``max_raw``)."""
    if raw is None:
        return None
    if vtype is ValueType.STRING:
        return bytes(raw).decode("utf-8")
    if vtype is ValueType.UUID:
        return str(uuid.UUID(bytes=bytes(raw)))
    if vtype is ValueType.DECIMAL:
        unscaled = raw if isinstance(raw, int) else int.from_bytes(bytes(raw), "big", signed=True)
        return java_bytes(unscaled)
    if vtype in (ValueType.BYTES, ValueType.FIXED):
        return bytes(raw)
    if vtype is ValueType.BOOLEAN:
        return bool(raw)
    if vtype in (ValueType.FLOAT, ValueType.DOUBLE):
        return float(raw)
    return int(raw)


def _float_bounds(low: float, high: float) -> tuple[float | None, float | None]:
    """Float statistics as parquet-mr hands them to Hudi (PARQUET-1222): NaN bounds are dropped,
    a zero minimum reads as -0.0 and a zero maximum as +0.0."""
    if math.isnan(low) or math.isnan(high):
        return None, None
    return (-0.0 if low == 0.0 else low), (0.0 if high == 0.0 else high)


def _merge(a: ColumnRange, b: ColumnRange, where: str = "") -> ColumnRange:
    """``HoodieColumnRangeMetadata.merge``: min of mins, max of maxes (nulls ignored), sums.

    A range of value type NULL (a delete-only log file, or an all-null stored column) takes the
    other range's type: Hudi's partition stats of a partition with such a file keep the
    column's real type (v9 fixture, delete-only delta commit 20260307162606034). Two other
    types are refused, as Hudi refuses them ("Value types should be the same"); the caller
    converts them to the writer schema's type first (``partition_ranges``).
    """
    if a.value_type is ValueType.NULL and b.value_type is not ValueType.NULL:
        a = replace(a, value_type=b.value_type, type_info=b.type_info)
    elif b.value_type is not ValueType.NULL and (a.value_type, a.type_info) != (b.value_type, b.type_info):
        raise UnsupportedTableError(
            f"{where or a.file_name}: column {a.column} has {a.value_type.name} statistics in {a.file_name} "
            f"and {b.value_type.name} in {b.file_name}, and no writer schema says which type they "
            "merge to (nothing was written)"
        )

    def pick(x: Any, y: Any, smaller: bool) -> Any:
        if x is None or y is None:
            return y if x is None else x
        kx, ky = _order_key(a.value_type, x), _order_key(a.value_type, y)
        return x if (kx <= ky) == smaller else y

    return replace(
        a,
        min_value=pick(a.min_value, b.min_value, True),
        max_value=pick(a.max_value, b.max_value, False),
        null_count=a.null_count + b.null_count,
        value_count=a.value_count + b.value_count,
        total_size=a.total_size + b.total_size,
        total_uncompressed_size=a.total_uncompressed_size + b.total_uncompressed_size,
    )


def column_ranges(
    metadata: pq.FileMetaData, file_name: str, columns: Sequence[str], table_version: int
) -> list[ColumnRange]:
    """The statistics of ``columns`` in one parquet file (given its footer), in ``columns`` order."""
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    out = []
    for name in columns:
        index = leaves.get(name)
        if index is None:
            if any(p.startswith(name + ".") for p in leaves):
                raise UnsupportedTableError(
                    f"{file_name}: column {name} is nested; hoodied writes stats of top-level columns only"
                )
            continue  # not in this file (added to the schema later): Hudi writes nothing for it
        col = metadata.schema.column(index)
        vtype, info = _value_type(col, file_name)
        if table_version < 9 and vtype not in V1_TYPES:
            raise UnsupportedTableError(
                f"{file_name}: column stats of {vtype.name} column {name} are not supported for table "
                "version 8 (hoodied writes them for table version 9)"
            )
        merged: ColumnRange | None = None
        for rg in range(metadata.num_row_groups):
            chunk = metadata.row_group(rg).column(index)
            stats = chunk.statistics
            has = stats is not None and stats.has_min_max
            if stats is not None and not stats.has_null_count:
                raise HoodieFormatError(f"{file_name}: column {name} has statistics without a null count")
            low, high = (
                (_primitive(vtype, stats.min_raw), _primitive(vtype, stats.max_raw)) if has else (None, None)
            )
            if vtype in (ValueType.FLOAT, ValueType.DOUBLE) and low is not None and high is not None:
                low, high = _float_bounds(low, high)
            piece = ColumnRange(
                file_name,
                name,
                vtype,
                info,
                low,
                high,
                stats.null_count if stats is not None else 0,
                chunk.num_values,
                chunk.total_compressed_size,
                chunk.total_uncompressed_size,
            )
            merged = piece if merged is None else _merge(merged, piece)
        if merged is not None:  # a file without row groups (all rows deleted) gets no stats at all
            out.append(merged)
    return out


def read_parquet_metadata(storage: Storage, path: str) -> pq.FileMetaData:
    """The footer of a parquet file (only the footer is read)."""
    try:
        with storage.open(path) as f:
            return pq.ParquetFile(f).metadata
    except (OSError, ValueError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise HoodieFormatError(f"{path}: not a readable parquet file ({exc})") from None


def _wrap(vtype: ValueType, value: Any) -> tuple[str, dict[str, Any]] | None:
    if value is None:
        return None
    return _WRAPPER_NS + _WRAPPER[vtype], {"value": value}


def _stats_payload(r: ColumnRange, file_name: str, table_version: int, *, tight: bool) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "fileName": file_name,
        "columnName": r.column,
        "minValue": _wrap(r.value_type, r.min_value),
        "maxValue": _wrap(r.value_type, r.max_value),
        "valueCount": r.value_count,
        "nullCount": r.null_count,
        "totalSize": r.total_size,
        "totalUncompressedSize": r.total_uncompressed_size,
        "isDeleted": False,
        "isTightBound": tight,
    }
    if table_version >= 9:
        payload["valueType"] = {"typeOrdinal": int(r.value_type), "additionalInfo": r.type_info}
    return payload


def column_stats_records(
    partition: str, ranges: Iterable[ColumnRange], table_version: int
) -> list[tuple[str, dict[str, Any]]]:
    """Type 3 records (``column_stats`` partition) for the ranges of one or more files of a partition."""
    out = []
    for r in ranges:
        key = column_stats_key(r.column, partition, r.file_name)
        record = empty_record(key, RecordType.COLUMN_STATS)
        record["ColumnStatsMetadata"] = _stats_payload(r, r.file_name, table_version, tight=False)
        out.append((key, record))
    return out


def partition_ranges(ranges: Iterable[ColumnRange], where: str = "") -> list[ColumnRange]:
    """Per column, the merge of the ranges of all given files (first-seen column order)."""
    merged: dict[str, ColumnRange] = {}
    for r in ranges:
        merged[r.column] = r if r.column not in merged else _merge(merged[r.column], r, where)
    return list(merged.values())


def partition_stats_records(
    partition: str, ranges: Iterable[ColumnRange], table_version: int
) -> list[tuple[str, dict[str, Any]]]:
    """Type 6 records (``partition_stats``): ``ranges`` of the partition's files merged per column
    (of one type per column: ``hoodie.metadata.range_types.schema_typed_ranges`` first)."""
    out = []
    for r in partition_ranges(ranges, partition or "(non-partitioned)"):
        key = partition_stats_key(r.column, partition)
        record = empty_record(key, RecordType.PARTITION_STATS)
        record["ColumnStatsMetadata"] = _stats_payload(
            r, partition_to_key(partition), table_version, tight=True
        )
        out.append((key, record))
    return out


def index_definitions(storage: Storage, props: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The table's index definitions (``hoodie.table.index.defs.path``), by index name; {} if none."""
    path = props.get(INDEX_DEFS_PROPERTY)
    if not path or not storage.exists(path):
        return {}
    try:
        defs = json.loads(storage.read(path)).get("indexDefinitions") or {}
    except (ValueError, AttributeError):
        raise HoodieFormatError(f"{path}: index definitions are not valid JSON") from None
    if not isinstance(defs, dict):
        raise HoodieFormatError(f"{path}: 'indexDefinitions' is not an object")
    return defs


def column_stats_columns(storage: Storage, props: Mapping[str, str]) -> tuple[str, ...] | None:
    """The ``sourceFields`` of the ``column_stats`` index, or None when it is not defined."""
    definition = index_definitions(storage, props).get("column_stats")
    if definition is None:
        return None
    return tuple(str(f) for f in definition.get("sourceFields") or ())
