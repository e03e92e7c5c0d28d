"""Compaction through a real Spark Connect server, compared with a local-mode run.

The server is the one pyspark ships: ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer spark-internal`` with ``SPARK_HOME``
the pyspark package (its ``jars/`` holds ``spark-connect_2.13-*.jar``), bound to 127.0.0.1 on
a free port, in ``local[2]`` mode, started once for this module and stopped at teardown. It
works offline (no ``--packages``). Its Python workers get the project's ``hoodie`` and
``executors`` packages only as the session's artifacts (``executors.engine`` zips them): a
probe task checks that they import them from the shipped zip, not from this checkout.

One table gets a compaction plan, then is copied: the copy is compacted by ``hoodied execute
--spark local[1]``, the original by ``hoodied execute --spark sc://127.0.0.1:PORT`` (both CLI
processes, end to end). Both must leave the same rows (hudi-rs), the same number of base files
per file group and, per file group, base-file rows equal column by column (meta columns
included, ``_hoodie_file_name`` aside: it carries the write token).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction
from tests.helpers.mor_tables import hudi_rs_rows, written_mor_table

PROJECT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
SKEW = ["--clock-skew-ms", "5"]
STARTED = "Spark Connect server started at"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connect_server_command(port: int) -> list[str]:
    """The command that starts pyspark's Spark Connect server (what the Helm chart runs too)."""
    return [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--name", "spark-connect",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
        "spark-internal",
    ]


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java (java on PATH or JAVA_HOME): cannot start a Spark Connect server")
    folder = tmp_path_factory.mktemp("spark-connect")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR")}
    env.update(SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_DIRS=str(folder))
    log_path = folder / "server.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(connect_server_command(port), cwd=folder, env=env, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while STARTED not in log_path.read_text(errors="replace"):
            if proc.poll() is not None:
                pytest.fail(f"Spark Connect server exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"Spark Connect server not started in 180 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _hoodied(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from hoodied.service.cli.main import cli; cli()", *args],
                          cwd=PROJECT, capture_output=True, text=True, timeout=600)


def _base_files(root: Path, t: str) -> dict[str, list[Path]]:
    """The base files the compaction ``t`` wrote, by file id."""
    files: dict[str, list[Path]] = {}
    for path in sorted(root.rglob(f"*_{t}.parquet")):
        files.setdefault(path.name.split("_", 1)[0], []).append(path)
    return files


def _rows(path: Path) -> pa.Table:
    table = pq.read_table(path)
    return table.drop_columns(["_hoodie_file_name"])


def test_connect_workers_import_the_shipped_packages(connect_url: str) -> None:
    from hoodied.executors.engine import spark_session

    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import importlib

        files = {n: importlib.import_module(f"hoodied.{n}").__file__ for n in ("hoodie", "executors")}
        for _ in batches:
            yield pa.RecordBatch.from_pylist([files])

    with spark_session(connect_url) as session:
        rows = session.range(1).mapInArrow(probe, "hoodie string, executors string").toArrow().to_pylist()
    assert len(rows) == 1
    for module_file in rows[0].values():
        assert "hoodied-packages.zip" in module_file and str(PROJECT) not in module_file


def test_compaction_through_spark_connect_equals_local(tmp_path: Path, connect_url: str) -> None:
    root = tmp_path / "connect"
    written_mor_table(root)
    storage = LocalStorage(str(root))
    settings = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
    inst, result = schedule_compaction(storage, InProcessLock(storage.base_uri), settings,
                                       time_settings=TimeSettings(max_expected_clock_skew_ms=5))
    assert inst is not None, result.reason
    t = inst.requested_time
    local = shutil.copytree(root, tmp_path / "local")
    before = hudi_rs_rows(root)

    via_connect = _hoodied("execute", str(root), "--spark", connect_url, *SKEW)
    assert via_connect.returncode == 0, via_connect.stderr[-3000:]
    assert via_connect.stdout.startswith(f"{t} compaction: "), via_connect.stdout
    via_local = _hoodied("execute", str(local), "--spark", "local[1]", *SKEW)
    assert via_local.returncode == 0, via_local.stderr[-3000:]
    assert via_local.stdout.split(" in ")[0] == via_connect.stdout.split(" in ")[0]

    assert hudi_rs_rows(root) == before == hudi_rs_rows(local) == hudi_rs_rows(root, read_optimized=True)
    connect_files, local_files = _base_files(root, t), _base_files(local, t)
    assert connect_files and connect_files.keys() == local_files.keys()
    for file_id, paths in connect_files.items():
        assert len(paths) == len(local_files[file_id]) == 1
        assert paths[0].parent.relative_to(root) == local_files[file_id][0].parent.relative_to(local)
        assert _rows(paths[0]).equals(_rows(local_files[file_id][0])), file_id
    again = _hoodied("execute", str(root), "--spark", connect_url, "--instant", t, *SKEW)
    assert again.returncode == 0 and "already completed" in again.stdout


def test_progress_through_spark_connect(tmp_path: Path, connect_url: str) -> None:
    from hoodied.executors.engine import spark_session
    from hoodied.service.spark_jobs import run_compaction

    root = tmp_path / "t"
    written_mor_table(root)
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    settings = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
    fast = TimeSettings(max_expected_clock_skew_ms=5)
    inst, result = schedule_compaction(storage, lock, settings, time_settings=fast)
    assert inst is not None, result.reason
    calls: list[tuple[int, int]] = []
    with spark_session(connect_url) as session:
        done = run_compaction(storage, lock, inst.requested_time, session, time_settings=fast,
                              progress=lambda d, n: calls.append((d, n)))
    total = len(done.write_stats)
    assert total >= 3 and calls[-1] == (total, total) and {n for _, n in calls} == {total}
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_clustering_through_spark_connect_equals_local(tmp_path: Path, connect_url: str) -> None:
    """A sorted clustering (merge-on-read slices with log files) on the server and locally: the
    same rows per partition in the same order (file ids are new UUIDs, so files are matched by
    partition)."""
    from hoodied.planners.clustering import ClusteringSettings, schedule_clustering

    root = tmp_path / "connect"
    written_mor_table(root)
    storage = LocalStorage(str(root))
    inst, result = schedule_clustering(storage, InProcessLock(storage.base_uri),
                                       ClusteringSettings(sort_columns=("v", "id")),
                                       time_settings=TimeSettings(max_expected_clock_skew_ms=5))
    assert inst is not None, result.reason
    t = inst.requested_time
    local = shutil.copytree(root, tmp_path / "local")
    before = hudi_rs_rows(root)
    via_connect = _hoodied("execute", str(root), "--spark", connect_url, "--instant", t, *SKEW)
    assert via_connect.returncode == 0, via_connect.stderr[-3000:]
    assert via_connect.stdout.startswith(f"{t} clustering: "), via_connect.stdout
    via_local = _hoodied("execute", str(local), "--spark", "local[1]", "--instant", t, *SKEW)
    assert via_local.returncode == 0, via_local.stderr[-3000:]
    assert hudi_rs_rows(root) == before == hudi_rs_rows(local)

    def by_partition(table_root: Path) -> dict[str, pa.Table]:
        files = sorted(table_root.rglob(f"*_{t}.parquet"))
        assert len(files) == len({p.parent for p in files})  # one new file group per partition
        return {p.parent.name: _rows(p) for p in files}

    ours, theirs = by_partition(root), by_partition(local)
    assert ours.keys() == theirs.keys() and all(ours[k].equals(theirs[k]) for k in ours)
