"""Who runs a daemon clean's MDT compaction: the engine's running session, else the daemon's process.

``registry.clean_mdt_runner`` hands a clean ``SparkOperations`` on the ``SparkEngine``'s session
when one is running or being started ahead (``start_in_background``, waited for), and
``run_in_process`` when none was started or the engine is down; it never starts one. The clean
executor itself (``build_registry()``'s, as the daemon's jobs call it) is run end to end on Hudi's
v9 table with an MDT compaction due: with a running session the compaction is one Spark job of one
task per MDT file group; with none, in a fresh process, it runs there, pyspark is never imported
and no child process (no JVM) is started.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hoodied.executors.engine import Session, SparkOperations, spark_session
from hoodied.hoodie.errors import EngineUnavailableError
from hoodied.hoodie.tasks import run_in_process
from hoodied.service.daemon.registry import clean_mdt_runner
from hoodied.service.spark_jobs import EngineState, SparkEngine
from tests.helpers.clean_mdt import compaction_due, last_mdt_compaction, run_daemon_clean
from tests.hoodie.metadata.test_mdt_clean import V9_MOR, _schedule

PROJECT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def spark() -> Iterator[Session]:
    with spark_session("local[2]") as session:
        yield session


@pytest.fixture
def engine() -> Iterator[SparkEngine]:
    engine = SparkEngine(start_timeout_s=30)
    try:
        yield engine
    finally:
        engine.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_no_session_runs_in_process_and_starts_no_jvm(hudi_table) -> None:
    root = hudi_table(V9_MOR)
    compaction_due(root)
    before, _ = last_mdt_compaction(root)
    t, _ = _schedule(root)
    driver = f"""
import json, os, sys
from pathlib import Path
from hoodied.hoodie.tasks import run_in_process
from hoodied.service.daemon.registry import clean_mdt_runner
from hoodied.service.spark_jobs import SparkEngine
from tests.helpers.clean_mdt import run_daemon_clean
engine = SparkEngine(start_timeout_s=30)
session, runner = clean_mdt_runner(engine)
summary = run_daemon_clean(Path({str(root)!r}), engine)
children = []
for entry in os.listdir("/proc"):
    try:
        stat = open(f"/proc/{{entry}}/stat").read() if entry.isdigit() else ""
    except OSError:
        continue
    if stat and int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
        children.append(stat.split("(", 1)[1].rsplit(")", 1)[0])
print(json.dumps({{"in_process": session is None and runner is run_in_process, "state": engine.state,
                  "pyspark": sorted({{m for m in sys.modules if m.split(".")[0] == "pyspark"}}),
                  "children": children, "summary": summary}}))
"""
    env = dict(os.environ, PYTHONPATH=str(PROJECT))
    out = subprocess.run([sys.executable, "-c", driver], env=env, cwd=PROJECT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["in_process"] and got["state"] == EngineState.NOT_STARTED
    assert got["pyspark"] == [] and got["children"] == []
    assert f"{t} clean: " in got["summary"] and "completed" in got["summary"]
    compacted, cells = last_mdt_compaction(root)
    assert compacted > t > before and len(cells) >= 14  # the clean's MDT compaction, in that process


def test_a_running_session_runs_the_mdt_compaction_as_spark_tasks(hudi_table, engine: SparkEngine,
                                                                   spark: Session) -> None:
    assert engine.session("local[2]") is spark  # the daemon's engine, up
    session, runner = clean_mdt_runner(engine)
    assert session is spark and runner == SparkOperations(spark)

    root = hudi_table(V9_MOR)
    compaction_due(root)
    t, _ = _schedule(root)
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup(None))
    summary = run_daemon_clean(root, engine)
    assert f"{t} clean: " in summary and "completed" in summary
    compacted, cells = last_mdt_compaction(root)
    assert compacted > t and len(cells) >= 14
    # the clean's Spark job: one task per MDT file group of the compaction
    tasks = []
    for job_id in set(tracker.getJobIdsForGroup(None)) - jobs_before:
        job = tracker.getJobInfo(job_id)
        assert job is not None
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            assert stage is not None
            tasks.append((stage.numTasks, stage.numCompletedTasks))
    assert tasks == [(len(cells), len(cells))]
    assert engine.state is EngineState.UP


def test_the_start_ahead_is_waited_for(engine: SparkEngine, spark: Session) -> None:
    engine.start_in_background("local[2]")
    session, runner = clean_mdt_runner(engine)  # right away: the start has barely begun
    assert session is spark and runner == SparkOperations(spark)
    assert engine.state is EngineState.UP


def test_a_down_engine_falls_back_to_the_process(engine: SparkEngine,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(EngineUnavailableError):
        engine.session(f"sc://127.0.0.1:{_closed_port()}")
    assert engine.state is EngineState.DOWN
    with caplog.at_level(logging.DEBUG, logger="hoodied.service.daemon.registry"):
        session, runner = clean_mdt_runner(engine)
    assert session is None and runner is run_in_process
    (line,) = [r.getMessage() for r in caplog.records if r.name == "hoodied.service.daemon.registry"]
    assert line.startswith("Spark engine down (Spark Connect sc://127.0.0.1:") and "in this process" in line
