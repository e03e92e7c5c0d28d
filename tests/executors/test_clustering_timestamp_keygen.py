"""Clustering a table partitioned by Hudi's ``TimestampBasedKeyGenerator`` with column and partition stats.

The tables are written by hoodied's demo writer: table version 9, copy-on-write, a long partition
field ``ts`` (epoch milliseconds, or seconds for ``UNIX_TIMESTAMP``) turned into ``yyyy/MM/dd``
partition paths as the key generator does, ``hoodie.properties`` with the key generator's
settings as Hudi 1.1 persists them for a v9 table (``hoodie.table.keygenerator.type=TIMESTAMP``
and the ``hoodie.keygen.timebased.*`` keys of ``TimestampKeyGeneratorConfig``, as in the v9
``v9_timebasedkeygen_nonhivestyle`` fixture), two inserts so every partition holds two file groups.
In the second shape a later write puts the partition *path* into ``ts`` (a string column from
then on, in the commit's schema too), as Hudi 1.1's Spark SQL writes do on such tables (they read
the partition column back from the path as a string, HUDI-7709; hudi-rs reports its
``v9_timebasedkeygen_epochmillis`` / ``_unixtimestamp`` fixtures with ``ts`` Int64 in some file
slices and Utf8 in others). The metadata table (``files``, ``column_stats`` of every column,
``partition_stats``) is initialized as Hudi's ``initializeFromFilesystem`` does: one bulk-insert
delta commit per MDT partition at ``00000000000000000``, ``...001``, ``...002``, each file group an
empty init log file and a base HFile of hoodied's records, partition stats with the table schema's
types.

Clustering must complete, hudi-rs must read the same rows through the metadata table and by
listing, the listing must not drift, and ``ts``'s statistics must carry the value type Hudi gives
them: each new file's ``column_stats`` its footer's type, ``partition_stats`` the writer schema's
(``LongWrapper`` / LONG, or ``StringWrapper`` / STRING with the longs as their decimal text once
the schema says string). Before the fix, the second shape failed in the partition-stats merge
with ``AttributeError: 'int' object has no attribute 'encode'``. The conversion rules
(``hoodie.metadata.range_types``) are checked one by one at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from hoodied.executors.clustering import ClusteringResult
from hoodied.executors.engine import Session
from hoodied.hoodie.demo.writer import TableSpec, TableWriter, create_table
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, make_write_token
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log import write_log_file
from hoodied.hoodie.metadata.colstats import (
    ColumnRange,
    ValueType,
    column_ranges,
    partition_ranges,
    partition_stats_records,
    read_parquet_metadata,
)
from hoodied.hoodie.metadata.encode import (
    COLUMN_STATS,
    FILES,
    PARTITION_STATS,
    encode_value,
    file_group_id,
    file_group_index,
    files_record,
    partition_list_record,
)
from hoodied.hoodie.metadata.index_build import init_commit_metadata, init_log_block, init_log_file_name
from hoodied.hoodie.metadata.index_records import base_file_cells, column_stats_cells, encode_index_base_file
from hoodied.hoodie.metadata.range_types import column_value_types, schema_typed_ranges
from hoodied.hoodie.properties import TableType, load_table_config, partition_metadata_text, properties_text
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.clustering import ClusteringSettings
from hoodied.service.cli.report import committed_listing_drift
from hoodied.service.spark_jobs import run_spark_service
from tests.executors.test_clustering import FAST, _schedule, spark  # noqa: F401  (module fixture)
from tests.executors.test_indexing import live_records
from tests.helpers.mor_tables import hudi_rs_rows
from tests.hoodie.metadata.record_index_mdt import _mdt_properties

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("seq", pa.int64()), ("v", pa.float64())])
SCHEMA_PATH_VALUES = SCHEMA.set(1, pa.field("ts", pa.string()))
PATH_VALUE_PARTITION = "2024/01/01"
META = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
#: epoch seconds of the rows' days (three partitions), per key generator input type
DAYS = (1_704_067_200, 1_704_153_600, 1_706_745_600)  # 2024/01/01, 2024/01/02, 2024/02/01
UNITS = {"EPOCHMILLISECONDS": 1000, "UNIX_TIMESTAMP": 1}
#: MDT partitions with their file group counts (Hudi's defaults) and init instants
MDT_PARTITIONS = (
    (FILES, 1, "00000000000000000"),
    (COLUMN_STATS, 2, "00000000000000001"),
    (PARTITION_STATS, 1, "00000000000000002"),
)


class _TimestampKeygenWriter(TableWriter):
    """The demo writer with ``TimestampBasedKeyGenerator`` partition paths (UTC, ``yyyy/MM/dd``)."""

    def __init__(self, storage: LocalStorage, spec: TableSpec, unit: int) -> None:
        super().__init__(storage, spec, max_file_rows=1000)
        self.unit = unit

    def partition_paths(self, table: pa.Table) -> pa.Array:
        seconds = [v // self.unit for v in table.column("ts").to_pylist()]
        return pa.array([datetime.fromtimestamp(s, UTC).strftime("%Y/%m/%d") for s in seconds], pa.string())


def _rows(start: int, unit: int) -> pa.Table:
    rows = [
        {"id": f"k{start + i:03d}", "ts": (DAYS[i % 3] + 60 * i) * unit, "seq": i, "v": i / 4}
        for i in range(12)
    ]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _set_properties(storage: LocalStorage, extra: dict[str, str]) -> None:
    props = dict(load_table_config(storage).props)
    props.update(extra)
    storage.put(".hoodie/hoodie.properties", properties_text(props, datetime.now(UTC)).encode("utf-8"))


def _initialize_mdt(root: Path) -> None:
    """The MDT of the table's current files, as ``initializeFromFilesystem`` writes it."""
    storage = LocalStorage(str(root))
    listing = {
        p: {f.file_name: f.size for f in files}
        for p, files in _base_files(HoodieTable.open(str(root))).items()
    }
    columns = (*META, *SCHEMA.names)
    storage.put_if_absent(
        ".hoodie/.index_defs/index.json",
        json.dumps(
            {
                "indexDefinitions": {
                    "column_stats": {
                        "indexName": "column_stats",
                        "indexType": "column_stats",
                        "indexFunction": "column_stats",
                        "sourceFields": list(columns),
                        "indexOptions": {},
                        "version": "V2",
                    }
                }
            },
            indent=2,
        ).encode("utf-8"),
    )
    mdt_storage = storage.child(".hoodie/metadata")
    mdt_storage.put_if_absent(
        ".hoodie/hoodie.properties", properties_text(_mdt_properties(9), datetime.now(UTC)).encode("utf-8")
    )
    mdt_config = load_table_config(mdt_storage, metadata_table=True)
    lock = InProcessLock(mdt_storage.base_uri)
    mdt = TimelineWriter(mdt_storage, mdt_config, lock, time_settings=FAST)
    for partition, count, init in MDT_PARTITIONS:
        if partition == FILES:
            cells = [
                (k, encode_value(r, 9))
                for k, r in [
                    partition_list_record(sorted(listing)),
                    *(files_record(p, f) for p, f in listing.items()),
                ]
            ]
        elif partition == COLUMN_STATS:
            cells = [
                c
                for p, names in listing.items()
                for n in sorted(names)
                for c in column_stats_cells(storage, p, n, columns, 9)
            ]
        else:  # per partition, the files' ranges with the table schema's types (Hudi's initialization)
            types = column_value_types(HoodieTable.open(str(root)).avro_schema(), meta_fields=True)
            cells = []
            for p, names in listing.items():
                ranges = [
                    r
                    for n in sorted(names)
                    for r in column_ranges(read_parquet_metadata(storage, f"{p}/{n}"), n, columns, 9)
                ]
                typed = schema_typed_ranges(ranges, types, 9, p)
                cells += [(k, encode_value(r, 9)) for k, r in partition_stats_records(p, typed, 9)]
        with lock:
            mdt_storage.put_if_absent(
                f"{partition}/.hoodie_partition_metadata",
                partition_metadata_text(init, 1, datetime.now(UTC)).encode("latin-1"),
            )
            stats = []
            for index in range(count):
                file_id = file_group_id(partition, index)
                write_log_file(
                    mdt_storage, f"{partition}/{init_log_file_name(file_id, init)}", [init_log_block(init)]
                )
                mine = [c for c in cells if file_group_index(c[0], count) == index]
                if not mine:
                    continue
                name = BaseFileName(file_id, make_write_token(index, 0, 0), init, "hfile").format()
                data = encode_index_base_file(base_file_cells(mine, 9, name), 9)
                mdt_storage.put_if_absent(f"{partition}/{name}", data)
                stats.append(
                    {
                        "fileId": file_id,
                        "path": f"{partition}/{name}",
                        "partitionPath": partition,
                        "numWrites": len(mine),
                        "numInserts": len(mine),
                        "fileSizeInBytes": len(data),
                    }
                )
            mdt.create_requested(Action.DELTA_COMMIT, init, None)
            mdt.transition_to_inflight(init, Action.DELTA_COMMIT)
            mdt.complete(init, Action.DELTA_COMMIT, init_commit_metadata({partition: stats}, 9))
    _set_properties(
        storage,
        {
            "hoodie.table.metadata.partitions": ",".join(sorted(p for p, _, _ in MDT_PARTITIONS)),
            "hoodie.table.metadata.partitions.inflight": "",
            "hoodie.table.index.defs.path": ".hoodie/.index_defs/index.json",
        },
    )


def _base_files(table: HoodieTable) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in table.file_system_view(listing="storage").latest_slices():
        assert s.base_file is not None
        out.setdefault(s.partition, []).append(s.base_file)
    return out


def timestamp_keygen_table(root: Path, timestamp_type: str, *, path_values: bool = False) -> Path:
    """A v9 COW table partitioned by ``TimestampBasedKeyGenerator`` on ``ts``, two file groups a
    partition, with an MDT holding ``files``, ``column_stats`` and ``partition_stats``."""
    storage = LocalStorage(str(root))
    spec = TableSpec(
        name="ts_keygen",
        schema=SCHEMA,
        record_key="id",
        partition_field="ts",
        ordering_field="seq",
        table_type=TableType.COPY_ON_WRITE,
        version=9,
        hive_style=False,
    )
    create_table(storage, spec)
    _set_properties(
        storage,
        {
            "hoodie.table.keygenerator.type": "TIMESTAMP",
            "hoodie.keygen.timebased.timestamp.type": timestamp_type,
            "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
            "hoodie.keygen.timebased.timezone": "UTC",
        },
    )
    writer = _TimestampKeygenWriter(storage, spec, UNITS[timestamp_type])
    writer.insert(_rows(0, UNITS[timestamp_type]))
    writer.insert(_rows(100, UNITS[timestamp_type]))
    if path_values:
        # a later write that put the partition path in ``ts`` (a string column from then on)
        later = TableSpec(
            name=spec.name,
            schema=SCHEMA_PATH_VALUES,
            record_key="id",
            partition_field="ts",
            ordering_field="seq",
            table_type=TableType.COPY_ON_WRITE,
            version=9,
            hive_style=False,
        )
        rows = [{"id": f"k{200 + i}", "ts": PATH_VALUE_PARTITION, "seq": i, "v": -i / 2} for i in range(4)]
        TableWriter(storage, later).insert(pa.Table.from_pylist(rows, schema=SCHEMA_PATH_VALUES))
    _initialize_mdt(root)
    return root


def _stats_of(root: Path, mdt_partition: str, column: str) -> Iterator[dict[str, Any]]:
    for record in live_records(root, mdt_partition).values():
        payload = record["ColumnStatsMetadata"]
        if payload["columnName"] == column and not payload["isDeleted"]:
            yield payload


@pytest.mark.parametrize("path_values", [False, True], ids=["long", "long-then-path-strings"])
@pytest.mark.parametrize("timestamp_type", sorted(UNITS))
def test_clustering_keeps_the_partition_stats_hudi_writes(
    tmp_path: Path,
    spark: Session,  # noqa: F811
    timestamp_type: str,
    path_values: bool,
) -> None:
    root = timestamp_keygen_table(tmp_path / "t", timestamp_type, path_values=path_values)
    table = HoodieTable.open(str(root))
    groups = _base_files(table)
    assert sorted(groups) == ["2024/01/01", "2024/01/02", "2024/02/01"]
    assert [len(groups[p]) for p in sorted(groups)] == [3 if path_values else 2, 2, 2]
    before = hudi_rs_rows(root)
    assert sum(before.values()) == (28 if path_values else 24)
    assert hudi_rs_rows(root, metadata=False) == before
    assert committed_listing_drift(table).count == 0
    t, plan = _schedule(root, ClusteringSettings())
    assert sorted(s.partition_path for g in plan.input_groups for s in g.slices) == sorted(
        p for p, files in groups.items() for _ in files
    )
    storage = LocalStorage(str(root))
    result = run_spark_service(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST)
    assert isinstance(result, ClusteringResult) and result.instant.is_completed
    assert hudi_rs_rows(root) == before == hudi_rs_rows(root, metadata=False)
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
    # ``ts`` as the writer schema has it: long, or string once a write put path strings in it
    vtype, kind = (ValueType.STRING, str) if path_values else (ValueType.LONG, int)
    rows = [dict(r) for r, n in before.items() for _ in range(n)]
    new_files = {s["path"].rsplit("/", 1)[1] for s in result.write_stats}
    per_file = {p["fileName"]: p for p in _stats_of(root, COLUMN_STATS, "ts") if p["fileName"] in new_files}
    per_partition = {p["fileName"]: p for p in _stats_of(root, PARTITION_STATS, "ts")}
    assert len(per_file) == 3 and sorted(per_partition) == sorted(groups)
    for payload in [*per_file.values(), *per_partition.values()]:
        assert payload["valueType"] == {"typeOrdinal": int(vtype), "additionalInfo": None}
    for partition, payload in per_partition.items():
        values = [r["ts"] for r in rows if r["_hoodie_partition_path"] == partition]
        assert all(isinstance(v, kind) for v in values)
        # min and max as Java compares them (Long, or String: these are ASCII)
        assert (payload["minValue"]["value"], payload["maxValue"]["value"]) == (min(values), max(values))
    if path_values:
        assert per_partition[PATH_VALUE_PARTITION]["maxValue"]["value"] == PATH_VALUE_PARTITION
        day = datetime(2024, 1, 1, tzinfo=UTC).timestamp() * UNITS[timestamp_type]
        assert per_partition[PATH_VALUE_PARTITION]["minValue"]["value"] == str(int(day))


# ---------------------------------------------------------------------------- the conversion rules


def _range(
    vtype: ValueType, low: Any, high: Any, name: str = "f.parquet", info: str | None = None
) -> ColumnRange:
    return ColumnRange(name, "ts", vtype, info, low, high, 0, 2, 10, 12)


def test_writer_schema_types() -> None:
    schema = json.dumps(
        {
            "type": "record",
            "name": "r",
            "namespace": "ns",
            "fields": [
                {"name": "ts", "type": ["null", "long"]},
                {"name": "s", "type": "string"},
                {"name": "d", "type": [{"type": "int", "logicalType": "date"}, "null"]},
                {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}},
                {
                    "name": "amount",
                    "type": [
                        "null",
                        {
                            "type": "fixed",
                            "name": "amt",
                            "size": 7,
                            "logicalType": "decimal",
                            "precision": 15,
                            "scale": 2,
                        },
                    ],
                },
                {"name": "amount2", "type": ["null", "ns.amt"]},
                {"name": "raw", "type": {"type": "fixed", "name": "raw", "size": 4}},
                {"name": "nested", "type": {"type": "record", "name": "n", "fields": []}},
                {"name": "both", "type": ["int", "string"]},
            ],
        }
    )
    types = column_value_types(schema, meta_fields=True)
    assert types == {
        **{m: (ValueType.STRING, None) for m in META},
        "ts": (ValueType.LONG, None),
        "s": (ValueType.STRING, None),
        "d": (ValueType.DATE, None),
        "t": (ValueType.TIMESTAMP_MICROS, None),
        "amount": (ValueType.DECIMAL, "15,2"),
        "amount2": (ValueType.DECIMAL, "15,2"),
        "raw": (ValueType.FIXED, None),
    }
    assert column_value_types(None, meta_fields=True) == {}
    with pytest.raises(HoodieFormatError, match="not JSON"):
        column_value_types("{", meta_fields=False)


def test_ranges_take_the_writer_schema_type() -> None:
    longs, paths = (
        _range(ValueType.LONG, 1704067200000, 1704067740000),
        _range(ValueType.STRING, "2024/01/01", "2024/01/01"),
    )
    as_string = {"ts": (ValueType.STRING, None)}
    # STRING: longs as their text; merged as Java strings
    ((_, record),) = partition_stats_records("p", schema_typed_ranges([paths, longs], as_string, 9), 9)
    stats = record["ColumnStatsMetadata"]
    assert stats["valueType"]["typeOrdinal"] == int(ValueType.STRING)
    assert (stats["minValue"][1]["value"], stats["maxValue"][1]["value"]) == ("1704067200000", "2024/01/01")
    assert stats["valueCount"] == 4
    # LONG: numeric strings parse (Long.parseLong), a path does not: Hudi's commit fails, hoodied refuses
    numeric = _range(ValueType.STRING, "1704067100000", "1704067200000")
    (merged,) = partition_ranges(schema_typed_ranges([longs, numeric], {"ts": (ValueType.LONG, None)}, 9))
    assert (merged.value_type, merged.min_value, merged.max_value) == (
        ValueType.LONG,
        1704067100000,
        1704067740000,
    )
    with pytest.raises(UnsupportedTableError, match="cannot turn into the writer schema's LONG"):
        schema_typed_ranges([longs, paths], {"ts": (ValueType.LONG, None)}, 9, "2024/01/01")
    # without a writer schema two types are refused (Hudi's merge: "Value types should be the same")
    with pytest.raises(UnsupportedTableError, match="LONG statistics in f.parquet and STRING"):
        partition_stats_records("p", [longs, paths], 9)
    # a long taken as a decimal's unscaled value when it fits the precision (BigDecimal.valueOf)
    cents = _range(ValueType.LONG, 125, 125)
    (decimal,) = schema_typed_ranges([cents], {"ts": (ValueType.DECIMAL, "10,2")}, 9)
    assert (decimal.value_type, decimal.type_info, decimal.min_value) == (ValueType.DECIMAL, "10,2", b"\x7d")
    with pytest.raises(UnsupportedTableError, match="DECIMAL"):
        schema_typed_ranges([cents], {"ts": (ValueType.DECIMAL, "2,0")}, 9)
    # an empty range (type NULL) takes the schema's type, whatever its own
    empty = _range(ValueType.NULL, None, None)
    assert schema_typed_ranges([empty], as_string, 9)[0].value_type is ValueType.STRING


@pytest.mark.parametrize(
    ("src", "value", "dst", "expected"),
    [
        (ValueType.DOUBLE, 1e7, ValueType.STRING, "1.0E7"),
        (ValueType.DOUBLE, 0.001, ValueType.STRING, "0.001"),
        (ValueType.FLOAT, 0.10000000149011612, ValueType.STRING, "0.1"),
        (ValueType.FLOAT, 0.10000000149011612, ValueType.DOUBLE, 0.1),  # Double.valueOf(Float.toString)
        (ValueType.BOOLEAN, True, ValueType.STRING, "true"),
        (ValueType.BOOLEAN, True, ValueType.LONG, 1),
        (ValueType.LONG, 2**40, ValueType.DOUBLE, float(2**40)),
        (ValueType.LONG, 2**24 + 1, ValueType.FLOAT, float(2**24)),  # nearest float, ties to even
        (ValueType.STRING, " 2.5e3 ", ValueType.DOUBLE, 2500.0),
        (ValueType.STRING, "-17", ValueType.INT, -17),
        (ValueType.LONG, 17, ValueType.INT, 17),
        (ValueType.STRING, "abc", ValueType.BYTES, b"abc"),
        (ValueType.INT, 19000, ValueType.DATE, 19000),
        (ValueType.TIMESTAMP_MICROS, -1500, ValueType.TIMESTAMP_MILLIS, -2),  # Instant.toEpochMilli floors
        (ValueType.LONG, 1_700_000_000_000, ValueType.TIMESTAMP_MILLIS, 1_700_000_000_000),
        (
            ValueType.STRING,
            "0A3E6C1D-7F4B-4E8A-9C2D-1B5F6E7A8C9D",
            ValueType.UUID,
            "0a3e6c1d-7f4b-4e8a-9c2d-1b5f6e7a8c9d",
        ),
    ],
)
def test_hudi_casts(src: ValueType, value: Any, dst: ValueType, expected: Any) -> None:
    (r,) = schema_typed_ranges([_range(src, value, value)], {"ts": (dst, None)}, 9)
    assert r.value_type is dst and r.min_value == expected and type(r.min_value) is type(expected)


@pytest.mark.parametrize(
    ("src", "value", "dst"),
    [
        (ValueType.DOUBLE, 1.0, ValueType.LONG),  # parseLong("1.0")
        (ValueType.LONG, 2**31, ValueType.INT),  # parseInt out of range
        (ValueType.BYTES, b"x", ValueType.STRING),
        (ValueType.INT, 1, ValueType.BOOLEAN),
        (ValueType.DATE, 19000, ValueType.STRING),  # castToString takes no LocalDate
        (ValueType.STRING, "not-a-uuid", ValueType.UUID),
        (ValueType.TIMESTAMP_MILLIS, 5, ValueType.LOCAL_TIMESTAMP_MILLIS),  # Instant is no LocalDateTime
        (ValueType.INT, 90_000_000, ValueType.TIME_MILLIS),  # beyond the day
        (ValueType.DECIMAL, b"\x01", ValueType.DECIMAL),  # another precision or scale
    ],
)
def test_casts_hudi_fails_on_are_refused(src: ValueType, value: Any, dst: ValueType) -> None:
    info = "10,2" if dst is ValueType.DECIMAL else None
    with pytest.raises(UnsupportedTableError, match="nothing was written"):
        schema_typed_ranges(
            [_range(src, value, value, info="5,1" if src is ValueType.DECIMAL else None)],
            {"ts": (dst, info)},
            9,
            "p",
        )


def test_table_version_8_converts_only_disagreeing_columns() -> None:
    wide = _range(ValueType.LONG, 2**32 + 5, 2**32 + 5)
    # one type: left as it is even where the schema says otherwise (no colsWithSchemaEvolved)
    assert schema_typed_ranges([wide, wide], {"ts": (ValueType.INT, None)}, 8) == [wide, wide]
    # two types: coerceToComparable, a long narrowed as Java's intValue, a double truncated
    narrowed = schema_typed_ranges(
        [wide, _range(ValueType.DOUBLE, -2.7, 9.9)], {"ts": (ValueType.INT, None)}, 8
    )
    assert [(r.min_value, r.max_value) for r in narrowed] == [(5, 5), (-2, 9)]
