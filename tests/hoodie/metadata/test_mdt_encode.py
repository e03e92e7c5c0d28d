"""MDT record encoding: keys, file-group hashing, ``files`` records, column and partition stats,
each checked byte for byte against the cells Hudi wrote into the fixtures' metadata tables."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import random
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import fastavro
import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.log import BlockType, HeaderKey, hfile_block_content, read_log_blocks
from hoodied.hoodie.metadata.colstats import (
    ValueType,
    column_ranges,
    column_stats_columns,
    column_stats_records,
    java_bytes,
    partition_stats_records,
    read_parquet_metadata,
)
from hoodied.hoodie.metadata.encode import (
    bloom_filter_key,
    column_stats_key,
    encode_hfile_data_block,
    encode_mdt_base_file,
    encode_value,
    file_group_id,
    file_group_index,
    file_group_indexes,
    files_record,
    hash_id_64,
    hash_id_128,
    metadata_schema,
    metadata_schema_json,
    partition_list_record,
    partition_stats_key,
    xxh64,
)
from hoodied.hoodie.metadata.records import combine_listings, file_listing, key_to_partition, live_files
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage

V8 = "mor/avro/v8_trips_8i3u1d"
V9_MOR = "mor/avro/v9_txns_simple_meta"
MDT_TABLES = [
    V8,
    "cow/v9_timebasedkeygen_nonhivestyle",
    "cow/v9_txns_nonpart_meta",
    "cow/v9_txns_simple_meta",
    "cow/v9_txns_simple_overwrite",
    V9_MOR,
    "mor/avro/v9_txns_simple_overwrite",
]
COW_V9_WITH_PARTITION_STATS = [
    "cow/v9_timebasedkeygen_nonhivestyle",
    "cow/v9_txns_simple_meta",
    "cow/v9_txns_simple_overwrite",
]


class Cell:
    """One MDT cell as Hudi wrote it."""

    def __init__(self, partition: str, file_id: str, instant: str | None, key: str, record: dict, raw: bytes):
        self.partition, self.file_id, self.instant = partition, file_id, instant
        self.key, self.record, self.raw = key, record, raw
        self.in_log = instant is not None


def mdt_cells(root: Path) -> Iterator[Cell]:
    mdt = root / ".hoodie" / "metadata"
    storage = LocalStorage(str(mdt))
    for part_dir in sorted(p for p in mdt.iterdir() if p.is_dir() and p.name != ".hoodie"):
        for path in sorted(part_dir.iterdir()):
            if (base := BaseFileName.parse(path.name)) is not None:
                r = HFileReader(path.read_bytes(), path.name)
                raw = dict(r.iter_cells())
                for key, rec in r.records():
                    yield Cell(part_dir.name, base.file_id, None, key, rec, raw[key.encode()])
            elif (lf := LogFileName.parse(path.name)) is not None:
                for block in read_log_blocks(storage, f"{part_dir.name}/{path.name}"):
                    if block.block_type is not BlockType.HFILE_DATA:
                        continue
                    r = HFileReader(hfile_block_content(block), block.where)
                    raw = dict(r.iter_cells())
                    for key, rec in r.records(block.schema_json):
                        yield Cell(part_dir.name, lf.file_id, block.instant_time, key, rec, raw[key.encode()])


# --- schema, hashes, keys, file groups -----------------------------------------------------------


@pytest.mark.parametrize("fid,version", [(V8, 8), (V9_MOR, 9)])
def test_schema_is_the_one_hudi_embeds(fid: str, version: int, shared_table) -> None:
    root = shared_table(fid)
    base = next((root / ".hoodie/metadata/files").glob("*.hfile"))
    assert HFileReader(base.read_bytes(), base.name).schema_json == metadata_schema_json(version)
    with pytest.raises(UnsupportedTableError, match="version 6"):
        metadata_schema_json(6)


def test_hashes_and_keys() -> None:
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert xxh64(b"a", 0) == 0xD24EC4F1A98C6E5B
    assert xxh64(b"Nobody inspects the spammish repetition", 0) == 0xFBCEA83C8A378BF1  # 39 bytes: stripes
    assert hash_id_64("driver") == "AjpJ7N1gBZc="
    assert hash_id_64("city=san_francisco") == "8L2cgj6DtVM="
    assert hash_id_64(".") == "FXThHwelITM="
    name = "036ded81-9ed4-479f-bcea-7145dfa0079b-0_0-986-2792_20251220210108078.parquet"
    assert hash_id_128(name) == "R0v7g76tSFUukD8HWc7Klw=="
    assert (
        column_stats_key("driver", "city=san_francisco", name)
        == "AjpJ7N1gBZc=8L2cgj6DtVM=R0v7g76tSFUukD8HWc7Klw=="
    )
    assert partition_stats_key("driver", "") == "AjpJ7N1gBZc=FXThHwelITM="
    assert bloom_filter_key("", name) == "FXThHwelITM=R0v7g76tSFUukD8HWc7Klw=="
    assert file_group_id("files", 0) == "files-0000-0"
    assert file_group_id("column_stats", 1) == "col-stats-0001-0"
    assert file_group_id("secondary_index_rider_idx", 3) == "secondary-index-rider-idx-0003-0"
    # Integer.MIN_VALUE hash ("polygenelubricants" hashes to it): Java gives 2^31 mod n
    assert file_group_index("polygenelubricants", 10) == (1 << 31) % 10
    with pytest.raises(ValueError):
        file_group_index("x", 0)


def test_file_group_indexes_route_as_file_group_index() -> None:
    rng = random.Random(7)
    alphabet = "abcxyz0129-_:/.=é日𝄞"
    keys = ["", "a", "polygenelubricants", "polygenelubricants" * 3, str(uuid.UUID(int=rng.getrandbits(128)))]
    ascii_only = alphabet[:13]
    keys += ["".join(rng.choice(ascii_only) for _ in range(rng.choice((1, 7, 36, 90)))) for _ in range(3000)]
    mixed = keys + ["".join(rng.choice(alphabet) for _ in range(12)) for _ in range(50)]  # non-ASCII
    for values in (keys, mixed):
        array = pa.array(values)
        for n in (1, 2, 10, 1000):
            assert file_group_indexes(array, n).tolist() == [file_group_index(k, n) for k in values], n
        # a slice of an array starts at an offset into the same buffers
        sliced = [file_group_index(k, 13) for k in values[7:1500]]
        assert file_group_indexes(array[7:1500], 13).tolist() == sliced
    assert file_group_indexes(pa.array([], pa.string()), 3).tolist() == []
    assert file_group_indexes(pa.array(["", ""]), 3).tolist() == [0, 0]
    with pytest.raises(ValueError):
        file_group_indexes(pa.array(["x"]), 0)


@pytest.mark.parametrize("fid", MDT_TABLES)
def test_keys_land_in_hudis_file_groups(fid: str, shared_table) -> None:
    """files, column_stats, partition_stats, record_index: every cell sits in the file group
    ``file_group_index`` names; every column-stats key is the hash of its column/partition/file."""
    root = shared_table(fid)
    mdt = root / ".hoodie" / "metadata"
    groups: dict[str, set[str]] = defaultdict(set)
    for p in mdt.glob("*/*"):
        name = BaseFileName.parse(p.name) or LogFileName.parse(p.name)
        if name is not None:
            groups[p.parent.name].add(name.file_id)
    checked: Counter[str] = Counter()
    by_partition: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for cell in mdt_cells(root):
        if cell.partition.startswith("secondary_index"):
            continue  # hashed on the secondary-key prefix (V2), not the row key
        n = len(groups[cell.partition])
        assert file_group_id(cell.partition, file_group_index(cell.key, n)) == cell.file_id, cell.key
        by_partition[cell.partition].append((cell.key, cell.file_id))
        stats = cell.record["ColumnStatsMetadata"]
        if cell.partition == "column_stats":  # the data partition is not stored in the value
            assert cell.key.startswith(hash_id_64(stats["columnName"]))
            assert cell.key.endswith(hash_id_128(stats["fileName"]))
        if cell.partition == "partition_stats":
            assert cell.key == partition_stats_key(stats["columnName"], key_to_partition(stats["fileName"]))
        checked[cell.partition] += 1
    assert checked["files"] and checked["record_index"] and checked["column_stats"]
    # the vectorised routing (clustering's record-index tasks) agrees with Hudi's file groups too
    for partition, cells in by_partition.items():
        n = len(groups[partition])
        routed = file_group_indexes(pa.array([key for key, _ in cells]), n)
        assert [file_group_id(partition, i) for i in routed.tolist()] == [fid for _, fid in cells], partition


# --- files partition -----------------------------------------------------------------------------


def _rebuild_files_record(key: str, record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Our record for the same listing, built from sorted names (not from Hudi's map order)."""
    listing = file_listing(record)
    names = sorted(listing)
    if key == "__all_partitions__":
        new = partition_list_record(
            [key_to_partition(n) for n in names if not listing[n][1]],
            [key_to_partition(n) for n in names if listing[n][1]],
        )
    else:
        new = files_record(
            key_to_partition(key),
            {n: listing[n][0] for n in names if not listing[n][1]},
            [n for n in names if listing[n][1]],
        )
    new[1]["_hoodie_file_name"] = record["_hoodie_file_name"]
    return new


@pytest.mark.parametrize("fid", MDT_TABLES)
def test_files_records_are_byte_identical(fid: str, shared_table) -> None:
    """Every ``files`` cell Hudi wrote into a log block, rebuilt from its listing: same bytes
    (this includes the HashMap order of the file map)."""
    root = shared_table(fid)
    version = load_table_config(LocalStorage(str(root))).version
    seen = 0
    for cell in mdt_cells(root):
        if cell.partition != "files" or not cell.in_log:
            continue
        key, record = _rebuild_files_record(cell.key, cell.record)
        assert key == cell.key
        assert encode_value(record, version) == cell.raw, cell.key
        seen += 1
    assert seen >= 4


@pytest.mark.parametrize("fid", [V8, V9_MOR, "cow/v9_txns_nonpart_meta"])
def test_files_log_blocks_are_byte_identical(fid: str, shared_table, tmp_path: Path) -> None:
    root = shared_table(fid)
    mdt = root / ".hoodie" / "metadata"
    version = load_table_config(LocalStorage(str(root))).version
    storage = LocalStorage(str(mdt))
    blocks = 0
    for log in sorted((mdt / "files").glob(".files-*.log.*")):
        for theirs in read_log_blocks(storage, f"files/{log.name}"):
            if theirs.block_type is not BlockType.HFILE_DATA:
                continue
            content = hfile_block_content(theirs)
            r = HFileReader(content, theirs.where)
            create = int.from_bytes(r.file_info[b"hfile.CREATE_TIME_TS"], "big")
            records = [_rebuild_files_record(k, rec) for k, rec in r.records(theirs.schema_json)]
            random.Random(blocks).shuffle(records)  # cells get sorted by the encoder
            ours_bytes = encode_hfile_data_block(
                records, theirs.instant_time or "", version, create_time_ms=create
            )
            (tmp_path / "x.log").write_bytes(ours_bytes)
            (ours,) = list(read_log_blocks(LocalStorage(str(tmp_path)), "x.log"))
            assert ours.block_type is BlockType.HFILE_DATA and ours.format_version == theirs.format_version
            assert dict(ours.header) == dict(theirs.header)
            assert set(ours.header) == {HeaderKey.INSTANT_TIME, HeaderKey.SCHEMA}
            if version == 9:
                assert hfile_block_content(ours) == content
            else:  # HBase wrote the v8 HFiles (CRC32C, other index keys): same cells
                ours_reader = HFileReader(hfile_block_content(ours), "ours")
                assert list(ours_reader.iter_cells()) == list(r.iter_cells())
            blocks += 1
    assert blocks >= 7


def test_files_tombstones_and_validation() -> None:
    key, rec = files_record("city=sf", {"a.parquet": 10, ".a.log.1_0-1-1": 5}, ["old.parquet"])
    assert key == "city=sf" and rec["type"] == 2
    raw = encode_value(rec, 9)
    back = cast(dict[str, Any], fastavro.schemaless_reader(io.BytesIO(raw), metadata_schema(9), None))
    assert back["key"] == ""  # the row is the key
    listing = file_listing(back)
    assert listing["old.parquet"] == (0, True)
    merged = combine_listings({"old.parquet": (7, False), "b.parquet": (3, False)}, listing)
    assert live_files(merged) == {"b.parquet": 3, "a.parquet": 10, ".a.log.1_0-1-1": 5}
    key, rec = files_record("", {"x.parquet": 1})
    assert key == "."
    key, rec = partition_list_record(["city=sf", ""], ["city=gone"])
    assert key == "__all_partitions__" and rec["type"] == 1
    assert file_listing(rec) == {"city=sf": (0, False), ".": (0, False), "city=gone": (0, True)}
    with pytest.raises(ValueError, match="positive"):
        files_record("p", {"a.parquet": 0})
    with pytest.raises(ValueError, match="both added and deleted"):
        files_record("p", {"a.parquet": 1}, ["a.parquet"])
    with pytest.raises(ValueError, match="different key"):
        encode_mdt_base_file([("k1", {**rec, "key": "k2"})], 9)


def test_base_file_of_records_reads_back() -> None:
    records = [files_record(f"p{i}", {f"f{i}.parquet": i + 1}) for i in range(50)]
    records.append(partition_list_record([f"p{i}" for i in range(50)]))
    data = encode_mdt_base_file(reversed(records), 9, create_time_ms=0)
    r = HFileReader(data, "base")
    got = dict(r.records())
    assert len(got) == 51 and got["p7"]["filesystemMetadata"] == {
        "f7.parquet": {"size": 8, "isDeleted": False}
    }
    assert got["__all_partitions__"]["key"] == "__all_partitions__"
    assert r.file_info[b"schema"].decode() == metadata_schema_json(9)


# --- column and partition stats ------------------------------------------------------------------


def _parquet_paths(root: Path) -> dict[str, str]:
    return {
        p.name: "" if p.parent == root else str(p.parent.relative_to(root))
        for p in root.rglob("*.parquet")
        if ".hoodie" not in p.parts
    }


@pytest.mark.parametrize("fid", MDT_TABLES)
def test_column_stats_match_hudi(fid: str, shared_table) -> None:
    """Recompute the column stats of every parquet base file from its footer: every
    column_stats cell Hudi wrote for it (base HFiles and log blocks) is byte-identical, and
    every record we compute is in the MDT."""
    root = shared_table(fid)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    columns = column_stats_columns(storage, config.props)
    assert columns and columns[:3] == ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_record_key")
    partitions = _parquet_paths(root)
    ours: dict[str, dict[str, Any]] = {}
    for name, partition in partitions.items():
        path = f"{partition}/{name}" if partition else name
        ranges = column_ranges(read_parquet_metadata(storage, path), name, columns, config.version)
        ours.update(column_stats_records(partition, ranges, config.version))
    matched = 0
    in_mdt = set()
    for cell in mdt_cells(root):
        if cell.partition != "column_stats":
            continue
        in_mdt.add(cell.key)
        if cell.record["ColumnStatsMetadata"]["fileName"] not in partitions:
            continue  # log files: their stats come from log records
        mine = dict(ours[cell.key], _hoodie_file_name=cell.record["_hoodie_file_name"])
        assert encode_value(mine, config.version) == cell.raw, cell.record
        matched += 1
    assert matched >= len(partitions) * 5
    assert set(ours) <= in_mdt


@pytest.mark.parametrize("fid", COW_V9_WITH_PARTITION_STATS)
def test_partition_stats_match_hudi(fid: str, shared_table) -> None:
    """Partition stats written at instant T aggregate the partition's file slices as the writer
    saw them: the slices before T (replaced file groups still in) with T's new base files."""
    root = shared_table(fid)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    columns = column_stats_columns(storage, config.props) or ()
    table = hudi.HudiTableBuilder.from_base_uri(str(root)).build()

    def slices(as_of: str) -> list[Any]:
        return table.get_file_slices(hudi.HudiReadOptions().with_as_of_timestamp(as_of))

    by_instant: dict[str, list[Cell]] = defaultdict(list)
    for cell in mdt_cells(root):
        if (cell.partition == "partition_stats" and cell.instant is not None  # cell.in_log
                and not cell.instant.startswith("0000")):
            by_instant[cell.instant].append(cell)
    instants = sorted(by_instant)
    matched = 0
    for i, instant in enumerate(instants):
        now = slices(instant)
        new = [s for s in now if s.base_file_name.endswith(f"_{instant}.parquet")]
        touched = {(s.partition_path, s.file_id) for s in new}
        before = slices(instants[i - 1]) if i else []
        visible = new + [s for s in before if (s.partition_path, s.file_id) not in touched]
        for cell in by_instant[instant]:
            partition = key_to_partition(cell.record["ColumnStatsMetadata"]["fileName"])
            ranges = []
            for s in visible:
                if s.partition_path == partition:
                    md = read_parquet_metadata(storage, s.base_file_relative_path())
                    ranges += column_ranges(md, s.base_file_name, columns, config.version)
            mine = dict(partition_stats_records(partition, ranges, config.version))
            assert encode_value(mine[cell.key], config.version) == cell.raw, (instant, cell.record)
            matched += 1
    assert matched >= 48


def _decode(raw: bytes, version: int) -> dict[str, Any]:
    out = fastavro.schemaless_reader(io.BytesIO(raw), metadata_schema(version), None, return_record_name=True)
    return cast(dict[str, Any], out[1] if isinstance(out, tuple) else out)  # a HoodieMetadataRecord


def test_column_stats_types_and_row_groups(tmp_path: Path) -> None:
    table = pa.table(
        {
            "s": ["b", "é", None, "a"],
            "i": pa.array([3, -7, None, 1], pa.int32()),
            "l": pa.array([10, 20, 30, None], pa.int64()),
            "f": pa.array([0.0, 2.5, None, 1.0], pa.float64()),
            "b": [True, False, None, True],
            "bin": [b"\x90", b"\x01", None, b"\x02"],
            "d": [dt.date(2024, 1, 2), dt.date(2023, 5, 6), None, dt.date(2024, 1, 1)],
            "ts": pa.array([5, 1, None, 9], pa.timestamp("us", tz="UTC")),
            "tl": pa.array([5, 1, None, 9], pa.timestamp("ms")),
            "dec": pa.array(
                [decimal.Decimal("1.28"), decimal.Decimal("-1.28"), None, decimal.Decimal("0")],
                pa.decimal128(10, 2),
            ),  # fmt: skip
            "u": pa.array(
                [uuid.UUID(int=3).bytes, uuid.UUID(int=1).bytes, None, uuid.UUID(int=2).bytes], pa.uuid()
            ),  # fmt: skip
            "nulls": pa.array([None] * 4, pa.string()),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=2)
    md = read_parquet_metadata(LocalStorage(str(tmp_path)), "t.parquet")
    assert md.num_row_groups == 2
    cols = [*table.column_names, "absent"]
    ranges = {r.column: r for r in column_ranges(md, "t.parquet", cols, 9)}
    assert "absent" not in ranges
    want = {
        "s": (ValueType.STRING, "a", "é"),
        "i": (ValueType.INT, -7, 3),
        "l": (ValueType.LONG, 10, 30),
        "f": (ValueType.DOUBLE, -0.0, 2.5),  # a zero minimum reads as -0.0 (PARQUET-1222)
        "b": (ValueType.BOOLEAN, False, True),
        # row groups (0x90, 0x01) and (0x02): parquet orders unsigned within a row group,
        # Hudi merges row groups in ByteBuffer (signed) order, where 0x90 < 0x02
        "bin": (ValueType.BYTES, b"\x01", b"\x02"),
        "d": (ValueType.DATE, 19483, 19724),
        "ts": (ValueType.TIMESTAMP_MICROS, 1, 9),
        "tl": (ValueType.LOCAL_TIMESTAMP_MILLIS, 1, 9),
        "dec": (ValueType.DECIMAL, b"\x80", b"\x00\x80"),  # BigInteger(-128), BigInteger(128)
        "u": (ValueType.UUID, str(uuid.UUID(int=1)), str(uuid.UUID(int=3))),
        "nulls": (ValueType.STRING, None, None),
    }
    for name, (vtype, low, high) in want.items():
        r = ranges[name]
        assert (r.value_type, r.min_value, r.max_value) == (vtype, low, high), name
        assert r.value_count == 4 and r.null_count == (4 if name == "nulls" else 1), name
    assert ranges["dec"].type_info == "10,2"
    records = dict(column_stats_records("p", ranges.values(), 9))
    payload = _decode(encode_value(records[column_stats_key("dec", "p", "t.parquet")], 9), 9)
    stats = payload["ColumnStatsMetadata"][1]
    assert stats["minValue"] == ("org.apache.hudi.avro.model.BytesWrapper", {"value": b"\x80"})
    assert stats["valueType"][1] == {"typeOrdinal": 10, "additionalInfo": "10,2"}
    stats = _decode(encode_value(records[column_stats_key("d", "p", "t.parquet")], 9), 9)
    assert stats["ColumnStatsMetadata"][1]["maxValue"] == (
        "org.apache.hudi.avro.model.IntWrapper",
        {"value": 19724},
    )
    part = dict(partition_stats_records("p", list(ranges.values()) * 2, 9))
    merged = _decode(encode_value(part[partition_stats_key("l", "p")], 9), 9)["ColumnStatsMetadata"][1]
    assert merged["fileName"] == "p" and merged["isTightBound"] and merged["valueCount"] == 8
    # table version 8: no valueType; types beyond the plain ones are refused
    v8 = dict(column_stats_records("p", column_ranges(md, "t.parquet", ["s", "l", "f"], 8), 8))
    assert "valueType" not in _decode(encode_value(next(iter(v8.values())), 8), 8)["ColumnStatsMetadata"][1]
    with pytest.raises(UnsupportedTableError, match="DECIMAL column dec .* table version 8"):
        column_ranges(md, "t.parquet", ["dec"], 8)


def test_unsupported_columns_are_refused(tmp_path: Path) -> None:
    table = pa.table({"small": pa.array([1], pa.int8()), "nested": [{"a": 1}]})
    pq.write_table(table, tmp_path / "t.parquet")
    md = read_parquet_metadata(LocalStorage(str(tmp_path)), "t.parquet")
    with pytest.raises(UnsupportedTableError, match="column small has parquet logical type Int"):
        column_ranges(md, "t.parquet", ["small"], 9)
    with pytest.raises(UnsupportedTableError, match="column nested is nested"):
        column_ranges(md, "t.parquet", ["nested"], 9)


def test_java_big_integer_bytes() -> None:
    cases = {0: b"\x00", 1: b"\x01", -1: b"\xff", 127: b"\x7f", 128: b"\x00\x80", -128: b"\x80",
             -129: b"\xff\x7f", 2500: b"\t\xc4", 255: b"\x00\xff"}  # fmt: skip
    for value, raw in cases.items():
        assert java_bytes(value) == raw, value


# --- hudi-rs reads our log blocks ----------------------------------------------------------------


def _rewrite_newest_files_log(root: Path, drop: str | None = None) -> None:
    mdt = root / ".hoodie" / "metadata"
    log = sorted((mdt / "files").glob(".files-0000-0_*.log.*"))[-1]
    (block,) = list(read_log_blocks(LocalStorage(str(mdt)), f"files/{log.name}"))
    r = HFileReader(hfile_block_content(block), block.where)
    records = []
    for key, record in r.records(block.schema_json):
        key, record = _rebuild_files_record(key, record)
        if drop is not None:
            record["filesystemMetadata"].pop(drop, None)
        records.append((key, record))
    log.write_bytes(encode_hfile_data_block(records, block.instant_time or "", 9))


def _slices(root: Path) -> list[tuple[str, str, str]]:
    table = hudi.HudiTableBuilder.from_base_uri(str(root)).build()
    return sorted((s.partition_path, s.file_id, s.base_file_name) for s in table.get_file_slices())


def test_hudi_rs_reads_our_files_log_block(hudi_table, shared_table) -> None:
    original = _slices(shared_table(V9_MOR))
    ours = hudi_table(V9_MOR)
    _rewrite_newest_files_log(ours)
    assert _slices(ours) == original
    again = hudi_table(V9_MOR)
    newest_eu = next(
        s[2] for s in original if s[0] == "region=eu" and s[2].endswith("20260307162620509.parquet")
    )
    _rewrite_newest_files_log(again, drop=newest_eu)
    assert _slices(again) == [s for s in original if s[2] != newest_eu]


def test_records_resolve_against_hudis_own_schema(tmp_path: Path) -> None:
    """Java reads MDT cells by resolving our writer schema against its HoodieMetadata schema."""
    from tests.helpers.hudi_schemas import hudi_schema

    reader_schema = hudi_schema("HoodieMetadata")
    table = pa.table({"s": ["a", "b"], "dec": pa.array([decimal.Decimal("1.5")] * 2, pa.decimal128(5, 1))})
    pq.write_table(table, tmp_path / "t.parquet")
    md = read_parquet_metadata(LocalStorage(str(tmp_path)), "t.parquet")
    records = [
        files_record("p", {"a.parquet": 5}, ["b.parquet"]),
        partition_list_record(["p"]),
        *column_stats_records("p", column_ranges(md, "t.parquet", ["s", "dec"], 9), 9),
    ]
    for key, record in records:
        raw = encode_value(record, 9)
        back = fastavro.schemaless_reader(io.BytesIO(raw), metadata_schema(9), reader_schema)
        assert isinstance(back, dict) and back["type"] == record["type"], key
        if record["ColumnStatsMetadata"]:
            # (the reference schema predates valueType; resolution drops it, as an older reader would)
            for field in ("columnName", "valueCount", "nullCount", "totalSize"):
                assert back["ColumnStatsMetadata"][field] == record["ColumnStatsMetadata"][field]
        else:
            assert back["filesystemMetadata"] == record["filesystemMetadata"]
