"""What the MDT records of a new log file are made of: its column ranges and its deleted keys.

A log file has no footer statistics. Hudi's append handle computes them from the records it
appends (``HoodieAppendHandle.processAppendResult`` ->
``HoodieTableMetadataUtil.collectColumnRangeMetadata``), and ``column_stats`` /
``partition_stats`` use those ranges. This module recomputes them from the written log file
(``log_file_stats``), by Hudi's rules:

- the columns are the ``column_stats`` index's source fields present in the block's schema
  (meta fields included when listed); each gets one range even when the file holds no data
  record (a delete-only file: no min/max, counts 0, value type NULL in table version 9);
- only data records count (delete-block keys do not): ``valueCount`` = records,
  ``nullCount`` = records whose value is null, ``totalSize`` and ``totalUncompressedSize`` 0
  ("not comparable with parquet's sizes");
- min/max compare as Avro's ``GenericData.compare`` does over the field's schema: strings by
  their UTF-8 bytes, ``bytes`` as signed bytes, ``fixed`` as unsigned bytes, numbers,
  dates and timestamps by value (floats with Java's total order: -0.0 < 0.0 < NaN);
- the value type (table version 9) comes from the field's Avro schema: strings (and UUIDs),
  ints, longs, floats, doubles, booleans, bytes, fixed, decimals (BytesWrapper of the
  unscaled value's minimal two's complement, "precision,scale"), dates, times and
  timestamps, stored as in ``hoodie.metadata.colstats``. Table version 8 writes the primitive
  types and strings only, as for base files.

Cases whose Hudi encoding could not be checked against Hudi-written data are refused
(``UnsupportedTableError``, raised before any MDT record is written): nested, complex or enum
columns, a decimal column holding both negative and non-negative values in one log file
(Hudi's comparison of decimal fixed values is byte-wise or numeric depending on how the record
reached it), and in table version 9 a column whose records are all null (its value type is not
pinned down).

``log_file_stats`` also returns the keys of the file's delete blocks: for a ``LOG_COMPACT``
commit, Hudi 1.0/1.1's ``convertMetadataToRecordIndexRecords`` reads the new log file alone
(its write stat names only it) and writes a record-index delete for every deleted key.
Memory is bounded by one log file's blocks.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.log import BlockType, delete_block_records, read_log_blocks
from hoodied.hoodie.log.blocks import avro_block_to_arrow, parquet_block_table
from hoodied.hoodie.metadata.colstats import V1_TYPES, ColumnRange, ValueType, java_bytes
from hoodied.hoodie.storage import Storage

__all__ = ["LogFileStats", "log_file_stats"]

_PRIMITIVE = {
    "string": ValueType.STRING, "int": ValueType.INT, "long": ValueType.LONG,
    "float": ValueType.FLOAT, "double": ValueType.DOUBLE, "boolean": ValueType.BOOLEAN,
    "bytes": ValueType.BYTES, "fixed": ValueType.FIXED,
}
_LOGICAL = {
    ("string", "uuid"): ValueType.UUID,
    ("int", "date"): ValueType.DATE,
    ("int", "time-millis"): ValueType.TIME_MILLIS,
    ("long", "time-micros"): ValueType.TIME_MICROS,
    ("long", "timestamp-millis"): ValueType.TIMESTAMP_MILLIS,
    ("long", "timestamp-micros"): ValueType.TIMESTAMP_MICROS,
    ("long", "timestamp-nanos"): ValueType.TIMESTAMP_NANOS,
    ("long", "local-timestamp-millis"): ValueType.LOCAL_TIMESTAMP_MILLIS,
    ("long", "local-timestamp-micros"): ValueType.LOCAL_TIMESTAMP_MICROS,
    ("long", "local-timestamp-nanos"): ValueType.LOCAL_TIMESTAMP_NANOS,
}
#: Value types whose order is that of Arrow's ``min_max`` (numbers and UTF-8 byte strings).
_ARROW_ORDER = frozenset({
    ValueType.STRING, ValueType.UUID, ValueType.INT, ValueType.LONG, ValueType.BOOLEAN,
    ValueType.DATE, ValueType.TIME_MILLIS, ValueType.TIME_MICROS,
    *(t for t in ValueType if "TIMESTAMP" in t.name),
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class LogFileStats:
    """The column ranges of one log file's data records and the keys of its delete blocks."""

    ranges: list[ColumnRange]
    deleted_keys: list[str]


@dataclass(slots=True)
class _Acc:
    vtype: ValueType
    info: str | None
    low: Any = None
    high: Any = None
    nulls: int = 0
    values: int = 0


@lru_cache(maxsize=8)
def _fields(schema_json: str) -> dict[str, Any] | None:
    """Top-level fields of an Avro record schema by name (parsed once per distinct schema)."""
    try:
        return {f["name"]: f for f in json.loads(schema_json)["fields"]}
    except (ValueError, KeyError, TypeError):
        return None


def _field_type(schema_json: str, column: str, where: str) -> tuple[ValueType, str | None] | None:
    """(value type, extra info) of a top-level field of an Avro record schema; None if absent."""
    fields = _fields(schema_json)
    if fields is None:
        raise HoodieFormatError(f"{where}: SCHEMA header is not an Avro record schema")
    field = fields.get(column)
    if field is None:
        if "." in column:
            raise UnsupportedTableError(
                f"{where}: column {column} is nested; hoodied writes stats of top-level columns only")
        return None
    branches = field["type"] if isinstance(field["type"], list) else [field["type"]]
    real = [b for b in branches if b != "null"]
    schema = real[0] if len(real) == 1 else None
    kind = schema.get("type") if isinstance(schema, dict) else schema
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if isinstance(schema, dict) and logical == "decimal" and kind in ("bytes", "fixed"):
        return ValueType.DECIMAL, f"{schema['precision']},{schema.get('scale', 0)}"
    if isinstance(kind, str) and isinstance(logical, str) and (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)], None
    if isinstance(kind, str) and kind in _PRIMITIVE:
        return _PRIMITIVE[kind], None
    raise UnsupportedTableError(
        f"{where}: column {column} of Avro type {json.dumps(field['type'])} has no MDT column "
        "statistics hoodied can write")


def _java_float_key(value: float) -> tuple[int, float, int]:
    """``Double.compareTo``: NaN above everything, -0.0 below 0.0."""
    if math.isnan(value):
        return (1, 0.0, 0)
    return (0, value, 0 if struct.pack(">d", value)[0] & 0x80 else 1)


def _stored(vtype: ValueType, value: Any, scale: int) -> Any:
    if vtype is ValueType.DECIMAL:
        return java_bytes(int(Decimal(value).scaleb(scale)))
    if vtype in (ValueType.BYTES, ValueType.FIXED):
        return bytes(value)
    if vtype in (ValueType.FLOAT, ValueType.DOUBLE):
        return float(value)
    return value


def _column_bounds(col: pa.ChunkedArray, vtype: ValueType, info: str | None, where: str) -> tuple[Any, Any]:
    """(min, max) of the non-null values of one column, as stored primitives; (None, None) if none."""
    values = col.drop_null()
    if len(values) == 0:
        return None, None
    if vtype in _ARROW_ORDER:
        if pa.types.is_date32(values.type):
            values = pc.cast(values, pa.int32())
        elif pa.types.is_timestamp(values.type) or pa.types.is_time(values.type):
            values = pc.cast(values, pa.int64() if values.type.bit_width == 64 else pa.int32())
        bounds = pc.min_max(values)
        return bounds["min"].as_py(), bounds["max"].as_py()
    items = values.to_pylist()
    scale = int(info.split(",")[1]) if info else 0
    if vtype is ValueType.DECIMAL:
        if min(items) < 0 <= max(items):
            raise UnsupportedTableError(
                f"{where}: decimal column holds negative and non-negative values; Hudi's ordering of "
                "them in a log file's column stats is not pinned down (the metadata table was not changed)")
        low, high = min(items), max(items)
    elif vtype in (ValueType.FLOAT, ValueType.DOUBLE):
        low, high = min(items, key=_java_float_key), max(items, key=_java_float_key)
    elif vtype is ValueType.BYTES:  # ByteBuffer.compareTo: signed bytes
        low = min(items, key=lambda b: bytes(x ^ 0x80 for x in b))
        high = max(items, key=lambda b: bytes(x ^ 0x80 for x in b))
    else:  # FIXED: unsigned bytes
        low, high = min(items), max(items)
    return _stored(vtype, low, scale), _stored(vtype, high, scale)


def _data_table(block: Any) -> pa.Table:
    if block.block_type is BlockType.AVRO_DATA:
        return avro_block_to_arrow(block)
    return parquet_block_table(block)


def log_file_stats(
    storage: Storage, partition: str, name: str, columns: Sequence[str], table_version: int
) -> LogFileStats:
    """Column ranges (in ``columns`` order) and deleted keys of the log file ``name`` of ``partition``."""
    path = f"{partition}/{name}" if partition else name
    accs: dict[str, _Acc] = {}
    schema_json: str | None = None  # of the last block that has one
    has_data = False
    deleted: list[str] = []
    for block in read_log_blocks(storage, path):
        if block.block_type is BlockType.DELETE:
            deleted.extend(d.record_key for d in delete_block_records(block) if d.record_key is not None)
            schema_json = block.schema_json or schema_json
            continue
        if block.block_type not in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
            raise UnsupportedTableError(
                f"{path}: {block.block_type.name} block in a log file whose MDT statistics hoodied writes")
        schema_json = block.schema_json
        if schema_json is None:
            raise HoodieFormatError(f"{path}: data block without a SCHEMA header")
        has_data = True
        table = _data_table(block)
        for column in columns:
            typed = _field_type(schema_json, column, path)
            if typed is None:
                continue  # not in this file's schema: Hudi indexes the write schema's fields only
            acc = accs.setdefault(column, _Acc(*typed))
            col = table.column(column)
            low, high = _column_bounds(col, acc.vtype, acc.info, f"{path}: column {column}")
            acc.low = _pick(acc, acc.low, low, smaller=True)
            acc.high = _pick(acc, acc.high, high, smaller=False)
            acc.nulls += col.null_count
            acc.values += len(col)
    if not has_data and schema_json is not None:
        # a delete-only file: the indexed columns are still those of the write schema
        columns = [c for c in columns if _field_type(schema_json, c, path) is not None]
    return LogFileStats(_ranges(name, columns, accs, has_data, table_version, path), deleted)


def _pick(acc: _Acc, old: Any, new: Any, *, smaller: bool) -> Any:
    """The smaller (larger) of two stored bounds of several data blocks of one file."""
    if old is None or new is None:
        return new if old is None else old
    if acc.vtype is ValueType.DECIMAL:
        key: Any = lambda b: int.from_bytes(b, "big", signed=True)  # noqa: E731
    elif acc.vtype in (ValueType.FLOAT, ValueType.DOUBLE):
        key = _java_float_key
    elif acc.vtype is ValueType.BYTES:
        key = lambda b: bytes(x ^ 0x80 for x in b)  # noqa: E731
    elif acc.vtype in (ValueType.STRING, ValueType.UUID):
        key = lambda s: s.encode("utf-8")  # noqa: E731
    else:
        key = lambda v: v  # noqa: E731
    return old if (key(old) <= key(new)) == smaller else new


def _ranges(
    name: str, columns: Sequence[str], accs: Mapping[str, _Acc], has_data: bool, version: int, path: str
) -> list[ColumnRange]:
    out = []
    for column in columns:
        acc = accs.get(column)
        if acc is None:
            if has_data:
                continue  # the column is not in the write schema
            # a delete-only file: Hudi still writes every indexed column, with nothing in it
            out.append(ColumnRange(name, column, ValueType.NULL, None, None, None, 0, 0, 0, 0))
            continue
        if version < 9 and acc.vtype not in V1_TYPES:
            raise UnsupportedTableError(
                f"{path}: column stats of {acc.vtype.name} column {column} are not supported for table "
                "version 8 (hoodied writes them for table version 9)")
        if version >= 9 and acc.values and acc.low is None:
            raise UnsupportedTableError(
                f"{path}: column {column} holds only nulls; the value type Hudi records for it in a log "
                "file's column stats is not pinned down (the metadata table was not changed)")
        vtype, info = (acc.vtype, acc.info) if acc.low is not None else (ValueType.NULL, None)
        out.append(ColumnRange(name, column, vtype, info, acc.low, acc.high, acc.nulls, acc.values, 0, 0))
    return out
