"""Record merging of a file slice: how log records combine with each other and with the base file.

Owns the merge semantics Hudi 1.x applies in its file group reader
(``BufferedRecordMergerFactory``), on Arrow data:

* ``COMMIT_TIME_ORDERING`` (v6 ``OverwriteWithLatestAvroPayload``): the later write wins;
  a delete deletes whatever came before it.
* ``EVENT_TIME_ORDERING`` (v6 ``DefaultHoodieRecordPayload``): a newer record replaces the
  current one iff its ordering value is >= (ties go to the later write); several ordering
  fields compare lexicographically; a missing ordering value is the lowest.
* Deletes: delete-block entries and records with ``_hoodie_is_deleted`` = true (or the
  table's custom delete marker). A delete whose ordering value is absent or the int 0 that
  SQL ``DELETE`` writes is a *commit-time* delete: it always wins over what came before, and
  whatever comes after always wins over it (Hudi's ``isCommitTimeOrderingDelete``). Other
  deletes compete by ordering value like records. While a commit-time delete is the current
  state, a later ordering-value delete is dropped (Hudi keeps the commit-time one).
* Other merge modes and payload classes raise ``UnsupportedTableError``.

``LogRecordBuffer`` collects the data and delete blocks of one slice in reading order and
reduces them to one record per key (``MergedLogRecords``), vectorised with Arrow/numpy: only
keys that meet a commit-time delete under event-time ordering take a per-row path.
``MergedLogRecords.merge_base_batch`` then merges one base-file batch against them
(``pyarrow.compute.index_in`` on the keys): unmatched base rows pass through untouched, and
``remaining_inserts`` gives the log records no base row claimed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.properties import MergeMode, TableConfig

__all__ = [
    "MergeSpec",
    "LogRecordBuffer",
    "MergedLogRecords",
    "record_keys",
    "conform",
    "IS_DELETED_FIELD",
    "RECORD_KEY_FIELD",
]

log = logging.getLogger(__name__)

IS_DELETED_FIELD = "_hoodie_is_deleted"
RECORD_KEY_FIELD = "_hoodie_record_key"

_OVERWRITE_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
_DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
_SUPPORTED_PAYLOADS = {None, "", _OVERWRITE_PAYLOAD, _DEFAULT_PAYLOAD}
# Key generators encode missing parts of complex keys with these (KeyGenUtils)
_NULL_KEY_PART = "__null__"
_EMPTY_KEY_PART = "__empty__"


@dataclass(frozen=True)
class MergeSpec:
    """How records of one table merge: mode, ordering fields, where the key and delete flags come from."""

    mode: MergeMode
    ordering_fields: tuple[str, ...] = ()
    key_fields: tuple[str, ...] = (RECORD_KEY_FIELD,)
    delete_marker: tuple[str, str] | None = None

    @classmethod
    def for_table(cls, config: TableConfig) -> MergeSpec:
        """The spec of a table; ``UnsupportedTableError`` for CUSTOM merging or other payload classes."""
        payload = config.payload_class
        if config.merge_mode is MergeMode.CUSTOM or payload not in _SUPPORTED_PAYLOADS:
            what = f"payload class {payload}" if payload not in _SUPPORTED_PAYLOADS else "merge mode CUSTOM"
            raise UnsupportedTableError(
                f"{config.name}: {what} is not supported (hoodied merges COMMIT_TIME_ORDERING, "
                "EVENT_TIME_ORDERING, OverwriteWithLatestAvroPayload and DefaultHoodieRecordPayload)"
            )
        partial = (config.props.get("hoodie.table.partial.update.mode") or "NONE").strip().upper()
        if partial != "NONE":
            raise UnsupportedTableError(
                f"{config.name}: partial update mode {partial} (hoodie.table.partial.update.mode) is not "
                "supported (hoodied merges whole records)"
            )
        if config.populate_meta_fields:
            keys: tuple[str, ...] = (RECORD_KEY_FIELD,)
        elif config.record_key_fields:
            keys = config.record_key_fields
        else:
            raise UnsupportedTableError(f"{config.name}: no meta fields and no record key fields")
        field = config.props.get("hoodie.payload.delete.field") or config.props.get(
            "hoodie.record.merge.property.hoodie.payload.delete.field"
        )
        marker = config.props.get("hoodie.payload.delete.marker") or config.props.get(
            "hoodie.record.merge.property.hoodie.payload.delete.marker"
        )
        ordering = config.ordering_fields if config.merge_mode is MergeMode.EVENT_TIME_ORDERING else ()
        return cls(config.merge_mode, ordering, keys, (field, marker) if field and marker else None)

    @property
    def event_time(self) -> bool:
        return self.mode is MergeMode.EVENT_TIME_ORDERING


# --------------------------------------------------------------------------------------
# Column helpers
# --------------------------------------------------------------------------------------


def _column(data: pa.Table | pa.RecordBatch, name: str) -> pa.Array | pa.ChunkedArray | None:
    i = data.schema.get_field_index(name)
    return data.column(i) if i >= 0 else None


def _as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def record_keys(data: pa.Table | pa.RecordBatch, spec: MergeSpec) -> pa.Array:
    """The record key of every row as a string array.

    With meta fields it is ``_hoodie_record_key``; otherwise it is built from the record key
    fields as Hudi's key generators do: the value for one field, ``f1:v1,f2:v2`` for several
    (``__null__`` / ``__empty__`` for missing parts).
    """
    fields = spec.key_fields
    if len(fields) == 1:
        col = _column(data, fields[0])
        if col is None:
            raise UnsupportedTableError(f"record key field {fields[0]!r} is not in the data")
        return _as_array(pc.cast(col, pa.string()) if col.type != pa.string() else col)
    parts: list[Any] = []
    for i, name in enumerate(fields):
        col = _column(data, name)
        if col is None:
            raise UnsupportedTableError(f"record key field {name!r} is not in the data")
        text = pc.cast(col, pa.string())
        text = pc.if_else(pc.equal(text, ""), pa.scalar(_EMPTY_KEY_PART), text)
        text = pc.fill_null(text, _NULL_KEY_PART)
        parts.append(f"{',' if i else ''}{name}:")
        parts.append(text)
    out = pc.binary_join_element_wise(*[_broadcast(p, data.num_rows) for p in parts], "")
    return _as_array(out)


def _broadcast(part: Any, n: int) -> Any:
    return pa.array([part] * n, pa.string()) if isinstance(part, str) else part


def _delete_flags(data: pa.Table | pa.RecordBatch, spec: MergeSpec) -> np.ndarray:
    """Rows that are deletes: ``_hoodie_is_deleted`` true or the custom delete marker."""
    flags = np.zeros(data.num_rows, dtype=bool)
    col = _column(data, IS_DELETED_FIELD)
    if col is not None and pa.types.is_boolean(col.type):
        flags |= _as_array(pc.fill_null(col, False)).to_numpy(zero_copy_only=False)
    if spec.delete_marker is not None:
        mcol = _column(data, spec.delete_marker[0])
        if mcol is not None:
            hit = pc.equal(pc.cast(mcol, pa.string()), spec.delete_marker[1])
            flags |= _as_array(pc.fill_null(hit, False)).to_numpy(zero_copy_only=False)
    return flags


def conform(data: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table | pa.RecordBatch:
    """``data`` with exactly ``schema``'s columns: missing ones as nulls, others cast (schema evolution).

    Only the type changes Hudi allows are cast (``_PROMOTIONS``); others raise
    ``UnsupportedTableError`` rather than truncate values.

    Returns ``data`` itself when it already matches (zero copy).
    """
    if data.schema.equals(schema, check_metadata=False):
        return data
    names = data.schema.names
    if names == schema.names and all(a.type == b.type for a, b in zip(data.schema, schema, strict=True)):
        if isinstance(data, pa.RecordBatch):
            return pa.RecordBatch.from_arrays(data.columns, schema=_relaxed(schema, data.schema))
        return pa.Table.from_arrays(data.columns, schema=_relaxed(schema, data.schema))
    arrays = []
    for f in schema:
        i = data.schema.get_field_index(f.name)
        if i < 0:
            arrays.append(pa.nulls(data.num_rows, f.type))
            continue
        col = data.column(i)
        arrays.append(col if col.type == f.type else _cast(col, f.type, f.name))
    fields = [pa.field(f.name, f.type, True, f.metadata) for f in schema]
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, schema.metadata))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, schema.metadata))


def _relaxed(target: pa.Schema, actual: pa.Schema) -> pa.Schema:
    """``target`` but nullable where the data says so (a non-null field must not get nulls)."""
    return pa.schema(
        [
            t if (t.nullable or not a.nullable) else t.with_nullable(True)
            for t, a in zip(target, actual, strict=True)
        ],
        target.metadata,
    )


def _type_kind(t: pa.DataType) -> str | None:
    """The Hudi type family of an Arrow type (``None``: no rule applies, e.g. nested or temporal)."""
    if pa.types.is_integer(t):
        return "long" if t.bit_width == 64 else "int"
    if pa.types.is_floating(t):
        return "double" if t.bit_width == 64 else "float"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_boolean(t):
        return "boolean"
    return None


#: Hudi's legal column type changes (``SchemaChangeUtils.isTypeUpdateAllow``): older -> newer type.
_PROMOTIONS = {
    "int": {"long", "float", "double", "string", "decimal"},
    "long": {"float", "double", "string", "decimal"},
    "float": {"double", "string", "decimal"},
    "double": {"string", "decimal"},
    "decimal": {"string"},
    "string": {"date", "decimal", "binary"},
    "date": {"string"},
    "binary": {"string"},
}


def _cast(col: Any, type_: pa.DataType, name: str) -> Any:
    old, new = _type_kind(col.type), _type_kind(type_)
    if old is not None and new is not None and old != new and new not in _PROMOTIONS.get(old, ()):
        # e.g. double -> long: Hudi rejects such a write; a cast would silently truncate values
        raise UnsupportedTableError(
            f"column {name!r}: type change {col.type} -> {type_} is not a promotion Hudi allows"
        )
    try:
        return pc.cast(col, type_, safe=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UnsupportedTableError(f"column {name!r}: cannot read {col.type} as {type_} ({exc})") from None


# --------------------------------------------------------------------------------------
# Log records
# --------------------------------------------------------------------------------------


def _is_natural(value: Any) -> bool:
    """Hudi's DEFAULT_ORDERING_VALUE: absent, or the Java Integer 0 (SQL deletes write IntWrapper 0)."""
    if value is None:
        return True
    if isinstance(value, dict):  # a wrapper record decoded as {"value": ...}
        value = value.get("value")
        return value is None or (type(value) is int and value == 0)
    return type(value) is int and value == 0


def _unwrap(value: Any) -> Any:
    return value.get("value") if isinstance(value, dict) else value


class LogRecordBuffer:
    """Collects the data and delete blocks of one file slice (in reading order) and merges them."""

    def __init__(self, spec: MergeSpec, schema: pa.Schema) -> None:
        self.spec = spec
        self.schema = schema
        self._tables: list[pa.Table] = []
        self._table_seq: list[int] = []
        self._del_keys: list[str] = []
        self._del_ord: list[Any] = []
        self._del_seq: list[int] = []
        self._del_natural: list[bool] = []
        self._seq = 0

    def add_data(self, data: pa.Table | pa.RecordBatch) -> None:
        """A data block's records (any column order; cast to the buffer's schema)."""
        if data.num_rows == 0:
            return
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        self._tables.append(conform(table, self.schema))
        self._table_seq.append(self._seq)
        self._seq += table.num_rows

    def add_deletes(
        self, keys: Sequence[str], ordering_values: Sequence[Any], *, natural: Sequence[bool] | None = None
    ) -> None:
        """A delete block's entries: record keys and their ``orderingVal``.

        ``natural`` flags commit-time deletes (absent ordering value or Java Integer 0); by
        default derived from the values (``None`` or int 0).
        """
        n = len(keys)
        self._del_keys.extend(keys)
        self._del_ord.extend(ordering_values)
        self._del_natural.extend(
            natural if natural is not None else [_is_natural(v) for v in ordering_values]
        )
        self._del_seq.extend(range(self._seq, self._seq + n))
        self._seq += n

    def __len__(self) -> int:
        return self._seq

    def finish(self) -> MergedLogRecords:
        """Reduce everything added to one record (or delete) per key."""
        spec = self.spec
        data = pa.concat_tables(self._tables).combine_chunks() if self._tables else self.schema.empty_table()
        n_data = data.num_rows
        data_seq = (
            np.concatenate(
                [
                    np.arange(s, s + t.num_rows, dtype=np.int64)
                    for s, t in zip(self._table_seq, self._tables, strict=True)
                ]
            )
            if self._tables
            else np.empty(0, dtype=np.int64)
        )
        data_keys = record_keys(data, spec) if n_data else pa.array([], pa.string())
        data_del = _delete_flags(data, spec) if n_data else np.zeros(0, dtype=bool)
        keys = pa.concat_arrays([data_keys, pa.array(self._del_keys, pa.string())])
        seq = np.concatenate([data_seq, np.asarray(self._del_seq, dtype=np.int64)])
        is_delete = np.concatenate([data_del, np.ones(len(self._del_keys), dtype=bool)])
        ordering = self._ordering_columns(data)
        natural = np.concatenate(
            [
                data_del & self._all_null(ordering, n_data),
                np.asarray(self._del_natural, dtype=bool),
            ]
        )
        codes = _as_array(pc.dictionary_encode(keys)).indices.to_numpy(zero_copy_only=False).astype(np.int64)
        if spec.event_time and ordering:
            winners = _event_time_winners(codes, seq, ordering, is_delete, natural)
        else:
            winners = _last_per_key(codes, seq)
        data_index = np.where(winners < n_data, winners, -1)
        rec_rows = winners[winners < n_data]
        records = data.take(pa.array(rec_rows, pa.int64())) if n_data else data
        data_index[winners < n_data] = np.arange(len(rec_rows))
        return MergedLogRecords(
            spec=spec,
            keys=keys.take(pa.array(winners, pa.int64())),
            is_delete=is_delete[winners],
            natural=natural[winners],
            ordering=[o.take(pa.array(winners, pa.int64())) for o in ordering],
            records=records,
            data_index=data_index,
        )

    @staticmethod
    def _all_null(ordering: list[pa.Array], n_data: int) -> np.ndarray:
        if not ordering:
            return np.ones(n_data, dtype=bool)
        out = np.ones(n_data, dtype=bool)
        for col in ordering:
            out &= col.slice(0, n_data).is_null().to_numpy(zero_copy_only=False)
        return out

    def _ordering_columns(self, data: pa.Table) -> list[pa.Array]:
        """Per ordering field: the data rows' values, then the delete entries' values (same type)."""
        out: list[pa.Array] = []
        n_del = len(self._del_keys)
        for k, name in enumerate(self.spec.ordering_fields):
            col = _column(data, name)
            type_ = col.type if col is not None else pa.null()
            values = _as_array(col) if col is not None else pa.nulls(data.num_rows)
            dels = [_unwrap(v) for v in self._del_ord]
            if len(self.spec.ordering_fields) > 1:
                dels = [
                    v[k] if isinstance(v, list | tuple) and len(v) > k else (v if k == 0 else None)
                    for v in dels
                ]
            out.append(pa.concat_arrays([values, _delete_values(dels, type_, n_del)]))
        return out


def _delete_values(values: list[Any], type_: pa.DataType, n: int) -> pa.Array:
    """Delete ordering values in the ordering column's type; unconvertible ones become null (lowest)."""
    if n == 0:
        return pa.array([], type_)
    try:
        return pa.array(values, type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        pass
    try:
        return pc.cast(pa.array(values), type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError):
        log.warning("delete ordering values do not convert to %s; treated as lowest", type_)
        return pa.nulls(n, type_)


def _group_last(codes_sorted: np.ndarray) -> np.ndarray:
    """Positions (in sorted order) of the last row of each run of equal codes."""
    if len(codes_sorted) == 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.append(codes_sorted[1:] != codes_sorted[:-1], True))


def _last_per_key(codes: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Row index of the latest write (max ``seq``) of every key."""
    order = np.lexsort((seq, codes))
    return order[_group_last(codes[order])]


def _ranks(ordering: list[pa.Array]) -> list[np.ndarray]:
    """Order-preserving integer ranks of the ordering values, nulls lowest (rank 0)."""
    out = []
    for col in ordering:
        if col.null_count == len(col):
            out.append(np.zeros(len(col), dtype=np.int64))
            continue
        rank = pc.rank(col, sort_keys="ascending", tiebreaker="dense")
        r = rank.to_numpy(zero_copy_only=False).astype(np.int64)
        r[col.is_null().to_numpy(zero_copy_only=False)] = 0
        out.append(r)
    return out


def _event_time_winners(
    codes: np.ndarray,
    seq: np.ndarray,
    ordering: list[pa.Array],
    is_delete: np.ndarray,
    natural: np.ndarray,
) -> np.ndarray:
    """Row index of the surviving write of every key under event-time ordering."""
    ranks = _ranks(ordering)
    # keys without a commit-time delete: the greatest ordering value wins, ties to the later write
    order = np.lexsort((seq, *reversed(ranks), codes))
    winners = order[_group_last(codes[order])]
    special = np.unique(codes[natural])
    # a key written once (a commit-time delete of a key the logs do not otherwise touch, the
    # usual case) has that write as its winner already: only keys written twice or more replay
    if len(special):
        special = special[np.bincount(codes)[special] > 1]
    if len(special) == 0:
        return winners
    # keys that meet a commit-time delete: replay their writes in order (few rows, usually)
    rows = np.flatnonzero(np.isin(codes, special))
    rows = rows[np.lexsort((seq[rows], codes[rows]))]
    rank_rows = [tuple(int(r[i]) for r in ranks) for i in rows]
    current: dict[int, int] = {}
    for i, rk in zip(rows.tolist(), rank_rows, strict=True):
        c = int(codes[i])
        cur = current.get(c)
        if cur is None or natural[i] or natural[cur]:
            if cur is not None and natural[cur] and is_delete[i] and not natural[i]:
                continue  # a commit-time delete stays against a later ordering-value delete
            current[c] = i
            continue
        if rk >= tuple(int(r[cur]) for r in ranks):
            current[c] = i
    # dictionary codes are dense (0..n-1) and sorted groups come out in code order
    for c, i in current.items():
        winners[c] = i
    return winners


@dataclass
class MergedLogRecords:
    """One surviving log write per key: a record (row of ``records``) or a delete."""

    spec: MergeSpec
    keys: pa.Array
    is_delete: np.ndarray
    natural: np.ndarray
    ordering: list[pa.Array]
    records: pa.Table
    data_index: np.ndarray  # row of ``records`` per key, -1 for deletes from delete blocks

    def __post_init__(self) -> None:
        self._consumed = np.zeros(len(self.keys), dtype=bool)

    def __len__(self) -> int:
        return len(self.keys)

    def merge_base_batch(self, batch: pa.RecordBatch | pa.Table) -> pa.Table | pa.RecordBatch:
        """Merge one base-file batch: base rows without a log write come back untouched."""
        if len(self.keys) == 0 or batch.num_rows == 0:
            return batch
        base_keys = record_keys(batch, self.spec)
        pos_arr = pc.index_in(base_keys, value_set=self.keys)
        if pos_arr.null_count == len(pos_arr):
            return batch
        matched = pos_arr.is_valid().to_numpy(zero_copy_only=False)
        pos = pos_arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        rows = np.flatnonzero(matched)
        # Hudi takes the log record out of its map when the first base row claims it
        _, first = np.unique(pos[rows], return_index=True)
        rows = rows[np.sort(first)]
        rows = rows[~self._consumed[pos[rows]]]
        lpos = pos[rows]
        self._consumed[lpos] = True
        log_wins = np.ones(len(rows), dtype=bool)
        if self.spec.event_time and self.ordering:
            log_wins = self.natural[lpos] | self._log_not_older(batch, rows, lpos)
        keep = np.ones(batch.num_rows, dtype=bool)
        keep[rows[log_wins]] = False
        emit = lpos[log_wins & ~self.is_delete[lpos]]
        base_part = batch.filter(pa.array(keep)) if not keep.all() else batch
        if len(emit) == 0:
            return base_part
        updates = self.records.take(pa.array(self.data_index[emit], pa.int64()))
        base_table = base_part if isinstance(base_part, pa.Table) else pa.Table.from_batches([base_part])
        return pa.concat_tables([base_table, conform(updates, base_table.schema)])

    def _log_not_older(
        self, batch: pa.RecordBatch | pa.Table, rows: np.ndarray, lpos: np.ndarray
    ) -> np.ndarray:
        """Per matched row: log ordering value >= base ordering value (lexicographic, null lowest)."""
        idx_rows = pa.array(rows, pa.int64())
        idx_log = pa.array(lpos, pa.int64())
        result = np.ones(len(rows), dtype=bool)  # all equal so far -> the log (newer) wins
        decided = np.zeros(len(rows), dtype=bool)
        for name, log_col in zip(self.spec.ordering_fields, self.ordering, strict=True):
            base_col = _column(batch, name)
            if base_col is None:
                continue
            b = _as_array(base_col).take(idx_rows)
            a = log_col.take(idx_log)
            if a.type != b.type:
                try:
                    a = pc.cast(a, b.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    b = pc.cast(b, a.type)
            a_null = a.is_null().to_numpy(zero_copy_only=False)
            b_null = b.is_null().to_numpy(zero_copy_only=False)
            gt = pc.fill_null(pc.greater(a, b), False).to_numpy(zero_copy_only=False) | (~a_null & b_null)
            lt = pc.fill_null(pc.less(a, b), False).to_numpy(zero_copy_only=False) | (a_null & ~b_null)
            newly = ~decided & (gt | lt)
            result[newly] = gt[newly]
            decided |= newly
        return result

    def remaining_inserts(self) -> pa.Table:
        """Log records no base row claimed (inserts), deletes excluded."""
        left = np.flatnonzero(~self._consumed & ~self.is_delete)
        self._consumed[left] = True
        return self.records.take(pa.array(self.data_index[left], pa.int64()))
