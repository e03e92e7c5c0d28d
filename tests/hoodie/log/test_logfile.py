"""The Hudi log format on every log file of every fixture, the writer, and corrupt files."""

from __future__ import annotations

import base64
import datetime as dt
import io
import itertools
import json
import logging
import pickle
import struct
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap64

from hoodied.hoodie.avro.container import read_single_record
from hoodied.hoodie.avro.container import schema as project_schema
from hoodied.hoodie.errors import FileAlreadyExistsError, HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.filenames import LogFileName
from hoodied.hoodie.log import (
    MAGIC,
    BlockType,
    CommandType,
    DeleteRecord,
    HeaderKey,
    LogBlock,
    avro_block_records,
    avro_block_schema,
    avro_block_to_arrow,
    avro_schema_to_arrow,
    delete_block_records,
    encode_avro_data_block,
    encode_block,
    encode_command_block,
    encode_delete_block,
    encode_parquet_data_block,
    encode_record_positions,
    hfile_block_content,
    is_rollback_command,
    parquet_block_table,
    read_log_blocks,
    write_log_file,
)
from hoodied.hoodie.storage import LocalStorage
from tests.helpers.avro_samples import RICH_JSON, UTC, arrowish, rich_record
from tests.helpers.fixtures import ALL_FIXTURES

# ---------------------------------------------------------------------------- helpers


def table_storage(shared_table: Any, fid: str) -> LocalStorage:
    return LocalStorage(str(shared_table(fid)))


def log_paths(storage: LocalStorage) -> list[str]:
    return sorted(i.path for i in storage.walk() if LogFileName.parse(i.name) is not None)


def blocks_of(storage: LocalStorage, path: str, **kw: Any) -> list[LogBlock]:
    return list(read_log_blocks(storage, path, **kw))


def only_block(storage: LocalStorage, path: str) -> LogBlock:
    blocks = blocks_of(storage, path)
    assert len(blocks) == 1, (path, blocks)
    return blocks[0]


def decode_independently(block: LogBlock) -> list[dict[str, Any]]:
    """Avro data block content decoded with plain struct + fastavro, not hoodie's decoder."""
    content = block.content()
    version, count = struct.unpack_from(">ii", content, 0)
    assert version == 3
    schema = fastavro.parse_schema(json.loads(block.header[HeaderKey.SCHEMA]))
    pos, out = 8, []
    for _ in range(count):
        (length,) = struct.unpack_from(">i", content, pos)
        record = fastavro.schemaless_reader(io.BytesIO(content[pos + 4 : pos + 4 + length]), schema, None)
        out.append(cast(dict[str, Any], record))  # a data block holds records
        pos += 4 + length
    assert pos == len(content)
    return out


def log_name(name: str) -> LogFileName:
    parsed = LogFileName.parse(name)
    assert parsed is not None, name
    return parsed


def record_bytes(content: bytes) -> list[bytes]:
    """The Avro bytes of each record of an Avro data block's content."""
    _, count = struct.unpack_from(">ii", content, 0)
    pos, out = 8, []
    for _ in range(count):
        (length,) = struct.unpack_from(">i", content, pos)
        out.append(content[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return out


def relaxed(t: pa.DataType) -> pa.DataType:
    """Parquet-avro's legacy 2-level lists (``list<array: T not null>``) compare equal to
    ``list<element: T>``: the Avro schema allows null elements, that writer cannot store them."""
    if pa.types.is_list(t):
        return pa.list_(pa.field("element", relaxed(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, relaxed(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, relaxed(f.type), f.nullable) for f in t])
    return t


def table_schema_json(storage: LocalStorage) -> str | None:
    """extraMetadata.schema of the latest completed write commit (JSON in v6, Avro in v8/9)."""
    timeline = ".hoodie/timeline" if storage.exists(".hoodie/timeline") else ".hoodie"
    names = sorted(
        i.name for i in storage.list(timeline) if i.name.rsplit(".", 1)[-1] in ("commit", "deltacommit")
    )
    for name in reversed(names):
        data = storage.read(f"{timeline}/{name}")
        if not data:
            continue
        meta = read_single_record(data, name) if data[:4] == b"Obj\x01" else json.loads(data)
        schema = (meta.get("extraMetadata") or {}).get("schema")
        if schema:
            return str(schema)
    return None


# ------------------------------------------------------------------ every fixture


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES))
def test_every_log_file_of_every_fixture(shared_table: Any, fid: str) -> None:
    storage = table_storage(shared_table, fid)
    for path in log_paths(storage):
        blocks = blocks_of(storage, path)
        assert blocks, path
        # Blocks tile the file exactly, and their instants are those of completed writes.
        assert sum(b.block_size for b in blocks) == storage.size(path)
        for block in blocks:
            assert block.format_version == 1 and not block.footer
            assert block.instant_time and len(block.instant_time) == 17
            if block.block_type is BlockType.AVRO_DATA:
                table = avro_block_to_arrow(block)
                records = list(avro_block_records(block))
                assert records == decode_independently(block)
                assert table.equals(pa.Table.from_pylist(records, schema=table.schema))
                # both writers (dicts via fastavro, Arrow vectorised) reproduce Hudi's bytes exactly
                assert encode_avro_data_block(records, block.header[HeaderKey.SCHEMA]) == block.content()
                assert encode_avro_data_block(table, block.header[HeaderKey.SCHEMA]) == block.content()
            elif block.block_type is BlockType.DELETE:
                deletes = delete_block_records(block)
                assert encode_delete_block(deletes) == block.content()
            elif block.block_type is BlockType.PARQUET_DATA:
                assert parquet_block_table(block).schema.equals(avro_block_schema(block))
            elif block.block_type is BlockType.HFILE_DATA:
                assert path.startswith(".hoodie/metadata/")
                assert hfile_block_content(block).startswith(b"DATABLK*")
                assert "HoodieMetadataRecord" in (block.schema_json or "")
            else:
                assert block.block_type is BlockType.COMMAND and is_rollback_command(block)
            # re-framing a block yields the same block
            again = encode_block(block.block_type, block.header, block.content(), block.footer)
            assert len(again) == block.block_size


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES))
def test_mdt_initialisation_logs_hold_one_empty_delete_block(shared_table: Any, fid: str) -> None:
    storage = table_storage(shared_table, fid)
    init_logs = [p for p in log_paths(storage) if p.startswith(".hoodie/metadata/") and p.endswith("_0-0-0")]
    if not storage.exists(".hoodie/metadata"):
        assert not init_logs
        return
    assert init_logs
    for path in init_logs:
        block = only_block(storage, path)
        name = LogFileName.parse(path.rsplit("/", 1)[1])
        assert name is not None
        assert block.block_type is BlockType.DELETE
        assert dict(block.header) == {HeaderKey.INSTANT_TIME: name.instant_time}
        assert delete_block_records(block) == []
        assert block.content() == bytes.fromhex("000000030000000100")


# Per MDT partition: (log files, HFile data blocks, delete blocks) — HUDI-HFILE-MDT-BLOOM notes §7.
MDT_INVENTORY = {
    "mor/avro/v8_trips_8i3u1d": {
        "files": (8, 7, 1),
        "column_stats": (16, 14, 2),
        "partition_stats": (8, 7, 1),
        "record_index": (19, 7, 12),
        "secondary_index_rider_idx": (12, 0, 12),
    },
    "mor/avro/v9_txns_simple_meta": {
        "files": (14, 13, 1),
        "column_stats": (28, 26, 2),
        "partition_stats": (14, 13, 1),
        "record_index": (43, 26, 17),
        "secondary_index_merchant_idx": (10, 0, 10),
        "secondary_index_txn_date_idx": (10, 0, 10),
    },
}


@pytest.mark.parametrize("fid", sorted(MDT_INVENTORY))
def test_mdt_log_inventory(shared_table: Any, fid: str) -> None:
    storage = table_storage(shared_table, fid)
    counts: dict[str, list[int]] = {}
    for path in log_paths(storage):
        if not path.startswith(".hoodie/metadata/"):
            continue
        c = counts.setdefault(path.split("/")[2], [0, 0, 0])
        c[0] += 1
        for block in blocks_of(storage, path):
            c[1] += block.block_type is BlockType.HFILE_DATA
            c[2] += block.block_type is BlockType.DELETE
    assert {k: tuple(v) for k, v in counts.items()} == MDT_INVENTORY[fid]


def test_v6_avro_update_block(shared_table: Any) -> None:
    storage = table_storage(shared_table, "mor/avro/v6_trips_8i1u")
    (path,) = [p for p in log_paths(storage) if not p.startswith(".hoodie")]
    block = only_block(storage, path)
    assert block.block_type is BlockType.AVRO_DATA
    assert block.instant_time == "20250331030645735"  # the update's delta commit; the name has the base's
    assert log_name(path.rsplit("/", 1)[1]).instant_time == "20250331030642808"
    rows = avro_block_to_arrow(block).to_pylist()
    assert [(r["rider"], r["fare"], r["city"]) for r in rows] == [("rider-D", 25.0, "san_francisco")]
    assert rows[0]["_hoodie_commit_time"] == "20250331030645735"


def test_v6_delete_block_holds_three_deletes(shared_table: Any) -> None:
    storage = table_storage(shared_table, "mor/avro/v6_trips_8i3d")
    (path,) = [p for p in log_paths(storage) if not p.startswith(".hoodie")]
    block = only_block(storage, path)
    assert block.block_type is BlockType.DELETE
    assert block.instant_time == "20250618054714114"
    assert block.schema_json and "v6_trips_8i3d_record" in block.schema_json
    deletes = delete_block_records(block)
    assert len(deletes) == 3
    assert {d.partition_path for d in deletes} == {"city=san_francisco"}
    assert all(d.ordering_value == 0 and d.ordering_type == "IntWrapper" for d in deletes)
    assert all(d.record_key and len(d.record_key) == 36 for d in deletes)
    # the keys deleted are exactly the san_francisco riders A, C and D of the base file
    base = next(
        i.path
        for i in storage.walk()
        if i.path.startswith("city=san_francisco/") and i.name.endswith("parquet")
    )
    rows = pq.read_table(storage.local_path(base), columns=["uuid", "rider"]).to_pylist()
    deleted = sorted(r["rider"] for r in rows if r["uuid"] in {d.record_key for d in deletes})
    assert deleted == ["rider-A", "rider-C", "rider-D"]


def test_v6_rollback_command_block(shared_table: Any, parse: Parse) -> None:
    storage = table_storage(shared_table, "mor/parquet/v6_nonpartitioned_rollback")
    paths = [p for p in log_paths(storage) if not p.startswith(".hoodie")]
    by_version = {log_name(p).version: only_block(storage, p) for p in paths}
    assert sorted(by_version) == [1, 2, 3]
    rolled_back, command, later = by_version[1], by_version[2], by_version[3]
    assert rolled_back.block_type is later.block_type is BlockType.PARQUET_DATA
    assert command.block_type is BlockType.COMMAND and is_rollback_command(command)
    assert command.command_type is CommandType.ROLLBACK
    assert command.target_instant_time == rolled_back.instant_time == "20250126040826878"
    assert command.instant_time == "20250126040936578"
    assert command.content() == b""
    assert storage.exists(".hoodie/20250126040936578.rollback")
    # Our encoder produces the same block (Hudi's header order differs, so compare decoded)
    ours = encode_command_block("20250126040936578", "20250126040826878")
    assert len(ours) == command.block_size
    assert parse(ours)[0].header == command.header
    rows = parquet_block_table(later).to_pylist()
    assert [(r["name"], r["isActive"]) for r in rows] == [("Bob", True)]


def test_v8_log_files(shared_table: Any) -> None:
    storage = table_storage(shared_table, "mor/avro/v8_trips_8i3u1d")
    paths = [p for p in log_paths(storage) if not p.startswith(".hoodie")]
    assert len(paths) == 5
    kinds = {}
    for path in paths:
        block = only_block(storage, path)
        name = LogFileName.parse(path.rsplit("/", 1)[1])
        assert name is not None and name.version == 1
        assert block.instant_time == name.instant_time  # v8: the delta commit's own instant
        kinds[block.instant_time] = block
    types = {t: b.block_type for t, b in sorted(kinds.items())}
    assert list(types.values()) == [
        BlockType.AVRO_DATA,  # update A
        BlockType.DELETE,  # delete F
        BlockType.AVRO_DATA,  # update J
        BlockType.DELETE,  # delete J
        BlockType.AVRO_DATA,  # update G, after the compaction
    ]
    updates = [
        r for b in kinds.values() if b.block_type is BlockType.AVRO_DATA for r in avro_block_records(b)
    ]
    assert sorted((r["rider"], r["fare"]) for r in updates) == [
        ("rider-A", 0.0),
        ("rider-G", 0.0),
        ("rider-J", 0.0),
    ]
    deletes = [d for b in kinds.values() if b.block_type is BlockType.DELETE for d in delete_block_records(b)]
    assert sorted((d.partition_path for d in deletes), key=str) == ["city=chennai", "city=sao_paulo"]
    rider_j = next(r["uuid"] for r in updates if r["rider"] == "rider-J")
    assert any(
        d.record_key == rider_j and d.partition_path == "city=chennai" for d in deletes
    )  # update then delete J


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES))
def test_arrow_types_agree_with_base_files(shared_table: Any, fid: str) -> None:
    storage = table_storage(shared_table, fid)
    schemas = {table_schema_json(storage)}
    for path in log_paths(storage):
        if not path.startswith(".hoodie"):
            schemas.update(b.schema_json for b in blocks_of(storage, path))
    schemas.discard(None)
    bases = [
        i.path for i in storage.walk() if i.name.endswith(".parquet") and not i.path.startswith(".hoodie")
    ]
    if not schemas or not bases:
        pytest.skip(f"{fid}: no schema or no parquet base files")
    compared = 0
    for text in schemas:
        arrow = avro_schema_to_arrow(str(text))
        for base in bases:
            base_schema = pq.read_schema(storage.local_path(base))
            for f in arrow:
                if f.name in base_schema.names:
                    assert relaxed(f.type) == relaxed(base_schema.field(f.name).type), (base, f)
                    compared += 1
    assert compared


# ------------------------------------------------------------------------ writer


Parse = Callable[..., list[LogBlock]]


@pytest.fixture
def parse(tmp_path: Path) -> Parse:
    """``parse(data, **kw)``: the blocks of ``data`` written as a new file of a scratch storage."""
    storage = LocalStorage(str(tmp_path / "scratch"))
    names = itertools.count()

    def run(data: bytes, **kw: Any) -> list[LogBlock]:
        name = f"{next(names)}.log"
        storage.put(name, data)
        return list(read_log_blocks(storage, name, **kw))

    return run


def test_avro_data_block_round_trip(tmp_path: Path) -> None:
    records = [rich_record(i) for i in range(300)]
    content = encode_avro_data_block(records, RICH_JSON)
    header = {HeaderKey.INSTANT_TIME: "20250101000000000", HeaderKey.SCHEMA: RICH_JSON}
    storage = LocalStorage(str(tmp_path))
    path = "p=1/.f1-0_20250101000000000.log.1_0-1-1"
    size = write_log_file(storage, path, [encode_block(BlockType.AVRO_DATA, header, content)])
    assert size == storage.size(path)
    with pytest.raises(FileAlreadyExistsError):
        write_log_file(storage, path, [encode_block(BlockType.AVRO_DATA, header, content)])
    (block,) = read_log_blocks(storage, path)
    assert block.instant_time == "20250101000000000" and block.content() == content
    # fastavro alone, from the raw content, decodes what we wrote
    independent = decode_independently(block)
    assert len(independent) == 300
    assert list(avro_block_records(block)) == independent
    table = avro_block_to_arrow(block)
    assert table.schema == avro_schema_to_arrow(RICH_JSON)
    expected = pa.Table.from_pylist([arrowish(r) for r in independent], schema=table.schema)
    assert table.equals(expected)
    assert table.column("ts").type == pa.timestamp("us", tz="UTC")
    assert table.column("ts_ms").type == pa.timestamp("ms", tz="UTC")
    assert table.column("local_ts").type == pa.timestamp("us")
    assert table.column("amount").type == pa.decimal128(15, 2)
    assert table.column("big").type == pa.decimal256(40, 3)
    assert table.schema.field("id").nullable is False and table.schema.field("small").nullable is True


def test_arrow_writer_round_trip_and_checks(parse: Parse) -> None:
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 0}},
            {
                "name": "ts",
                "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
                "default": None,
            },
            {"name": "n", "type": ["null", "long"], "default": None},
        ],
    }
    text = json.dumps(schema)
    values = [0, 1, -1, 127, 128, -128, -129, 255, -256, -32768, 10**9]
    table = pa.table(
        {
            "key": [f"k{i}" for i in range(len(values))],
            "d": pa.array([Decimal(v) for v in values], pa.decimal128(10, 0)),
            # another unit than the schema's: cast on the way in
            "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC)] * len(values), pa.timestamp("ms", tz="UTC")),
        }
    )
    content = encode_avro_data_block(table, text)
    header = {HeaderKey.INSTANT_TIME: "1" * 17, HeaderKey.SCHEMA: text}
    (block,) = parse(encode_block(BlockType.AVRO_DATA, header, content))
    back = avro_block_to_arrow(block)
    assert back.column("d").to_pylist() == [Decimal(v) for v in values]
    assert back.column("n").null_count == len(values)  # a missing nullable column is written as null
    assert back.column("ts").type == pa.timestamp("us", tz="UTC")
    # decimals are minimal two's complement, as Java's BigInteger.toByteArray() (-128 -> 0x80)
    assert decode_independently(block)[5]["d"] == Decimal(-128)
    assert record_bytes(content)[5].startswith(b"\x04k5" + b"\x02\x80")  # key "k5", then d: 1 byte 0x80
    with pytest.raises(ValueError, match="'key' is missing"):
        encode_avro_data_block(table.drop_columns(["key"]), text)
    with pytest.raises(ValueError, match="'key' holds nulls"):
        encode_avro_data_block(table.set_column(0, "key", pa.array([None] * len(values), pa.string())), text)


def test_delete_block_round_trip(parse: Parse) -> None:
    deletes = [
        DeleteRecord("k1", "p=1", 0),
        DeleteRecord("k2", "p=1", 2**40),
        DeleteRecord("k3", "p=2", 1.5),
        DeleteRecord("k4", "p=2", "abc"),
        DeleteRecord("k5", "p=2", b"\x00\x01"),
        DeleteRecord("k6", "p=2", True),
        DeleteRecord("k7", "p=2", Decimal("12.5")),
        DeleteRecord("k8", "p=2", dt.date(2024, 2, 29)),
        DeleteRecord("k9", "p=2", dt.datetime(2024, 2, 29, 1, 2, 3, 4, tzinfo=UTC)),
        DeleteRecord("k10", None, None),
        DeleteRecord("k11", "p=3", 7, "LongWrapper"),
        DeleteRecord("k12", "p=3", (1, "x", None)),
    ]
    content = encode_delete_block(deletes)
    version, length = struct.unpack_from(">ii", content)
    assert version == 3 and length == len(content) - 8
    header = {HeaderKey.INSTANT_TIME: "20250101000000000"}
    (block,) = parse(encode_block(BlockType.DELETE, header, content))
    got = delete_block_records(block)
    assert [d.record_key for d in got] == [d.record_key for d in deletes]
    assert [d.ordering_type for d in got] == [
        "IntWrapper",
        "LongWrapper",
        "DoubleWrapper",
        "StringWrapper",
        "BytesWrapper",
        "BooleanWrapper",
        "DecimalWrapper",
        "DateWrapper",
        "TimestampMicrosWrapper",
        None,
        "LongWrapper",
        "ArrayWrapper",
    ]
    assert [d.ordering_value for d in got] == [
        0,
        2**40,
        1.5,
        "abc",
        b"\x00\x01",
        True,
        Decimal("12.500000000000000"),
        dt.date(2024, 2, 29),
        dt.datetime(2024, 2, 29, 1, 2, 3, 4, tzinfo=UTC),
        None,
        7,
        (1, "x", None),
    ]
    assert got[9].partition_path is None
    # Everything but the ArrayWrapper (appended by newer Hudi) decodes with the project's schema copy.
    plain = encode_delete_block(deletes[:-1])
    decoded = cast(dict[str, Any], fastavro.schemaless_reader(
        io.BytesIO(plain[8:]), project_schema("HoodieDeleteRecordList"), None
    ))
    assert [r["recordKey"] for r in decoded["deleteRecordList"]] == [d.record_key for d in deletes[:-1]]
    assert decoded["deleteRecordList"][0]["orderingVal"] == {"value": 0}


def test_parquet_data_block_round_trip(parse: Parse) -> None:
    table = pa.table(
        {"_hoodie_record_key": ["a", "b"], "v": pa.array([1.5, None]), "d": pa.array([1, 2], pa.int32())}
    )
    content = encode_parquet_data_block(table, avro_schema_json='{"type":"record","name":"r","fields":[]}')
    assert content[:4] == b"PAR1" and content[-4:] == b"PAR1"
    header = {HeaderKey.INSTANT_TIME: "20250101000000000", HeaderKey.SCHEMA: "{}"}
    (block,) = parse(encode_block(BlockType.PARQUET_DATA, header, content))
    assert parquet_block_table(block).equals(table)
    meta = pq.ParquetFile(io.BytesIO(block.content())).metadata
    assert meta.metadata[b"parquet.avro.schema"].startswith(b'{"type":"record"')
    assert meta.row_group(0).column(0).compression == "GZIP"


def test_headers_record_positions_and_compacted_times(parse: Parse) -> None:
    positions = [0, 1, 2, 3, 10, 11, 500_000, 2**33 + 5]
    value = encode_record_positions(positions)
    raw = base64.b64decode(value)
    assert struct.unpack_from("<Q", raw, 0)[0] == 2  # portable Roaring64: LE bucket count ...
    assert struct.unpack_from("<I", raw, 8)[0] == 0  # ... then LE high 32 bits of the first bucket
    assert struct.unpack_from("<H", raw, 12)[0] in (12346, 12347)  # a portable 32-bit bitmap cookie
    expected = BitMap64(positions)
    expected.run_optimize()
    assert raw == expected.serialize()
    header = {
        HeaderKey.INSTANT_TIME: "20250101000000002",
        HeaderKey.SCHEMA: RICH_JSON,
        HeaderKey.RECORD_POSITIONS: value,
        HeaderKey.BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS: "20250101000000000",
        HeaderKey.COMPACTED_BLOCK_TIMES: "20250101000000000,20250101000000001",
        HeaderKey.IS_PARTIAL: "false",
        HeaderKey.BLOCK_IDENTIFIER: "0,1",
    }
    (block,) = parse(encode_block(BlockType.AVRO_DATA, header, encode_avro_data_block([], RICH_JSON)))
    assert block.record_positions == BitMap64(positions)
    assert block.base_file_instant_time_of_record_positions == "20250101000000000"
    assert block.compacted_block_times == ("20250101000000000", "20250101000000001")
    assert block.is_partial is False
    assert avro_block_to_arrow(block).num_rows == 0
    (plain,) = parse(encode_block(BlockType.AVRO_DATA, {HeaderKey.INSTANT_TIME: "1" * 17}, b""))
    assert plain.record_positions is None and plain.compacted_block_times == ()


def test_large_file_is_read_block_by_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = LocalStorage(str(tmp_path))
    big = bytes(range(256)) * 6000  # 1.5 MB each: beyond the 1 MiB read window
    header = {HeaderKey.INSTANT_TIME: "20250101000000000"}
    blocks = [encode_block(BlockType.HFILE_DATA, header, big + bytes([i])) for i in range(3)]
    write_log_file(storage, "big.log", blocks)
    reads: list[int] = []
    real = LocalStorage.read_range

    def spy(self: LocalStorage, path: str, offset: int, length: int) -> bytes:
        reads.append(length)
        return real(self, path, offset, length)

    monkeypatch.setattr(LocalStorage, "read_range", spy)
    monkeypatch.setattr(LocalStorage, "read", lambda *a: pytest.fail("whole-file read"))
    got = list(read_log_blocks(storage, "big.log"))
    assert len(got) == 3 and all(b._content is None for b in got)  # content not held
    assert max(reads) <= 1 << 20
    assert [b.content()[-1] for b in got] == [0, 1, 2] and got[1].content()[:-1] == big


def test_blocks_pickle_and_empty_files(shared_table: Any, tmp_path: Path) -> None:
    storage = table_storage(shared_table, "mor/avro/v6_trips_8i3d")
    (path,) = [p for p in log_paths(storage) if not p.startswith(".hoodie")]
    block = only_block(storage, path)
    again = pickle.loads(pickle.dumps(block))  # blocks travel to Spark workers
    assert again == block and delete_block_records(again) == delete_block_records(block)
    assert block.content(storage) == block.content()
    scratch = LocalStorage(str(tmp_path))
    scratch.put("empty.log", b"")  # a writer that died before its first block
    assert list(read_log_blocks(scratch, "empty.log")) == []


def hudi_rs_rows(root: Path) -> dict[str, float]:
    hudi = pytest.importorskip("hudi")
    table = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(str(root)).build().read())
    return {r["rider"]: r["fare"] for r in table.select(["rider", "fare"]).to_pylist()}


def test_hudi_rs_reads_the_log_files_we_write(hudi_table: Any) -> None:
    """The second implementation: hudi-rs merges our Avro, delete and rollback blocks."""
    root = hudi_table("mor/avro/v6_trips_8i1u")
    storage = LocalStorage(str(root))
    (path,) = [p for p in log_paths(storage) if not p.startswith(".hoodie")]
    original = storage.read(path)
    (update,) = read_log_blocks(storage, path)
    assert hudi_rs_rows(root)["rider-D"] == 25.0
    # rider-D's update re-written by the Arrow writer with another fare, and rider-E deleted
    table = avro_block_to_arrow(update)
    table = table.set_column(table.schema.get_field_index("fare"), "fare", pa.array([99.0]))
    base = next(
        i.path
        for i in storage.walk()
        if i.path.startswith("city=san_francisco/") and i.name.endswith("parquet")
    )
    keys = {r["rider"]: r["uuid"] for r in pq.read_table(storage.local_path(base)).to_pylist()}
    delete = encode_delete_block([DeleteRecord(keys["rider-E"], "city=san_francisco", 0)])
    storage.delete(path)
    write_log_file(
        storage,
        path,
        [
            encode_block(
                BlockType.AVRO_DATA, update.header, encode_avro_data_block(table, update.schema_json or "")
            ),
            encode_block(BlockType.DELETE, update.header, delete),
        ],
    )
    rows = hudi_rs_rows(root)
    assert rows["rider-D"] == 99.0 and "rider-E" not in rows and len(rows) == 7
    # a rollback command block after the original update hides it again (v6 semantics)
    storage.delete(path)
    write_log_file(
        storage, path, [original, encode_command_block("20250331030646000", update.instant_time or "")]
    )
    rows = hudi_rs_rows(root)
    assert rows["rider-D"] == 33.9 and len(rows) == 8


# ------------------------------------------------------------------ corrupt files


def two_block_file() -> tuple[bytes, bytes]:
    header = {HeaderKey.INSTANT_TIME: "20250101000000000", HeaderKey.SCHEMA: RICH_JSON}
    first = encode_block(BlockType.AVRO_DATA, header, encode_avro_data_block([rich_record(1)], RICH_JSON))
    second = encode_block(
        BlockType.DELETE,
        {HeaderKey.INSTANT_TIME: "20250101000000001"},
        encode_delete_block([DeleteRecord("k", "p", 0)]),
    )
    return first, second


def assert_one_line(exc: pytest.ExceptionInfo[BaseException], *needles: str) -> None:
    message = str(exc.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_truncated_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first, second = two_block_file()
    storage = LocalStorage(str(tmp_path))
    storage.put("p/.f_1.log.1_0-1-1", first + second[:-20])
    with pytest.raises(HoodieFormatError) as exc:
        list(read_log_blocks(storage, "p/.f_1.log.1_0-1-1"))
    assert_one_line(exc, "p/.f_1.log.1_0-1-1", f"offset {len(first)}", "truncated")
    with caplog.at_level(logging.WARNING, logger="hoodied.hoodie.log.frame"):
        got = list(read_log_blocks(storage, "p/.f_1.log.1_0-1-1", skip_corrupt=True))
    assert [b.block_type for b in got] == [BlockType.AVRO_DATA]
    assert "truncated" in caplog.text
    # a file cut inside its first block length field
    storage.put("cut.log", first[:10])
    with pytest.raises(HoodieFormatError, match="offset 0 is truncated"):
        list(read_log_blocks(storage, "cut.log"))
    assert list(read_log_blocks(storage, "cut.log", skip_corrupt=True)) == []


def test_length_fields_disagree(parse: Parse) -> None:
    first, second = two_block_file()
    bad = bytearray(first)
    struct.pack_into(">q", bad, len(bad) - 8, len(first) - 8 + 3)  # trailing size off by 3
    with pytest.raises(HoodieFormatError) as exc:
        parse(bytes(bad) + second)
    assert_one_line(exc, "offset 0", "disagreeing length fields")
    assert [b.instant_time for b in parse(bytes(bad) + second, skip_corrupt=True)] == ["20250101000000001"]
    # content length larger than the block: framing agrees, the inside does not
    bad = bytearray(second)
    header_len = (
        len(encode_block(BlockType.DELETE, {HeaderKey.INSTANT_TIME: "20250101000000001"}, b"")) - 8 - 4 - 8
    )
    struct.pack_into(">q", bad, header_len, 10_000)
    with pytest.raises(HoodieFormatError, match=f"offset {len(first)} declares content of 10000 bytes"):
        parse(first + bytes(bad))


def test_garbage_between_blocks(parse: Parse) -> None:
    first, second = two_block_file()
    data = first + b"garbage!" * 5 + second
    with pytest.raises(HoodieFormatError) as exc:
        parse(data)
    assert_one_line(exc, "offset 0", "not followed by another block's magic")
    # Like Hudi's reader: the block the garbage follows counts as corrupt, the next one is recovered.
    got = parse(data, skip_corrupt=True)
    assert [b.block_type for b in got] == [BlockType.DELETE]
    assert got[0].offset == len(first) + 40
    assert delete_block_records(got[0]) == [DeleteRecord("k", "p", 0, "IntWrapper")]


def test_garbage_before_first_block_and_torn_tail(parse: Parse) -> None:
    first, second = two_block_file()
    with pytest.raises(HoodieFormatError, match="no log block magic at offset 0"):
        parse(b"junk" + first)
    assert len(parse(b"junk" + first, skip_corrupt=True)) == 1
    with pytest.raises(HoodieFormatError, match="3 trailing bytes"):
        parse(first + second + MAGIC[:3])
    assert len(parse(first + second + MAGIC[:3], skip_corrupt=True)) == 2


def test_real_multi_block_file_with_garbage(shared_table: Any, tmp_path: Path, parse: Parse) -> None:
    storage = table_storage(shared_table, "mor/avro/v9_txns_simple_overwrite")
    path = next(p for p in log_paths(storage) if len(blocks_of(storage, p)) == 2)
    data = storage.read(path)
    a, b = blocks_of(storage, path)
    broken = data[: b.offset] + b"\x00" * 17 + data[b.offset :]
    got = parse(broken, skip_corrupt=True)
    assert [(g.block_type, g.instant_time) for g in got] == [(b.block_type, b.instant_time)]
    assert got[0].content() == b.content()


def test_corrupt_block_contents(parse: Parse) -> None:
    header = {HeaderKey.INSTANT_TIME: "20250101000000000", HeaderKey.SCHEMA: RICH_JSON}
    content = bytearray(encode_avro_data_block([rich_record(1), rich_record(2)], RICH_JSON))
    struct.pack_into(">i", content, 4, 3)  # declares 3 records, holds 2
    (block,) = parse(encode_block(BlockType.AVRO_DATA, header, bytes(content)))
    with pytest.raises(HoodieFormatError, match="offset 0: Avro data block is truncated at record 2"):
        avro_block_to_arrow(block)
    # a record whose bytes do not follow the schema
    wrong = json.dumps({"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]})
    (block,) = parse(
        encode_block(
            BlockType.AVRO_DATA,
            {**header, HeaderKey.SCHEMA: wrong},
            encode_avro_data_block([rich_record(1)], RICH_JSON),
        )
    )
    with pytest.raises(HoodieFormatError, match="corrupt Avro data block: record 0 decodes to"):
        avro_block_to_arrow(block)
    (block,) = parse(encode_block(BlockType.DELETE, header, b"\x00\x00\x00\x03\x00\x00\x00\x05\x02"))
    with pytest.raises(HoodieFormatError, match="payload declares 5 bytes"):
        delete_block_records(block)


def test_kryo_delete_block_is_unsupported(parse: Parse) -> None:
    header = {HeaderKey.INSTANT_TIME: "20250101000000000"}
    for version in (1, 2):
        kryo = struct.pack(">ii", version, 4) + b"\x01\x02\x03\x04"
        (block,) = parse(encode_block(BlockType.DELETE, header, kryo))
        with pytest.raises(UnsupportedTableError) as exc:
            delete_block_records(block)
        assert_one_line(exc, "offset 0", f"delete block version {version} (Kryo) is not supported")


def test_unsupported_framing(parse: Parse) -> None:
    first, _ = two_block_file()
    newer = bytearray(first)
    struct.pack_into(">i", newer, 14, 2)  # log format version 2
    with pytest.raises(UnsupportedTableError, match="log format version 2"):
        parse(bytes(newer), skip_corrupt=True)
    unknown_key = encode_block(BlockType.COMMAND, {HeaderKey.INSTANT_TIME: "1" * 17}, b"")
    patched = bytearray(unknown_key)
    struct.pack_into(">i", patched, 26, 42)  # the first header entry's key
    with pytest.raises(UnsupportedTableError, match="unknown header key 42"):
        parse(bytes(patched))
    corrupt_type = bytearray(first)
    struct.pack_into(">i", corrupt_type, 18, 2)  # CORRUPT_BLOCK is never written
    with pytest.raises(HoodieFormatError, match="invalid block type 2"):
        parse(bytes(corrupt_type))
