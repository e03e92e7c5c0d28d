"""The service layer of the Spark table services, without Spark: the runner's table, policies and commands.

``service.spark_jobs`` maps compaction, log compaction and clustering to their executors; the
daemon's registry and ``hoodied execute`` use that one table. Real fixture tables, real files.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hoodied.executors.compaction import execute_compaction
from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.errors import InstantStateError, UnsupportedTableError
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.planners.clustering import ClusteringSettings, clustering_due
from hoodied.service.cli.main import cli
from hoodied.service.config import (
    CLUSTERING_OPTION_KEYS,
    ClusteringService,
    Policy,
    load_config,
)
from hoodied.service.daemon.registry import build_registry
from hoodied.service.spark_jobs import SPARK_SERVICES, SparkService, run_spark_service

V9 = "mor/avro/v9_txns_simple_nometa"
CLUSTERING = "20260307135840454"  # clustering -> replacecommit, followed by one delta commit
OVERWRITE = "20260307135837782"  # an insert-overwrite replacecommit: not a clustering
COMPACTION = "20260307135839895"
SKEW = ["--clock-skew-ms", "5"]


def _timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _reopen(root: Path, t: str) -> None:
    """The completed service ``t`` becomes pending (inflight): its completion file goes."""
    for f in (root / ".hoodie" / "timeline").glob(f"{t}_*"):
        f.unlink()


def test_every_spark_service_has_its_action_and_an_executor_with_the_compaction_signature() -> None:
    assert set(SPARK_SERVICES) == {"compaction", "log_compaction", "clustering", "indexing"}
    want = inspect.signature(execute_compaction).parameters
    registry = build_registry()
    for name, spec in SPARK_SERVICES.items():
        assert spec.action is TableService(name).action
        if not spec.available():  # being written: its instants wait, it is never planned
            assert registry.executor_for(spec.action) is None and name not in registry.planners
            continue
        got = inspect.signature(spec.executor()).parameters
        assert list(got)[:5] == list(want)[:5], name
        assert {"time_settings", "heartbeat_interval_ms", "tolerable_misses", "progress"} <= set(got), name
        # the input check run before any rollback: (storage, config, timeline, instant)
        assert list(inspect.signature(spec.check()).parameters)[:4] == [
            "storage", "config", "timeline", "inst"], name
        executor = registry.executor_for(spec.action)
        assert executor is not None, name
        assert not executor.resumes_inflight  # rolled back first
    assert SPARK_SERVICES[TableService.COMPACTION].available()
    assert {"clean", "compaction"} <= set(registry.planners)


def test_an_executor_that_is_not_installed_is_unsupported_not_a_crash() -> None:
    missing = SparkService(TableService.CLUSTERING, "hoodied.executors.no_such_service", "execute_clustering",
                           "check_clustering")
    assert not missing.available()
    with pytest.raises(UnsupportedTableError, match="clustering: no executor in this build"):
        missing.executor()
    with pytest.raises(UnsupportedTableError, match="clustering: no executor in this build"):
        missing.check()


def test_the_runner_refuses_an_instant_of_another_service_and_changes_nothing(hudi_table) -> None:
    root = hudi_table(V9)
    _reopen(root, CLUSTERING)
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    before = _files(root)
    reopened = _timeline(root).get(CLUSTERING)
    assert reopened is not None and reopened.state is State.INFLIGHT
    with pytest.raises(InstantStateError, match=f"no compaction instant {CLUSTERING}"):
        run_spark_service(storage, lock, CLUSTERING, None, service=TableService.COMPACTION)
    with pytest.raises(InstantStateError, match=f"no log compaction instant {CLUSTERING}"):
        run_spark_service(storage, lock, CLUSTERING, None, service=TableService.LOG_COMPACTION)
    # an insert-overwrite replacecommit is no clustering, whatever its action says
    with pytest.raises(InstantStateError, match=f"no Spark table service instant {OVERWRITE}"):
        run_spark_service(storage, lock, OVERWRITE, None)
    with pytest.raises(InstantStateError, match="no clustering instant 20990101000000000"):
        run_spark_service(storage, lock, "20990101000000000", None, service=TableService.CLUSTERING)
    assert _files(root) == before


def test_clustering_is_due_after_trigger_commits_since_the_last_clustering(shared_table, hudi_table) -> None:
    timeline = _timeline(shared_table(V9))

    def policy(commits: int) -> int:  # the daemon's policy, as the trigger takes it
        policy = Policy.model_validate({"services": {"clustering": {"trigger_commits": commits}}})
        return policy.services.clustering.trigger_commits

    # one delta commit after the clustering; the insert-overwrite before it does not reset the count
    assert clustering_due(timeline, policy(1)) == "1 completed commits since the last clustering (trigger 1)"
    assert clustering_due(timeline, policy(2)) is None
    root = hudi_table(V9)
    _reopen(root, CLUSTERING)
    assert clustering_due(_timeline(root), policy(1)) is None  # a clustering is pending
    for f in (root / ".hoodie" / "timeline").glob(f"{CLUSTERING}.*"):
        f.unlink()  # no clustering ever: every completed commit counts (10 delta commits, the
    # insert-overwrite and the compaction's commit)
    assert clustering_due(_timeline(root), policy(12)) == "12 completed commits since the last clustering " \
                                                          "(trigger 12)"
    assert clustering_due(_timeline(root), policy(13)) is None


def test_the_clustering_policy_maps_to_hudi_plan_strategy_options(tmp_path: Path) -> None:
    assert ClusteringService().settings() == ClusteringSettings()  # Hudi's defaults, one source
    assert set(ClusteringService().options()) == set(CLUSTERING_OPTION_KEYS.values())
    chosen = ClusteringService.from_options({
        "hoodie.clustering.plan.strategy.small.file.limit": "1000",
        "hoodie.clustering.plan.strategy.max.num.groups": "2",
        "hoodie.clustering.plan.strategy.sort.columns": "city, ts",
        "hoodie.clustering.plan.strategy.single.group.clustering.enabled": "false",
    })
    assert chosen.settings() == ClusteringSettings(small_file_limit=1000, max_num_groups=2,
                                                   sort_columns=("city", "ts"), single_group_clustering=False)
    assert ClusteringService.from_options(chosen.options()) == chosen
    with pytest.raises(ValueError, match="hoodie.clustering.async.max.commits: not a clustering plan option"):
        ClusteringService.from_options({"hoodie.clustering.async.max.commits": "2"})
    with pytest.raises(ValueError, match="hoodie.clustering.plan.strategy.max.num.groups=0: "):
        ClusteringService.from_options({"hoodie.clustering.plan.strategy.max.num.groups": "0"})
    f = tmp_path / "hoodied.yaml"
    f.write_text(yaml.safe_dump({"defaults": {"services": {"clustering": {
        "schedule": True, "sort_columns": "city", "target_file_max_bytes": 4096}}}}))
    settings = load_config(f)
    clustering = settings.defaults.services.clustering
    assert clustering.settings() == ClusteringSettings(sort_columns=("city",), target_file_max_bytes=4096)
    # planning log compaction and clustering is off by default, as in Hudi
    assert not load_config().defaults.services.clustering.schedule
    assert not load_config().defaults.services.log_compaction.schedule


def test_schedule_clustering_plans_with_hudi_options_and_refuses_unknown_ones(hudi_table) -> None:
    root = hudi_table(V9)
    before = _files(root)
    runner = CliRunner()
    nope = "hoodie.clustering.plan.strategy.nope=1"
    bad = runner.invoke(cli, ["schedule", "clustering", str(root), "-o", nope])
    assert bad.exit_code == 2 and "not a clustering plan option" in bad.stderr
    dry = runner.invoke(cli, ["schedule", "clustering", str(root), "--dry-run", *SKEW])
    assert dry.exit_code == 0, dry.stderr
    assert dry.stdout.startswith("dry run: ") and "clustering group" in dry.stdout
    # nothing written but the table lock's own files (planning reads the timeline under the lock)
    assert {k: v for k, v in _files(root).items() if not k.startswith(".hoodie/.locks/")} == before
    done = runner.invoke(cli, ["schedule", "clustering", str(root), "-o",
                               "hoodie.clustering.plan.strategy.max.num.groups=1", *SKEW])
    assert done.exit_code == 0, done.stderr
    t = done.stdout.split()[0]
    assert done.stdout.startswith(f"{t} clustering requested: "), done.stdout
    inst = _timeline(root).get(t)
    assert inst is not None and inst.action is Action.CLUSTERING and inst.state is State.REQUESTED
    plan = _timeline(root).read_plan(inst)
    assert plan is not None and len(plan["clusteringPlan"]["inputGroups"]) == 1
