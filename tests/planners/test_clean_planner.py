"""The clean planner on real tables: hudi-rs reads the same rows after the planned files are gone."""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest

from hoodied.hoodie.fsview import list_storage
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline, instant_time_to_datetime
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.plans import CleanerPlan, CompactionPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.clean import (
    CleanPolicy,
    CleanSettings,
    earliest_commit_to_retain,
    plan_clean,
    planned_files,
)

FAST = TimeSettings(max_expected_clock_skew_ms=5)

TABLES = [
    "cow/v6_simplekeygen_nonhivestyle",
    "cow/v6_simplekeygen_nonhivestyle_overwritetable",
    "mor/parquet/v6_nonpartitioned_rollback",
    "mor/avro/v6_trips_8i1u",
    "cow/v8_simplekeygen_nonhivestyle",
    "cow/v9_txns_simple_nometa",
    "cow/v9_txns_complex_nometa",
    "mor/avro/v9_txns_simple_nometa",
]
SETTINGS = {
    "commits1": CleanSettings(commits_retained=1),
    "commits2": CleanSettings(commits_retained=2),
    "versions1": CleanSettings(policy=CleanPolicy.KEEP_LATEST_FILE_VERSIONS, file_versions_retained=1),
}


def _norm(v: Any) -> Any:
    if isinstance(v, float | decimal.Decimal):
        return ("num", str(v))
    if isinstance(v, dt.datetime):
        return ("ts", v.isoformat())
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        return tuple(_norm(x) for x in v)
    return v


def _rows(root: Path, as_of: str | None = None) -> Counter[Any]:
    options = hudi.HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = hudi.HudiTableBuilder(str(root)).build().read(options)
    if not batches:
        return Counter()
    table = pa.Table.from_batches(batches)
    return Counter(tuple(sorted((k, _norm(v)) for k, v in r.items())) for r in table.to_pylist())


def _open(root: Path) -> tuple[LocalStorage, Any, Timeline]:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    return storage, config, Timeline.load(storage, config)


@pytest.mark.parametrize("name", SETTINGS)
@pytest.mark.parametrize("fid", TABLES)
def test_deleting_the_planned_files_keeps_every_retained_read(hudi_table, fid: str, name: str) -> None:
    root = hudi_table(fid)
    storage, config, timeline = _open(root)
    settings = SETTINGS[name]
    result = plan_clean(storage, config, timeline, list_storage(storage, config), settings)
    if result.plan is None:
        assert result.reason
        return
    ectr = result.earliest_commit_to_retain
    points: list[str | None] = [None]
    if ectr is not None:
        points += [i.requested_time for i in timeline.completed() if i.requested_time >= ectr.requested_time
                   and i.action is not Action.CLEAN]
    before = {p: _rows(root, p) for p in points}
    deleted = [rel for rels in result.files.values() for rel in rels]
    assert deleted and len(deleted) == len(set(deleted))
    base = storage.base_uri
    assert sorted(planned_files(result.plan)) == sorted(f"{base}/{rel}" for rel in deleted)
    for rel in deleted:
        assert not rel.startswith(".hoodie")
        (root / rel).unlink()
    for p in points:
        assert _rows(root, p) == before[p], f"rows as of {p or 'latest'} changed"
    # planning again right away finds nothing more to clean of what it just planned
    storage, config, timeline = _open(root)
    again = plan_clean(storage, config, timeline, list_storage(storage, config), settings)
    assert again.plan is None or not set(deleted) & {r for v in again.files.values() for r in v}


def test_nothing_due_until_more_commits_than_retained(shared_table) -> None:
    storage, config, timeline = _open(shared_table("cow/v9_txns_simple_nometa"))
    n = len([i for i in timeline.completed() if i.action is not Action.CLEAN])
    listing = list_storage(storage, config)
    result = plan_clean(storage, config, timeline, listing, CleanSettings(commits_retained=n))
    assert result.plan is None and "not more than the" in result.reason
    assert earliest_commit_to_retain(timeline, CleanSettings(commits_retained=n), config) is None
    ectr = earliest_commit_to_retain(timeline, CleanSettings(commits_retained=n - 1), config)
    assert ectr is not None and ectr.requested_time == timeline.completed()[1].requested_time


def test_pending_compaction_caps_retention_and_keeps_its_slices(hudi_table) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_nometa")
    folder = root / ".hoodie" / "timeline"
    t = next(folder.glob("*.compaction.requested")).name.split(".")[0]
    next(folder.glob(f"{t}_*")).unlink()  # the compaction is pending again
    storage, config, timeline = _open(root)
    ectr = earliest_commit_to_retain(timeline, CleanSettings(commits_retained=1), config)
    assert ectr is not None and ectr.requested_time < t
    listing = list_storage(storage, config)
    result = plan_clean(storage, config, timeline, listing, CleanSettings(commits_retained=1))
    pending = timeline.get(t)
    assert pending is not None
    plan = timeline.plan(pending)
    assert isinstance(plan, CompactionPlan)
    deleted = {r for v in result.files.values() for r in v}
    for op in plan.operations:
        if op.data_file_path:
            assert f"{op.partition_path}/{op.data_file_path}" not in deleted
        for d in op.delta_file_paths:
            assert f"{op.partition_path}/{d}" not in deleted


def test_savepointed_slices_are_kept(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    storage, config, timeline = _open(root)
    settings = CleanSettings(commits_retained=1)
    first = plan_clean(storage, config, timeline, list_storage(storage, config), settings)
    keep_partition, files = next(iter(first.files.items()))
    keep = files[0].rsplit("/", 1)[-1]
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        t = writer.new_instant_time()
        writer.transition_to_inflight(t, Action.SAVEPOINT)
        writer.complete(t, Action.SAVEPOINT, {
            "savepointedBy": "test", "savepointedAt": 0, "comments": "",
            "partitionMetadata": {
                keep_partition: {"partitionPath": keep_partition, "savepointDataFile": [keep]},
            },
        })
    storage, config, timeline = _open(root)
    second = plan_clean(storage, config, timeline, list_storage(storage, config), settings)
    assert second.plan is not None
    assert f"{keep_partition}/{keep}" not in second.files.get(keep_partition, [])
    assert second.plan["extraMetadata"] == {"savepointed_timestamps": t}


def test_pending_clean_blocks_a_new_plan_and_plans_decode(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    storage, config, timeline = _open(root)
    two = CleanSettings(commits_retained=2)
    result = plan_clean(storage, config, timeline, list_storage(storage, config), two)
    assert result.plan is not None
    lock = InProcessLock(storage.base_uri)
    with lock:
        t = TimelineWriter(storage, config, lock, time_settings=FAST).schedule(Action.CLEAN, result.plan)
    storage, config, timeline = _open(root)
    pending = timeline.get(t.requested_time)
    assert pending is not None
    decoded = timeline.plan(pending)
    assert isinstance(decoded, CleanerPlan)
    assert decoded.policy == "KEEP_LATEST_COMMITS"
    assert decoded.earliest_instant_to_retain is not None
    ectr = result.earliest_commit_to_retain
    assert ectr is not None and decoded.earliest_instant_to_retain.timestamp == ectr.requested_time
    assert sorted(i.file_path for v in decoded.files_to_delete.values() for i in v) == sorted(
        planned_files(result.plan)
    )
    blocked = plan_clean(storage, config, timeline, list_storage(storage, config), two)
    assert blocked.plan is None and f"clean {t.requested_time} is still pending" in blocked.reason


def test_incremental_planning_looks_only_at_partitions_written_since_the_last_clean(hudi_table) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    storage, config, timeline = _open(root)
    writes = [i for i in timeline.completed() if i.action is not Action.CLEAN]
    previous = writes[-2].requested_time  # a clean already retained everything before this one
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        c = writer.schedule(Action.CLEAN, {"policy": "KEEP_LATEST_COMMITS", "version": 2}).requested_time
        writer.transition_to_inflight(c, Action.CLEAN)
        writer.complete(c, Action.CLEAN, {
            "startCleanTime": c, "timeTakenInMillis": 1, "totalFilesDeleted": 0,
            "earliestCommitToRetain": previous, "partitionMetadata": {}, "version": 2,
        })
    storage, config, timeline = _open(root)
    one = CleanSettings(commits_retained=1)
    result = plan_clean(storage, config, timeline, list_storage(storage, config), one)
    md = timeline.read_commit_metadata(writes[-2])
    touched = set(md.get("partitionToWriteStats") or {}) | set(md.get("partitionToReplaceFileIds") or {})
    assert f"incremental since {previous}" in result.reason
    assert set(result.files) <= touched
    full = plan_clean(storage, config, timeline, list_storage(storage, config),
                      CleanSettings(commits_retained=1, incremental=False))
    assert set(full.files) >= set(result.files)


def test_keep_latest_by_hours(shared_table) -> None:
    storage, config, timeline = _open(shared_table("cow/v9_txns_simple_nometa"))
    writes = [i for i in timeline.completed() if i.action is not Action.CLEAN]
    pivot = writes[5].requested_time
    now = instant_time_to_datetime(pivot, config.tzinfo) + dt.timedelta(hours=2)
    settings = CleanSettings(policy=CleanPolicy.KEEP_LATEST_BY_HOURS, hours_retained=2)
    ectr = earliest_commit_to_retain(timeline, settings, config, now=now)
    assert ectr is not None and ectr.requested_time == pivot
    later = now + dt.timedelta(days=1)
    result = plan_clean(storage, config, timeline, list_storage(storage, config), settings, now=later)
    assert result.plan is None and "no completed write instant in the last 2 hours" in result.reason


def test_cli_schedule_clean(hudi_table) -> None:
    from click.testing import CliRunner

    from hoodied.service.cli.schedule import schedule

    root = hudi_table("cow/v9_txns_simple_nometa")
    folder = root / ".hoodie" / "timeline"
    before = sorted(p.name for p in folder.iterdir())
    run = CliRunner().invoke
    dry = run(schedule, ["clean", str(root), "--retained", "2", "--dry-run", "--clock-skew-ms", "5"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith("dry run: KEEP_LATEST_COMMITS: 4 files in 1 partitions")
    assert sorted(p.name for p in folder.iterdir()) == before
    none = run(schedule, ["clean", str(root), "--retained", "50"])
    assert none.exit_code == 0 and none.output.startswith("nothing to clean: ")
    real = run(schedule, ["clean", str(root), "--retained", "2", "--clock-skew-ms", "5"])
    assert real.exit_code == 0, real.output
    t = real.output.split()[0]
    assert real.output.startswith(f"{t} clean requested: KEEP_LATEST_COMMITS: 4 files")
    assert (folder / f"{t}.clean.requested").exists()
    versions = run(schedule, ["clean", str(root), "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1"])
    assert versions.exit_code == 0 and f"clean {t} is still pending" in versions.output


def test_clean_on_a_table_with_an_unmaintained_mdt_partition_is_refused(
    hudi_table,
) -> None:
    from hoodied.hoodie.errors import UnsupportedTableError
    from hoodied.planners.clean import schedule_clean
    from tests.executors.test_clean_executor import add_mdt_partition

    root = hudi_table("cow/v9_txns_simple_meta")
    add_mdt_partition(root, "expr_index_city")
    storage = LocalStorage(str(root))
    before = sorted(p.name for p in (root / ".hoodie" / "timeline").iterdir())
    with pytest.raises(UnsupportedTableError, match="MDT partition expr_index_city is not maintained"):
        schedule_clean(storage, InProcessLock(storage.base_uri), CleanSettings(commits_retained=1))
    assert sorted(p.name for p in (root / ".hoodie" / "timeline").iterdir()) == before
