"""Rollback of failed table-service attempts on real tables (hudi-rs checks the result)."""

from __future__ import annotations

from pathlib import Path

import hudi
import pytest
from click.testing import CliRunner

from hoodied.executors.rollback import RollbackResult, execute_rollback
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.heartbeat import Heartbeat
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.markers import IOType, WriteMarkers
from hoodied.hoodie.plan_files import plan_relative_path as relative_path
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.rollback import find_failed_attempts, plan_rollback, schedule_rollback
from hoodied.service.cli.services import rollback
from hoodied.service.operations import rollback_failed_attempt

FAST = TimeSettings(max_expected_clock_skew_ms=5)
CASES = [("cow/v9_txns_simple_nometa", "clustering"), ("mor/avro/v9_txns_simple_nometa", "compaction")]


def _fail_service(root: Path, action: str) -> tuple[str, list[str]]:
    """Turn the table's completed service into a failed attempt: drop its completed file."""
    folder = root / ".hoodie" / "timeline"
    t = next(folder.glob(f"*.{action}.requested")).name.split(".")[0]
    next(folder.glob(f"{t}_*")).unlink()
    outputs = sorted(str(p.relative_to(root)) for p in root.rglob(f"*_{t}.parquet"))
    assert outputs
    return t, outputs


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _rows(root: Path) -> int:
    return sum(b.num_rows for b in hudi.HudiTableBuilder(str(root)).build().read())


@pytest.mark.parametrize("fid,action", CASES)
def test_failed_attempt_is_rolled_back_by_listing(hudi_table, fid: str, action: str) -> None:
    root = hudi_table(fid)
    t, outputs = _fail_service(root, action)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    rows = _rows(root)
    requested = (root / ".hoodie" / "timeline" / f"{t}.{action}.requested").read_bytes()
    failed = find_failed_attempts(storage, Timeline.load(storage, config))
    assert [f.instant.requested_time for f in failed] == [t]
    before = _files(root)

    result = rollback_failed_attempt(storage, t, InProcessLock(storage.base_uri), time_settings=FAST)
    assert isinstance(result, RollbackResult)
    assert sorted(result.deleted) == outputs and not result.already_gone
    r = result.rollback.requested_time
    after = _files(root)
    new = {f for f in after - before}
    assert before - after == set(outputs) | {f".hoodie/timeline/{t}.{action}.inflight"}
    assert {Path(f).name for f in new} == {
        f"{r}.rollback.requested", f"{r}.rollback.inflight", f"{r}_{result.rollback.completion_time}.rollback"
    }
    assert (root / ".hoodie" / "timeline" / f"{t}.{action}.requested").read_bytes() == requested

    tl = Timeline.load(storage, config)
    assert tl.get(t).state is State.REQUESTED  # type: ignore[union-attr]
    md = tl.read_commit_metadata(tl.get(r))  # type: ignore[arg-type]
    assert md["commitsRollback"] == [t] and md["totalFilesDeleted"] == len(outputs)
    assert md["instantsRollback"] == [{"commitTime": t, "action": action}]
    plan = tl.read_plan(tl.get(r))  # type: ignore[arg-type]
    assert sorted(f for req in plan["RollbackRequests"] for f in req["filesToBeDeleted"]) == sorted(  # type: ignore[index]
        f"{storage.base_uri}/{o}" for o in outputs
    )
    assert _rows(root) == rows
    # once more: nothing left to roll back, nothing changes
    snapshot = _files(root)
    assert rollback_failed_attempt(storage, t, InProcessLock(storage.base_uri), time_settings=FAST) is None
    assert _files(root) == snapshot


def test_markers_decide_what_is_deleted(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    t, outputs = _fail_service(root, "clustering")
    storage = LocalStorage(str(root))
    markers = WriteMarkers(storage, t)
    partition, name = outputs[0].rsplit("/", 1)
    markers.create(partition, name, IOType.CREATE)
    # a marker whose file was never written (crashed in between)
    markers.create("region=us", f"never-written-0_0-1-1_{t}.parquet", IOType.CREATE)
    result = rollback_failed_attempt(storage, t, InProcessLock(storage.base_uri), time_settings=FAST)
    assert isinstance(result, RollbackResult)
    assert result.deleted == [outputs[0]]
    assert result.already_gone == [f"region=us/never-written-0_0-1-1_{t}.parquet"]
    for other in outputs[1:]:
        assert (root / other).exists()  # not named by a marker: not touched
    assert not markers.exists()


def test_live_attempt_is_not_taken_over(hudi_table) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_nometa")
    t, outputs = _fail_service(root, "compaction")
    storage = LocalStorage(str(root))
    before = _files(root)
    with Heartbeat(storage, t, interval_ms=60_000):
        assert find_failed_attempts(storage, Timeline.load(storage, load_table_config(storage))) == []
        with pytest.raises(InstantStateError, match="live heartbeat"):
            rollback_failed_attempt(storage, t, InProcessLock(storage.base_uri), time_settings=FAST)
        assert _files(root) - {f".hoodie/.heartbeat/{t}"} == before
        result = rollback_failed_attempt(storage, t, InProcessLock(storage.base_uri), force=True,
                                         time_settings=FAST)
    assert isinstance(result, RollbackResult) and sorted(result.deleted) == outputs


def test_pending_rollback_is_reused_after_a_crash(hudi_table) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_nometa")
    t, outputs = _fail_service(root, "compaction")
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    with lock:  # the previous run crashed right after scheduling its rollback
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        target = Timeline.load(storage, config).get(t)
        assert target is not None
        first = schedule_rollback(writer, Timeline.load(storage, config), target)
        writer.transition_to_inflight(first.requested_time, Action.ROLLBACK)
        (root / outputs[0]).unlink()  # ... and halfway through its deletes
    result = rollback_failed_attempt(storage, t, lock, time_settings=FAST)
    assert isinstance(result, RollbackResult) and result.rollback.requested_time == first.requested_time
    assert result.already_gone == [outputs[0]] and sorted(result.deleted) == outputs[1:]
    rollbacks = Timeline.load(storage, config).completed((Action.ROLLBACK,))
    assert [i.requested_time for i in rollbacks] == [first.requested_time]


def test_table_with_metadata_table_rolls_back_its_mdt_delta_commit(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_meta")
    t, _ = _fail_service(root, "clustering")
    storage = LocalStorage(str(root))
    result = rollback_failed_attempt(storage, t, InProcessLock(storage.base_uri), time_settings=FAST)
    assert isinstance(result, RollbackResult)
    r = result.rollback.requested_time
    mdt_timeline = root / ".hoodie" / "metadata" / ".hoodie" / "timeline"
    names = {p.name for p in mdt_timeline.iterdir()}
    assert any(n.startswith(f"{r}_") and n.endswith(".rollback") for n in names), names
    assert not any(n.startswith(t) for n in names), names


def test_v6_log_appends_are_refused(hudi_table) -> None:
    root = hudi_table("mor/parquet/v6_nonpartitioned")
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        t = writer.schedule(Action.LOG_COMPACTION, {"operations": []}).requested_time
        writer.transition_to_inflight(t, Action.LOG_COMPACTION)
    WriteMarkers(storage, t).create("", ".abc-0_20250101000000000.log.2_0-1-1", IOType.APPEND)
    before = _files(root)
    with pytest.raises(UnsupportedTableError, match="command blocks"):
        rollback_failed_attempt(storage, t, lock, time_settings=FAST)
    assert _files(root) == before


def test_regular_writes_and_completed_instants_are_refused(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    tl = Timeline.load(storage, config)
    done = tl.completed()[-1]
    with pytest.raises(InstantStateError, match="nothing to undo"):
        rollback_failed_attempt(storage, done.requested_time, InProcessLock(storage.base_uri))
    with pytest.raises(InstantStateError, match="completed"):
        plan_rollback(storage, config, tl, done)
    with pytest.raises(InstantStateError, match="no instant"):
        rollback_failed_attempt(storage, "20990101000000000", InProcessLock(storage.base_uri))


def test_plan_paths(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    base = storage.base_uri
    assert relative_path(storage, f"{base}/p=1/f.parquet", "x") == "p=1/f.parquet"
    assert relative_path(storage, f"file:{base}/p=1/f.parquet", "x") == "p=1/f.parquet"
    assert relative_path(storage, f"file://{base}/f.parquet", "x") == "f.parquet"
    assert relative_path(storage, "p=1/f.parquet", "x") == "p=1/f.parquet"
    for bad in ("/elsewhere/f.parquet", f"{base}/../f.parquet", f"{base}/.hoodie/hoodie.properties",
                "s3://b/t/f.parquet"):
        with pytest.raises(HoodieFormatError, match="^x: plan names"):
            relative_path(storage, bad, "x")
    # MDT rollbacks: every file sits in an MDT partition folder
    log_file = "files/.f.log.1_0-0-0"
    assert relative_path(storage, f"{base}/{log_file}", "x", in_partition=True) == log_file
    with pytest.raises(HoodieFormatError, match="not a data file"):
        relative_path(storage, f"{base}/f.parquet", "x", in_partition=True)


def test_executing_a_plan_with_a_path_outside_the_table_changes_nothing(hudi_table, tmp_path: Path) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_nometa")
    t, _ = _fail_service(root, "compaction")
    victim = tmp_path / "victim.parquet"
    victim.write_bytes(b"x")
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        plan = {"instantToRollback": {"commitTime": t, "action": "compaction"}, "version": 1,
                "RollbackRequests": [{"partitionPath": "", "fileId": "", "latestBaseInstant": t,
                                      "filesToBeDeleted": [str(victim)], "logBlocksToBeDeleted": {}}]}
        r = writer.schedule(Action.ROLLBACK, plan).requested_time
        with pytest.raises(HoodieFormatError, match="outside the table"):
            execute_rollback(writer, r)
    assert victim.exists()


def test_cli_rollback(hudi_table) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_nometa")
    t, outputs = _fail_service(root, "compaction")
    result = CliRunner().invoke(rollback, [str(root), "--instant", t, "--clock-skew-ms", "5"])
    assert result.exit_code == 0, result.output
    assert f"rolled back compaction {t}" in result.output
    assert f"{len(outputs)} files deleted" in result.output
    again = CliRunner().invoke(rollback, [str(root), "--instant", t])
    assert again.exit_code == 0 and "nothing to roll back" in again.output
