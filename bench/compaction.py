"""Compaction benchmark: hoodied's compaction on local Spark against hudi-rs read + pyarrow write.

Builds, under ``--workdir`` (reused when already built for the same row count):

* a merge-on-read table of ``--rows`` rows (default 2,000,000; table version 9, 8 partitions,
  at least 8 file groups) plus one delta commit updating 20 % of the rows and deleting 2 %
  (Avro data blocks and delete blocks in log files). A pristine copy is kept, and each run
  compacts a fresh copy of it;
* two one-file-group tables for the memory figures: a base file of the size of one file group
  of the main table and one 4x as large, both with the same log file (the same updates and
  deletes, all on keys of the smaller base file).

Then, in one run, it

* starts a local Spark session (``executors.engine.spark_session('local')``) and runs one
  trivial ``mapInArrow`` job so the Python workers are up: ``spark_startup_seconds``;
* schedules (``planners.compaction.schedule_compaction``, unbounded strategy) and executes
  (``service.cli.schedule.run_compaction``) the compaction: ``seconds``;
* times the reference on the same (pre-compaction) table: a hudi-rs snapshot read
  (``HudiTable.read()``) plus a pyarrow parquet write of the same rows with the same
  compression (``hoodie.basefile.DEFAULT_COMPRESSION``): ``reference_seconds``;
* checks that hudi-rs reads the same rows after the compaction (count and checksums);
* measures the peak RSS of one compaction task (``executors.compaction.compact_operation`` of
  the single file group, run in a fresh Python process; that process's own ``VmHWM``) over the
  small and the 4x base file: ``peak_rss_mb`` and ``peak_rss_mb_4x``.

It prints ONE JSON line::

    {"rows": ..., "seconds": ..., "reference_seconds": ..., "ratio": ...,
     "spark_startup_seconds": ..., "peak_rss_mb": ..., "peak_rss_mb_4x": ..., ...}

``ratio`` = hoodied seconds / reference seconds (lower is better).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from read_bench import SCHEMA, generate  # (the same generated rows as the read benchmark)

from hoodied.hoodie.basefile import DEFAULT_COMPRESSION
from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import TableType
from hoodied.hoodie.storage import LocalStorage
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction

EVERYTHING = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
UPDATE_FRACTION = 0.20
DELETE_FRACTION = 0.02


def _changes(rows: int, keyspace: int, city: str | None) -> tuple[pa.Table, pa.Table]:
    """20 % of ``rows`` updated and 2 % deleted, all keys below ``keyspace``."""
    rng = np.random.default_rng(7)
    upd = np.sort(rng.choice(keyspace, size=int(rows * UPDATE_FRACTION), replace=False))
    updates = generate(keyspace, ts=2, seed=3, city=city).take(pa.array(upd))
    rest = np.setdiff1d(np.arange(keyspace), upd)
    gone = np.sort(rng.choice(rest, size=int(rows * DELETE_FRACTION), replace=False))
    deletes = generate(keyspace, city=city).take(pa.array(gone)).select(["id", "city"])
    return updates, deletes


def _build(
    path: Path, rows: int, *, change_rows: int | None = None, one_group: bool = False
) -> dict[str, Any]:
    """A MOR table of ``rows`` rows and one delta commit (updates and deletes of ``change_rows``' keys)."""
    marker = path / ".bench-built"
    if marker.exists() and json.loads(marker.read_text()).get("rows") == rows:
        return json.loads(marker.read_text())
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    t0 = time.perf_counter()
    spec = TableSpec(path.name, SCHEMA, "id", "city", "ts", TableType.MERGE_ON_READ, 9)
    kwargs = {"max_file_rows": rows} if one_group else {}
    writer = create_table(LocalStorage(str(path)), spec, **kwargs)
    city = "ams" if one_group else None
    writer.upsert(generate(rows, city=city))
    change_rows = change_rows or rows
    updates, deletes = _changes(change_rows, change_rows, city)
    result = writer.upsert(updates, deletes=deletes)
    info: dict[str, Any] = {
        "rows": rows,
        "updates": result.num_updates,
        "deletes": result.num_deletes,
        "expected_rows": rows - result.num_deletes,
        "file_groups": len(list(writer.file_groups())),
        "build_seconds": round(time.perf_counter() - t0, 3),
    }
    marker.write_text(json.dumps(info))
    return info


def _fresh_copy(pristine: Path, target: Path) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(pristine, target)
    return target


def _hudi_rs_table(path: Path) -> pa.Table:
    import hudi

    batches = hudi.HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches) if batches else SCHEMA.empty_table()


def _checksum(table: pa.Table) -> dict[str, Any]:
    """Cheap content summary: count, key/ts/fare sums and the commit times seen."""
    keys = pc.cast(pc.utf8_slice_codeunits(table.column("id"), 4), pa.int64())
    return {
        "count": table.num_rows,
        "key_sum": pc.sum(keys).as_py(),
        "ts_sum": pc.sum(table.column("ts")).as_py(),
        "fare_sum": round(pc.sum(table.column("fare")).as_py() or 0.0, 2),
        "distance_sum": round(pc.sum(table.column("distance")).as_py() or 0.0, 4),
        "commit_times": sorted(pc.unique(table.column("_hoodie_commit_time")).to_pylist()),
    }


def reference(path: Path, out_dir: Path) -> tuple[float, pa.Table]:
    """hudi-rs snapshot read + pyarrow write of the rows (one file per partition, same compression)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    table = _hudi_rs_table(path)
    partitions = table.column("_hoodie_partition_path")
    for i, part in enumerate(pc.unique(partitions).to_pylist()):
        rows = table.filter(pc.equal(partitions, part))
        pq.write_table(rows, out_dir / f"part-{i}.parquet", compression=DEFAULT_COMPRESSION)
    return time.perf_counter() - t0, table


def _warm_up(session: Any) -> None:
    """One trivial job: starts the Python workers (counted as Spark start-up)."""

    def identity(batches: Any) -> Any:
        yield from batches

    session.range(0, 2, 1, numPartitions=2).mapInArrow(identity, "id bigint").toArrow()


def compact(path: Path, session: Any) -> tuple[float, float, int]:
    from hoodied.service.spark_jobs import run_compaction

    storage = LocalStorage(str(path))
    lock = InProcessLock(storage.base_uri)
    t0 = time.perf_counter()
    inst, plan = schedule_compaction(storage, lock, EVERYTHING)
    assert inst is not None, plan.reason
    scheduled = time.perf_counter()
    result = run_compaction(storage, lock, inst.requested_time, session)
    done = time.perf_counter()
    return scheduled - t0, done - scheduled, len(result.write_stats)


_TASK = """
import time
from hoodied.executors.compaction import compact_operation, prepare_job
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline

def hwm_kb():  # VmHWM, not ru_maxrss: that one carries the forking parent's peak over exec
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

storage = LocalStorage({path!r})
config = load_table_config(storage)
timeline = Timeline.load(storage, config)
inst = timeline.get({instant!r})
job, _ = prepare_job(storage, config, timeline, inst, timeline.plan(inst))
before = hwm_kb()
t0 = time.perf_counter()
for i in range(len(job.slices)):
    compact_operation(job, i, "0-0-0")
print(before, hwm_kb(), time.perf_counter() - t0)
"""


def task_peak_rss_mb(pristine: Path, scratch: Path) -> tuple[float, float, float]:
    """Peak RSS (MB) of a fresh process running the compaction task of a one-group table.

    Returns (peak RSS, RSS after imports and planning, task seconds).
    """
    path = _fresh_copy(pristine, scratch)
    storage = LocalStorage(str(path))
    inst, plan = schedule_compaction(storage, InProcessLock(storage.base_uri), EVERYTHING)
    assert inst is not None, plan.reason
    code = _TASK.format(path=str(path), instant=inst.requested_time)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compaction task failed:\n{proc.stderr}")
    # The child's own VmHWM: RUSAGE_CHILDREN here would also count the Spark JVM.
    baseline, peak, seconds = proc.stdout.split()
    shutil.rmtree(path, ignore_errors=True)
    return int(peak) / 1024, int(baseline) / 1024, float(seconds)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the table (default 2,000,000)")
    parser.add_argument("--workdir", default=None, help="where to build the tables (kept and reused)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    workdir = Path(args.workdir or os.path.join(tempfile.gettempdir(), "hoodied-compaction-bench"))
    workdir.mkdir(parents=True, exist_ok=True)

    pristine = workdir / f"mor_{args.rows}"
    info = _build(pristine, args.rows)
    if info["file_groups"] < 8:
        raise SystemExit(f"{pristine}: {info['file_groups']} file groups, need at least 8 (more --rows)")
    group_rows = max(1, args.rows // info["file_groups"])
    small = _build(workdir / f"one_{group_rows}", group_rows, one_group=True)
    large = _build(workdir / f"one_{group_rows * 4}", group_rows * 4, change_rows=group_rows, one_group=True)

    result: dict[str, Any] = {"rows": info["expected_rows"]}

    ref_s, before = reference(pristine, workdir / "reference-out")
    expected = _checksum(before)
    del before
    assert expected["count"] == info["expected_rows"], (expected["count"], info["expected_rows"])

    from hoodied.executors.engine import spark_session

    target = _fresh_copy(pristine, workdir / "compacted")
    t0 = time.perf_counter()
    with spark_session("local") as session:
        _warm_up(session)
        startup = time.perf_counter() - t0
        schedule_s, execute_s, groups = compact(target, session)
    seconds = schedule_s + execute_s

    after = _checksum(_hudi_rs_table(target))
    commit_times = after.pop("commit_times")
    expected_times = expected.pop("commit_times")
    assert after == expected, f"hudi-rs reads different rows after the compaction: {after} != {expected}"
    assert commit_times == expected_times, (commit_times, expected_times)

    peak, baseline, task_s = task_peak_rss_mb(workdir / f"one_{small['rows']}", workdir / "rss-scratch")
    peak_4x, baseline_4x, task_4x_s = task_peak_rss_mb(
        workdir / f"one_{large['rows']}", workdir / "rss-scratch"
    )

    result.update(
        seconds=round(seconds, 3),
        reference_seconds=round(ref_s, 3),
        ratio=round(seconds / ref_s, 3) if ref_s > 0 else None,
        spark_startup_seconds=round(startup, 3),
        peak_rss_mb=round(peak, 1),
        peak_rss_mb_4x=round(peak_4x, 1),
        file_groups=groups,
        updates=info["updates"],
        deletes=info["deletes"],
        schedule_seconds=round(schedule_s, 3),
        execute_seconds=round(execute_s, 3),
        task_base_rows=[small["rows"], large["rows"]],
        task_rss_baseline_mb=[round(baseline, 1), round(baseline_4x, 1)],
        task_seconds=[round(task_s, 3), round(task_4x_s, 3)],
        compression=DEFAULT_COMPRESSION,
        cores=os.cpu_count(),
        build_seconds=info["build_seconds"],
    )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
