"""Base-file string columns read as dictionaries (``hoodie.reader._dictionary_columns``).

Columns stored as dictionary indices only (Hudi's commit time, partition path and file name,
low-cardinality fields) are read as Arrow dictionaries and expanded; the rows and the schema
must be exactly those of the plain read, and the same as hudi-rs's, from a local path and
through an object store (the file handle path). High-cardinality columns, whose writer fell
back to plain pages, are read plainly. The fixture tables are too small (a few rows per file)
for any column to qualify, so the tables here are written by the project's writer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import obstore
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from obstore.store import MemoryStore

from hoodied.hoodie import reader
from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.properties import TableType
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from tests.helpers.mor_tables import hudi_rs_rows, multiset

ROWS = 20_000
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("ts", pa.int64()),
        ("rider", pa.string()),
        ("tag", pa.string()),
        ("p", pa.string()),
    ]
)


def _rows(n: int, *, ts: int = 1, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    idx = pa.array(np.arange(n, dtype=np.int64))
    tags = pa.array(rng.choice(np.array(["red", "green", "blue"]), n))
    return pa.table(
        {
            "id": pc.binary_join_element_wise("key-", pc.utf8_lpad(pc.cast(idx, pa.string()), 10, "0"), ""),
            "ts": pa.array(np.full(n, ts, dtype=np.int64)),
            "rider": pc.binary_join_element_wise(
                "rider-", pc.cast(pa.array(rng.integers(0, 300, n)), pa.string()), ""
            ),
            # nulls in a dictionary column: null indices must stay null values
            "tag": pc.if_else(pa.array(rng.uniform(size=n) < 0.1), pa.nulls(n, pa.string()), tags),
            "p": pa.array(np.where(np.arange(n) % 2 == 0, "even", "odd")),
        },
        schema=SCHEMA,
    )


@pytest.fixture(scope="module", params=[TableType.COPY_ON_WRITE, TableType.MERGE_ON_READ])
def table_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    table_type: TableType = request.param
    path = tmp_path_factory.mktemp("dictionary") / table_type.name.lower()
    path.mkdir()
    writer = create_table(
        LocalStorage(str(path)), TableSpec(path.name, SCHEMA, "id", "p", "ts", table_type, 9)
    )
    writer.upsert(_rows(ROWS))
    if table_type is TableType.MERGE_ON_READ:
        updates = _rows(ROWS, ts=2, seed=5).take(pa.array(np.arange(0, ROWS, 7)))
        deletes = _rows(ROWS).take(pa.array(np.arange(3, ROWS, 101))).select(["id", "p"])
        writer.upsert(updates, deletes=deletes)
    return path


def _plain(monkeypatch: pytest.MonkeyPatch, path: Path | ObjectStorage) -> pa.Table:
    with monkeypatch.context() as m:
        m.setattr(reader, "_dictionary_columns", lambda metadata, schema: [])
        return HoodieTable.open(path if isinstance(path, ObjectStorage) else str(path)).to_arrow()


def test_low_cardinality_columns_are_chosen_and_fallback_ones_not(table_path: Path) -> None:
    files = sorted(table_path.rglob("*.parquet"))
    assert files
    for file in files:
        pf = pq.ParquetFile(file)
        chosen = set(reader._dictionary_columns(pf.metadata, pf.schema_arrow))
        constant = {"_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name", "p"}
        assert constant | {"rider", "tag"} <= chosen, chosen
        assert not chosen & {"id", "_hoodie_record_key", "_hoodie_commit_seqno", "ts"}, chosen


def test_dictionary_read_equals_the_plain_read_and_hudi_rs(
    table_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = HoodieTable.open(str(table_path)).to_arrow()
    plain = _plain(monkeypatch, table_path)
    assert ours.schema == plain.schema
    assert not any(pa.types.is_dictionary(f.type) for f in ours.schema)
    assert ours.equals(plain)
    assert ours.column("tag").null_count > 0
    assert multiset(ours) == hudi_rs_rows(table_path)


def test_dictionary_read_through_an_object_store(table_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    for file in table_path.rglob("*"):
        if file.is_file():
            obstore.put(store, f"t/{file.relative_to(table_path).as_posix()}", file.read_bytes())
    storage = ObjectStorage.over(store, "gs://lake/t")
    assert storage.local_path("") is None  # the base files are read through file handles
    ours = HoodieTable.open(storage).to_arrow()
    assert ours.equals(HoodieTable.open(str(table_path)).to_arrow().select(ours.column_names))
    assert ours.equals(_plain(monkeypatch, storage))
