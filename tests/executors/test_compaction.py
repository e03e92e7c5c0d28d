"""Compaction on PySpark (local mode) on real tables, read back by hudi-rs.

Every merge-on-read fixture without a metadata table, and tables written by ``hoodie.demo.writer``
with many updates and deletes, are compacted (plan by ``planners.compaction``, execution by
``service.cli.schedule.run_compaction``). hudi-rs must read the same snapshot (rows and meta
columns, ``_hoodie_file_name`` aside) before and after; its read-optimized view must equal
the snapshot; compacted slices have no log files. Plans written by Apache Hudi are executed
too, and a driver killed with SIGKILL mid-job is rolled back and completed by a re-run.

One local Spark session serves the whole test session.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from hoodied.executors.compaction import CompactionResult
from hoodied.executors.engine import Session, spark_session
from hoodied.hoodie.avro.container import write_single_record
from hoodied.hoodie.bloom import BloomFilter
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError
from hoodied.hoodie.fsview import FileSystemView, list_storage
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction
from hoodied.service.cli.main import cli
from hoodied.service.spark_jobs import run_compaction
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.hudi_schemas import decode_with_hudi_schema
from tests.helpers.mor_tables import hudi_rs_rows, hudi_rs_slices, multiset, written_mor_table

PROJECT = Path(__file__).resolve().parents[2]
FAST = TimeSettings(max_expected_clock_skew_ms=5)
SKEW = ["--clock-skew-ms", "5"]
HEARTBEAT = ["--heartbeat-interval-ms", "100"]
EVERYTHING = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
V6_FIXTURES = [
    "mor/avro/v6_trips_8i1u",
    "mor/avro/v6_trips_8i3d",
    "mor/parquet/v6_nonpartitioned",
    "mor/parquet/v6_nonpartitioned_rollback",
    "mor/parquet/v6_simplekeygen_nonhivestyle",
]
V9 = "mor/avro/v9_txns_simple_nometa"
HUDI_COMPACTION = "20260307135839895"  # its plan: 2 file groups, 3 log files
HUDI_CLUSTERING = "20260307135840454"  # clustered the compaction's output afterwards


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


def _schedule(root: Path, settings: CompactionSettings = EVERYTHING) -> str:
    storage = LocalStorage(str(root))
    inst, result = schedule_compaction(storage, InProcessLock(storage.base_uri), settings, time_settings=FAST)
    assert inst is not None, result.reason
    return inst.requested_time


def _run(root: Path, t: str, spark: Session, **kw: Any) -> CompactionResult:
    storage = LocalStorage(str(root))
    return run_compaction(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST, **kw)


def _timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def _plan(root: Path, t: str) -> dict[str, Any]:
    timeline = _timeline(root)
    plan = timeline.read_plan(timeline.get(t))  # type: ignore[arg-type]
    assert plan is not None
    return plan


def _timeline_dir(root: Path) -> Path:
    folder = root / ".hoodie" / "timeline"
    return folder if folder.is_dir() else root / ".hoodie"


def _check_compacted(root: Path, t: str, plan: dict[str, Any], result: CompactionResult) -> None:
    """The completed commit, the new base files and the file slices, as Hudi would leave them."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    inst = timeline.get(t)
    assert inst is not None and inst.is_completed and inst.action is Action.COMPACTION
    completed = storage.read(timeline.state_file(inst))
    if config.version >= 8:
        metadata = decode_with_hudi_schema(completed, "HoodieCommitMetadata")
        assert inst.completion_time and inst.completion_time > t
    else:
        metadata = json.loads(completed)
        assert "version" not in metadata
    assert metadata["compacted"] is True and metadata["operationType"] == "COMPACT"
    assert metadata["extraMetadata"]["schema"] == HoodieTable(storage, config, timeline).avro_schema()
    ops = {(op["partitionPath"], op["fileId"]): op for op in plan["operations"]}
    stats = [s for ss in metadata["partitionToWriteStats"].values() for s in ss]
    assert len(stats) == len(ops) == len(result.write_stats)
    hudi_slices = hudi_rs_slices(root)
    view = FileSystemView.build(list_storage(storage, config), timeline, config)
    for stat in stats:
        op = ops[(stat["partitionPath"], stat["fileId"])]
        path = root / stat["path"]
        name = path.name
        assert name.startswith(f"{op['fileId']}_") and name.endswith(f"_{t}.parquet")
        assert stat["fileSizeInBytes"] == stat["totalWriteBytes"] == path.stat().st_size
        assert stat["prevCommit"] == op["baseInstantTime"]
        assert stat["totalLogFilesCompacted"] == len(op["deltaFilePaths"])
        assert stat["totalLogSizeCompacted"] == sum(
            (root / op["partitionPath"] / n).stat().st_size for n in op["deltaFilePaths"]
        )
        if config.version >= 8:
            assert stat["prevBaseFile"] == op["dataFilePath"]
        pf = pq.ParquetFile(path)
        data = pf.read()
        assert stat["numWrites"] == data.num_rows == pf.metadata.num_rows
        assert set(data.column("_hoodie_file_name").to_pylist()) <= {name}
        footer = {k.decode(): v.decode() for k, v in (pf.metadata.metadata or {}).items()}
        keys = data.column("_hoodie_record_key")
        if data.num_rows:
            assert footer["hoodie_min_record_key"] == pc.min(keys).as_py()
            assert footer["hoodie_max_record_key"] == pc.max(keys).as_py()
            bloom = BloomFilter.deserialize(footer["org.apache.hudi.bloomfilter"])
            assert all(bloom.might_contain(k) for k in keys.to_pylist())
        assert footer["hoodie_bloom_filter_type_code"] == "DYNAMIC_V0"
        assert json.loads(footer["parquet.avro.schema"])["fields"][0]["name"] == "_hoodie_commit_time"
        # the compacted slice: the new base file and no log files, for hudi-rs and for hoodied
        group = view.file_group(stat["partitionPath"], stat["fileId"])
        assert group is not None and group.latest_slice is not None
        if group.replaced_by is not None:  # a completed clustering replaced it since
            assert (stat["partitionPath"], stat["fileId"]) not in hudi_slices
            continue
        hs = hudi_slices[(stat["partitionPath"], stat["fileId"])]
        assert hs.base_file_name == name and not hs.log_file_names
        assert group.latest_slice.base_file is not None and group.latest_slice.base_file.file_name == name
        assert not group.latest_slice.log_files
    markers = root / ".hoodie" / ".temp" / t
    assert not markers.exists() or not [p for p in markers.rglob("*") if p.is_file()]
    assert not (root / ".hoodie" / ".heartbeat" / t).exists()


# ---------------------------------------------------------------------------- every MOR table


@pytest.mark.parametrize("fid", [*V6_FIXTURES, "written/v9", "written/v6"])
def test_compaction_keeps_every_row_for_hudi_rs(hudi_table, tmp_path: Path, spark: Session, fid: str) -> None:
    if fid.startswith("written/"):
        root = tmp_path / "table"
        written_mor_table(root, int(fid[-1]))
    else:
        root = hudi_table(fid)
    before = hudi_rs_rows(root)
    assert multiset(HoodieTable.open(str(root)).to_arrow()) == before  # both readers agree to begin with
    t = _schedule(root)
    plan = _plan(root, t)
    assert hudi_rs_rows(root) == before  # a requested compaction changes nothing
    result = _run(root, t, spark)
    assert result.instant.is_completed and result.summary().startswith(f"{t} compaction: ")
    _check_compacted(root, t, plan, result)
    assert hudi_rs_rows(root) == before
    # every file group with log files was compacted: base files alone hold the snapshot now
    assert hudi_rs_rows(root, read_optimized=True) == before
    assert multiset(HoodieTable.open(str(root)).to_arrow(read_optimized=True)) == before
    # a second run finds the instant completed
    again = _run(root, t, spark)
    assert again.was_completed and "already completed" in again.summary()


# ---------------------------------------------------------------------------- plans written by Hudi


def _remove_instant(root: Path, t: str, *, keep_plan: bool) -> list[str]:
    """Delete an instant's completion (and, unless ``keep_plan``, its other timeline files) and its
    output files; returns the output files removed."""
    for f in _timeline_dir(root).glob(f"{t}*"):
        if not keep_plan or not f.name.endswith((".requested", ".inflight")):
            f.unlink()
    outputs = [p for p in root.rglob(f"*_{t}.parquet")]
    for p in outputs:
        p.unlink()
    return [str(p.relative_to(root)) for p in outputs]


def test_hoodied_plans_what_hudi_planned(hudi_table, spark: Session) -> None:
    """Without Hudi's compaction and the clustering after it, hoodied plans Hudi's operations."""
    root = hudi_table(V9)
    original = hudi_rs_rows(root)
    hudi_plan = _plan(root, HUDI_COMPACTION)
    _remove_instant(root, HUDI_CLUSTERING, keep_plan=False)
    _remove_instant(root, HUDI_COMPACTION, keep_plan=False)
    assert hudi_rs_rows(root) == original
    t = _schedule(root, CompactionSettings())  # Hudi's defaults: 9 delta commits >= 5
    ours = _plan(root, t)

    def ops(plan: dict[str, Any]) -> dict[tuple[str, str], tuple[Any, ...]]:
        return {(op["partitionPath"], op["fileId"]): (
            op["baseInstantTime"], op["dataFilePath"], tuple(op["deltaFilePaths"]),
            op["metrics"]["TOTAL_LOG_FILES"], op["metrics"]["TOTAL_LOG_FILES_SIZE"],
            op["metrics"]["TOTAL_IO_MB"]) for op in plan["operations"]}

    assert ops(ours) == ops(hudi_plan)
    result = _run(root, t, spark)
    _check_compacted(root, t, ours, result)
    assert hudi_rs_rows(root) == original


@pytest.mark.parametrize("also_clustering", [False, True], ids=["compaction", "compaction+clustering"])
def test_executes_the_plan_hudi_wrote(hudi_table, spark: Session, also_clustering: bool) -> None:
    root = hudi_table(V9)
    original = hudi_rs_rows(root)
    if also_clustering:  # the clustering is pending again: the compacted file groups are visible
        _remove_instant(root, HUDI_CLUSTERING, keep_plan=True)
    removed = _remove_instant(root, HUDI_COMPACTION, keep_plan=True)
    assert len(removed) == 2
    names = sorted(p.name for p in _timeline_dir(root).glob(f"{HUDI_COMPACTION}*"))
    assert names == [f"{HUDI_COMPACTION}.compaction.inflight", f"{HUDI_COMPACTION}.compaction.requested"]
    assert hudi_rs_rows(root) == original
    plan = _plan(root, HUDI_COMPACTION)
    result = _run(root, HUDI_COMPACTION, spark)  # inflight without a heartbeat: rolled back, then run
    timeline = _timeline(root)
    rollbacks = timeline.completed((Action.ROLLBACK,))
    assert len(rollbacks) == 1
    assert timeline.read_commit_metadata(rollbacks[0])["commitsRollback"] == [HUDI_COMPACTION]
    _check_compacted(root, HUDI_COMPACTION, plan, result)
    assert hudi_rs_rows(root) == original
    if also_clustering:
        assert hudi_rs_rows(root, read_optimized=True) == original


def test_plan_paths_from_another_machine(hudi_table, spark: Session) -> None:
    """A version-1 style plan with full locations elsewhere: resolved by partition and file name."""
    root = hudi_table("mor/avro/v6_trips_8i1u")
    before = hudi_rs_rows(root)
    t = _schedule(root)
    plan = _plan(root, t)
    elsewhere = "s3a://other-bucket/warehouse/v6_trips_8i1u"
    for op in plan["operations"]:
        where = f"{elsewhere}/{op['partitionPath']}"
        op["dataFilePath"] = f"{where}/{op['dataFilePath']}"
        op["deltaFilePaths"] = [f"{where}/{n}" for n in op["deltaFilePaths"]]
    plan["version"] = 1
    requested = _timeline_dir(root) / f"{t}.compaction.requested"
    requested.write_bytes(write_single_record(plan, "HoodieCompactionPlan"))
    result = _run(root, t, spark)
    assert result.instant.is_completed and len(result.write_stats) == len(plan["operations"])
    assert hudi_rs_rows(root) == before


def test_a_plan_naming_a_missing_file_fails_and_changes_nothing(hudi_table, spark: Session) -> None:
    root = hudi_table("mor/avro/v6_trips_8i3d")
    before = hudi_rs_rows(root)
    t = _schedule(root)
    op = _plan(root, t)["operations"][0]
    missing = root / op["partitionPath"] / op["deltaFilePaths"][0]
    missing.rename(missing.with_name("moved-away"))
    name = op["deltaFilePaths"][0]
    with pytest.raises(HoodieFormatError, match=f"plan names log file {name}, which is missing"):
        _run(root, t, spark)
    assert _timeline(root).get(t).state is State.REQUESTED  # type: ignore[union-attr]
    assert not (root / ".hoodie" / ".heartbeat" / t).exists()
    missing.with_name("moved-away").rename(missing)
    assert hudi_rs_rows(root) == before


def test_refuses_a_live_attempt(hudi_table, spark: Session) -> None:
    root = hudi_table("mor/avro/v6_trips_8i1u")
    t = _schedule(root)
    (_timeline_dir(root) / f"{t}.compaction.inflight").write_bytes(b"")
    heartbeat = root / ".hoodie" / ".heartbeat" / t
    heartbeat.parent.mkdir(parents=True, exist_ok=True)
    heartbeat.write_bytes(b"")
    with pytest.raises(InstantStateError, match="live heartbeat"):
        _run(root, t, spark)
    assert not _timeline(root).completed((Action.ROLLBACK,))


# ---------------------------------------------------------------------------- kill -9


def start_execute(root: Path, point: str, ready: Path, master: str = "local[2]") -> subprocess.Popen[bytes]:
    """``hoodied execute`` in its own process group, paused at crash point ``point`` (returns once there)."""
    args = ["execute", str(root), "--spark", master, *HEARTBEAT, *SKEW]
    return start_paused("from hoodied.service.cli.main import main; main()", args, point, ready, timeout=120)


@pytest.mark.parametrize("point", ["task:1", "written"])
def test_kill_9_then_rollback_and_completion(tmp_path: Path, spark: Session, point: str) -> None:
    root = tmp_path / "table"
    written_mor_table(root, 9)
    before = hudi_rs_rows(root)
    t = _schedule(root)
    plan = _plan(root, t)
    assert len(plan["operations"]) >= 3
    ready = tmp_path / "ready"
    # task:1 on one core -> operation 0 finished (its file is there), operation 1 waits after its
    # marker, the later ones have not started
    proc = start_execute(root, point, ready, "local[2]" if point == "written" else "local[1]")
    first = plan["operations"][0]
    try:
        if point != "written":
            deadline = time.monotonic() + 60
            while not list((root / first["partitionPath"]).glob(f"{first['fileId']}_*_{t}.parquet")):
                assert time.monotonic() < deadline, "operation 0 never finished"
                time.sleep(0.05)
        written = sorted(root.rglob(f"*_{t}.parquet"))
        assert written, "no task wrote its file before the kill"
        if point == "written":
            assert len(written) == len(plan["operations"])
    finally:
        kill_group(proc)
    names = sorted(p.name for p in _timeline_dir(root).glob(f"{t}*"))
    assert names == [f"{t}.compaction.inflight", f"{t}.compaction.requested"]
    assert hudi_rs_rows(root) == before  # partial output is invisible
    time.sleep(0.3)  # the dead driver's heartbeat (100 ms) expires
    storage = LocalStorage(str(root))
    if point == "written":  # the re-run through the CLI (on the active session), or directly
        rerun = CliRunner().invoke(cli, ["execute", str(root), *HEARTBEAT, *SKEW])
        assert rerun.exit_code == 0, rerun.output
        assert rerun.stdout.startswith(f"{t} compaction: {len(plan['operations'])} file groups, ")
        result = _run(root, t, spark)
        assert result.was_completed
        metadata = _timeline(root).read_commit_metadata(_timeline(root).get(t))  # type: ignore[arg-type]
        result.write_stats = [s for ss in metadata["partitionToWriteStats"].values() for s in ss]
    else:
        # what a task killed while streaming its base file leaves: its temp (the rollback removes
        # it, whatever its age), beside one of another instant (left to the clean's age bound)
        folder = root / first["partitionPath"]
        mine = folder / f".{first['fileId']}_1-2-3_{t}.parquet.{uuid.uuid4().hex}.tmp"
        other = folder / f".{first['fileId']}_1-2-3_20200101000000000.parquet.{uuid.uuid4().hex}.tmp"
        mine.write_bytes(b"PAR1 partial")
        other.write_bytes(b"PAR1 partial")
        result = run_compaction(storage, InProcessLock(storage.base_uri), t, spark, time_settings=FAST,
                                heartbeat_interval_ms=100)
        assert not mine.exists() and other.exists()
    timeline = _timeline(root)
    rollback = timeline.completed((Action.ROLLBACK,))
    assert len(rollback) == 1
    rolled = timeline.read_commit_metadata(rollback[0])
    parts = rolled["partitionMetadata"].values()
    deleted = {f.rsplit("/", 1)[-1] for p in parts for f in p["successDeleteFiles"]}
    assert {p.name for p in written} <= deleted
    _check_compacted(root, t, plan, result)
    final = {s["path"].rsplit("/", 1)[-1] for s in result.write_stats}
    assert {p.name for p in root.rglob(f"*_{t}.parquet")} == final  # nothing of the killed attempt is left
    assert hudi_rs_rows(root) == before
    assert hudi_rs_rows(root, read_optimized=True) == before


# ---------------------------------------------------------------------------- the commands


def test_schedule_and_execute_commands(hudi_table, spark: Session) -> None:
    root = hudi_table("mor/avro/v6_trips_8i3d")
    before = hudi_rs_rows(root)
    run = CliRunner().invoke
    not_due = run(cli, ["schedule", "compaction", str(root), *SKEW])
    assert not_due.exit_code == 0
    assert not_due.stdout.startswith("nothing to compact: not due: 2 delta commits")
    bad = run(cli, ["schedule", "compaction", str(root), "-o", "hoodie.compaction.target.iops=1"])
    assert bad.exit_code == 2 and "hoodie.compaction.target.iops: not a compaction option" in bad.output
    dry = run(cli, ["schedule", "compaction", str(root), "-o", "hoodie.compact.inline.max.delta.commits=1",
                    "--dry-run", *SKEW])
    assert dry.exit_code == 0 and dry.stdout.startswith("dry run: 1 file groups in 1 partitions, 1 log files")
    out = run(cli, ["schedule", "compaction", str(root), "--option",
                    "hoodie.compact.inline.max.delta.commits=1",
                    "-o", "hoodie.compaction.strategy=UnBoundedCompactionStrategy", *SKEW])
    assert out.exit_code == 0, out.output
    t, rest = out.stdout.split(" ", 1)
    assert rest.startswith("compaction requested: 1 file groups")
    done = run(cli, ["execute", str(root), "--spark", "local[2]",
                     "--spark-conf", "spark.sql.shuffle.partitions=2", *SKEW])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith(f"{t} compaction: 1 file groups, 1 log files merged, 1 rows")
    assert hudi_rs_rows(root) == before == hudi_rs_rows(root, read_optimized=True)
    again = run(cli, ["execute", str(root), "--instant", t, *SKEW])
    assert again.exit_code == 0
    assert again.stdout.strip() == f"{t} compaction: already completed, nothing to do"
    assert spark.range(3).count() == 3  # the commands used the active session and left it running
