"""The metadata table's compaction as Spark tasks, one per MDT file group (``SparkOperations``).

On Hudi's v9 fixture (14 MDT file groups with log files since Hudi's own MDT compaction), one MDT
compaction at one instant time is run twice on two copies: in this process (``hoodie.tasks``'
default) and through a real local Spark session. Both give the same base files, cell for cell,
and the same write stats. A driver killed with SIGKILL while its Spark tasks are publishing base
files leaves an inflight MDT compaction; running it again (through Spark) keeps the files the killed
tasks published and converges to the same files as the uninterrupted run.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hoodied.executors.engine import Session, SparkOperations, spark_session
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.compaction import execute_mdt_compaction, schedule_mdt_compaction
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.tasks import OperationRunner, run_in_process
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from tests.helpers.crash_driver import kill_group, start_paused

V9_MOR = "mor/avro/v9_txns_simple_meta"
FAST = TimeSettings(max_expected_clock_skew_ms=5)

_DRIVER = """
import sys
from hoodied.executors.engine import SparkOperations, spark_session
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.metadata.compaction import execute_mdt_compaction
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
mdt, t = sys.argv[1], sys.argv[2]
storage = LocalStorage(mdt)
lock = InProcessLock(mdt)
writer = TimelineWriter(storage, load_table_config(storage, metadata_table=True), lock,
                        time_settings=TimeSettings(max_expected_clock_skew_ms=5))
with spark_session("local[1]") as session, lock:
    execute_mdt_compaction(writer, t, 9, runner=SparkOperations(session))
"""


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


def _writer(root: Path) -> tuple[TimelineWriter, InProcessLock]:
    storage = LocalStorage(str(root / METADATA_FOLDER))
    lock = InProcessLock(storage.base_uri)
    config = load_table_config(storage, metadata_table=True)
    return TimelineWriter(storage, config, lock, time_settings=FAST), lock


def _schedule(root: Path, t: str | None = None) -> tuple[str, dict[str, Any]]:
    """Schedule the MDT compaction (at ``t``, else a new instant); its time and plan."""
    writer, lock = _writer(root)
    with lock:
        when = t or writer.new_instant_time()
        inst = schedule_mdt_compaction(writer, when)
    assert inst is not None
    plan = Timeline.load(writer.storage, writer.config).read_plan(inst)
    assert plan is not None
    return when, plan


#: Write-stat fields that differ between two runs of one compaction: the HFile's file info holds its
#: creation time (``hfile.CREATE_TIME_TS``), so the compressed size moves by a few bytes.
_SIZES = ("fileSizeInBytes", "totalWriteBytes")


def _execute(root: Path, t: str, runner: OperationRunner) -> dict[str, Any]:
    """Run the MDT compaction ``t``; its write stats by partition, sizes left out (``_SIZES``)."""
    writer, lock = _writer(root)
    with lock:
        result = execute_mdt_compaction(writer, t, 9, runner=runner)
    assert result.instant.is_completed and result.records > 0
    stats = Timeline.load(writer.storage, writer.config).read_commit_metadata(
        result.instant)["partitionToWriteStats"]
    for p in stats.values():
        for s in p:
            assert s["fileSizeInBytes"] == (root / METADATA_FOLDER / s["path"]).stat().st_size > 0
    return {partition: [{k: v for k, v in s.items() if k not in _SIZES} for s in p]
            for partition, p in stats.items()}


def _base_files(root: Path, t: str) -> dict[str, list[tuple[bytes, bytes]]]:
    """The base files of MDT compaction ``t``: relative path -> cells."""
    mdt = root / METADATA_FOLDER
    return {str(p.relative_to(mdt)): list(HFileReader(p.read_bytes(), str(p)).iter_cells())
            for p in sorted(mdt.glob(f"*/*_{t}.hfile"))}


def _copies(hudi_table: Any, tmp_path: Path, n: int) -> list[Path]:
    root = hudi_table(V9_MOR)
    out = [root]
    for i in range(1, n):
        out.append(Path(shutil.copytree(root, tmp_path / f"copy-{i}", symlinks=True)))
    return out


def test_spark_tasks_write_the_same_base_files_as_the_driver(hudi_table, tmp_path: Path,
                                                             spark: Session) -> None:
    local, remote = _copies(hudi_table, tmp_path, 2)
    t, plan = _schedule(local)
    assert _schedule(remote, t)[1] == plan
    assert len(plan["operations"]) >= 14  # one task per MDT file group
    in_process = _execute(local, t, run_in_process)
    on_spark = _execute(remote, t, SparkOperations(spark))
    assert on_spark == in_process
    files = _base_files(local, t)
    assert len(files) == len(plan["operations"])
    assert _base_files(remote, t) == files
    # a write stat for every planned file group, in the plan's order
    assert [s["fileId"] for p in on_spark.values() for s in p] == [op["fileId"] for op in plan["operations"]]


def test_kill_9_while_spark_tasks_publish_then_rerun(hudi_table, tmp_path: Path, spark: Session) -> None:
    crashed, reference = _copies(hudi_table, tmp_path, 2)
    t, plan = _schedule(crashed)
    _schedule(reference, t)
    ready = tmp_path / "ready"
    # one core: task 0 published its base file and waits at the crash point, the others wait for it
    proc = start_paused(_DRIVER, [str(crashed / METADATA_FOLDER), t], "mdt-compaction-base-written", ready)
    kill_group(proc)
    writer, _ = _writer(crashed)
    inst = Timeline.load(writer.storage, writer.config).get(t)
    assert inst is not None and inst.state is State.INFLIGHT
    published = {p: p.stat().st_ino for p in (crashed / METADATA_FOLDER).glob(f"*/*_{t}.hfile")}
    assert 1 <= len(published) < len(plan["operations"])
    assert not list((crashed / METADATA_FOLDER).rglob("*.tmp"))  # the temp files of published files are gone

    stats = _execute(crashed, t, SparkOperations(spark))
    assert {p: p.stat().st_ino for p in published} == published  # kept, not written again
    assert stats == _execute(reference, t, run_in_process)
    assert _base_files(crashed, t) == _base_files(reference, t)
    done = Timeline.load(writer.storage, writer.config).get(t)
    assert done is not None and done.is_completed and done.action is Action.COMPACTION
