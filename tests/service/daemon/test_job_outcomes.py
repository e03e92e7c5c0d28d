"""How a job that did nothing ends: an instant completed by another executor is ``already_done``,
never a second ``success`` (``service.daemon.jobs``), and ``hoodied execute`` says so
(``already-completed``, exit 7 with ``--detailed-exit-code``). Real fixture, real clean executor.

An attempt taken over while it was paused ends ``claimed`` whatever its error: the real-process
case (inputs cleaned after the takeover) is in ``tests/executors/test_paused_executor.py``, the
rule itself in ``tests/hoodie/test_fence.py``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from hoodied.executors.clean import execute_clean
from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant
from hoodied.hoodie.timeline.plans import ClusteringPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clean import CleanSettings, schedule_clean
from hoodied.planners.clustering import ClusteringSettings, schedule_clustering
from hoodied.service.cli.exits import EXIT_NOTHING_DUE
from hoodied.service.cli.main import cli
from hoodied.service.config import Policy, load_config
from hoodied.service.daemon.jobs import Job, JobKind, Outcome, execute
from hoodied.service.daemon.registry import Executed, ExecutorSpec, JobContext, build_registry
from hoodied.service.daemon.table_state import TableState, record_outcome
from hoodied.service.spark_jobs import SparkEngine
from tests.executors.test_clustering import _live_row
from tests.helpers.mor_tables import SCHEMA, mor_table_writer

FAST = TimeSettings(max_expected_clock_skew_ms=5)
TABLE = "cow/v9_txns_simple_nometa"


def _pending_clean(root: Path) -> tuple[LocalStorage, Instant]:
    storage = LocalStorage(str(root))
    inst, result = schedule_clean(storage, InProcessLock(storage.base_uri), CleanSettings(commits_retained=1),
                                  time_settings=FAST)
    assert inst is not None, result.summary()
    return storage, inst


def test_an_instant_another_executor_completed_first_is_already_done_not_a_second_success(hudi_table) -> None:
    root = hudi_table(TABLE)
    storage, inst = _pending_clean(root)
    real = build_registry().executor_for(Action.CLEAN)
    assert real is not None
    others: list[str] = []

    def completed_by_another_first(ctx: JobContext) -> Executed:
        # another executor completes the instant after the job's own look at the timeline, before
        # the daemon's executor takes the table lock: it finds it completed there
        other = execute_clean(ctx.storage, ctx.table, InProcessLock(ctx.storage.base_uri),
                              ctx.instant.requested_time, time_settings=FAST)
        others.append(other.summary())
        return real.run(ctx)

    spec = ExecutorSpec(Action.CLEAN, TableService.CLEAN, completed_by_another_first, resumes_inflight=True)
    settings = load_config(overrides={"clock_skew_ms": 5, "http": "off"})
    config = load_table_config(storage)
    job = Job(str(root), storage, config, TableService.CLEAN, "clean", Policy(), instant=inst)
    outcome = execute(job, spec, settings, None, lambda waited: None, SparkEngine())
    assert " files deleted; completed" in others[0]  # the one success
    assert outcome.outcome is Outcome.ALREADY_DONE, outcome
    assert outcome.message == f"{inst.requested_time} clean: already completed, nothing to do"
    state = TableState(str(root), Policy(), "config")
    verdict = record_outcome(state, job, JobKind.EXECUTE, outcome, settings, time.monotonic())
    assert not state.last_success and not state.failures and verdict.quarantine is None


def test_execute_of_a_completed_instant_says_already_completed(hudi_table) -> None:
    root = hudi_table(TABLE)
    storage, inst = _pending_clean(root)
    t = inst.requested_time
    runner = CliRunner()
    done = runner.invoke(cli, ["execute", str(root), "--instant", t, "--clock-skew-ms", "5", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["instants"][0]["status"] == "executed"
    again = runner.invoke(cli, ["execute", str(root), "--instant", t, "--clock-skew-ms", "5", "--json"])
    assert again.exit_code == 0, again.output  # nothing wrong: the instant is done
    report = json.loads(again.stdout)
    assert report["executed"] == 0
    assert report["instants"] == [{"instant": t, "action": "clean", "status": "already-completed",
                                   "message": f"{t} clean: already completed, nothing to do"}]
    detailed = runner.invoke(cli, ["execute", str(root), "--instant", t, "--clock-skew-ms", "5",
                                   "--detailed-exit-code"])
    assert detailed.exit_code == EXIT_NOTHING_DUE, detailed.output
    assert detailed.stdout.strip() == f"{t} clean: already completed, nothing to do"



def _lost_conflict(root: Path, version: int) -> tuple[LocalStorage, Instant, str]:
    """A written merge-on-read table with a clustering planned, then a row of its first file group
    updated by a later write: (the storage, the clustering, that file group)."""
    writer = mor_table_writer(root, version)
    storage = LocalStorage(str(root))
    inst, result = schedule_clustering(storage, InProcessLock(str(root)), ClusteringSettings(),
                                       time_settings=FAST)
    assert inst is not None, result.summary()
    plan = Timeline.load(storage, load_table_config(storage)).plan(inst)
    assert isinstance(plan, ClusteringPlan)
    partition, file_id = sorted(plan.file_groups)[0]
    writer.upsert(pa.Table.from_pylist([_live_row(root, partition, file_id)], schema=SCHEMA))
    return storage, inst, file_id


def test_a_clustering_that_lost_a_write_conflict_ends_dropped_once(tmp_path: Path) -> None:
    """The daemon's clustering job meets a write conflict: the plan is rolled back and removed, the
    job ends ``dropped`` (no failure, no quarantine, no success), and nothing is left to run."""
    root = tmp_path / "table"
    storage, inst, _ = _lost_conflict(root, 9)
    spec = build_registry().executor_for(Action.CLUSTERING)
    assert spec is not None
    settings = load_config(overrides={"clock_skew_ms": 5, "http": "off"})
    job = Job(str(root), storage, load_table_config(storage), TableService.CLUSTERING, "clustering", Policy(),
              instant=inst)
    engine = SparkEngine()
    try:
        outcome = execute(job, spec, settings, None, lambda waited: None, engine)
    finally:
        engine.close()
    assert outcome.outcome is Outcome.DROPPED, outcome
    assert f"clustering {inst.requested_time} dropped" in outcome.message
    assert Timeline.load(storage, load_table_config(storage)).get(inst.requested_time) is None
    state = TableState(str(root), Policy(), "config")
    verdict = record_outcome(state, job, JobKind.EXECUTE, outcome, settings, time.monotonic())
    assert not state.last_success and not state.failures and verdict.quarantine is None


def test_execute_of_a_clustering_that_lost_a_write_conflict_says_dropped(tmp_path: Path) -> None:
    root = tmp_path / "table"
    _, inst, _ = _lost_conflict(root, 8)
    t = inst.requested_time
    skew = ["--clock-skew-ms", "5"]
    done = CliRunner().invoke(cli, ["execute", str(root), *skew, "--json", "--detailed-exit-code"])
    assert done.exit_code == 0, done.output  # a rollback was written: not "nothing due"
    (row,) = [r for r in json.loads(done.stdout)["instants"] if r["instant"] == t]
    assert row["status"] == "dropped" and "changed file group" in row["message"], row
    again = CliRunner().invoke(cli, ["execute", str(root), *skew])
    assert again.exit_code == 0 and again.output.strip() == "nothing pending", again.output
