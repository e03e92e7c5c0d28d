"""Merge-on-read tables for the compaction tests, and the readers that check them.

``written_mor_table`` writes a table with ``hoodie.demo.writer``: several file groups per
partition, then rounds of updates (event-time ordering, late arrivals that must lose) and
deletes, so most file groups carry several log files with data and delete blocks.
``hudi_rs_rows`` reads a table with hudi-rs (the independent reader) as a multiset of rows
without ``_hoodie_file_name``, which compaction changes by design.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa

from hoodied.hoodie.demo.writer import TableSpec, TableWriter, create_table
from hoodied.hoodie.properties import TableType
from hoodied.hoodie.storage import LocalStorage

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])
CITIES = ("sf", "ny", "la")


def norm_value(v: Any) -> Any:
    """A hashable, type-insensitive form of a value, for comparing rows as multisets."""
    if isinstance(v, float | decimal.Decimal):
        return ("num", str(v))
    if isinstance(v, dt.datetime | dt.date):
        return ("ts", v.isoformat())
    if isinstance(v, dict):
        return tuple(sorted((k, norm_value(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(norm_value(x) for x in v)
    return v


def multiset(table: pa.Table) -> Counter[Any]:
    """Rows as a multiset, ``_hoodie_file_name`` left out."""
    if "_hoodie_file_name" in table.column_names:
        table = table.drop_columns(["_hoodie_file_name"])
    return Counter(tuple(sorted((k, norm_value(v)) for k, v in r.items())) for r in table.to_pylist())


def hudi_rs_rows(
    root: Path | str, *, read_optimized: bool = False, metadata: bool | None = None,
    options: Mapping[str, str] | None = None,
) -> Counter[Any]:
    """hudi-rs's snapshot of the table at ``root`` (a path or an object-store URI, ``options`` then
    saying how to reach it): listing through the metadata table or storage as ``metadata`` says,
    hudi-rs's default when ``None``."""
    builder = hudi.HudiTableBuilder.from_base_uri(str(root))
    if options:
        builder = builder.with_options(dict(options))
    if metadata is not None:
        builder = builder.with_hudi_option("hoodie.metadata.enable", "true" if metadata else "false")
    if read_optimized:
        builder = builder.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    batches = builder.build().read(hudi.HudiReadOptions())
    return multiset(pa.Table.from_batches(batches)) if batches else Counter()


def hudi_rs_slices(root: Path) -> dict[tuple[str, str], Any]:
    """hudi-rs's latest file slices by (partition, file id)."""
    table = hudi.HudiTableBuilder.from_base_uri(str(root)).build()
    return {(s.partition_path, s.file_id): s for s in table.get_file_slices()}


def _rows(keys: range | list[int], ts: int, v: float) -> list[dict[str, Any]]:
    return [{"id": f"key-{i:04d}", "ts": ts, "city": CITIES[i % 3], "v": v} for i in keys]


def written_mor_table(root: Path, version: int = 9, *, partitioned: bool = True) -> list[str]:
    """A MOR table with many updates and deletes in log files; returns the instants written."""
    return mor_table_writer(root, version, partitioned=partitioned).instants


def pending_compaction_table(root: Path, version: int = 9) -> str:
    """``written_mor_table`` with a compaction of every file slice requested; its instant time."""
    from hoodied.hoodie.locks import InProcessLock
    from hoodied.hoodie.timeline.truetime import TimeSettings
    from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction

    written_mor_table(root, version)
    storage = LocalStorage(str(root))
    inst, result = schedule_compaction(
        storage, InProcessLock(storage.base_uri),
        CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED),
        time_settings=TimeSettings(max_expected_clock_skew_ms=5),
    )
    assert inst is not None, result.reason
    return inst.requested_time


def mor_table_writer(root: Path, version: int = 9, *, partitioned: bool = True) -> TableWriter:
    """``written_mor_table``, returning its writer (to write more after a service was planned)."""
    spec = TableSpec("trips", SCHEMA, "id", "city" if partitioned else None, "ts",
                     TableType.MERGE_ON_READ, version)
    writer = create_table(LocalStorage(str(root)), spec, max_file_rows=25)

    def table(rows: list[dict[str, Any]]) -> pa.Table:
        return pa.Table.from_pylist(rows, schema=SCHEMA)

    def keys(rows: list[dict[str, Any]]) -> pa.Table:
        return table(rows).select(["id", "city"])

    writer.insert(table(_rows(range(150), 1, 1.0)))  # 2-3 file groups per partition
    writer.upsert(table(_rows(range(0, 150, 2), 2, 2.0)))  # every other key updated
    writer.delete(keys(_rows(range(0, 150, 7), 0, 0.0)))  # deletes in every file group
    writer.upsert(table(_rows(range(10, 60), 1, 9.0) + _rows(range(150, 170), 3, 3.0)))  # late: ts 1 loses
    writer.upsert(table(_rows(range(100, 140), 4, 4.0)), deletes=keys(_rows([5, 6, 8], 0, 0.0)))
    writer.upsert(table(_rows([0, 7, 14], 5, 5.0)))  # deleted keys come back
    return writer
