"""Metadata-table compaction at record-index scale: time and peak memory of one MDT compaction.

Builds, under ``--workdir`` (reused when already built for the same key count), a metadata table
(table version 9) with one ``record_index`` file group: a base HFile of ``--keys`` entries (default
1,000,000) and ``--deltas`` delta commits (default 2), each a log file with an HFILE_DATA block
updating 10 % of the keys and a DELETE block removing 1 % (``tests/hoodie/metadata/
record_index_mdt.py``, hoodied's own writers). A pristine copy is kept; each run compacts a copy.

Then, ``--repeats`` times (default 3), alternately, each in a fresh Python process (so that its
peak memory is its own):

* ``schedule_mdt_compaction`` + ``execute_mdt_compaction`` (the streaming merge and write) of a
  fresh copy: ``seconds``, ``cpu_seconds`` and ``peak_rss_mb``; ``baseline_rss_mb`` is the same
  process's RSS just before (the interpreter and its imports), so ``peak_rss_mb -
  baseline_rss_mb`` is what the compaction added;
* the reference (unless ``--no-reference``): the whole-slice path the compaction used before,
  ``merge_file_slice`` + ``compacted_cells`` + ``encode_base_hfile`` over the same slice, written
  to a local file: ``reference_seconds``, ``reference_cpu_seconds``, ``reference_peak_rss_mb``;
  both write the same number of records (checked).

CPU seconds are the measured process's own (``getrusage(RUSAGE_SELF)`` around the step, every
thread; the step starts no process). Memory is the process's peak resident set size, its own
``VmHWM`` (``/proc/self/status``), not a Python-allocation count. (``getrusage``'s
``ru_maxrss`` would not do: Linux keeps it across ``execve``, so a child started by a parent
that built a big table reports the parent's peak.) It prints ONE JSON line::

    {"keys": ..., "repeats": 3, "seconds": ..., "seconds_range": [lo, hi], "cpu_seconds": ...,
     "peak_rss_mb": ..., "baseline_rss_mb": ..., "reference_seconds": ...,
     "reference_cpu_seconds": ..., "reference_peak_rss_mb": ..., "ratio": ..., "cpu_ratio": ..., ...}

Each figure is the median over the repeats, with its ``_range`` (lowest, highest); ``ratio`` /
``cpu_ratio`` = streaming / whole-slice of the same repeat. On a busy machine the CPU figures are
the robust ones.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the generator lives with the tests

from _measure import Runs, figures, median_range, self_cpu  # noqa: E402

from hoodied.hoodie.properties import load_table_config  # noqa: E402
from hoodied.hoodie.storage import LocalStorage  # noqa: E402
from tests.hoodie.metadata.record_index_mdt import build_record_index_mdt  # noqa: E402


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def _rss_mb() -> float:
    return _status_mb("VmRSS")


def _peak_mb() -> float:
    return _status_mb("VmHWM")


def _build(workdir: Path, keys: int, deltas: int) -> tuple[Path, float]:
    pristine = workdir / f"pristine-{keys}-{deltas}"
    done = pristine / "slice.json"
    if done.exists():
        return pristine, 0.0
    if pristine.exists():
        shutil.rmtree(pristine)
    start = time.perf_counter()
    m = build_record_index_mdt(pristine, keys, deltas=deltas)
    seconds = time.perf_counter() - start
    done.write_text(json.dumps({"base": m.base_file, "logs": m.log_files, "version": m.table_version}))
    return pristine, seconds


def _child_compact(table: Path) -> dict[str, Any]:
    from hoodied.hoodie.locks import InProcessLock
    from hoodied.hoodie.metadata.compaction import execute_mdt_compaction, schedule_mdt_compaction
    from hoodied.hoodie.timeline.writer import TimelineWriter

    storage = LocalStorage(str(table))
    config = load_table_config(storage, metadata_table=True)
    lock = InProcessLock(str(table))
    writer = TimelineWriter(storage, config, lock)
    baseline = _rss_mb()
    start, cpu0 = time.perf_counter(), self_cpu()
    with lock:
        inst = schedule_mdt_compaction(writer, writer.new_instant_time())
        assert inst is not None, "nothing to compact"
        result = execute_mdt_compaction(writer, inst.requested_time, config.version)
    seconds, cpu = time.perf_counter() - start, self_cpu() - cpu0
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "records": result.records,
        "baseline_rss_mb": baseline,
        "peak_rss_mb": _peak_mb(),
        "base_file_bytes": storage.size(result.base_files[0]),
    }


def _child_reference(table: Path) -> dict[str, Any]:
    from hoodied.hoodie.hfile.writer import encode_base_hfile
    from hoodied.hoodie.metadata.encode import metadata_schema_json
    from hoodied.hoodie.metadata.merge import compacted_cells, merge_file_slice
    from hoodied.hoodie.timeline.active import Timeline

    slice_ = json.loads((table / "slice.json").read_text())
    storage = LocalStorage(str(table))
    config = load_table_config(storage, metadata_table=True)
    timeline = Timeline.load(storage, config)
    version = slice_["version"]
    baseline = _rss_mb()
    start, cpu0 = time.perf_counter(), self_cpu()
    merged = merge_file_slice(storage, timeline, slice_["base"], slice_["logs"])
    cells = compacted_cells(merged.entries, version, "reference.hfile")
    data = encode_base_hfile(cells, metadata_schema_json(version))
    with tempfile.NamedTemporaryFile(dir=table, suffix=".hfile") as f:
        f.write(data)
    seconds, cpu = time.perf_counter() - start, self_cpu() - cpu0
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "records": len(cells),
        "baseline_rss_mb": baseline,
        "peak_rss_mb": _peak_mb(),
    }


def _run_child(mode: str, table: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--table", str(table)],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--deltas", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "hoodied-mdt-scale")
    parser.add_argument("--no-reference", action="store_true", help="skip the whole-slice reference")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (default 3); medians and ranges")
    parser.add_argument("--child", choices=("compact", "reference"), help=argparse.SUPPRESS)
    parser.add_argument("--table", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = _child_compact if args.child == "compact" else _child_reference
        print(json.dumps(run(args.table)))
        return
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    args.workdir.mkdir(parents=True, exist_ok=True)
    pristine, build_seconds = _build(args.workdir, args.keys, args.deltas)
    table = args.workdir / "run"
    ours_runs, ref_runs = Runs(), Runs()
    ours: list[dict[str, Any]] = []
    refs: list[dict[str, Any]] = []
    for _ in range(args.repeats):
        if table.exists():
            shutil.rmtree(table)
        shutil.copytree(pristine, table)
        ours.append(_run_child("compact", table))
        ours_runs.wall.append(ours[-1]["seconds"])
        ours_runs.cpu.append(ours[-1]["cpu_seconds"])
        if not args.no_reference:
            refs.append(_run_child("reference", pristine))
            if refs[-1]["records"] != ours[-1]["records"]:
                raise SystemExit(
                    f"record counts differ: streaming {ours[-1]['records']}, reference {refs[-1]['records']}"
                )
            ref_runs.wall.append(refs[-1]["seconds"])
            ref_runs.cpu.append(refs[-1]["cpu_seconds"])
    report: dict[str, Any] = {
        "keys": args.keys,
        "deltas": args.deltas,
        "repeats": args.repeats,
        "records": ours[0]["records"],
    }
    if refs:
        figures(report, "", ours_runs, ref_runs)
        median_range(report, "reference_peak_rss_mb", [r["peak_rss_mb"] for r in refs], 1)
        median_range(report, "reference_baseline_rss_mb", [r["baseline_rss_mb"] for r in refs], 1)
    else:
        median_range(report, "seconds", ours_runs.wall)
        median_range(report, "cpu_seconds", ours_runs.cpu)
    median_range(report, "peak_rss_mb", [r["peak_rss_mb"] for r in ours], 1)
    median_range(report, "baseline_rss_mb", [r["baseline_rss_mb"] for r in ours], 1)
    report.update(
        base_file_mb=round(ours[0]["base_file_bytes"] / 2**20, 1),
        build_seconds=round(build_seconds, 2),
        memory="VmHWM of the compacting process",
        cpu="getrusage(RUSAGE_SELF) of the measured process around the step",
    )
    shutil.rmtree(table)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
