"""HFile v3 writer: metadata-table base files and the content of HFILE_DATA log blocks.

This module owns writing the Hudi-native flavour of HFile v3, the one Hudi 1.1's own
``HFileWriterImpl`` produces for table version 9 (``hoodie.hfile.reader`` reads both flavours)::

    data blocks   "DATABLK*"  cells sorted by row bytes, each block ~``block_size`` uncompressed
    meta blocks   "METABLKc"  one per entry (Hudi: "bloomFilter" in base files only)
    root index    "IDXROOT2"  single level: offset · on-disk size · VInt key length · int16 len · row
    meta index    "IDXROOT2"  offset · on-disk size · VInt name length · name (a full block even when empty)
    file info     "FILEINF2"  "PBUF" · varint length · InfoProto
    trailer       4096 bytes  "TRABLK\\"$" · varint length · TrailerProto · zeros · 00 00 00 03

Every block is a 33-byte header (magic, on-disk size without header, uncompressed size,
previous block offset -1, checksum type 0 = NULL, 16384 bytes per checksum, on-disk data size
with header), the payload compressed as one gzip member, then 4 zero bytes per 16 KiB chunk of
header + compressed payload. A cell is ``int32 rowLen+12 · int32 valueLen · int16 rowLen · row ·
00 · int64 LATEST_TIMESTAMP · 04 (Put) · value · 00 (MVCC)``.

Writing streams: ``HFileWriter(sink=f)`` writes each data block to the binary file ``f`` as
soon as it fills, and keeps only the cells of the block being filled, the block index (first
row, offset and size of each block), the meta blocks and the file info; ``close()`` then writes
the meta blocks, the load-on-open section and the trailer. ``BaseHFileWriter`` does the same
for a metadata-table base file (its bloom filter grows key by key), so a compaction writes a
base file of any size in the memory of one block. Without a sink the file is built in memory
and ``finish()`` returns its bytes.

Byte-level choices, made so that a re-encoding of a Hudi 1.1 file is byte-identical to it:
gzip members carry Java's header (no mtime, XFL 0, OS 0) over zlib level 6; file-info entries
and meta blocks come in ``java.util.HashMap`` iteration order; trailer field 3 is the sum of the
uncompressed data-block sizes, as Hudi 1.1.1 wrote it. Two deliberate deviations keep every
reader happy where Hudi's writer would not:

- hudi-rs derives the checksum length from the block size, not from the header's data-size
  field; for some compressed lengths the two disagree and it would cut the gzip stream short.
  Such a block gets a gzip FEXTRA pad that moves it out of that window.
- Root-index key lengths are read as Hadoop VInts by Java and as protobuf varints by hudi-rs;
  the encodings agree below 128 only. Index keys therefore stay under 126 row bytes: a longer
  first row is indexed by a short prefix that still sorts above the previous block (readers
  treat index keys as lower bounds, as they must for HBase's shortened keys), and a block is
  never cut where no such prefix exists.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import BinaryIO

from hoodied.hoodie.bloom import (
    DEFAULT_FPP,
    DEFAULT_MAX_ENTRIES,
    MDT_NUM_ENTRIES,
    BloomFilter,
    BloomFilterType,
)
from hoodied.hoodie.hfile.reader import (
    CODEC_GZ,
    CODEC_NONE,
    DATA_MAGIC,
    FILE_INFO_KV_VERSION,
    FILE_INFO_LAST_KEY,
    FILE_INFO_MAGIC,
    FILE_INFO_MAX_MEMSTORE_TS,
    FILE_INFO_SCHEMA,
    META_MAGIC,
    PBUF_MAGIC,
    ROOT_INDEX_MAGIC,
    TRAILER_MAGIC,
    TRAILER_SIZE,
)

__all__ = [
    "BLOOM_BATCH",
    "BLOOM_META_BLOCK",
    "BaseHFileWriter",
    "BYTES_PER_CHECKSUM",
    "COMPARATOR_CLASS",
    "DEFAULT_BLOCK_SIZE",
    "FILE_INFO_AVG_KEY_LEN",
    "FILE_INFO_AVG_VALUE_LEN",
    "FILE_INFO_BLOOM_TYPE",
    "FILE_INFO_CREATE_TIME",
    "FILE_INFO_MAX_KEY",
    "FILE_INFO_MIN_KEY",
    "HFileWriter",
    "encode_base_hfile",
    "encode_block",
    "encode_cell",
    "encode_log_block_hfile",
    "java_hashmap_order",
]

#: ``hoodie.hfile.block.size`` and the log-block HFile block size (both 1 MiB).
DEFAULT_BLOCK_SIZE = 1 << 20
BYTES_PER_CHECKSUM = 16384
COMPARATOR_CLASS = "org.apache.hudi.io.storage.HoodieHBaseKVComparator"
BLOOM_META_BLOCK = "bloomFilter"
FILE_INFO_BLOOM_TYPE = b"bloomFilterTypeCode"
FILE_INFO_MIN_KEY = b"minRecordKey"
FILE_INFO_MAX_KEY = b"maxRecordKey"
FILE_INFO_AVG_KEY_LEN = b"hfile.AVG_KEY_LEN"
FILE_INFO_AVG_VALUE_LEN = b"hfile.AVG_VALUE_LEN"
FILE_INFO_CREATE_TIME = b"hfile.CREATE_TIME_TS"

_HEADER = struct.Struct(">8siiqbii")
_HEADER_SIZE = _HEADER.size
_CHECKSUM_NULL = 0
_LATEST_TIMESTAMP = (1 << 63) - 1
_KEY_TYPE_PUT = 4
#: Longest row an index entry may carry: int16 + row must stay a one-byte length (< 128).
_MAX_INDEX_ROW = 125
_MAX_ROW = 0x7FFF
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00"  # as java.util.zip.GZIPOutputStream
_GZIP_LEVEL = 6  # java.util.zip.Deflater.DEFAULT_COMPRESSION


# --- encodings ------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint; negative int64 values as their 64-bit two's complement."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _hadoop_vint(value: int) -> bytes:
    """Hadoop ``WritableUtils.writeVLong`` (what index readers decode)."""
    if -112 <= value <= 127:
        return struct.pack(">b", value)
    marker = -112
    if value < 0:
        value = ~value
        marker = -120
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return struct.pack(">b", marker - len(body)) + body


def _proto_varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _proto_bytes_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _java_string_hash(text: str) -> int:
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """``keys`` (in insertion order) as a ``new java.util.HashMap<String, _>()`` iterates them.

    16 buckets, doubled whenever the size passes 3/4 of them. Hudi keeps file-info entries,
    meta blocks and the ``files`` partition's maps in such HashMaps; imitating their order makes
    re-encodings byte-identical (readers do not care). Tree bins (8+ colliding keys in a table
    of 64+ buckets) are not modelled.
    """
    ordered = list(dict.fromkeys(keys))
    capacity = 16
    while len(ordered) > int(capacity * 0.75):
        capacity *= 2

    def bucket(key: str) -> int:
        h = _java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(ordered, key=bucket)  # stable: insertion order within a bucket


def _gzip(payload: bytes, pad: int = 0) -> bytes:
    """One gzip member as Java writes it; ``pad`` > 0 adds an FEXTRA field of that many bytes."""
    deflater = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, 8)
    body = deflater.compress(payload) + deflater.flush()
    tail = struct.pack("<II", zlib.crc32(payload), len(payload) & 0xFFFFFFFF)
    if pad <= 0:
        return _GZIP_HEADER + body + tail
    # FLG.FEXTRA; one subfield "HD" of (pad - 6) zero bytes; XLEN counts the subfield.
    extra = b"HD" + struct.pack("<H", pad - 6) + bytes(pad - 6)
    header = b"\x1f\x8b\x08\x04\x00\x00\x00\x00\x00\x00" + struct.pack("<H", len(extra)) + extra
    return header + body + tail


def _checksum_bytes(size_with_header: int) -> int:
    return 4 * -(-size_with_header // BYTES_PER_CHECKSUM)


def _readers_agree(stored_len: int) -> bool:
    """Whether a reader recomputing the checksum length from the on-disk size gets ours."""
    with_header = _HEADER_SIZE + stored_len
    ours = _checksum_bytes(with_header)
    return _checksum_bytes(with_header + ours) == ours


def _compress(payload: bytes, codec: int) -> bytes:
    if codec == CODEC_NONE:
        return payload
    stored = _gzip(payload)
    pad = 6
    while not _readers_agree(len(stored)):
        stored = _gzip(payload, pad)
        pad += 1
    return stored


def encode_block(magic: bytes, payload: bytes, codec: int) -> bytes:
    """One block: header, compressed payload, zero (NULL) checksum area."""
    stored = _compress(payload, codec)
    with_header = _HEADER_SIZE + len(stored)
    checksums = _checksum_bytes(with_header)
    header = _HEADER.pack(
        magic, len(stored) + checksums, len(payload), -1, _CHECKSUM_NULL, BYTES_PER_CHECKSUM, with_header
    )
    return header + stored + bytes(checksums)


def encode_cell(row: bytes, value: bytes) -> bytes:
    """A KeyValue cell with an empty family and qualifier, latest timestamp, Put, MVCC 0."""
    return b"".join(
        (
            struct.pack(">iih", len(row) + 12, len(value), len(row)),
            row,
            struct.pack(">bqb", 0, _LATEST_TIMESTAMP, _KEY_TYPE_PUT),
            value,
            b"\x00",
        )
    )


def _index_row(row: bytes, previous_last: bytes | None) -> bytes | None:
    """The row to index a block starting at ``row`` by, or None when none fits (see module doc)."""
    if len(row) <= _MAX_INDEX_ROW:
        return row
    # Cut only at UTF-8 character boundaries: Java compares index keys as strings.
    cuts = [n for n in range(1, _MAX_INDEX_ROW + 1) if row[n] & 0xC0 != 0x80]
    if previous_last is None:
        return row[: cuts[-1]]  # first block: the longest prefix that fits
    # later blocks: the shortest prefix above the previous block's last row (HBase does the same)
    return next((row[:n] for n in cuts if row[:n] > previous_last), None)


# --- the writer -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _BlockRef:
    index_row: bytes
    offset: int
    size: int


class HFileWriter:
    """Write one HFile: ``append`` cells in row order, then ``finish()`` (in memory: the bytes)
    or ``close()`` (to ``sink``: the size written).

    Rows must be non-decreasing (unsigned byte order); equal rows are allowed here and always
    land in the same block. ``create_time_ms`` fixes ``hfile.CREATE_TIME_TS`` (default: now).
    ``sink``: a binary file the blocks are written to as they fill (the caller closes it).
    """

    def __init__(
        self,
        *,
        block_size: int = DEFAULT_BLOCK_SIZE,
        codec: int = CODEC_GZ,
        create_time_ms: int | None = None,
        sink: BinaryIO | None = None,
    ) -> None:
        if codec not in (CODEC_GZ, CODEC_NONE):
            raise ValueError(f"HFile codec {codec} is not supported for writing (GZ=1, NONE=2)")
        if block_size <= 0:
            raise ValueError(f"HFile block size must be positive, got {block_size}")
        self.block_size = block_size
        self.codec = codec
        self.create_time_ms = int(time.time() * 1000) if create_time_ms is None else create_time_ms
        self._sink = sink
        self._out: list[bytes] = []
        self._offset = 0
        self._blocks: list[_BlockRef] = []
        self._cells: list[bytes] = []
        self._block_bytes = 0
        self._block_first: bytes | None = None
        self._block_index_row: bytes | None = None
        self._last_row: bytes | None = None
        self._entries = 0
        self._row_bytes = 0
        self._value_bytes = 0
        self._uncompressed_data = 0
        self._meta: dict[str, bytes] = {}
        # Hudi's writer puts MAX_MEMSTORE_TS_KEY in first; the position matters for HashMap order.
        self._file_info: dict[bytes, bytes] = {FILE_INFO_MAX_MEMSTORE_TS: struct.pack(">q", 0)}
        self._finished = False

    @property
    def entry_count(self) -> int:
        return self._entries

    def append(self, row: bytes | str, value: bytes) -> None:
        row = row.encode("utf-8") if isinstance(row, str) else bytes(row)
        if len(row) > _MAX_ROW:
            raise ValueError(f"HFile row of {len(row)} bytes is longer than {_MAX_ROW}")
        if self._finished:
            raise ValueError("HFile writer is already finished")
        last = self._last_row
        if last is not None and row < last:
            raise ValueError(f"HFile rows must be appended in order: {row!r} after {last!r}")
        cell = encode_cell(row, value)
        if self._cells and row != last and self._block_bytes + len(cell) > self.block_size:
            # Cut here only if the new block can get a short index key (module doc).
            index_row = _index_row(row, last)
            if index_row is not None:
                self._flush_data_block()
                self._block_index_row = index_row
        if not self._cells and self._block_index_row is None:
            self._block_index_row = _index_row(row, None)
        self._cells.append(cell)
        self._block_bytes += len(cell)
        self._last_row = row
        self._entries += 1
        self._row_bytes += len(row)
        self._value_bytes += len(value)

    def add_meta_block(self, name: str, payload: bytes) -> None:
        self._meta[name] = bytes(payload)

    def set_file_info(self, name: str | bytes, value: bytes) -> None:
        key = name.encode("utf-8") if isinstance(name, str) else bytes(name)
        self._file_info[key] = bytes(value)

    @property
    def last_row(self) -> bytes | None:
        return self._last_row

    def finish(self) -> bytes:
        """Write the meta blocks, load-on-open section and trailer; return the whole file."""
        if self._sink is not None:
            raise ValueError("HFile writer streams to a sink: close() it")
        self._write_tail()
        data = b"".join(self._out)
        self._out = [data]
        return data

    def close(self) -> int:
        """Write the meta blocks, load-on-open section and trailer; return the file's size."""
        self._write_tail()
        return self._offset

    def _write_tail(self) -> None:
        if self._finished:
            raise ValueError("HFile writer is already finished")
        self._finished = True
        self._flush_data_block()
        meta_entries = []
        for name in java_hashmap_order(self._meta):
            block = encode_block(META_MAGIC, self._meta[name], self.codec)
            meta_entries.append((name.encode("utf-8"), self._offset, len(block)))
            self._write(block)

        load_on_open = self._offset
        root = b"".join(
            struct.pack(">qi", b.offset, b.size)
            + _hadoop_vint(len(b.index_row) + 2)
            + struct.pack(">h", len(b.index_row))
            + b.index_row
            for b in self._blocks
        )
        self._write(encode_block(ROOT_INDEX_MAGIC, root, self.codec))
        meta_index = b"".join(
            struct.pack(">qi", off, size) + _hadoop_vint(len(name)) + name for name, off, size in meta_entries
        )
        self._write(encode_block(ROOT_INDEX_MAGIC, meta_index, self.codec))
        file_info_offset = self._offset
        self._write(encode_block(FILE_INFO_MAGIC, self._file_info_payload(), self.codec))

        trailer = b"".join(
            (
                _proto_varint_field(1, file_info_offset),
                _proto_varint_field(2, load_on_open),
                _proto_varint_field(3, self._uncompressed_data),
                _proto_varint_field(5, len(self._blocks)),
                _proto_varint_field(6, len(meta_entries)),
                _proto_varint_field(7, self._entries),
                _proto_varint_field(8, 1),
                _proto_varint_field(9, self._blocks[0].offset if self._blocks else -1),
                _proto_varint_field(10, self._blocks[-1].offset if self._blocks else 0),
                _proto_bytes_field(11, COMPARATOR_CLASS.encode("ascii")),
                _proto_varint_field(12, self.codec),
            )
        )
        head = TRAILER_MAGIC + _varint(len(trailer)) + trailer
        self._write(head + bytes(TRAILER_SIZE - 4 - len(head)) + b"\x00\x00\x00\x03")

    # internals ---------------------------------------------------------------------------------

    def _write(self, chunk: bytes) -> None:
        if self._sink is not None:
            self._sink.write(chunk)
        else:
            self._out.append(chunk)
        self._offset += len(chunk)

    def _flush_data_block(self) -> None:
        if not self._cells:
            return
        payload = b"".join(self._cells)
        block = encode_block(DATA_MAGIC, payload, self.codec)
        assert self._block_index_row is not None
        self._blocks.append(_BlockRef(self._block_index_row, self._offset, len(block)))
        self._uncompressed_data += len(payload)
        self._write(block)
        self._cells = []
        self._block_bytes = 0
        self._block_index_row = None

    def _file_info_payload(self) -> bytes:
        info = self._file_info
        n = self._entries
        last = self._last_row
        info[FILE_INFO_LAST_KEY] = struct.pack(">h", len(last)) + last if last else b""
        info[FILE_INFO_AVG_KEY_LEN] = struct.pack(">i", self._row_bytes // n if n else 0)
        info[FILE_INFO_CREATE_TIME] = struct.pack(">q", self.create_time_ms)
        info[FILE_INFO_AVG_VALUE_LEN] = struct.pack(">i", self._value_bytes // n if n else 0)
        info.setdefault(FILE_INFO_KV_VERSION, struct.pack(">i", 1))
        names = {k.decode("utf-8"): k for k in info}
        pairs = b"".join(
            _proto_bytes_field(1, _proto_bytes_field(1, names[k]) + _proto_bytes_field(2, info[names[k]]))
            for k in java_hashmap_order(names)
        )
        return PBUF_MAGIC + _varint(len(pairs)) + pairs


# --- Hudi entry points ----------------------------------------------------------------------------


def _sorted_unique(cells: Iterable[tuple[str | bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Cells sorted by row bytes; a duplicate row is an error (as ``HoodieDuplicateKeyException``)."""
    rows = sorted(
        ((r.encode("utf-8") if isinstance(r, str) else bytes(r), v) for r, v in cells), key=lambda c: c[0]
    )
    for (a, _), (b, _) in zip(rows, rows[1:], strict=False):
        if a == b:
            raise ValueError(f"duplicate HFile row {a.decode('utf-8', 'replace')!r}")
    return rows


#: Keys hashed into the bloom filter per batch: vectorised, and its ``n x hashes`` int64
#: position arrays stay small (about a quarter MiB each).
BLOOM_BATCH = 1024


class BaseHFileWriter:
    """A metadata-table base file (``<fileId>_<token>_<instant>.hfile``), written row by row.

    Adds what ``HoodieAvroHFileWriter`` adds: file info ``schema``, ``minRecordKey``,
    ``maxRecordKey``, ``bloomFilterTypeCode`` and the ``bloomFilter`` meta block (a DYNAMIC_V0
    filter over the row keys, 10000 entries per row and fpp 1e-9 as Hudi 1.1 sizes it). Rows
    must come strictly increasing (a repeated row is ``HoodieDuplicateKeyException`` in Hudi);
    keys go into the filter in that order, as Hudi adds them. ``sink``: see ``HFileWriter``.
    """

    def __init__(
        self,
        schema_json: str,
        *,
        bloom_num_entries: int = MDT_NUM_ENTRIES,
        bloom_fpp: float = DEFAULT_FPP,
        bloom_max_entries: int = DEFAULT_MAX_ENTRIES,
        block_size: int = DEFAULT_BLOCK_SIZE,
        create_time_ms: int | None = None,
        sink: BinaryIO | None = None,
    ) -> None:
        self._hfile = HFileWriter(block_size=block_size, create_time_ms=create_time_ms, sink=sink)
        self._hfile.set_file_info(FILE_INFO_SCHEMA, schema_json.encode("utf-8"))
        self.bloom = BloomFilter.create(
            bloom_num_entries, bloom_fpp, BloomFilterType.DYNAMIC_V0, bloom_max_entries
        )
        self._pending: list[str] = []
        self._first: bytes | None = None

    @property
    def entry_count(self) -> int:
        return self._hfile.entry_count

    def append(self, row: bytes | str, value: bytes) -> None:
        raw = row.encode("utf-8") if isinstance(row, str) else bytes(row)
        last = self._hfile.last_row
        if last is not None and raw <= last:
            if raw == last:
                raise ValueError(f"duplicate HFile row {raw.decode('utf-8', 'replace')!r}")
            raise ValueError(f"HFile rows must be appended in order: {raw!r} after {last!r}")
        key = raw.decode("utf-8")
        self._hfile.append(raw, value)
        if self._first is None:
            self._first = raw
        self._pending.append(key)
        if len(self._pending) >= BLOOM_BATCH:
            self._flush_bloom()

    def _flush_bloom(self) -> None:
        if self._pending:
            self.bloom.add_keys(self._pending)
            self._pending = []

    def _add_tail(self) -> None:
        self._flush_bloom()
        last = self._hfile.last_row
        self._hfile.set_file_info(FILE_INFO_MIN_KEY, self._first or b"")
        self._hfile.set_file_info(FILE_INFO_MAX_KEY, last or b"")
        self._hfile.set_file_info(FILE_INFO_BLOOM_TYPE, BloomFilterType.DYNAMIC_V0.value.encode("ascii"))
        self._hfile.add_meta_block(BLOOM_META_BLOCK, self.bloom.serialize().encode("ascii"))

    def finish(self) -> bytes:
        """The whole file (in-memory writer)."""
        self._add_tail()
        return self._hfile.finish()

    def close(self) -> int:
        """Finish the file in the sink; returns its size."""
        self._add_tail()
        return self._hfile.close()


def encode_base_hfile(
    cells: Iterable[tuple[str | bytes, bytes]] | Mapping[str, bytes],
    schema_json: str,
    *,
    bloom_num_entries: int = MDT_NUM_ENTRIES,
    bloom_fpp: float = DEFAULT_FPP,
    bloom_max_entries: int = DEFAULT_MAX_ENTRIES,
    block_size: int = DEFAULT_BLOCK_SIZE,
    create_time_ms: int | None = None,
) -> bytes:
    """A metadata-table base file holding ``cells`` (see ``BaseHFileWriter``), built in memory.

    ``cells`` are (row key, schemaless Avro value) pairs in any order; rows must be unique.
    """
    rows = _sorted_unique(cells.items() if isinstance(cells, Mapping) else cells)
    writer = BaseHFileWriter(
        schema_json,
        bloom_num_entries=bloom_num_entries,
        bloom_fpp=bloom_fpp,
        bloom_max_entries=bloom_max_entries,
        block_size=block_size,
        create_time_ms=create_time_ms,
    )
    for row, value in rows:
        writer.append(row, value)
    return writer.finish()


def encode_log_block_hfile(
    cells: Iterable[tuple[str | bytes, bytes]] | Mapping[str, bytes],
    schema_json: str,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    create_time_ms: int | None = None,
) -> bytes:
    """The content of an HFILE_DATA log block (``HFileUtils.serializeRecordsToLogBlock``).

    Same cells as a base file, no meta blocks, file info ``schema`` only (plus the HFile's own).
    """
    rows = _sorted_unique(cells.items() if isinstance(cells, Mapping) else cells)
    writer = HFileWriter(block_size=block_size, create_time_ms=create_time_ms)
    writer.set_file_info(FILE_INFO_SCHEMA, schema_json.encode("utf-8"))
    for row, value in rows:
        writer.append(row, value)
    return writer.finish()
