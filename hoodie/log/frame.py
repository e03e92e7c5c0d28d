"""Hudi log files: block framing, headers and footers, reading block by block, writing.

A log file is a sequence of blocks; all integers are big-endian::

    block   = MAGIC "#HUDI#"            6 bytes
              block_length              int64: bytes after this field, through the trailing size
              format_version            int32 (1)
              block_type                int32 (BlockType)
              header                    metadata
              content_length            int64
              content                   content_length bytes
              footer                    metadata
              trailing_size             int64: bytes of the block before this field (= length + 6)
    metadata = count int32, then count x (key int32, value_length int32, UTF-8 value)

Corruption is judged as Apache Hudi's ``HoodieLogFileReader`` judges it: a block is corrupt
when its length runs past the end of the file, when the trailing size disagrees with the
length, or when the bytes right after it are neither the next block's magic nor the end of
the file. Hudi then scans from just after the corrupt block's magic for the next magic and
resumes there. ``read_log_blocks(..., skip_corrupt=True)`` does the same (and, where Hudi
would fail outright, also skips garbage before the first magic and a torn tail shorter than
a magic); by default every such problem raises a one-line ``HoodieFormatError``. Inner
inconsistencies of an otherwise well-framed block (header or content running past the
block) count as corruption too.

Memory: files are read through ``Storage.read_range`` in windows of at most 1 MiB; block
content is not read until ``LogBlock.content()`` is called, except for small files, which are
read whole in the first window anyway.
"""

from __future__ import annotations

import base64
import binascii
import logging
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from pyroaring import BitMap64

from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.storage import Storage

__all__ = [
    "LOG_FORMAT_VERSION",
    "MAGIC",
    "BlockType",
    "CommandType",
    "HeaderKey",
    "LogBlock",
    "decode_record_positions",
    "encode_block",
    "encode_command_block",
    "encode_metadata",
    "encode_record_positions",
    "read_log_blocks",
    "write_log_file",
]

log = logging.getLogger(__name__)

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_TWO_INTS = struct.Struct(">ii")
# format version, type, header count, content length, footer count, trailing size
_MIN_BLOCK_LENGTH = 4 + 4 + 4 + 8 + 4 + 8
_WINDOW = 1 << 20


class BlockType(IntEnum):
    """``HoodieLogBlockType``; the ordinal is what is stored."""

    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    """``HeaderMetadataType``; the ordinal is what is stored."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


class CommandType(IntEnum):
    """``HoodieCommandBlockTypeEnum``; stored as a decimal string in COMMAND_BLOCK_TYPE."""

    ROLLBACK = 0


@dataclass(frozen=True)
class LogBlock:
    """One well-formed block of a log file. ``content()`` reads its content on demand.

    ``header`` and ``footer`` are plain dicts (so blocks pickle); treat them as read-only.
    """

    path: str
    offset: int
    block_size: int  # bytes of the whole block, magic through trailing size
    block_type: BlockType
    format_version: int
    header: Mapping[HeaderKey, str]
    footer: Mapping[int, str]
    content_offset: int
    content_length: int
    storage: Storage = field(repr=False, compare=False)
    _content: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def where(self) -> str:
        """``"<path>: log block at offset <n>"``, the prefix of every error about this block."""
        return f"{self.path}: log block at offset {self.offset}"

    def content(self, storage: Storage | None = None) -> bytes:
        """The block's content bytes (read now unless the file was small enough to keep).

        ``storage`` defaults to the one the block was read from.
        """
        if self._content is not None:
            return self._content
        data = (storage or self.storage).read_range(self.path, self.content_offset, self.content_length)
        if len(data) != self.content_length:
            raise HoodieFormatError(
                f"{self.where}: content is truncated (declares {self.content_length} bytes, read {len(data)};"
                " the file changed while reading?)"
            )
        return data

    @property
    def instant_time(self) -> str | None:
        return self.header.get(HeaderKey.INSTANT_TIME)

    @property
    def target_instant_time(self) -> str | None:
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME)

    @property
    def schema_json(self) -> str | None:
        return self.header.get(HeaderKey.SCHEMA)

    @property
    def command_type(self) -> CommandType | None:
        value = self.header.get(HeaderKey.COMMAND_BLOCK_TYPE)
        if value is None:
            return None
        try:
            return CommandType(int(value))
        except ValueError:
            raise UnsupportedTableError(f"{self.where}: unknown command block type {value!r}") from None

    @property
    def compacted_block_times(self) -> tuple[str, ...]:
        """Instants whose blocks a log compaction merged into this one (empty if none)."""
        value = self.header.get(HeaderKey.COMPACTED_BLOCK_TIMES)
        return tuple(t for t in value.split(",") if t) if value else ()

    @property
    def record_positions(self) -> BitMap64 | None:
        """Row positions in the base file of BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS."""
        value = self.header.get(HeaderKey.RECORD_POSITIONS)
        if value is None:
            return None
        return decode_record_positions(value, self.where)

    @property
    def base_file_instant_time_of_record_positions(self) -> str | None:
        return self.header.get(HeaderKey.BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS)

    @property
    def is_partial(self) -> bool:
        return self.header.get(HeaderKey.IS_PARTIAL, "").lower() == "true"


def encode_record_positions(positions: Iterable[int]) -> str:
    """RECORD_POSITIONS header value: Base64 of the portable Roaring64 serialization, as Hudi
    writes it (``runOptimize`` first, so run containers may appear)."""
    bitmap = positions if isinstance(positions, BitMap64) else BitMap64(positions)
    bitmap = BitMap64(bitmap)
    bitmap.run_optimize()
    return base64.b64encode(bitmap.serialize()).decode("ascii")


def decode_record_positions(value: str, where: str) -> BitMap64:
    try:
        return BitMap64.deserialize(base64.b64decode(value, validate=True))
    except (ValueError, binascii.Error) as exc:
        raise HoodieFormatError(f"{where}: RECORD_POSITIONS is not a Roaring64 bitmap ({exc})") from None


class _Corrupt(Exception):
    """A problem that makes the block at hand corrupt (skippable with skip_corrupt)."""


class _Window:
    """Bounded-memory random access to one file through ``Storage.read_range``."""

    def __init__(self, storage: Storage, path: str, size: int) -> None:
        self.storage = storage
        self.path = path
        self.size = size
        self.start = 0
        self.buf = b""

    @property
    def whole_file(self) -> bool:
        return self.start == 0 and len(self.buf) == self.size

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer only at the end of the file)."""
        end = min(offset + length, self.size)
        if self.start <= offset and end <= self.start + len(self.buf):
            return self.buf[offset - self.start : end - self.start]
        if length > _WINDOW:
            return self.storage.read_range(self.path, offset, end - offset)
        self.start = offset
        self.buf = self.storage.read_range(self.path, offset, _WINDOW)
        return self.buf[: end - offset]

    def find_magic(self, offset: int) -> int:
        """Offset of the next MAGIC at or after ``offset``, or the file size."""
        while offset < self.size:
            chunk = self.read(offset, _WINDOW)
            i = chunk.find(MAGIC)
            if i >= 0:
                return offset + i
            if offset + len(chunk) >= self.size:
                break
            offset += len(chunk) - (len(MAGIC) - 1)  # a magic may straddle two windows
        return self.size


def _read_metadata(win: _Window, pos: int, limit: int, what: str) -> tuple[dict[int, str], int]:
    """Metadata entries at absolute offset ``pos``, which must end by ``limit``."""
    if pos + 4 > limit:
        raise _Corrupt(f"{what} runs past the end of the block")
    (count,) = _INT.unpack(win.read(pos, 4))
    pos += 4
    if count < 0 or count * 8 > limit - pos:
        raise _Corrupt(f"{what} declares {count} entries")
    entries: dict[int, str] = {}
    for _ in range(count):
        if pos + 8 > limit:
            raise _Corrupt(f"{what} runs past the end of the block")
        key, length = _TWO_INTS.unpack(win.read(pos, 8))
        pos += 8
        if length < 0 or pos + length > limit:
            raise _Corrupt(f"{what} entry {key} declares {length} bytes, {limit - pos} left in the block")
        try:
            entries[key] = win.read(pos, length).decode("utf-8")
        except UnicodeDecodeError:
            raise _Corrupt(f"{what} entry {key} is not UTF-8") from None
        pos += length
    return entries, pos


def _check_frame(win: _Window, offset: int) -> int:
    """Hudi's framing checks for the block whose magic is at ``offset``; returns its end."""
    left = win.size - offset - len(MAGIC)
    if left < 8:
        raise _Corrupt(f"is truncated ({left} bytes after the magic, the block length needs 8)")
    length: int = _LONG.unpack(win.read(offset + 6, 8))[0]
    left -= 8
    if length < _MIN_BLOCK_LENGTH:
        raise _Corrupt(f"declares an impossible block length {length}")
    if length > left:
        raise _Corrupt(f"is truncated (declares {length} bytes, {left} left)")
    end = offset + 14 + length
    (trailing,) = _LONG.unpack(win.read(end - 8, 8))
    if trailing - len(MAGIC) != length:
        raise _Corrupt(f"has disagreeing length fields (block length {length}, trailing size {trailing})")
    after = win.read(end, len(MAGIC))
    if len(after) == len(MAGIC) and after != MAGIC:
        raise _Corrupt(f"is not followed by another block's magic (found {after!r} at offset {end})")
    return end


def _parse_block(win: _Window, storage: Storage, offset: int) -> LogBlock:
    end = _check_frame(win, offset)
    trailer = end - 8
    pos = offset + 14
    version, type_id = _TWO_INTS.unpack(win.read(pos, 8))
    if version != LOG_FORMAT_VERSION:
        raise UnsupportedTableError(
            f"{win.path}: log block at offset {offset} has log format version {version}"
            f" (hoodied reads version {LOG_FORMAT_VERSION})"
        )
    if type_id == BlockType.CORRUPT or not 0 <= type_id < len(BlockType):
        raise _Corrupt(f"has an invalid block type {type_id}")
    header_raw, pos = _read_metadata(win, pos + 8, trailer, "header")
    if pos + 8 > trailer:
        raise _Corrupt("has no room for its content length")
    (content_length,) = _LONG.unpack(win.read(pos, 8))
    content_offset = pos + 8
    room = trailer - content_offset - 4  # the footer's entry count follows the content
    if content_length < 0 or content_length > room:
        raise _Corrupt(f"declares content of {content_length} bytes, {max(room, 0)} fit in the block")
    footer, pos = _read_metadata(win, content_offset + content_length, trailer, "footer")
    if pos != trailer:
        raise _Corrupt(f"has {trailer - pos} unaccounted bytes before its trailing block size")
    header: dict[HeaderKey, str] = {}
    for key, value in header_raw.items():
        if not 0 <= key < len(HeaderKey):
            raise UnsupportedTableError(
                f"{win.path}: log block at offset {offset} has unknown header key {key}"
                " (written by a newer Hudi?)"
            )
        header[HeaderKey(key)] = value
    # Small files were read whole by the first window: keep the content, it costs nothing.
    content = win.read(content_offset, content_length) if win.whole_file else None
    return LogBlock(
        path=win.path,
        offset=offset,
        block_size=end - offset,
        block_type=BlockType(type_id),
        format_version=version,
        header=header,
        footer=footer,
        content_offset=content_offset,
        content_length=content_length,
        storage=storage,
        _content=content,
    )


def _salvage_instant(win: _Window, offset: int, limit: int) -> str | None:
    """The INSTANT_TIME header of a corrupt block, when its start is intact enough to read it.

    A writer that crashed mid-append leaves a torn last block whose header was written
    whole; reading it tells whose block it was.
    """
    pos = offset + 14 + 8  # magic, block length, format version, block type
    try:
        header, _ = _read_metadata(win, pos, min(limit, win.size), "header")
    except (_Corrupt, struct.error):
        return None
    value = header.get(HeaderKey.INSTANT_TIME)
    return value if value and value.isdigit() else None


def read_log_blocks(
    storage: Storage,
    path: str,
    *,
    skip_corrupt: bool = False,
    ignorable: Callable[[str], bool] | None = None,
) -> Iterator[LogBlock]:
    """The blocks of a log file, in file order, read block by block.

    ``skip_corrupt=False``: the first corrupt or truncated region raises ``HoodieFormatError``
    ("<path>: log block at offset N is truncated (...)"). ``True``: it is logged as a warning
    and skipped to the next magic, as Hudi's reader does. ``ignorable(instant)`` lets the
    caller skip, quietly, a corrupt block whose header still names its instant when that
    instant never committed (the torn tail of a failed append). Valid blocks of an
    unsupported format version or with unknown header keys raise ``UnsupportedTableError``
    either way.
    """
    size = storage.size(path)
    win = _Window(storage, path, size)
    offset = 0
    while offset < size:
        problem = None
        magic = win.read(offset, len(MAGIC))
        if magic != MAGIC:
            if len(magic) < len(MAGIC):
                problem = f"{size - offset} trailing bytes at offset {offset}, too few for a block"
            else:
                problem = f"no log block magic at offset {offset} (found {magic[:8]!r})"
            resume = win.find_magic(offset + 1)
        else:
            try:
                block = _parse_block(win, storage, offset)
            except _Corrupt as exc:
                problem = f"log block at offset {offset} {exc}"
                # Like Hudi: look for the next magic right after this block's magic.
                resume = win.find_magic(offset + len(MAGIC))
                instant = _salvage_instant(win, offset, resume) if ignorable is not None else None
                if instant is not None and ignorable is not None and ignorable(instant):
                    log.debug("%s: %s, written by uncommitted instant %s; skipped", path, problem, instant)
                    offset = resume
                    continue
            else:
                yield block
                offset += block.block_size
                continue
        if not skip_corrupt:
            raise HoodieFormatError(f"{path}: {problem}")
        log.warning("%s: %s; skipping %d bytes to offset %d", path, problem, resume - offset, resume)
        offset = resume


def encode_metadata(entries: Mapping[HeaderKey, str] | Mapping[int, str]) -> bytes:
    parts = [_INT.pack(len(entries))]
    for key, value in sorted(entries.items(), key=lambda kv: int(kv[0])):
        raw = value.encode("utf-8")
        parts.append(_TWO_INTS.pack(int(key), len(raw)))
        parts.append(raw)
    return b"".join(parts)


def encode_block(
    block_type: BlockType,
    header: Mapping[HeaderKey, str],
    content: bytes,
    footer: Mapping[int, str] | None = None,
) -> bytes:
    """One framed block (magic through trailing size), as ``HoodieLogFormatWriter`` writes it."""
    body = b"".join(
        [
            _TWO_INTS.pack(LOG_FORMAT_VERSION, int(block_type)),
            encode_metadata(header),
            _LONG.pack(len(content)),
            content,
            encode_metadata(footer or {}),
        ]
    )
    length = len(body) + 8
    return b"".join([MAGIC, _LONG.pack(length), body, _LONG.pack(length + len(MAGIC))])


def encode_command_block(
    instant_time: str, target_instant_time: str, command: CommandType = CommandType.ROLLBACK
) -> bytes:
    """A complete command block (v6 rollback of ``target_instant_time``'s blocks); no content."""
    header = {
        HeaderKey.INSTANT_TIME: instant_time,
        HeaderKey.TARGET_INSTANT_TIME: target_instant_time,
        HeaderKey.COMMAND_BLOCK_TYPE: str(int(command)),
    }
    return encode_block(BlockType.COMMAND, header, b"")


def write_log_file(storage: Storage, path: str, blocks: Iterable[bytes]) -> int:
    """Write a complete new log file of encoded blocks, write-once; returns its size.

    Raises ``FileAlreadyExistsError`` if the file exists (log files are never overwritten).
    """
    data = b"".join(blocks)
    if not data.startswith(MAGIC):
        raise ValueError(f"{path}: a log file must start with a framed block")
    storage.put_if_absent(path, data)
    return len(data)
