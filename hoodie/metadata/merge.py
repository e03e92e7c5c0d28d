"""Merging metadata-table records the way ``HoodieMetadataPayload`` does, for MDT compaction.

Owns the per-key merge rules of an MDT file slice (base file, then log blocks) and the
encoding of the compacted records:

- ``files`` (types 1, 2): ``combineFileSystemMetadata`` -- a newer tombstone removes the file,
  sizes take the max, an unmatched tombstone stays; the map keeps the iteration order of the
  ``java.util.HashMap`` Hudi builds (``_JavaMap``), so compacted values are byte-identical;
- ``column_stats`` / ``partition_stats`` (3, 6): ``mergeColumnStatsRecords`` -- a tombstone on
  either side, or a tight-bound newer record, wins; else min of mins, max of maxes (Java's
  natural order of the unwrapped values, nulls ignored), sums of counts and sizes, names and
  flags of the newer record; a final tombstone is not written;
- ``bloom_filters`` (4), ``record_index`` (5), secondary indexes (7): the newer record wins;
  deleted bloom filters and secondary-index entries are not written; DELETE blocks remove keys.

Two stages as Hudi's file-group reader: log records among themselves in log order (blocks of
MDT instants not completed skipped, rollback command blocks honoured), then the base record
under the merged log record. Values read once and never merged keep their bytes; every value
written gets ``_hoodie_file_name`` = the new base file's name (as Hudi's compacted MDT files).

Two ways to run it. ``merge_file_slice`` holds the merged slice in memory (for the small
partitions a commit reads back). ``compact_file_slice``, the compaction's way, streams: the
base HFile and the HFile of every data block are each sorted by row (``HoodieHFileDataBlock``
sorts a block's records by key; HBase's ``HFile.Writer`` refuses a key below the previous one;
an unsorted input is refused here too), so a k-way merge over them, reading one
HFile block of each at a time, meets every key once, with its records in (base, log order,
position in block) order; delete blocks are one block each and sorted in memory. Merged records
go straight to a ``BaseHFileWriter``. Memory: one HFile block per input, the block indexes,
the keys of one delete block, the output block being filled and the bloom filter -- not the
file group. ``merge_slice_keys``, for a commit reading a few keys (record-index owners of
deleted keys) or key prefixes (the ``column_stats`` records of the touched partitions, as
Hudi's prefix lookups): the same merge, reading only the HFile blocks that can hold them.
"""

from __future__ import annotations

import heapq
import io
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import fastavro

from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.hfile.reader import HFileReader, parse_avro_schema
from hoodied.hoodie.hfile.writer import BaseHFileWriter
from hoodied.hoodie.log import (
    BlockType,
    LogBlock,
    delete_block_records,
    hfile_block_content,
    is_rollback_command,
    read_log_blocks,
)
from hoodied.hoodie.metadata.encode import metadata_schema, metadata_schema_json
from hoodied.hoodie.metadata.records import RecordType
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline

__all__ = [
    "CompactedSlice",
    "MergedSlice",
    "compact_file_slice",
    "compacted_cells",
    "merge_file_slice",
    "merge_slice_keys",
    "with_file_name",
]


def _java_hash(text: str) -> int:
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h


def _table_size_for(n: int) -> int:
    cap = 1
    while cap < n:
        cap *= 2
    return cap


class _JavaMap:
    """A ``java.util.HashMap<String, _>`` as far as its iteration order goes.

    The order of a map Hudi serialises is its bucket order under the final capacity, insertion
    order within a bucket (resizes keep it); the capacity depends on how the map was built:
    Avro decoding (``new HashMap<>(size)`` then puts) or ``combineFileSystemMetadata``
    (``putAll`` of the older map into a new map, then ``merge`` of the newer entries).
    """

    def __init__(self) -> None:
        self.cap = 0
        self.threshold = 0
        self.items: dict[str, Any] = {}

    def _resize(self) -> None:
        if self.cap == 0:
            self.cap = self.threshold if self.threshold > 0 else 16
            self.threshold = int(self.cap * 0.75)
        else:
            old = self.cap
            self.cap *= 2
            self.threshold = self.threshold * 2 if old >= 16 else int(self.cap * 0.75)

    def _put(self, key: str, value: Any) -> None:
        if self.cap == 0:
            self._resize()
        if key in self.items:
            self.items[key] = value
            return
        self.items[key] = value
        if len(self.items) > self.threshold:
            self._resize()

    @classmethod
    def decoded(cls, entries: Mapping[str, Any]) -> _JavaMap:
        m = cls()
        m.threshold = _table_size_for(len(entries)) if entries else 0
        for k, v in entries.items():
            m._put(k, v)
        return m

    def order(self) -> list[str]:
        cap = max(self.cap, 1)

        def bucket(key: str) -> int:
            h = _java_hash(key)
            return (h ^ (h >> 16)) & (cap - 1)

        return sorted(self.items, key=bucket)

    def iterate(self) -> list[tuple[str, Any]]:
        return [(k, self.items[k]) for k in self.order()]

    def _put_all(self, other: _JavaMap) -> None:
        if other.items:  # putAll into an empty map pre-sizes it
            self.threshold = _table_size_for(int(len(other.items) / 0.75 + 1.0))
            for k, v in other.iterate():
                self._put(k, v)

    def _merge_in(self, key: str, value: Any) -> None:
        if self.cap == 0 or len(self.items) > self.threshold:  # HashMap.merge resizes first
            self._resize()
        self.items[key] = value

    @classmethod
    def combined(cls, older: _JavaMap, newer: _JavaMap, *, newer_first: bool = False) -> _JavaMap:
        """``combineFileSystemMetadata(older, newer)``: the merged entries, and the map's build history.

        The result is always Hudi's (a newer tombstone removes the file, sizes take the max, an
        unmatched tombstone stays). ``newer_first`` builds the map from the newer entries, then
        the older ones: the order Hudi's compacted ``files`` records show for the merge of log
        records among themselves; the merge of the base record under them starts from the older.
        """
        merged: dict[str, Any] = dict(older.items)
        for k, new in newer.items.items():
            old = merged.get(k)
            if old is None:
                merged[k] = new
            elif new["isDeleted"]:
                if old["isDeleted"]:
                    merged[k] = new  # deleted twice: the tombstone stays
                else:
                    del merged[k]
            else:
                merged[k] = {"size": max(new["size"], old["size"]), "isDeleted": False}
        m = cls()
        first, second = (newer, older) if newer_first else (older, newer)
        m._put_all(first)
        for k, _ in second.iterate():
            if k not in m.items:
                m._merge_in(k, None)
        m.items = {k: merged[k] for k in m.items if k in merged}
        return m


@dataclass(slots=True)
class _Entry:
    """The merged state of one key: its record (decoded, record names kept) and, when unchanged
    since it was read, the value bytes with the schema they were written with."""

    record: dict[str, Any]
    raw: bytes | None
    schema_json: str
    files: _JavaMap | None = None  # the ``filesystemMetadata`` map of type 1/2 records


def _payload(value: Any) -> Any:
    """A union value read with ``return_record_name``: ``(name, record)`` -> record."""
    return value[1] if isinstance(value, tuple) else value


def _wrapped(value: Any) -> tuple[str | None, Any]:
    """A min/max wrapper -> (wrapper name, unwrapped value); (None, None) when null."""
    if value is None:
        return None, None
    if isinstance(value, tuple):
        name, inner = value
        return name.rsplit(".", 1)[-1], (inner or {}).get("value")
    return None, (value or {}).get("value")


def _java_key(name: str | None, value: Any) -> Any:
    """Java's natural order of the unwrapped value (ByteBuffer compares signed bytes)."""
    if name == "BytesWrapper" and isinstance(value, bytes | bytearray):
        return [b - 256 if b > 127 else b for b in value]
    return value


def _pick(prev: Any, new: Any, smaller: bool) -> Any:
    """min/max of two wrappers as ``mergeColumnStatsRecords`` does (nulls ignored)."""
    pn, pv = _wrapped(prev)
    nn, nv = _wrapped(new)
    if pv is None:
        return new
    if nv is None:
        return prev
    if pn != nn:
        return new  # different Java types do not compare; the newer range is kept
    try:
        a, b = _java_key(nn, nv), _java_key(pn, pv)
        newer_wins = a < b if smaller else a > b
    except TypeError:
        return new
    return new if newer_wins else prev


def _sum(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _merge_column_stats(prev: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``HoodieTableMetadataUtil.mergeColumnStatsRecords`` over two decoded records."""
    p = _payload(prev["ColumnStatsMetadata"])
    n = _payload(new["ColumnStatsMetadata"])
    if p is None or n is None or n["isDeleted"] or p["isDeleted"] or n.get("isTightBound"):
        return new
    merged = dict(n)
    merged["minValue"] = _pick(p.get("minValue"), n.get("minValue"), smaller=True)
    merged["maxValue"] = _pick(p.get("maxValue"), n.get("maxValue"), smaller=False)
    for counter in ("valueCount", "nullCount", "totalSize", "totalUncompressedSize"):
        merged[counter] = _sum(p.get(counter), n.get(counter))
    out = dict(new)
    out["ColumnStatsMetadata"] = (new["ColumnStatsMetadata"][0], merged) \
        if isinstance(new["ColumnStatsMetadata"], tuple) else merged
    return out


def _files_map(entry: _Entry) -> _JavaMap:
    if entry.files is None:
        entry.files = _JavaMap.decoded(entry.record.get("filesystemMetadata") or {})
    return entry.files


def _combine(prev: _Entry, new: _Entry, *, log_stage: bool = False) -> _Entry:
    """Merge a newer record of a key over the older one (``HoodieMetadataPayload.preCombine``)."""
    kind = new.record.get("type")
    if kind in (RecordType.PARTITION_LIST, RecordType.FILE_LIST) and prev.record.get("type") == kind:
        files = _JavaMap.combined(_files_map(prev), _files_map(new), newer_first=log_stage)
        record = dict(new.record)
        record["filesystemMetadata"] = dict(files.iterate())
        return _Entry(record, None, new.schema_json, files)
    if kind in (RecordType.COLUMN_STATS, RecordType.PARTITION_STATS) and prev.record.get("type") == kind:
        record = _merge_column_stats(prev.record, new.record)
        return new if record is new.record else _Entry(record, None, new.schema_json)
    return new


def _dropped(record: dict[str, Any]) -> bool:
    """Records a compaction does not write (``getInsertValue`` is empty for deleted entries)."""
    kind = record.get("type")
    if kind in (RecordType.COLUMN_STATS, RecordType.PARTITION_STATS):
        stats = _payload(record.get("ColumnStatsMetadata"))
        return stats is None or bool(stats.get("isDeleted"))
    if kind == RecordType.BLOOM_FILTER:
        bloom = _payload(record.get("BloomFilterMetadata"))
        return bloom is None or bool(bloom.get("isDeleted"))
    if kind == RecordType.SECONDARY_INDEX:
        info = _payload(record.get("SecondaryIndexMetadata"))
        return info is None or bool(info.get("isDeleted"))
    return False


class _Decoder:
    def __init__(self) -> None:
        self._schemas: dict[str, Any] = {}

    def decode(self, value: bytes, schema_json: str, where: str, key: str) -> dict[str, Any]:
        schema = self._schemas.get(schema_json)
        if schema is None:
            schema = self._schemas[schema_json] = parse_avro_schema(schema_json)
        try:
            rec = fastavro.schemaless_reader(io.BytesIO(value), schema, None, return_record_name=True)
        except Exception as exc:  # fastavro raises assorted types on garbage
            raise HoodieFormatError(f"{where}: value of row {key!r} is not valid Avro ({exc})") from None
        assert isinstance(rec, dict)
        rec["key"] = key
        return rec


@dataclass(slots=True)
class MergedSlice:
    """The records of one merged MDT file slice, and how many keys its log files touched."""

    entries: dict[str, _Entry]
    log_keys: int


def _valid_blocks(storage: Storage, timeline: Timeline, log_files: list[str]) -> list[LogBlock]:
    """Data and delete blocks of MDT-completed instants, in log order, minus rolled-back ones."""

    def skip(instant: str) -> bool:
        return not timeline.is_completed(instant)

    blocks: list[LogBlock] = []
    for path in log_files:
        for block in read_log_blocks(storage, path, ignorable=skip):
            if block.block_type is BlockType.COMMAND:
                if is_rollback_command(block):
                    blocks = [b for b in blocks if b.instant_time != block.target_instant_time]
                continue
            if skip(block.instant_time or ""):
                continue
            if block.block_type not in (BlockType.HFILE_DATA, BlockType.DELETE):
                raise HoodieFormatError(
                    f"{block.where}: {block.block_type.name} block in a metadata-table log file")
            blocks.append(block)
    return blocks


def merge_file_slice(storage: Storage, timeline: Timeline, base_file: str | None,
                     log_files: list[str]) -> MergedSlice:
    """The merged records of one MDT file slice (paths relative to the MDT), tombstones included.

    Two stages, as Hudi's file-group reader does: the log records among themselves (in log
    order), then the base record under the merged log record. The ``files`` maps of the log
    stage are built newest entries first, the order Hudi's compacted records show (table
    version 8 files written by Hudi 1.0 do not always follow it; only the order of entries
    inside a record differs then).
    """
    return _merge(
        storage, timeline, base_file, log_files,
        open_log=lambda block: HFileReader(hfile_block_content(block), block.where),
        open_base=lambda path: HFileReader(storage.read(path), path),
        cells=HFileReader.iter_cells,
        wanted=lambda key: True,
    )


def _merge(
    storage: Storage,
    timeline: Timeline,
    base_file: str | None,
    log_files: list[str],
    *,
    open_log: Callable[[LogBlock], HFileReader],
    open_base: Callable[[str], HFileReader],
    cells: Callable[[HFileReader], Iterable[tuple[bytes, bytes]]],
    wanted: Callable[[str], bool],
) -> MergedSlice:
    """The two stages of ``merge_file_slice`` over the ``cells`` of each HFile (log blocks, then the
    base file) and the ``wanted`` keys of the delete blocks."""
    decoder = _Decoder()
    from_logs: dict[str, _Entry | None] = {}
    for block in _valid_blocks(storage, timeline, log_files):
        if block.block_type is BlockType.DELETE:
            for rec in delete_block_records(block):
                if rec.record_key is not None and wanted(rec.record_key):
                    from_logs[rec.record_key] = None
            continue
        reader = open_log(block)
        schema_json = block.schema_json or reader.schema_json or ""
        for row, value in cells(reader):
            key = row.decode("utf-8")
            entry = _Entry(decoder.decode(value, schema_json, block.where, key), value, schema_json)
            prev = from_logs.get(key)
            from_logs[key] = entry if prev is None else _combine(prev, entry, log_stage=True)
    out: dict[str, _Entry] = {}
    if base_file is not None:
        base = open_base(base_file)
        schema_json = base.schema_json or ""
        for row, value in cells(base):
            key = row.decode("utf-8")
            out[key] = _Entry(decoder.decode(value, schema_json, base_file, key), value, schema_json)
    for key, newer in from_logs.items():
        if newer is None:
            out.pop(key, None)
        else:
            out[key] = _combine(out[key], newer) if key in out else newer
    return MergedSlice(out, len(from_logs))



def merge_slice_keys(storage: Storage, timeline: Timeline, base_file: str | None, log_files: list[str],
                     *, keys: Iterable[str] = (), prefixes: Iterable[str] = ()) -> MergedSlice:
    """``merge_file_slice`` restricted to the records of ``keys`` and of the keys starting with one
    of ``prefixes``: the same merged entries for them, without reading the rest of the slice.

    The base HFile is read through its block index (``HFileReader.scan_rows``: only the data
    blocks that can hold the wanted rows), the HFile of every log data block the same way, and
    a delete block's keys are filtered; the merge rules are ``merge_file_slice``'s. Memory: one
    HFile block, the keys of one delete block and the wanted records. ``log_keys`` counts the
    wanted keys the log files touched.
    """
    key_set = set(keys)
    rows = sorted(k.encode("utf-8") for k in key_set)
    heads = sorted({p.encode("utf-8") for p in prefixes})
    head_tuple = tuple(p.decode("utf-8") for p in heads)

    def wanted_cells(reader: HFileReader) -> Iterator[tuple[bytes, bytes]]:
        # one pass per kind, each in file order; a key wanted both ways is merged once
        seen: set[bytes] = set()
        for row, value in reader.scan_rows(heads, prefix=True) if heads else ():
            seen.add(row)
            yield row, value
        for row, value in reader.scan_rows(rows) if rows else ():
            if row not in seen:
                yield row, value

    def ordered(reader: HFileReader) -> list[tuple[bytes, bytes]]:
        # both passes merged back into file order (rows sorted; equal rows keep their order)
        return sorted(wanted_cells(reader), key=itemgetter(0)) if rows and heads \
            else list(wanted_cells(reader))

    return _merge(
        storage, timeline, base_file, log_files,
        open_log=_log_block_reader,
        open_base=lambda path: HFileReader.open(storage, path),
        cells=ordered,
        wanted=lambda key: key in key_set or key.startswith(head_tuple),
    )

def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos


def with_file_name(value: bytes, file_name: str) -> bytes:
    """Set the 5th meta field (``_hoodie_file_name``, ``["null","string"]``) of an encoded record."""
    pos = 0
    for _ in range(4):  # skip _hoodie_commit_time .. _hoodie_partition_path
        branch, pos = _read_varint(value, pos)
        if branch == 1:
            length, pos = _read_varint(value, pos)
            pos += length
    head, rest = value[:pos], value[pos:]
    branch, after = _read_varint(rest, 0)
    if branch == 1:
        length, after = _read_varint(rest, after)
        after += length
    name = file_name.encode("utf-8")
    return head + _varint(1) + _varint(len(name)) + name + rest[after:]


def _encode(record: Mapping[str, Any], schema: Any) -> bytes:
    """Schemaless Avro of a merged record: ``key`` blanked, maps in the order they carry."""
    out = dict(record)
    out["key"] = ""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, out)
    return buf.getvalue()


def compacted_cells(
    entries: Mapping[str, _Entry], table_version: int, file_name: str
) -> list[tuple[str, bytes]]:
    """The cells of a compacted base file: live records, ``_hoodie_file_name`` = ``file_name``."""
    schema_json = metadata_schema_json(table_version)
    schema = metadata_schema(table_version)
    cells = []
    for key in sorted(entries):
        entry = entries[key]
        if _dropped(entry.record):
            continue
        if entry.raw is not None and entry.schema_json == schema_json:
            value = entry.raw
        else:
            value = _encode(entry.record, schema)
        cells.append((key, with_file_name(value, file_name)))
    return cells


# --- streaming compaction -------------------------------------------------------------------------

#: Log blocks up to this size are read whole (the log reader keeps small files anyway); larger
#: ones through ranged reads, one HFile block at a time.
_WHOLE_LOG_BLOCK = 1 << 20
_BASE_RANK = -1  # sorts the base file's cells before every log block's


@dataclass(frozen=True, slots=True)
class CompactedSlice:
    """What ``compact_file_slice`` wrote: records, and how many keys the log files touched."""

    records: int
    log_keys: int


def _log_block_reader(block: LogBlock) -> HFileReader:
    if block.content_length <= _WHOLE_LOG_BLOCK:
        return HFileReader(hfile_block_content(block), block.where)
    storage, path, start = block.storage, block.path, block.content_offset

    def read(offset: int, length: int) -> bytes:
        return storage.read_range(path, start + offset, length)

    return HFileReader.from_ranges(read, block.content_length, block.where)


_Cell = tuple[bytes, int, int, bytes | None]  # row, rank (base -1, then log order), position, value


def _sorted_cells(reader: HFileReader, rank: int) -> Iterator[_Cell]:
    """The cells of one HFile tagged for the merge; a row below its predecessor is an error (the
    merge would miss records otherwise)."""
    previous = b""
    for seq, (row, value) in enumerate(reader.iter_cells()):
        if row < previous:
            raise HoodieFormatError(
                f"{reader.where}: HFile rows are out of order ({row!r} after {previous!r})")
        previous = row
        yield row, rank, seq, value


def _deleted_keys(block: LogBlock, rank: int) -> Iterator[_Cell]:
    records = delete_block_records(block)
    keys = {rec.record_key.encode("utf-8") for rec in records if rec.record_key is not None}
    for row in sorted(keys):
        yield row, rank, 0, None


def compact_file_slice(storage: Storage, timeline: Timeline, base_file: str | None, log_files: list[str],
                       table_version: int, file_name: str, writer: BaseHFileWriter) -> CompactedSlice:
    """Merge one MDT file slice (paths relative to the MDT) into ``writer``, key by key.

    The same records, bytes and order as ``compacted_cells(merge_file_slice(...).entries, ...)``,
    streamed (module doc). ``file_name`` is the new base file's name (``_hoodie_file_name``);
    the caller finishes ``writer``.
    """
    decoder = _Decoder()
    target_json = metadata_schema_json(table_version)
    target = metadata_schema(table_version)
    sources: list[Iterator[_Cell]] = []
    schemas: dict[int, tuple[str, str]] = {}  # rank -> (writer schema, where)
    if base_file is not None:
        base = HFileReader.open(storage, base_file)
        schemas[_BASE_RANK] = (base.schema_json or "", base_file)
        sources.append(_sorted_cells(base, _BASE_RANK))
    for rank, block in enumerate(_valid_blocks(storage, timeline, log_files)):
        if block.block_type is BlockType.DELETE:
            sources.append(_deleted_keys(block, rank))
            continue
        reader = _log_block_reader(block)
        schemas[rank] = (block.schema_json or reader.schema_json or "", block.where)
        sources.append(_sorted_cells(reader, rank))
    records = log_keys = 0
    for row, cells in itertools.groupby(heapq.merge(*sources), key=itemgetter(0)):
        key = row.decode("utf-8")
        from_base: _Entry | None = None
        newer: _Entry | None = None  # the log stage: None when absent or deleted
        in_logs = False
        for _, rank, _, value in cells:
            if value is None:  # a delete block's key
                in_logs, newer = True, None
                continue
            schema_json, where = schemas[rank]
            entry = _Entry(decoder.decode(value, schema_json, where, key), value, schema_json)
            if rank == _BASE_RANK:
                from_base = entry  # a repeated base row: the last one counts
            elif newer is None:
                in_logs, newer = True, entry
            else:
                newer = _combine(newer, entry, log_stage=True)
        if in_logs:
            log_keys += 1
            if newer is None:
                continue
            final = _combine(from_base, newer) if from_base is not None else newer
        else:
            assert from_base is not None
            final = from_base
        if _dropped(final.record):
            continue
        if final.raw is not None and final.schema_json == target_json:
            value_out = final.raw
        else:
            value_out = _encode(final.record, target)
        writer.append(row, with_file_name(value_out, file_name))
        records += 1
    return CompactedSlice(records, log_keys)
