"""HFiles read block by block from storage and written block by block to a file."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.hfile.writer import BaseHFileWriter, HFileWriter, encode_base_hfile
from hoodied.hoodie.storage import LocalStorage

SCHEMA = '{"type":"record","name":"R","fields":[{"name":"key","type":"string"}]}'


class RecordingStorage(LocalStorage):
    """A local storage that remembers the length of every read (whole-file reads included)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.reads: list[int] = []

    def read(self, path: str) -> bytes:
        data = super().read(path)
        self.reads.append(len(data))
        return data

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        data = super().read_range(path, offset, length)
        self.reads.append(len(data))
        return data


def _cells(n: int) -> list[tuple[str, bytes]]:
    return [(f"key-{i:06d}", f"value of {i} ".encode() * 3) for i in range(n)]


def test_open_reads_one_block_at_a_time(tmp_path: Path) -> None:
    data = encode_base_hfile(_cells(5000), SCHEMA, block_size=4096, create_time_ms=0)
    (tmp_path / "f.hfile").write_bytes(data)
    storage = RecordingStorage(str(tmp_path))
    reader = HFileReader.open(storage, "f.hfile")
    opened = len(storage.reads)
    assert reader.data_block_count > 50 and reader.file_size == len(data)
    cells = list(reader.iter_cells())
    assert cells == list(HFileReader(data, "mem").iter_cells())
    assert reader.meta_block("bloomFilter") == HFileReader(data, "mem").meta_block("bloomFilter")
    # opening: trailer and load-on-open section; then one read per data block, none larger than
    # the largest block (compressed 4 KiB of cells plus header and checksums)
    assert opened == 2
    assert len(storage.reads) == opened + reader.data_block_count + 1  # + the bloom meta block
    assert max(storage.reads[opened:-1]) < 4096 + 200
    assert max(storage.reads[:-1]) < len(data) // 10  # the bloom block is sized by its parameters


def test_block_cells_and_get_through_ranges(tmp_path: Path) -> None:
    cells = _cells(3000)
    data = encode_base_hfile(cells, SCHEMA, block_size=2048, create_time_ms=0)

    def read(offset: int, length: int) -> bytes:
        return data[offset : offset + length]

    reader = HFileReader.from_ranges(read, len(data), "ranged")
    assert [c for i in range(reader.data_block_count) for c in reader.block_cells(i)] == [
        (k.encode(), v) for k, v in cells
    ]
    assert reader.get(b"key-001234") == cells[1234][1]
    assert reader.get(b"key-9") is None


def test_a_short_read_is_a_format_error(tmp_path: Path) -> None:
    data = encode_base_hfile(_cells(500), SCHEMA, block_size=1024, create_time_ms=0)

    tail = HFileReader(data, "mem").trailer.load_on_open_offset

    def read(offset: int, length: int) -> bytes:  # data blocks come back short (the file changed)
        piece = data[offset : offset + length]
        return piece if offset >= tail else piece[: length // 2]

    reader = HFileReader.from_ranges(read, len(data), "shrunk")
    with pytest.raises(HoodieFormatError, match="shrunk: read .* bytes at offset 0"):
        list(reader.iter_cells())


@pytest.mark.parametrize("block_size", [64, 1000, 1 << 20])
def test_streamed_base_file_is_the_in_memory_one(block_size: int, tmp_path: Path) -> None:
    cells = _cells(2000)
    expected = encode_base_hfile(cells, SCHEMA, block_size=block_size, create_time_ms=42)
    with open(tmp_path / "out.hfile", "wb") as f:
        writer = BaseHFileWriter(SCHEMA, block_size=block_size, create_time_ms=42, sink=f)
        for row, value in cells:
            writer.append(row, value)
        size = writer.close()
    assert (tmp_path / "out.hfile").read_bytes() == expected and size == len(expected)
    assert writer.entry_count == 2000


def test_streaming_writer_flushes_blocks_as_they_fill() -> None:
    sink = io.BytesIO()
    writer = HFileWriter(block_size=1024, create_time_ms=0, sink=sink)
    for row, value in _cells(200):
        writer.append(row, value)
    # every full block is in the sink already; only the block being filled is held
    assert sink.tell() > 0 and writer._block_bytes <= 1024 + 100
    with pytest.raises(ValueError, match="close"):
        writer.finish()
    size = writer.close()
    assert size == sink.tell()
    assert list(HFileReader(sink.getvalue(), "s").iter_cells()) == [(k.encode(), v) for k, v in _cells(200)]
    with pytest.raises(ValueError, match="already finished"):
        writer.close()


def test_base_writer_refuses_repeated_and_decreasing_rows() -> None:
    writer = BaseHFileWriter(SCHEMA)
    writer.append("b", b"1")
    with pytest.raises(ValueError, match="duplicate HFile row 'b'"):
        writer.append("b", b"2")
    with pytest.raises(ValueError, match="in order"):
        writer.append("a", b"2")
