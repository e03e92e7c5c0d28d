"""Tables written by ``hoodie.demo.writer`` read back correctly with hudi-rs (the independent reader).

Each scenario is replayed on a tiny in-test model of the table (a dict per record identity,
event-time merge, hard deletes); hudi-rs must return the model's rows for the snapshot, the
read-optimized view and a time-travel read as of every instant, for table versions 9, 8 and
6, COW and MOR, partitioned and not.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hoodied.hoodie.avro.container import read_single_record
from hoodied.hoodie.bloom import BloomFilter
from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.errors import HoodieServiceError
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.properties import MergeMode, TableType, load_table_config, parse_java_properties
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])
CITIES = ("sf", "ny", "la")


def parsed_base(name: str) -> BaseFileName:
    parsed = BaseFileName.parse(name)
    assert parsed is not None, name
    return parsed


def parsed_log(name: str) -> LogFileName:
    parsed = LogFileName.parse(name)
    assert parsed is not None, name
    return parsed


def hudi_rows(path: Path, *, as_of: str | None = None, read_optimized: bool = False) -> list[tuple]:
    builder = hudi.HudiTableBuilder.from_base_uri(str(path))
    if read_optimized:
        builder = builder.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    options = hudi.HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = builder.build().read(options)
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    cols = ["_hoodie_commit_time", "id", "ts", "city", "v"]
    return sorted(tuple(r[c] for c in cols) for r in table.select(cols).to_pylist())


class Model:
    """The expected table: record identity = (partition value, key); event-time merge."""

    def __init__(self, partitioned: bool) -> None:
        self.partitioned = partitioned
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}
        self.base_rows: list[tuple] = []  # rows as written into base files (MOR read-optimized view)
        self.snapshots: dict[str, list[tuple]] = {}

    def ident(self, row: dict[str, Any]) -> tuple[str, str]:
        return (row["city"] if self.partitioned else "", row["id"])

    def apply(self, instant: str, upserts: list[dict[str, Any]], deletes: list[dict[str, Any]]) -> None:
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for row in upserts:  # within one batch: largest ts, then the last row
            k = self.ident(row)
            if k not in latest or row["ts"] >= latest[k]["ts"]:
                latest[k] = row
        gone = {self.ident(d) for d in deletes}
        for k, row in latest.items():
            if k in gone:
                if k not in self.rows:  # inserted and deleted in one commit: never written
                    continue
            current = self.rows.get(k)
            if current is None:
                self.base_rows.append(self._tuple(instant, row))
                self.rows[k] = {**row, "_t": instant}
            elif row["ts"] >= current["ts"]:
                self.rows[k] = {**row, "_t": instant}
        for k in gone:
            self.rows.pop(k, None)
        self.snapshots[instant] = self.snapshot()

    @staticmethod
    def _tuple(instant: str, row: dict[str, Any]) -> tuple:
        return (instant, row["id"], row["ts"], row["city"], row["v"])

    def snapshot(self) -> list[tuple]:
        return sorted(self._tuple(r["_t"], r) for r in self.rows.values())


def batch(
    keys: range | list[int], ts: int, v: float, city_of=lambda i: CITIES[i % 3]
) -> list[dict[str, Any]]:
    return [{"id": f"key-{i:04d}", "ts": ts, "city": city_of(i), "v": v} for i in keys]


def run_scenario(path: Path, version: int, table_type: TableType, partitioned: bool):
    storage = LocalStorage(str(path))
    spec = TableSpec(
        "trips",
        SCHEMA,
        "id",
        "city" if partitioned else None,
        "ts",
        table_type,
        version,
    )
    writer = create_table(storage, spec, max_file_rows=40)
    model = Model(partitioned)

    def upsert(rows: list[dict[str, Any]], deletes: list[dict[str, Any]] | None = None) -> str:
        data = pa.Table.from_pylist(rows, schema=SCHEMA)
        dels = pa.Table.from_pylist(deletes, schema=SCHEMA).select(["id", "city"]) if deletes else None
        result = writer.upsert(data, deletes=dels)
        model.apply(result.instant_time, rows, deletes or [])
        return result.instant_time

    def delete(rows: list[dict[str, Any]]) -> str:
        result = writer.delete(pa.Table.from_pylist(rows, schema=SCHEMA).select(["id", "city"]))
        model.apply(result.instant_time, [], rows)
        return result.instant_time

    upsert(batch(range(100), 1, 1.0))  # inserts: several file groups per partition
    upsert(batch(range(50, 130), 2, 2.0))  # updates + inserts
    delete(batch([0, 3, 51, 52, 129], 0, 0.0))  # deletes across partitions, incl. a fresh insert
    late = batch(range(60, 70), 1, 9.0)  # late arrivals: ts 1 < stored ts 2, must lose
    dup = batch([10, 10, 11], 5, 5.0) + batch([11], 4, 4.0)  # duplicates in one batch
    both = batch([30, 140], 7, 7.0)  # upserted and deleted in the same instant: deleted
    upsert(late + dup + both + batch(range(130, 140), 3, 3.0), deletes=batch([20, 21, 30, 140], 0, 0.0))
    upsert(batch([0, 3], 6, 6.0))  # re-insert deleted keys
    return writer, model


CASES = [
    (v, t, p)
    for v in (9, 8, 6)
    for t in (TableType.MERGE_ON_READ, TableType.COPY_ON_WRITE)
    for p in (True, False)
]


@pytest.mark.parametrize(("version", "table_type", "partitioned"), CASES, ids=lambda x: getattr(x, "name", x))
def test_hudi_rs_reads_what_we_wrote(
    tmp_path: Path, version: int, table_type: TableType, partitioned: bool
) -> None:
    writer, model = run_scenario(tmp_path, version, table_type, partitioned)
    assert hudi_rows(tmp_path) == model.snapshot()
    for instant, expected in model.snapshots.items():
        assert hudi_rows(tmp_path, as_of=instant) == expected, instant
    expected_ro = model.base_rows if table_type is TableType.MERGE_ON_READ else model.snapshot()
    assert hudi_rows(tmp_path, read_optimized=True) == sorted(expected_ro)


@pytest.mark.parametrize("version", [9, 8, 6])
def test_timeline_and_properties_are_hudis(tmp_path: Path, version: int) -> None:
    writer, _ = run_scenario(tmp_path, version, TableType.MERGE_ON_READ, True)
    storage = LocalStorage(str(tmp_path))
    config = load_table_config(storage)  # checksum verified
    assert (config.version, config.is_mor, config.timezone) == (version, True, "UTC")
    assert config.record_key_fields == ("id",) and config.partition_fields == ("city",)
    assert config.ordering_fields == ("ts",) and config.merge_mode is MergeMode.EVENT_TIME_ORDERING
    assert config.timeline_layout == (2 if version >= 8 else 1)
    assert not config.metadata_table_available
    timeline = Timeline.load(storage, config)
    assert [i.requested_time for i in timeline.instants] == writer.instants
    assert all(i.action is Action.DELTA_COMMIT and i.is_completed for i in timeline.instants)
    tl_dir = tmp_path / (".hoodie/timeline" if version >= 8 else ".hoodie")
    for inst in timeline.instants:
        assert (tl_dir / f"{inst.requested_time}.deltacommit.requested").read_bytes() == b""
        assert (tl_dir / f"{inst.requested_time}.deltacommit.inflight").stat().st_size > 0
        meta = timeline.read_commit_metadata(inst)
        assert meta["operationType"] in ("UPSERT", "DELETE")
        schema = meta["extraMetadata"]["schema"]
        assert "_hoodie_commit_time" not in schema and '"name":"trips_record"' in schema
        for partition, stats in meta["partitionToWriteStats"].items():
            for stat in stats:
                name = stat["path"].rsplit("/", 1)[-1]
                assert stat["partitionPath"] == partition
                assert stat["fileSizeInBytes"] == (tmp_path / stat["path"]).stat().st_size
                log_name = LogFileName.parse(name)
                if log_name is None:
                    assert parsed_base(name).instant_time == inst.requested_time
                    continue
                assert stat["logFiles"] == [name]
                if version >= 8:  # log named after the delta commit, always version 1
                    assert (log_name.instant_time, log_name.version) == (inst.requested_time, 1)
                else:  # log named after the slice's base instant, versions increasing
                    assert log_name.instant_time == stat["prevCommit"] < inst.requested_time
    if version >= 8:
        first = sorted(tl_dir.glob("*.deltacommit"))[0]
        assert read_single_record(first.read_bytes(), str(first))["operationType"] == "UPSERT"
    else:
        logs = sorted(p.name for p in (tmp_path / "city=sf").glob(".*.log.*"))
        assert any(parsed_log(n).version > 1 for n in logs)
    for city in CITIES:
        props = parse_java_properties((tmp_path / f"city={city}" / ".hoodie_partition_metadata").read_text())
        assert props["partitionDepth"] == "1" and props["commitTime"] == writer.instants[0]


def test_base_files_have_valid_footers(tmp_path: Path) -> None:
    run_scenario(tmp_path, 9, TableType.COPY_ON_WRITE, True)
    files = [p for p in tmp_path.rglob("*.parquet") if ".hoodie" not in p.parts]
    assert files
    for path in files:
        pf = pq.ParquetFile(path)
        footer = {k.decode(): v.decode() for k, v in pf.metadata.metadata.items()}
        keys = pf.read(columns=["_hoodie_record_key"]).column(0)
        if len(keys) == 0:
            continue
        bf = BloomFilter.deserialize(
            footer["org.apache.hudi.bloomfilter"], footer["hoodie_bloom_filter_type_code"]
        )
        assert bf.might_contain_many(keys).all()
        assert footer["hoodie_min_record_key"] == min(keys.to_pylist())
        names = pf.read(columns=["_hoodie_file_name"]).column(0).to_pylist()
        commit_times = pf.read(columns=["_hoodie_commit_time"]).column(0).to_pylist()
        own = parsed_base(path.name).instant_time
        # Fresh rows carry this file's name; carried-over rows keep their older commit time.
        assert all(n == path.name for n, t in zip(names, commit_times, strict=True) if t == own)


def test_rich_types_through_logs_and_base_files(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("ts", pa.int64()),
            ("amount", pa.decimal128(12, 2)),
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("ok", pa.bool_()),
            ("n", pa.int32()),
            ("blob", pa.binary()),
        ]
    )

    def rows(ts: int, lo: int, hi: int) -> pa.Table:
        return pa.Table.from_pylist(
            [
                {
                    "id": f"r{i}",
                    "ts": ts,
                    "amount": Decimal(f"{i * ts}.{i % 100:02d}"),
                    "day": dt.date(2024, 2, 1) + dt.timedelta(days=i),
                    "at": dt.datetime(2024, 2, 1, 12, tzinfo=dt.UTC) + dt.timedelta(minutes=i * ts),
                    "ok": bool(i % 2),
                    "n": -i,
                    "blob": bytes([i, ts]),
                }
                for i in range(lo, hi)
            ],
            schema=schema,
        )

    storage = LocalStorage(str(tmp_path))
    writer = create_table(storage, TableSpec("rich", schema, "id", None, "ts", TableType.MERGE_ON_READ, 9))
    writer.upsert(rows(1, 0, 20))
    writer.upsert(rows(2, 10, 30))
    expected = {r["id"]: r for r in rows(1, 0, 20).to_pylist()}
    expected.update({r["id"]: r for r in rows(2, 10, 30).to_pylist()})
    got = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(str(tmp_path)).build().read())
    got_rows = {r["id"]: {k: r[k] for k in schema.names} for r in got.to_pylist()}
    assert got_rows == expected


def test_explicit_instants_and_refusals(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    spec = TableSpec("t", SCHEMA, "id", "city", "ts", TableType.COPY_ON_WRITE, 8)
    writer = create_table(storage, spec)
    first = writer.insert(
        pa.Table.from_pylist(batch(range(5), 1, 1.0), schema=SCHEMA), instant_time="20240101000000000"
    )
    assert first.instant_time == "20240101000000000" and first.completion_time > first.instant_time
    assert first.operation == "INSERT" and first.num_inserts == 5
    with pytest.raises(ValueError, match="must be later"):
        writer.upsert(
            pa.Table.from_pylist(batch([1], 2, 2.0), schema=SCHEMA), instant_time="20230101000000000"
        )
    auto = writer.upsert(pa.Table.from_pylist(batch([1], 2, 2.0), schema=SCHEMA))
    assert auto.instant_time > first.completion_time and auto.num_updates == 1
    with pytest.raises(HoodieServiceError, match="already exists"):
        create_table(storage, spec)
    with pytest.raises(ValueError, match="lack the columns"):
        writer.upsert(pa.table({"id": ["x"]}))
    with pytest.raises(ValueError, match="version 7"):
        create_table(LocalStorage(str(tmp_path / "other")), TableSpec("t", SCHEMA, "id", version=7))


def test_demo_table(tmp_path: Path) -> None:
    from hoodied.hoodie.demo.demo_table import create_demo_table

    summary = create_demo_table(str(tmp_path / "demo"))
    assert summary["table_version"] == 9 and summary["table_type"] == "MERGE_ON_READ"
    assert summary["log_files"] > 0 and summary["updates"] == 100 and summary["deletes"] == 20
    rows = hudi.HudiTableBuilder.from_base_uri(str(tmp_path / "demo")).build().read()
    assert sum(b.num_rows for b in rows) == summary["rows"] == 300
    ro = (
        hudi.HudiTableBuilder.from_base_uri(str(tmp_path / "demo"))
        .with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
        .build()
        .read()
    )
    assert sum(b.num_rows for b in ro) == summary["inserts"] == 320
    with pytest.raises(HoodieServiceError, match="already holds a Hudi table"):
        create_demo_table(str(tmp_path / "demo"))
