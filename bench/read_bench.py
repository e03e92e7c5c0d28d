"""Read benchmark: hoodied's snapshot read against hudi-rs on the same tables, and timeline load.

Builds, under ``--workdir`` (reused when already built for the same row count):

* a copy-on-write table of ``--rows`` rows (default 1,000,000; table version 9, 8 partitions);
* a merge-on-read table of the same rows plus one delta commit updating 10 % of them and
  deleting 1 % (Avro data blocks and delete blocks in log files);
* a table whose timeline holds 10,000 completed instants.

Rows are generated with vectorised pyarrow/numpy and written by ``hoodie.demo.writer``. Then, in
one run, it times hoodied's snapshot read (``HoodieTable.open(...).read_snapshot()``, every
batch consumed) and hudi-rs's (``HudiTable.read()``) of each table, and ``Timeline.load`` of
the 10,000-instant timeline against hudi-rs's timeline load, and prints ONE JSON line::

    {"repeat": 5, "rows": ..., "seconds": ..., "seconds_range": [min, max],
     "cpu_seconds": ..., "cpu_seconds_range": [...], "reference_seconds": ...,
     "reference_cpu_seconds": ..., "ratio": ..., "ratio_range": [...], "cpu_ratio": ...,
     "cpu_ratio_range": [...], "mor_rows": ..., "mor_seconds": ..., (the same with ``mor_``),
     "timeline_instants": 10000, "timeline_seconds": ..., "timeline_cpu_seconds": ..., ...}

Each read runs ``--repeat`` times (default 5) after one untimed warm-up, hoodied and hudi-rs
alternately, so both see the same load. Every figure is the median of the runs, and its
``_range`` the lowest and highest. ``seconds`` is wall time; ``cpu_seconds`` the process's
CPU time (user + system, ``getrusage``: every thread, pyarrow's and hudi-rs's included),
which a busy machine moves far less than wall time. ``ratio`` / ``cpu_ratio`` = hoodied /
hudi-rs of the same repeat (lower is better; < 1 means hoodied is faster), median and range
over the repeats.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _measure
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from _measure import figures, self_cpu

from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("ts", pa.int64()),
        ("rider", pa.string()),
        ("fare", pa.float64()),
        ("distance", pa.float64()),
        ("city", pa.string()),
    ]
)
CITIES = np.array(["ams", "ber", "chn", "lon", "nyc", "par", "sao", "sfo"])
TIMELINE_INSTANTS = 10_000


def generate(n: int, *, start: int = 0, ts: int = 1, seed: int = 1, city: str | None = None) -> pa.Table:
    """``n`` rows with keys ``key-<start..start+n>``, vectorised (no per-row Python)."""
    rng = np.random.default_rng(seed)
    idx = np.arange(start, start + n, dtype=np.int64)
    ids = pc.binary_join_element_wise("key-", pc.utf8_lpad(pc.cast(pa.array(idx), pa.string()), 10, "0"), "")
    riders = pc.binary_join_element_wise(
        "rider-", pc.cast(pa.array(rng.integers(0, 5000, n)), pa.string()), ""
    )
    return pa.table(
        {
            "id": ids,
            "ts": pa.array(np.full(n, ts, dtype=np.int64)),
            "rider": riders,
            "fare": pa.array(np.round(rng.uniform(3, 90, n), 2)),
            "distance": pa.array(rng.uniform(0.1, 40, n)),
            "city": pa.array(np.full(n, city) if city is not None else CITIES[idx % len(CITIES)]),
        },
        schema=SCHEMA,
    )


def _build(path: Path, rows: int, table_type: TableType) -> dict[str, Any]:
    marker = path / ".bench-built"
    if marker.exists() and json.loads(marker.read_text()).get("rows") == rows:
        return json.loads(marker.read_text())
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    t0 = time.perf_counter()
    spec = TableSpec(path.name, SCHEMA, "id", "city", "ts", table_type, 9)
    writer = create_table(LocalStorage(str(path)), spec)
    writer.upsert(generate(rows))
    info: dict[str, Any] = {"rows": rows}
    if table_type is TableType.MERGE_ON_READ:
        rng = np.random.default_rng(7)
        upd = np.sort(rng.choice(rows, size=rows // 10, replace=False))
        updates = generate(rows, ts=2, seed=3).take(pa.array(upd))
        gone = np.setdiff1d(rng.choice(rows, size=rows // 100, replace=False), upd)
        deletes = generate(rows).take(pa.array(gone)).select(["id", "city"])
        result = writer.upsert(updates, deletes=deletes)
        info["updates"], info["deletes"] = result.num_updates, result.num_deletes
        info["expected_rows"] = rows - result.num_deletes
    else:
        info["expected_rows"] = rows
    info["build_seconds"] = round(time.perf_counter() - t0, 3)
    marker.write_text(json.dumps(info))
    return info


def _build_timeline(path: Path) -> None:
    marker = path / ".bench-built"
    if marker.exists():
        return
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    spec = TableSpec("timeline_bench", SCHEMA, "id", "city", "ts", TableType.COPY_ON_WRITE, 9)
    writer = create_table(LocalStorage(str(path)), spec)
    writer.upsert(generate(1000))
    empty = SCHEMA.empty_table()
    for _ in range(TIMELINE_INSTANTS - 1):
        writer.upsert(empty)  # an empty commit: three timeline files, no data files
    marker.write_text("{}")


@dataclass
class Runs(_measure.Runs):
    """Wall and CPU seconds of the timed runs of one read, and the rows it returned."""

    rows: int = -1


def _run(fn: Callable[[], int], runs: Runs) -> None:
    with runs.measure(self_cpu):
        runs.rows = fn()


def _pair(ours: Callable[[], int], reference: Callable[[], int], repeat: int) -> tuple[Runs, Runs]:
    """``repeat`` timed runs of each after one warm-up, alternately (the same load on both)."""
    ours(), reference()
    mine, theirs = Runs(), Runs()
    for _ in range(repeat):
        _run(reference, theirs)
        _run(ours, mine)
    return mine, theirs


def read_hoodied(path: Path) -> int:
    from hoodied.hoodie.table import HoodieTable  # owned by the reader work; imported lazily

    table = HoodieTable.open(str(path))
    return sum(b.num_rows for b in table.read_snapshot())


def read_hudi_rs(path: Path) -> int:
    import hudi

    return sum(b.num_rows for b in hudi.HudiTableBuilder.from_base_uri(str(path)).build().read())


def load_timeline(path: Path) -> int:
    storage = LocalStorage(str(path))
    return len(Timeline.load(storage, load_table_config(storage)).instants)


def load_timeline_hudi_rs(path: Path) -> int:
    import hudi

    timeline = hudi.HudiTableBuilder.from_base_uri(str(path)).build().get_timeline()
    return len(timeline.get_completed_commits())


def _compare(prefix: str, path: Path, info: dict[str, Any], repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {f"{prefix}rows": info["expected_rows"]}
    mine, theirs = _pair(lambda: read_hoodied(path), lambda: read_hudi_rs(path), repeat)
    figures(out, prefix, mine, theirs)
    if mine.rows != theirs.rows or mine.rows != info["expected_rows"]:
        out[f"{prefix}error"] = f"row counts differ: hoodied {mine.rows}, hudi-rs {theirs.rows}"
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per table (default 1,000,000)")
    parser.add_argument("--workdir", default=None, help="where to build the tables (kept and reused)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="timed runs per read (default 5); medians and ranges are reported",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    logging.basicConfig(level=logging.WARNING)
    workdir = Path(args.workdir or os.path.join(tempfile.gettempdir(), "hoodied-read-bench"))
    workdir.mkdir(parents=True, exist_ok=True)

    cow = _build(workdir / f"cow_{args.rows}", args.rows, TableType.COPY_ON_WRITE)
    mor = _build(workdir / f"mor_{args.rows}", args.rows, TableType.MERGE_ON_READ)
    _build_timeline(workdir / "timeline_10k")

    result: dict[str, Any] = {"repeat": args.repeat}
    result.update(_compare("", workdir / f"cow_{args.rows}", cow, args.repeat))
    result.update(_compare("mor_", workdir / f"mor_{args.rows}", mor, args.repeat))
    timeline = workdir / "timeline_10k"
    mine, theirs = _pair(
        lambda: load_timeline(timeline), lambda: load_timeline_hudi_rs(timeline), args.repeat
    )
    result["timeline_instants"] = mine.rows
    figures(result, "timeline_", mine, theirs)
    result["build_seconds"] = {"cow": cow["build_seconds"], "mor": mor["build_seconds"]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
