"""Metadata-table compaction at record-index scale: time and peak memory of one MDT compaction.

Builds, under ``--workdir`` (reused when already built for the same key count), a metadata table
(table version 9) with one ``record_index`` file group: a base HFile of ``--keys`` entries (default
1,000,000) and ``--deltas`` delta commits (default 2), each a log file with an HFILE_DATA block
updating 10 % of the keys and a DELETE block removing 1 % (``tests/hoodie/metadata/
record_index_mdt.py``, hoodied's own writers). A pristine copy is kept; each run compacts a copy.

Then, each in a fresh Python process (so that its peak memory is its own):

* ``schedule_mdt_compaction`` + ``execute_mdt_compaction`` (the streaming merge and write):
  ``seconds`` and ``peak_rss_mb``; ``baseline_rss_mb`` is the same process's RSS just before
  (the interpreter and its imports), so ``peak_rss_mb - baseline_rss_mb`` is what the
  compaction added;
* the reference (unless ``--no-reference``): the whole-slice path the compaction used before,
  ``merge_file_slice`` + ``compacted_cells`` + ``encode_base_hfile`` over the same slice, written
  to a local file: ``reference_seconds``, ``reference_peak_rss_mb``; both write the same number
  of records (checked).

Memory is the process's peak resident set size, its own ``VmHWM`` (``/proc/self/status``), not
a Python-allocation count. (``getrusage``'s ``ru_maxrss`` would not do: Linux keeps it across
``execve``, so a child started by a parent that built a big table reports the parent's peak.)
It prints ONE JSON line::

    {"keys": ..., "seconds": ..., "peak_rss_mb": ..., "baseline_rss_mb": ...,
     "reference_seconds": ..., "reference_peak_rss_mb": ..., "ratio": ..., ...}

``ratio`` = seconds / reference_seconds.
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
    start = time.perf_counter()
    with lock:
        inst = schedule_mdt_compaction(writer, writer.new_instant_time())
        assert inst is not None, "nothing to compact"
        result = execute_mdt_compaction(writer, inst.requested_time, config.version)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
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
    start = time.perf_counter()
    merged = merge_file_slice(storage, timeline, slice_["base"], slice_["logs"])
    cells = compacted_cells(merged.entries, version, "reference.hfile")
    data = encode_base_hfile(cells, metadata_schema_json(version))
    with tempfile.NamedTemporaryFile(dir=table, suffix=".hfile") as f:
        f.write(data)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "records": len(cells), "baseline_rss_mb": baseline, "peak_rss_mb": _peak_mb()}


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
    parser.add_argument("--child", choices=("compact", "reference"), help=argparse.SUPPRESS)
    parser.add_argument("--table", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = _child_compact if args.child == "compact" else _child_reference
        print(json.dumps(run(args.table)))
        return

    args.workdir.mkdir(parents=True, exist_ok=True)
    pristine, build_seconds = _build(args.workdir, args.keys, args.deltas)
    table = args.workdir / "run"
    if table.exists():
        shutil.rmtree(table)
    shutil.copytree(pristine, table)
    ours = _run_child("compact", table)
    report: dict[str, Any] = {
        "keys": args.keys,
        "deltas": args.deltas,
        "records": ours["records"],
        "seconds": round(ours["seconds"], 2),
        "peak_rss_mb": round(ours["peak_rss_mb"], 1),
        "baseline_rss_mb": round(ours["baseline_rss_mb"], 1),
        "base_file_mb": round(ours["base_file_bytes"] / 2**20, 1),
        "build_seconds": round(build_seconds, 2),
        "memory": "VmHWM of the compacting process",
    }
    if not args.no_reference:
        ref = _run_child("reference", pristine)
        if ref["records"] != ours["records"]:
            raise SystemExit(f"record counts differ: streaming {ours['records']}, reference {ref['records']}")
        report.update(
            {
                "reference_seconds": round(ref["seconds"], 2),
                "reference_peak_rss_mb": round(ref["peak_rss_mb"], 1),
                "reference_baseline_rss_mb": round(ref["baseline_rss_mb"], 1),
                "ratio": round(ours["seconds"] / ref["seconds"], 3),
            }
        )
    shutil.rmtree(table)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
