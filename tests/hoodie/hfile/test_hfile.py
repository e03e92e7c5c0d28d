"""HFile v3 reader: every metadata HFile of the fixtures, synthetic multi-level files, corruption."""

from __future__ import annotations

import gzip
import struct
from collections import Counter

import pytest

from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.hfile.reader import HFileReader, _crc32c
from hoodied.hoodie.log import BlockType, HeaderKey, read_log_blocks
from hoodied.hoodie.storage import LocalStorage

#: Fixtures that carry a metadata table (all written by Hudi: v8 via HBase, v9 via Hudi's writer).
MDT_FIXTURES = [
    "mor/avro/v8_trips_8i3u1d",
    "cow/v9_lance_nonpartitioned",
    "cow/v9_timebasedkeygen_nonhivestyle",
    "cow/v9_txns_nonpart_meta",
    "cow/v9_txns_simple_meta",
    "cow/v9_txns_simple_overwrite",
    "mor/avro/v9_txns_simple_meta",
    "mor/avro/v9_txns_simple_overwrite",
]

#: Per MDT partition: base HFiles, their cells, HFILE_DATA blocks, their cells (reference notes §7).
EXPECTED_COUNTS = {
    "mor/avro/v8_trips_8i3u1d": {
        "files": (2, 5, 7, 18),
        "column_stats": (2, 90, 14, 99),
        "partition_stats": (1, 27, 7, 99),
        "record_index": (7, 6, 7, 8),
        "secondary_index_rider_idx": (12, 14, 0, 0),
    },
    "mor/avro/v9_txns_simple_meta": {
        "files": (2, 5, 13, 32),
        "column_stats": (2, 128, 26, 304),
        "partition_stats": (1, 48, 13, 304),
        "record_index": (10, 6, 26, 28),
        "secondary_index_merchant_idx": (8, 12, 0, 0),
        "secondary_index_txn_date_idx": (6, 12, 0, 0),
    },
}


def _check_reader(reader: HFileReader, schema_json: str | None = None) -> int:
    """Cells = trailer count, rows sorted and unique, values decode, point lookups find every row."""
    rows = [row for row, _ in reader.iter_cells()]
    assert len(rows) == reader.entry_count
    assert rows == sorted(rows)
    assert len(set(rows)) == len(rows)
    records = list(reader.records(schema_json))
    assert [k.encode() for k, _ in records] == rows
    for key, rec in records:
        assert rec["key"] == key
        assert rec["type"] in range(1, 8)
    for row in rows:
        assert reader.get(row) is not None
    assert reader.get(b"\xff\xff not a key") is None
    assert reader.get(b"") is None
    return len(rows)


@pytest.mark.parametrize("fid", MDT_FIXTURES)
def test_every_mdt_hfile_and_hfile_block_parses(shared_table, fid: str) -> None:
    root = shared_table(fid)
    storage = LocalStorage(str(root / ".hoodie" / "metadata"))
    counts: dict[str, list[int]] = {}
    for info in storage.walk():
        partition, _, name = info.path.rpartition("/")
        if not partition or partition.startswith(".hoodie"):
            continue
        c = counts.setdefault(partition, [0, 0, 0, 0])
        if name.endswith(".hfile"):
            reader = HFileReader(storage.read(info.path), info.path)
            assert reader.schema_json and "HoodieMetadataRecord" in reader.schema_json
            c[0] += 1
            c[1] += _check_reader(reader)
        elif ".log." in name:
            for block in read_log_blocks(storage, info.path):
                if block.block_type is BlockType.HFILE_DATA:
                    reader = HFileReader(block.content(storage), f"{info.path}@{block.offset}")
                    c[2] += 1
                    c[3] += _check_reader(reader, block.header.get(HeaderKey.SCHEMA))
    assert counts["files"][0] >= 1 and counts["files"][2] >= 1
    if fid in EXPECTED_COUNTS:
        assert {p: tuple(v) for p, v in counts.items()} == EXPECTED_COUNTS[fid]


def test_base_file_details(shared_table) -> None:
    root = shared_table("mor/avro/v9_txns_simple_meta")
    files = sorted((root / ".hoodie/metadata/files").glob("*.hfile"))
    reader = HFileReader(files[-1].read_bytes(), files[-1].name)
    assert reader.trailer.codec == 1 and reader.trailer.num_data_index_levels == 1
    assert reader.meta_block_names() == ["bloomFilter"]
    bloom = reader.meta_block("bloomFilter")
    assert bloom is not None and bloom[:4].isascii()  # Base64 text of the bloom filter
    assert reader.meta_block("nope") is None
    assert reader.file_info[b"bloomFilterTypeCode"] == b"DYNAMIC_V0"
    assert reader.last_row == b"region=us"  # hfile.LASTKEY, native flavour
    rec = dict(reader.records())["__all_partitions__"]
    assert rec["type"] == 1
    assert set(rec["filesystemMetadata"]) == {"region=eu", "region=us", "region=apac"}


def test_v8_hbase_file_has_crc32c_checksums(shared_table) -> None:
    root = shared_table("mor/avro/v8_trips_8i3u1d")
    path = next((root / ".hoodie/metadata/files").glob("*20251220210130942.hfile"))
    data = path.read_bytes()
    assert data[24] == 2  # CRC32C, verified while reading
    reader = HFileReader(data, path.name)
    assert reader.trailer.minor_version == 3
    assert dict(reader.records())["city=chennai"]["type"] == 2


# --- corruption ---------------------------------------------------------------------------------


@pytest.fixture
def v9_base(shared_table) -> bytes:
    root = shared_table("mor/avro/v9_txns_simple_meta")
    return sorted((root / ".hoodie/metadata/files").glob("*.hfile"))[-1].read_bytes()


@pytest.mark.parametrize("cut", [0, 100, 4095, -1, -4000])
def test_truncated_file_names_the_file(v9_base: bytes, cut: int) -> None:
    data = v9_base[:cut]
    with pytest.raises(HoodieFormatError, match=r"^files/x\.hfile: "):
        list(HFileReader(data, "files/x.hfile").iter_cells())


def test_garbage_and_flipped_bytes(v9_base: bytes) -> None:
    with pytest.raises(HoodieFormatError, match="no HFile trailer"):
        HFileReader(b"\x00" * 5000, "g.hfile")
    broken = bytearray(v9_base)
    broken[33 + 40] ^= 0xFF  # inside the gzip stream of the first data block
    with pytest.raises(HoodieFormatError, match="b.hfile"):
        list(HFileReader(bytes(broken), "b.hfile").iter_cells())


def test_checksum_mismatch_detected(shared_table) -> None:
    root = shared_table("mor/avro/v8_trips_8i3u1d")
    path = next((root / ".hoodie/metadata/files").glob("*20251220210130942.hfile"))
    broken = bytearray(path.read_bytes())
    broken[60] ^= 0x01
    with pytest.raises(HoodieFormatError, match="checksum mismatch"):
        list(HFileReader(bytes(broken), path.name).iter_cells())


def test_unsupported_codec_is_a_clear_error(v9_base: bytes) -> None:
    trailer = bytearray(v9_base[-4096:])
    pos = trailer.index(b"HoodieHBaseKVComparator") + len(b"HoodieHBaseKVComparator")
    assert trailer[pos : pos + 2] == b"\x60\x01"
    trailer[pos + 1] = 3  # SNAPPY
    with pytest.raises(UnsupportedTableError, match="codec SNAPPY"):
        HFileReader(v9_base[:-4096] + bytes(trailer), "s.hfile")


def test_entry_count_mismatch_detected(v9_base: bytes) -> None:
    trailer = bytearray(v9_base[-4096:])
    pos = trailer.index(b"\x38\x04")  # field 7 (entry_count) = 4
    trailer[pos + 1] = 5
    with pytest.raises(HoodieFormatError, match="holds 4 cells but its trailer declares 5"):
        list(HFileReader(v9_base[:-4096] + bytes(trailer), "c.hfile").iter_cells())


# --- synthetic HBase-style files: multi-level index, NONE codec, CRC32C ---------------------------


def _block(magic: bytes, payload: bytes, codec: int) -> bytes:
    stored = gzip.compress(payload) if codec == 1 else payload
    with_header = 33 + len(stored)
    chunks = -(-with_header // 512)
    header = struct.pack(">8siiqbii", magic, len(stored) + 4 * chunks, len(payload), -1, 2, 512, with_header)
    body = header + stored
    sums = b"".join(_crc32c(body[i : i + 512]).to_bytes(4, "big") for i in range(0, len(body), 512))
    return body + sums


def _kv_key(row: bytes) -> bytes:
    return struct.pack(">h", len(row)) + row + b"\x00" + struct.pack(">q", 2**63 - 1) + b"\x04"


def _vint(n: int) -> bytes:
    assert 0 <= n < 256
    return bytes([n]) if n <= 127 else b"\x8f" + bytes([n])


def _proto_varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, value: int | bytes) -> bytes:
    if isinstance(value, bytes):
        return _proto_varint(num << 3 | 2) + _proto_varint(len(value)) + value
    return _proto_varint(num << 3) + _proto_varint(value)


def _non_root(entries: list[tuple[int, int, bytes]]) -> bytes:
    body, rel = b"", [0]
    for off, size, key in entries:
        body += struct.pack(">qi", off, size) + key
        rel.append(len(body))
    return struct.pack(f">i{len(rel)}i", len(entries), *rel) + body


def build_hfile(rows: list[bytes], *, per_block: int, fanout: int, codec: int) -> bytes:
    """An HBase-flavoured HFile: CRC32C checksums, MVCC bytes, index levels as needed for ``fanout``."""
    out = bytearray()
    entries: list[tuple[int, int, bytes]] = []
    for i in range(0, len(rows), per_block):
        cells = b""
        for row in rows[i : i + per_block]:
            key, value = _kv_key(row), b"v:" + row
            cells += struct.pack(">ii", len(key), len(value)) + key + value + b"\x00"
        blk = _block(b"DATABLK*", cells, codec)
        entries.append((len(out), len(blk), _kv_key(rows[i])))
        out += blk
    levels = 1
    while len(entries) > fanout:
        magic = b"IDXLEAF2" if levels == 1 else b"IDXINTE2"
        upper = []
        for i in range(0, len(entries), fanout):
            blk = _block(magic, _non_root(entries[i : i + fanout]), codec)
            upper.append((len(out), len(blk), entries[i][2]))
            out += blk
        entries, levels = upper, levels + 1
    load_on_open = len(out)
    root = b"".join(struct.pack(">qi", o, s) + _vint(len(k)) + k for o, s, k in entries)
    out += _block(b"IDXROOT2", root + (b"\x00" * 16 if levels > 1 else b""), codec)
    out += _block(b"IDXROOT2", b"", codec)
    info_offset = len(out)
    pairs = {b"KEY_VALUE_VERSION": struct.pack(">i", 1), b"MAX_MEMSTORE_TS_KEY": struct.pack(">q", 0)}
    info = b"".join(_field(1, _field(1, k) + _field(2, v)) for k, v in pairs.items())
    out += _block(b"FILEINF2", b"PBUF" + _proto_varint(len(info)) + info, codec)
    fields = {1: info_offset, 2: load_on_open, 5: len(entries), 6: 0, 7: len(rows), 8: levels, 12: codec}
    proto = b"".join(_field(n, v) for n, v in fields.items())
    trailer = b'TRABLK"$' + _proto_varint(len(proto)) + proto
    return bytes(out + trailer + b"\x00" * (4092 - len(trailer)) + b"\x03\x00\x00\x03")


@pytest.mark.parametrize(
    ("per_block", "fanout", "codec", "levels"),
    [(7, 1000, 2, 1), (5, 8, 1, 2), (3, 6, 2, 3), (1, 3, 1, 5)],
)
def test_multi_level_index(per_block: int, fanout: int, codec: int, levels: int) -> None:
    rows = [f"key-{i:05d}".encode() for i in range(0, 400, 2)]
    reader = HFileReader(build_hfile(rows, per_block=per_block, fanout=fanout, codec=codec), "m.hfile")
    assert reader.trailer.num_data_index_levels == levels
    assert reader.data_block_count == -(-len(rows) // per_block)
    assert [r for r, _ in reader.iter_cells()] == rows
    for row in rows:
        assert reader.get(row) == b"v:" + row
    for missing in (b"a", b"key-00001", b"key-00199", b"key-99999"):
        assert reader.get(missing) is None


def test_empty_hfile() -> None:
    reader = HFileReader(build_hfile([], per_block=1, fanout=10, codec=1), "e.hfile")
    assert reader.entry_count == 0 and list(reader.iter_cells()) == []
    assert reader.get(b"x") is None


def test_duplicate_rows_get_returns_the_first() -> None:
    rows = [b"a", b"b", b"b", b"b", b"c"]
    reader = HFileReader(build_hfile(rows, per_block=2, fanout=100, codec=2), "d.hfile")
    assert Counter(r for r, _ in reader.iter_cells())[b"b"] == 3
    assert reader.get(b"b") == b"v:b" and reader.get(b"c") == b"v:c"
