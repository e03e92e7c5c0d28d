"""Snapshot reading of one file slice: base file + log files, merged with the table's semantics.

Owns the log-scanning rules of Hudi's log record reader and the streaming shape of a read:

* Blocks are taken in log-file order, block by block. A corrupt or truncated block fails
  the read with a one-line error naming the file, unless its header shows it belongs to an
  instant that never committed (the torn tail of a failed append in table version 6, which
  Hudi skips too) or ``skip_corrupt`` asks to skip it with a warning as Hudi's reader does
  (a service must not silently drop committed records). Skipped: data/delete blocks whose
  instant is not a committed write (inflight or rolled back), blocks named by a v6
  rollback command block, blocks a committed log compaction replaced (its
  ``COMPACTED_BLOCK_TIMES``; the compacted block merges where the newest of them was), and
  for time travel blocks whose instant is after ``as_of``.
  CDC blocks carry no table data. Partial-update blocks are not supported
  (``UnsupportedTableError``).
* Memory: the log records of the slice are reduced to one record per key
  (``hoodie.merge.LogRecordBuffer``), then the base file is streamed row group by row group
  (a fresh ``iter_batches`` reader per row group: the Arrow pool's peak does not grow with
  the size of the base file; the pool's unused memory is given back to the system after
  every 64 MiB of row groups, not after each: the page faults that follow cost a quarter of
  the CPU of reading a small file), each batch merged on its own, and the log-only inserts
  come last. A slice without log files, and every read-optimized read, streams the base file
  as it is (zero copy when its columns already have the table's types).
* Speed: string columns stored as dictionary indices only (Hudi's commit time, partition
  path and file name columns, low-cardinality fields) are read as dictionaries and expanded
  with one ``take``, cheaper than Arrow's value-by-value expansion.

Batches come out with the table schema handed in (``HoodieTable.schema()``): columns the
file lacks are null, others are cast (schema evolution).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.fsview import CommitState, FileSlice
from hoodied.hoodie.log import (
    BlockType,
    LogBlock,
    avro_block_to_arrow,
    delete_block_records,
    is_rollback_command,
    parquet_block_table,
    read_log_blocks,
)
from hoodied.hoodie.merge import LogRecordBuffer, MergedLogRecords, MergeSpec, conform
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "BlockRecords",
    "block_key",
    "merge_log_blocks",
    "read_file_slice",
    "read_log_records",
    "resolve_compacted_blocks",
    "scan_log_blocks",
]

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 65_536
#: Record counts of decoded log blocks by ``block_key`` (``merge_log_blocks``'s ``block_records``).
BlockRecords = dict[tuple[str, int], int]
# Uncompressed bytes of base-file row groups decoded before the Arrow pool's unused memory is
# given back to the system (``_base_batches``).
_RELEASE_AFTER_BYTES = 64 << 20
# Uncompressed bytes per value at most of a string column read as a dictionary
# (``_dictionary_columns``): room for indices up to 20 bits wide, never for plain strings.
_DICTIONARY_BYTES_PER_VALUE = 2.5
_DATA_BLOCKS = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.HFILE_DATA)


def read_file_slice(
    storage: Storage,
    file_slice: FileSlice,
    config: TableConfig,
    timeline: Timeline,
    schema: pa.Schema,
    *,
    read_optimized: bool = False,
    as_of: str | None = None,
    commits: CommitState | None = None,
    spec: MergeSpec | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    skip_corrupt: bool = False,
    block_records: BlockRecords | None = None,
) -> Iterator[pa.RecordBatch]:
    """The merged records of one file slice as batches of ``schema``.

    ``commits`` (which instants count as committed) and ``spec`` (merge rules) are derived
    from ``timeline`` / ``config`` when not given; pass them to share the work across slices.
    ``block_records``, when given, receives the record count of every delete block merged
    (``merge_log_blocks``).
    """
    if read_optimized or not file_slice.log_files:
        if file_slice.base_file is not None:
            yield from _base_batches(storage, file_slice.base_file.path, schema, batch_size)
        return
    spec = spec or MergeSpec.for_table(config)
    commits = commits or CommitState(timeline, config)
    merged = read_log_records(
        storage, file_slice, spec, schema, commits, as_of=as_of, skip_corrupt=skip_corrupt,
        block_records=block_records,
    )
    if file_slice.base_file is not None:
        for batch in _base_batches(storage, file_slice.base_file.path, schema, batch_size):
            yield from _as_batches(merged.merge_base_batch(batch), schema)
    yield from _as_batches(merged.remaining_inserts(), schema, batch_size)


def scan_log_blocks(
    storage: Storage,
    file_slice: FileSlice,
    commits: CommitState,
    *,
    as_of: str | None = None,
    skip_corrupt: bool = False,
) -> list[LogBlock]:
    """The data and delete blocks of a slice's log files that a read merges, in merging order.

    Valid blocks (committed, not rolled back, not after ``as_of``) with log compaction
    applied as Hudi's optimized scan (``BaseHoodieLogRecordReader.scanInternalV2``) does it.
    """

    def uncommitted(instant: str) -> bool:
        return not commits.is_committed(instant)

    blocks = [
        b
        for lf in file_slice.log_files
        for b in read_log_blocks(storage, lf.path, skip_corrupt=skip_corrupt, ignorable=uncommitted)
    ]
    rolled_back = {b.target_instant_time for b in blocks if is_rollback_command(b) and b.target_instant_time}
    return resolve_compacted_blocks([b for b in blocks if _is_valid(b, commits, rolled_back, as_of)])


def resolve_compacted_blocks(valid: list[LogBlock]) -> list[LogBlock]:
    """Replace the blocks a log compaction merged by its block(s), at the place of the newest one.

    Hudi walks the instants backwards (first-seen order) mapping every instant named in a
    block's ``COMPACTED_BLOCK_TIMES`` to the final compaction that holds it (compactions of
    compactions chain); a compacted block is taken once, where the newest block it replaced
    was, and never on its own. So a write that was not compacted and came before the log
    compaction's file still merges after the older writes it follows.
    """
    order: list[str] = []
    by_instant: dict[str, list[LogBlock]] = {}
    for b in valid:
        key = b.instant_time or ""
        if key not in by_instant:
            order.append(key)
            by_instant[key] = []
        by_instant[key].append(b)
    if not any(b.compacted_block_times for b in valid):
        return valid
    final: dict[str, str] = {}
    included: set[str] = set()
    backwards: list[LogBlock] = []
    for instant in reversed(order):
        group = by_instant[instant]
        times = group[0].compacted_block_times
        if times:
            into = final.get(instant, instant)
            for t in times:
                final[t] = into
            continue
        holder = final.get(instant)
        if holder is None:
            backwards.extend(reversed(group))
        elif holder not in included:
            included.add(holder)
            backwards.extend(reversed(by_instant[holder]))
    return backwards[::-1]


def read_log_records(
    storage: Storage,
    file_slice: FileSlice,
    spec: MergeSpec,
    schema: pa.Schema,
    commits: CommitState,
    *,
    as_of: str | None = None,
    skip_corrupt: bool = False,
    block_records: BlockRecords | None = None,
) -> MergedLogRecords:
    """The log records of a slice reduced to one record (or delete) per key."""
    blocks = scan_log_blocks(storage, file_slice, commits, as_of=as_of, skip_corrupt=skip_corrupt)
    return merge_log_blocks(blocks, spec, schema, block_records=block_records)


def merge_log_blocks(
    blocks: list[LogBlock], spec: MergeSpec, schema: pa.Schema, *, block_records: BlockRecords | None = None
) -> MergedLogRecords:
    """Data and delete blocks (in merging order, ``scan_log_blocks``) reduced to one record per key.

    ``block_records``, when given, receives each delete block's record count under
    ``block_key(block)``: a caller that also counts the log records (the compaction's write
    statistics) then does not decode the block a second time (fastavro, a Python object per key).
    """
    buffer = LogRecordBuffer(spec, schema)
    for block in blocks:
        if block.is_partial:
            raise UnsupportedTableError(f"{block.where}: partial-update log blocks are not supported")
        if block.block_type is BlockType.DELETE:
            deletes = delete_block_records(block)
            if block_records is not None:
                block_records[block_key(block)] = len(deletes)
            buffer.add_deletes(
                [d.record_key or "" for d in deletes],
                [d.ordering_value for d in deletes],
                natural=[_natural_delete(d.ordering_value, d.ordering_type) for d in deletes],
            )
        elif block.block_type is BlockType.AVRO_DATA:
            buffer.add_data(avro_block_to_arrow(block))
        elif block.block_type is BlockType.PARQUET_DATA:
            buffer.add_data(parquet_block_table(block))
        else:
            raise UnsupportedTableError(f"{block.where}: HFile data blocks in a data table are not supported")
    return buffer.finish()


def block_key(block: LogBlock) -> tuple[str, int]:
    """A block's identity within a read: its log file and the offset of its content."""
    return (block.path, block.content_offset)


def _natural_delete(value: object, kind: str | None) -> bool:
    """Hudi's commit-time delete: no ordering value, or the Java Integer 0 (``IntWrapper``)."""
    if value is None:
        return True
    return kind == "IntWrapper" and value == 0


def _is_valid(block: LogBlock, commits: CommitState, rolled_back: set[str], as_of: str | None) -> bool:
    """A data or delete block of a committed write, not rolled back, not after ``as_of``."""
    if block.block_type not in (*_DATA_BLOCKS, BlockType.DELETE):
        return False  # command, corrupt and CDC blocks carry no table records
    instant = block.instant_time
    if not instant:
        raise HoodieFormatError(f"{block.where}: {block.block_type.name} block has no INSTANT_TIME header")
    if instant in rolled_back or not commits.is_committed(instant):
        return False
    return as_of is None or instant <= as_of


def _base_batches(
    storage: Storage, path: str, schema: pa.Schema, batch_size: int
) -> Iterator[pa.RecordBatch]:
    """The base file row group by row group, conformed to ``schema``."""
    local = getattr(storage, "local_path", None)
    source = local(path) if callable(local) else None
    handle = None
    try:
        if source is None:
            handle = storage.open(path)
        pf = pq.ParquetFile(source if source is not None else handle)
        metadata = pf.metadata
        dictionary = _dictionary_columns(metadata, pf.schema_arrow)
        if dictionary:
            pf = pq.ParquetFile(
                source if source is not None else handle, metadata=metadata, read_dictionary=dictionary
            )
        # One reader per row group: a reader over the whole file keeps decoding buffers sized by
        # the largest batches seen so far, so the Arrow pool's peak grew with the number of row
        # groups; this way it stays at one row group's worth.
        decoded = 0
        for group in range(metadata.num_row_groups):
            for batch in pf.iter_batches(batch_size=batch_size, row_groups=[group], use_threads=True):
                yield conform(_decode_dictionaries(batch) if dictionary else batch, schema)
            # Giving the allocator's cached pages back to the system has a price: the next row
            # group faults them in again (a quarter of the CPU of reading a small file). It only
            # lowers the resident size, the pool's peak is bounded by the per-group readers
            # above, so it is done once enough has been decoded to make it worth it.
            decoded += metadata.row_group(group).total_byte_size
            if decoded >= _RELEASE_AFTER_BYTES:
                pa.default_memory_pool().release_unused()
                decoded = 0
    except (pa.ArrowInvalid, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise HoodieFormatError(f"{path}: cannot read the base file ({exc})") from None
    finally:
        if handle is not None:
            handle.close()


def _dictionary_columns(metadata: pq.FileMetaData, arrow_schema: pa.Schema) -> list[str]:
    """Top-level string columns stored as dictionary indices only, in every row group.

    Arrow's reader turns dictionary-encoded strings into plain ones value by value; read as a
    dictionary and expanded with one ``take`` they cost much less (a read of the benchmark's
    copy-on-write files, whose Hudi metadata columns hold one value per file, takes 15 % less
    CPU). A column whose
    writer fell back to plain pages would be hashed into a dictionary instead, which costs
    more, so only columns whose chunks are too small to hold plain values are chosen: at
    most ``_DICTIONARY_BYTES_PER_VALUE`` uncompressed bytes per value (a plain string
    takes at least 4).
    """
    chosen = []
    for index in range(metadata.num_columns):
        column = metadata.schema.column(index)
        if "." in column.path or column.physical_type != "BYTE_ARRAY":
            continue
        at = arrow_schema.get_field_index(column.path)  # -1: absent or ambiguous
        if at < 0 or not (
            pa.types.is_string(arrow_schema[at].type) or pa.types.is_binary(arrow_schema[at].type)
        ):
            continue
        if metadata.num_row_groups and all(
            chunk.has_dictionary_page
            and chunk.total_uncompressed_size <= _DICTIONARY_BYTES_PER_VALUE * max(chunk.num_values, 1)
            for chunk in (metadata.row_group(g).column(index) for g in range(metadata.num_row_groups))
        ):
            chosen.append(column.path)
    return chosen


def _decode_dictionaries(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its dictionary columns expanded to their value type."""
    arrays = [a.dictionary.take(a.indices) if isinstance(a, pa.DictionaryArray) else a for a in batch.columns]
    fields = [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in batch.schema]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, batch.schema.metadata))


def _as_batches(
    data: pa.Table | pa.RecordBatch, schema: pa.Schema, batch_size: int | None = None
) -> Iterator[pa.RecordBatch]:
    if data.num_rows == 0:
        return
    if isinstance(data, pa.RecordBatch):
        yield conform(data, schema)
        return
    table = conform(data, schema)
    yield from table.to_batches(max_chunksize=batch_size)
