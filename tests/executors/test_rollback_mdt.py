"""Rollback of failed table-service attempts on tables with a metadata table (table versions 8, 9).

A real Hudi table's last compaction / clustering is turned into a failed attempt by removing
its data completion file: the data instant T is inflight while the MDT already holds the
completed delta commit T. hoodied's rollback R must then, as Hudi 1.x does, roll back the MDT
delta commit T with an MDT rollback at the same instant time R (its log files and timeline
files gone, ``R.rollback`` on the MDT timeline), delete T's data files and complete R. hudi-rs
reads the same rows with the MDT and without it, and the drift check finds nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hoodied.executors.rollback import execute_rollback
from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.rollback import schedule_rollback
from hoodied.service.cli.report import committed_listing_drift
from tests.executors.test_clean_crash import _wait_ready
from tests.helpers.mor_tables import hudi_rs_rows

PROJECT = Path(__file__).resolve().parents[2]
FAST = TimeSettings(max_expected_clock_skew_ms=5)
V8 = "mor/avro/v8_trips_8i3u1d"
V9_MOR = "mor/avro/v9_txns_simple_meta"
V9_COW = "cow/v9_txns_simple_meta"
#: (fixture, action of its last table service)
CASES = [(V9_MOR, "compaction"), (V9_COW, "clustering")]


def _fail_last_service(root: Path, action: str) -> tuple[str, list[str]]:
    """Drop the data completion file of the table's last ``action``; its output files stay."""
    folder = root / ".hoodie" / "timeline"
    t = sorted(p.name.split(".")[0] for p in folder.glob(f"*.{action}.requested"))[-1]
    (done,) = [p for p in folder.glob(f"{t}_*") if not p.name.endswith((".requested", ".inflight"))]
    done.unlink()
    outputs = sorted(str(p.relative_to(root)) for p in root.rglob(f"*_{t}.parquet"))
    assert outputs
    return t, outputs


def _mdt_timeline(root: Path) -> list[str]:
    return sorted(p.name for p in (root / METADATA_FOLDER / ".hoodie" / "timeline").iterdir() if p.is_file())


def _mdt_files_of(root: Path, t: str) -> list[str]:
    mdt = root / METADATA_FOLDER
    return sorted(str(p.relative_to(mdt)) for p in mdt.glob("*/*") if f"_{t}." in p.name)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _without_mdt(root: Path, tmp: Path) -> Path:
    copy = tmp / f"nomdt-{uuid.uuid4().hex[:6]}" / root.name
    shutil.copytree(root, copy)
    shutil.rmtree(copy / METADATA_FOLDER)
    return copy


def _rollback(root: Path, t: str) -> Any:
    """hoodied's rollback of the failed attempt T (what ``rollback_failed_attempt`` runs under the lock)."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    with lock:
        timeline = Timeline.load(storage, config)
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        target = timeline.get(t)
        assert target is not None
        r = schedule_rollback(writer, timeline, target)
        return execute_rollback(writer, r.requested_time)


def _check_rolled_back(root: Path, tmp: Path, t: str, action: str, outputs: list[str], rows: Counter[Any],
                       mdt_t_files: list[str]) -> str:
    """The state after hoodied's rollback R of T; returns R."""
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    data = Timeline.load(storage, config)
    (r,) = data.completed((Action.ROLLBACK,))
    assert data.get(t).state is State.REQUESTED  # type: ignore[union-attr]
    assert not any((root / o).exists() for o in outputs)
    # MDT: delta commit T rolled back by an MDT rollback with the same instant time R
    mdt_storage = storage.child(METADATA_FOLDER)
    mdt = Timeline.load(mdt_storage, load_table_config(mdt_storage, metadata_table=True))
    assert mdt.get(t) is None and not [n for n in _mdt_timeline(root) if n.startswith(t)]
    assert _mdt_files_of(root, t) == []
    (mdt_r,) = mdt.completed((Action.ROLLBACK,))
    assert mdt_r.requested_time == r.requested_time
    assert {n for n in _mdt_timeline(root) if n.startswith(r.requested_time)} == {
        f"{r.requested_time}.rollback.requested", f"{r.requested_time}.rollback.inflight",
        f"{r.requested_time}_{mdt_r.completion_time}.rollback",
    }
    assert mdt_r.completion_time < r.completion_time  # type: ignore[operator]
    plan = mdt.read_plan(mdt_r)
    assert plan is not None and plan["instantToRollback"] == {"commitTime": t, "action": "deltacommit"}
    planned = sorted(f for req in plan["RollbackRequests"] for f in req["filesToBeDeleted"])
    assert planned == sorted(f"{mdt_storage.base_uri}/{f}" for f in mdt_t_files)
    assert all(req["logBlocksToBeDeleted"] == {} for req in plan["RollbackRequests"])
    md = mdt.read_commit_metadata(mdt_r)
    assert md["commitsRollback"] == [t] and md["totalFilesDeleted"] == len(mdt_t_files)
    assert md["instantsRollback"] == [{"commitTime": t, "action": "deltacommit"}]
    data_md = data.read_commit_metadata(r)
    assert data_md["instantsRollback"] == [{"commitTime": t, "action": action}]
    # no MDT delta commit for the rollback itself (Hudi 1.x)
    assert mdt.get(r.requested_time).action is Action.ROLLBACK  # type: ignore[union-attr]
    # readers: same rows with the MDT and without it, no drift
    assert hudi_rs_rows(root) == rows
    assert hudi_rs_rows(_without_mdt(root, tmp)) == rows
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
    return r.requested_time


@pytest.mark.parametrize("fid,action", CASES)
def test_rollback_rolls_back_the_mdt_deltacommit(fid: str, action: str, hudi_table, tmp_path: Path) -> None:
    root = hudi_table(fid)
    rows = hudi_rs_rows(root)
    t, outputs = _fail_last_service(root, action)
    mdt_t_files = _mdt_files_of(root, t)
    assert mdt_t_files and f"{t}.deltacommit.requested" in _mdt_timeline(root)
    assert hudi_rs_rows(root) == rows  # the failed attempt is invisible already
    result = _rollback(root, t)
    assert sorted(result.deleted) == outputs
    r = _check_rolled_back(root, tmp_path, t, action, outputs, rows, mdt_t_files)
    # a re-run finds everything done and changes nothing
    before = _files(root)
    with InProcessLock(str(root)) as lock:
        storage = LocalStorage(str(root))
        writer = TimelineWriter(storage, load_table_config(storage), lock, time_settings=FAST)
        again = execute_rollback(writer, r)
    assert again.rollback.is_completed and _files(root) == before


def test_pending_mdt_deltacommit_is_rolled_back_too(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_MOR)
    rows = hudi_rs_rows(root)
    t, outputs = _fail_last_service(root, "compaction")
    # the attempt died inside its MDT delta commit: inflight there too
    mdt_tl = root / METADATA_FOLDER / ".hoodie" / "timeline"
    (mdt_done,) = mdt_tl.glob(f"{t}_*.deltacommit")
    mdt_done.unlink()
    mdt_t_files = _mdt_files_of(root, t)
    _rollback(root, t)
    _check_rolled_back(root, tmp_path, t, "compaction", outputs, rows, mdt_t_files)


def test_attempt_without_mdt_deltacommit_leaves_the_mdt_alone(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_COW)
    rows = hudi_rs_rows(root)
    t, outputs = _fail_last_service(root, "clustering")
    # the attempt died before its MDT write: no MDT delta commit T at all
    for name in [n for n in _mdt_timeline(root) if n.startswith(t)]:
        (root / METADATA_FOLDER / ".hoodie" / "timeline" / name).unlink()
    for rel in _mdt_files_of(root, t):
        (root / METADATA_FOLDER / rel).unlink()
    mdt_before = _mdt_timeline(root)
    result = _rollback(root, t)
    assert sorted(result.deleted) == outputs
    assert _mdt_timeline(root) == mdt_before  # Hudi: "the commit to rollback is not found in MDT"
    assert hudi_rs_rows(root) == rows
    assert hudi_rs_rows(_without_mdt(root, tmp_path)) == rows
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0


def test_mdt_deltacommit_already_compacted_is_refused(hudi_table) -> None:
    """v8 fixture: the MDT compaction 20251220210130942 came after the data compaction T completed in
    the MDT, so T's records are in an MDT base file; Hudi's validateRollback refuses (restore needed)."""
    root = hudi_table(V8)
    rows = hudi_rs_rows(root)
    t, _ = _fail_last_service(root, "compaction")
    before = _files(root)
    refusal = "earlier than the latest MDT compaction 20251220210130942"
    with pytest.raises(UnsupportedTableError, match=refusal):
        _rollback(root, t)
    assert _files(root) == before
    assert hudi_rs_rows(root) == rows


def test_version_6_metadata_table_is_refused(hudi_table) -> None:
    from hoodied.hoodie.metadata.rollback import require_rollback_supported

    root = hudi_table("mor/parquet/v6_nonpartitioned")
    storage = LocalStorage(str(root))
    (root / METADATA_FOLDER / ".hoodie").mkdir(parents=True)
    (root / METADATA_FOLDER / ".hoodie" / "hoodie.properties").write_text("hoodie.table.version=6\n")
    with pytest.raises(UnsupportedTableError, match="version-6 metadata table"):
        require_rollback_supported(storage, load_table_config(storage))


# ---------------------------------------------------------------------------- crashes

_SCRIPT = """
import sys
from hoodied.executors.rollback import execute_rollback
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.rollback import schedule_rollback

root, t = sys.argv[1], sys.argv[2]
storage = LocalStorage(root)
config = load_table_config(storage)
lock = InProcessLock(storage.base_uri)
with lock:
    timeline = Timeline.load(storage, config)
    writer = TimelineWriter(storage, config, lock, time_settings=TimeSettings(max_expected_clock_skew_ms=5))
    r = schedule_rollback(writer, timeline, timeline.get(t))
    execute_rollback(writer, r.requested_time)
"""


@pytest.mark.parametrize("point", ["deletes-done", "mdt-rollback-inflight", "mdt-rollback-deletes-done",
                                   "mdt-done"])
def test_kill_9_during_the_rollback_then_a_rerun_converges(point: str, hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_MOR)
    rows = hudi_rs_rows(root)
    t, outputs = _fail_last_service(root, "compaction")
    mdt_t_files = _mdt_files_of(root, t)
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(PROJECT), HOODIED_TEST_PAUSE_AT=point,
               HOODIED_TEST_PAUSE_READY=str(ready), HOODIED_TEST_PAUSE_S="60")
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(root), t], env=env, cwd=PROJECT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_ready(proc, ready)
        data_tl = sorted(p.name for p in (root / ".hoodie" / "timeline").glob("*.rollback*"))
        assert [n.split(".", 1)[1] for n in data_tl] == ["rollback.inflight", "rollback.requested"]
        mdt_rollbacks = [n for n in _mdt_timeline(root) if ".rollback" in n]
        if point == "deletes-done":
            assert mdt_rollbacks == [] and _mdt_files_of(root, t) == mdt_t_files
        elif point == "mdt-rollback-inflight":
            assert len(mdt_rollbacks) == 2 and _mdt_files_of(root, t) == mdt_t_files
            assert not [n for n in _mdt_timeline(root) if n.startswith(f"{t}_")]  # un-published
        elif point == "mdt-rollback-deletes-done":
            assert len(mdt_rollbacks) == 2 and _mdt_files_of(root, t) == []
        else:
            assert len(mdt_rollbacks) == 3 and not [n for n in _mdt_timeline(root) if n.startswith(t)]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # in every intermediate state readers see the same rows
    assert hudi_rs_rows(root) == rows
    time.sleep(0.1)
    _rollback(root, t)  # the re-run finishes the pending rollback (same instant R, data and MDT)
    _check_rolled_back(root, tmp_path, t, "compaction", outputs, rows, mdt_t_files)
