"""The clustering planner against Hudi's own plan in the v9 fixtures (field by field)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hoodied.hoodie.fsview import list_storage
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clustering import ClusteringSettings, plan_clustering, schedule_clustering

FAST = TimeSettings(max_expected_clock_skew_ms=5)

CASES = {
    "cow/v9_txns_simple_nometa": ("20260307135709297", "20260307135709890"),
    "mor/avro/v9_txns_simple_nometa": ("20260307135840454", "20260307135840975"),
}


def _rewind(table: Path, instants: tuple[str | None, ...]) -> None:
    """Remove every trace of the given instants: timeline files and the files they wrote."""
    for ts in filter(None, instants):
        for p in list(table.rglob(f"*{ts}*")):
            if p.is_file():
                p.unlink()


def _strip(group: dict, base: str) -> dict:
    out = dict(group)
    out["slices"] = [
        {**s, "dataFilePath": s["dataFilePath"].rsplit("/", 1)[-1] if s["dataFilePath"] else None,
         "deltaFilePaths": [p.rsplit("/", 1)[-1] for p in s["deltaFilePaths"]]}
        for s in group["slices"]
    ]
    return out


@pytest.mark.parametrize("fid", sorted(CASES))
def test_plan_matches_hudi_plan(hudi_table, fid: str) -> None:
    table = hudi_table(fid)
    storage = LocalStorage(str(table))
    config = load_table_config(storage)
    cluster_ts, later = CASES[fid]
    hudi_plan = Timeline.load(storage, config).read_plan(
        next(i for i in Timeline.load(storage, config).instants
             if i.requested_time == cluster_ts and i.action in (Action.CLUSTERING, Action.REPLACE_COMMIT))
    )
    assert hudi_plan is not None
    _rewind(table, (cluster_ts, later))
    timeline = Timeline.load(storage, config)
    mine = plan_clustering(config, timeline, list_storage(storage, config), cluster_ts, storage.base_uri,
                           ClusteringSettings()).plan
    assert mine is not None
    # everything but the groups is identical
    for key in ("operationType", "extraMetadata", "version"):
        assert mine[key] == hudi_plan[key], key
    cp, hp = mine["clusteringPlan"], hudi_plan["clusteringPlan"]
    keys = ("strategy", "extraMetadata", "version", "preserveHoodieMetadata", "missingSchedulePartitions")
    for key in keys:
        assert cp[key] == hp[key], key
    def first_partition(g: dict) -> str:
        return g["slices"][0]["partitionPath"]

    mine_groups = sorted((_strip(g, "") for g in cp["inputGroups"]), key=first_partition)
    hudi_groups = sorted((_strip(g, "") for g in hp["inputGroups"]), key=first_partition)
    assert mine_groups == hudi_groups
    # full paths under this table (Hudi's plan has absolute URIs too)
    assert all(s["dataFilePath"].startswith(storage.base_uri.rstrip("/"))
               for g in cp["inputGroups"] for s in g["slices"])


def test_selected_partitions_and_single_group_rule(hudi_table) -> None:
    table = hudi_table("cow/v9_txns_simple_nometa")
    storage = LocalStorage(str(table))
    config = load_table_config(storage)
    _rewind(table, CASES["cow/v9_txns_simple_nometa"])
    timeline = Timeline.load(storage, config)
    files = list_storage(storage, config)
    only_us = ClusteringSettings(filter_mode="SELECTED_PARTITIONS", begin_partition="region=us",
                                 end_partition="region=us")
    plan = plan_clustering(config, timeline, files, "1", storage.base_uri, only_us).plan
    assert plan is not None
    groups = plan["clusteringPlan"]["inputGroups"]
    assert {s["partitionPath"] for g in groups for s in g["slices"]} == {"region=us"}
    no_single = ClusteringSettings(single_group_clustering=False)
    plan = plan_clustering(config, timeline, files, "1", storage.base_uri, no_single).plan
    assert plan is not None
    assert all(len(g["slices"]) > 1 for g in plan["clusteringPlan"]["inputGroups"])
    sorted_single = ClusteringSettings(single_group_clustering=False, sort_columns=("txn_id",))
    plan = plan_clustering(config, timeline, files, "1", storage.base_uri, sorted_single).plan
    assert plan is not None
    assert any(len(g["slices"]) == 1 for g in plan["clusteringPlan"]["inputGroups"])
    assert plan["clusteringPlan"]["strategy"]["strategyParams"] == {
        "hoodie.clustering.plan.strategy.sort.columns": "txn_id"}


@pytest.mark.parametrize(("fid", "suffix"), [
    ("cow/v9_txns_simple_nometa", ".clustering.requested"),
    ("cow/v6_simplekeygen_nonhivestyle", ".replacecommit.requested"),
])
def test_schedule_writes_requested_plan(hudi_table, fid: str, suffix: str) -> None:
    table = hudi_table(fid)
    storage = LocalStorage(str(table))
    config = load_table_config(storage)
    inst, result = schedule_clustering(storage, InProcessLock(storage.base_uri), time_settings=FAST)
    assert inst is not None and inst.state is State.REQUESTED, result.reason
    names = [p.name for p in table.rglob(f"{inst.requested_time}*")]
    assert names == [inst.requested_time + suffix]
    timeline = Timeline.load(storage, config)
    pending = next(i for i in timeline.instants if i.requested_time == inst.requested_time)
    assert timeline.read_plan(pending) == result.plan
    # the planned file groups are now pending clustering: a second plan skips them
    again = plan_clustering(config, timeline, list_storage(storage, config), "x", storage.base_uri)
    assert again.plan is None
    assert result.plan is not None
    planned = result.plan["clusteringPlan"]["inputGroups"]
    assert len(again.skipped_pending) == sum(len(g["slices"]) for g in planned)
