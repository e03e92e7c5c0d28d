"""The type of a column's partition statistics when the files of a partition disagree on it.

Hudi merges the per-file ranges of a column into its ``partition_stats`` range in
``FileFormatUtils.getColumnRangeInPartition`` (called from
``HoodieTableMetadataUtil.collectAndProcessColumnMetadata``, for a commit's partition stats and
for their initialization). The files of one partition need not agree on a column's type. With
index version V2 (table version 9, Hudi 1.1) the type comes from the *writer schema* (the commit's
``extraMetadata.schema`` with the meta fields added as strings, ``HoodieAvroUtils.addMetadataFields``;
at initialization the table schema): ``ValueMetadata.getValueMetadata(Schema, HoodieIndexVersion)``
/ ``ValueType.fromSchema`` (``column_value_types``: Avro logical types decimal, uuid, date,
time-*, timestamp-*, local-timestamp-*, else the primitive type; a nullable union by its other
branch). Every file range of the column is re-created with that type, its min and max converted
by the type's ``standardizeJavaTypeAndPromote`` casts (``schema_typed_ranges``), then the ranges
are merged (``HoodieColumnRangeMetadata.merge``, which refuses two different value types):

- LONG / INT (``castToLong`` / ``castToInteger``): ints and booleans (1/0) as they are, anything
  else through ``Long.parseLong`` / ``Integer.parseInt`` of its Java text
  (``hoodie.metadata.java_values``): a numeric string converts; a float, a date, a long beyond
  the int range or a path like ``2024/01/15`` makes Hudi's commit fail;
- FLOAT / DOUBLE: ints widened or rounded to the nearest value, a DOUBLE rounded to a FLOAT, a
  FLOAT made a DOUBLE through its ``Float.toString`` text, booleans 1.0/0.0, strings parsed
  (``Double.parseDouble``);
- STRING (``castToString``): strings as they are; booleans, ints and floats as their Java text;
  anything else (bytes, dates...) fails;
- BYTES: bytes as they are, a string as its UTF-8 bytes; BOOLEAN takes booleans only;
- DATE from an INT (epoch days), TIME_MILLIS from an INT and TIME_MICROS from a LONG (within the
  day), the timestamps from a LONG (``castToTimestampMillis``...), and between units of one Java
  type (``Instant``, ``LocalDateTime``, ``LocalTime``: floored to the target unit when written);
  UUID from its canonical text; DECIMAL from an INT/LONG taken as the unscaled value
  (``BigDecimal.valueOf(long, scale)``) when it fits the precision; FIXED and BYTES from each other;
- anything else (a decimal of another precision or scale, text from a date...) is refused, as
  is every conversion Hudi fails on: ``UnsupportedTableError`` before anything is written
  (Hudi's commit fails with "Failed to generate column stats records").

A range without values (type NULL: a delete-only log file, an all-null column) takes the type.
So a partition column that older file groups hold as a long and newer ones as a string gets the
writer schema's type in ``partition_stats``: STRING (``StringWrapper``; the longs as their
decimal text, ordered as Java strings) when the schema says string, LONG (``LongWrapper``) when
it says long and the strings are numbers. (Hudi 1.1's Spark SQL writes to a table partitioned by
``TimestampBasedKeyGenerator`` on a long read the partition column back from the partition path
as a string, HUDI-7709, and can write it so.) Each file's own ``column_stats`` record keeps its
footer's type.

Table version 8 (index version V1: no value types) converts only a column whose ranges disagree
(``colsWithSchemaEvolved``), with ``HoodieTableMetadataUtil.coerceToComparable``'s casts: as above,
except that floats and longs are narrowed to integers as Java's ``(long)`` / ``intValue`` do and a
FLOAT widens to a DOUBLE exactly. Columns the writer schema does not name keep their ranges'
types.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from hoodied.hoodie.basefile import META_FIELDS
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.metadata.colstats import ColumnRange, ValueType, java_bytes
from hoodied.hoodie.metadata.java_values import (
    INT_RANGE,
    LONG_RANGE,
    java_double_text,
    java_float_text,
    parse_double,
    parse_int,
    parse_long,
    to_float32,
)

__all__ = ["ValueTypes", "column_value_types", "schema_typed_ranges"]

_AVRO_PRIMITIVES = {
    "null": ValueType.NULL,
    "boolean": ValueType.BOOLEAN,
    "int": ValueType.INT,
    "long": ValueType.LONG,
    "float": ValueType.FLOAT,
    "double": ValueType.DOUBLE,
    "bytes": ValueType.BYTES,
    "string": ValueType.STRING,
}
_AVRO_LOGICAL = {
    "uuid": ValueType.UUID,
    "date": ValueType.DATE,
    "time-millis": ValueType.TIME_MILLIS,
    "time-micros": ValueType.TIME_MICROS,
    "timestamp-millis": ValueType.TIMESTAMP_MILLIS,
    "timestamp-micros": ValueType.TIMESTAMP_MICROS,
    "timestamp-nanos": ValueType.TIMESTAMP_NANOS,
    "local-timestamp-millis": ValueType.LOCAL_TIMESTAMP_MILLIS,
    "local-timestamp-micros": ValueType.LOCAL_TIMESTAMP_MICROS,
    "local-timestamp-nanos": ValueType.LOCAL_TIMESTAMP_NANOS,
}
_NAMED = ("record", "enum", "fixed")
ValueTypes = dict[str, tuple[ValueType, str | None]]
"""Column -> (``ValueType``, additional info), as ``column_value_types`` returns it."""


def _named_types(schema: Any, namespace: str, out: dict[str, Any]) -> None:
    """Every named Avro type (record, enum, fixed) by short and full name, for references."""
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, namespace, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in _NAMED and isinstance(schema.get("name"), str):
            name = schema["name"]
            namespace = schema.get("namespace") or (name.rsplit(".", 1)[0] if "." in name else namespace)
            out[name.rsplit(".", 1)[-1]] = out[f"{namespace}.{name}" if "." not in name else name] = schema
        for field in schema.get("fields") or ():
            if isinstance(field, dict):
                _named_types(field.get("type"), namespace, out)
        for key in ("items", "values"):
            _named_types(schema.get(key), namespace, out)
        if isinstance(kind, list | dict):
            _named_types(kind, namespace, out)


def _avro_value_type(schema: Any, named: Mapping[str, Any]) -> tuple[ValueType, str | None] | None:
    """``ValueType.fromSchema`` of one field's Avro schema; None for what has no column stats
    (records, arrays, maps, enums, unions of several types)."""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return _avro_value_type(branches[0], named) if len(branches) == 1 else None
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema], None
        return _avro_value_type(named[schema], named) if schema in named else None
    if not isinstance(schema, dict):
        return None
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return ValueType.DECIMAL, f"{schema.get('precision')},{schema.get('scale', 0)}"
    if logical in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[logical], None
    if kind == "fixed":
        return ValueType.FIXED, None
    if kind in ("record", "enum", "array", "map"):
        return None
    return _avro_value_type(kind, named)


def column_value_types(avro_schema: str | None, *, meta_fields: bool) -> ValueTypes:
    """Per top-level column of a writer schema (Avro JSON, as ``extraMetadata.schema`` holds it),
    the (ValueType, additional info) Hudi gives its partition stats; meta fields are strings
    (``HoodieAvroUtils.addMetadataFields``). {} without a schema."""
    if not avro_schema:
        return {}
    try:
        record = json.loads(avro_schema)
    except ValueError:
        raise HoodieFormatError("the writer schema of the commit is not JSON") from None
    if not isinstance(record, dict) or not isinstance(record.get("fields"), list):
        raise HoodieFormatError("the writer schema of the commit is not an Avro record")
    named: dict[str, Any] = {}
    _named_types(record, str(record.get("namespace") or ""), named)
    out: ValueTypes = {name: (ValueType.STRING, None) for name in META_FIELDS} if meta_fields else {}
    for field in record["fields"]:
        found = _avro_value_type(field.get("type"), named) if isinstance(field, dict) else None
        if found is not None:
            out[str(field["name"])] = found
    return out


class _Uncastable(Exception):
    """Hudi's cast throws for this value (``NumberFormatException``, ``UnsupportedOperationException``)."""


def _java_text(vtype: ValueType, value: Any) -> str:
    """``toString`` of the Java value behind a stored primitive (String, Boolean, Integer, Long,
    Float, Double); other Java types are not among what Hudi's casts turn into text."""
    if vtype is ValueType.STRING:
        return str(value)
    if vtype is ValueType.BOOLEAN:
        return "true" if value else "false"
    if vtype in (ValueType.INT, ValueType.LONG):
        return str(value)
    if vtype is ValueType.FLOAT:
        return java_float_text(value)
    if vtype is ValueType.DOUBLE:
        return java_double_text(value)
    raise _Uncastable


def _java_narrow(value: float | int, bits: int) -> int:
    """Java's ``(int)`` / ``(long)`` of a double (truncated, NaN 0, saturated) or ``intValue`` of a
    long (the low 32 bits)."""
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return high if value >= high else low if value <= low else int(value)
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _cast_integer(value: Any, src: ValueType, dst: ValueType, v1: bool) -> int:
    """``castToLong`` / ``castToInteger``: ints and booleans as they are, the rest parsed from text."""
    bounds, parse = (LONG_RANGE, parse_long) if dst is ValueType.LONG else (INT_RANGE, parse_int)
    if src is ValueType.BOOLEAN:
        return int(value)
    if src in (ValueType.INT, ValueType.LONG) and bounds[0] <= value <= bounds[1]:
        return int(value)
    if v1 and src in (ValueType.INT, ValueType.LONG, ValueType.FLOAT, ValueType.DOUBLE):
        return _java_narrow(value, 64 if dst is ValueType.LONG else 32)
    parsed = parse(_java_text(src, value))
    if parsed is None:
        raise _Uncastable
    return parsed


def _cast_float(value: Any, src: ValueType, dst: ValueType, v1: bool) -> float:
    """``castToFloat`` / ``castToDouble``."""
    single = dst is ValueType.FLOAT
    if src is ValueType.BOOLEAN:
        return 1.0 if value else 0.0
    if src in (ValueType.INT, ValueType.LONG):
        return to_float32(value) if single else float(value)
    number: float | None
    if src is ValueType.FLOAT and not single and not v1:
        number = parse_double(java_float_text(value))  # Double.valueOf(val + "")
    elif src in (ValueType.FLOAT, ValueType.DOUBLE):
        number = value
    elif src is ValueType.STRING:
        number = parse_double(value)
    else:
        raise _Uncastable
    if number is None:
        raise _Uncastable
    return to_float32(number) if single else float(number)


def _cast(value: Any, src: ValueType, dst: ValueType, info: str | None, v1: bool) -> Any:
    """One statistic of type ``src`` as type ``dst``: ``ValueType``'s standardize casts (index V2),
    ``HoodieTableMetadataUtil.coerceToComparable`` (``v1``, table version 8)."""
    if dst in (ValueType.LONG, ValueType.INT):
        return _cast_integer(value, src, dst, v1)
    if dst in (ValueType.FLOAT, ValueType.DOUBLE):
        return _cast_float(value, src, dst, v1)
    if dst is ValueType.STRING:
        return _java_text(src, value)
    if dst is ValueType.BOOLEAN and src is ValueType.BOOLEAN:
        return value
    if dst in (ValueType.BYTES, ValueType.FIXED) and src in (ValueType.BYTES, ValueType.FIXED):
        return value
    if dst is ValueType.BYTES and src is ValueType.STRING and not v1:
        return str(value).encode("utf-8")
    if not v1:
        return _cast_logical(value, src, dst, info)
    raise _Uncastable


#: Per temporal type: its family (``Instant``, ``LocalDateTime``, ``LocalTime``) and units a second.
_TEMPORAL = {
    ValueType.TIMESTAMP_MILLIS: ("instant", 10**3),
    ValueType.TIMESTAMP_MICROS: ("instant", 10**6),
    ValueType.TIMESTAMP_NANOS: ("instant", 10**9),
    ValueType.LOCAL_TIMESTAMP_MILLIS: ("local", 10**3),
    ValueType.LOCAL_TIMESTAMP_MICROS: ("local", 10**6),
    ValueType.LOCAL_TIMESTAMP_NANOS: ("local", 10**9),
    ValueType.TIME_MILLIS: ("time", 10**3),
    ValueType.TIME_MICROS: ("time", 10**6),
}
_UUID_TEXT = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_DAY = 86_400


def _cast_logical(value: Any, src: ValueType, dst: ValueType, info: str | None) -> Any:
    """The logical types' casts (``castToDate``, ``castToTimestampMillis``, ``castToUUID``,
    ``castToDecimal``...), on the stored primitives (epoch days, units since the epoch or since
    midnight, canonical UUID text, unscaled two's-complement bytes)."""
    if dst is ValueType.DATE and src is ValueType.INT:  # LocalDate.ofEpochDay
        return value
    if dst in _TEMPORAL:
        family, per_second = _TEMPORAL[dst]
        if src in _TEMPORAL and _TEMPORAL[src][0] == family:  # the same Java type, written in dst's unit
            return value * per_second // _TEMPORAL[src][1]
        wanted = ValueType.INT if dst is ValueType.TIME_MILLIS else ValueType.LONG
        if src is wanted and (family != "time" or 0 <= value < _DAY * per_second):  # LocalTime.ofNanoOfDay
            return value
    if dst is ValueType.UUID and src is ValueType.STRING and _UUID_TEXT.fullmatch(value):
        return str(value).lower()  # UUID.fromString, written back with UUID.toString
    if dst is ValueType.DECIMAL and src in (ValueType.INT, ValueType.LONG):
        # BigDecimal.valueOf(unscaled, scale), rounded to the precision (a no-op when it fits)
        precision = int((info or "0").split(",")[0])
        if len(str(abs(value))) <= precision:
            return java_bytes(value)
    raise _Uncastable


def _promote(r: ColumnRange, vtype: ValueType, info: str | None, v1: bool, where: str) -> ColumnRange:
    """``r`` with the writer schema's type (``standardizeJavaTypeAndPromote`` of its min and max)."""
    if (r.value_type, r.type_info) == (vtype, info):
        return r
    if r.min_value is None and r.max_value is None:
        return replace(r, value_type=vtype, type_info=info)
    try:
        if r.value_type is vtype:  # a decimal of another precision or scale: not checked against Hudi
            raise _Uncastable
        low, high = (
            None if v is None else _cast(v, r.value_type, vtype, info, v1) for v in (r.min_value, r.max_value)
        )
    except _Uncastable:
        raise UnsupportedTableError(
            f"{where}: column {r.column} of {r.file_name} has {r.value_type.name} statistics "
            f"({r.min_value!r}..{r.max_value!r}) that Hudi's partition stats cannot turn into the writer "
            f"schema's {vtype.name} (its commit fails on them too); nothing was written"
        ) from None
    return replace(r, value_type=vtype, type_info=info, min_value=low, max_value=high)


def schema_typed_ranges(
    ranges: Iterable[ColumnRange],
    column_types: Mapping[str, tuple[ValueType, str | None]],
    table_version: int,
    where: str = "",
) -> list[ColumnRange]:
    """``ranges`` (of the files of one partition) with the writer schema's column types, ready for
    ``colstats.partition_stats_records``; ``where`` names the partition in errors."""
    ranges = list(ranges)
    if not column_types:
        return ranges
    v1 = table_version < 9
    wanted = set(column_types)
    if v1:  # index V1 converts only the columns whose files disagree
        kinds: dict[str, set[ValueType]] = {}
        for r in ranges:
            if r.min_value is not None or r.max_value is not None:
                kinds.setdefault(r.column, set()).add(r.value_type)
        wanted &= {c for c, k in kinds.items() if len(k) > 1}
    return [_promote(r, *column_types[r.column], v1, where) if r.column in wanted else r for r in ranges]
