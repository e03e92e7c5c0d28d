"""Cleans on tables with a metadata table: the MDT delta commit of the clean keeps it exact.

hudi-rs reads the same rows with the MDT and with ``.hoodie/metadata`` moved away, the drift
check finds nothing, and the MDT's column stats lose exactly the entries of the deleted files.
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
from click.testing import CliRunner

from hoodied.executors.clean import execute_clean
from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.log import BlockType, hfile_block_content, read_log_blocks
from hoodied.hoodie.metadata.clean import clean_records, require_clean_maintainable
from hoodied.hoodie.metadata.colstats import column_stats_columns
from hoodied.hoodie.metadata.encode import column_stats_key
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.metadata.records import partition_to_key
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import State
from hoodied.planners.clean import planned_files
from hoodied.service.cli.main import cli
from hoodied.service.cli.report import committed_listing_drift
from tests.executors.test_clean_crash import _wait_ready
from tests.executors.test_clean_executor import _files, _hudi_rs, add_mdt_partition

PROJECT = Path(__file__).resolve().parents[3]
SKEW = ["--clock-skew-ms", "5"]
HEARTBEAT = ["--heartbeat-interval-ms", "100"]
V8 = "mor/avro/v8_trips_8i3u1d"
V9_MOR = "mor/avro/v9_txns_simple_meta"
V9_COW = "cow/v9_txns_simple_meta"
V9_NONPART = "cow/v9_txns_nonpart_meta"


# ---------------------------------------------------------------------------- helpers


def _without_mdt(root: Path, tmp: Path) -> Path:
    copy = tmp / f"nomdt-{uuid.uuid4().hex[:6]}" / root.name
    shutil.copytree(root, copy)
    shutil.rmtree(copy / ".hoodie" / "metadata")
    return copy


def _schedule(root: Path, policy: str = "KEEP_LATEST_COMMITS") -> tuple[str, dict[str, set[str]]]:
    out = CliRunner().invoke(cli, ["schedule", "clean", str(root), "--policy", policy, "--retained", "1",
                                   *SKEW])
    assert out.exit_code == 0, out.stdout + out.stderr
    t = out.stdout.split()[0]
    storage = LocalStorage(str(root))
    timeline = Timeline.load(storage, load_table_config(storage))
    target = timeline.get(t)
    assert target is not None, t
    plan = timeline.read_plan(target)
    assert plan is not None
    planned: dict[str, set[str]] = {}
    for p in planned_files(plan):
        rel = p[len(storage.base_uri) + 1:]
        partition, _, name = rel.rpartition("/")
        planned.setdefault(partition, set()).add(name)
    assert sum(len(v) for v in planned.values()) >= 2, "the clean must remove files"
    return t, planned


def _mdt_cells(root: Path, partition: str, instant: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every cell of an MDT partition (base HFiles and HFILE log blocks; ``instant``: its logs only)."""
    mdt = LocalStorage(str(root / METADATA_FOLDER))
    out: list[tuple[str, dict[str, Any]]] = []
    for info in sorted(mdt.list(partition), key=lambda i: i.name):
        if instant is not None and f"_{instant}.log." not in info.name:
            continue
        if info.name.endswith(".hfile") and instant is None:
            out += list(HFileReader(mdt.read(info.path), info.path).records())
        elif ".log." in info.name:
            for block in read_log_blocks(mdt, info.path):
                if block.block_type is BlockType.HFILE_DATA:
                    reader = HFileReader(hfile_block_content(block), block.where)
                    out += list(reader.records(block.schema_json))
    return out


def _mdt_instant_files(root: Path, t: str) -> list[str]:
    folder = root / METADATA_FOLDER / ".hoodie" / "timeline"
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(t))


def _data_instant_files(root: Path, t: str) -> list[str]:
    folder = root / ".hoodie" / "timeline"
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(t))


def _check_consistent(
    root: Path, tmp: Path, t: str, planned: dict[str, set[str]], rows: Counter[Any]
) -> None:
    """The state after a completed clean T on an MDT table (see the module docstring)."""
    assert _hudi_rs(root, None) == rows
    assert _hudi_rs(_without_mdt(root, tmp), None) == rows
    assert committed_listing_drift(HoodieTable.open(str(root))).count == 0
    for partition, names in planned.items():
        assert not any((root / partition / n).exists() for n in names)
    # MDT delta commit T completed before the data clean T
    (mdt_done,) = [n for n in _mdt_instant_files(root, t) if n.endswith(".deltacommit")]
    (data_done,) = [n for n in _data_instant_files(root, t) if n.endswith(".clean")]
    assert mdt_done.split(".")[0].split("_")[1] < data_done.split(".")[0].split("_")[1]
    # files: exactly the planned names as tombstones, per partition
    files = {k: v for k, v in _mdt_cells(root, "files", t)}
    assert set(files) == {partition_to_key(p) for p in planned}
    for partition, names in planned.items():
        fsm = files[partition_to_key(partition)]["filesystemMetadata"]
        assert fsm == {n: {"size": 0, "isDeleted": True} for n in names}


# ---------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("fid", [V8, V9_MOR, V9_COW, V9_NONPART])
def test_clean_keeps_the_metadata_table_exact(fid: str, hudi_table, tmp_path: Path) -> None:
    root = hudi_table(fid)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    rows = _hudi_rs(root, None)
    stats_before = _mdt_cells(root, "column_stats")
    t, planned = _schedule(root)
    out = CliRunner().invoke(cli, ["execute", str(root), *SKEW])
    assert out.exit_code == 0, out.stdout + out.stderr
    assert f"{t} clean: " in out.stdout and "completed" in out.stdout
    _check_consistent(root, tmp_path, t, planned, rows)
    # column_stats: a tombstone for every (deleted file, indexed column); together they cover
    # every entry the MDT held for the deleted files
    columns = column_stats_columns(storage, config.props)
    assert columns
    tombstones = dict(_mdt_cells(root, "column_stats", t))
    expected = {column_stats_key(c, p, n) for p, names in planned.items() for n in names for c in columns}
    assert set(tombstones) == expected
    assert all(r["ColumnStatsMetadata"]["isDeleted"] for r in tombstones.values())
    existing = {k for k, r in stats_before
                if r["ColumnStatsMetadata"]["fileName"] in {n for v in planned.values() for n in v}}
    assert existing and existing <= expected
    # partition_stats, record_index and secondary indexes get nothing from a clean
    mdt = root / METADATA_FOLDER
    for partition in config.metadata_partitions:
        if partition not in ("files", "column_stats"):
            assert not list((mdt / partition).glob(f".*_{t}.log.*")), partition
    # a second run finds the clean completed and changes nothing
    before = _files(root)
    again = CliRunner().invoke(cli, ["execute", str(root), "--instant", t, *SKEW])
    assert again.exit_code == 0 and "already completed" in again.stdout
    assert _files(root) == before


# ---------------------------------------------------------------------------- crashes


@pytest.mark.parametrize("fid,point", [
    (V9_MOR, "deletes-done"),
    (V9_MOR, "mdt-log-written"),
    (V9_MOR, "mdt-done"),
    (V8, "mdt-log-written"),
    (V9_NONPART, "mdt-done"),
])
def test_kill_9_around_the_mdt_commit(fid: str, point: str, hudi_table, tmp_path: Path) -> None:
    root = hudi_table(fid)
    rows = _hudi_rs(root, None)
    t, planned = _schedule(root)
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(PROJECT), HOODIED_TEST_PAUSE_AT=point,
               HOODIED_TEST_PAUSE_READY=str(ready), HOODIED_TEST_PAUSE_S="60")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hoodied.service.cli", "execute", str(root),
         *HEARTBEAT, *SKEW],
        env=env, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        _wait_ready(proc, ready)
        mdt_names = _mdt_instant_files(root, t)
        logs = [p.name for p in (root / METADATA_FOLDER).glob(f"*/.*_{t}.log.*")]
        if point == "deletes-done":
            assert mdt_names == [] and logs == []
        elif point == "mdt-log-written":
            assert mdt_names == [f"{t}.deltacommit.inflight", f"{t}.deltacommit.requested"]
            assert len(logs) == 1  # the first of its log files (files and column_stats)
        else:
            assert any(n.endswith(".deltacommit") and "_" in n for n in mdt_names)
        assert not any(n.endswith(".clean") for n in _data_instant_files(root, t))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # readers ignore the MDT commit of a clean that is not completed: the rows are unchanged
    assert _hudi_rs(root, None) == rows

    time.sleep(0.3)  # the dead executor's heartbeat expires
    rerun = CliRunner().invoke(cli, ["execute", str(root), *HEARTBEAT, *SKEW])
    assert rerun.exit_code == 0, rerun.stdout + rerun.stderr
    assert rerun.stdout.startswith(f"{t} clean: ")
    _check_consistent(root, tmp_path, t, planned, rows)
    # one log file per MDT file group written by T: the partial attempt's file was replaced
    logs = [p for p in (root / METADATA_FOLDER).glob(f"*/.*_{t}.log.*")]
    file_ids = [p.name[1:].split("_")[0] for p in logs]
    assert len(file_ids) == len(set(file_ids)) >= 2
    mdt = LocalStorage(str(root / METADATA_FOLDER))
    for p in logs:  # written once: the killed attempt's block was not kept next to the new one
        assert len(list(read_log_blocks(mdt, str(p.relative_to(mdt.local_path(""))))) ) == 1


# ---------------------------------------------------------------------------- refusals


def test_unmaintained_mdt_partition_is_refused(hudi_table) -> None:
    root = hudi_table(V9_COW)
    t, _ = _schedule(root)
    add_mdt_partition(root, "expr_index_city")
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    before = _files(root)
    with pytest.raises(UnsupportedTableError, match="MDT partition expr_index_city is not maintained"):
        execute_clean(storage, config, InProcessLock(storage.base_uri), t)
    out = CliRunner().invoke(cli, ["execute", str(root), *SKEW])
    assert out.exit_code == 5 and "expr_index_city" in out.stderr
    assert _files(root) == before
    inst = Timeline.load(storage, config).get(t)
    assert inst is not None and inst.state is State.REQUESTED


def test_other_refusals(hudi_table) -> None:
    root = hudi_table(V9_MOR)
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    require_clean_maintainable(storage, config, "clean")  # every partition of the fixture is maintained
    with pytest.raises(UnsupportedTableError, match="deletes partition region=eu"):
        require_clean_maintainable(storage, config, "clean", ["region=eu"])
    props = root / ".hoodie" / "hoodie.properties"
    key = "hoodie.table.metadata.partitions.inflight="
    props.write_text(props.read_text().replace(key, key + "bloom_filters"))
    with pytest.raises(UnsupportedTableError, match="bloom_filters is being built"):
        require_clean_maintainable(storage, load_table_config(storage), "clean")
    nometa = hudi_table("cow/v9_txns_simple_nometa")
    s2 = LocalStorage(str(nometa))
    require_clean_maintainable(s2, load_table_config(s2), "clean")


def test_bloom_filter_tombstones_for_base_files_only(hudi_table) -> None:
    root = hudi_table(V9_COW)
    add_mdt_partition(root, "bloom_filters")
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    base = "0a-0_0-1-1_20260101000000000.parquet"
    log = ".0a-0_20260101000000000.log.1_0-1-1"
    records = clean_records(storage, config, "20990101000000000", {"region=eu": [base, log], "region=us": []})
    assert [k for k, _ in records["files"]] == ["region=eu", "region=us"]
    assert records["files"][1][1]["filesystemMetadata"] == {}
    ((_, bloom),) = records["bloom_filters"]
    assert bloom["BloomFilterMetadata"] == {"type": "", "timestamp": "20990101000000000", "bloomFilter": b"",
                                           "isDeleted": True}
    columns = column_stats_columns(storage, config.props) or ()
    assert len(records["column_stats"]) == 2 * len(columns)
    stub = records["column_stats"][0][1]["ColumnStatsMetadata"]
    got = (stub["minValue"], stub["maxValue"], stub["valueCount"], stub["nullCount"], stub["isDeleted"])
    assert got == (None, None, -1, -1, True)
    assert stub["valueType"] == {"typeOrdinal": 1, "additionalInfo": None}
