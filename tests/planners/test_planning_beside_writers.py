"""What a planner checks again under the table lock, where a Hudi writer's own scheduler may have
planned since the daemon last looked (the daemon's poll decides a service is due without the lock).

Compaction re-runs its trigger and, on table version 6, the pending-write ordering rule inside
``plan_compaction`` (``tests/planners/test_compaction_planner.py``); clustering re-runs
``clustering_due`` (none pending, enough commits since the last one) when the daemon hands it the
trigger, as Hudi's ``ClusteringPlanActionExecutor`` does when it schedules.
"""

from __future__ import annotations

from dataclasses import replace

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clustering import ClusteringSettings, clustering_due, schedule_clustering

FAST = TimeSettings(max_expected_clock_skew_ms=5)
FIXTURE = "cow/v9_txns_simple_nometa"


def _pending_clusterings(storage: LocalStorage) -> list[str]:
    timeline = Timeline.load(storage, load_table_config(storage))
    return [i.requested_time for i in timeline.pending((Action.CLUSTERING,))]


def test_clustering_is_not_planned_twice_when_a_writer_planned_one_since_the_poll(hudi_table) -> None:
    storage = LocalStorage(str(hudi_table(FIXTURE)))
    lock = InProcessLock(storage.base_uri)
    poll = Timeline.load(storage, load_table_config(storage))
    assert clustering_due(poll, 1) is not None  # what the daemon saw when it decided to plan
    # meanwhile the writer's own scheduler (async clustering) planned one
    writer_instant, _ = schedule_clustering(storage, lock, time_settings=FAST)
    assert writer_instant is not None
    daemon = replace(ClusteringSettings(), trigger_commits=1)
    inst, result = schedule_clustering(storage, lock, daemon, time_settings=FAST)
    assert inst is None and result.plan is None
    assert "no longer due under the table lock" in result.reason
    assert _pending_clusterings(storage) == [writer_instant.requested_time]


def test_clustering_trigger_is_read_under_the_lock(hudi_table) -> None:
    storage = LocalStorage(str(hudi_table(FIXTURE)))
    lock = InProcessLock(storage.base_uri)
    too_few = replace(ClusteringSettings(), trigger_commits=10_000)
    inst, result = schedule_clustering(storage, lock, too_few, time_settings=FAST)
    assert inst is None and "no longer due" in result.reason and _pending_clusterings(storage) == []
    due = replace(ClusteringSettings(), trigger_commits=1)
    inst, result = schedule_clustering(storage, lock, due, time_settings=FAST)
    assert inst is not None, result.reason
    assert _pending_clusterings(storage) == [inst.requested_time]
