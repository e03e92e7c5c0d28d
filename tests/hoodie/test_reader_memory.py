"""The memory bound of a snapshot read: one file slice's log records plus one base-file row group.

A base file is read row group by row group (``hoodie.reader._base_batches``), so the Arrow
pool's peak during a read must not grow with the number of row groups of the base file. Each
read runs in a fresh interpreter, whose pool's ``max_memory()`` is the peak of that read alone.
Tables are written by the project's writer with small row groups; the same rows per row group,
4 against 40 of them, copy-on-write (base file only) and merge-on-read (base file and a log
file updating and deleting some of the rows).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hoodied.hoodie.demo import writer as demo_writer
from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.properties import TableType
from hoodied.hoodie.storage import LocalStorage

ROWS_PER_GROUP = 4_000
UPDATED = np.arange(0, 4 * ROWS_PER_GROUP, 40)  # rows the MOR table's log file updates...
DELETED = np.arange(7, 4 * ROWS_PER_GROUP, 160)  # ...and deletes, all in the smaller table too
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("ts", pa.int64()),
        ("rider", pa.string()),
        ("fare", pa.float64()),
        ("p", pa.string()),
    ]
)

# Reads the snapshot in a fresh process; prints the pool's peak, the row count and the row groups.
_READ = """
import json, sys
import pyarrow as pa
import pyarrow.parquet as pq
from hoodied.hoodie.table import HoodieTable
table = HoodieTable.open(sys.argv[1])
slices = list(table.file_system_view().read_slices())
groups = [pq.ParquetFile(table.storage.local_path(s.base_file.path)).metadata.num_row_groups for s in slices]
rows = sum(b.num_rows for b in table.read_snapshot())
print(json.dumps({"peak": pa.default_memory_pool().max_memory(), "rows": rows,
                  "groups": groups, "logs": sum(len(s.log_files) for s in slices)}))
"""


def _rows(n: int, *, start: int = 0, ts: int = 1) -> pa.Table:
    idx = pa.array(np.arange(start, start + n, dtype=np.int64))
    rng = np.random.default_rng(start + ts)
    return pa.table(
        {
            "id": pc.binary_join_element_wise("key-", pc.utf8_lpad(pc.cast(idx, pa.string()), 10, "0"), ""),
            "ts": pa.array(np.full(n, ts, dtype=np.int64)),
            "rider": pc.binary_join_element_wise(
                "rider-", pc.cast(pa.array(rng.integers(0, 500, n)), pa.string()), ""
            ),
            "fare": pa.array(rng.uniform(3, 90, n)),
            "p": pa.array(["one"] * n),
        },
        schema=SCHEMA,
    )


def _table(root: Path, groups: int, table_type: TableType, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A one-file-group table whose base file has ``groups`` row groups (plus a log file on MOR)."""
    path = root / f"{table_type.name.lower()}_{groups}"
    path.mkdir()
    # the writer's row groups are sized for production (many MB); small ones make many of them
    small = functools.partial(demo_writer.write_base_file, row_group_rows=ROWS_PER_GROUP)
    monkeypatch.setattr(demo_writer, "write_base_file", small)
    n = groups * ROWS_PER_GROUP
    writer = create_table(
        LocalStorage(str(path)), TableSpec(path.name, SCHEMA, "id", "p", "ts", table_type, 9), max_file_rows=n
    )
    writer.upsert(_rows(n))
    if table_type is TableType.MERGE_ON_READ:
        # the same log records for every size: the bound is they plus one row group
        writer.upsert(
            _rows(n, ts=2).take(pa.array(UPDATED)),
            deletes=_rows(n).take(pa.array(DELETED)).select(["id", "p"]),
        )
    return path


def _read(path: Path) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", _READ, str(path)], check=True, capture_output=True, text=True)
    result: dict[str, int] = json.loads(out.stdout)
    return result


@pytest.mark.parametrize("table_type", [TableType.COPY_ON_WRITE, TableType.MERGE_ON_READ])
def test_read_peak_does_not_grow_with_the_row_groups(
    table_type: TableType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    few = _read(_table(tmp_path, 4, table_type, monkeypatch))
    many = _read(_table(tmp_path, 40, table_type, monkeypatch))
    assert few["groups"] == [4] and many["groups"] == [40]
    assert (few["logs"] > 0) is (table_type is TableType.MERGE_ON_READ)
    gone = len(DELETED) if table_type is TableType.MERGE_ON_READ else 0
    assert (few["rows"], many["rows"]) == (4 * ROWS_PER_GROUP - gone, 40 * ROWS_PER_GROUP - gone)
    # ten times the rows, about the same peak: the log records and one row group at a time
    assert many["peak"] < 1.5 * few["peak"], (few, many)
