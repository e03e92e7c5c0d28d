"""Poll benchmark: the daemon's poll cycle over many tables, its idle CPU, and its dispatch delay.

Builds, under ``--workdir`` (kept and reused when already built):

* one template merge-on-read table (table version 9) whose timeline holds ``--instants``
  completed delta commits (default 200: one with data, the rest empty; 3 timeline files each),
  written by ``hoodie.demo.writer``;
* ``max(--tables)`` copies of it (default 10,000), made of hard links to the template's
  files, so 10,000 tables x 600 timeline files cost directory entries, not inodes or time.

Then, in one run, with the real ``service.daemon.loop.Daemon`` (local lock, HTTP off, default
``concurrency.poll_threads``) and the real planners (their triggers are evaluated on every
poll, set high enough that nothing is due), it measures:

* ``cycle_seconds_<N>`` / ``cycle_cpu_seconds_<N>``: wall and process CPU time of one steady
  poll cycle over N tables (nothing new since the last cycle; the median of ``--cycles``);
  ``first_cycle_seconds_<N>``: the cold first cycle (every timeline loaded);
* ``new_cycle_seconds_<N>``: the cycle right after ``--new`` tables each got one new
  completed delta commit (their timelines are read again);
* references measured in the same run, single-threaded: ``reference_scandir_seconds_<N>``
  (``os.scandir`` of the N timeline folders, names only: the floor of any poll) and
  ``reference_load_seconds_<N>`` (``Timeline.load`` of the N tables: a full re-parse);
* ``idle_cpu_fraction``: process CPU seconds / wall seconds of a daemon watching the first
  1,000 tables for ``--idle-seconds`` at ``--poll-interval`` (default: the daemon's default,
  10 s), after its first cycle; ``relist_cpu_fraction_<N>``: what the window misses, the
  CPU of re-listing every timeline (done about every ``service.daemon.poll.RELIST_S`` per table
  whatever the folder's mtime says; ``relist_cycle_cpu_seconds_<N>``) spread over the mean
  re-list period;
* ``dispatch_p50_seconds`` / ``dispatch_p99_seconds``: while that daemon keeps running,
  ``--dispatch-samples`` requested cleans are written into random tables at random moments;
  the delay is from the requested file's creation to the executor being called (the real
  path: poll, dispatch, lease, timeline reload). The executor is a stand-in that records the
  moment and removes the requested file (nothing is cleaned).

Prints ONE JSON line with these keys (``cycle_seconds_1000``, ``cycle_seconds_10000``,
``cycle_cpu_seconds_1000``, ``idle_cpu_fraction``, ``poll_interval_seconds``,
``dispatch_p50_seconds``, ``dispatch_p99_seconds``, ...). Goals on 2 cores: 1,000 tables under
1 s, 10,000 under 10 s, idle CPU under 5 % of one core, p99 dispatch under the poll interval
plus 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pyarrow as pa

from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline, datetime_to_instant_time
from hoodied.hoodie.timeline.instant import Action
from hoodied.service.config import DaemonConfig, load_config
from hoodied.service.daemon.loop import Daemon
from hoodied.service.daemon.poll import RELIST_S
from hoodied.service.daemon.registry import JobContext, Registry, register_executor
from hoodied.service.daemon.registry import build_registry as default_registry
from hoodied.service.logs import configure_logging

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("city", pa.string())])
#: Triggers no generated timeline reaches: the planners' checks run on every poll, nothing is planned.
NEVER = 1_000_000_000


def build_template(path: Path, instants: int) -> None:
    marker = path / ".bench-built"
    if marker.exists() and json.loads(marker.read_text()).get("instants") == instants:
        return
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    spec = TableSpec("poll_bench", SCHEMA, "id", "city", "ts", TableType.MERGE_ON_READ, 9)
    writer = create_table(LocalStorage(str(path)), spec)
    n = 100
    writer.upsert(pa.table({"id": [f"k{i:04d}" for i in range(n)], "ts": np.ones(n, dtype=np.int64),
                            "city": ["ams", "sfo"] * (n // 2)}, schema=SCHEMA))
    empty = SCHEMA.empty_table()
    for _ in range(instants - 1):
        writer.upsert(empty)  # an empty delta commit: three timeline files, no data files
    marker.write_text(json.dumps({"instants": instants}))


def _clone(template: Path, dest: Path) -> None:
    """``dest`` as a copy of ``template`` made of hard links (same names, shared inodes)."""
    for folder, dirs, files in os.walk(template):
        rel = os.path.relpath(folder, template)
        target = dest / rel if rel != "." else dest
        target.mkdir(parents=True, exist_ok=True)
        for f in files:
            if f != ".bench-built":
                os.link(os.path.join(folder, f), target / f)
        dirs[:] = [d for d in dirs if d != ".locks"]


def build_lake(workdir: Path, template: Path, count: int) -> list[Path]:
    lake = workdir / "lake"
    lake.mkdir(parents=True, exist_ok=True)
    tables = [lake / f"t{i:05d}" for i in range(count)]
    for t in tables:
        if not (t / ".bench-built").exists():
            shutil.rmtree(t, ignore_errors=True)
            _clone(template, t)
            (t / ".bench-built").write_text("")
    return tables


def _timeline_dir(table: Path) -> Path:
    return table / ".hoodie" / "timeline"


def _now_instant() -> str:
    from datetime import UTC, datetime

    return datetime_to_instant_time(datetime.now(UTC), UTC)


def add_delta_commit(table: Path, sample_completed: Path) -> list[Path]:
    """One new completed delta commit (requested, inflight, completed) with real commit metadata."""
    t = _now_instant()
    folder = _timeline_dir(table)
    files = [folder / f"{t}.deltacommit.requested", folder / f"{t}.deltacommit.inflight"]
    for f in files:
        f.write_bytes(b"")
    files.append(folder / f"{t}_{_now_instant()}.deltacommit")
    os.link(sample_completed, files[-1])
    return files


def _settings(tables: list[Path], poll_interval: float | None) -> DaemonConfig:
    overrides: dict[str, Any] = {
        "tables": [str(t) for t in tables], "http": "off", "lock": "local", "clock_skew_ms": 0,
        "log": {"format": "json", "level": "WARNING"},
        "defaults": {"services": {"clean": {"trigger_commits": NEVER},
                                  "compaction": {"delta_commits": NEVER}}},
    }
    if poll_interval is not None:
        overrides["poll_interval_seconds"] = poll_interval
    return load_config(overrides=overrides)


def measure_cycles(tables: list[Path], cycles: int, new: int, sample_completed: Path) -> dict[str, Any]:
    n = len(tables)
    daemon = Daemon(_settings(tables, None), once=True)
    added: list[Path] = []

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        t0 = time.perf_counter()
        await daemon.poll_cycle()
        out[f"first_cycle_seconds_{n}"] = round(time.perf_counter() - t0, 3)
        assert all(ts.poll is not None for ts in daemon.tables.values()), "a table failed to poll"
        walls, cpus = [], []
        for _ in range(cycles):
            w0, c0 = time.perf_counter(), time.process_time()
            await daemon.poll_cycle()
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        out[f"cycle_seconds_{n}"] = round(statistics.median(walls), 4)
        out[f"cycle_cpu_seconds_{n}"] = round(statistics.median(cpus), 4)
        # every table re-lists its timeline about every RELIST_S whatever its mtime says: that
        # cost, spread over the mean re-list period, is the idle load the idle window misses
        for ts in daemon.tables.values():
            assert ts.poll is not None
            ts.poll.relist_at = 0.0
        w0, c0 = time.perf_counter(), time.process_time()
        await daemon.poll_cycle()
        relist_cpu = time.process_time() - c0
        out[f"relist_cycle_seconds_{n}"] = round(time.perf_counter() - w0, 4)
        out[f"relist_cycle_cpu_seconds_{n}"] = round(relist_cpu, 4)
        out[f"relist_cpu_fraction_{n}"] = round(relist_cpu / (RELIST_S * 0.75), 5)
        changed = random.Random(n).sample(tables, min(new, n))
        for t in changed:
            added.extend(add_delta_commit(t, sample_completed))
        w0, c0 = time.perf_counter(), time.process_time()
        await daemon.poll_cycle()
        out[f"new_cycle_seconds_{n}"] = round(time.perf_counter() - w0, 4)
        out[f"new_cycle_cpu_seconds_{n}"] = round(time.process_time() - c0, 4)
        out[f"new_cycle_tables_{n}"] = len(changed)
        seen = {str(t) for t in changed}
        grown = [ts for ts in daemon.tables.values() if ts.uri in seen]
        assert all(ts.poll is not None and len(ts.poll.timeline) > 1 for ts in grown)
        return out

    try:
        return anyio.run(main)
    finally:
        for f in added:  # the lake stays as built, for the next count and the next run
            f.unlink()


def measure_references(tables: list[Path]) -> dict[str, Any]:
    n = len(tables)
    t0 = time.perf_counter()
    names = 0
    for t in tables:
        with os.scandir(_timeline_dir(t)) as entries:
            names += sum(1 for _ in entries)
    scandir_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    instants = 0
    for t in tables:
        storage = LocalStorage(str(t))
        instants += len(Timeline.load(storage, load_table_config(storage)))
    load_s = time.perf_counter() - t0
    return {f"reference_scandir_seconds_{n}": round(scandir_s, 4),
            f"reference_load_seconds_{n}": round(load_s, 4),
            f"timeline_files_{n}": names, f"instants_{n}": instants}


def measure_idle_and_dispatch(
    tables: list[Path], poll_interval: float | None, idle_s: float, samples: int
) -> dict[str, Any]:
    settings = _settings(tables, poll_interval)
    started: dict[str, float] = {}

    def stand_in(ctx: JobContext) -> str:
        t = ctx.instant.requested_time
        started.setdefault(f"{ctx.storage.base_uri.rstrip('/')}|{t}", time.time())
        local = ctx.storage.local_path(f"{ctx.table.timeline_path}/{t}.clean.requested")
        assert local is not None
        os.unlink(local)  # the instant is gone: nothing left to dispatch
        return "recorded"

    registry = Registry(planners=dict(default_registry().planners))
    register_executor(Action.CLEAN, stand_in, resumes_inflight=True, registry=registry)
    daemon = Daemon(settings, registry=registry)
    created: dict[str, float] = {}
    out: dict[str, Any] = {"poll_interval_seconds": settings.poll_interval_seconds}

    async def driver() -> None:
        while daemon.last_cycle_end is None:
            await anyio.sleep(0.05)
        w0, c0 = time.perf_counter(), time.process_time()
        await anyio.sleep(idle_s)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        out["idle_seconds"] = round(wall, 1)
        out["idle_cpu_seconds"] = round(cpu, 3)
        out["idle_cpu_fraction"] = round(cpu / wall, 4)
        rng = random.Random(7)
        spread = settings.poll_interval_seconds / 2  # random gaps: moments fall anywhere in the cycle
        for _ in range(samples):
            await anyio.sleep(rng.uniform(0, spread))
            t = _now_instant()
            table = rng.choice(tables)
            path = _timeline_dir(table) / f"{t}.clean.requested"
            path.write_bytes(b"")
            created[f"{table}|{t}"] = os.stat(path).st_mtime
        deadline = time.monotonic() + 3 * settings.poll_interval_seconds + 10
        while len(started) < len(created) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        daemon.request_stop("benchmark done")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(driver)
            await daemon.run()

    try:
        anyio.run(main)
    finally:
        for key in created:
            table, t = key.split("|")
            (_timeline_dir(Path(table)) / f"{t}.clean.requested").unlink(missing_ok=True)
    delays = sorted(started[k] - created[k] for k in created if k in started)
    out["dispatch_samples"] = len(delays)
    out["dispatch_missing"] = len(created) - len(delays)
    if delays:
        out["dispatch_p50_seconds"] = round(float(np.percentile(delays, 50)), 3)
        out["dispatch_p99_seconds"] = round(float(np.percentile(delays, 99)), 3)
        out["dispatch_max_seconds"] = round(delays[-1], 3)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=None, help="where to build the tables (kept and reused)")
    parser.add_argument("--tables", default="1000,10000", help="table counts to poll (default 1000,10000)")
    parser.add_argument("--instants", type=int, default=200, help="instants per timeline (default 200)")
    parser.add_argument("--cycles", type=int, default=3, help="steady cycles per count (median)")
    parser.add_argument("--new", type=int, default=100, help="tables given a new instant (default 100)")
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="poll interval of the idle/dispatch daemon (default: the daemon's default)")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="idle window (default 30 s)")
    parser.add_argument("--dispatch-samples", type=int, default=40, help="requested instants (default 40)")
    parser.add_argument("--idle-tables", type=int, default=1000, help="tables of the idle daemon")
    args = parser.parse_args(argv)
    configure_logging("json", "WARNING")
    logging.getLogger().setLevel(logging.WARNING)
    counts = [int(x) for x in args.tables.split(",")]
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.gettempdir()) / "hoodied-poll-bench"
    template = workdir / f"template-{args.instants}"
    t0 = time.perf_counter()
    build_template(template, args.instants)
    lake = build_lake(workdir / f"i{args.instants}", template, max([*counts, args.idle_tables]))
    result: dict[str, Any] = {"instants_per_table": args.instants,
                              "build_seconds": round(time.perf_counter() - t0, 1)}
    sample = next(p for p in _timeline_dir(template).iterdir()
                  if p.name.endswith(".deltacommit") and "_" in p.name)
    for n in counts:
        result.update(measure_cycles(lake[:n], args.cycles, args.new, sample))
        result.update(measure_references(lake[:n]))
    result.update(measure_idle_and_dispatch(lake[: args.idle_tables], args.poll_interval, args.idle_seconds,
                                            args.dispatch_samples))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
