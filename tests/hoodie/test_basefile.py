"""Parquet base files: footers as Hudi writes them, the Avro schema, streaming and bounded row groups."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodied.hoodie import basefile
from hoodied.hoodie.basefile import (
    KEY_AVRO_SCHEMA,
    KEY_BLOOM,
    KEY_BLOOM_TYPE,
    KEY_MAX,
    KEY_MIN,
    META_FIELDS,
    BaseFileSettings,
    BaseFileWriter,
    arrow_to_avro_schema,
    avro_schema_json,
    read_footer,
    seqno_array,
    with_meta_columns,
    write_base_file,
    write_base_file_stream,
)
from hoodied.hoodie.bloom import BloomFilter
from hoodied.hoodie.errors import FileAlreadyExistsError, UnsupportedTableError
from hoodied.hoodie.storage import LocalStorage
from tests.helpers.fixtures import ALL_FIXTURES

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("ts", pa.int64()),
        ("amount", pa.decimal128(15, 2)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("ok", pa.bool_()),
        ("tags", pa.list_(pa.string())),
        ("info", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    ]
)


def sample(n: int, start: int = 0) -> pa.Table:
    ids = [f"id-{i:06d}" for i in range(start, start + n)]
    return pa.table(
        {
            "id": ids,
            "ts": list(range(start, start + n)),
            "amount": [Decimal(i) / 4 for i in range(start, start + n)],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 30) for i in range(n)],
            "at": [dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in range(n)],
            "ok": [i % 2 == 0 for i in range(n)],
            "tags": [["x", str(i)] for i in range(n)],
            "info": [{"a": i, "b": str(i)} for i in range(n)],
        },
        schema=SCHEMA,
    )


def with_meta(table: pa.Table, name: str = "f.parquet") -> pa.Table:
    return with_meta_columns(
        table, record_keys=table["id"], partition_path="p=1", file_name=name, commit_time="20250101000000000"
    )


def test_written_file_looks_like_hudis(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    table = with_meta(sample(1000).take(list(range(999, -1, -1))))  # keys written in descending order
    stats = write_base_file(
        storage, "p=1/f.parquet", table, avro_schema=avro_schema_json(table.schema, "t"), row_group_rows=300
    )
    assert (stats.num_records, stats.min_record_key, stats.max_record_key) == (1000, "id-000000", "id-000999")
    assert stats.file_size == (tmp_path / "p=1" / "f.parquet").stat().st_size
    pf = pq.ParquetFile(tmp_path / "p=1" / "f.parquet")
    assert pf.schema_arrow.names[:5] == list(META_FIELDS)
    assert all(pf.schema_arrow.field(n).nullable for n in META_FIELDS)
    md = pf.metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [300, 300, 300, 100]
    assert {md.row_group(0).column(i).compression for i in range(md.num_columns)} == {"GZIP"}
    footer = read_footer(storage, "p=1/f.parquet")
    assert b"ARROW:schema" not in md.metadata  # Hudi files carry only the Avro schema
    assert footer[KEY_MIN] == "id-000000" and footer[KEY_MAX] == "id-000999"
    assert footer[KEY_BLOOM_TYPE] == "DYNAMIC_V0"
    assert footer["writer.model.name"] == "avro"
    bf = BloomFilter.deserialize(footer[KEY_BLOOM], footer[KEY_BLOOM_TYPE])
    assert bf.might_contain_many(table["id"]).all()
    avro = json.loads(footer[KEY_AVRO_SCHEMA])
    assert [f["name"] for f in avro["fields"]][:6] == [*META_FIELDS, "id"]
    back = pf.read()
    assert back.column("_hoodie_commit_seqno")[0].as_py() == "20250101000000000_0_0"
    assert back.select(SCHEMA.names).to_pylist() == table.select(SCHEMA.names).to_pylist()


def test_streaming_writer_bounds_row_groups(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    schema = with_meta(sample(1)).schema
    batches = (with_meta(sample(70, start)).to_batches()[0] for start in range(0, 700, 70))
    stats = write_base_file_stream(
        storage, "s.parquet", schema, batches, avro_schema=avro_schema_json(schema, "t"), row_group_rows=256
    )
    assert stats.num_records == 700
    md = pq.ParquetFile(tmp_path / "s.parquet").metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [256, 256, 188]
    keys = pq.read_table(tmp_path / "s.parquet", columns=["_hoodie_record_key"]).column(0).to_pylist()
    assert keys == [f"id-{i:06d}" for i in range(700)]


def test_row_groups_close_at_the_block_size_in_arrow_bytes(tmp_path: Path) -> None:
    """Without a row cap a row group closes once its Arrow data reaches ``hoodie.parquet.block.size``
    (the batch that crosses it included); the default (120 MiB) keeps a small file in one row group."""
    storage = LocalStorage(str(tmp_path))
    schema = with_meta(sample(1)).schema
    batches = [with_meta(sample(70, start)).to_batches()[0] for start in range(0, 700, 70)]
    per_batch = batches[0].nbytes
    settings = BaseFileSettings(block_size=3 * per_batch - 1)  # reached by the third batch
    avro = avro_schema_json(schema, "t")
    stats = write_base_file_stream(storage, "b.parquet", schema, iter(batches), avro_schema=avro,
                                   settings=settings)
    assert stats.num_records == 700
    md = pq.ParquetFile(tmp_path / "b.parquet").metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [210, 210, 210, 70]
    keys = pq.read_table(tmp_path / "b.parquet", columns=["_hoodie_record_key"]).column(0).to_pylist()
    assert keys == [f"id-{i:06d}" for i in range(700)]
    write_base_file_stream(storage, "d.parquet", schema, iter(batches), avro_schema=avro)
    assert pq.ParquetFile(tmp_path / "d.parquet").metadata.num_row_groups == 1


def test_row_groups_never_buffer_more_than_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block size above ``MAX_ROW_GROUP_BYTES`` still closes row groups at the cap."""
    storage = LocalStorage(str(tmp_path))
    schema = with_meta(sample(1)).schema
    batches = [with_meta(sample(70, start)).to_batches()[0] for start in range(0, 700, 70)]
    monkeypatch.setattr(basefile, "MAX_ROW_GROUP_BYTES", 5 * batches[0].nbytes - 1)
    avro = avro_schema_json(schema, "t")
    write_base_file_stream(storage, "c.parquet", schema, iter(batches), avro_schema=avro,
                           settings=BaseFileSettings(block_size=10**9))
    md = pq.ParquetFile(tmp_path / "c.parquet").metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [350, 350]


def test_empty_file_has_filter_but_no_key_range(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    table = with_meta(sample(0))
    stats = write_base_file(storage, "e.parquet", table, avro_schema=avro_schema_json(table.schema, "t"))
    assert stats.num_records == 0 and stats.min_record_key is None
    footer = read_footer(storage, "e.parquet")
    assert KEY_MIN not in footer and KEY_BLOOM in footer


def test_files_are_write_once(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    table = with_meta(sample(3))
    write_base_file(storage, "x.parquet", table, avro_schema="{}")
    with pytest.raises(FileAlreadyExistsError):
        write_base_file(storage, "x.parquet", table, avro_schema="{}")


def test_bad_input_is_refused(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    with pytest.raises(ValueError, match="meta fields"):
        write_base_file(storage, "a.parquet", sample(3), avro_schema="{}")
    table = with_meta(sample(2))
    nulls = table.set_column(2, "_hoodie_record_key", pa.array([None, "k"], pa.string()))
    writer = BaseFileWriter(storage, "b.parquet", nulls.schema, avro_schema="{}")
    with pytest.raises(ValueError, match="null _hoodie_record_key"):
        writer.write(nulls)
    with pytest.raises(UnsupportedTableError, match="column t: timestamp unit 'ns'"):
        arrow_to_avro_schema(pa.schema([("t", pa.timestamp("ns"))]), "x")


def test_seqno_and_meta_columns() -> None:
    assert seqno_array("20250101000000000", 3, 7, 2).to_pylist() == [
        "20250101000000000_3_7",
        "20250101000000000_3_8",
    ]
    carried = with_meta_columns(
        sample(2),
        record_keys=pa.array(["a", "b"]),
        partition_path="",
        file_name="f",
        commit_time=pa.array(["1", "2"]),
        seqno=pa.array(["1_0_0", "2_0_0"]),
    )
    assert carried.column("_hoodie_commit_time").to_pylist() == ["1", "2"]
    with pytest.raises(ValueError, match="sequence numbers"):
        with_meta_columns(
            sample(1),
            record_keys=pa.array(["a"]),
            partition_path="",
            file_name="f",
            commit_time=pa.array(["1"]),
        )


def _normalise_list_items(schema: object) -> object:
    """parquet-avro's 2-level lists drop the item nullability that Spark's Avro schema had."""
    if isinstance(schema, dict):
        out = {k: _normalise_list_items(v) for k, v in schema.items()}
        if out.get("type") == "array" and isinstance(out["items"], list) and out["items"][0] == "null":
            out["items"] = out["items"][1]
        return out
    if isinstance(schema, list):
        return [_normalise_list_items(v) for v in schema]
    return schema


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES))
def test_avro_schema_matches_fixture_footers(fid: str, shared_table) -> None:
    """Our Arrow->Avro mapping reproduces the ``parquet.avro.schema`` Hudi wrote (names, types)."""
    table = shared_table(fid)
    files = [p for p in table.rglob("*.parquet") if ".hoodie" not in p.relative_to(table).parts]
    seen = 0
    for path in files:
        footer = pq.ParquetFile(path).metadata.metadata or {}
        if b"parquet.avro.schema" not in footer:
            continue
        expected = json.loads(footer[b"parquet.avro.schema"])
        has_meta = expected["fields"][0]["name"] == "_hoodie_commit_time"
        got = arrow_to_avro_schema(
            pq.ParquetFile(path).schema_arrow, expected["name"].removesuffix("_record"), meta_fields=has_meta
        )
        assert _normalise_list_items(got) == _normalise_list_items(expected), path
        seen += 1
    if not seen:
        pytest.skip(f"{fid}: no parquet-avro base files")


def test_create_schema_flavour() -> None:
    got = arrow_to_avro_schema(
        pa.schema([("a", pa.string()), ("b", pa.int64())]), "t", meta_fields=False, null_first=False
    )
    assert got == {
        "type": "record",
        "name": "t_record",
        "namespace": "hoodie.t",
        "fields": [{"name": "a", "type": ["string", "null"]}, {"name": "b", "type": ["long", "null"]}],
    }


def test_a_failed_write_leaves_no_file(tmp_path) -> None:
    import os

    import pyarrow as pa

    from hoodied.hoodie.basefile import BaseFileWriter, with_meta_columns
    from hoodied.hoodie.storage import LocalStorage

    storage = LocalStorage(str(tmp_path))
    data = with_meta_columns(
        pa.table({"id": ["a", "b"], "v": [1, 2]}),
        record_keys=pa.array(["a", "b"]),
        partition_path="",
        file_name="f.parquet",
        commit_time="20260101000000000",
    )
    try:
        with BaseFileWriter(storage, "f.parquet", data.schema, avro_schema='{"type":"record"}') as w:
            w.write(data)
            raise RuntimeError("task killed")
    except RuntimeError:
        pass
    assert os.listdir(tmp_path) == []


_CLOSE_PAST_THE_LIMIT = """
import os, resource, signal, sys
import pyarrow as pa
from hoodied.hoodie.basefile import BaseFileWriter, with_meta_columns
from hoodied.hoodie.storage import LocalStorage
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
keys = pa.array([f"key-{i:08d}" for i in range(50_000)])
data = with_meta_columns(pa.table({"k": keys}), record_keys=keys, partition_path="p", file_name="f.parquet",
                         commit_time="20261125000000000")
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
writer = BaseFileWriter(LocalStorage(sys.argv[1]), "p/f.parquet", data.schema, avro_schema="{}",
                        row_group_rows=100_000)
writer.write(data)  # held in memory: the row group goes out with the footer, at close
try:
    writer.close()
except OSError as exc:
    print("refused", exc.errno)
else:
    sys.exit("the close went through")
print(sorted(os.listdir(os.path.join(sys.argv[1], "p"))))
"""


def test_a_close_the_disk_refuses_leaves_no_temp_file(tmp_path: Path) -> None:
    """The last row group and the footer go out at ``close``; when the disk refuses them (a full
    disk, here a file-size limit), neither the file nor its temp file remains."""
    done = subprocess.run([sys.executable, "-c", _CLOSE_PAST_THE_LIMIT, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["refused 27", "[]"]
