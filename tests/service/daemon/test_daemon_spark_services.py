"""The daemon and ``hoodied execute`` run log compactions and clusterings (real processes, real Spark local).

Each run is a subprocess with its own Spark session (see ``test_daemon_compaction``). The tests
need the executors (``executors.log_compaction``, ``executors.clustering``) and skip, saying so,
while one is not installed. What they check: the pending instant is executed exactly once (one
successful job, one completed instant, a failed attempt rolled back once), it completes under
Hudi's name (log compaction: deltacommit, clustering: replacecommit), and hudi-rs reads the same
rows before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.rollback import schedule_rollback
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, written_mor_table

PROJECT = Path(__file__).resolve().parents[3]
V9 = "mor/avro/v9_txns_simple_nometa"
CLUSTERING = "20260307135840454"  # completed clustering of the fixture; inflight once reopened
NO_PLANNING = {"clean": {"schedule": False}, "compaction": {"schedule": False}}


def _timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    env["PYTHONPATH"] = str(PROJECT)
    return env


def _run_once(tmp_path: Path, tables: list[Path], services: dict[str, Any]) -> list[dict[str, Any]]:
    """``hoodied run --once`` on ``tables``; the ``job ended`` log events."""
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "spark": {"master": "local[2]"}, "clock_skew_ms": 5, "poll_interval_seconds": 0.2,
        "heartbeat": {"interval_ms": 500, "tolerable_misses": 2}, "log": {"format": "json"},
        "http": "off", "defaults": {"services": services},
    }))
    args = [a for t in tables for a in ("--table", str(t))]
    proc = subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "run", "--config", str(config),
         "--once", *args],
        cwd=PROJECT, env=_env(), text=True, capture_output=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    return [e for e in events if e.get("event") == "job ended"]


def _reopen_clustering(root: Path) -> None:
    """The fixture's clustering becomes a failed attempt: completion file and output files gone."""
    for f in (root / ".hoodie" / "timeline").glob(f"{CLUSTERING}_*"):
        f.unlink()
    outputs = list(root.rglob(f"*_{CLUSTERING}.parquet"))
    assert len(outputs) == 3
    for p in outputs:
        p.unlink()


def test_the_daemon_executes_a_failed_clustering_once_after_rolling_it_back(tmp_path: Path) -> None:
    pytest.importorskip("hoodied.executors.clustering", reason="the clustering executor is not installed")
    root = unzip_table(require_fixture(V9), tmp_path / "hudi")
    rows = hudi_rs_rows(root)
    _reopen_clustering(root)
    assert _timeline(root).get(CLUSTERING).is_pending  # type: ignore[union-attr]

    ended = _run_once(tmp_path, [root], NO_PLANNING)
    jobs = [(e["kind"], e["action"], e["instant"], e["outcome"]) for e in ended]
    assert jobs == [("execute", "clustering", CLUSTERING, "success")], jobs

    timeline = _timeline(root)
    done = timeline.get(CLUSTERING)
    assert done is not None and done.is_completed and done.file_action is Action.REPLACE_COMMIT
    assert timeline.is_clustering(done)
    rollbacks = timeline.completed((Action.ROLLBACK,))
    assert [timeline.read_commit_metadata(r)["commitsRollback"] for r in rollbacks] == [[CLUSTERING]]
    assert hudi_rs_rows(root) == rows
    # a second pass finds nothing to do: executed exactly once
    assert _run_once(tmp_path, [root], NO_PLANNING) == []
    assert len(_timeline(root).completed((Action.ROLLBACK,))) == 1


def test_hoodied_execute_runs_a_pending_clustering_through_the_same_runner(tmp_path: Path) -> None:
    pytest.importorskip("hoodied.executors.clustering", reason="the clustering executor is not installed")
    root = unzip_table(require_fixture(V9), tmp_path / "hudi")
    rows = hudi_rs_rows(root)
    _reopen_clustering(root)
    # an earlier run died after planning the rollback of the failed attempt: the runner finishes it
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, load_table_config(storage), lock,
                                time_settings=TimeSettings(max_expected_clock_skew_ms=5))
        rollback = schedule_rollback(writer, _timeline(root), _timeline(root).get(CLUSTERING))  # type: ignore[arg-type]
    proc = subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "execute", str(root),
         "--spark", "local[2]", "--heartbeat-interval-ms", "500", "--clock-skew-ms", "5"],
        cwd=PROJECT, env=_env(), text=True, capture_output=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = proc.stdout.splitlines()  # the rollback it finished is not reported as pending
    assert CLUSTERING in line and "clustering" in line, line
    timeline = _timeline(root)
    done = timeline.get(CLUSTERING)
    assert done is not None and done.is_completed
    assert [r.requested_time for r in timeline.completed((Action.ROLLBACK,))] == [rollback.requested_time]
    assert hudi_rs_rows(root) == rows


def test_the_daemon_plans_and_executes_one_log_compaction(tmp_path: Path) -> None:
    pytest.importorskip("hoodied.executors.log_compaction",
                        reason="the log compaction executor is not installed")
    pytest.importorskip("hoodied.planners.log_compaction",
                        reason="the log compaction planner is not installed")
    root = tmp_path / "written"
    written_mor_table(root)  # file groups with several log blocks each
    rows = hudi_rs_rows(root)
    services = {**NO_PLANNING, "log_compaction": {"schedule": True, "blocks_threshold": 2}}

    ended = _run_once(tmp_path, [root], services)
    jobs = [(e["kind"], e["action"], e["outcome"]) for e in ended]
    assert ("plan", "logcompaction", "planned") in jobs, jobs
    assert jobs.count(("execute", "logcompaction", "success")) == 1, jobs
    assert not [j for j in jobs if j[2] not in ("planned", "success", "nothing_due")], jobs

    timeline = _timeline(root)
    (log_compaction,) = [i for i in timeline.instants if i.action is Action.LOG_COMPACTION]
    assert log_compaction.is_completed and log_compaction.file_action is Action.DELTA_COMMIT
    executed = [e for e in ended if e["kind"] == "execute"]
    assert [e["instant"] for e in executed] == [log_compaction.requested_time]
    assert hudi_rs_rows(root) == rows
