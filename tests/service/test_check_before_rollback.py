"""A failed attempt whose inputs went bad is refused before it is rolled back: the table stays as it was.

An abandoned compaction attempt is made once for the module by kill -9: ``hoodied execute`` on one
core, killed while operation 1 waits after its marker (operation 0's base file and the markers
are on storage, the instant inflight, the heartbeat stale). Each test copies that table, damages
one input of the plan (the plan file itself; a log file the plan reads; a plan version hoodied
does not execute) and runs a real process: ``hoodied execute`` fails with one error line and the
error's exit code, and ``hoodied run --once`` quarantines the table. In every case each file and
folder under the table (``.hoodie/.locks`` aside) is byte for byte what it was before the run:
the failed attempt was not rolled back, nothing was written.

A log compaction's failed attempt (its inflight file without a heartbeat) whose plan names a
log file that is gone is refused the same way.

A clustering attempt (the v9 fixture's completed clustering reopened as a failed attempt: its
completion and output files gone) gets the same treatment with a corrupt plan, an execution
strategy hoodied does not run and an input base file that is gone; so does a failed indexing
attempt (the v8 fixture's indexing derived pending, its inflight file written) with a corrupt plan,
which must not be aborted.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hoodied.hoodie.avro.container import read_single_record, write_single_record
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction
from hoodied.planners.log_compaction import LogCompactionSettings, schedule_log_compaction
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import written_mor_table

PROJECT = Path(__file__).resolve().parents[2]
EVERYTHING = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
EXECUTE_OPTIONS = ["--heartbeat-interval-ms", "100", "--clock-skew-ms", "5"]
NO_PLANNING = {"clean": {"schedule": False}, "compaction": {"schedule": False}}
V9 = "mor/avro/v9_txns_simple_nometa"
CLUSTERING = "20260307135840454"  # completed clustering of the fixture; inflight once reopened
EXIT_CORRUPT, EXIT_UNSUPPORTED = 4, 5


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    env["PYTHONPATH"] = str(PROJECT)
    return env


def _timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def _snapshot(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file (folders as ``dir``), ``.hoodie/.locks`` left out."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if rel.parts[:2] == (".hoodie", ".locks"):
            continue
        out[rel.as_posix()] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _requested(root: Path, t: str) -> Path:
    inst = _timeline(root).get(t)
    assert inst is not None and inst.state is State.INFLIGHT
    return root / ".hoodie" / "timeline" / f"{t}.{inst.action.value}.requested"


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _rewrite_plan(path: Path, schema: str, **changes: Any) -> None:
    plan = read_single_record(path.read_bytes(), str(path))
    plan.update(changes)
    path.write_bytes(write_single_record(plan, schema))


def _execute(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "execute", str(root), "--spark", "local[1]",
         *EXECUTE_OPTIONS],
        cwd=PROJECT, env=_env(), text=True, capture_output=True, timeout=300,
    )


def _run_once(tmp_path: Path, root: Path) -> tuple[int, list[dict[str, Any]]]:
    """``hoodied run --once --table root`` (no planning); its exit code and JSON log events."""
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "spark": {"master": "local[1]"}, "clock_skew_ms": 5, "poll_interval_seconds": 0.2,
        "heartbeat": {"interval_ms": 100, "tolerable_misses": 2}, "log": {"format": "json"},
        "http": "off", "defaults": {"services": NO_PLANNING},
    }))
    proc = subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "run", "--config", str(config), "--once",
         "--table", str(root)],
        cwd=PROJECT, env=_env(), text=True, capture_output=True, timeout=300,
    )
    return proc.returncode, [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]


def _fails_unchanged(root: Path, code: int, message: str) -> None:
    before = _snapshot(root)
    out = _execute(root)
    assert out.returncode == code, out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("hoodied: error: ")]
    assert len(errors) == 1 and message in errors[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert _snapshot(root) == before


def _quarantined_unchanged(tmp_path: Path, root: Path, t: str, message: str) -> None:
    before = _snapshot(root)
    code, events = _run_once(tmp_path, root)
    assert code == 1, events[-5:]
    ended = [(e["action"], e["instant"], e["outcome"]) for e in events if e.get("event") == "job ended"]
    assert ended and ended[-1][1:] == (t, "corrupt"), ended
    quarantined = [e for e in events if str(e.get("event", "")).startswith("table quarantined")]
    assert len(quarantined) == 1 and quarantined[0]["table"] == str(root), events[-5:]
    assert message in json.dumps(quarantined[0]), quarantined[0]
    assert _snapshot(root) == before


# ---------------------------------------------------------------------------- compaction


@pytest.fixture(scope="module")
def abandoned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    """A table with a compaction attempt killed by kill -9 mid-job; its instant and plan."""
    work = tmp_path_factory.mktemp("abandoned")
    root = work / "table"
    written_mor_table(root, 9)
    storage = LocalStorage(str(root))
    inst, result = schedule_compaction(storage, InProcessLock(storage.base_uri), EVERYTHING,
                                       time_settings=TimeSettings(max_expected_clock_skew_ms=5))
    assert inst is not None, result.reason
    t = inst.requested_time
    plan = _timeline(root).read_plan(inst)
    assert plan is not None and len(plan["operations"]) >= 3
    # on one core: operation 0 finishes, operation 1 waits after its marker
    args = ["execute", str(root), "--spark", "local[1]", *EXECUTE_OPTIONS]
    proc = start_paused("from hoodied.service.cli.main import main; main()", args, "task:1",
                        work / "ready", timeout=120)
    first = plan["operations"][0]
    try:
        deadline = time.monotonic() + 60
        while not list((root / first["partitionPath"]).glob(f"{first['fileId']}_*_{t}.parquet")):
            assert time.monotonic() < deadline, "operation 0 never finished"
            time.sleep(0.05)
    finally:
        kill_group(proc)
    assert list((root / ".hoodie" / ".temp" / t).rglob("*.marker.*"))
    time.sleep(0.3)  # the killed driver's heartbeat (100 ms) expires
    return root, t, plan


@pytest.fixture
def table(abandoned: tuple[Path, str, dict[str, Any]], tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "table"
    shutil.copytree(abandoned[0], root, symlinks=True)
    assert _timeline(root).get(abandoned[1]).state is State.INFLIGHT  # type: ignore[union-attr]
    yield root


def _lose_a_log_file(root: Path, plan: dict[str, Any]) -> str:
    op = plan["operations"][-1]
    name: str = op["deltaFilePaths"][0]
    (root / op["partitionPath"] / name).unlink()
    return f"plan names log file {name}, which is missing"


def test_execute_refuses_a_corrupt_compaction_plan_before_the_rollback(
    abandoned: tuple[Path, str, dict[str, Any]], table: Path
) -> None:
    _, t, _ = abandoned
    _truncate(_requested(table, t))
    _fails_unchanged(table, EXIT_CORRUPT, f"{t}.compaction.requested")


def test_execute_refuses_a_plan_whose_log_file_is_missing_before_the_rollback(
    abandoned: tuple[Path, str, dict[str, Any]], table: Path
) -> None:
    _, t, plan = abandoned
    message = _lose_a_log_file(table, plan)
    _fails_unchanged(table, EXIT_CORRUPT, message)


def test_execute_refuses_an_unsupported_plan_version_before_the_rollback(
    abandoned: tuple[Path, str, dict[str, Any]], table: Path
) -> None:
    _, t, _ = abandoned
    _rewrite_plan(_requested(table, t), "HoodieCompactionPlan", version=3)
    _fails_unchanged(table, EXIT_UNSUPPORTED, "compaction plan version 3 is not supported")


def test_the_daemon_quarantines_a_corrupt_compaction_plan_untouched(
    abandoned: tuple[Path, str, dict[str, Any]], table: Path, tmp_path: Path
) -> None:
    _, t, _ = abandoned
    _truncate(_requested(table, t))
    _quarantined_unchanged(tmp_path, table, t, f"{t}.compaction.requested")


def test_the_daemon_quarantines_a_missing_input_file_untouched(
    abandoned: tuple[Path, str, dict[str, Any]], table: Path, tmp_path: Path
) -> None:
    _, t, plan = abandoned
    message = _lose_a_log_file(table, plan)
    _quarantined_unchanged(tmp_path, table, t, message)


# ---------------------------------------------------------------------------- log compaction


def test_execute_refuses_a_log_compaction_with_a_missing_log_file_before_the_rollback(tmp_path: Path) -> None:
    pytest.importorskip("hoodied.executors.log_compaction",
                        reason="the log compaction executor is not installed")
    root = tmp_path / "table"
    written_mor_table(root, 9)
    storage = LocalStorage(str(root))
    inst, result = schedule_log_compaction(storage, InProcessLock(storage.base_uri),
                                           LogCompactionSettings(blocks_threshold=2),
                                           time_settings=TimeSettings(max_expected_clock_skew_ms=5))
    assert inst is not None, result.summary()
    t = inst.requested_time
    (root / ".hoodie" / "timeline" / f"{t}.logcompaction.inflight").write_bytes(b"")  # a failed attempt
    plan = _timeline(root).read_plan(_timeline(root).get(t))  # type: ignore[arg-type]
    assert plan is not None
    message = _lose_a_log_file(root, plan)
    _fails_unchanged(root, EXIT_CORRUPT, message)


# ---------------------------------------------------------------------------- clustering


@pytest.fixture
def clustering(tmp_path: Path) -> Path:
    """The fixture's clustering as a failed attempt: completion file and output files gone."""
    pytest.importorskip("hoodied.executors.clustering", reason="the clustering executor is not installed")
    root = unzip_table(require_fixture(V9), tmp_path / "hudi")
    for f in (root / ".hoodie" / "timeline").glob(f"{CLUSTERING}_*"):
        f.unlink()
    for p in root.rglob(f"*_{CLUSTERING}.parquet"):
        p.unlink()
    return root


def test_execute_refuses_an_unsupported_clustering_strategy_before_the_rollback(clustering: Path) -> None:
    path = _requested(clustering, CLUSTERING)
    plan = read_single_record(path.read_bytes(), str(path))
    strategy = dict(plan["clusteringPlan"]["strategy"], strategyClassName="com.example.MyStrategy")
    _rewrite_plan(path, "HoodieRequestedReplaceMetadata",
                  clusteringPlan=dict(plan["clusteringPlan"], strategy=strategy))
    _fails_unchanged(clustering, EXIT_UNSUPPORTED,
                     "execution strategy com.example.MyStrategy is not supported")


def test_the_daemon_quarantines_a_corrupt_clustering_plan_untouched(clustering: Path, tmp_path: Path) -> None:
    _truncate(_requested(clustering, CLUSTERING))
    _quarantined_unchanged(tmp_path, clustering, CLUSTERING, f"{CLUSTERING}.clustering.requested")


def test_execute_refuses_a_clustering_with_a_missing_input_file_before_the_rollback(clustering: Path) -> None:
    path = _requested(clustering, CLUSTERING)
    plan = read_single_record(path.read_bytes(), str(path))
    info = plan["clusteringPlan"]["inputGroups"][0]["slices"][0]
    base = clustering / info["partitionPath"] / info["dataFilePath"].rsplit("/", 1)[-1]
    assert base.is_file(), base
    base.unlink()
    _fails_unchanged(clustering, EXIT_CORRUPT, base.name)


# ---------------------------------------------------------------------------- indexing


def test_execute_refuses_a_corrupt_indexing_plan_before_the_abort(tmp_path: Path) -> None:
    """A failed indexing attempt (its inflight file, no heartbeat) whose plan went bad is not aborted."""
    from tests.executors.test_indexing import V8, V8_INDEXING, derive_pending

    root = unzip_table(require_fixture(V8), tmp_path / "hudi")
    derive_pending(root, V8_INDEXING, drop_later=True)
    (root / ".hoodie" / "timeline" / f"{V8_INDEXING}.indexing.inflight").write_bytes(b"")
    _truncate(_requested(root, V8_INDEXING))
    _fails_unchanged(root, EXIT_CORRUPT, f"{V8_INDEXING}.indexing.requested")
