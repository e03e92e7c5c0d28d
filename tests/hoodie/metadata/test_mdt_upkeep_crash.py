"""The metadata table's own compaction and clean survive kill -9.

A real subprocess writes data delta commits through ``MetadataWriter`` until its MDT upkeep
compacts (or cleans) the MDT; the crash point (``hoodie.crashpoints``) stops it there and the
test kills it with SIGKILL. The next MDT write of the data table finishes the pending MDT
compaction or clean from its plan before anything else, as Hudi's
``runPendingTableServicesOperationsAndRefreshTimeline`` does; readers then see exactly the
files on storage.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hoodied.hoodie.avro.container import write_single_record
from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.service.cli.report import committed_listing_drift
from tests.helpers.mor_tables import hudi_rs_rows
from tests.hoodie.metadata.test_mdt_upkeep import _listing, _mdt, _source
from tests.hoodie.metadata.test_mdt_writer import V9_MOR, Table, _add_base_file, _hudi_rs, _without_mdt

TESTS = Path(__file__).resolve().parent
PROJECT = TESTS.parents[2]
HUDI_COMPACTION = "20260307162612567"  # the MDT compaction Hudi wrote in V9_MOR

_WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.hoodie.metadata.test_mdt_writer import Table, _add_base_file
root, source, writes = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
t = Table(root)
with t.lock:
    for _ in range(writes):
        _add_base_file(t, "region=eu", source)
"""


def _check_readers(root: Path, tmp: Path) -> None:
    """hudi-rs through the MDT == hudi-rs by storage listing; no drift among committed files (the
    killed writer's own data file stays on storage, uncommitted, as after any failed write)."""
    assert _hudi_rs(root) == _hudi_rs(_without_mdt(root, tmp))
    assert hudi_rs_rows(root) == hudi_rs_rows(_without_mdt(root, tmp))
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0


def _run_until(root: Path, point: str, writes: int, tmp: Path) -> None:
    """Run ``writes`` data writes in a subprocess, kill -9 it at crash point ``point``."""
    ready = tmp / f"ready-{point}"
    env = dict(os.environ, PYTHONPATH=str(PROJECT), HOODIED_TEST_PAUSE_AT=point,
               HOODIED_TEST_PAUSE_READY=str(ready), HOODIED_TEST_PAUSE_S="120")
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(TESTS), str(root), _source(root), str(writes)],
        env=env, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if proc.poll() is not None:
                err = proc.communicate()[1].decode()[-2000:]
                pytest.fail(f"writer exited ({proc.returncode}) before {point}: {err}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"writer never reached {point}")
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("point", ["mdt-compaction-inflight", "mdt-compaction-base-written"])
def test_kill_9_during_the_mdt_compaction(point: str, hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_MOR)
    props = root / ".hoodie" / "hoodie.properties"
    # 7 MDT delta commits since Hudi's compaction: the next data write compacts the MDT first
    props.write_text(props.read_text() + "hoodie.metadata.compact.max.delta.commits=7\n")
    _run_until(root, point, 1, tmp_path)

    mdt_root = root / METADATA_FOLDER
    _, _, timeline = _mdt(root)
    (pending,) = timeline.pending((Action.COMPACTION,))
    assert pending.state is State.INFLIGHT
    c = pending.requested_time
    plan = timeline.read_plan(pending)
    assert plan is not None and len(plan["operations"]) >= 14
    written = list(mdt_root.glob(f"*/*_{c}.hfile"))
    assert len(written) == (1 if point == "mdt-compaction-base-written" else 0)
    # readers skip the pending compaction: the MDT still lists exactly what storage holds
    _check_readers(root, tmp_path)

    t = Table(root)
    with t.lock:
        instant = _add_base_file(t, "region=eu", _source(root))[0]
    _, _, timeline = _mdt(root)
    done = timeline.get(c)
    assert done is not None and done.is_completed
    later = timeline.completion_time(instant)
    assert done.completion_time is not None and later is not None and done.completion_time < later
    bases = sorted(mdt_root.glob(f"*/*_{c}.hfile"))
    assert len(bases) == len(plan["operations"])
    # the base file the killed attempt wrote is kept, not written twice
    assert not set(written) - set(bases) and len({b.name.split("_")[0] for b in bases}) == len(bases)
    records = 0
    for b in bases:  # whole, readable files that name themselves (Hudi 1.1 also writes empty ones)
        rows = dict(HFileReader(b.read_bytes(), str(b)).records())
        assert all(r["_hoodie_file_name"] == b.name for r in rows.values())
        records += len(rows)
    md = timeline.read_commit_metadata(done)
    stats = [s for v in md["partitionToWriteStats"].values() for s in v]
    assert len(stats) == len(bases) and sum(s["numWrites"] for s in stats) == records > 0
    assert instant in str(_listing(root)["region=eu"])
    _check_readers(root, tmp_path)


@pytest.mark.parametrize("point", ["mdt-clean-inflight", "mdt-clean-deleted"])
def test_kill_9_during_the_mdt_clean(point: str, hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_MOR)
    # enough MDT writes that the slice before Hudi's compaction falls out of the 20 retained commits
    _run_until(root, point, 16, tmp_path)
    storage, _, timeline = _mdt(root)
    (pending,) = timeline.pending((Action.CLEAN,))
    plan = timeline.read_plan(pending)
    assert plan is not None
    planned = [Path(i["filePath"]).name for infos in plan["filePathsToBeDeletedPerPartition"].values()
               for i in infos]
    assert len(planned) >= 8
    present = sum((root / METADATA_FOLDER / p / n).exists()
                  for p, infos in plan["filePathsToBeDeletedPerPartition"].items()
                  for n in (Path(i["filePath"]).name for i in infos))
    assert present == len(planned) - (1 if point == "mdt-clean-deleted" else 0)
    # the old slices are not read any more once their MDT compaction is in place
    _check_readers(root, tmp_path)

    t = Table(root)
    with t.lock:
        instant = _add_base_file(t, "region=eu", _source(root))[0]
    _, _, timeline = _mdt(root)
    done = timeline.get(pending.requested_time)
    assert done is not None and done.is_completed
    later = timeline.completion_time(instant)
    assert done.completion_time is not None and later is not None and done.completion_time < later
    for p, infos in plan["filePathsToBeDeletedPerPartition"].items():
        for i in infos:
            assert not (root / METADATA_FOLDER / p / Path(i["filePath"]).name).exists()
    md = timeline.read_commit_metadata(done)
    failed = sum(len(v["failedDeleteFiles"]) for v in md["partitionMetadata"].values())
    assert md["totalFilesDeleted"] + failed == len(planned)
    assert failed == len(planned) - present  # deleted by the killed attempt: "failed" on the retry, as Hudi
    assert (root / METADATA_FOLDER / "files" / f"files-0000-0_13-170-402_{HUDI_COMPACTION}.hfile").exists()
    assert storage.exists(".hoodie/hoodie.properties")
    _check_readers(root, tmp_path)


def _rewrite_pending_clean_plan(root: Path, rewrite: Callable[[str], str]) -> tuple[str, dict[str, Any]]:
    """Replace the pending MDT clean's plan paths with ``rewrite(path)`` (as another writer names them)."""
    _, _, timeline = _mdt(root)
    (pending,) = timeline.pending((Action.CLEAN,))
    plan = timeline.read_plan(pending)
    assert plan is not None
    for infos in plan["filePathsToBeDeletedPerPartition"].values():
        for info in infos:
            info["filePath"] = rewrite(info["filePath"])
    requested = root / METADATA_FOLDER / ".hoodie" / "timeline" / f"{pending.requested_time}.clean.requested"
    assert requested.is_file()
    requested.write_bytes(write_single_record(plan, "HoodieCleanerPlan"))
    return pending.requested_time, plan


def test_an_mdt_clean_plan_with_file_scheme_paths_deletes_its_files(hudi_table, tmp_path: Path) -> None:
    """Hudi names plan files ``file:/...`` on local file systems: the MDT clean resolves them (a path it
    could not resolve used to be reported as a failed delete, leaving the file)."""
    root = hudi_table(V9_MOR)
    _run_until(root, "mdt-clean-inflight", 16, tmp_path)
    clean_time, plan = _rewrite_pending_clean_plan(root, lambda p: "file:" + p)
    t = Table(root)
    with t.lock:
        _add_base_file(t, "region=eu", _source(root))
    _, _, timeline = _mdt(root)
    done = timeline.get(clean_time)
    assert done is not None and done.is_completed
    md = timeline.read_commit_metadata(done)
    planned = [Path(i["filePath"]).name for v in plan["filePathsToBeDeletedPerPartition"].values() for i in v]
    assert sum(len(v["failedDeleteFiles"]) for v in md["partitionMetadata"].values()) == 0
    assert md["totalFilesDeleted"] == len(planned) >= 8
    for p, infos in plan["filePathsToBeDeletedPerPartition"].items():
        for i in infos:
            assert not (root / METADATA_FOLDER / p / Path(i["filePath"]).name).exists()
    _check_readers(root, tmp_path)


def test_an_mdt_clean_plan_naming_a_file_outside_the_mdt_deletes_nothing(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(V9_MOR)
    _run_until(root, "mdt-clean-inflight", 16, tmp_path)
    outside = str(root / "region=eu" / "not-mine.parquet")
    first = [True]

    def rewrite(path: str) -> str:  # the first planned file is replaced by a data-table path
        if first[0]:
            first[0] = False
            return outside
        return path

    clean_time, _ = _rewrite_pending_clean_plan(root, rewrite)
    before = [p for p in (root / METADATA_FOLDER).rglob("*") if p.is_file()]
    t = Table(root)
    with pytest.raises(HoodieFormatError, match="outside the table"), t.lock:
        _add_base_file(t, "region=eu", _source(root))
    # every MDT file is still there: the plan was checked whole before the first delete
    assert [f for f in before if not f.exists()] == []
    assert (root / "region=eu").is_dir() and not Path(outside).exists()
    _, _, timeline = _mdt(root)
    pending = timeline.get(clean_time)
    assert pending is not None and not pending.is_completed
