"""Temp files of killed hoodied writes: left by a real SIGKILL, removed by the next clean, nothing else.

A real process streams a large parquet file through ``LocalStorage.create_if_absent`` (the way
``BaseFileWriter`` writes base files) and is killed with SIGKILL in the middle (at a crash point,
``hoodie.crashpoints``); its temp ``.<name>.<uuid4 hex>.tmp`` stays beside the target. A clean
executed later (``executors.clean.execute_clean``) removes it together with its own planned
deletes and nothing else; a temp younger than the bound and files that only look similar are
kept. The failure paths of hoodied's own writes remove their temps (``hoodie.storage``).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from hoodied.executors.clean import CleanResult, execute_clean
from hoodied.hoodie.errors import FileAlreadyExistsError, StorageError
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.temp_files import (
    DEFAULT_MIN_AGE_S,
    is_hoodied_temp_name,
    remove_leftover_temps,
    sweep_temp_files,
)
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clean import CleanSettings, schedule_clean
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.mor_tables import hudi_rs_rows

TABLE = "cow/v9_txns_simple_nometa"
FAST = TimeSettings(max_expected_clock_skew_ms=5)
POINT = "temp-files-mid-write"
TARGET_NAME = "0a1b2c3d-0000-4000-8000-000000000000-0_0-9-9_20990101000000000.parquet"

#: Streams row groups of random-ish data into a parquet file through create_if_absent, stops at a
#: crash point after 8 MB or so, then would go on writing (it is killed there).
_STREAMING_WRITER = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.storage import LocalStorage
storage = LocalStorage(sys.argv[1])
schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
with storage.create_if_absent(sys.argv[2]) as out:
    with pq.ParquetWriter(out.path, schema, compression="none") as w:
        for group in range(1000):
            rows = 100_000
            w.write_table(pa.table({"k": [f"key-{group}-{i}" for i in range(rows)],
                                    "v": list(range(group * rows, (group + 1) * rows))}, schema=schema))
            if group == 3:
                crash_point(sys.argv[3])
    out.commit()
"""


def _files(root: Path) -> set[str]:
    """Every file of the table but the local lock's own state."""
    out = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()}
    return {f for f in out if not f.startswith(".hoodie/.locks/")}


def _killed_mid_write(root: Path, tmp_path: Path, partition: str) -> str:
    """Run the streaming writer, SIGKILL it in the middle; returns the temp it left (relative)."""
    before = _files(root)
    proc = start_paused(
        _STREAMING_WRITER, [str(root), f"{partition}/{TARGET_NAME}", POINT], POINT, tmp_path / "ready"
    )
    kill_group(proc)
    (left,) = _files(root) - before
    assert left.startswith(f"{partition}/.{TARGET_NAME}.") and is_hoodied_temp_name(left.rsplit("/", 1)[1])
    assert (root / left).stat().st_size > 4_000_000  # four row groups of 100,000 rows
    assert not (root / partition / TARGET_NAME).exists()  # never published
    return left


def _schedule_and_clean(
    root: Path, temp_file_age_s: float = DEFAULT_MIN_AGE_S
) -> tuple[set[str], CleanResult]:
    """Schedule a clean keeping one commit, execute it; (its planned deletes, the result)."""
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    inst, planned = schedule_clean(storage, lock, CleanSettings(commits_retained=1), time_settings=FAST)
    assert inst is not None, planned.summary()
    files = {rel for rels in planned.files.values() for rel in rels}  # relative paths
    assert files and all((root / rel).is_file() for rel in files)
    result = execute_clean(
        storage,
        load_table_config(storage),
        lock,
        inst.requested_time,
        time_settings=FAST,
        heartbeat_interval_ms=100,
        temp_file_age_s=temp_file_age_s,
    )
    assert result.instant.is_completed
    return files, result


def _partition(root: Path) -> str:
    return next(
        str(p.parent.relative_to(root))
        for p in sorted(root.rglob(".hoodie_partition_metadata*"))
        if not str(p.relative_to(root)).startswith(".hoodie")
    )


def test_temp_of_a_killed_write_is_removed_by_the_next_clean_and_nothing_else(
    hudi_table, tmp_path: Path
) -> None:
    root = hudi_table(TABLE)
    rows = hudi_rs_rows(root)
    temp = _killed_mid_write(root, tmp_path, _partition(root))
    before = _files(root)
    planned, result = _schedule_and_clean(root, temp_file_age_s=0)
    after = _files(root)
    assert result.temp_files_removed == [temp]
    assert "; 1 leftover temp file removed; completed" in result.summary()
    # gone: exactly the clean's own planned deletes and the temp
    assert before - after == planned | {temp}
    assert set(result.deleted) == planned
    # added: the clean's timeline files only
    assert {f.rsplit("/", 1)[0] for f in after - before} == {".hoodie/timeline"}
    assert hudi_rs_rows(root) == rows


def _old(path: Path, age_s: float = 2 * 3600) -> None:
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp), follow_symlinks=False)


def test_young_temps_and_lookalikes_are_kept(hudi_table, tmp_path: Path) -> None:
    root = hudi_table(TABLE)
    partition = _partition(root)
    temp = _killed_mid_write(root, tmp_path, partition)
    _old(root / temp)  # killed two hours ago
    hexes = [uuid.uuid4().hex for _ in range(4)]
    young = f"{partition}/.{TARGET_NAME}.{hexes[0]}.tmp"
    (root / young).write_bytes(b"a live writer's")
    lookalikes = [
        f"{partition}/.{TARGET_NAME}.{uuid.uuid4()}.tmp",  # dashes (a UUID's text)
        f"{partition}/.{TARGET_NAME}.{hexes[1].upper()}.tmp",  # upper case
        f"{partition}/{TARGET_NAME}.{hexes[1]}.tmp",  # no leading dot
        f"{partition}/.{TARGET_NAME}.{hexes[1]}.tmp.crc",  # a checksum beside a temp
        f"{partition}/.{TARGET_NAME}.{hexes[1][:12]}1{hexes[1][13:]}.tmp",  # not a version-4 UUID
        f"{partition}/..{hexes[1]}.tmp",  # no target name
        f"{partition}/{TARGET_NAME}.{hexes[1]}",  # Hudi's createImmutableFileInPath temp shape
        f".hoodie/.locks/.hoodied.lock.{hexes[2]}.tmp",  # the lock backends' folder is not swept
        f".hoodie/.locks/hoodied.fence.{hexes[2]}.tmp",
    ]
    for rel in lookalikes:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"not hoodied's")
        _old(root / rel)
    folder = root / f"{partition}/.{TARGET_NAME}.{hexes[3]}.tmp"  # a folder of that name
    folder.mkdir()
    _old(folder)
    link = root / f"{partition}/.other.parquet.{uuid.uuid4().hex}.tmp"  # a link of that name
    link.symlink_to(next(p for p in (root / partition).iterdir() if p.name.endswith(".parquet")))
    _old(link)
    hudi_files = {f for f in _files(root) if ".hoodie_partition_metadata" in f or f.endswith(".parquet")}
    before = _files(root)
    planned, result = _schedule_and_clean(root)  # the default bound: one hour
    after = _files(root)
    assert DEFAULT_MIN_AGE_S == 3600
    assert result.temp_files_removed == [temp]
    assert before - after == planned | {temp}
    assert (
        young in after
        and all((root / rel).is_file() for rel in lookalikes)
        and link.is_symlink()
        and folder.is_dir()
    )
    assert hudi_files - planned <= after
    # with no age bound the young temp goes too, still nothing else
    swept = sweep_temp_files(LocalStorage(str(root)), min_age_s=0)
    assert swept.removed == [young] and not swept.errors
    assert _files(root) == after - {young}
    # a file dated in the future (clock skew) is younger than any bound
    future = root / f"{partition}/.{TARGET_NAME}.{uuid.uuid4().hex}.tmp"
    future.write_bytes(b"x")
    _old(future, -600)
    assert sweep_temp_files(LocalStorage(str(root)), min_age_s=0).removed == []


def _undeletable(path: Path) -> tuple[list[str], list[str]]:
    """Commands that make ``path`` undeletable for real and back: immutable for root (ext4's
    ``chattr +i``), a read-only folder for anyone else."""
    if os.geteuid() == 0:
        return ["chattr", "+i", str(path)], ["chattr", "-i", str(path)]
    return ["chmod", "555", str(path.parent)], ["chmod", "755", str(path.parent)]


def test_a_sweep_failure_does_not_fail_the_clean(hudi_table, caplog: pytest.LogCaptureFixture) -> None:
    """A temp the sweep cannot delete is logged in one line; the clean completes all the same."""
    root = hudi_table(TABLE)
    stuck = root / "stuck"
    stuck.mkdir()
    temp = stuck / f".x.parquet.{uuid.uuid4().hex}.tmp"
    temp.write_bytes(b"x")
    _old(temp)
    lock_it, unlock_it = _undeletable(temp)
    if subprocess.run(lock_it, capture_output=True).returncode != 0:
        pytest.skip("this file system cannot make a file undeletable")
    try:
        planned, result = _schedule_and_clean(root, temp_file_age_s=0)
    finally:
        subprocess.run(unlock_it, check=True)
    assert result.temp_files_removed == [] and temp.exists()
    assert set(result.deleted) == planned
    (warning,) = [r.getMessage() for r in caplog.records if "temp files" in r.getMessage()]
    assert "1 could not be removed" in warning and "stuck/.x.parquet." in warning and "\n" not in warning


# ---------------------------------------------------------------------------- failure paths


def test_failed_streamed_writes_remove_their_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = LocalStorage(str(tmp_path))
    # an exception while streaming: the with block aborts
    with pytest.raises(RuntimeError), storage.create_if_absent("p/a.parquet") as out:
        Path(out.path).write_bytes(b"partial")
        raise RuntimeError("writer failed")
    # the target appeared meanwhile: the commit fails, its temp goes
    storage.put_if_absent("p/b.parquet", b"first")
    out = storage.create_if_absent("p/b.parquet")
    Path(out.path).write_bytes(b"second")
    with pytest.raises(FileAlreadyExistsError):
        out.commit()
    # an interrupt in the middle of the commit (the one fault forced here: it cannot be timed for
    # real): the temp goes too, without relying on the caller's with block
    out = storage.create_if_absent("p/c.parquet")
    Path(out.path).write_bytes(b"third")

    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "link", interrupted)
    with pytest.raises(KeyboardInterrupt):
        out.commit()
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path / "p")) == ["b.parquet"]
    assert storage.read("p/b.parquet") == b"first"


def test_object_store_tables_are_not_swept() -> None:
    class _Remote:
        base_uri = "s3://bucket/t"

        def local_path(self, path: str = "") -> None:
            return None

    swept = sweep_temp_files(_Remote(), min_age_s=0)  # type: ignore[arg-type]
    assert swept.skipped.startswith("object store") and not swept.removed
    with pytest.raises(ValueError, match="negative"):
        sweep_temp_files(_Remote(), min_age_s=-1)  # type: ignore[arg-type]


def test_names() -> None:
    hex32 = uuid.uuid4().hex
    assert is_hoodied_temp_name(f".{TARGET_NAME}.{hex32}.tmp")
    assert is_hoodied_temp_name(f".20250101000000000.commit.{hex32}.tmp")  # timeline temps
    assert is_hoodied_temp_name(f"..hoodie_partition_metadata.{hex32}.tmp")
    for name in (
        ".hoodie_partition_metadata",
        f".{TARGET_NAME[:-8]}_20990101000000000.log.1_0-1-1",
        f".{TARGET_NAME}.crc",
        f".{TARGET_NAME}.{hex32}.tmp.crc",
        f".{TARGET_NAME}.{hex32}",
        "hoodied-abc.tmp",
    ):
        assert not is_hoodied_temp_name(name), name


def test_remove_leftover_temps_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A table folder that is gone: one line logged, nothing raised (the service's work is done)."""
    gone = LocalStorage(str(tmp_path / "gone"))
    with pytest.raises(StorageError, match="gone"):
        sweep_temp_files(gone)
    assert remove_leftover_temps(gone, min_age_s=0) == []
    (line,) = [r.getMessage() for r in caplog.records]
    assert "leftover temp files not swept" in line and "\n" not in line
