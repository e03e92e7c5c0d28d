"""Compaction benchmark: hoodied's compaction on local Spark against hudi-rs read + pyarrow write.

Builds, under ``--workdir`` (reused when already built for the same row count):

* a merge-on-read table of ``--rows`` rows (default 2,000,000; table version 9, 8 partitions,
  at least 8 file groups) plus one delta commit updating 20 % of the rows and deleting 2 %
  (Avro data blocks and delete blocks in log files). A pristine copy is kept, and each run
  compacts a fresh copy of it;
* two one-file-group tables for the memory figures: a base file of the size of one file group
  of the main table and one 4x as large, both with the same log file (the same updates and
  deletes, all on keys of the smaller base file).

``--storage`` says where the compacted table lives:

* ``local`` (default): a copy of the pristine table in ``--workdir``;
* ``s3``: a moto S3 server the bench starts on a free loopback port (``moto_server`` next to
  this Python), with the standard ``AWS_*`` variables (endpoint, plain HTTP, region, dummy keys)
  set in this process before Spark starts, so the Spark JVM and its Python workers inherit
  them. Each run uploads the pristine table to a fresh bucket (``s3://<bucket>/table``; the
  upload is not timed, ``upload_seconds``) and hoodied opens it with
  ``hoodie.storage_factory.storage_for``, as the CLI does. No other host is contacted. The JSON line
  adds ``driver_requests``: the object-store requests of schedule + execute sent by this
  process (``hoodie.storage.STORAGE_REQUESTS``; the Spark tasks' own are not seen here).

Then, in one run, it

* starts a local Spark session (``executors.engine.spark_session('local')``) and runs one
  trivial ``mapInArrow`` job so the Python workers are up: ``spark_startup_seconds``;
* ``--repeats`` times (default 3), alternately so that both see the same load:

  - the reference on the pre-compaction table: a hudi-rs snapshot read (``HudiTable.read()``; on
    S3 from the same server, ``with_options`` pointing at it) plus a pyarrow parquet write of the
    same rows with the codec hoodied writes for the table (``BaseFileSettings.for_table``), one
    file per partition. On S3 each file is written to a local temp file and uploaded to the same
    bucket with ``obstore.put`` (hoodied's writer also stages a data file locally before its
    upload);
  - hoodied's compaction of a fresh copy (on S3 a fresh upload, not timed: ``upload_seconds``):
    scheduling (``planners.compaction.schedule_compaction``, unbounded strategy) and execution
    (``service.spark_jobs.run_compaction``);
  - a check that hudi-rs reads the same rows after the compaction (count and checksums);

* measures the peak RSS of one compaction task (``executors.compaction.compact_operation`` of
  the single file group, run in a fresh Python process; that process's own ``VmHWM``) over the
  small and the 4x base file: ``peak_rss_mb`` and ``peak_rss_mb_4x``. On S3 the one-group
  tables are uploaded to their own buckets and the task reads and writes them there;
* profiles the task over the 4x file group once more, in a fresh process, after one warm-up run
  of it (``cProfile`` with ``time.process_time`` as its clock, so pyarrow's native threads
  count; ``_task_profile``): ``task_cpu_seconds`` and ``task_cpu_shares``,
  the share of the task's CPU spent writing the parquet file (encoding and codec), in the bloom
  filter (hashing the keys and serialising it), decoding log blocks (Avro data and delete
  blocks), reading log files and block headers, and reading the base file; and ``codec_cpu_share``,
  the codec alone: the CPU of writing the task's output rows again with the table's codec less
  the same write uncompressed (best of 3 each), over the task's CPU.

CPU seconds: the compaction's are those of this process and every descendant, Spark's JVM and
its Python workers included, read from ``/proc`` (``_measure.tree_cpu``; ``RUSAGE_CHILDREN``
would miss the JVM, which lives until this process exits), the moto server left out (on S3 the
reference's requests are served by it too, uncounted); the reference runs in this process
(``_measure.self_cpu``, every thread). On a busy machine the CPU figures are the robust ones.
``cpu_seconds_by_command`` splits the compaction's CPU by process name (the JVM ``java``, the
driver and Spark's Python workers ``python``...), median over the repeats.

It prints ONE JSON line::

    {"storage": "local", "rows": ..., "repeats": 3, "seconds": ..., "seconds_range": [lo, hi],
     "cpu_seconds": ..., "reference_seconds": ..., "reference_cpu_seconds": ..., "ratio": ...,
     "ratio_range": [...], "cpu_ratio": ..., "cpu_ratio_range": [...],
     "spark_startup_seconds": ..., "peak_rss_mb": ..., "peak_rss_mb_4x": ...,
     "codec": "gzip", "task_cpu_shares": {"parquet_write": ..., "bloom_filter": ..., ...}, ...}

Each figure is the median over the repeats with its ``_range`` (lowest, highest); ``ratio`` /
``cpu_ratio`` = hoodied / reference of the same repeat (lower is better).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _measure import Runs, figures, self_cpu, tree_cpu, tree_cpu_by_command
from read_bench import SCHEMA, generate  # (the same generated rows as the read benchmark)

from hoodied.hoodie.basefile import BaseFileSettings
from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import STORAGE_REQUESTS, LocalStorage, Storage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction

EVERYTHING = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
UPDATE_FRACTION = 0.20
DELETE_FRACTION = 0.02
#: moto accepts any key; these only keep obstore, hudi-rs and Spark's workers off any other source.
S3_KEY_ID = "hoodied-bench-key-id"
S3_SECRET = "hoodied-bench-secret"
S3_REGION = "us-east-1"


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


# ---------------------------------------------------------------------------- S3 (moto)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class MotoS3:
    """The bench's own moto S3 server on a loopback port."""

    endpoint: str
    pid: int  # its CPU is the storage's, not the compaction's: left out of ``tree_cpu``

    def new_bucket(self) -> str:
        """A fresh, empty bucket (moto takes an unsigned ``PUT /bucket``)."""
        name = f"bench-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(request, timeout=10).close()
        return name

    def hudi_rs_options(self) -> dict[str, str]:
        return {
            "aws_endpoint_url": self.endpoint,
            "aws_allow_http": "true",
            "aws_access_key_id": S3_KEY_ID,
            "aws_secret_access_key": S3_SECRET,
            "aws_region": S3_REGION,
        }

    def upload(self, root: Path, bucket: str, prefix: str) -> str:
        """The local folder ``root`` copied to ``s3://bucket/prefix``; returns that URI."""
        import obstore
        from obstore.store import S3Store

        store = S3Store.from_url(f"s3://{bucket}")  # endpoint and keys from the environment
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.name != ".bench-built":
                obstore.put(store, f"{prefix}/{path.relative_to(root).as_posix()}", path)
        return f"s3://{bucket}/{prefix}"


@contextmanager
def moto_s3(log: Path) -> Iterator[MotoS3]:
    """Start ``moto_server`` on a free loopback port with the ``AWS_*`` environment pointing at it.

    The variables are set in ``os.environ`` (and left set: the Spark JVM started afterwards and
    its Python workers take their credentials from there), the server is stopped on exit.
    """
    binary = Path(sys.executable).parent / "moto_server"
    found = str(binary) if binary.exists() else shutil.which("moto_server")
    if found is None:
        raise SystemExit("--storage s3 needs moto_server (PyPI moto[server]) in this environment")
    endpoint = f"http://127.0.0.1:{_free_port()}"
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": S3_REGION,
            "AWS_ACCESS_KEY_ID": S3_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET,
        }
    )
    for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION"):
        os.environ.pop(key, None)
    port = endpoint.rsplit(":", 1)[1]
    with log.open("wb") as out:
        proc = subprocess.Popen([found, "-H", "127.0.0.1", "-p", port], stdout=out, stderr=subprocess.STDOUT)
    server = MotoS3(endpoint, proc.pid)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"moto_server exited with {proc.returncode}, see {log}")
            try:
                urllib.request.urlopen(f"{server.endpoint}/moto-api/", timeout=1).close()
                break
            except urllib.error.HTTPError:
                break  # it answers
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"moto_server did not answer on {server.endpoint}") from None
                time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


# ---------------------------------------------------------------------------- measurements


def _hudi_rs_table(location: str, options: dict[str, str]) -> pa.Table:
    import hudi

    builder = hudi.HudiTableBuilder.from_base_uri(location)
    if options:
        builder = builder.with_options(options)
    batches = builder.build().read()
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


#: Writes one parquet file of the reference's output: (rows, file name).
Sink = Callable[[pa.Table, str], None]


def local_sink(out_dir: Path, settings: BaseFileSettings) -> Sink:
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    codec, level = settings.parquet_codec

    def write(rows: pa.Table, name: str) -> None:
        pq.write_table(rows, out_dir / name, compression=codec, compression_level=level)

    return write


def s3_sink(bucket: str, prefix: str, scratch: Path, settings: BaseFileSettings) -> Sink:
    """pyarrow writes each file to a local temp file, ``obstore.put`` uploads it to the bucket."""
    import obstore
    from obstore.store import S3Store

    store = S3Store.from_url(f"s3://{bucket}")
    scratch.mkdir(parents=True, exist_ok=True)
    codec, level = settings.parquet_codec

    def write(rows: pa.Table, name: str) -> None:
        fd, temp = tempfile.mkstemp(suffix=".parquet", dir=scratch)
        os.close(fd)
        try:
            pq.write_table(rows, temp, compression=codec, compression_level=level)
            obstore.put(store, f"{prefix}/{name}", Path(temp))
        finally:
            os.unlink(temp)

    return write


def reference(location: str, options: dict[str, str], sink: Sink) -> pa.Table:
    """hudi-rs snapshot read + pyarrow write of the rows (one file per partition, same codec)."""
    table = _hudi_rs_table(location, options)
    partitions = table.column("_hoodie_partition_path")
    for i, part in enumerate(pc.unique(partitions).to_pylist()):
        sink(table.filter(pc.equal(partitions, part)), f"part-{i}.parquet")
    return table


def _warm_up(session: Any) -> None:
    """One trivial job: starts the Python workers (counted as Spark start-up)."""

    def identity(batches: Any) -> Any:
        yield from batches

    session.range(0, 2, 1, numPartitions=2).mapInArrow(identity, "id bigint").toArrow()


def compact(storage: Storage, session: Any) -> tuple[float, float, int]:
    from hoodied.service.spark_jobs import run_compaction

    lock = InProcessLock(storage.base_uri)
    t0 = time.perf_counter()
    inst, plan = schedule_compaction(storage, lock, EVERYTHING)
    assert inst is not None, plan.reason
    scheduled = time.perf_counter()
    result = run_compaction(storage, lock, inst.requested_time, session)
    done = time.perf_counter()
    return scheduled - t0, done - scheduled, len(result.write_stats)


_TASK = """
import json, sys, time
from hoodied.executors.compaction import compact_operation, prepare_job
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.timeline.active import Timeline

def hwm_kb():  # VmHWM, not ru_maxrss: that one carries the forking parent's peak over exec
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

storage = storage_for({location!r})
config = load_table_config(storage)
timeline = Timeline.load(storage, config)
inst = timeline.get({instant!r})
job, _ = prepare_job(storage, config, timeline, inst, timeline.plan(inst))
if {profile!r}:
    sys.path.insert(0, {bench!r})
    from _task_profile import profile_task
    print(json.dumps(profile_task(storage, config, job)))
else:
    before = hwm_kb()
    t0 = time.perf_counter()
    for i in range(len(job.slices)):
        compact_operation(job, i, "0-0-0")
    print(json.dumps([before, hwm_kb(), time.perf_counter() - t0]))
"""


def _run_task(pristine: Path, scratch: Path, s3: MotoS3 | None, *, profile: bool) -> Any:
    """Run the compaction task(s) of a one-group table in a fresh process; its JSON answer.

    The table is a local copy of ``pristine``, or with ``s3`` an upload of it to a fresh bucket
    (the child process takes the ``AWS_*`` environment).
    """
    if s3 is None:
        location = str(_fresh_copy(pristine, scratch))
    else:
        location = s3.upload(pristine, s3.new_bucket(), "table")
    storage = storage_for(location)
    inst, plan = schedule_compaction(storage, InProcessLock(storage.base_uri), EVERYTHING)
    assert inst is not None, plan.reason
    code = _TASK.format(
        location=location, instant=inst.requested_time, profile=profile, bench=str(Path(__file__).parent)
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compaction task failed:\n{proc.stderr}")
    if s3 is None:
        shutil.rmtree(scratch, ignore_errors=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def task_peak_rss_mb(pristine: Path, scratch: Path, s3: MotoS3 | None) -> tuple[float, float, float]:
    """Peak RSS (MB) of a fresh process running the compaction task of a one-group table.

    Returns (peak RSS, RSS after imports and planning, task seconds): the child's own VmHWM
    (``RUSAGE_CHILDREN`` here would also count the Spark JVM).
    """
    baseline, peak, seconds = _run_task(pristine, scratch, s3, profile=False)
    return int(peak) / 1024, int(baseline) / 1024, float(seconds)


def _one_repeat(
    pristine: Path, workdir: Path, s3: MotoS3 | None, session: Any, settings: BaseFileSettings,
    ref: Runs, ours: Runs,
) -> dict[str, Any]:
    """One reference run, then one compaction of a fresh copy, then the hudi-rs check."""
    extra: dict[str, Any] = {}
    if s3 is not None:
        t0 = time.perf_counter()
        location = s3.upload(pristine, s3.new_bucket(), "table")
        extra["upload_seconds"] = time.perf_counter() - t0
        options = s3.hudi_rs_options()
        bucket = location.split("/")[2]
        # the reference only reads the table: the compaction then runs on the same upload
        sink = s3_sink(bucket, "reference-out", workdir / "reference-scratch", settings)
        with ref.measure(self_cpu):
            before = reference(location, options, sink)
    else:
        options = {}
        sink = local_sink(workdir / "reference-out", settings)
        with ref.measure(self_cpu):
            before = reference(str(pristine), options, sink)
        location = str(_fresh_copy(pristine, workdir / "compacted"))
    expected = _checksum(before)
    del before
    storage = storage_for(location)
    requests_before = STORAGE_REQUESTS.snapshot()
    skip = (s3.pid,) if s3 is not None else ()
    by_command = tree_cpu_by_command(exclude=skip)
    with ours.measure(functools.partial(tree_cpu, exclude=skip)):
        schedule_s, execute_s, groups = compact(storage, session)
    extra["cpu_by_command"] = {
        comm: seconds - by_command.get(comm, 0.0)
        for comm, seconds in tree_cpu_by_command(exclude=skip).items()
    }
    extra["requests"] = {
        op: n - requests_before.get(op, 0) for op, n in sorted(STORAGE_REQUESTS.snapshot().items())
    }
    extra.update(schedule_seconds=schedule_s, execute_seconds=execute_s, file_groups=groups)
    after = _checksum(_hudi_rs_table(location, options))
    commit_times = after.pop("commit_times")
    expected_times = expected.pop("commit_times")
    assert after == expected, f"hudi-rs reads different rows after the compaction: {after} != {expected}"
    assert commit_times == expected_times, (commit_times, expected_times)
    extra["count"] = expected["count"]
    return extra


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the table (default 2,000,000)")
    parser.add_argument("--workdir", default=None, help="where to build the tables (kept and reused)")
    parser.add_argument(
        "--storage",
        choices=("local", "s3"),
        default="local",
        help="where the compacted table lives: local (default) or S3 on a moto server started here",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="reference + compaction runs (default 3); medians and ranges"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
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
    settings = BaseFileSettings.for_table(load_table_config(LocalStorage(str(pristine))))

    result: dict[str, Any] = {"storage": args.storage, "rows": info["expected_rows"], "repeats": args.repeats}
    ref, ours = Runs(), Runs()
    repeats: list[dict[str, Any]] = []
    with ExitStack() as stack:
        s3: MotoS3 | None = None
        if args.storage == "s3":
            s3 = stack.enter_context(moto_s3(workdir / "moto.log"))

        from hoodied.executors.engine import spark_session

        t0 = time.perf_counter()
        with spark_session("local") as session:
            _warm_up(session)
            startup = time.perf_counter() - t0
            for _ in range(args.repeats):
                repeats.append(_one_repeat(pristine, workdir, s3, session, settings, ref, ours))
        assert repeats[0]["count"] == info["expected_rows"], (repeats[0]["count"], info["expected_rows"])

        peak, baseline, task_s = task_peak_rss_mb(
            workdir / f"one_{small['rows']}", workdir / "rss-scratch", s3
        )
        peak_4x, baseline_4x, task_4x_s = task_peak_rss_mb(
            workdir / f"one_{large['rows']}", workdir / "rss-scratch", s3
        )
        profile = _run_task(workdir / f"one_{large['rows']}", workdir / "rss-scratch", s3, profile=True)

    figures(result, "", ours, ref)
    first = repeats[0]
    result.update(
        spark_startup_seconds=round(startup, 3),
        peak_rss_mb=round(peak, 1),
        peak_rss_mb_4x=round(peak_4x, 1),
        file_groups=first["file_groups"],
        updates=info["updates"],
        deletes=info["deletes"],
        schedule_seconds=[round(r["schedule_seconds"], 3) for r in repeats],
        execute_seconds=[round(r["execute_seconds"], 3) for r in repeats],
        task_base_rows=[small["rows"], large["rows"]],
        task_rss_baseline_mb=[round(baseline, 1), round(baseline_4x, 1)],
        task_seconds=[round(task_s, 3), round(task_4x_s, 3)],
        codec=settings.codec,
        bloom_filter=f"{settings.bloom_type.value} {settings.bloom_entries} fpp {settings.bloom_fpp:g}",
        # median over the repeats of the compaction's CPU seconds per command (the JVM is "java",
        # the driver and Spark's Python workers "python...")
        cpu_seconds_by_command={
            comm: round(statistics.median(r["cpu_by_command"].get(comm, 0.0) for r in repeats), 3)
            for comm in sorted({c for r in repeats for c in r["cpu_by_command"]})
            if any(r["cpu_by_command"].get(comm, 0.0) > 0 for r in repeats)
        },
        task_profile_base_rows=large["rows"],
        task_cpu_seconds=profile["cpu_seconds"],
        task_cpu_shares=profile["shares"],
        codec_cpu_share=profile["codec_share"],
        cpu="compaction: this process + descendants (/proc, Spark JVM and workers); reference: this process",
        cores=os.cpu_count(),
        build_seconds=info["build_seconds"],
    )
    if s3 is not None:
        result.update(
            upload_seconds=[round(r["upload_seconds"], 3) for r in repeats],
            # the object-store requests this process sent for schedule + execute in the first
            # repeat (the Spark tasks send theirs from the Python workers, which this count does
            # not see)
            driver_requests={op: n for op, n in first["requests"].items() if n},
            reference_write="pyarrow to a local temp file, then obstore.put to the same bucket",
        )
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
