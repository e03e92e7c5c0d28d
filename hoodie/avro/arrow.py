"""Avro records of Hudi log data blocks as Arrow: the type mapping and a vectorised decoder.

Owns two things:

* ``avro_schema_to_arrow``: the Arrow schema a Hudi/Spark reader gives an Avro writer schema,
  chosen so that log records line up with the parquet base files of the same table:
  ``[null, X]`` unions -> nullable ``X``; other fields non-nullable; int/long/float/double/
  boolean/string/bytes as usual; enum -> string; fixed -> fixed_size_binary; ``date`` ->
  date32; ``timestamp-micros``/``-millis`` -> timestamp(us/ms, "UTC");
  ``local-timestamp-*`` -> timestamp without zone; ``time-millis``/``-micros`` ->
  time32(ms)/time64(us); ``decimal`` (bytes or fixed) -> decimal128 (decimal256 above
  precision 38); arrays -> list<element>; maps -> map<string, value>. Unions of two or more
  non-null branches and recursive records have no Arrow counterpart in Hudi's readers either
  and raise ``UnsupportedTableError``.
* ``decode_avro_records``: decodes many Avro-binary records (given by byte spans in one
  buffer) column by column with numpy, instead of one Python dict per record: every field of
  every record of a chunk is decoded in one vectorised step, which is what makes merging
  millions of log records affordable. Every record must end exactly where its span ends,
  which catches corrupt data and wrong schemas that a record-at-a-time decoder would miss.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError

__all__ = ["avro_schema_to_arrow", "decode_avro_records", "AvroDecodeError"]

# Records are decoded in chunks: bounds the temporaries (index arrays, gathered bytes) and
# keeps Arrow's 32-bit string offsets safe.
_CHUNK_ROWS = 65_536
_CHUNK_BYTES = 16 << 20
# Above this mean length, string bytes are gathered with bytes.join (memcpy per value)
# rather than a per-byte index array.
_JOIN_MEAN_LENGTH = 64

_Sel = slice | np.ndarray


class AvroDecodeError(Exception):
    """Raised inside the decoder; the caller turns it into a HoodieFormatError naming the file."""


class _Ctx:
    """Decoding state of one chunk: the buffer and, per record, its read position and end."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: np.ndarray, pos: np.ndarray, end: np.ndarray) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end


def _sub(sel: _Sel, local: np.ndarray) -> np.ndarray:
    """Chunk row indices of the ``local`` rows of a selection."""
    return local if isinstance(sel, slice) else sel[local]


def _need(p: np.ndarray, e: np.ndarray, width: np.ndarray | int, what: str) -> None:
    if np.any(p + width > e):
        raise AvroDecodeError(f"{what} runs past the end of its record")


def _varint(ctx: _Ctx, sel: _Sel) -> np.ndarray:
    """Zig-zag varints (Avro int/long) at the selected rows' positions; advances them."""
    p = ctx.pos[sel]
    if p.size == 0:
        return np.zeros(0, dtype=np.int64)
    e = ctx.end[sel]
    _need(p, e, 1, "a varint")
    b = ctx.buf[p].astype(np.uint64)
    acc = b & np.uint64(0x7F)
    newp = p + 1
    more = np.nonzero(b >= 0x80)[0]
    shift = 7
    q = p[more] + 1
    while more.size:
        if shift > 63:
            raise AvroDecodeError("a varint is longer than 10 bytes")
        _need(q, e[more], 1, "a varint")
        b = ctx.buf[q].astype(np.uint64)
        acc[more] |= (b & np.uint64(0x7F)) << np.uint64(shift)
        newp[more] = q + 1
        cont = b >= 0x80
        more, q = more[cont], q[cont] + 1
        shift += 7
    ctx.pos[sel] = newp
    # zig-zag: (n >> 1) ^ -(n & 1), in unsigned arithmetic, then reinterpret as signed
    signed: np.ndarray = (
        (acc >> np.uint64(1)) ^ ((acc & np.uint64(1)) * np.uint64(0xFFFFFFFFFFFFFFFF))
    ).view(np.int64)
    return signed


def _gather_fixed(ctx: _Ctx, sel: _Sel, width: int, what: str) -> np.ndarray:
    """``width`` bytes per selected row as an (n, width) uint8 matrix; advances the rows."""
    p = ctx.pos[sel].copy()  # a view when sel is a slice; the positions move below
    _need(p, ctx.end[sel], width, what)
    ctx.pos[sel] = p + width
    return ctx.buf[p[:, None] + np.arange(width)]


def _gather_var(ctx: _Ctx, sel: _Sel, what: str) -> tuple[np.ndarray, np.ndarray, bytes]:
    """Length-prefixed bytes per selected row -> (start positions, lengths, concatenated bytes)."""
    lens = _varint(ctx, sel)
    if np.any(lens < 0):
        raise AvroDecodeError(f"{what} has a negative length")
    p = ctx.pos[sel].copy()  # a view when sel is a slice; the positions move below
    _need(p, ctx.end[sel], lens, what)
    ctx.pos[sel] = p + lens
    total = int(lens.sum())
    if total == 0:
        return p, lens, b""
    if total > _JOIN_MEAN_LENGTH * len(lens):
        mv = ctx.buf.data
        return p, lens, b"".join([mv[s : s + n] for s, n in zip(p.tolist(), lens.tolist(), strict=True)])
    out_start = np.cumsum(lens) - lens
    idx = np.repeat(p - out_start, lens) + np.arange(total)
    return p, lens, ctx.buf[idx].tobytes()


def _offsets(lens: np.ndarray) -> pa.Buffer:
    off = np.zeros(len(lens) + 1, dtype=np.int32)
    np.cumsum(lens, out=off[1:])
    return pa.py_buffer(off)


class _Node:
    """One Avro type: its Arrow type and how to decode it for a selection of rows."""

    arrow_type: pa.DataType

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        raise NotImplementedError


class _Null(_Node):
    arrow_type = pa.null()

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        return pa.nulls(len(ctx.pos[sel]))


class _Bool(_Node):
    arrow_type = pa.bool_()

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        b = _gather_fixed(ctx, sel, 1, "a boolean")[:, 0]
        if np.any(b > 1):
            raise AvroDecodeError("a boolean byte is neither 0 nor 1")
        return pa.array(b.astype(bool))


class _Int(_Node):
    def __init__(self, is_long: bool, arrow_type: pa.DataType) -> None:
        self.is_long = is_long
        self.arrow_type = arrow_type

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        v = _varint(ctx, sel)
        if not self.is_long:
            if np.any((v < -(2**31)) | (v >= 2**31)):
                raise AvroDecodeError("an int is out of 32-bit range")
            v = v.astype(np.int32)
        arr = pa.array(v)
        return arr if arr.type == self.arrow_type else arr.view(self.arrow_type)


class _Float(_Node):
    def __init__(self, width: int) -> None:
        self.width = width
        self.arrow_type = pa.float32() if width == 4 else pa.float64()

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        m = _gather_fixed(ctx, sel, self.width, "a float")
        return pa.array(np.ascontiguousarray(m).view("<f4" if self.width == 4 else "<f8").reshape(-1))


class _Bytes(_Node):
    def __init__(self, is_string: bool) -> None:
        self.is_string = is_string
        self.arrow_type = pa.string() if is_string else pa.binary()

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        _, lens, data = _gather_var(ctx, sel, "a string" if self.is_string else "a bytes value")
        arr = pa.Array.from_buffers(self.arrow_type, len(lens), [None, _offsets(lens), pa.py_buffer(data)])
        if self.is_string:
            try:
                arr.validate(full=True)
            except pa.ArrowInvalid as exc:
                raise AvroDecodeError(f"a string is not valid UTF-8 ({exc})") from None
        return arr


class _Fixed(_Node):
    def __init__(self, size: int) -> None:
        self.size = size
        self.arrow_type = pa.binary(size)

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        m = _gather_fixed(ctx, sel, self.size, "a fixed value")
        return pa.Array.from_buffers(self.arrow_type, len(m), [None, pa.py_buffer(m.tobytes())])


class _Enum(_Node):
    arrow_type = pa.string()

    def __init__(self, symbols: Sequence[str]) -> None:
        self.symbols = pa.array(list(symbols), pa.string())

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        idx = _varint(ctx, sel)
        if np.any((idx < 0) | (idx >= len(self.symbols))):
            raise AvroDecodeError("an enum index is out of range")
        return self.symbols.take(pa.array(idx))


def _be_to_le(m: np.ndarray, width: int) -> np.ndarray:
    """Big-endian two's complement (n, L) -> little-endian (n, width), sign-extended."""
    n, length = m.shape
    neg = m[:, 0] >= 0x80 if length else np.zeros(n, dtype=bool)
    out = np.zeros((n, width), dtype=np.uint8)
    out[neg] = 0xFF
    k = min(length, width)
    if k:
        out[:, :k] = m[:, length - k :][:, ::-1]
    if length > width:
        pad = np.where(neg, 0xFF, 0x00)
        if np.any(m[:, : length - width] != pad[:, None]) or np.any((out[:, width - 1] >= 0x80) != neg):
            raise AvroDecodeError("a decimal does not fit its precision")
    return out


class _Decimal(_Node):
    def __init__(self, precision: int, scale: int, fixed_size: int | None) -> None:
        self.fixed_size = fixed_size
        self.width = 16 if precision <= 38 else 32
        self.arrow_type = (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        if self.fixed_size is not None:
            out = _be_to_le(_gather_fixed(ctx, sel, self.fixed_size, "a decimal"), self.width)
        else:
            p, lens, _ = _var_positions(ctx, sel)
            out = np.zeros((len(lens), self.width), dtype=np.uint8)
            for length in np.unique(lens).tolist():
                rows = np.nonzero(lens == length)[0]
                m = ctx.buf[p[rows][:, None] + np.arange(length)]
                out[rows] = _be_to_le(m, self.width)
        return pa.Array.from_buffers(self.arrow_type, len(out), [None, pa.py_buffer(out.tobytes())])


def _var_positions(ctx: _Ctx, sel: _Sel) -> tuple[np.ndarray, np.ndarray, None]:
    """Like _gather_var without copying the bytes (decimal bytes are converted in place)."""
    lens = _varint(ctx, sel)
    if np.any(lens < 0):
        raise AvroDecodeError("a decimal has a negative length")
    p = ctx.pos[sel].copy()  # a view when sel is a slice; the positions move below
    _need(p, ctx.end[sel], lens, "a decimal")
    ctx.pos[sel] = p + lens
    return p, lens, None


class _Record(_Node):
    def __init__(self, fields: list[tuple[pa.Field, _Node]]) -> None:
        self.fields = fields
        self.arrow_type = pa.struct([f for f, _ in fields])

    def decode_children(self, ctx: _Ctx, sel: _Sel) -> list[pa.Array]:
        # Fields follow each other in the encoding, so decoding them in order moves every
        # row's position from one field to the next.
        return [node.decode(ctx, sel) for _, node in self.fields]

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        if not self.fields:
            return pa.array([{}] * len(ctx.pos[sel]), self.arrow_type)
        return pa.StructArray.from_arrays(self.decode_children(ctx, sel), fields=[f for f, _ in self.fields])


class _Nullable(_Node):
    """A union of null and one other type (in either order), or a single-branch union."""

    def __init__(self, value: _Node, value_index: int, branches: int) -> None:
        self.value = value
        self.value_index = value_index
        self.branches = branches
        self.arrow_type = value.arrow_type

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        idx = _varint(ctx, sel)
        if np.any((idx < 0) | (idx >= self.branches)):
            raise AvroDecodeError("a union branch index is out of range")
        valid = idx == self.value_index
        if valid.all():
            return self.value.decode(ctx, sel)
        local = np.nonzero(valid)[0]
        child = self.value.decode(ctx, _sub(sel, local))
        take = pa.array(np.cumsum(valid) - 1, mask=~valid)
        return child.take(take)


class _Repeated(_Node):
    """Avro arrays and maps: blocks of items, each block led by its item count."""

    def __init__(self, items: _Node, keyed: bool, arrow_type: pa.DataType) -> None:
        self.items = items
        self.keyed = keyed
        self.keys = _Bytes(is_string=True)
        self.arrow_type = arrow_type

    def decode(self, ctx: _Ctx, sel: _Sel) -> pa.Array:
        n = len(ctx.pos[sel])
        counts = np.zeros(n, dtype=np.int64)
        rows_out: list[np.ndarray] = []
        keys_out: list[pa.Array] = []
        vals_out: list[pa.Array] = []
        active = np.arange(n)
        while active.size:
            cnt = _varint(ctx, _sub(sel, active))
            neg = cnt < 0
            if neg.any():  # a negative count is followed by the block's byte size
                cnt[neg] = -cnt[neg]
                _varint(ctx, _sub(sel, active[neg]))
            left = ctx.end[_sub(sel, active)] - ctx.pos[_sub(sel, active)]
            if np.any(cnt > np.maximum(left, 0) + (1 << 20 if isinstance(self.items, _Null) else 0)):
                raise AvroDecodeError("an array or map declares more items than its record holds")
            keep = cnt > 0
            active, cnt = active[keep], cnt[keep]
            # Item k of every row that has one is decoded in one step; rows advance in step.
            for k in range(int(cnt.max()) if cnt.size else 0):
                rows = active[cnt > k]
                sub = _sub(sel, rows)
                if self.keyed:
                    keys_out.append(self.keys.decode(ctx, sub))
                vals_out.append(self.items.decode(ctx, sub))
                rows_out.append(rows)
            counts[active] += cnt
        offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        if rows_out:
            order = pa.array(np.argsort(np.concatenate(rows_out), kind="stable"))
            values = pa.concat_arrays(vals_out).take(order)
            keys = pa.concat_arrays(keys_out).take(order) if self.keyed else None
        else:
            values = pa.array([], self.items.arrow_type)
            keys = pa.array([], pa.string()) if self.keyed else None
        if self.keyed:
            return pa.MapArray.from_arrays(offsets, keys, values, type=self.arrow_type)
        return pa.ListArray.from_arrays(offsets, values, type=self.arrow_type)


_PRIMITIVES: dict[str, Callable[[], _Node]] = {
    "null": _Null,
    "boolean": _Bool,
    "int": lambda: _Int(False, pa.int32()),
    "long": lambda: _Int(True, pa.int64()),
    "float": lambda: _Float(4),
    "double": lambda: _Float(8),
    "string": lambda: _Bytes(True),
    "bytes": lambda: _Bytes(False),
}

# (logicalType, Avro base type) -> Arrow type; other combinations are ignored as Avro says.
_LOGICAL: dict[tuple[str, str], pa.DataType] = {
    ("date", "int"): pa.date32(),
    ("time-millis", "int"): pa.time32("ms"),
    ("time-micros", "long"): pa.time64("us"),
    ("timestamp-millis", "long"): pa.timestamp("ms", tz="UTC"),
    ("timestamp-micros", "long"): pa.timestamp("us", tz="UTC"),
    ("timestamp-nanos", "long"): pa.timestamp("ns", tz="UTC"),
    ("local-timestamp-millis", "long"): pa.timestamp("ms"),
    ("local-timestamp-micros", "long"): pa.timestamp("us"),
    ("local-timestamp-nanos", "long"): pa.timestamp("ns"),
}


def _build(schema: Any, path: str) -> tuple[_Node, bool]:
    """The node for an (expanded) Avro schema and whether its Arrow field is nullable."""
    if isinstance(schema, list):
        return _build_union(schema, path)
    if isinstance(schema, str):
        if schema not in _PRIMITIVES:
            raise UnsupportedTableError(f"Avro field {path!r}: recursive type {schema!r} is not supported")
        return _PRIMITIVES[schema](), schema == "null"  # Arrow's null type is always nullable
    kind = schema.get("type")
    if isinstance(kind, (dict, list)):
        return _build(kind, path)
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if precision > 76:
            raise UnsupportedTableError(f"Avro field {path!r}: decimal precision {precision} exceeds 76")
        return _Decimal(precision, scale, int(schema["size"]) if kind == "fixed" else None), False
    if (logical, kind) in _LOGICAL:
        return _Int(kind == "long", _LOGICAL[(logical, kind)]), False
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind](), kind == "null"
    return _build_complex(schema, kind, path), False


def _build_union(branches: list[Any], path: str) -> tuple[_Node, bool]:
    non_null = [i for i, s in enumerate(branches) if s != "null"]
    if len(non_null) > 1:
        raise UnsupportedTableError(f"Avro field {path!r}: unions of several non-null types are unsupported")
    if not non_null:
        return _Null(), True
    value, _ = _build(branches[non_null[0]], path)
    return _Nullable(value, non_null[0], len(branches)), len(branches) > 1


def _build_complex(schema: Mapping[str, Any], kind: Any, path: str) -> _Node:
    if kind == "fixed":
        return _Fixed(int(schema["size"]))
    if kind == "enum":
        return _Enum(schema["symbols"])
    if kind == "record":
        fields = []
        for f in schema["fields"]:
            node, nullable = _build(f["type"], f"{path}.{f['name']}" if path else f["name"])
            fields.append((pa.field(f["name"], node.arrow_type, nullable=nullable), node))
        return _Record(fields)
    if kind in ("array", "map"):
        items, nullable = _build(schema["items" if kind == "array" else "values"], f"{path}[]")
        value = pa.field("element" if kind == "array" else "value", items.arrow_type, nullable=nullable)
        if kind == "array":
            return _Repeated(items, False, pa.list_(value))
        return _Repeated(items, True, pa.map_(pa.field("key", pa.string(), nullable=False), value))
    raise UnsupportedTableError(f"Avro field {path!r}: type {kind!r} is not supported")


@lru_cache(maxsize=256)
def _plan_from_text(text: str) -> _Record:
    return _plan(json.loads(text))


def _plan(schema: Any) -> _Record:
    try:
        expanded = fastavro.parse_schema(schema, expand=True)
    except Exception as exc:  # fastavro raises several types for invalid schemas
        raise HoodieFormatError(f"invalid Avro schema ({type(exc).__name__}: {exc})") from None
    node, _ = _build(expanded, "")
    if not isinstance(node, _Record):
        raise UnsupportedTableError("the Avro schema of a data block must be a record")
    return node


def _record_plan(schema: str | Mapping[str, Any]) -> _Record:
    if isinstance(schema, str):
        try:
            return _plan_from_text(schema)
        except json.JSONDecodeError as exc:
            raise HoodieFormatError(f"Avro schema is not valid JSON ({exc})") from None
    return _plan(dict(schema))


def avro_schema_to_arrow(schema: str | Mapping[str, Any]) -> pa.Schema:
    """The Arrow schema for an Avro record schema (JSON text or parsed), as described above."""
    return pa.schema([f for f, _ in _record_plan(schema).fields])


def decode_avro_records(
    buf: bytes | memoryview, starts: np.ndarray, ends: np.ndarray, schema: str | Mapping[str, Any]
) -> pa.Table:
    """Decode the Avro-binary records at ``buf[starts[i]:ends[i]]`` into one Arrow table.

    Raises ``AvroDecodeError`` (a message without the file name) on corrupt data.
    """
    plan = _record_plan(schema)
    arrow_schema = pa.schema([f for f, _ in plan.fields])
    data = np.frombuffer(buf, dtype=np.uint8)
    batches = []
    n = len(starts)
    i = 0
    while i < n:
        # rows up to the row budget, cut further at the byte budget (at least one row)
        j = min(n, i + _CHUNK_ROWS)
        j = max(i + 1, int(np.searchsorted(starts[i:j], starts[i] + _CHUNK_BYTES)) + i)
        ctx = _Ctx(data, starts[i:j].astype(np.int64, copy=True), ends[i:j].astype(np.int64))
        try:
            columns = plan.decode_children(ctx, slice(None))
        except IndexError:  # defensive: bounds are checked, but never crash on garbage
            raise AvroDecodeError("a record runs past the end of the block") from None
        bad = np.nonzero(ctx.pos != ctx.end)[0]
        if bad.size:
            r = int(bad[0])
            raise AvroDecodeError(
                f"record {i + r} decodes to {int(ctx.pos[r] - starts[i + r])} bytes "
                f"but holds {int(ends[i + r] - starts[i + r])} (wrong schema or corrupt data)"
            )
        batches.append(pa.RecordBatch.from_arrays(columns, schema=arrow_schema))
        i = j
    return pa.Table.from_batches(batches, schema=arrow_schema)
