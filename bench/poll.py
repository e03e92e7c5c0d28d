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

* ``first_cycle_seconds_<N>`` / ``first_cycle_cpu_seconds_<N>``: the cold first cycle, wall and
  process CPU (every timeline folder listed, its names counted, every trigger asked: the first
  full picture of the N tables);
* ``rss_per_table_kb_<N>``: the daemon's resident memory after that first cycle less the
  process's before the daemon was made, per table (what the daemon holds per table);
  ``rss_mb_<N>`` that resident memory and ``peak_rss_mb_<N>`` the process's peak (each repeat
  runs in a fresh forked process, so a peak is that repeat's own);
* ``cycle_seconds_<N>`` / ``cycle_cpu_seconds_<N>``: wall and process CPU time of one steady
  poll cycle over N tables (nothing new since the last cycle; the median of ``--cycles``);
* ``new_cycle_seconds_<N>``: the cycle right after ``--new`` tables each got one new
  completed delta commit (their timelines are read again);
* references measured in the same run, single-threaded: ``reference_scandir_seconds_<N>`` /
  ``reference_scandir_cpu_seconds_<N>`` (``os.scandir`` of the N timeline folders, names only: the
  floor of any poll; measured right after each daemon, so alternately with it) with
  ``first_cycle_vs_scandir_<N>`` / ``first_cycle_cpu_vs_scandir_<N>`` (each repeat's first cycle
  over its own reference, wall and CPU), and ``reference_load_seconds_<N>`` (``Timeline.load`` of
  the N tables: a full re-parse, once) with ``first_cycle_vs_load_<N>``;

Every figure of the cycles above is measured ``--repeats`` times (each in a fresh process) and
printed as the median, with ``<key>_range`` the [lowest, highest]: on a shared machine the CPU
seconds and the same-run ratios move far less than wall times.
* ``idle_cpu_fraction``: process CPU seconds / wall seconds of a daemon watching the first
  1,000 tables for ``--idle-seconds`` at ``--poll-interval`` (default: the daemon's default,
  10 s), after its first cycle; ``relist_cpu_fraction_<N>``: what the window misses, the
  CPU of re-listing every timeline (done about every ``service.daemon.poll.RELIST_S`` per table
  whatever the folder's mtime says; ``relist_cycle_cpu_seconds_<N>``) spread over the mean
  re-list period, and ``recheck_cpu_fraction_<N>``: the CPU of evaluating every table's planner
  triggers again (done every ``RECHECK_DUE_S`` on an unchanged timeline, from the poll's compact
  view; ``recheck_cycle_cpu_seconds_<N>``) spread over that period;
* ``dispatch_p50_seconds`` / ``dispatch_p99_seconds``: while that daemon keeps running,
  ``--dispatch-samples`` requested cleans are written into random tables at random moments;
  the delay is from the requested file's creation to the executor being called (the real
  path: poll, dispatch, lease, timeline reload). The executor is a stand-in that records the
  moment and removes the requested file (nothing is cleaned).

``--storage s3`` measures the same daemon on S3 instead: it starts a moto server
(``moto_server``, from ``moto[server]``) on a free loopback port, points the standard ``AWS_*``
variables at it (dummy credentials), uploads ``hoodie.properties`` and the timeline folder of
the template as the ``--tables`` tables of one bucket (the poll reads nothing else), and
measures, for the largest count N:

* ``s3_first_cycle_seconds_<N>`` and ``s3_first_cycle_requests_per_table_<N>``: the cold cycle;
* ``s3_cycle_seconds_<N>`` (median of ``--cycles``) and ``s3_cycle_requests_per_table_<N>``
  (``list``/``get``/``head``, from ``hoodie.storage.STORAGE_REQUESTS``): steady cycles;
* ``s3_relist_cycle_seconds_<N>`` / ``s3_relist_cycle_requests_per_table_<N>``: a cycle where
  every table is due for its periodic full re-listing;
* ``s3_new_cycle_seconds_<N>`` / ``s3_new_cycle_requests_<N>``: the cycle after ``--new`` tables
  each got one completed delta commit;
* references in the same run: ``s3_reference_list_seconds_<N>`` (one plain obstore delimiter
  listing of every timeline folder, one thread) and ``s3_reference_list_threads_seconds_<N>``
  (the same over ``concurrency.poll_threads`` threads, as the daemon polls), with
  ``s3_reference_list_requests_per_table_<N>`` (what the server logged for them).

Prints ONE JSON line with these keys (``cycle_seconds_1000``, ``cycle_seconds_10000``,
``cycle_cpu_seconds_1000``, ``first_cycle_seconds_10000``, ``rss_per_table_kb_10000``,
``idle_cpu_fraction``, ``poll_interval_seconds``, ``dispatch_p50_seconds``,
``dispatch_p99_seconds``, ...). Goals on 2 cores: a steady cycle of 1,000 tables under 1 s and
of 10,000 under 10 s, the first cycle of 10,000 tables under 10 s, at most 50 KB per table, idle
CPU under 5 % of one core, p99 dispatch under the poll interval plus 0.5 s.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import multiprocessing
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pyarrow as pa

from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import STORAGE_REQUESTS, LocalStorage
from hoodied.hoodie.timeline.active import Timeline, datetime_to_instant_time
from hoodied.hoodie.timeline.instant import Action
from hoodied.service.config import DaemonConfig, load_config
from hoodied.service.daemon.loop import Daemon
from hoodied.service.daemon.poll import RECHECK_DUE_S, RELIST_S
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


def _rss_mb() -> float:
    """This process's resident memory now (MB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure_cycles(tables: list[Path], cycles: int, new: int, sample_completed: Path) -> dict[str, Any]:
    n = len(tables)
    gc.collect()
    rss_before = _rss_mb()
    daemon = Daemon(_settings(tables, None), once=True)
    added: list[Path] = []

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        t0, c0 = time.perf_counter(), time.process_time()
        await daemon.poll_cycle()
        out[f"first_cycle_seconds_{n}"] = round(time.perf_counter() - t0, 3)
        out[f"first_cycle_cpu_seconds_{n}"] = round(time.process_time() - c0, 3)
        assert all(ts.poll is not None for ts in daemon.tables.values()), "a table failed to poll"
        gc.collect()
        rss = _rss_mb()
        out[f"rss_mb_{n}"] = round(rss, 1)
        out[f"rss_per_table_kb_{n}"] = round((rss - rss_before) * 1024 / n, 1)
        out[f"peak_rss_mb_{n}"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        walls, cpus = [], []
        for _ in range(cycles):
            w0, c0 = time.perf_counter(), time.process_time()
            await daemon.poll_cycle()
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        out[f"cycle_seconds_{n}"] = round(statistics.median(walls), 4)
        out[f"cycle_cpu_seconds_{n}"] = round(statistics.median(cpus), 4)
        # the triggers of an unchanged timeline are evaluated again about every RECHECK_DUE_S
        # (time-based ones move with the clock), on a timeline built again from the poll's view
        for ts in daemon.tables.values():
            assert ts.poll is not None
            ts.poll.due_at = time.monotonic() - RECHECK_DUE_S - 1
        c0 = time.process_time()
        await daemon.poll_cycle()
        recheck_cpu = time.process_time() - c0
        out[f"recheck_cycle_cpu_seconds_{n}"] = round(recheck_cpu, 4)
        out[f"recheck_cpu_fraction_{n}"] = round(recheck_cpu / RECHECK_DUE_S, 5)
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
        assert all(ts.poll is not None and len(ts.poll.view) > 1 for ts in grown)
        return out

    try:
        return anyio.run(main)
    finally:
        for f in added:  # the lake stays as built, for the next count and the next run
            f.unlink()


def _child(conn: Any, tables: list[Path], cycles: int, new: int, sample: Path) -> None:
    try:
        conn.send(measure_cycles(tables, cycles, new, sample))
    except BaseException as exc:  # the parent reports it
        conn.send(exc)
    finally:
        conn.close()


def measure_repeats(tables: list[Path], repeats: int, cycles: int, new: int, sample: Path) -> dict[str, Any]:
    """``measure_cycles`` ``repeats`` times, each in a fresh forked process (its own peak RSS):
    the median of each figure, and ``<key>_range``."""
    runs: list[dict[str, Any]] = []
    ctx = multiprocessing.get_context("fork")
    for _ in range(repeats):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(child, tables, cycles, new, sample))
        proc.start()
        child.close()
        got = parent.recv()
        proc.join()
        if isinstance(got, BaseException):
            raise got
        # the floor, measured right after each daemon (alternately with it, on the same load)
        n = len(tables)
        got.update(measure_scandir(tables))
        got[f"first_cycle_vs_scandir_{n}"] = round(
            got[f"first_cycle_seconds_{n}"] / got[f"reference_scandir_seconds_{n}"], 2)
        got[f"first_cycle_cpu_vs_scandir_{n}"] = round(
            got[f"first_cycle_cpu_seconds_{n}"] / got[f"reference_scandir_cpu_seconds_{n}"], 2)
        runs.append(got)
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = round(statistics.median(values), 4)
        if len(values) > 1 and not key.startswith(("new_cycle_tables", "timeline_files")):
            out[f"{key}_range"] = [min(values), max(values)]
    out[f"repeats_{len(tables)}"] = repeats
    return out


def measure_scandir(tables: list[Path]) -> dict[str, Any]:
    """``os.scandir`` of every timeline folder, names only, one thread: wall and CPU seconds."""
    n = len(tables)
    t0, c0 = time.perf_counter(), time.process_time()
    names = 0
    for t in tables:
        with os.scandir(_timeline_dir(t)) as entries:
            names += sum(1 for _ in entries)
    return {f"reference_scandir_seconds_{n}": round(time.perf_counter() - t0, 4),
            f"reference_scandir_cpu_seconds_{n}": round(time.process_time() - c0, 4),
            f"timeline_files_{n}": names}


def measure_references(tables: list[Path]) -> dict[str, Any]:
    n = len(tables)
    t0 = time.perf_counter()
    instants = 0
    for t in tables:
        storage = LocalStorage(str(t))
        instants += len(Timeline.load(storage, load_table_config(storage)))
    load_s = time.perf_counter() - t0
    return {f"reference_load_seconds_{n}": round(load_s, 4), f"instants_{n}": instants}


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


# ---------------------------------------------------------------------------- S3 (moto)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto(workdir: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """A moto S3 server on a free loopback port: (process, endpoint, its request log)."""
    binary = shutil.which("moto_server", path=str(Path(__file__).resolve().parents[1] / ".venv" / "bin"))
    binary = binary or shutil.which("moto_server")
    if binary is None:
        raise SystemExit("moto_server is not installed (pip install 'moto[server]')")
    port = _free_port()
    log = workdir / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()  # noqa: S310 - loopback
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                tail = log.read_text(errors="replace")[-500:]
                raise SystemExit(f"moto_server did not start: {tail}") from None
            time.sleep(0.1)
    # the standard variables, as a deployment sets them; moto takes any credentials
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                       "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"})
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
        os.environ.pop(name, None)
    return proc, endpoint, log


def upload_timelines(template: Path, bucket: str, count: int, endpoint: str) -> list[str]:
    """``count`` tables in ``bucket``, each ``hoodie.properties`` + the template's timeline files."""
    import obstore
    from obstore.store import S3Store

    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=10).close()  # noqa: S310
    store = S3Store.from_url(f"s3://{bucket}")
    files = [(".hoodie/hoodie.properties", (template / ".hoodie" / "hoodie.properties").read_bytes())]
    timeline = sorted(p for p in _timeline_dir(template).iterdir() if p.is_file())
    files += [(f".hoodie/timeline/{p.name}", p.read_bytes()) for p in timeline]
    uris = [f"s3://{bucket}/lake/t{i:05d}" for i in range(count)]

    async def put_all() -> None:
        limit = anyio.Semaphore(32)

        async def one(key: str, data: bytes) -> None:
            async with limit:
                await obstore.put_async(store, key, data)

        async with anyio.create_task_group() as tg:
            for i in range(count):
                for rel, data in files:
                    tg.start_soon(one, f"lake/t{i:05d}/{rel}", data)

    anyio.run(put_all)
    return uris


def _per_table(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, float]:
    return {op: round((after.get(op, 0) - before.get(op, 0)) / n, 3)
            for op in sorted(after) if after.get(op, 0) != before.get(op, 0)}


def _list_requests(log: Path, mark: int) -> tuple[int, int]:
    """(LIST requests moto logged since line ``mark``, the new mark)."""
    time.sleep(0.5)  # moto logs after answering
    lines = log.read_text(errors="replace").splitlines()
    return sum(1 for line in lines[mark:] if "list-type=2" in line), len(lines)


def measure_s3(template: Path, count: int, cycles: int, new: int, workdir: Path) -> dict[str, Any]:
    import obstore
    from obstore.store import S3Store

    proc, endpoint, log = start_moto(workdir)
    try:
        t0 = time.perf_counter()
        uris = upload_timelines(template, "poll-bench", count, endpoint)
        out: dict[str, Any] = {"s3_tables": count, "s3_upload_seconds": round(time.perf_counter() - t0, 1)}
        never = {"clean": {"trigger_commits": NEVER}, "compaction": {"delta_commits": NEVER}}
        settings = load_config(overrides={
            "tables": uris, "http": "off", "clock_skew_ms": 0, "log": {"format": "json", "level": "WARNING"},
            "defaults": {"services": never},
        })
        daemon = Daemon(settings, once=True)
        n = count

        async def cycle() -> tuple[float, dict[str, float]]:
            before = STORAGE_REQUESTS.snapshot()
            w0 = time.perf_counter()
            await daemon.poll_cycle()
            return time.perf_counter() - w0, _per_table(before, STORAGE_REQUESTS.snapshot(), n)

        async def run() -> None:
            wall, cost = await cycle()
            assert all(ts.poll is not None for ts in daemon.tables.values()), "a table failed to poll"
            out[f"s3_first_cycle_seconds_{n}"] = round(wall, 3)
            out[f"s3_first_cycle_requests_per_table_{n}"] = cost
            # the periodic full re-listing (about every RELIST_S per table) is measured apart below:
            # keep it out of the steady cycles, which a slow first cycle would otherwise reach
            for ts in daemon.tables.values():
                assert ts.poll is not None
                ts.poll.relist_at = time.monotonic() + RELIST_S
            walls, costs = [], []
            for _ in range(cycles):
                wall, cost = await cycle()
                walls.append(wall)
                costs.append(cost)
            out[f"s3_cycle_seconds_{n}"] = round(statistics.median(walls), 4)
            out[f"s3_cycle_requests_per_table_{n}"] = costs[-1]
            assert all(c == costs[0] for c in costs), costs
            for ts in daemon.tables.values():
                assert ts.poll is not None
                ts.poll.relist_at = 0.0
            wall, cost = await cycle()
            out[f"s3_relist_cycle_seconds_{n}"] = round(wall, 4)
            out[f"s3_relist_cycle_requests_per_table_{n}"] = cost
            store = S3Store.from_url("s3://poll-bench")
            first = daemon.tables[uris[0]].poll
            assert first is not None
            instants = len(first.view)
            changed = random.Random(n).sample(uris, min(new, n))
            for uri in changed:
                t = _now_instant()
                prefix = uri.removeprefix("s3://poll-bench/") + "/.hoodie/timeline"
                for name in (f"{t}.deltacommit.requested", f"{t}.deltacommit.inflight"):
                    obstore.put(store, f"{prefix}/{name}", b"")
                sample = next(p for p in _timeline_dir(template).iterdir()
                              if p.name.endswith(".deltacommit") and "_" in p.name)
                obstore.put(store, f"{prefix}/{t}_{_now_instant()}.deltacommit", sample.read_bytes())
            before = STORAGE_REQUESTS.snapshot()
            w0 = time.perf_counter()
            await daemon.poll_cycle()
            out[f"s3_new_cycle_seconds_{n}"] = round(time.perf_counter() - w0, 4)
            after = STORAGE_REQUESTS.snapshot()
            out[f"s3_new_cycle_requests_{n}"] = {op: after[op] - before.get(op, 0) for op in sorted(after)
                                                 if after[op] != before.get(op, 0)}
            out[f"s3_new_cycle_tables_{n}"] = len(changed)
            grown = [daemon.tables[u].poll for u in changed]
            missed = [p for p in grown if p is None or len(p.view) != instants + 1]
            assert not missed, "a new instant was missed"

        anyio.run(run)
        # the floor of any poll: one plain delimiter listing of every timeline folder
        store = S3Store.from_url("s3://poll-bench")
        prefixes = [u.removeprefix("s3://poll-bench/") + "/.hoodie/timeline/" for u in uris]
        _, mark = _list_requests(log, 0)
        t0 = time.perf_counter()
        entries = sum(len(obstore.list_with_delimiter(store, p)["objects"]) for p in prefixes)
        out[f"s3_reference_list_seconds_{n}"] = round(time.perf_counter() - t0, 4)
        lists, mark = _list_requests(log, mark)
        out[f"s3_reference_list_requests_per_table_{n}"] = round(lists / n, 3)
        out[f"s3_timeline_files_{n}"] = entries
        threads = settings.concurrency.poll_threads
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda p: obstore.list_with_delimiter(store, p), prefixes))
        out[f"s3_reference_list_threads_seconds_{n}"] = round(time.perf_counter() - t0, 4)
        out["s3_poll_threads"] = threads
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=None, help="where to build the tables (kept and reused)")
    parser.add_argument("--tables", default="1000,10000", help="table counts to poll (default 1000,10000)")
    parser.add_argument("--instants", type=int, default=200, help="instants per timeline (default 200)")
    parser.add_argument("--cycles", type=int, default=3, help="steady cycles per count (median)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh daemons per count, each in its own process (median and range; default 3)")
    parser.add_argument("--new", type=int, default=100, help="tables given a new instant (default 100)")
    parser.add_argument("--poll-interval", type=float, default=None,
                        help="poll interval of the idle/dispatch daemon (default: the daemon's default)")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="idle window (default 30 s)")
    parser.add_argument("--dispatch-samples", type=int, default=40, help="requested instants (default 40)")
    parser.add_argument("--idle-tables", type=int, default=1000, help="tables of the idle daemon")
    parser.add_argument("--storage", choices=["local", "s3"], default="local",
                        help="local (default) or s3: the tables in a moto S3 server started here")
    args = parser.parse_args(argv)
    configure_logging("json", "WARNING")
    logging.getLogger().setLevel(logging.WARNING)
    counts = [int(x) for x in args.tables.split(",")]
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.gettempdir()) / "hoodied-poll-bench"
    template = workdir / f"template-{args.instants}"
    t0 = time.perf_counter()
    build_template(template, args.instants)
    if args.storage == "s3":
        measured: dict[str, Any] = {"instants_per_table": args.instants}
        measured.update(measure_s3(template, max(counts), args.cycles, args.new, workdir))
        print(json.dumps(measured))
        return measured
    lake = build_lake(workdir / f"i{args.instants}", template, max([*counts, args.idle_tables]))
    result: dict[str, Any] = {"instants_per_table": args.instants,
                              "build_seconds": round(time.perf_counter() - t0, 1)}
    sample = next(p for p in _timeline_dir(template).iterdir()
                  if p.name.endswith(".deltacommit") and "_" in p.name)
    for n in counts:
        result.update(measure_repeats(lake[:n], args.repeats, args.cycles, args.new, sample))
        result.update(measure_references(lake[:n]))
        first = result[f"first_cycle_seconds_{n}"]
        result[f"first_cycle_vs_load_{n}"] = round(first / result[f"reference_load_seconds_{n}"], 3)
    result.update(measure_idle_and_dispatch(lake[: args.idle_tables], args.poll_interval, args.idle_seconds,
                                            args.dispatch_samples))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
