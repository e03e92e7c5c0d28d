"""Hudi bloom filters against every parquet base file of the fixtures, plus the format's corners."""

from __future__ import annotations

import base64
import random
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodied.hoodie.bloom import (
    DEFAULT_NUM_ENTRIES,
    MDT_NUM_ENTRIES,
    BloomFilter,
    BloomFilterType,
    bit_size,
    build_filter,
    hash_positions,
    hash_positions_bulk,
    murmur_hash,
    num_hashes,
)
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from tests.helpers.fixtures import ALL_FIXTURES

BLOOM_KEY = b"org.apache.hudi.bloomfilter"
TYPE_KEY = b"hoodie_bloom_filter_type_code"


def base_files(table: Path) -> list[Path]:
    return sorted(p for p in table.rglob("*.parquet") if ".hoodie" not in p.relative_to(table).parts)


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES))
def test_fixture_footer_filters(fid: str, shared_table) -> None:
    """Every footer filter parses, holds its keys, re-serialises byte for byte and is rebuilt exactly."""
    table = shared_table(fid)
    checked = 0
    for path in base_files(table):
        pf = pq.ParquetFile(path)
        footer = pf.metadata.metadata or {}
        if BLOOM_KEY not in footer:
            continue  # tables without meta fields carry no filter
        text = footer[BLOOM_KEY].decode()
        type_code = footer.get(TYPE_KEY, b"DYNAMIC_V0").decode()
        bf = BloomFilter.deserialize(text, type_code, where=str(path))
        keys = pf.read(columns=["_hoodie_record_key"]).column(0)
        assert all(bf.might_contain(k) for k in keys.to_pylist()), path
        assert bf.might_contain_many(keys).all()
        assert bf.serialize() == text
        # Set bits = keys x hashes: no collisions in these small files, so every position is exact.
        assert sum(int(r.sum()) for r in bf.rows) == len(keys) * bf.nb_hash
        if len(bf.rows) == 1:
            rebuilt = build_filter(keys, num_entries=bf.nr or DEFAULT_NUM_ENTRIES, type_code=type_code)
            assert rebuilt.serialize() == text
            one_by_one = BloomFilter.create(bf.nr or DEFAULT_NUM_ENTRIES, type_code=type_code)
            for k in keys.to_pylist():
                one_by_one.add(k)
            assert one_by_one.serialize() == text
        checked += 1
    if checked == 0:
        pytest.skip(f"{fid}: no base file with a bloom filter")


def test_sizing_matches_hudi() -> None:
    assert bit_size(60_000, 1e-9) == 2_587_966
    assert num_hashes(2_587_966, 60_000) == 30
    assert bit_size(MDT_NUM_ENTRIES, 1e-9) == 431_328
    bf = BloomFilter.create()
    header = base64.b64decode(bf.serialize())[:25]
    # version -1, 30 hashes, murmur, vector size, nr 60000, 0 records, 1 row
    assert header == struct.pack(">iibiiii", -1, 30, 1, 2_587_966, 60_000, 0, 1)


def test_murmur_tail_bytes_are_sign_extended() -> None:
    # A tail byte >= 0x80 is a negative Java byte: it must not hash like its unsigned value.
    unsigned_tail = murmur_hash(b"\x7f", 0)
    assert murmur_hash(b"\xff", 0) != murmur_hash(b"\x00", 0)
    assert murmur_hash(b"\xff", 0) != unsigned_tail
    # Pinned values of this implementation (ASCII values are confirmed by the fixture test above).
    assert murmur_hash(b"", 0) == 0
    assert -(2**31) <= murmur_hash("é€x".encode(), 0) < 2**31


def test_bulk_and_scalar_hashing_agree() -> None:
    rng = random.Random(7)
    keys = []
    for length in range(1, 14):
        for _ in range(20):
            keys.append("".join(rng.choice("aZ9-é€\U0001f600") for _ in range(length)))
    bulk = hash_positions_bulk(keys, 7, 1_000_003)
    for i, k in enumerate(keys):
        assert bulk[i].tolist() == hash_positions(k.encode(), 7, 1_000_003)
    sliced = pa.array(keys).slice(5, 30)
    assert (hash_positions_bulk(sliced, 7, 1_000_003) == bulk[5:35]).all()
    # keys of one length are hashed from a view of the data buffer: sliced, and multi-byte
    same = pa.array([f"k{i:08d}" for i in range(50)] + ["é€" * 3] * 5).slice(3, 40)
    for length_block in (same, pa.array(["é€" * 3] * 5)):
        positions = hash_positions_bulk(length_block, 7, 1_000_003)
        for i, k in enumerate(length_block.to_pylist()):
            assert positions[i].tolist() == hash_positions(k.encode(), 7, 1_000_003)


def test_dynamic_rows_grow_then_round_robin() -> None:
    keys = [f"key-{i}" for i in range(777)]
    scalar = BloomFilter.create(num_entries=100, max_entries=250)
    for k in keys:
        scalar.add(k)
    # 100 keys per row; a third row would pass the 250 bound, so three rows then round robin.
    assert len(scalar.rows) == 3
    assert scalar.current_nb_record == 777 - 200
    chunked = BloomFilter.create(num_entries=100, max_entries=250)
    for start, stop in ((0, 5), (5, 300), (300, 301), (301, 777)):
        chunked.add_keys(keys[start:stop])
    assert chunked.serialize() == scalar.serialize()
    back = BloomFilter.deserialize(scalar.serialize(), "DYNAMIC_V0")
    assert len(back.rows) == 3 and back.nr == 100 and back.current_nb_record == 577
    assert all(back.might_contain(k) for k in keys)


def test_simple_filter_round_trip() -> None:
    keys = [f"s{i}" for i in range(500)]
    bf = build_filter(keys, num_entries=1000, type_code=BloomFilterType.SIMPLE)
    raw = base64.b64decode(bf.serialize())
    assert len(raw) == 13 + (bf.vector_size + 7) // 8  # header + bits, no dynamic fields
    back = BloomFilter.deserialize(bf.serialize(), "SIMPLE")
    assert back.type_code is BloomFilterType.SIMPLE
    assert back.might_contain_many(keys).all()


def test_false_positive_rate_is_small() -> None:
    bf = build_filter([f"in-{i}" for i in range(5000)])
    probes = [f"out-{i}" for i in range(20_000)]
    assert int(np.count_nonzero(bf.might_contain_many(probes))) <= 2


def test_legacy_header_reads_as_jenkins() -> None:
    raw = struct.pack(">ii", 5, 64) + b"\0" * 8  # SIMPLE, legacy: first int is nbHash
    bf = BloomFilter.deserialize(base64.b64encode(raw).decode(), "SIMPLE")
    assert (bf.nb_hash, bf.hash_type, bf.vector_size) == (5, 0, 64)
    with pytest.raises(UnsupportedTableError, match="hash type 0"):
        bf.might_contain("x")


@pytest.mark.parametrize(
    ("text", "type_code", "error", "match"),
    [
        ("not base64!!", "DYNAMIC_V0", HoodieFormatError, "not valid Base64"),
        (base64.b64encode(b"\xff\xff\xff\xff\x00").decode(), "DYNAMIC_V0", HoodieFormatError, "truncated"),
        (base64.b64encode(struct.pack(">i", -2)).decode(), "SIMPLE", HoodieFormatError, "version -2"),
        ("AAAA", "DYNAMIC_V9", UnsupportedTableError, "unknown bloom filter type"),
    ],
)
def test_corrupt_filters_fail_clearly(text: str, type_code: str, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as info:
        BloomFilter.deserialize(text, type_code, where="p/f.parquet")
    assert str(info.value).startswith("p/f.parquet: ")
    assert "\n" not in str(info.value)


def test_trailing_bytes_are_refused() -> None:
    text = base64.b64encode(base64.b64decode(build_filter(["a"], num_entries=10).serialize()) + b"x").decode()
    with pytest.raises(HoodieFormatError, match="trailing bytes"):
        BloomFilter.deserialize(text, "DYNAMIC_V0", where="f")


def test_empty_and_null_keys_are_refused() -> None:
    bf = BloomFilter.create(num_entries=10)
    with pytest.raises(ValueError, match="empty"):
        bf.add("")
    with pytest.raises(ValueError, match="empty"):
        bf.add_keys(["a", ""])
    with pytest.raises(ValueError, match="null"):
        bf.add_keys(pa.array(["a", None]))
