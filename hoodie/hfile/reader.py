"""HFile v3 reader: the file format of metadata-table base files and HFILE_DATA log blocks.

This module owns the byte level of HFile version 3 as two writers produce it: HBase 2.4's
``HFile.Writer`` (table version 8, CRC32C checksums, possibly multi-level indexes) and Hudi's own
``HFileWriterImpl`` (table version 9, NULL checksums, single-level index). Layout::

    data blocks "DATABLK*" [leaf index "IDXLEAF2"]... [meta blocks "METABLKc"]... [IDXINTE2]...
    load-on-open: root data index "IDXROOT2" · meta index "IDXROOT2" · file info "FILEINF2"
    trailer: last 4096 bytes, "TRABLK\\"$" · varint length · TrailerProto · padding · version word

Every block: a 33-byte big-endian header (magic, on-disk size without header, uncompressed size,
previous block offset, checksum type, bytes per checksum, on-disk data size with header), the
payload compressed with the file's codec, then 4 checksum bytes per ``bytes_per_checksum`` chunk.
A cell is ``int32 keyLen · int32 valueLen · key · value [· int16 tagsLen · tags] [· vlong mvcc]``
where the key is an HBase KeyValue key (``int16 rowLen · row · family · qualifier · ts · type``);
Hudi only uses the row. Values of metadata-table cells are schemaless Avro records (see
``HFileReader.records``).

Reading is block by block: the trailer, then the load-on-open section (root and meta indexes,
file info) are read when the reader opens, every other block (leaf index, data, meta) only when
asked for, so a reader over a file in storage (``HFileReader.open``) holds the block index and
one block at a time, never the whole file (record-index base files grow to gigabytes). A reader
over bytes already in memory (``HFileReader(data, where)``) works the same way. Cells come in
file order: sorted by row bytes in every HFile Hudi writes (``HoodieHFileDataBlock`` sorts a
block's records by key before writing them, base files are written from sorted records, and
HBase's ``HFile.Writer`` refuses a key below the previous one).
Anything malformed raises ``HoodieFormatError`` naming ``where``; valid files using a feature
this reader lacks (LZ4, Snappy, data block encodings...) raise ``UnsupportedTableError``.
"""

from __future__ import annotations

import bisect
import gzip
import io
import json
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import fastavro
from fastavro.types import Schema

from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError

if TYPE_CHECKING:
    from hoodied.hoodie.storage import Storage

__all__ = [
    "CODEC_GZ",
    "CODEC_NAMES",
    "CODEC_NONE",
    "DATA_MAGIC",
    "ENCODED_DATA_MAGIC",
    "FILE_INFO_DATA_BLOCK_ENCODING",
    "FILE_INFO_KV_VERSION",
    "FILE_INFO_LAST_KEY",
    "FILE_INFO_MAGIC",
    "FILE_INFO_MAX_MEMSTORE_TS",
    "FILE_INFO_MAX_TAGS_LEN",
    "FILE_INFO_SCHEMA",
    "FILE_INFO_TAGS_COMPRESSED",
    "HEADER_SIZE",
    "INTERMEDIATE_INDEX_MAGIC",
    "LEAF_INDEX_MAGIC",
    "META_MAGIC",
    "PBUF_MAGIC",
    "ROOT_INDEX_MAGIC",
    "TRAILER_MAGIC",
    "TRAILER_SIZE",
    "HFileReader",
    "Trailer",
    "parse_avro_schema",
    "row_of_key",
]

TRAILER_SIZE = 4096
HEADER_SIZE = 33
TRAILER_MAGIC = b'TRABLK"$'
DATA_MAGIC = b"DATABLK*"
ENCODED_DATA_MAGIC = b"DATABLKE"
META_MAGIC = b"METABLKc"
ROOT_INDEX_MAGIC = b"IDXROOT2"
INTERMEDIATE_INDEX_MAGIC = b"IDXINTE2"
LEAF_INDEX_MAGIC = b"IDXLEAF2"
FILE_INFO_MAGIC = b"FILEINF2"
PBUF_MAGIC = b"PBUF"

#: Trailer field 12 (``io.compress.CompressionCodec`` ordinals); absent means NONE.
CODEC_NAMES = {0: "LZO", 1: "GZ", 2: "NONE", 3: "SNAPPY", 4: "LZ4", 5: "BZIP2", 6: "ZSTD"}
CODEC_GZ = 1
CODEC_NONE = 2

FILE_INFO_SCHEMA = b"schema"
FILE_INFO_LAST_KEY = b"hfile.LASTKEY"
FILE_INFO_KV_VERSION = b"KEY_VALUE_VERSION"
FILE_INFO_MAX_MEMSTORE_TS = b"MAX_MEMSTORE_TS_KEY"
FILE_INFO_MAX_TAGS_LEN = b"hfile.MAX_TAGS_LEN"
FILE_INFO_TAGS_COMPRESSED = b"hfile.TAGS_COMPRESSED"
FILE_INFO_DATA_BLOCK_ENCODING = b"DATA_BLOCK_ENCODING"

_HEADER = struct.Struct(">8siiqbii")
_CHECKSUM_NULL, _CHECKSUM_CRC32, _CHECKSUM_CRC32C = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Trailer:
    """The fixed-size trailer (``TrailerProto`` fields by number, plus the version word)."""

    major_version: int
    minor_version: int
    file_info_offset: int
    load_on_open_offset: int
    data_index_count: int
    meta_index_count: int
    entry_count: int
    num_data_index_levels: int
    first_data_block_offset: int
    last_data_block_offset: int
    comparator: str
    codec: int


@dataclass(frozen=True, slots=True)
class _IndexEntry:
    key: bytes  # data index: the row of the (possibly shortened) first key; meta index: the name
    offset: int
    size: int  # on-disk size with header and checksum bytes


@dataclass(frozen=True, slots=True)
class _Block:
    magic: bytes
    offset: int
    on_disk_size: int  # header + payload + checksums
    payload: bytes  # decompressed


# --- small decoders ------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    """Protobuf base-128 varint (unsigned 64-bit)."""
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise HoodieFormatError(f"{where}: truncated protobuf varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode_proto(buf: bytes, where: str) -> dict[int, list[int | bytes]]:
    """A proto2 message as ``{field number: [values]}`` (varints as ints, length-delimited as bytes)."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos, where)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos, where)
        elif wire == 2:
            length, pos = _varint(buf, pos, where)
            if pos + length > len(buf):
                raise HoodieFormatError(f"{where}: truncated protobuf field {number}")
            value, pos = buf[pos : pos + length], pos + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(buf):
                raise HoodieFormatError(f"{where}: truncated protobuf field {number}")
            value, pos = int.from_bytes(buf[pos : pos + size], "little"), pos + size
        else:
            raise HoodieFormatError(f"{where}: bad protobuf wire type {wire} for field {number}")
        fields.setdefault(number, []).append(value)
    return fields


def _vlong(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    """Hadoop ``WritableUtils`` VLong/VInt (not a protobuf varint): used for index key lengths."""
    if pos >= len(buf):
        raise HoodieFormatError(f"{where}: truncated variable-length integer")
    first = struct.unpack_from(">b", buf, pos)[0]
    if first >= -112:
        return first, pos + 1
    negative = first < -120
    size = (-119 - first) if negative else (-111 - first)  # total bytes including the marker
    if pos + size > len(buf):
        raise HoodieFormatError(f"{where}: truncated variable-length integer")
    value = int.from_bytes(buf[pos + 1 : pos + size], "big")
    return (~value if negative else value), pos + size


@lru_cache(maxsize=1)
def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


def _crc32c(data: bytes) -> int:
    # Pure Python: metadata HFiles are kilobytes, so a table-driven loop is fast enough.
    table = _crc32c_table()
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def row_of_key(key: bytes) -> bytes:
    """The row part of an HBase KeyValue key (or of a Hudi index key ``int16 rowLen · row``)."""
    if len(key) < 2:
        return key
    n = int.from_bytes(key[:2], "big")
    return key[2 : 2 + n]


@lru_cache(maxsize=16)
def parse_avro_schema(schema_json: str) -> Schema:
    """Parse (and cache) a writer schema; every metadata HFile embeds the same few strings."""
    return fastavro.parse_schema(json.loads(schema_json))


# --- the reader ----------------------------------------------------------------------------------


class _Source:
    """Random access to the bytes of one HFile: ``read(offset, length)`` and ``size``."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, where: str) -> None:
        self._read = read
        self.size = size
        self.where = where

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset`` (the caller keeps the range inside the file)."""
        data = self._read(offset, length) if length > 0 else b""
        if len(data) != length:
            raise HoodieFormatError(
                f"{self.where}: read {len(data)} bytes at offset {offset}, expected {length}"
                " (the file changed while reading?)"
            )
        return data


class HFileReader:
    """Read one HFile v3, block by block.

    ``HFileReader(data, where)`` reads bytes in memory; ``HFileReader.open(storage, path)``
    reads a file in storage by ranges (``HFileReader.from_ranges`` for any ranged source, such
    as the content of a log block inside its log file). ``where`` names the file in error
    messages (a relative path, or ``log@offset`` for a log block). ``verify_checksums`` checks
    HBase CRC32/CRC32C block checksums when present (Hudi's own reader skips them; checking
    them catches bit rot in uncompressed blocks).
    """

    def __init__(self, data: bytes, where: str, *, verify_checksums: bool = True) -> None:
        view = data

        def read(offset: int, length: int) -> bytes:
            return view[offset : offset + length]

        self._open(_Source(read, len(data), where), verify_checksums)

    @classmethod
    def from_ranges(
        cls, read_range: Callable[[int, int], bytes], size: int, where: str, *, verify_checksums: bool = True
    ) -> HFileReader:
        """A reader over ``size`` bytes that ``read_range(offset, length)`` returns piece by piece."""
        reader = cls.__new__(cls)
        reader._open(_Source(read_range, size, where), verify_checksums)
        return reader

    @classmethod
    def open(
        cls, storage: Storage, path: str, *, where: str | None = None, verify_checksums: bool = True
    ) -> HFileReader:
        """A reader over file ``path`` of ``storage``, reading one block per ``read_range`` call."""

        def read(offset: int, length: int) -> bytes:
            return storage.read_range(path, offset, length)

        return cls.from_ranges(read, storage.size(path), where or path, verify_checksums=verify_checksums)

    def _open(self, source: _Source, verify_checksums: bool) -> None:
        self.where = where = source.where
        self._src = source
        self._verify = verify_checksums
        self._tail_start = source.size
        self._tail = b""
        self.trailer = self._read_trailer()
        t = self.trailer
        if t.codec not in (CODEC_GZ, CODEC_NONE):
            name = CODEC_NAMES.get(t.codec, f"#{t.codec}")
            raise UnsupportedTableError(
                f"{where}: HFile compression codec {name} is not supported (GZ, NONE)"
            )
        if not 0 <= t.load_on_open_offset <= source.size - TRAILER_SIZE:
            raise HoodieFormatError(
                f"{where}: load-on-open offset {t.load_on_open_offset} is outside the file"
            )
        # The load-on-open section (root index, meta index, file info) in one read.
        self._tail_start = t.load_on_open_offset
        self._tail = source.read(t.load_on_open_offset, source.size - TRAILER_SIZE - t.load_on_open_offset)
        root = self._read_block(t.load_on_open_offset, expect=(ROOT_INDEX_MAGIC,))
        root_entries = self._parse_root_index(root.payload, t.data_index_count, is_meta=False)
        meta = self._read_block(root.offset + root.on_disk_size, expect=(ROOT_INDEX_MAGIC,))
        self._meta_index = {
            e.key: e for e in self._parse_root_index(meta.payload, t.meta_index_count, is_meta=True)
        }
        info_offset = t.file_info_offset or meta.offset + meta.on_disk_size
        self.file_info: dict[bytes, bytes] = self._parse_file_info(
            self._read_block(info_offset, expect=(FILE_INFO_MAGIC,)).payload
        )
        self._check_features()
        self._data_index = self._resolve_levels(root_entries, t.num_data_index_levels)
        self._index_keys = [e.key for e in self._data_index]

    # public surface ------------------------------------------------------------------------------

    @property
    def entry_count(self) -> int:
        return self.trailer.entry_count

    @property
    def data_block_count(self) -> int:
        return len(self._data_index)

    @property
    def schema_json(self) -> str | None:
        raw = self.file_info.get(FILE_INFO_SCHEMA)
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise HoodieFormatError(f"{self.where}: file info 'schema' is not UTF-8") from None

    @property
    def last_row(self) -> bytes | None:
        raw = self.file_info.get(FILE_INFO_LAST_KEY)
        return row_of_key(raw) if raw else None

    def meta_block_names(self) -> list[str]:
        return [k.decode("utf-8", "replace") for k in self._meta_index]

    def meta_block(self, name: str | bytes) -> bytes | None:
        """The (decompressed) payload of meta block ``name``, e.g. ``bloomFilter``; None when absent."""
        key = name.encode("utf-8") if isinstance(name, str) else name
        entry = self._meta_index.get(key)
        if entry is None:
            return None
        return self._read_block(entry.offset, expect=(META_MAGIC,), size=entry.size).payload

    @property
    def file_size(self) -> int:
        return self._src.size

    def block_cells(self, i: int) -> list[tuple[bytes, bytes]]:
        """The cells of data block ``i`` (``0 <= i < data_block_count``) as ``(row, value)``."""
        return list(self._block_cells(i))

    def iter_cells(self) -> Iterator[tuple[bytes, bytes]]:
        """Every cell as ``(row, value)`` in file (key) order; checks the trailer's entry count."""
        seen = 0
        for i in range(len(self._data_index)):
            for cell in self._block_cells(i):
                seen += 1
                yield cell
        if seen != self.trailer.entry_count:
            raise HoodieFormatError(
                f"{self.where}: HFile holds {seen} cells but its trailer declares {self.trailer.entry_count}"
            )

    def get(self, row: bytes) -> bytes | None:
        """The value of the first cell whose row equals ``row`` (point lookup through the index)."""
        if not self._data_index:
            return None
        # Index keys are lower bounds (HBase may store a shortened "fake" key between the
        # previous block's last row and this block's first row), and equal rows might straddle
        # blocks: start in the last block whose index key is strictly below the row.
        start = max(bisect.bisect_left(self._index_keys, row) - 1, 0)
        for i in range(start, len(self._data_index)):
            if i > start and self._index_keys[i] > row:
                return None
            for cell_row, value in self._block_cells(i):
                if cell_row == row:
                    return value
                if cell_row > row:
                    return None
        return None

    def scan_rows(self, wanted: Iterable[bytes], *, prefix: bool = False) -> Iterator[tuple[bytes, bytes]]:
        """The cells whose row equals one of ``wanted`` (``prefix``: starts with one of them), in
        file order, each once, reading only the data blocks that can hold them, each block once.

        Rows are sorted, so the rows of one key (or of one prefix) are contiguous: each wanted
        item, in sorted order, starts at its block in the index (an index key is a lower bound of
        its block's rows, the same rule as ``get``) and stops at the first row past it. Memory:
        one data block.
        """
        targets: list[bytes] = []
        for t in sorted(set(wanted)):
            if not (prefix and targets and t.startswith(targets[-1])):  # covered by a shorter prefix
                targets.append(t)
        cached: tuple[int, list[tuple[bytes, bytes]]] | None = None
        keys = self._index_keys

        def past(row: bytes, target: bytes) -> bool:
            return row > target and not (prefix and row.startswith(target))

        for target in targets:
            if not keys:
                return
            first = max(bisect.bisect_left(keys, target) - 1, 0)
            if cached is not None:
                # blocks before the cached one hold rows <= its index key, below this target
                first = max(first, cached[0])
            for i in range(first, len(keys)):
                if i > first and past(keys[i], target):
                    break
                if cached is None or cached[0] != i:
                    cached = (i, list(self._block_cells(i)))
                done = False
                for row, value in cached[1]:
                    if row == target or (prefix and row.startswith(target)):
                        yield row, value
                    elif past(row, target):
                        done = True
                        break
                if done:
                    break

    def records(self, schema_json: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Cells decoded as schemaless Avro: ``(row key, record)``.

        The writer schema is ``schema_json`` (a log block's SCHEMA header) or else the file
        info ``schema``. Hudi blanks the record's ``key`` field before writing (the row is the
        key), so it is put back here.
        """
        text = schema_json or self.schema_json
        if not text:
            raise HoodieFormatError(f"{self.where}: HFile has no Avro schema (file info 'schema' is missing)")
        try:
            schema = parse_avro_schema(text)
        except (ValueError, KeyError, TypeError) as exc:
            raise HoodieFormatError(f"{self.where}: unparsable Avro schema ({exc})") from None
        for row, value in self.iter_cells():
            try:
                key = row.decode("utf-8")
            except UnicodeDecodeError:
                raise HoodieFormatError(f"{self.where}: row key {row!r} is not UTF-8") from None
            yield key, self.decode_value(value, schema, key)

    def decode_value(self, value: bytes, schema: Schema, key: str) -> dict[str, Any]:
        buf = io.BytesIO(value)
        try:
            record: dict[str, Any] = fastavro.schemaless_reader(buf, schema, None)  # type: ignore[assignment]
        except Exception as exc:  # fastavro raises assorted types on garbage
            raise HoodieFormatError(
                f"{self.where}: value of row {key!r} is not valid Avro ({type(exc).__name__}: {exc})"
            ) from None
        if buf.tell() != len(value):
            raise HoodieFormatError(
                f"{self.where}: value of row {key!r} has {len(value) - buf.tell()} bytes after the record"
            )
        if "key" in record:
            record["key"] = key
        return record

    # trailer, blocks, index --------------------------------------------------------------------

    def _read_trailer(self) -> Trailer:
        src, where = self._src, self.where
        if src.size < TRAILER_SIZE:
            raise HoodieFormatError(
                f"{where}: file of {src.size} bytes is too short for an HFile (trailer is {TRAILER_SIZE})"
            )
        raw = src.read(src.size - TRAILER_SIZE, TRAILER_SIZE)
        minor, major = raw[-4], int.from_bytes(raw[-3:], "big")
        if raw[:8] != TRAILER_MAGIC:
            raise HoodieFormatError(
                f"{where}: no HFile trailer (bad magic {raw[:8]!r} at {src.size - TRAILER_SIZE})"
            )
        if major != 3:
            raise UnsupportedTableError(f"{where}: HFile major version {major} is not supported (reads 3)")
        length, pos = _varint(raw, 8, where)
        if pos + length > TRAILER_SIZE - 4:
            raise HoodieFormatError(f"{where}: HFile trailer declares {length} bytes, more than it holds")
        f = _decode_proto(raw[pos : pos + length], f"{where} trailer")

        def num(n: int, default: int = 0) -> int:
            values = f.get(n)
            return _signed64(values[-1]) if values and isinstance(values[-1], int) else default

        comparator = f.get(11, [b""])[-1]
        if 2 not in f or 7 not in f:
            raise HoodieFormatError(f"{where}: HFile trailer lacks the load-on-open offset or entry count")
        return Trailer(
            major_version=major,
            minor_version=minor,
            file_info_offset=num(1),
            load_on_open_offset=num(2),
            data_index_count=num(5),
            meta_index_count=num(6),
            entry_count=num(7),
            num_data_index_levels=num(8, 1),
            first_data_block_offset=num(9, -1),
            last_data_block_offset=num(10, -1),
            comparator=comparator.decode("utf-8", "replace") if isinstance(comparator, bytes) else "",
            codec=num(12, CODEC_NONE),
        )

    def _block_bytes(self, offset: int, size: int | None, end_of_blocks: int) -> bytes:
        """The bytes of the block at ``offset`` (at least its header when it is in range)."""
        if offset >= self._tail_start:  # load-on-open blocks: already read
            start = offset - self._tail_start
            return self._tail[start : start + (size if size is not None else len(self._tail))]
        if size is not None and HEADER_SIZE <= size <= end_of_blocks - offset:
            return self._src.read(offset, size)  # one read when the index gives the size
        header = self._src.read(offset, HEADER_SIZE)
        on_disk = int.from_bytes(header[8:12], "big", signed=True)
        if on_disk < 0 or offset + HEADER_SIZE + on_disk > end_of_blocks:
            return header  # the checks of ``_read_block`` name the problem
        return header + self._src.read(offset + HEADER_SIZE, on_disk)

    def _read_block(self, offset: int, *, expect: tuple[bytes, ...], size: int | None = None) -> _Block:
        where = self.where
        end_of_blocks = self._src.size - TRAILER_SIZE
        if offset < 0 or offset + HEADER_SIZE > end_of_blocks:
            raise HoodieFormatError(f"{where}: HFile block at offset {offset} is outside the file")
        raw = self._block_bytes(offset, size, end_of_blocks)
        if len(raw) < HEADER_SIZE:
            raise HoodieFormatError(f"{where}: HFile block at offset {offset} is outside the file")
        magic, on_disk, uncompressed, _prev, ck_type, bytes_per_ck, data_with_header = _HEADER.unpack_from(
            raw, 0
        )
        if magic not in expect:
            if magic == ENCODED_DATA_MAGIC:
                raise UnsupportedTableError(
                    f"{where}: encoded HFile data blocks (DATABLKE) are not supported"
                )
            raise HoodieFormatError(
                f"{where}: expected HFile block {b'/'.join(expect).decode()} at offset {offset}, "
                f"found {magic!r}"
            )
        total = HEADER_SIZE + on_disk
        if on_disk < 0 or offset + total > end_of_blocks:
            raise HoodieFormatError(
                f"{where}: HFile block {magic.decode()} at offset {offset} is truncated "
                f"(declares {total} bytes, {end_of_blocks - offset} left before the trailer)"
            )
        if size is not None and size != total:
            raise HoodieFormatError(
                f"{where}: HFile block at offset {offset} is {total} bytes but the index says {size}"
            )
        if len(raw) < total:
            raw = raw + self._src.read(offset + len(raw), total - len(raw))
        if not HEADER_SIZE <= data_with_header <= total or bytes_per_ck <= 0:
            raise HoodieFormatError(f"{where}: HFile block at offset {offset} has an inconsistent header")
        stored = raw[HEADER_SIZE:data_with_header]
        if ck_type != _CHECKSUM_NULL:
            self._check_checksums(raw, offset, data_with_header, total, ck_type, bytes_per_ck)
        payload = self._decompress(stored, uncompressed, offset)
        return _Block(magic, offset, total, payload)

    def _check_checksums(
        self, raw: bytes, offset: int, covered: int, total: int, ck_type: int, chunk: int
    ) -> None:
        where = self.where
        chunks = -(-covered // chunk)
        if total - covered != 4 * chunks:
            raise HoodieFormatError(
                f"{where}: HFile block at offset {offset} has {total - covered} checksum bytes, "
                f"expected {4 * chunks}"
            )
        if not self._verify:
            return
        if ck_type not in (_CHECKSUM_CRC32, _CHECKSUM_CRC32C):
            raise UnsupportedTableError(f"{where}: HFile checksum type {ck_type} is not supported")
        crc = zlib.crc32 if ck_type == _CHECKSUM_CRC32 else _crc32c
        for i in range(chunks):
            start = i * chunk
            piece = raw[start : min(start + chunk, covered)]
            want = int.from_bytes(raw[covered + 4 * i : covered + 4 * i + 4], "big")
            if crc(piece) != want:
                raise HoodieFormatError(f"{where}: checksum mismatch in HFile block at offset {offset}")

    def _decompress(self, stored: bytes, uncompressed: int, offset: int) -> bytes:
        if self.trailer.codec == CODEC_NONE:
            payload = stored
        else:
            try:
                payload = gzip.decompress(stored)
            except (OSError, EOFError, zlib.error) as exc:
                raise HoodieFormatError(
                    f"{self.where}: HFile block at offset {offset} is not valid gzip ({exc})"
                ) from None
        if len(payload) != uncompressed:
            raise HoodieFormatError(
                f"{self.where}: HFile block at offset {offset} decompresses to {len(payload)} bytes, "
                f"header says {uncompressed}"
            )
        return payload

    def _parse_root_index(self, buf: bytes, count: int, *, is_meta: bool) -> list[_IndexEntry]:
        where = f"{self.where} (root index)"
        entries: list[_IndexEntry] = []
        pos = 0
        for _ in range(count):
            if pos + 12 > len(buf):
                raise HoodieFormatError(f"{where}: truncated after {len(entries)} of {count} entries")
            offset, size = struct.unpack_from(">qi", buf, pos)
            key_len, pos = _vlong(buf, pos + 12, where)
            if key_len < 0 or pos + key_len > len(buf):
                raise HoodieFormatError(f"{where}: entry {len(entries)} has a bad key length {key_len}")
            key = buf[pos : pos + key_len]
            pos += key_len
            entries.append(_IndexEntry(key if is_meta else row_of_key(key), offset, size))
        # HBase appends a 16-byte mid-key hint when the index has several levels; ignored.
        return entries

    def _parse_non_root_index(self, buf: bytes, offset: int) -> list[_IndexEntry]:
        where = f"{self.where} (index block at {offset})"
        if len(buf) < 4:
            raise HoodieFormatError(f"{where}: truncated")
        n = struct.unpack_from(">i", buf, 0)[0]
        base = 4 + 4 * (n + 1)
        if n < 0 or base > len(buf):
            raise HoodieFormatError(f"{where}: bad entry count {n}")
        rel = struct.unpack_from(f">{n + 1}i", buf, 4)
        entries = []
        for i in range(n):
            start, end = base + rel[i], base + rel[i + 1]
            if not start + 12 <= end <= len(buf):
                raise HoodieFormatError(f"{where}: entry {i} is out of bounds")
            block_offset, size = struct.unpack_from(">qi", buf, start)
            entries.append(_IndexEntry(row_of_key(buf[start + 12 : end]), block_offset, size))
        return entries

    def _resolve_levels(self, entries: list[_IndexEntry], levels: int) -> list[_IndexEntry]:
        """Walk intermediate and leaf index blocks down to the data-block entries."""
        if levels < 1:
            raise HoodieFormatError(f"{self.where}: HFile trailer declares {levels} data index levels")
        for level in range(levels - 1):
            last = level == levels - 2
            magic = LEAF_INDEX_MAGIC if last else INTERMEDIATE_INDEX_MAGIC
            below: list[_IndexEntry] = []
            for e in entries:
                block = self._read_block(e.offset, expect=(magic,), size=e.size)
                below.extend(self._parse_non_root_index(block.payload, e.offset))
            entries = below
        return entries

    def _parse_file_info(self, buf: bytes) -> dict[bytes, bytes]:
        where = f"{self.where} (file info)"
        if buf[:4] != PBUF_MAGIC:
            raise HoodieFormatError(f"{where}: missing PBUF magic")
        length, pos = _varint(buf, 4, where)
        if pos + length > len(buf):
            raise HoodieFormatError(f"{where}: declares {length} bytes, {len(buf) - pos} present")
        info: dict[bytes, bytes] = {}
        for pair in _decode_proto(buf[pos : pos + length], where).get(1, []):
            if not isinstance(pair, bytes):
                raise HoodieFormatError(f"{where}: bad map entry")
            kv = _decode_proto(pair, where)
            first, second = kv.get(1, [b""])[-1], kv.get(2, [b""])[-1]
            if not isinstance(first, bytes) or not isinstance(second, bytes):
                raise HoodieFormatError(f"{where}: bad map entry")
            info[first] = second
        return info

    def _check_features(self) -> None:
        info, where = self.file_info, self.where
        encoding = info.get(FILE_INFO_DATA_BLOCK_ENCODING, b"NONE")
        if encoding not in (b"NONE", b""):
            raise UnsupportedTableError(
                f"{where}: HFile data block encoding {encoding.decode()} is not supported"
            )
        if info.get(FILE_INFO_TAGS_COMPRESSED, b"\x00") not in (b"\x00", b""):
            raise UnsupportedTableError(f"{where}: compressed HFile cell tags are not supported")
        self._has_tags = FILE_INFO_MAX_TAGS_LEN in info
        kv_version = info.get(FILE_INFO_KV_VERSION)
        self._has_mvcc = kv_version is not None and int.from_bytes(kv_version, "big", signed=True) == 1

    def _block_cells(self, i: int) -> Iterator[tuple[bytes, bytes]]:
        entry = self._data_index[i]
        buf = self._read_block(entry.offset, expect=(DATA_MAGIC,), size=entry.size).payload
        where = f"{self.where} (data block at {entry.offset})"
        pos, end = 0, len(buf)
        while pos < end:
            if pos + 8 > end:
                raise HoodieFormatError(f"{where}: truncated cell at {pos}")
            key_len, value_len = struct.unpack_from(">ii", buf, pos)
            pos += 8
            if key_len < 12 or value_len < 0 or pos + key_len + value_len > end:
                raise HoodieFormatError(
                    f"{where}: cell at {pos - 8} has bad lengths ({key_len}, {value_len})"
                )
            row_len = int.from_bytes(buf[pos : pos + 2], "big")
            if row_len + 12 > key_len:
                raise HoodieFormatError(f"{where}: cell at {pos - 8} has row length {row_len} > key")
            row = buf[pos + 2 : pos + 2 + row_len]
            pos += key_len
            value = buf[pos : pos + value_len]
            pos += value_len
            if self._has_tags:
                if pos + 2 > end:
                    raise HoodieFormatError(f"{where}: truncated cell tags at {pos}")
                pos += 2 + int.from_bytes(buf[pos : pos + 2], "big")
            if self._has_mvcc:
                _, pos = _vlong(buf, pos, where)
            if pos > end:
                raise HoodieFormatError(f"{where}: cell runs past the end of the block")
            yield row, value
