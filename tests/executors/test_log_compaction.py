"""Log compaction on PySpark (local mode) on real tables, read back by hoodied and hudi-rs.

Tables written by ``hoodie.demo.writer`` (versions 8 and 9, event-time ordering, late arrivals,
deletes, keys that come back) get six or more log blocks per file slice; the planner picks the
slices that reach ``hoodie.log.compaction.blocks.threshold``, the executor writes one log file
per slice whose blocks carry ``COMPACTED_BLOCK_TIMES``. hoodied's reader and hudi-rs must read
the same rows before and after (snapshot, and hoodied's reader as of every older instant); the
plan and the commit decode with Hudi's own Avro schemas; a driver killed with SIGKILL mid-job is
rolled back and the re-execution converges; bad plans and unsupported tables change nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hoodied.executors.compaction import execute_compaction
from hoodied.executors.engine import Session, spark_session
from hoodied.executors.log_compaction import LogCompactionResult, execute_log_compaction
from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.filenames import LogFileName
from hoodied.hoodie.fsview import CommitState
from hoodied.hoodie.heartbeat import Heartbeat
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log import (
    BlockType,
    DeleteRecord,
    HeaderKey,
    avro_block_to_arrow,
    delete_block_records,
    encode_avro_data_block,
    encode_block,
    encode_delete_block,
    read_log_blocks,
)
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.reader import scan_log_blocks
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction
from hoodied.planners.log_compaction import (
    LogCompactionSettings,
    needs_log_compaction,
    schedule_log_compaction,
)
from hoodied.service.operations import rollback_failed_attempt
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.hudi_schemas import decode_with_hudi_schema
from tests.helpers.mor_tables import CITIES, SCHEMA, hudi_rs_rows, multiset

PROJECT = Path(__file__).resolve().parents[2]
FAST = TimeSettings(max_expected_clock_skew_ms=5)
DEFAULT = LogCompactionSettings()
COMPACTOR = "org.apache.hudi.table.action.compact.LogCompactionExecutionHelper"


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


def _rows(keys: range | list[int], ts: int, v: float) -> list[dict[str, Any]]:
    return [{"id": f"key-{i:04d}", "ts": ts, "city": CITIES[i % 3], "v": v} for i in keys]


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _keys(rows: list[dict[str, Any]]) -> pa.Table:
    return _table(rows).select(["id", "city"])


def many_blocks_table(root: Path, version: int = 9, *, rounds: int = 6) -> Any:
    """A MOR table whose file slices carry 6+ log blocks (updates, late arrivals, deletes, revivals)."""
    spec = TableSpec("trips", SCHEMA, "id", "city", "ts", TableType.MERGE_ON_READ, version)
    writer = create_table(LocalStorage(str(root)), spec, max_file_rows=30)
    writer.insert(_table(_rows(range(120), 1, 1.0)))  # 2 file groups per partition
    writer.upsert(_table(_rows(range(0, 120, 2), 2, 2.0)))
    writer.upsert(_table(_rows(range(0, 120, 3), 1, 9.0)))  # late arrivals (ts 1 < 2) lose where ts is 2
    writer.upsert(_table(_rows(range(1, 120, 2), 3, 3.0)), deletes=_keys(_rows(range(0, 120, 10), 0, 0.0)))
    writer.upsert(_table(_rows(range(0, 120, 5), 4, 4.0)))  # some deleted keys come back
    for r in range(rounds - 4):
        writer.upsert(_table(_rows(range(r, 120, 4), 5 + r, 5.0 + r)),
                      deletes=_keys(_rows(range(r + 1, 120, 11), 0, 0.0)))
    return writer


def _storage(root: Path) -> LocalStorage:
    return LocalStorage(str(root))


def _timeline(root: Path) -> Timeline:
    storage = _storage(root)
    return Timeline.load(storage, load_table_config(storage))


def _own_rows(root: Path, as_of: str | None = None) -> Any:
    return multiset(HoodieTable.open(_storage(root)).to_arrow(as_of=as_of))


def _rs_rows_as_of(root: Path, instant: str) -> Any:
    """hudi-rs's time travel to ``instant``."""
    import hudi

    options = hudi.HudiReadOptions().with_as_of_timestamp(instant)
    batches = hudi.HudiTableBuilder.from_base_uri(str(root)).build().read(options)
    return multiset(pa.Table.from_batches(batches)) if batches else multiset(pa.table({}))


def _schedule(root: Path, settings: LogCompactionSettings = DEFAULT) -> tuple[str, dict[str, Any]]:
    storage = _storage(root)
    lock = InProcessLock(storage.base_uri)
    inst, result = schedule_log_compaction(storage, lock, settings, time_settings=FAST)
    assert inst is not None, result.summary()
    assert result.summary().startswith(f"{len(result.operations)} file groups in ")
    return inst.requested_time, result.plan  # type: ignore[return-value]


def _run(root: Path, t: str, spark: Session, **kw: Any) -> LogCompactionResult:
    storage = _storage(root)
    return execute_log_compaction(storage, load_table_config(storage), InProcessLock(storage.base_uri), t,
                                  spark, time_settings=FAST, **kw)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _check_completed(root: Path, t: str, plan: dict[str, Any], result: LogCompactionResult) -> None:
    """Timeline files, commit metadata and the new log files, as Hudi writes them."""
    tl_dir = root / ".hoodie" / "timeline"
    names = sorted(p.name for p in tl_dir.glob(f"{t}*"))
    assert names[:2] == [f"{t}.logcompaction.inflight", f"{t}.logcompaction.requested"]
    assert len(names) == 3 and names[2].startswith(f"{t}_") and names[2].endswith(".deltacommit")
    metadata = decode_with_hudi_schema((tl_dir / names[2]).read_bytes(), "HoodieCommitMetadata")
    assert metadata["operationType"] == "LOG_COMPACT" and metadata["compacted"] is True
    stats = [s for ss in metadata["partitionToWriteStats"].values() for s in ss]
    assert len(stats) == len(plan["operations"]) == len(result.write_stats)
    assert json.loads(metadata["extraMetadata"]["schema"])["type"] == "record"
    timeline = _timeline(root)
    commits = CommitState(timeline, load_table_config(_storage(root)))
    by_group = {(op["partitionPath"], op["fileId"]): op for op in plan["operations"]}
    for stat in stats:
        op = by_group[(stat["partitionPath"], stat["fileId"])]
        name = stat["path"].rsplit("/", 1)[-1]
        lf = LogFileName.parse(name)
        assert lf is not None and lf.file_id == op["fileId"] and lf.instant_time == t and lf.version == 1
        assert stat["logVersion"] == 1 and stat["logOffset"] == 0
        # as Hudi 1.x's append handle writes a new log file (see the v8 fixture's delta commits)
        assert stat["prevCommit"] == t and stat["baseFile"] == "" and stat["logFiles"] == [name]
        assert stat["numInserts"] == 0
        assert stat["fileSizeInBytes"] == (root / stat["path"]).stat().st_size
        blocks = list(read_log_blocks(_storage(root), stat["path"]))
        kinds = [b.block_type for b in blocks]
        assert kinds in ([BlockType.AVRO_DATA, BlockType.DELETE], [BlockType.AVRO_DATA], [BlockType.DELETE])
        for b in blocks:
            keys = {HeaderKey.INSTANT_TIME, HeaderKey.SCHEMA, HeaderKey.COMPACTED_BLOCK_TIMES}
            assert set(b.header) == keys
            assert b.instant_time == t
            times = b.compacted_block_times
            assert list(times) == sorted(times, reverse=True) and len(set(times)) == len(times)
            assert all(commits.is_committed(x) and x < t for x in times)
        deletes = [d for b in blocks if b.block_type is BlockType.DELETE for d in delete_block_records(b)]
        assert stat["numDeletes"] == len(deletes)
        assert stat["numWrites"] == stat["numUpdateWrites"] == stat["numWrites"]


@pytest.mark.parametrize("version", [8, 9])
def test_log_compaction_keeps_every_row(tmp_path: Path, spark: Session, version: int) -> None:
    root = tmp_path / "table"
    writer = many_blocks_table(root, version)
    instants = writer.instants
    before, own_before = hudi_rs_rows(root), _own_rows(root)
    assert before == own_before
    history = {t: (_own_rows(root, t), _rs_rows_as_of(root, t)) for t in instants}
    assert all(own == theirs for own, theirs in history.values())
    storage = _storage(root)
    config = load_table_config(storage)
    off = needs_log_compaction(_timeline(root), config, DEFAULT)
    assert off == (False, "hoodie.log.compaction.enable is false")
    due, why = needs_log_compaction(_timeline(root), config, LogCompactionSettings(enabled=True))
    assert due, why
    t, plan = _schedule(root)
    raw = (root / ".hoodie" / "timeline" / f"{t}.logcompaction.requested").read_bytes()
    decoded = decode_with_hudi_schema(raw, "HoodieCompactionOperation")  # the plan record lives there
    assert decoded["strategy"]["compactorClassName"] == COMPACTOR
    assert decoded["preserveHoodieMetadata"] is True and decoded["version"] == 2
    assert len(decoded["operations"]) == 6  # every file group of the insert has 6+ blocks
    for op in decoded["operations"]:
        assert op["deltaFilePaths"] and op["dataFilePath"] and op["metrics"]["TOTAL_LOG_FILES"] >= 5
    # while it is requested, every file group is taken: nothing else to plan
    again = schedule_log_compaction(storage, InProcessLock(storage.base_uri), DEFAULT, time_settings=FAST)
    assert again[0] is None and "6 file groups have pending table services" in again[1].reason

    result = _run(root, t, spark)
    _check_completed(root, t, plan, result)
    assert result.summary().startswith(f"{t} logcompaction: 6 file groups, ")
    assert hudi_rs_rows(root) == before
    assert _own_rows(root) == before
    for inst, (own, theirs) in history.items():  # time travel before the log compaction is unchanged
        assert _own_rows(root, inst) == own, inst
        assert _rs_rows_as_of(root, inst) == theirs, inst
    # the scan after it: one compacted data (+ delete) block per slice, so nothing is due
    timeline = _timeline(root)
    commits = CommitState(timeline, config)
    planned = {op["fileId"] for op in plan["operations"]}
    for s in HoodieTable.open(storage).file_system_view().read_slices():
        blocks = scan_log_blocks(storage, s, commits)
        if s.file_id in planned:
            assert {b.instant_time for b in blocks} == {t} and len(blocks) <= 2
        else:  # file groups of revived keys, with fewer blocks than the threshold
            assert t not in {b.instant_time for b in blocks} and len(blocks) < 5
    nothing = schedule_log_compaction(storage, InProcessLock(storage.base_uri), DEFAULT, time_settings=FAST)
    assert nothing[0] is None and "no file slice has" in nothing[1].reason
    assert _run(root, t, spark).was_completed


def test_log_compaction_of_a_log_compaction(tmp_path: Path, spark: Session) -> None:
    """Writes after a log compaction, then a second one: it names the first by its instant."""
    root = tmp_path / "table"
    writer = many_blocks_table(root, 9)
    t1, plan1 = _schedule(root)
    _run(root, t1, spark)
    writer.clock.observe(t1)
    for r in range(4):
        writer.upsert(_table(_rows(range(r, 120, 6), 20 + r, 20.0 + r)),
                      deletes=_keys(_rows(range(r + 2, 120, 13), 0, 0.0)))
    before = hudi_rs_rows(root)
    assert _own_rows(root) == before
    points = [t1, *writer.instants[-4:]]  # as of the first log compaction and each write after it
    history = {t: (_own_rows(root, t), _rs_rows_as_of(root, t)) for t in points}
    assert all(own == theirs for own, theirs in history.values())
    t2, plan2 = _schedule(root)
    result = _run(root, t2, spark)
    _check_completed(root, t2, plan2, result)
    for inst, (own, theirs) in history.items():
        assert _own_rows(root, inst) == own and _rs_rows_as_of(root, inst) == theirs, inst
    new_logs = [s["path"] for s in result.write_stats]
    times = {b.compacted_block_times for p in new_logs for b in read_log_blocks(_storage(root), p)}
    assert all(t1 in ts for ts in times)  # the first log compaction, not the blocks it replaced
    assert hudi_rs_rows(root) == before
    assert _own_rows(root) == before
    # a full compaction afterwards merges the compacted blocks once
    storage = _storage(root)
    everything = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
    inst, _ = schedule_compaction(storage, InProcessLock(storage.base_uri), everything, time_settings=FAST)
    assert inst is not None
    execute_compaction(storage, load_table_config(storage), InProcessLock(storage.base_uri),
                       inst.requested_time, spark, time_settings=FAST)
    assert hudi_rs_rows(root) == before
    assert hudi_rs_rows(root, read_optimized=True) == before
    assert _own_rows(root) == before


def test_log_blocks_hudi_wrote(hudi_table, spark: Session) -> None:
    """Avro data and delete blocks written by Apache Hudi (v9 fixture), stitched by hoodied.

    The fixture's compaction and clustering are taken out of its history (timeline files and
    their base files), so the slices of its delta commits are the latest again.
    """
    root = hudi_table("mor/avro/v9_txns_simple_nometa")
    for t in ("20260307135840454", "20260307135839895"):  # clustering, compaction
        for p in [*(root / ".hoodie" / "timeline").glob(f"{t}*"), *root.rglob(f"*_{t}.parquet")]:
            p.unlink()
    before = hudi_rs_rows(root)
    assert sum(before.values()) == 12 and _own_rows(root) == before
    t, plan = _schedule(root, LogCompactionSettings(blocks_threshold=2))
    assert [op["fileId"] for op in plan["operations"]] == ["db2fca8f-03b7-4da7-b042-4b617ab79b9d-0"]
    result = _run(root, t, spark)
    _check_completed(root, t, plan, result)
    assert result.blocks_merged == 2
    assert hudi_rs_rows(root) == before
    assert _own_rows(root) == before


def test_threshold_and_settings(tmp_path: Path) -> None:
    root = tmp_path / "table"
    many_blocks_table(root, 9, rounds=4)  # 4 writes after the insert: some slices below 6 blocks
    s = LogCompactionSettings.from_options({"hoodie.log.compaction.blocks.threshold": "50",
                                            "hoodie.log.compaction.enable": "true"})
    assert s == LogCompactionSettings(enabled=True, blocks_threshold=50)
    with pytest.raises(ValueError, match="not a log compaction option"):
        LogCompactionSettings.from_options({"hoodie.compact.inline.max.delta.commits": "5"})
    with pytest.raises(ValueError, match="not a valid value"):
        LogCompactionSettings.from_options({"hoodie.log.compaction.enable": "yes"})
    storage = _storage(root)
    before = _snapshot(root)
    inst, result = schedule_log_compaction(storage, InProcessLock(storage.base_uri), s, time_settings=FAST)
    assert inst is None and result.plan is None
    assert result.summary().startswith("nothing to log-compact: no file slice has ")
    assert _snapshot(root) == before
    counts = sorted(result.blocks.values())
    assert len(counts) == 6 and counts[-1] < 50
    low = LogCompactionSettings(blocks_threshold=counts[-1])
    inst, result = schedule_log_compaction(storage, InProcessLock(storage.base_uri), low, dry_run=True,
                                           time_settings=FAST)
    assert inst is None and result.plan is not None
    assert len(result.operations) == sum(1 for c in counts if c >= counts[-1])


def test_a_plan_naming_a_missing_log_file_fails_and_changes_nothing(tmp_path: Path, spark: Session) -> None:
    root = tmp_path / "table"
    many_blocks_table(root, 9)
    t, plan = _schedule(root)
    op = plan["operations"][0]
    victim = root / op["partitionPath"] / op["deltaFilePaths"][1]
    victim.rename(tmp_path / "away")
    before = _snapshot(root)
    with pytest.raises(HoodieFormatError) as err:
        _run(root, t, spark)
    message = str(err.value)
    assert "\n" not in message and op["deltaFilePaths"][1] in message and "missing" in message
    assert _snapshot(root) == before


def test_refuses_unsupported_tables(hudi_table, tmp_path: Path, spark: Session) -> None:
    for fid, match in [("mor/avro/v6_trips_8i1u", "table version 6 is not supported"),
                       ("cow/v8_nonpartitioned", "needs a MERGE_ON_READ table")]:
        root = hudi_table(fid)
        storage = _storage(root)
        before = _snapshot(root)
        with pytest.raises(UnsupportedTableError, match=match) as err:
            schedule_log_compaction(storage, InProcessLock(storage.base_uri), DEFAULT, time_settings=FAST)
        assert "\n" not in str(err.value)
        with pytest.raises(UnsupportedTableError, match=match):
            _run(root, "20990101000000000", spark)
        assert _snapshot(root) == before


def test_unknown_instant_and_live_attempt(tmp_path: Path, spark: Session) -> None:
    root = tmp_path / "table"
    many_blocks_table(root, 9)
    with pytest.raises(InstantStateError, match="no log compaction instant"):
        _run(root, "20990101000000000", spark)
    t, _ = _schedule(root)
    (root / ".hoodie" / "timeline" / f"{t}.logcompaction.inflight").write_bytes(b"")
    before = _snapshot(root)
    with pytest.raises(InstantStateError, match="failed attempt"):
        _run(root, t, spark)
    Heartbeat(_storage(root), t).beat()  # someone is working on it
    with pytest.raises(InstantStateError, match="live heartbeat"):
        _run(root, t, spark)
    (root / ".hoodie" / ".heartbeat" / t).unlink()
    assert _snapshot(root) == before


# ---------------------------------------------------------------------------- kill -9

_DRIVER = """
import sys
from hoodied.executors.engine import spark_session
from hoodied.executors.log_compaction import execute_log_compaction
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.truetime import TimeSettings
storage = LocalStorage(sys.argv[1])
with spark_session("local[2]") as spark:
    execute_log_compaction(storage, load_table_config(storage), InProcessLock(storage.base_uri), sys.argv[2],
                           spark, time_settings=TimeSettings(max_expected_clock_skew_ms=5),
                           heartbeat_interval_ms=100)
"""


def _attempt_logs(root: Path, t: str) -> list[Path]:
    """The log files the instant ``t`` wrote (markers left out)."""
    return sorted(p for p in root.rglob(f".*_{t}.log.1_*") if ".hoodie" not in p.relative_to(root).parts)


@pytest.mark.parametrize("point", ["task:1", "written"])
def test_kill_9_then_rollback_and_reexecution(tmp_path: Path, spark: Session, point: str) -> None:
    root = tmp_path / "table"
    many_blocks_table(root, 9)
    before = hudi_rs_rows(root)
    t, plan = _schedule(root)
    deadline = time.monotonic() + 180
    proc = start_paused(_DRIVER, [str(root), t], point, tmp_path / "ready")
    try:
        if point == "written":
            assert len(_attempt_logs(root, t)) == len(plan["operations"])
        else:  # operation 1 paused after its marker, before its file; the others finish
            assert list((root / ".hoodie" / ".temp" / t).rglob("*.marker.APPEND"))
            while len(_attempt_logs(root, t)) < len(plan["operations"]) - 1:
                assert time.monotonic() < deadline, "the other operations never finished"
                time.sleep(0.05)
    finally:
        kill_group(proc)
    written = [p.name for p in _attempt_logs(root, t)]
    assert sorted(p.name for p in (root / ".hoodie" / "timeline").glob(f"{t}*")) == [
        f"{t}.logcompaction.inflight", f"{t}.logcompaction.requested"]
    assert hudi_rs_rows(root) == before  # the uncommitted log files are invisible
    assert _own_rows(root) == before
    time.sleep(0.5)  # the dead driver's heartbeat (100 ms) expires
    storage = _storage(root)
    rolled = rollback_failed_attempt(storage, t, InProcessLock(storage.base_uri), heartbeat_interval_ms=100,
                                     time_settings=FAST)
    assert rolled is not None
    assert not _attempt_logs(root, t)  # every file of the attempt deleted
    meta = _timeline(root).read_commit_metadata(_timeline(root).completed((Action.ROLLBACK,))[0])
    parts = meta["partitionMetadata"].values()
    deleted = {f.rsplit("/", 1)[-1] for p in parts for f in p["successDeleteFiles"]}
    assert set(written) <= deleted
    result = _run(root, t, spark, heartbeat_interval_ms=100)
    _check_completed(root, t, plan, result)
    final = {s["path"].rsplit("/", 1)[-1] for s in result.write_stats}
    assert {p.name for p in _attempt_logs(root, t)} == final
    assert written and len(final) == len(plan["operations"])
    assert len(_timeline(root).completed((Action.ROLLBACK,))) == 1
    assert hudi_rs_rows(root) == before
    assert _own_rows(root) == before


# ---------------------------------------------------------------------------- readers


def _commit_time_table(root: Path) -> Any:
    """Four keys, one file group, commit-time ordering, five updates: five log blocks."""
    spec = TableSpec("trips", SCHEMA, "id", None, None, TableType.MERGE_ON_READ, 9)
    writer = create_table(_storage(root), spec)
    for v in range(6):
        rows = [{"id": f"k{i}", "ts": 1, "city": "sf", "v": float(v)} for i in range(4)]
        (writer.insert if v == 0 else writer.upsert)(_table(rows))
    return writer


def _values(root: Path) -> tuple[dict[str, float], dict[str, float]]:
    """id -> v as hoodied's reader and hudi-rs read the snapshot."""
    import hudi

    own = HoodieTable.open(_storage(root)).to_arrow().select(["id", "v"]).to_pylist()
    batches = hudi.HudiTableBuilder.from_base_uri(str(root)).build().read(hudi.HudiReadOptions())
    theirs = pa.Table.from_batches(batches).select(["id", "v"]).to_pylist()
    return {r["id"]: r["v"] for r in own}, {r["id"]: r["v"] for r in theirs}


def test_a_write_that_completed_after_planning_still_wins(tmp_path: Path, spark: Session) -> None:
    """Hudi merges a compacted block where the newest block it replaced was, not at its file's place.

    A delta commit requested before the log compaction but completed after it was planned is
    not in the plan; its log file sorts before the log compaction's, and under commit-time
    ordering its records must still win over the compacted ones.
    """
    root = tmp_path / "table"
    writer = _commit_time_table(root)
    t, plan = _schedule(root)
    assert len(plan["operations"]) == 1 and len(plan["operations"][0]["deltaFilePaths"]) == 5
    late = str(int(writer.instants[-1]) + 1)
    assert late < t
    writer.clock.observe(t)  # completes after the plan was made
    writer.upsert(_table([{"id": f"k{i}", "ts": 1, "city": "sf", "v": 99.0} for i in range(4)]),
                  instant_time=late)
    assert _values(root) == ({f"k{i}": 99.0 for i in range(4)},) * 2
    _run(root, t, spark)
    assert _values(root) == ({f"k{i}": 99.0 for i in range(4)},) * 2


def test_both_readers_skip_the_blocks_a_log_compaction_replaced(tmp_path: Path, spark: Session) -> None:
    """A compacted block that leaves a key out hides that key's updates in the replaced blocks.

    The block is doctored on purpose (a real one always carries every key): reading the key's
    base value shows that hoodied's reader and hudi-rs 0.5 skip the replaced blocks rather than
    reading them as well.
    """
    root = tmp_path / "table"
    _commit_time_table(root)
    t, _ = _schedule(root)
    result = _run(root, t, spark)
    assert _values(root) == ({f"k{i}": 5.0 for i in range(4)},) * 2
    path = result.write_stats[0]["path"]
    (block,) = read_log_blocks(_storage(root), path)
    records = avro_block_to_arrow(block)
    without_k0 = records.filter(pc.not_equal(records.column("_hoodie_record_key"), "k0"))
    content = encode_avro_data_block(without_k0, block.schema_json or "")
    (root / path).write_bytes(encode_block(block.block_type, dict(block.header), content))
    expected = {"k0": 0.0, **{f"k{i}": 5.0 for i in range(1, 4)}}
    assert _values(root) == (expected, expected)


def test_ordering_value_deletes_keep_their_ordering_value(tmp_path: Path, spark: Session) -> None:
    """Deletes that compete by ordering value (not SQL's 0) are stitched with that value.

    Delete blocks carrying ``LongWrapper`` ordering values are written over the writer's own
    (value 0) ones: key 0 is deleted at ts 3 (beats its ts-2 update), key 1 at ts 1 (loses to
    ts 2), key 2 at ts 5 in the log while its base row has ts 1. The stitched delete block must
    keep those values so that merging with the base file and later blocks comes out the same.
    """
    root = tmp_path / "table"
    spec = TableSpec("trips", SCHEMA, "id", None, "ts", TableType.MERGE_ON_READ, 9)
    writer = create_table(_storage(root), spec)
    writer.insert(_table(_rows(range(6), 1, 1.0)))
    writer.upsert(_table(_rows([0, 1], 2, 2.0)))
    victims = {0: 3, 1: 1, 2: 5}
    done = writer.delete(_keys(_rows(list(victims), 0, 0.0)))
    (path,) = [f for f in done.files if ".log." in f]
    (block,) = read_log_blocks(_storage(root), path)
    deletes = [DeleteRecord(f"key-{i:04d}", "", ts, "LongWrapper") for i, ts in victims.items()]
    content = encode_delete_block(deletes)
    (root / path).write_bytes(encode_block(BlockType.DELETE, dict(block.header), content))
    for i in (3, 4, 5):
        writer.upsert(_table(_rows([i], 4, 4.0)))
    before = hudi_rs_rows(root)
    assert _own_rows(root) == before
    assert {dict(r)["id"] for r in before} == {f"key-{i:04d}" for i in (1, 3, 4, 5)}
    t, plan = _schedule(root)
    result = _run(root, t, spark)
    _check_completed(root, t, plan, result)
    (new_path,) = [s["path"] for s in result.write_stats]
    stitched = [d for b in read_log_blocks(_storage(root), new_path) if b.block_type is BlockType.DELETE
                for d in delete_block_records(b)]
    assert {(d.record_key, d.ordering_value, d.ordering_type) for d in stitched} == {
        ("key-0000", 3, "LongWrapper"), ("key-0002", 5, "LongWrapper")}
    assert hudi_rs_rows(root) == before
    assert _own_rows(root) == before
