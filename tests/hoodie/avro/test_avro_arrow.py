"""Avro <-> Arrow for Hudi data blocks: the vectorised decoder and encoder against fastavro."""

from __future__ import annotations

import io
from typing import Any, cast

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from hoodied.hoodie.avro.arrow import AvroDecodeError, decode_avro_records
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.log import avro_schema_to_arrow, encode_avro_data_block
from tests.helpers.avro_samples import RICH_JSON, RICH_SCHEMA, arrowish, rich_record


def test_arrow_writer_matches_fastavro(monkeypatch: pytest.MonkeyPatch) -> None:
    from hoodied.hoodie.avro import encode as ae

    records = [rich_record(i) for i in range(120)]
    arrow_schema = avro_schema_to_arrow(RICH_JSON)
    table = pa.Table.from_pylist([arrowish(r) for r in records], schema=arrow_schema)
    assert encode_avro_data_block(table, RICH_JSON) == encode_avro_data_block(records, RICH_JSON)
    # slices, several chunks, several encoder chunks, columns in another order
    monkeypatch.setattr(ae, "_CHUNK_ROWS", 16)
    pieces = pa.concat_tables([table.slice(3, 50), table.slice(70, 41)])
    shuffled = pieces.select(list(reversed(pieces.column_names)))
    expected = encode_avro_data_block(records[3:53] + records[70:111], RICH_JSON)
    assert encode_avro_data_block(shuffled, RICH_JSON) == expected
    batch = pieces.to_batches()[0]  # a RecordBatch (the first slice) works too
    assert encode_avro_data_block(batch, RICH_JSON) == encode_avro_data_block(records[3:53], RICH_JSON)


def test_decoder_matches_fastavro_on_many_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    from hoodied.hoodie.avro import arrow as aa

    monkeypatch.setattr(aa, "_CHUNK_ROWS", 7)  # many chunks, and chunks that are all-null in places
    records = [rich_record(i) for i in range(60)]
    schema = fastavro.parse_schema(RICH_SCHEMA)
    parts = []
    for r in records:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, r)
        parts.append(buf.getvalue())
    ends = np.cumsum([len(p) for p in parts])
    starts = ends - [len(p) for p in parts]
    table = decode_avro_records(b"".join(parts), starts, ends, RICH_JSON)
    decoded = [cast(dict[str, Any], fastavro.schemaless_reader(io.BytesIO(p), schema, None)) for p in parts]
    assert table.equals(pa.Table.from_pylist([arrowish(r) for r in decoded], schema=table.schema))


def test_decoder_reads_blocked_arrays_and_maps() -> None:
    """Avro lets writers split arrays/maps into several blocks, with negative counts + sizes."""
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "xs", "type": {"type": "array", "items": "long"}},
            {"name": "m", "type": {"type": "map", "values": "string"}},
        ],
    }

    def zz(n: int) -> bytes:
        n = (n << 1) ^ (n >> 63)
        out = bytearray()
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out)

    def s(v: str) -> bytes:
        return zz(len(v)) + v.encode()

    rec1 = zz(2) + zz(1) + zz(2) + zz(-1) + zz(1) + zz(300) + zz(0) + zz(-1) + zz(4) + s("a") + s("b") + zz(0)
    rec2 = zz(0) + zz(1) + s("k") + s("v") + zz(1) + s("k2") + s("") + zz(0)
    data = rec1 + rec2
    table = decode_avro_records(data, np.array([0, len(rec1)]), np.array([len(rec1), len(data)]), schema)
    assert table.column("xs").to_pylist() == [[1, 2, 300], []]
    assert table.column("m").to_pylist() == [[("a", "b")], [("k", "v"), ("k2", "")]]


def test_decoder_rejects_records_that_do_not_match_their_length() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}
    with pytest.raises(AvroDecodeError, match="record 1 decodes to 1 bytes but holds 2"):
        decode_avro_records(b"\x02\x04\x00", np.array([0, 1]), np.array([1, 3]), schema)
    with pytest.raises(AvroDecodeError, match="past the end"):
        decode_avro_records(b"\x02\x84", np.array([0, 1]), np.array([1, 2]), schema)


def test_unsupported_avro_types() -> None:
    union = {"type": "record", "name": "r", "fields": [{"name": "u", "type": ["null", "int", "string"]}]}
    with pytest.raises(UnsupportedTableError, match="'u'.*unions"):
        avro_schema_to_arrow(union)
    recursive = {"type": "record", "name": "LL", "fields": [{"name": "next", "type": ["null", "LL"]}]}
    with pytest.raises(UnsupportedTableError, match="recursive"):
        avro_schema_to_arrow(recursive)
    with pytest.raises(HoodieFormatError, match="not valid JSON"):
        avro_schema_to_arrow("{nope")
