"""Contents of Hudi log blocks: decoding and encoding per block type.

* AVRO_DATA (3): int32 content version (3), int32 record count, then per record an int32
  length and the record in Avro binary, written with the block's SCHEMA header.
  ``avro_block_to_arrow`` decodes a block into a pyarrow Table (vectorised, see
  ``hoodie.avro.arrow``); ``avro_block_records`` yields plain dicts through fastavro.
* PARQUET_DATA (5): the content is a complete parquet file.
* DELETE (1): int32 version, int32 payload length, payload. Version 3 is the Avro binary of
  ``HoodieDeleteRecordList``; versions 1 and 2 are Java/Kryo serialisations that hoodied
  cannot read (``UnsupportedTableError``).
* COMMAND (0): no content; the header says which instant's blocks to roll back (v6).
* HFILE_DATA (4, metadata table): the content is an HFile, parsed by ``hoodie.hfile.reader``.
"""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any, cast

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hoodied.hoodie.avro.arrow import AvroDecodeError, avro_schema_to_arrow, decode_avro_records
from hoodied.hoodie.avro.container import schema_json as project_schema_json
from hoodied.hoodie.avro.encode import encode_avro_records
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.log.frame import BlockType, CommandType, LogBlock

__all__ = [
    "AVRO_DATA_BLOCK_VERSION",
    "DELETE_BLOCK_VERSION",
    "DeleteRecord",
    "avro_block_records",
    "avro_block_schema",
    "avro_block_to_arrow",
    "delete_block_records",
    "encode_avro_data_block",
    "encode_delete_block",
    "encode_parquet_data_block",
    "hfile_block_content",
    "is_rollback_command",
    "parquet_block_table",
]

AVRO_DATA_BLOCK_VERSION = 3
DELETE_BLOCK_VERSION = 3

_INT = struct.Struct(">i")
_TWO_INTS = struct.Struct(">ii")
_MODEL = "org.apache.hudi.avro.model."
_EPOCH = dt.date(1970, 1, 1)
_UTC_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _expect(block: LogBlock, block_type: BlockType) -> bytes:
    if block.block_type != block_type:
        raise ValueError(f"{block.where}: is a {block.block_type.name} block, not {block_type.name}")
    return block.content()


def _writer_schema(block: LogBlock) -> str:
    text = block.schema_json
    if not text:
        raise HoodieFormatError(f"{block.where}: data block has no SCHEMA header")
    return text


# ---------------------------------------------------------------------------------------
# Avro data blocks


def _record_spans(content: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Start and end offsets of every record of an Avro data block's content."""
    if len(content) < 8:
        raise HoodieFormatError(f"{where}: Avro data block content is {len(content)} bytes, too short")
    version, count = _TWO_INTS.unpack_from(content, 0)
    if not 1 <= version <= AVRO_DATA_BLOCK_VERSION:
        raise UnsupportedTableError(f"{where}: Avro data block version {version} is not supported")
    if count < 0 or count * 4 > len(content) - 8:
        raise HoodieFormatError(f"{where}: Avro data block declares {count} records in {len(content)} bytes")
    # Sequential by nature: each record's offset depends on every length before it. The lengths
    # are read in a bare loop first, checked with numpy after it; a block that fails the check
    # is walked again below, with the checks that name the bad record.
    unpack = _INT.unpack_from
    size = len(content)
    lengths = [0] * count
    pos = 8
    try:
        for i in range(count):
            (length,) = unpack(content, pos)
            lengths[i] = length
            pos += 4 + length
    except struct.error:
        pos = -1
    if pos == size:
        lens = np.array(lengths, dtype=np.int64)
        if count == 0 or lens.min() >= 0:  # then every offset lies between 8 and ``size``
            record_ends = 8 + np.cumsum(lens + 4)
            return record_ends - lens, record_ends
    starts = [0] * count
    ends = [0] * count
    pos = 8
    for i in range(count):
        if pos + 4 > size:
            raise HoodieFormatError(f"{where}: Avro data block is truncated at record {i} of {count}")
        (length,) = unpack(content, pos)
        pos += 4
        if length < 0 or pos + length > size:
            raise HoodieFormatError(f"{where}: Avro record {i} declares {length} bytes, {size - pos} left")
        starts[i] = pos
        pos += length
        ends[i] = pos
    if pos != size:
        raise HoodieFormatError(f"{where}: {size - pos} bytes follow the last of {count} Avro records")
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


def avro_block_schema(block: LogBlock) -> pa.Schema:
    """The Arrow schema of a data block's records (from its SCHEMA header)."""
    try:
        return avro_schema_to_arrow(_writer_schema(block))
    except HoodieFormatError as exc:
        raise HoodieFormatError(f"{block.where}: SCHEMA header: {exc}") from None


def avro_block_to_arrow(block: LogBlock) -> pa.Table:
    """All records of an AVRO_DATA block as one Table (schema: ``avro_block_schema``)."""
    content = _expect(block, BlockType.AVRO_DATA)
    text = _writer_schema(block)
    avro_block_schema(block)  # schema errors name the header rather than a record
    starts, ends = _record_spans(content, block.where)
    try:
        return decode_avro_records(content, starts, ends, text)
    except AvroDecodeError as exc:
        raise HoodieFormatError(f"{block.where}: corrupt Avro data block: {exc}") from None


def avro_block_records(block: LogBlock) -> Iterator[dict[str, Any]]:
    """The records of an AVRO_DATA block as dicts (fastavro; logical types as Python objects)."""
    content = _expect(block, BlockType.AVRO_DATA)
    try:
        schema = fastavro.parse_schema(json.loads(_writer_schema(block)))
    except Exception as exc:  # JSON or schema errors of several types
        raise HoodieFormatError(f"{block.where}: invalid SCHEMA header ({exc})") from None
    starts, ends = _record_spans(content, block.where)
    view = memoryview(content)
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        stream = io.BytesIO(view[s:e])
        try:
            record = fastavro.schemaless_reader(stream, schema, None)
        except Exception as exc:  # fastavro raises many types on garbage
            problem = type(exc).__name__
            raise HoodieFormatError(f"{block.where}: corrupt Avro record {i} ({problem})") from None
        if stream.tell() != e - s:
            raise HoodieFormatError(f"{block.where}: Avro record {i} does not match the block's schema")
        yield record  # type: ignore[misc]


def encode_avro_data_block(
    records: pa.Table | pa.RecordBatch | Iterable[Mapping[str, Any]], schema_json: str
) -> bytes:
    """AVRO_DATA content (version 3) for ``records`` written with ``schema_json``.

    An Arrow table or batch is encoded column-wise (fast, ``hoodie.avro.encode``); dicts go
    through fastavro one by one.
    """
    if isinstance(records, (pa.Table, pa.RecordBatch)):
        offsets, data = encode_avro_records(records, schema_json, length_prefix=True)
        return _TWO_INTS.pack(AVRO_DATA_BLOCK_VERSION, len(offsets) - 1) + data.tobytes()
    schema = fastavro.parse_schema(json.loads(schema_json))
    out = io.BytesIO()
    out.write(b"\0" * 8)  # version and count, filled in below
    count = 0
    buf = io.BytesIO()
    for record in records:
        buf.seek(0)
        buf.truncate()
        fastavro.schemaless_writer(buf, schema, dict(record))
        out.write(_INT.pack(buf.tell()))
        out.write(buf.getbuffer())
        count += 1
    content = out.getbuffer()
    _TWO_INTS.pack_into(content, 0, AVRO_DATA_BLOCK_VERSION, count)
    return bytes(content)


# ---------------------------------------------------------------------------------------
# Parquet data blocks


def parquet_block_table(block: LogBlock, columns: list[str] | None = None) -> pa.Table:
    """The records of a PARQUET_DATA block."""
    content = _expect(block, BlockType.PARQUET_DATA)
    try:
        return pq.read_table(pa.BufferReader(content), columns=columns)
    except (pa.ArrowInvalid, OSError) as exc:
        raise HoodieFormatError(f"{block.where}: corrupt parquet data block ({exc})") from None


def encode_parquet_data_block(
    table: pa.Table, *, compression: str = "gzip", avro_schema_json: str | None = None
) -> bytes:
    """PARQUET_DATA content: a parquet file of ``table`` (gzip, as Hudi's default codec).

    ``avro_schema_json`` is stored as ``parquet.avro.schema`` so parquet-avro readers (Hudi's
    Java reader) map the columns exactly as written.
    """
    if avro_schema_json is not None:
        meta = dict(table.schema.metadata or {})
        meta[b"parquet.avro.schema"] = avro_schema_json.encode("utf-8")
        table = table.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=compression)
    data: bytes = sink.getvalue().to_pybytes()
    return data


# ---------------------------------------------------------------------------------------
# Delete blocks


@dataclass(frozen=True, slots=True)
class DeleteRecord:
    """One key of a delete block.

    ``ordering_value`` is unwrapped (int, float, str, bytes, bool, Decimal, date, time,
    datetime in UTC, or a tuple for several ordering fields); ``ordering_type`` is the Hudi
    wrapper it was stored in (e.g. ``"IntWrapper"``), ``None`` for a null value. When
    writing, ``ordering_type=None`` picks the wrapper from the Python type. Hudi itself
    writes ``0`` (IntWrapper) for deletes that carry no ordering value.
    """

    record_key: str | None
    partition_path: str | None
    ordering_value: Any = 0
    ordering_type: str | None = None


# Appended by newer Hudi releases (several ordering fields); absent from older schema copies.
_ARRAY_WRAPPERS: list[dict[str, Any]] = [
    {
        "type": "record",
        "name": "LocalDateWrapper",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [{"name": "value", "type": "int"}],
    },
    {
        "type": "record",
        "name": "ArrayWrapper",
        "namespace": "org.apache.hudi.avro.model",
        "fields": [
            {
                "name": "wrappedValues",
                "type": ["null", {"type": "array", "items": None}],  # items filled in below
                "default": None,
            }
        ],
    },
]


@cache
def _delete_schema() -> Any:
    """The project's HoodieDeleteRecordList schema, with ArrayWrapper appended to the union.

    Union branches are matched by index, so appending keeps every older encoding valid.
    """
    schema = json.loads(project_schema_json("HoodieDeleteRecordList"))
    ordering = schema["fields"][0]["type"]["items"]["fields"][2]
    union = ordering["type"]
    names = [b if isinstance(b, str) else b.get("name") for b in union]
    if "ArrayWrapper" not in names and _MODEL + "ArrayWrapper" not in names:
        local_date, array = copy.deepcopy(_ARRAY_WRAPPERS)
        wrappers = [n if "." in n else _MODEL + n for n in map(str, names) if n != "null"]
        items = ["null", *wrappers, local_date]
        array["fields"][0]["type"][1]["items"] = items
        union.append(array)
    return fastavro.parse_schema(schema)


#: The wrappers ``_unwrap`` converts; every other one holds the ordering value as it is.
_CONVERTED_WRAPPERS = frozenset({"DateWrapper", "LocalDateWrapper", "TimestampMicrosWrapper", "ArrayWrapper"})


def _unwrap(kind: str, value: Any) -> Any:
    if kind == "DateWrapper" or kind == "LocalDateWrapper":
        return _EPOCH + dt.timedelta(days=value)
    if kind == "TimestampMicrosWrapper":
        return _UTC_EPOCH + dt.timedelta(microseconds=value)
    if kind == "ArrayWrapper":
        items = value or []
        return tuple(None if v is None else _unwrap(v[0].rsplit(".", 1)[-1], v[1]["value"]) for v in items)
    return value


def _wrapper_for(value: Any) -> str:
    if isinstance(value, bool):
        return "BooleanWrapper"
    if isinstance(value, int):
        return "IntWrapper" if -(2**31) <= value < 2**31 else "LongWrapper"
    if isinstance(value, float):
        return "DoubleWrapper"
    if isinstance(value, str):
        return "StringWrapper"
    if isinstance(value, (bytes, bytearray)):
        return "BytesWrapper"
    if isinstance(value, Decimal):
        return "DecimalWrapper"
    if isinstance(value, dt.datetime):
        return "TimestampMicrosWrapper"
    if isinstance(value, dt.date):
        return "DateWrapper"
    if isinstance(value, dt.time):
        return "TimeMicrosWrapper"
    if isinstance(value, (tuple, list)):
        return "ArrayWrapper"
    raise TypeError(f"ordering value {value!r} of type {type(value).__name__} has no Hudi wrapper")


def _wrap(kind: str, value: Any) -> tuple[str, dict[str, Any]]:
    if kind in ("DateWrapper", "LocalDateWrapper") and isinstance(value, dt.date):
        value = (value - _EPOCH).days
    elif kind == "TimestampMicrosWrapper" and isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        value = (aware - _UTC_EPOCH) // dt.timedelta(microseconds=1)
    elif kind == "DecimalWrapper":
        value = Decimal(value).quantize(Decimal(1).scaleb(-15))
    elif kind == "ArrayWrapper":
        value = [None if v is None else _wrap(_wrapper_for(v), v) for v in value]
        return (_MODEL + kind, {"wrappedValues": value})
    return (_MODEL + kind, {"value": value})


def delete_block_records(block: LogBlock) -> list[DeleteRecord]:
    """The keys of a DELETE block (version 3); Kryo versions 1-2 raise UnsupportedTableError."""
    content = _expect(block, BlockType.DELETE)
    if len(content) < 8:
        raise HoodieFormatError(f"{block.where}: delete block content is {len(content)} bytes, too short")
    version, length = _TWO_INTS.unpack_from(content, 0)
    if version in (1, 2):
        raise UnsupportedTableError(f"{block.where}: delete block version {version} (Kryo) is not supported")
    if version != DELETE_BLOCK_VERSION:
        raise UnsupportedTableError(f"{block.where}: delete block version {version} is not supported")
    if length < 0 or 8 + length != len(content):
        raise HoodieFormatError(
            f"{block.where}: delete block payload declares {length} bytes, content holds {len(content) - 8}"
        )
    stream = io.BytesIO(memoryview(content)[8:])
    try:
        decoded = fastavro.schemaless_reader(stream, _delete_schema(), None, return_record_name=True)
    except Exception as exc:  # fastavro raises many types on garbage
        problem = f"{type(exc).__name__}: {exc}"
        raise HoodieFormatError(f"{block.where}: corrupt delete block ({problem})") from None
    if stream.tell() != length:
        extra = length - stream.tell()
        raise HoodieFormatError(f"{block.where}: delete block payload has {extra} trailing bytes")
    out = []
    kinds: dict[str, str] = {}  # wrapper record name -> its short name, once per block
    for rec in cast(dict[str, Any], decoded)["deleteRecordList"]:
        wrapped = rec["orderingVal"]
        if wrapped is None:
            kind, value = None, None
        else:
            name, inner = wrapped
            kind = kinds.get(name)
            if kind is None:
                kind = kinds[name] = name.rsplit(".", 1)[-1]
            if kind not in _CONVERTED_WRAPPERS:
                value = inner["value"]
            else:
                value = _unwrap(kind, inner["wrappedValues"] if kind == "ArrayWrapper" else inner["value"])
        out.append(DeleteRecord(rec["recordKey"], rec["partitionPath"], value, kind))
    return out


def encode_delete_block(deletes: Iterable[DeleteRecord]) -> bytes:
    """DELETE content, version 3 (Avro ``HoodieDeleteRecordList``)."""
    records = []
    for d in deletes:
        if d.ordering_value is None:
            wrapped = None
        else:
            wrapped = _wrap(d.ordering_type or _wrapper_for(d.ordering_value), d.ordering_value)
        records.append({"recordKey": d.record_key, "partitionPath": d.partition_path, "orderingVal": wrapped})
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _delete_schema(), {"deleteRecordList": records})
    payload = buf.getvalue()
    return _TWO_INTS.pack(DELETE_BLOCK_VERSION, len(payload)) + payload


# ---------------------------------------------------------------------------------------
# Command and HFile blocks


def is_rollback_command(block: LogBlock) -> bool:
    """A COMMAND block asking readers to ignore the blocks of ``block.target_instant_time``."""
    return block.block_type == BlockType.COMMAND and block.command_type == CommandType.ROLLBACK


def hfile_block_content(block: LogBlock) -> bytes:
    """The HFile bytes of an HFILE_DATA block (metadata table), for ``hoodie.hfile.reader``."""
    return _expect(block, BlockType.HFILE_DATA)
