"""Metadata-table compaction at record-index scale: time and peak memory, in the driver and as Spark tasks.

For each key count of ``--keys`` (default 1,000,000; a comma-separated list measures how the figures
scale), builds under ``--workdir`` (reused when already built) a metadata table (table version 9)
whose ``record_index`` partition has ``--file-groups`` file groups (default 4): together a base
HFile of that many entries and ``--deltas`` delta commits (default 2), each a log file per file
group with an HFILE_DATA block updating 10 % of the keys and a DELETE block removing 1 %
(``tests/hoodie/metadata/record_index_mdt.py``, hoodied's own writers). A pristine copy is kept;
each run compacts a copy.

Then, ``--repeats`` times (default 3), alternately, each in a fresh Python process (so that its
peak memory is its own):

* ``spark``: ``schedule_mdt_compaction`` + ``execute_mdt_compaction`` with
  ``executors.engine.SparkOperations`` on a local session (``--spark``, default ``local[2]``),
  one Spark task per MDT file group, as the executors run it. ``spark_seconds``; ``spark_cpu_seconds``
  over the process tree (the driver, Spark's JVM and its Python workers: ``_measure.tree_cpu``);
  ``spark_driver_peak_rss_mb``, the driver process's own ``VmHWM`` (``spark_driver_baseline_rss_mb``:
  its RSS once the session is up, before the step); ``spark_worker_peak_rss_mb``, the highest
  ``VmHWM`` among the session's Python worker processes at the end of the step (pyspark reuses
  its workers, so the ones that ran the tasks are still there); ``spark_jvm_peak_rss_mb``. The
  session is started, and its Python workers forked once by a job of empty tasks, before the
  step: the daemon keeps one session for all its jobs;
* ``driver``: the same compaction in the calling process, one file group after the other
  (``hoodie.tasks.run_in_process``, what callers without a Spark session get): ``driver_seconds``,
  ``driver_cpu_seconds`` (``getrusage(RUSAGE_SELF)``: the step starts no process),
  ``driver_peak_rss_mb``;
* the reference, for key counts up to ``--reference-max-keys`` (default 1,000,000; it holds a
  whole slice in memory): the whole-slice path the compaction used before, ``merge_file_slice`` +
  ``compacted_cells`` + ``encode_base_hfile`` of each slice in turn, written to a local file:
  ``reference_seconds``, ``reference_cpu_seconds``, ``reference_peak_rss_mb``.

All three write the same number of records (checked). Memory is a process's peak resident set
size, its own ``VmHWM`` (``/proc/<pid>/status``), not a Python-allocation count (``getrusage``'s
``ru_maxrss`` would not do: Linux keeps it across ``execve``). Each figure is the median over the
repeats, with its ``_range`` (lowest, highest); ``speedup`` = ``driver_seconds`` /
``spark_seconds`` of the same repeat (the parallelism across file groups), ``cpu_ratio`` = Spark
CPU / driver CPU (the cost of the engine). Across key counts: ``spark_driver_peak_spread`` (highest /
lowest driver peak - 1: the driver's memory does not depend on the number of keys) and
``spark_us_per_key`` for each count (linear time: constant microseconds per key). It prints ONE
JSON line::

    {"keys": [...], "file_groups": 4, "spark": "local[2]", "runs": [{"keys": ..., "spark_seconds": ...,
     "spark_driver_peak_rss_mb": ..., "driver_seconds": ..., "reference_seconds": ..., ...}, ...],
     "spark_driver_peak_spread": ..., "spark_us_per_key": [...], ...}

With ``--data-table`` it measures instead a data compaction and a clustering of a data table whose
metadata table has a record index of each key count (``_data_table``, all written by hoodied: a
merge-on-read table, version 9, of that many keys in 8 partitions and about 32 file groups, one
delta commit updating 10 % of the keys as log files on every file group, the MDT ``files``
partition as Hudi's ``initializeFromFilesystem`` writes it, then the ``record_index`` partition built
by ``executors.indexing.execute_indexing`` from an ``indexing`` instant; built once in a fresh process,
kept pristine under ``--workdir``). Then, ``--repeats`` times, each on a fresh copy and in a fresh
Python process on a session that is up as in ``spark``:

* ``compaction``: ``schedule_compaction`` (every file group with log files) +
  ``service.spark_jobs.run_compaction``, the MDT ``files`` partition kept up to date;
* ``clustering``: ``schedule_clustering`` (Hudi's size-based plan, default settings: every small
  file group of a partition into one) + ``run_spark_service``; the record index follows the moved
  keys (``MovedKeys``, its log files written by Spark tasks, one per record-index file group).

Each reports ``<op>_seconds``, ``<op>_cpu_seconds`` (process tree), ``<op>_driver_peak_rss_mb`` (the
driver's ``VmHWM``), ``<op>_driver_baseline_rss_mb``, ``<op>_worker_peak_rss_mb`` and
``<op>_jvm_peak_rss_mb``, measured as ``spark`` measures them (median and ``_range``). After each run
(not timed) the operation must have written every row, hudi-rs must read as many rows as before
and hoodied's MDT reader must find one record index entry per key, none naming a file group
outside the table's latest view, or the bench fails.
Per key count also ``file_groups``, ``updates``, ``build_seconds`` / ``indexing_seconds`` (of the
build, ``build_reused`` when an earlier run made it), ``compacted_file_groups``, ``clustered_file_groups`` and
``clustering_new_file_groups``; across key counts ``<op>_driver_peak_spread``, ``<op>_us_per_key``
and ``<op>_cpu_us_per_key``::

    {"mode": "data-table", "keys": [...], "repeats": 1, "spark": "local[2]", "runs": [{"keys": ...,
     "compaction_seconds": ..., "compaction_driver_peak_rss_mb": ..., "clustering_seconds": ...,
     "clustering_worker_peak_rss_mb": ..., ...}, ...], "compaction_driver_peak_spread": ...,
     "clustering_driver_peak_spread": ..., ...}

On a busy machine the CPU figures are the robust ones.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the generator lives with the tests

from _measure import descendants, median_range, self_cpu, tree_cpu  # noqa: E402

from hoodied.hoodie.properties import load_table_config  # noqa: E402
from hoodied.hoodie.storage import LocalStorage  # noqa: E402
from tests.hoodie.metadata.record_index_mdt import build_record_index_mdt  # noqa: E402

_EMPTY = pa.schema([("op", pa.int64())])


def _status_mb(field: str, pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def _peaks(kind: str) -> float:
    """The highest ``VmHWM`` (MB) among live descendants whose command name starts with ``kind``."""
    best = 0.0
    for pid, comm in descendants().items():
        if comm.startswith(kind):
            try:
                best = max(best, _status_mb("VmHWM", pid))
            except (OSError, RuntimeError):
                continue
    return best


def _build(workdir: Path, keys: int, deltas: int, groups: int) -> tuple[Path, float]:
    pristine = workdir / f"pristine-{keys}-{deltas}-{groups}"
    done = pristine / "slices.json"
    if done.exists():
        return pristine, 0.0
    if pristine.exists():
        shutil.rmtree(pristine)
    start = time.perf_counter()
    m = build_record_index_mdt(pristine, keys, deltas=deltas, file_groups=groups)
    seconds = time.perf_counter() - start
    done.write_text(json.dumps({"slices": m.slices, "version": m.table_version}))
    return pristine, seconds


def _noop(index: int, write_token: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"op": index}], schema=_EMPTY)


def _compact(table: Path, runner: Any) -> dict[str, Any]:
    from hoodied.hoodie.locks import InProcessLock
    from hoodied.hoodie.metadata.compaction import execute_mdt_compaction, schedule_mdt_compaction
    from hoodied.hoodie.timeline.writer import TimelineWriter

    storage = LocalStorage(str(table))
    config = load_table_config(storage, metadata_table=True)
    lock = InProcessLock(str(table))
    writer = TimelineWriter(storage, config, lock)
    with lock:
        inst = schedule_mdt_compaction(writer, writer.new_instant_time())
        assert inst is not None, "nothing to compact"
        result = execute_mdt_compaction(writer, inst.requested_time, config.version, runner=runner)
    return {"records": result.records, "base_file_bytes": sum(storage.size(p) for p in result.base_files),
            "base_files": len(result.base_files)}


def _child_driver(table: Path, master: str) -> dict[str, Any]:
    from hoodied.hoodie.tasks import run_in_process

    baseline = _status_mb("VmRSS")
    start, cpu0 = time.perf_counter(), self_cpu()
    out = _compact(table, run_in_process)
    seconds, cpu = time.perf_counter() - start, self_cpu() - cpu0
    return {**out, "seconds": seconds, "cpu_seconds": cpu, "baseline_rss_mb": baseline,
            "peak_rss_mb": _status_mb("VmHWM")}


def _child_spark(table: Path, master: str) -> dict[str, Any]:
    from hoodied.executors.engine import SparkOperations, run_operations, spark_session

    with spark_session(master) as session:
        run_operations(session, 4, _noop, _EMPTY)  # the Python workers are up, as in a running daemon
        baseline = _status_mb("VmRSS")
        start, cpu0 = time.perf_counter(), tree_cpu()
        out = _compact(table, SparkOperations(session))
        seconds, cpu = time.perf_counter() - start, tree_cpu() - cpu0
        workers, jvm = _peaks("python"), _peaks("java")
    return {**out, "seconds": seconds, "cpu_seconds": cpu, "baseline_rss_mb": baseline,
            "peak_rss_mb": _status_mb("VmHWM"), "worker_peak_rss_mb": workers, "jvm_peak_rss_mb": jvm}


def _child_reference(table: Path, master: str) -> dict[str, Any]:
    from hoodied.hoodie.hfile.writer import encode_base_hfile
    from hoodied.hoodie.metadata.encode import metadata_schema_json
    from hoodied.hoodie.metadata.merge import compacted_cells, merge_file_slice
    from hoodied.hoodie.timeline.active import Timeline

    built = json.loads((table / "slices.json").read_text())
    storage = LocalStorage(str(table))
    config = load_table_config(storage, metadata_table=True)
    timeline = Timeline.load(storage, config)
    version = built["version"]
    baseline = _status_mb("VmRSS")
    start, cpu0 = time.perf_counter(), self_cpu()
    records = 0
    for base, logs in built["slices"]:
        merged = merge_file_slice(storage, timeline, base, logs)
        cells = compacted_cells(merged.entries, version, "reference.hfile")
        data = encode_base_hfile(cells, metadata_schema_json(version))
        with tempfile.NamedTemporaryFile(dir=table, suffix=".hfile") as f:
            f.write(data)
        records += len(cells)
        del merged, cells, data
    seconds, cpu = time.perf_counter() - start, self_cpu() - cpu0
    return {"seconds": seconds, "cpu_seconds": cpu, "records": records, "baseline_rss_mb": baseline,
            "peak_rss_mb": _status_mb("VmHWM")}


def _child_data_build(table: Path, master: str, keys: int) -> dict[str, Any]:
    from _data_table import build_data_table, hudi_rs_rows, record_index_check

    from hoodied.executors.engine import spark_session

    with spark_session(master) as session:
        built = build_data_table(table, keys, session)
    return {**built, "rows": hudi_rs_rows(table), **record_index_check(table)}


def _child_data_operation(operation: str, table: Path, master: str) -> dict[str, Any]:
    """A data-table compaction or clustering on a session that is up, measured as ``_child_spark``."""
    from _data_table import cluster_table, compact_table

    from hoodied.executors.engine import run_operations, spark_session

    run = compact_table if operation == "compaction" else cluster_table
    with spark_session(master) as session:
        run_operations(session, 4, _noop, _EMPTY)  # the Python workers are up, as in a running daemon
        baseline = _status_mb("VmRSS")
        start, cpu0 = time.perf_counter(), tree_cpu()
        out = run(table, session)
        seconds, cpu = time.perf_counter() - start, tree_cpu() - cpu0
        workers, jvm = _peaks("python"), _peaks("java")
    return {**out, "seconds": seconds, "cpu_seconds": cpu, "baseline_rss_mb": baseline,
            "peak_rss_mb": _status_mb("VmHWM"), "worker_peak_rss_mb": workers, "jvm_peak_rss_mb": jvm}


def _child_data_compaction(table: Path, master: str) -> dict[str, Any]:
    return _child_data_operation("compaction", table, master)


def _child_data_clustering(table: Path, master: str) -> dict[str, Any]:
    return _child_data_operation("clustering", table, master)


_CHILDREN = {"driver": _child_driver, "spark": _child_spark, "reference": _child_reference,
             "data-compaction": _child_data_compaction, "data-clustering": _child_data_clustering}


def _run_child(mode: str, table: Path, master: str, *extra: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--table", str(table), "--spark", master, *extra],
        check=False, capture_output=True, text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"{mode} run failed ({out.returncode}): {out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _measure_keys(args: argparse.Namespace, keys: int) -> dict[str, Any]:
    pristine, build_seconds = _build(args.workdir, keys, args.deltas, args.file_groups)
    table = args.workdir / "run"
    runs: dict[str, list[dict[str, Any]]] = {"spark": [], "driver": [], "reference": []}
    modes = ["spark", "driver"] if not args.no_driver else ["spark"]
    with_reference = not args.no_reference and keys <= args.reference_max_keys
    for _ in range(args.repeats):
        for mode in modes:
            if table.exists():
                shutil.rmtree(table)
            shutil.copytree(pristine, table)
            runs[mode].append(_run_child(mode, table, args.spark))
        if with_reference:
            runs["reference"].append(_run_child("reference", pristine, args.spark))
    records = runs["spark"][0]["records"]
    for mode, done in runs.items():
        if any(r["records"] != records for r in done):
            raise SystemExit(f"record counts differ: spark {records}, {mode} {[r['records'] for r in done]}")
    report: dict[str, Any] = {"keys": keys, "records": records, "base_files": runs["spark"][0]["base_files"]}
    spark = runs["spark"]
    median_range(report, "spark_seconds", [r["seconds"] for r in spark])
    median_range(report, "spark_cpu_seconds", [r["cpu_seconds"] for r in spark])
    median_range(report, "spark_driver_peak_rss_mb", [r["peak_rss_mb"] for r in spark], 1)
    median_range(report, "spark_driver_baseline_rss_mb", [r["baseline_rss_mb"] for r in spark], 1)
    median_range(report, "spark_worker_peak_rss_mb", [r["worker_peak_rss_mb"] for r in spark], 1)
    median_range(report, "spark_jvm_peak_rss_mb", [r["jvm_peak_rss_mb"] for r in spark], 1)
    for mode in ("driver", "reference"):
        done = runs[mode]
        if not done:
            continue
        median_range(report, f"{mode}_seconds", [r["seconds"] for r in done])
        median_range(report, f"{mode}_cpu_seconds", [r["cpu_seconds"] for r in done])
        median_range(report, f"{mode}_peak_rss_mb", [r["peak_rss_mb"] for r in done], 1)
    if runs["driver"]:
        pairs = list(zip(runs["driver"], spark, strict=True))
        median_range(report, "speedup", [d["seconds"] / s["seconds"] for d, s in pairs])
        median_range(report, "cpu_ratio", [s["cpu_seconds"] / d["cpu_seconds"] for d, s in pairs])
    report.update(base_file_mb=round(spark[0]["base_file_bytes"] / 2**20, 1),
                  build_seconds=round(build_seconds, 2))
    shutil.rmtree(table, ignore_errors=True)
    return report


_DATA_OPERATIONS = ("compaction", "clustering")


def _build_data(workdir: Path, keys: int, master: str) -> tuple[Path, dict[str, Any]]:
    """The pristine data table of ``keys`` keys (reused when built), with its build report."""
    pristine = workdir / f"data-pristine-{keys}"
    done = workdir / f"data-pristine-{keys}.json"
    if done.exists() and pristine.exists():
        return pristine, {**json.loads(done.read_text()), "reused": True}
    shutil.rmtree(pristine, ignore_errors=True)
    built = _run_child("data-build", pristine, master, "--keys", str(keys))
    if built["rows"] != keys or built["record_index_keys"] != keys or built["record_index_stale"]:
        raise SystemExit(f"built table is wrong: {built}")
    done.write_text(json.dumps(built))
    return pristine, {**built, "reused": False}


def _measure_data_keys(args: argparse.Namespace, keys: int) -> dict[str, Any]:
    from _data_table import hudi_rs_rows, record_index_check

    pristine, built = _build_data(args.workdir, keys, args.spark)
    table = args.workdir / "data-run"
    runs: dict[str, list[dict[str, Any]]] = {op: [] for op in _DATA_OPERATIONS}
    for _ in range(args.repeats):
        for op in _DATA_OPERATIONS:
            if table.exists():
                shutil.rmtree(table)
            shutil.copytree(pristine, table)
            out = _run_child(f"data-{op}", table, args.spark)
            rows, index = hudi_rs_rows(table), record_index_check(table)  # checks, not timed
            if (rows != built["rows"] or out["rows_written"] != rows or index["record_index_keys"] != keys
                    or index["record_index_stale"]):
                raise SystemExit(f"{op} at {keys} keys: hudi-rs reads {rows} rows (before: {built['rows']}), "
                                 f"{out['rows_written']} written, record index {index} "
                                 f"(expected {keys} keys, none stale)")
            runs[op].append(out)
    report: dict[str, Any] = {
        "keys": keys, "rows": built["rows"], "file_groups": built["file_groups"], "updates": built["updates"],
        "build_seconds": built["build_seconds"], "indexing_seconds": built["indexing_seconds"],
        "build_reused": built["reused"],
        "compacted_file_groups": runs["compaction"][0]["file_groups"],
        "clustered_file_groups": runs["clustering"][0]["replaced_file_groups"],
        "clustering_new_file_groups": runs["clustering"][0]["file_groups"],
    }
    for op, done in runs.items():
        median_range(report, f"{op}_seconds", [r["seconds"] for r in done])
        median_range(report, f"{op}_cpu_seconds", [r["cpu_seconds"] for r in done])
        median_range(report, f"{op}_driver_peak_rss_mb", [r["peak_rss_mb"] for r in done], 1)
        median_range(report, f"{op}_driver_baseline_rss_mb", [r["baseline_rss_mb"] for r in done], 1)
        median_range(report, f"{op}_worker_peak_rss_mb", [r["worker_peak_rss_mb"] for r in done], 1)
        median_range(report, f"{op}_jvm_peak_rss_mb", [r["jvm_peak_rss_mb"] for r in done], 1)
    shutil.rmtree(table, ignore_errors=True)
    return report


def _data_report(args: argparse.Namespace, key_counts: list[int]) -> dict[str, Any]:
    runs = [_measure_data_keys(args, keys) for keys in key_counts]
    report: dict[str, Any] = {"mode": "data-table", "keys": key_counts, "repeats": args.repeats,
                              "spark": args.spark, "runs": runs}
    for op in _DATA_OPERATIONS:
        peaks = [r[f"{op}_driver_peak_rss_mb"] for r in runs]
        report[f"{op}_driver_peak_spread"] = round(max(peaks) / min(peaks) - 1, 3)
        report[f"{op}_us_per_key"] = [round(r[f"{op}_seconds"] / r["keys"] * 1e6, 2) for r in runs]
        report[f"{op}_cpu_us_per_key"] = [round(r[f"{op}_cpu_seconds"] / r["keys"] * 1e6, 2) for r in runs]
    report.update(memory="VmHWM of each process (driver, Spark Python workers, JVM)",
                  cpu="the process tree (tree_cpu)")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--keys", default="1000000", help="key counts, comma-separated (default 1000000)")
    parser.add_argument("--deltas", type=int, default=2)
    parser.add_argument("--file-groups", type=int, default=4)
    parser.add_argument("--spark", default="local[2]", help="the Spark master of the spark runs")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "hoodied-mdt-scale")
    parser.add_argument("--no-reference", action="store_true", help="skip the whole-slice reference")
    parser.add_argument("--reference-max-keys", type=int, default=1_000_000,
                        help="run the whole-slice reference only up to this many keys")
    parser.add_argument("--no-driver", action="store_true", help="skip the in-process (driver) runs")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (default 3); medians and ranges")
    parser.add_argument("--data-table", action="store_true",
                        help="measure a compaction and a clustering of a data table with a record index")
    parser.add_argument("--child", choices=sorted([*_CHILDREN, "data-build"]), help=argparse.SUPPRESS)
    parser.add_argument("--table", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "data-build":
        print(json.dumps(_child_data_build(args.table, args.spark, int(args.keys))))
        return
    if args.child:
        print(json.dumps(_CHILDREN[args.child](args.table, args.spark)))
        return
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    key_counts = [int(k) for k in args.keys.split(",") if k.strip()]
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.data_table:
        print(json.dumps(_data_report(args, key_counts)))
        return
    runs = [_measure_keys(args, keys) for keys in key_counts]
    peaks = [r["spark_driver_peak_rss_mb"] for r in runs]
    report: dict[str, Any] = {
        "keys": key_counts,
        "file_groups": args.file_groups,
        "deltas": args.deltas,
        "repeats": args.repeats,
        "spark": args.spark,
        "runs": runs,
        "spark_driver_peak_spread": round(max(peaks) / min(peaks) - 1, 3),
        "spark_us_per_key": [round(r["spark_seconds"] / r["keys"] * 1e6, 2) for r in runs],
        "spark_cpu_us_per_key": [round(r["spark_cpu_seconds"] / r["keys"] * 1e6, 2) for r in runs],
        "memory": "VmHWM of each process (driver, Spark Python workers, JVM)",
        "cpu": "spark: the process tree (tree_cpu); driver and reference: getrusage(RUSAGE_SELF)",
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
