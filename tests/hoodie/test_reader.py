"""Snapshot reader: our reads of real Hudi tables against hudi-rs (``hudi`` on PyPI), plus merge rules.

THE acceptance test: for every fixture, snapshot, read-optimized and as-of-every-completed-
instant reads equal hudi-rs's as multisets of rows (all columns, values normalised), with the
metadata-table listing and with storage listing (hudi-rs lists storage once ``.hoodie/metadata``
is moved away), and in the pending states derived from real tables by deleting completion files.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.fsview import CommitState
from hoodied.hoodie.log import (
    BlockType,
    DeleteRecord,
    HeaderKey,
    encode_avro_data_block,
    encode_block,
    encode_command_block,
    encode_delete_block,
    write_log_file,
)
from hoodied.hoodie.merge import LogRecordBuffer, MergeSpec, record_keys
from hoodied.hoodie.properties import MergeMode
from hoodied.hoodie.reader import read_file_slice
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable, Listing
from tests.helpers.fixtures import ALL_FIXTURES

LANCE = "cow/v9_lance_nonpartitioned"
READABLE = sorted(f for f in ALL_FIXTURES if f != LANCE)
RO = {"hoodie.read.use.read_optimized.mode": "true"}


# --------------------------------------------------------------------------------------
# Comparison helpers
# --------------------------------------------------------------------------------------


def _norm(v: Any) -> Any:
    """A hashable, type-insensitive form of a value (int32 vs int64, tz-naive UTC, ...)."""
    if isinstance(v, float):
        return ("nan",) if math.isnan(v) else ("f", round(v, 9))
    if isinstance(v, decimal.Decimal):
        return ("d", str(v.normalize()))
    if isinstance(v, dt.datetime):
        return ("ts", (v if v.tzinfo else v.replace(tzinfo=dt.UTC)).timestamp())
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(_norm(x) for x in v)
    return v


def _rows(table: pa.Table | None) -> Counter[Any]:
    if table is None:
        return Counter()
    return Counter(tuple(sorted((k, _norm(v)) for k, v in r.items())) for r in table.to_pylist())


def _theirs(path: Path, *, ro: bool = False, as_of: str | None = None) -> Counter[Any]:
    table = hudi.HudiTableBuilder(str(path)).build()
    options = hudi.HudiReadOptions(hudi_options=RO if ro else None)
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = table.read(options)
    return _rows(pa.Table.from_batches(batches) if batches else None)


def _ours(
    table: HoodieTable, listing: Listing, *, ro: bool = False, as_of: str | None = None
) -> Counter[Any]:
    batches = list(table.read_snapshot(as_of=as_of, read_optimized=ro, listing=listing))
    for b in batches:
        assert b.schema.equals(table.schema()), "every batch carries the table schema"
    return _rows(pa.Table.from_batches(batches, schema=table.schema()))


def _describe(theirs: Counter[Any], ours: Counter[Any]) -> str:
    lines = [f"hudi-rs {sum(theirs.values())} rows, ours {sum(ours.values())} rows"]
    lines += [f"  only hudi-rs: {dict(r)}" for r in (theirs - ours)]
    lines += [f"  only ours:    {dict(r)}" for r in (ours - theirs)]
    return "\n".join(lines)


def _assert_same_as_hudi_rs(ours_path: Path, theirs_path: Path, listing: Listing) -> int:
    """Snapshot, read-optimized, and as of every completed instant; returns the number of reads."""
    table = HoodieTable.open(str(ours_path))
    points = [None] + [i.requested_time for i in table.timeline.completed()]
    reads = 0
    for ro in (False, True):
        for as_of in points:
            theirs = _theirs(theirs_path, ro=ro, as_of=as_of)
            ours = _ours(table, listing, ro=ro, as_of=as_of)
            what = f"{'read-optimized' if ro else 'snapshot'} as of {as_of or 'latest'}, listing {listing}"
            assert ours == theirs, f"{what}:\n{_describe(theirs, ours)}"
            reads += 1
    return reads


def _without_mdt(path: Path) -> Path:
    """Move ``.hoodie/metadata`` out of the table (hudi-rs then lists storage)."""
    mdt = path / ".hoodie" / "metadata"
    if mdt.exists():
        shutil.move(str(mdt), str(path.parent / f"{path.name}.metadata-moved"))
    return path


# --------------------------------------------------------------------------------------
# THE acceptance test: every fixture against hudi-rs
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fid", READABLE)
def test_same_as_hudi_rs_default_listing(fid: str, shared_table: Any) -> None:
    path = shared_table(fid)
    assert _assert_same_as_hudi_rs(path, path, "auto") >= 2


@pytest.mark.parametrize("fid", READABLE)
def test_same_as_hudi_rs_storage_listing(fid: str, shared_table: Any, hudi_table: Any) -> None:
    listed = _without_mdt(hudi_table(fid))
    # ours lists storage on the intact table; hudi-rs on the copy without a metadata table
    _assert_same_as_hudi_rs(shared_table(fid), listed, "storage")
    # and our "auto" falls back to storage when the metadata table is gone
    _assert_same_as_hudi_rs(listed, listed, "auto")


def test_lance_table_is_unsupported(shared_table: Any) -> None:
    with pytest.raises(UnsupportedTableError, match="LANCE"):
        HoodieTable.open(str(shared_table(LANCE)))


# --------------------------------------------------------------------------------------
# Pending table services derived from real tables (completion file deleted)
# --------------------------------------------------------------------------------------

V8_TRIPS = "mor/avro/v8_trips_8i3u1d"
V8_COMPACTION_DONE = "20251220210129235_20251220210129883.commit"
V9_MOR = "mor/avro/v9_txns_simple_nometa"
V9_CLUSTERING_DONE = "20260307135840454_20260307135840902.replacecommit"
V9_COMPACTION_DONE = "20260307135839895_20260307135840408.commit"


@pytest.mark.parametrize("move_mdt", [False, True])
def test_pending_compaction_v8_same_as_hudi_rs(hudi_table: Any, move_mdt: bool) -> None:
    path = hudi_table(V8_TRIPS)
    (path / ".hoodie" / "timeline" / V8_COMPACTION_DONE).unlink()
    if move_mdt:
        _without_mdt(path)
    table = HoodieTable.open(str(path))
    assert [i.requested_time for i in table.timeline.pending()] == ["20251220210129235"]
    _assert_same_as_hudi_rs(path, path, "auto")
    _assert_same_as_hudi_rs(path, path, "storage") if move_mdt else None
    rows = {r["rider"]: r for r in table.to_arrow().to_pylist()}
    # rider-G was updated after the compaction was scheduled: merged onto the older slice
    assert len(rows) == 6 and rows["rider-G"]["fare"] == 0.0 and rows["rider-A"]["fare"] == 0.0


@pytest.mark.parametrize("done", [[V9_CLUSTERING_DONE], [V9_CLUSTERING_DONE, V9_COMPACTION_DONE]])
def test_pending_clustering_and_compaction_v9_same_as_hudi_rs(hudi_table: Any, done: list[str]) -> None:
    path = hudi_table(V9_MOR)
    for name in done:
        (path / ".hoodie" / "timeline" / name).unlink()
    table = HoodieTable.open(str(path))
    assert len(table.timeline.pending()) == len(done)
    _assert_same_as_hudi_rs(path, path, "storage")
    _assert_same_as_hudi_rs(path, path, "auto")
    assert table.to_arrow().num_rows == 12


# --------------------------------------------------------------------------------------
# Reader behaviour on real tables
# --------------------------------------------------------------------------------------


def test_read_optimized_ignores_log_files(shared_table: Any) -> None:
    table = HoodieTable.open(str(shared_table("mor/avro/v6_trips_8i3d")))
    assert table.to_arrow().num_rows == 5  # three riders deleted through a delete block
    assert table.to_arrow(read_optimized=True).num_rows == 8


def test_time_travel_before_first_commit_is_empty(shared_table: Any) -> None:
    table = HoodieTable.open(str(shared_table("mor/avro/v8_trips_8i3u1d")))
    assert table.to_arrow(as_of="20200101000000000").num_rows == 0
    first = table.timeline.completed()[0].requested_time
    assert table.to_arrow(as_of=first).num_rows == 8


def test_schema_has_meta_columns_and_is_nullable(shared_table: Any) -> None:
    table = HoodieTable.open(str(shared_table("mor/avro/v8_trips_8i3u1d")))
    schema = table.schema()
    assert schema.names[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    assert {"ts", "uuid", "rider", "driver", "fare", "city"} <= set(schema.names)
    assert all(f.nullable for f in schema)


def test_table_without_meta_fields_keys_from_record_key_fields(shared_table: Any) -> None:
    table = HoodieTable.open(str(shared_table("cow/v8_simplekeygen_hivestyle_no_metafields")))
    assert not table.config.populate_meta_fields
    assert "_hoodie_record_key" not in table.schema().names
    data = table.to_arrow()
    spec = MergeSpec.for_table(table.config)
    assert spec.key_fields == ("id",)
    assert sorted(record_keys(data, spec).to_pylist()) == sorted(
        str(i) for i in data.column("id").to_pylist()
    )


def test_to_parquet_streams_the_snapshot(shared_table: Any, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table = HoodieTable.open(str(shared_table("cow/v9_txns_simple_meta")))
    out = tmp_path / "snap.parquet"
    assert table.to_parquet(str(out)) == 12
    assert _rows(pq.read_table(out)) == _rows(table.to_arrow())


def test_v6_rollback_command_block_is_honoured(shared_table: Any) -> None:
    """The fixture's second delta commit was rolled back with a command block in a new log file."""
    path = shared_table("mor/parquet/v6_nonpartitioned_rollback")
    table = HoodieTable.open(str(path))
    (file_slice,) = table.file_system_view().read_slices()
    assert len(file_slice.log_files) == 3
    assert _ours(table, "storage") == _theirs(path)


_META = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)


def _rider_d_block(table: HoodieTable, instant: str, fare: float, compacted: str | None = None) -> bytes:
    """An Avro data block updating rider-D (the key of the fixture's log update) to ``fare``."""
    base = {r["rider"]: r for r in table.to_arrow(read_optimized=True).to_pylist()}["rider-D"]
    schema_json = table.avro_schema()
    assert schema_json is not None
    schema = json.loads(schema_json)
    meta = [{"name": n, "type": ["null", "string"], "default": None} for n in _META]
    full = json.dumps(dict(schema, fields=meta + schema["fields"]))
    header = {HeaderKey.INSTANT_TIME: instant, HeaderKey.SCHEMA: full}
    if compacted:
        header[HeaderKey.COMPACTED_BLOCK_TIMES] = compacted
    record = dict(base, fare=fare, _hoodie_commit_time=instant)
    return encode_block(BlockType.AVRO_DATA, header, encode_avro_data_block([record], full))


def _fare_of_rider_d(path: Path) -> float:
    return {r["rider"]: r["fare"] for r in HoodieTable.open(str(path)).to_arrow().to_pylist()}["rider-D"]


def test_blocks_of_uncommitted_instants_are_skipped(hudi_table: Any) -> None:
    path = hudi_table("mor/avro/v6_trips_8i1u")
    table = HoodieTable.open(str(path))
    before = _rows(table.to_arrow())
    # 2099... is on no timeline: the block of an uncommitted (failed) write
    _add_log_file(path, table, [_rider_d_block(table, "20990101000000000", 1.0)])
    assert _rows(HoodieTable.open(str(path)).to_arrow()) == before
    assert _fare_of_rider_d(path) == 25.0


def test_rollback_command_block_hides_the_target(hudi_table: Any) -> None:
    path = hudi_table("mor/avro/v6_trips_8i1u")
    table = HoodieTable.open(str(path))
    update = table.timeline.completed()[-1].requested_time  # the fixture's UPDATE of rider-D
    assert _fare_of_rider_d(path) == 25.0
    _add_log_file(path, table, [encode_command_block("20990101000000000", update)])
    assert _fare_of_rider_d(path) == 33.9  # back to the base file's value


def test_compacted_block_times_replace_the_compacted_blocks(hudi_table: Any) -> None:
    path = hudi_table("mor/avro/v6_trips_8i1u")
    table = HoodieTable.open(str(path))
    update = table.timeline.completed()[-1].requested_time
    # a committed "log compaction" 1 ms later whose block replaces the update's block
    lc_time = str(int(update) + 1)
    shutil.copy(path / ".hoodie" / f"{update}.deltacommit", path / ".hoodie" / f"{lc_time}.deltacommit")
    _add_log_file(path, table, [_rider_d_block(table, lc_time, 77.0, compacted=update)])
    assert _fare_of_rider_d(path) == 77.0
    # time travel to the update: the log compaction is after it, so the update block counts again
    rows = HoodieTable.open(str(path)).to_arrow(as_of=update).to_pylist()
    assert {r["rider"]: r["fare"] for r in rows}["rider-D"] == 25.0


def _add_log_file(path: Path, table: HoodieTable, blocks: list[bytes], partition: str | None = None) -> None:
    """Write ``blocks`` as the next log-file version of the slice holding rider-D (or ``partition``)."""
    if partition is None:
        ro = {r["rider"]: r for r in table.to_arrow(read_optimized=True).to_pylist()}
        partition = ro["rider-D"]["_hoodie_partition_path"]
    fs = next(s for s in table.file_system_view().read_slices() if s.partition == partition)
    if fs.log_files:
        last = fs.log_files[-1].name
        name = f".{last.file_id}_{last.instant_time}.log.{last.version + 1}_1-0-1"
    else:
        name = f".{fs.file_id}_{fs.base_instant}.log.1_1-0-1"
    write_log_file(LocalStorage(str(path)), f"{partition}/{name}", blocks)


def test_delete_block_ordering_value_against_base(hudi_table: Any) -> None:
    """A delete carrying an ordering value below the base record's is obsolete under EVENT_TIME."""
    path = hudi_table("mor/avro/v6_trips_8i1u")
    table = HoodieTable.open(str(path))
    committed = table.timeline.completed()[-1].requested_time
    ro = {r["rider"]: r for r in table.to_arrow(read_optimized=True).to_pylist()}
    partition = ro["rider-D"]["_hoodie_partition_path"]
    same = [r for r in ro.values() if r["_hoodie_partition_path"] == partition and r["rider"] != "rider-D"]
    low, high = same[0], same[1]
    deletes = [
        DeleteRecord(low["_hoodie_record_key"], partition, low["ts"] - 1, "LongWrapper"),
        DeleteRecord(high["_hoodie_record_key"], partition, high["ts"] + 1, "LongWrapper"),
    ]
    header = {HeaderKey.INSTANT_TIME: committed}
    _add_log_file(path, table, [encode_block(BlockType.DELETE, header, encode_delete_block(deletes))])
    riders = {r["rider"] for r in HoodieTable.open(str(path)).to_arrow().to_pylist()}
    assert high["rider"] not in riders
    if table.config.merge_mode is MergeMode.EVENT_TIME_ORDERING:
        assert low["rider"] in riders
    else:  # COMMIT_TIME_ORDERING: the later delete wins whatever its ordering value
        assert low["rider"] not in riders


def test_read_file_slice_streams_row_groups(hudi_table: Any) -> None:
    path = hudi_table("mor/avro/v8_trips_8i3u1d")
    table = HoodieTable.open(str(path))
    fs = next(s for s in table.file_system_view().read_slices() if s.log_files)
    batches = list(
        read_file_slice(
            table.storage,
            fs,
            table.config,
            table.timeline,
            table.schema(),
            batch_size=1,
            commits=CommitState(table.timeline, table.config),
        )
    )
    assert len(batches) >= 2 and all(b.num_rows <= 1 for b in batches)


# --------------------------------------------------------------------------------------
# Merge rules on synthetic Arrow data (pure logic)
# --------------------------------------------------------------------------------------

_SCHEMA = pa.schema(
    [
        ("_hoodie_record_key", pa.string()),
        ("ts", pa.int64()),
        ("v", pa.string()),
        ("_hoodie_is_deleted", pa.bool_()),
    ]
)


def _t(rows: list[tuple[str, int | None, str, bool]]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(_SCHEMA.names, r, strict=True)) for r in rows], schema=_SCHEMA)


def _merge(
    mode: MergeMode, steps: list[Any], base: list[tuple[str, int | None, str, bool]]
) -> dict[str, str]:
    buf = LogRecordBuffer(MergeSpec(mode, ("ts",)), _SCHEMA)
    for step in steps:
        if isinstance(step, pa.Table):
            buf.add_data(step)
        else:
            buf.add_deletes([k for k, _ in step], [o for _, o in step])
    merged = buf.finish()
    out = merged.merge_base_batch(_t(base).to_batches()[0])
    rows = out.to_pylist() + merged.remaining_inserts().to_pylist()
    return {r["_hoodie_record_key"]: r["v"] for r in rows}


def test_event_time_ordering_keeps_the_greatest_ordering_value() -> None:
    got = _merge(
        MergeMode.EVENT_TIME_ORDERING,
        [
            _t([("a", 5, "a5", False), ("b", 5, "b5", False)]),
            _t([("a", 3, "a3", False), ("b", 5, "b5'", False)]),
        ],
        [("a", 4, "A4", False), ("b", 9, "B9", False), ("c", 1, "C1", False)],
    )
    assert got == {"a": "a5", "b": "B9", "c": "C1"}  # ties go to the later write, base 9 > log 5


def test_commit_time_ordering_keeps_the_latest_write() -> None:
    got = _merge(
        MergeMode.COMMIT_TIME_ORDERING,
        [_t([("a", 5, "a5", False)]), _t([("a", 3, "a3", False)])],
        [("a", 9, "A9", False), ("c", 1, "C1", False)],
    )
    assert got == {"a": "a3", "c": "C1"}


def test_deletes_commit_time_and_ordering_value() -> None:
    got = _merge(
        MergeMode.EVENT_TIME_ORDERING,
        [
            _t([("a", 5, "a5", False), ("d", 1, "d1", False)]),
            [("a", 0), ("b", 3), ("c", 20), ("d", 0)],  # int 0: commit-time deletes
            _t([("d", 0, "d0", False)]),  # a record after a commit-time delete always wins
        ],
        [("a", 9, "A9", False), ("b", 4, "B4", False), ("c", 4, "C4", False), ("e", 1, "E1", False)],
    )
    assert got == {"b": "B4", "d": "d0", "e": "E1"}  # b: delete 3 < base 4; c: delete 20 >= 4


def test_is_deleted_flag_deletes() -> None:
    for mode in (MergeMode.EVENT_TIME_ORDERING, MergeMode.COMMIT_TIME_ORDERING):
        got = _merge(
            mode, [_t([("a", 9, "gone", True), ("n", 1, "new-gone", True)])], [("a", 4, "A4", False)]
        )
        assert got == {}


def test_base_rows_without_log_records_are_zero_copy() -> None:
    buf = LogRecordBuffer(MergeSpec(MergeMode.EVENT_TIME_ORDERING, ("ts",)), _SCHEMA)
    buf.add_data(_t([("z", 1, "z", False)]))
    merged = buf.finish()
    batch = _t([("a", 1, "a", False)]).to_batches()[0]
    assert merged.merge_base_batch(batch) is batch


def test_custom_payload_is_unsupported(shared_table: Any) -> None:
    import dataclasses

    table = HoodieTable.open(str(shared_table("mor/avro/v6_trips_8i1u")))
    custom = dataclasses.replace(
        table.config, payload_class="com.example.MyPayload", merge_mode=MergeMode.CUSTOM
    )
    with pytest.raises(UnsupportedTableError, match="com.example.MyPayload"):
        MergeSpec.for_table(custom)
