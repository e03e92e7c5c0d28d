"""Rollback of failed data writes under Hudi's LAZY policy, on copies of real Hudi tables (v8, v9).

A write is made to fail the way Hudi leaves one: the table's last data write S (a commit or a
delta commit Hudi wrote) is copied under a new instant T, so T has Hudi's own requested and
inflight timeline files, data files named after T (base files, and v8+ log files), their
markers and a heartbeat file whose modification time is an hour old. On a table with a
metadata table the failed write got as far as an inflight MDT delta commit T (Hudi's MDT
timeline files and MDT log files of S copied under T), or, in the other case, the data instant
S itself is made inflight again after its MDT delta commit completed (its completed file
removed). Then hoodied rolls it back: hudi-rs reads the same rows as before the failed write
(through the MDT and by listing storage), the listing drift is none, and the rollback instant,
plan and metadata are the ones Hudi writes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hoodied.hoodie.errors import HeartbeatAliveError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, LogFileName, writer_instant
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log.blocks import avro_block_records, encode_avro_data_block
from hoodied.hoodie.log.frame import BlockType, HeaderKey, encode_block, read_log_blocks
from hoodied.hoodie.markers import IOType, WriteMarkers
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clean import CleanPolicy, CleanSettings, schedule_clean
from hoodied.service.cli.main import cli
from hoodied.service.cli.report import committed_listing_drift
from hoodied.service.failed_writes import (
    rollback_failed_write,
    rollback_failed_writes,
    schedule_clean_after_failed_writes,
)
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.mor_tables import hudi_rs_rows

FAST = TimeSettings(max_expected_clock_skew_ms=5)
LAZY = {"hoodie.cleaner.policy.failed.writes": "LAZY"}

V8_COW = "cow/v8_simplekeygen_nonhivestyle"
V8_COW_NONPART = "cow/v8_nonpartitioned"
V8_MOR_MDT = "mor/avro/v8_trips_8i3u1d"
V9_COW_MDT = "cow/v9_txns_simple_meta"
V9_COW_MDT_LAST_COMMIT = "cow/v9_timebasedkeygen_nonhivestyle"
V9_MOR = "mor/avro/v9_txns_simple_nometa"
V9_MOR_MDT = "mor/avro/v9_txns_simple_meta"


# ---------------------------------------------------------------------------- building a failed write


def _timeline_dir(root: Path) -> Path:
    return root / ".hoodie" / "timeline"


def _mdt_timeline_dir(root: Path) -> Path:
    return root / METADATA_FOLDER / ".hoodie" / "timeline"


def _has_mdt(root: Path) -> bool:
    return _mdt_timeline_dir(root).is_dir()


def _last_data_write(root: Path) -> tuple[str, str]:
    """(requested time, action) of the newest completed commit or delta commit that is a data write."""
    folder = _timeline_dir(root)
    writes = []
    for action in ("commit", "deltacommit"):
        for req in folder.glob(f"*.{action}.requested"):
            t = req.name.split(".")[0]
            if any(folder.glob(f"{t}_*.{action}")):
                writes.append((t, action))
    return max(writes)


def _data_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and ".hoodie" not in p.relative_to(root).parts]


def _new_instant() -> str:
    """An instant an hour ago: after every fixture instant, before any TrueTime instant of the test."""
    t = datetime.now(UTC) - timedelta(hours=1)
    return t.strftime("%Y%m%d%H%M%S") + f"{t.microsecond // 1000:03d}"


def _old_heartbeat(root: Path, t: str, age_s: float = 3600) -> Path:
    hb = root / ".hoodie" / ".heartbeat" / t
    hb.parent.mkdir(parents=True, exist_ok=True)
    hb.write_bytes(b"")
    then = time.time() - age_s
    os.utime(hb, (then, then))
    return hb


def _copy_instant_files(folder: Path, s: str, t: str) -> list[str]:
    names = []
    for p in sorted(folder.glob(f"{s}.*")):
        shutil.copyfile(p, folder / p.name.replace(s, t, 1))
        names.append(p.name.replace(s, t, 1))
    return names


def fail_a_write(root: Path, *, markers: bool = True, mdt_inflight: bool = True,
                 heartbeat_age_s: float = 3600) -> tuple[str, str, list[str]]:
    """Copy the last data write S under a new instant T left inflight; returns (T, action, T's data files)."""
    s, action = _last_data_write(root)
    t = _new_instant()
    version = load_table_config(LocalStorage(str(root))).version
    storage = LocalStorage(str(root))
    written = []
    for p in _data_files(root):
        if writer_instant(p.name, version) != s:
            continue
        name = p.name.replace(f"_{s}.", f"_{t}.")
        rel = p.parent.relative_to(root)
        partition = "" if str(rel) == "." else str(rel)
        if markers:  # Hudi creates the marker before the file
            io = IOType.CREATE if BaseFileName.parse(name) is not None else IOType.APPEND
            WriteMarkers(storage, t).create(partition, name, io)
        shutil.copyfile(p, p.parent / name)
        written.append(f"{partition}/{name}" if partition else name)
    assert written, f"{s}: no data files found"
    names = _copy_instant_files(_timeline_dir(root), s, t)
    expected = (["commit.requested", "inflight"] if action == "commit"
                else ["deltacommit.requested", "deltacommit.inflight"])
    assert sorted(n.split(".", 1)[1] for n in names) == sorted(expected)
    if _has_mdt(root) and mdt_inflight:
        assert _copy_instant_files(_mdt_timeline_dir(root), s, t)
        mdt = root / METADATA_FOLDER
        for p in list(mdt.glob("*/*")):
            if p.is_file() and f"_{s}." in p.name:
                shutil.copyfile(p, p.parent / p.name.replace(f"_{s}.", f"_{t}."))
    _old_heartbeat(root, t, heartbeat_age_s)
    return t, action, sorted(written)


def _lazy_table(root: Path) -> None:
    """The table's own config says LAZY (as a Hudi user may put writer keys in hoodie.properties)."""
    props = root / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + "hoodie.cleaner.policy.failed.writes=LAZY\n")


def _snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file() and ".locks" not in p.parts:
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def _rows_everywhere(root: Path, tmp: Path) -> tuple[Counter[Any], Counter[Any]]:
    """hudi-rs rows through the MDT (when there is one) and by listing storage (an MDT-less copy)."""
    copy = tmp / f"nomdt-{uuid.uuid4().hex[:6]}" / root.name
    shutil.copytree(root, copy)
    shutil.rmtree(copy / METADATA_FOLDER, ignore_errors=True)
    return hudi_rs_rows(root), hudi_rs_rows(copy)


# ---------------------------------------------------------------------------- checks


def check_rolled_back(root: Path, tmp: Path, t: str, action: str, written: list[str],
                      rows: Counter[Any]) -> str:
    """Everything Hudi leaves after rolling back the failed write T; returns the rollback instant R."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    assert timeline.get(t) is None  # Hudi deletes the instant (deleteInstants)
    assert not [p for p in _timeline_dir(root).iterdir() if p.name.startswith(t)]
    (r,) = [i for i in timeline.completed((Action.ROLLBACK,)) if i.requested_time > t]
    assert sorted(p.name for p in _timeline_dir(root).glob(f"{r.requested_time}*")) == sorted([
        f"{r.requested_time}.rollback.requested", f"{r.requested_time}.rollback.inflight",
        f"{r.requested_time}_{r.completion_time}.rollback"])
    plan = timeline.read_plan(r)
    assert plan is not None and plan["instantToRollback"] == {"commitTime": t, "action": action}
    assert plan["version"] == 1
    planned = sorted(f for req in plan["RollbackRequests"] for f in req["filesToBeDeleted"])
    assert planned == sorted(f"{storage.base_uri}/{w}" for w in written)
    for req in plan["RollbackRequests"]:
        assert req["logBlocksToBeDeleted"] == {} and req["latestBaseInstant"] == t
        names = [f.rsplit("/", 1)[-1].lstrip(".") for f in req["filesToBeDeleted"]]
        assert all(n.startswith(req["fileId"]) for n in names)
    md = timeline.read_commit_metadata(r)
    assert md["commitsRollback"] == [t] and md["totalFilesDeleted"] == len(written)
    assert md["instantsRollback"] == [{"commitTime": t, "action": action}]
    assert sorted(f for pm in md["partitionMetadata"].values() for f in pm["successDeleteFiles"]) == planned
    assert all(pm["failedDeleteFiles"] == [] for pm in md["partitionMetadata"].values())
    # the files, the markers and the heartbeat are gone
    assert not any((root / w).exists() for w in written)
    marker_folder = root / ".hoodie" / ".temp" / t
    assert not marker_folder.exists() or not [p for p in marker_folder.rglob("*") if p.is_file()]
    assert not (root / ".hoodie" / ".heartbeat" / t).exists()
    if _has_mdt(root):
        mdt = _mdt_timeline_dir(root)
        assert not [p for p in mdt.iterdir() if p.name.startswith(t)]
        assert not [p for p in (root / METADATA_FOLDER).glob("*/*") if f"_{t}." in p.name]
        assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
    with_mdt, by_listing = _rows_everywhere(root, tmp)
    assert with_mdt == rows and by_listing == rows
    return r.requested_time


# ---------------------------------------------------------------------------- the sweep (clean's rollback)


CASES = [
    pytest.param(V8_COW, True, True, id="v8-cow"),
    pytest.param(V8_COW_NONPART, False, True, id="v8-cow-nonpartitioned-no-markers"),
    pytest.param(V8_MOR_MDT, True, True, id="v8-mor-mdt-inflight"),
    pytest.param(V8_MOR_MDT, True, False, id="v8-mor-mdt-not-reached"),
    pytest.param(V9_COW_MDT, True, True, id="v9-cow-mdt-inflight"),
    pytest.param(V9_MOR, True, True, id="v9-mor"),
    pytest.param(V9_MOR, False, True, id="v9-mor-no-markers"),
    pytest.param(V9_MOR_MDT, True, True, id="v9-mor-mdt-inflight"),
]


@pytest.mark.parametrize("fid,markers,mdt_inflight", CASES)
def test_lazy_sweep_rolls_back_the_failed_write(fid: str, markers: bool, mdt_inflight: bool, hudi_table,
                                                tmp_path: Path) -> None:
    root = hudi_table(fid)
    rows = hudi_rs_rows(root)
    t, action, written = fail_a_write(root, markers=markers, mdt_inflight=mdt_inflight)
    assert _rows_everywhere(root, tmp_path) == (rows, rows)  # a pending write is invisible already
    storage = LocalStorage(str(root))
    results = rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert [(x.target_time, x.target_action, x.target_deleted) for x in results] == [(t, action, True)]
    assert sorted(results[0].deleted) == written
    assert "removed from the timeline" in results[0].summary()
    r = check_rolled_back(root, tmp_path, t, action, written, rows)
    if _has_mdt(root) and mdt_inflight:  # the MDT delta commit T rolled back by an MDT rollback R
        mdt_names = sorted(p.name for p in _mdt_timeline_dir(root).glob(f"{r}*"))
        assert [n.split(".", 1)[1] if "_" not in n else "rollback" for n in mdt_names] == [
            "rollback.inflight", "rollback.requested", "rollback"]
    elif _has_mdt(root):
        assert not list(_mdt_timeline_dir(root).glob(f"{r}*"))  # the MDT had no T: left alone
    # a second sweep finds nothing and changes nothing
    before = _snapshot(root)
    assert rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST) == []
    assert _snapshot(root) == before


def test_completed_mdt_deltacommit_of_the_failed_write_is_rolled_back(hudi_table, tmp_path: Path) -> None:
    """The write died after its MDT delta commit completed: Hudi's MDT rollback at the same time R."""
    root = hudi_table(V9_COW_MDT_LAST_COMMIT)
    s, action = _last_data_write(root)
    (done,) = _timeline_dir(root).glob(f"{s}_*.{action}")
    done.unlink()
    version = load_table_config(LocalStorage(str(root))).version
    written = sorted(str(p.relative_to(root)) for p in _data_files(root)
                     if writer_instant(p.name, version) == s)
    assert written
    assert any(_mdt_timeline_dir(root).glob(f"{s}_*.deltacommit"))
    rows = hudi_rs_rows(root)  # T is invisible once its data completion is gone
    _old_heartbeat(root, s)
    _lazy_table(root)
    storage = LocalStorage(str(root))
    (result,) = rollback_failed_writes(storage, InProcessLock(storage.base_uri), time_settings=FAST)
    assert result.target_time == s
    r = check_rolled_back(root, tmp_path, s, action, written, rows)
    assert len(list(_mdt_timeline_dir(root).glob(f"{r}*"))) == 3


def test_several_failed_writes_newest_first(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_MOR)
    rows = hudi_rs_rows(root)
    first, _, _ = fail_a_write(root)
    time.sleep(0.01)
    second, _, _ = fail_a_write(root)
    assert second > first
    storage = LocalStorage(str(root))
    results = rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert [x.target_time for x in results] == [second, first]
    assert results[0].rollback.requested_time < results[1].rollback.requested_time
    assert _rows_everywhere(root, tmp_path) == (rows, rows)


def test_live_heartbeat_is_never_rolled_back(hudi_table) -> None:
    root = hudi_table(V9_MOR_MDT)
    t, _, _ = fail_a_write(root, heartbeat_age_s=5)  # its writer beat 5 s ago (limit: 120 s)
    storage = LocalStorage(str(root))
    before = _snapshot(root)
    assert rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST) == []
    with pytest.raises(HeartbeatAliveError, match="live heartbeat"):
        rollback_failed_write(storage, t, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert _snapshot(root) == before
    # with the writer's own settings (1 s beats, 2 misses) the 5 s old beat has expired
    quick = {**LAZY, "hoodie.client.heartbeat.interval_in_ms": "1000"}
    (result,) = rollback_failed_writes(storage, InProcessLock(storage.base_uri), quick, time_settings=FAST)
    assert result.target_time == t


def test_eager_leaves_failed_writes_alone(hudi_table) -> None:
    root = hudi_table(V9_MOR)
    t, _, _ = fail_a_write(root)
    storage = LocalStorage(str(root))
    before = _snapshot(root)
    assert rollback_failed_writes(storage, InProcessLock(storage.base_uri), time_settings=FAST) == []
    assert rollback_failed_writes(storage, InProcessLock(storage.base_uri),
                                  {"hoodie.cleaner.policy.failed.writes": "EAGER"}, time_settings=FAST) == []
    with pytest.raises(UnsupportedTableError, match="LAZY"):
        rollback_failed_write(storage, t, InProcessLock(storage.base_uri), time_settings=FAST)
    assert _snapshot(root) == before


def test_pending_write_without_heartbeat_is_never_rolled_back(hudi_table, tmp_path: Path) -> None:
    """Stricter than Hudi (whose ``getLastHeartbeatTime`` is 0 without a file): a writer that keeps
    no heartbeat (``EAGER``) may be alive; its write is left alone by the sweep and the command."""
    root = hudi_table(V8_COW)
    t, _, _ = fail_a_write(root)
    (root / ".hoodie" / ".heartbeat" / t).unlink()
    files = {p for p in root.rglob("*") if p.is_file()}
    storage = LocalStorage(str(root))
    assert rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST) == []
    with pytest.raises(InstantStateError, match="no heartbeat file"):
        rollback_failed_write(storage, t, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert {p for p in root.rglob("*") if p.is_file()} == files


def test_requested_only_write_is_rolled_back_with_an_empty_plan(hudi_table, tmp_path: Path) -> None:
    """It wrote nothing yet: Hudi plans no rollback requests (``BaseRollbackPlanActionExecutor``)."""
    root = hudi_table(V9_COW_MDT)
    rows = hudi_rs_rows(root)
    s, _ = _last_data_write(root)
    t = _new_instant()
    folder = _timeline_dir(root)
    shutil.copyfile(folder / f"{s}.commit.requested", folder / f"{t}.commit.requested")
    _old_heartbeat(root, t)
    storage = LocalStorage(str(root))
    (result,) = rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert result.target_time == t and result.deleted == []
    r = check_rolled_back(root, tmp_path, t, "commit", [], rows)
    timeline = Timeline.load(storage, load_table_config(storage))
    assert timeline.read_plan(timeline.get(r))["RollbackRequests"] == []  # type: ignore[arg-type,index]
    assert not list(_mdt_timeline_dir(root).glob(f"{r}*"))  # the MDT never had T


# ---------------------------------------------------------------------------- the commands


def test_rollback_command_on_a_data_write(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_COW_MDT)
    rows = hudi_rs_rows(root)
    t, action, written = fail_a_write(root)
    runner = CliRunner()
    refused = runner.invoke(cli, ["rollback", str(root), "--instant", t])
    assert refused.exit_code != 0 and "hoodie.cleaner.policy.failed.writes=LAZY" in refused.output
    done = runner.invoke(cli, ["rollback", str(root), "--instant", t,
                               "-o", "hoodie.cleaner.policy.failed.writes=LAZY", "--clock-skew-ms", "5"])
    assert done.exit_code == 0, done.output
    assert f"rolled back {action} {t}" in done.output and "removed from the timeline" in done.output
    check_rolled_back(root, tmp_path, t, action, written, rows)


def test_rollback_command_refuses_a_live_heartbeat(hudi_table) -> None:
    root = hudi_table(V9_MOR)
    t, _, _ = fail_a_write(root, heartbeat_age_s=1)
    _lazy_table(root)
    before = _snapshot(root)
    out = CliRunner().invoke(cli, ["rollback", str(root), "--instant", t, "--force"])
    assert out.exit_code != 0 and "live heartbeat" in out.output
    assert _snapshot(root) == before


def test_execute_of_a_clean_rolls_back_failed_writes_first(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_MOR)
    rows = hudi_rs_rows(root)
    t, action, written = fail_a_write(root)
    storage = LocalStorage(str(root))
    one_version = CleanSettings(policy=CleanPolicy.KEEP_LATEST_FILE_VERSIONS, file_versions_retained=1)
    clean, result = schedule_clean(storage, InProcessLock(storage.base_uri), one_version, time_settings=FAST)
    assert clean is not None, result.summary()
    # EAGER (the default): the clean runs, the failed write stays
    eager_root = tmp_path / "eager" / root.name
    shutil.copytree(root, eager_root)
    out = CliRunner().invoke(cli, ["execute", str(eager_root), "--clock-skew-ms", "5"])
    assert out.exit_code == 0, out.output
    assert "failed write" not in out.output
    eager = LocalStorage(str(eager_root))
    assert Timeline.load(eager, load_table_config(eager)).get(t) is not None
    # LAZY: the failed write is rolled back first, then the clean runs
    out = CliRunner().invoke(cli, ["execute", str(root), "-o", "hoodie.cleaner.policy.failed.writes=LAZY",
                                   "--clock-skew-ms", "5"])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.output.splitlines() if not re.match(r"\d{4}-\d\d-\d\dT", line)]  # no logs
    assert lines[0].startswith(f"failed write: rolled back {action} {t}")
    assert clean.requested_time in lines[1]
    timeline = Timeline.load(storage, load_table_config(storage))
    assert timeline.get(clean.requested_time).is_completed  # type: ignore[union-attr]
    check_rolled_back(root, tmp_path, t, action, written, rows)


def test_scheduling_a_clean_rolls_back_failed_writes_first(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V8_MOR_MDT)
    rows = hudi_rs_rows(root)
    t, action, written = fail_a_write(root)
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    one_version = CleanSettings(policy=CleanPolicy.KEEP_LATEST_FILE_VERSIONS, file_versions_retained=1)
    # a dry run writes nothing, the failed write included
    before = _snapshot(root)
    schedule_clean_after_failed_writes(storage, lock, one_version, dry_run=True, time_settings=FAST,
                                       options=LAZY)
    assert _snapshot(root) == before
    clean, result = schedule_clean_after_failed_writes(storage, lock, one_version, time_settings=FAST,
                                                       options=LAZY)
    assert clean is not None, result.summary()
    r = check_rolled_back(root, tmp_path, t, action, written, rows)
    assert r < clean.requested_time  # the rollback came first


def test_schedule_clean_command_takes_the_failed_writes_keys(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_COW_MDT)
    rows = hudi_rs_rows(root)
    t, action, written = fail_a_write(root)
    runner = CliRunner()
    before = _snapshot(root)
    for bad in ("hoodie.cleaner.policy.failed.writes=LAZILY", "hoodie.cleaner.policy.failed.write=LAZY"):
        out = runner.invoke(cli, ["schedule", "clean", str(root), "-o", bad, "--clock-skew-ms", "5"])
        assert out.exit_code == 2 and "--option" in out.output, out.output  # one line, nothing touched
        assert _snapshot(root) == before
    lazy = "hoodie.cleaner.policy.failed.writes=LAZY"
    out = runner.invoke(cli, ["schedule", "clean", str(root), "-o", lazy, "--clock-skew-ms", "5"])
    assert out.exit_code == 0, out.output
    check_rolled_back(root, tmp_path, t, action, written, rows)


# ---------------------------------------------------------------------------- table version 6


def test_v6_cow_failed_write_is_rolled_back(hudi_table, tmp_path: Path) -> None:
    root = hudi_table("cow/v6_nonpartitioned")
    rows = hudi_rs_rows(root)
    t, action, written = _fail_v6(root)
    storage = LocalStorage(str(root))
    (result,) = rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert result.target_time == t and sorted(result.deleted) == written
    timeline = Timeline.load(storage, load_table_config(storage))
    assert timeline.get(t) is None and not [p for p in (root / ".hoodie").iterdir() if p.name.startswith(t)]
    (r,) = timeline.completed((Action.ROLLBACK,))
    assert sorted(p.name for p in (root / ".hoodie").glob(f"{r.requested_time}*")) == [
        f"{r.requested_time}.rollback", f"{r.requested_time}.rollback.inflight",
        f"{r.requested_time}.rollback.requested"]
    assert not any((root / w).exists() for w in written)
    assert hudi_rs_rows(root) == rows


V6_MOR = "mor/avro/v6_trips_8i1u"
#: A rollback Hudi 0.x wrote itself: the v6 shapes hoodied's plan and metadata must have.
V6_HUDI_ROLLBACK = "mor/parquet/v6_nonpartitioned_rollback"


def _fail_v6_append(root: Path, *, markers: bool = True) -> tuple[str, str, int]:
    """A failed v6 delta commit T that appended a data block to the latest log file, as Hudi 0.x
    appends: T's timeline files (Hudi's, copied from the last delta commit), the appended block
    (a copy of the file's last data block with T's instant), its APPEND marker, an old heartbeat.
    Returns (T, the log file, its size after the append)."""
    folder = root / ".hoodie"
    s = max(p.name.split(".")[0] for p in folder.glob("*.deltacommit.requested"))
    t = _new_instant()
    for suffix in (".deltacommit.requested", ".deltacommit.inflight"):
        shutil.copyfile(folder / f"{s}{suffix}", folder / f"{t}{suffix}")
    storage = LocalStorage(str(root))
    log_file = next(iter(root.rglob(".*.log.*")))
    rel = str(log_file.relative_to(root))
    last = [b for b in read_log_blocks(storage, rel) if b.block_type is not BlockType.COMMAND][-1]
    records = []
    for record in avro_block_records(last):  # T's version of the rows: new values, T's commit time
        record["_hoodie_commit_time"] = t
        record["fare"] = float(record["fare"]) + 1000.0
        records.append(record)
    content = encode_avro_data_block(records, last.header[HeaderKey.SCHEMA])
    header = {**last.header, HeaderKey.INSTANT_TIME: t}
    block = encode_block(last.block_type, header, content, last.footer)
    if markers:
        WriteMarkers(storage, t).create(str(log_file.parent.relative_to(root)), log_file.name, IOType.APPEND)
    with open(log_file, "ab") as f:
        f.write(block)
    _old_heartbeat(root, t)
    return t, rel, log_file.stat().st_size


def test_v6_mor_appended_blocks_are_rolled_back_with_a_command_block(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V6_MOR)
    rows = hudi_rs_rows(root)
    t, appended, size = _fail_v6_append(root)
    assert hudi_rs_rows(root) == rows  # a reader skips the blocks of the pending T
    storage = LocalStorage(str(root))
    (result,) = rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert result.target_time == t and result.deleted == [] and result.target_deleted
    timeline = Timeline.load(storage, load_table_config(storage))
    assert timeline.get(t) is None and not [p for p in (root / ".hoodie").iterdir() if p.name.startswith(t)]
    (r,) = timeline.completed((Action.ROLLBACK,))
    name = LogFileName.parse(appended.rsplit("/", 1)[-1])
    assert name is not None
    partition = appended.rsplit("/", 1)[0]
    plan = timeline.read_plan(r)
    assert plan == {
        "instantToRollback": {"commitTime": t, "action": "deltacommit"},
        "RollbackRequests": [{
            "partitionPath": partition, "fileId": name.file_id, "latestBaseInstant": name.instant_time,
            "filesToBeDeleted": [], "logBlocksToBeDeleted": {f"{storage.base_uri}/{appended}": size},
        }],
        "version": 1,
    }
    # the command block sits in a new log file of the slice: the next version
    new_log = LogFileName(name.file_id, name.instant_time, name.version + 1, "0-0-0").format()
    (command,) = read_log_blocks(storage, f"{partition}/{new_log}")
    assert command.block_type is BlockType.COMMAND
    assert dict(command.header) == {HeaderKey.INSTANT_TIME: r.requested_time,
                                    HeaderKey.TARGET_INSTANT_TIME: t, HeaderKey.COMMAND_BLOCK_TYPE: "0"}
    command_size = (root / partition / new_log).stat().st_size
    md = timeline.read_commit_metadata(r)
    assert md["commitsRollback"] == [t] and md["totalFilesDeleted"] == 0
    assert md["partitionMetadata"] == {partition: {
        "partitionPath": partition, "successDeleteFiles": [], "failedDeleteFiles": [],
        "rollbackLogFiles": {f"{storage.base_uri}/{partition}/{new_log}": command_size},
        "logFilesFromFailedCommit": {f"{storage.base_uri}/{appended}": size},
    }}
    assert not (root / ".hoodie" / ".heartbeat" / t).exists()
    assert hudi_rs_rows(root) == rows
    # the same record shapes as a rollback Hudi 0.x wrote itself
    hudi_root = hudi_table(V6_HUDI_ROLLBACK)
    hudi_storage = LocalStorage(str(hudi_root))
    hudi_tl = Timeline.load(hudi_storage, load_table_config(hudi_storage))
    (hudi_r,) = hudi_tl.completed((Action.ROLLBACK,))
    hudi_plan, hudi_md = hudi_tl.read_plan(hudi_r), hudi_tl.read_commit_metadata(hudi_r)
    assert hudi_plan is not None and set(hudi_plan) == set(plan)
    assert {k for req in hudi_plan["RollbackRequests"] for k in req} == set(plan["RollbackRequests"][0])
    assert set(hudi_md) == set(md)
    assert set(next(iter(hudi_md["partitionMetadata"].values()))) == set(md["partitionMetadata"][partition])
    hudi_logs = sorted(p.name for p in hudi_root.glob(".*.log.*"))
    (hudi_command,) = read_log_blocks(hudi_storage, hudi_logs[1])  # Hudi's own: a new version, one block
    assert hudi_command.block_type is BlockType.COMMAND and set(hudi_command.header) == set(command.header)


def test_v6_mor_without_markers_is_refused_before_anything_is_written(hudi_table) -> None:
    root = hudi_table(V6_MOR)
    _fail_v6_append(root, markers=False)
    storage = LocalStorage(str(root))
    before = _snapshot(root)
    with pytest.raises(UnsupportedTableError, match="without markers"):
        rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert _snapshot(root) == before


@pytest.mark.parametrize("point", ["inflight", "deletes-done", "target-deleted"])
def test_v6_kill_9_then_the_next_clean_writes_one_command_block(point: str, hudi_table,
                                                               tmp_path: Path) -> None:
    root = hudi_table(V6_MOR)
    rows = hudi_rs_rows(root)
    t, appended, _ = _fail_v6_append(root)
    kill_group(start_paused(_SCRIPT, [str(root)], point, tmp_path / "ready"))
    storage = LocalStorage(str(root))
    (result,) = rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert result.target_time == t
    partition = appended.rsplit("/", 1)[0]
    logs = [str(p.relative_to(root)) for p in (root / partition).glob(".*.log.*")]
    commands = [p for p in logs
                if any(b.block_type is BlockType.COMMAND for b in read_log_blocks(storage, p))]
    assert len(commands) == 1
    timeline = Timeline.load(storage, load_table_config(storage))
    assert timeline.get(t) is None and len(timeline.completed((Action.ROLLBACK,))) == 1
    assert hudi_rs_rows(root) == rows


def _fail_v6(root: Path) -> tuple[str, str, list[str]]:
    """A failed v6 commit: layout-1 timeline files of the last commit copied under T, base files too."""
    folder = root / ".hoodie"
    s = max(p.name.split(".")[0] for p in folder.glob("*.commit.requested"))
    t = _new_instant()
    for suffix in (".commit.requested", ".inflight"):
        shutil.copyfile(folder / f"{s}{suffix}", folder / f"{t}{suffix}")
    storage = LocalStorage(str(root))
    written = []
    for p in _data_files(root):
        if writer_instant(p.name, 6) == s:
            name = p.name.replace(f"_{s}.", f"_{t}.")
            rel = p.parent.relative_to(root)
            partition = "" if str(rel) == "." else str(rel)
            WriteMarkers(storage, t).create(partition, name, IOType.CREATE)
            shutil.copyfile(p, p.parent / name)
            written.append(f"{partition}/{name}" if partition else name)
    _old_heartbeat(root, t)
    return t, "commit", sorted(written)


# ---------------------------------------------------------------------------- kill -9


_SCRIPT = """
import sys
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.service.failed_writes import rollback_failed_writes

storage = LocalStorage(sys.argv[1])
rollback_failed_writes(storage, InProcessLock(storage.base_uri),
                       {"hoodie.cleaner.policy.failed.writes": "LAZY"},
                       time_settings=TimeSettings(max_expected_clock_skew_ms=5))
"""


@pytest.mark.parametrize("point", ["inflight", "deletes-done", "mdt-rollback-inflight", "mdt-done",
                                   "target-deleted"])
def test_kill_9_during_the_rollback_then_the_next_clean_converges(point: str, hudi_table,
                                                                  tmp_path: Path) -> None:
    root = hudi_table(V9_MOR_MDT)
    rows = hudi_rs_rows(root)
    t, action, written = fail_a_write(root)
    proc = start_paused(_SCRIPT, [str(root)], point, tmp_path / "ready")
    try:
        target_files = [p.name for p in _timeline_dir(root).iterdir() if p.name.startswith(t)]
        assert (target_files == []) is (point == "target-deleted")
    finally:
        kill_group(proc)
    assert proc.returncode == -signal.SIGKILL
    assert _rows_everywhere(root, tmp_path) == (rows, rows)  # readers never see a half state
    storage = LocalStorage(str(root))
    (result,) = rollback_failed_writes(storage, InProcessLock(storage.base_uri), LAZY, time_settings=FAST)
    assert result.target_time == t  # the pending rollback is finished, not planned again
    rollbacks = Timeline.load(storage, load_table_config(storage)).completed((Action.ROLLBACK,))
    assert [r.requested_time for r in rollbacks if r.requested_time > t] == [result.rollback.requested_time]
    check_rolled_back(root, tmp_path, t, action, written, rows)
