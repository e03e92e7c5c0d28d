"""The archival planner decides as Hudi's ``TimelineArchiverV2``: each boundary, with its reason.

Tables are real (``hoodie.demo.writer``, and Hudi-written fixtures for replacecommits,
clusterings and metadata tables); expected instants are derived from Hudi's rules in each test.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hoodied.executors.clean import execute_clean
from hoodied.executors.rollback import execute_rollback
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import TableConfig, TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.archival import (
    ArchivalPlan,
    ArchivalSettings,
    MdtState,
    StopReason,
    mdt_state,
    plan_archival,
)
from hoodied.planners.clean import CleanPolicy, CleanSettings, schedule_clean
from hoodied.planners.compaction import TriggerStrategy
from hoodied.planners.rollback import schedule_rollback
from tests.executors.test_archival import (
    FAST,
    Built,
    add_clean,
    add_pending_compaction,
    add_savepoint,
    new_table,
    write_commits,
)


def _load(root: Path) -> tuple[Timeline, TableConfig]:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    return Timeline.load(storage, config), config


def plan(root: Path, mdt: MdtState | None = None, **settings: object) -> ArchivalPlan:
    timeline, config = _load(root)
    return plan_archival(timeline, config, ArchivalSettings(**settings), mdt)  # type: ignore[arg-type]


def times(p: ArchivalPlan) -> list[str]:
    return [i.requested_time for i in p.instants]


@pytest.fixture
def cow40(tmp_path: Path) -> Built:
    built = new_table(tmp_path / "t", 9, TableType.COPY_ON_WRITE)
    write_commits(built, 40)
    return built


def test_nothing_until_more_than_max_commits(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 8, TableType.COPY_ON_WRITE)
    write_commits(built, 30)
    p = plan(built.root)
    assert p.instants == [] and p.stop.reason is StopReason.NOT_ENOUGH_COMMITS
    write_commits(built, 1)  # 31 > keep.max 30: all but keep.min 20 go
    p = plan(built.root)
    assert times(p) == built.commits[:11]
    assert p.stop.reason is StopReason.MIN_COMMITS_TO_KEEP and p.stop.instant == built.commits[11]


def test_earliest_pending_write_keeps_the_commit_before_it(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 9, TableType.COPY_ON_WRITE)
    write_commits(built, 20)
    storage = LocalStorage(str(built.root))
    lock = InProcessLock(storage.base_uri)
    with lock:
        pending = TimelineWriter(storage, load_table_config(storage), lock, time_settings=FAST).schedule(
            Action.COMMIT, None
        )
    built.writer.clock.observe(pending.requested_time)
    write_commits(built, 20)
    # the cleaner's ECTR cannot pass the pending commit either: it is commits[19], 20 commits
    # after it, so keep.min becomes 22 and 18 go
    p = plan(built.root)
    assert (p.min_to_keep, len(p.instants)) == (22, 18) and p.stop.reason is StopReason.MIN_COMMITS_TO_KEEP
    # a cleaner by file versions has no ECTR: 40 - 20 may go, but the last completed commit
    # before the pending one stays
    p = plan(built.root, clean_policy=CleanPolicy.KEEP_LATEST_FILE_VERSIONS)
    assert times(p) == built.commits[:19]
    assert p.stop.reason is StopReason.EARLIEST_PENDING_WRITE and p.stop.instant == built.commits[19]
    assert pending.requested_time in p.stop.detail


def test_savepoint_stops_archival_unless_beyond_savepoint(cow40: Built) -> None:
    add_savepoint(cow40, cow40.commits[5])
    p = plan(cow40.root)
    assert times(p) == cow40.commits[:5]
    assert p.stop.reason is StopReason.SAVEPOINT and p.stop.instant == cow40.commits[5]
    # beyond the savepoint: the savepointed commit stays, 20 others go
    p = plan(cow40.root, beyond_savepoint=True)
    assert times(p) == cow40.commits[:5] + cow40.commits[6:21]
    assert all(i.action is not Action.SAVEPOINT for i in p.instants)


def test_cleaner_retention_raises_min_and_max(cow40: Built) -> None:
    # KEEP_LATEST_COMMITS 25: the ECTR is the 25th newest commit, 24 commits after it: min = 24 + 2
    # = 26 (> 20), max = 26 + (30 - 20) = 36; 40 > 36, so 40 - 26 = 14 go
    p = plan(cow40.root, clean_commits_retained=25)
    assert (p.min_to_keep, p.max_to_keep) == (26, 36)
    assert times(p) == cow40.commits[:14]
    # the default retention (10) leaves min/max alone
    p = plan(cow40.root)
    assert (p.min_to_keep, p.max_to_keep) == (20, 30) and len(p.instants) == 20


def test_compaction_trigger_keeps_delta_commits(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 9, TableType.MERGE_ON_READ)
    write_commits(built, 40)
    # no compaction yet, 40 delta commits >= 25: the 25 newest stay for the trigger to count
    p = plan(built.root, compaction_max_delta_commits=25)
    assert times(p) == built.commits[:15]
    assert p.stop.reason is StopReason.COMPACTION_DELTA_COMMITS and p.stop.instant == built.commits[15]
    # a time-based trigger does not count delta commits
    p = plan(built.root, compaction_max_delta_commits=25, compaction_trigger=TriggerStrategy.TIME_ELAPSED)
    assert len(p.instants) == 20 and p.stop.reason is StopReason.MIN_COMMITS_TO_KEEP


def test_replacecommit_waits_for_a_clean(hudi_table) -> None:
    """A Hudi-written COW table: commits, an insert-overwrite replacecommit, a clustering."""
    root = hudi_table("cow/v9_txns_simple_nometa")
    timeline, _ = _load(root)
    replaces = [i for i in timeline.instants if i.action in (Action.REPLACE_COMMIT, Action.CLUSTERING)]
    commits = [i.requested_time for i in timeline.completed()]
    # keep 1..2, cleaner retention 1 (min becomes 0 + 2 = 2, max 3): 12 commits, 10 may go; no
    # clean yet, so archival stops at the first replacecommit
    p = plan(root, min_commits=1, max_commits=2, clean_commits_retained=1)
    assert p.stop.reason is StopReason.CLUSTERING_NOT_CLEANED
    assert p.stop.instant == replaces[0].requested_time
    assert times(p) == [t for t in commits if t < replaces[0].requested_time]

    # after a clean, only replacecommits at or after the clean's earliest commit to retain block
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    inst, result = schedule_clean(storage, lock, CleanSettings(commits_retained=2), time_settings=FAST)
    assert inst is not None, result.reason
    execute_clean(storage, load_table_config(storage), lock, inst.requested_time, time_settings=FAST)
    timeline, _ = _load(root)
    ectr = timeline.read_plan(timeline.get(inst.requested_time))["earliestInstantToRetain"]["timestamp"]  # type: ignore[arg-type,index]
    blocking = next(i.requested_time for i in replaces if i.requested_time >= ectr)
    p = plan(root, min_commits=1, max_commits=2, clean_commits_retained=1)
    clustering = next(b for b in p.boundaries if b.reason is StopReason.CLUSTERING_NOT_CLEANED)
    assert clustering.instant == blocking and inst.requested_time in clustering.detail
    assert p.instants and all(i.requested_time < blocking for i in p.instants)
    assert replaces[0].requested_time in times(p)  # the cleaned insert-overwrite can go now
    # the clean itself stays: it was requested after the last commit archived
    assert inst.requested_time not in times(p)


def test_metadata_table_compaction_bounds_archival(hudi_table) -> None:
    """A Hudi-written v8 MOR table with a metadata table and a completed MDT compaction."""
    root = hudi_table("mor/avro/v8_trips_8i3u1d")
    storage = LocalStorage(str(root))
    timeline, config = _load(root)
    mdt = mdt_state(storage, config)
    assert mdt is not None and mdt.latest_compaction is not None
    commits = timeline.completed(WRITE_ACTIONS)  # the indexing instant is no commit
    first_after = next(c for c in commits if (c.completion_time or "") > mdt.latest_compaction)
    loose = {
        "min_commits": 1,
        "max_commits": 2,
        "clean_commits_retained": 1,
        "compaction_trigger": TriggerStrategy.TIME_ELAPSED,
    }
    p = plan(root, mdt, **loose)
    boundary = next(b for b in p.boundaries if b.reason is StopReason.MDT_COMPACTION)
    assert boundary.instant == first_after.requested_time and mdt.latest_compaction in boundary.detail
    # here keep.min binds first (7 commits, keep 2); as of an MDT compacted after the third
    # commit completed, the fourth commit is the first it has not compacted, and archival stops there
    earlier = MdtState(commits[2].completion_time)
    p = plan(root, earlier, **loose)
    assert p.stop.reason is StopReason.MDT_COMPACTION and p.stop.instant == commits[3].requested_time
    assert times(p) == [c.requested_time for c in commits[:3]]
    # no MDT compaction yet: nothing at all
    p = plan(root, MdtState(None), **loose)
    assert p.instants == [] and p.stop.reason is StopReason.NO_MDT_COMPACTION
    # hoodie.metadata.enable=false: the metadata table does not bound archival
    p = plan(root, MdtState(None), metadata_enabled=False, **loose)
    assert all(b.reason is not StopReason.NO_MDT_COMPACTION for b in p.boundaries)
    assert len(p.instants) > 0


# ---------------------------------------------------------------------------- table version 6 (Hudi 0.15)


def rollback_attempt(built: Built, compaction: str) -> str:
    """Start ``compaction`` (inflight) and roll the failed attempt back; the rollback's time."""
    storage = LocalStorage(str(built.root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, config, lock, time_settings=FAST)
        target = writer.transition_to_inflight(compaction, Action.COMPACTION)
        rollback = schedule_rollback(writer, Timeline.load(storage, config), target)
        done = execute_rollback(writer, rollback.requested_time)
    built.writer.clock.observe(done.rollback.completion_time or done.rollback.requested_time)
    return rollback.requested_time


def test_v6_cleans_are_archived_on_their_own(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 6, TableType.COPY_ON_WRITE)
    write_commits(built, 2)
    add_savepoint(built, built.commits[0])
    cleans = []
    for _ in range(4):
        write_commits(built, 2)
        cleans.append(add_clean(built))
    p = plan(built.root, min_commits=2, max_commits=3, clean_commits_retained=1)
    # no commit may go (the first one is savepointed), yet 4 cleans > keep.max 3: the oldest
    # 4 - 2 go (getCleanInstantsToArchive)
    assert times(p) == cleans[:2]
    assert p.stop.reason is StopReason.SAVEPOINT and p.stop.instant == built.commits[0]
    # Hudi 1.x would archive no clean here: it takes cleans only with the commits they precede
    timeline, config = _load(built.root)
    v9 = replace(config, version=9, timeline_layout=2)
    v9_plan = plan_archival(timeline, v9, ArchivalSettings(2, 3, clean_commits_retained=1))
    assert v9_plan.instants == [] and v9_plan.stop.reason is StopReason.SAVEPOINT


def test_v6_rollbacks_are_archived_on_their_own(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 6, TableType.MERGE_ON_READ)
    write_commits(built, 4)
    compaction = add_pending_compaction(built)
    rollbacks = [rollback_attempt(built, compaction) for _ in range(4)]
    p = plan(built.root, min_commits=2, max_commits=3, clean_commits_retained=1)
    # the commits stay (fewer delta commits than the compaction trigger counts), but 4 rollbacks
    # > keep.max 3: the oldest 4 - 2 go, on their own
    assert times(p) == rollbacks[:2]
    assert p.stop.reason is StopReason.COMPACTION_DELTA_COMMITS


def test_v6_inflight_replacecommit_keeps_the_commit_before_it(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 6, TableType.COPY_ON_WRITE)
    write_commits(built, 10)
    storage = LocalStorage(str(built.root))
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, load_table_config(storage), lock, time_settings=FAST)
        pending = writer.schedule(Action.REPLACE_COMMIT, None)
    built.writer.clock.observe(pending.requested_time)
    write_commits(built, 30)
    by_versions = CleanPolicy.KEEP_LATEST_FILE_VERSIONS  # no ECTR to raise keep.min
    # requested only: 0.x's filterInflights does not see it; the pending write and the
    # not-yet-cleaned replacecommit bound archival
    p = plan(built.root, clean_policy=by_versions)
    assert times(p) == built.commits[:9]
    reasons = {b.reason: b.instant for b in p.boundaries}
    assert reasons[StopReason.EARLIEST_PENDING_WRITE] == built.commits[9]
    assert reasons[StopReason.CLUSTERING_NOT_CLEANED] == pending.requested_time
    assert StopReason.PENDING_REPLACE not in reasons
    with lock:
        writer.transition_to_inflight(pending.requested_time, Action.REPLACE_COMMIT)
    p = plan(built.root, clean_policy=by_versions)
    assert times(p) == built.commits[:9]
    replace_boundary = next(b for b in p.boundaries if b.reason is StopReason.PENDING_REPLACE)
    assert replace_boundary.instant == built.commits[9] and pending.requested_time in replace_boundary.detail


def test_v6_cleaner_retention_ignores_a_pending_compaction(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 6, TableType.MERGE_ON_READ)
    write_commits(built, 10)
    compaction = add_pending_compaction(built)
    write_commits(built, 30)
    # 0.x takes the cleaner's ECTR on the commits timeline, which has no pending compaction: the
    # 10th newest commit, 9 after it, keep.min stays 20. Archival stops at the commit before the
    # pending compaction (the earliest pending write)
    p = plan(built.root)
    assert (p.min_to_keep, p.max_to_keep) == (20, 30)
    assert times(p) == built.commits[:9]
    assert p.stop.reason is StopReason.EARLIEST_PENDING_WRITE and compaction in p.stop.detail
    # Hudi 1.x's ECTR stops at the pending compaction: 30 commits after commits[9], keep.min 32
    timeline, config = _load(built.root)
    v9 = plan_archival(timeline, replace(config, version=9, timeline_layout=2), ArchivalSettings())
    assert v9.min_to_keep == 32 and v9.instants == []


def test_v6_metadata_table_bound_compares_requested_times(tmp_path: Path) -> None:
    built = new_table(tmp_path / "t", 6, TableType.COPY_ON_WRITE)
    write_commits(built, 40)
    # getLatestCompactionTime: only instants requested before the MDT's latest compaction go
    p = plan(built.root, MdtState(built.commits[5]))
    assert times(p) == built.commits[:5]
    assert p.stop.reason is StopReason.MDT_COMPACTION and p.stop.instant == built.commits[5]
    p = plan(built.root, MdtState(None))
    assert p.instants == [] and p.stop.reason is StopReason.NO_MDT_COMPACTION
    p = plan(built.root, MdtState(None), metadata_enabled=False)
    assert times(p) == built.commits[:20]


def test_v6_hudi_table_with_a_replacecommit(shared_table) -> None:
    """Hudi-written: two commits and an insert-overwrite-table replacecommit, no clean."""
    root = shared_table("cow/v6_simplekeygen_nonhivestyle_overwritetable")
    timeline, _ = _load(root)
    commits = [i.requested_time for i in timeline.completed()]
    # the cleaner's ECTR (retaining 1) would raise keep.min to 2 and keep.max to 3: nothing goes
    p = plan(root, min_commits=1, max_commits=2, clean_commits_retained=1)
    assert p.instants == [] and p.stop.reason is StopReason.NOT_ENOUGH_COMMITS
    # by file versions (no ECTR): 3 commits > 2; no clean yet, so the replacecommit stays
    p = plan(root, min_commits=1, max_commits=2, clean_policy=CleanPolicy.KEEP_LATEST_FILE_VERSIONS)
    assert times(p) == commits[:2]
    # (keep.min 1 stops it at the same place)
    clustering = next(b for b in p.boundaries if b.reason is StopReason.CLUSTERING_NOT_CLEANED)
    assert clustering.instant == commits[2] and p.stop.instant == commits[2]


def test_settings_from_hudi_keys() -> None:
    s = ArchivalSettings.from_options(
        {
            "hoodie.keep.min.commits": "3",
            "hoodie.keep.max.commits": "4",
            "hoodie.archive.beyond.savepoint": "TRUE",
            "hoodie.clean.policy": "keep_latest_by_hours",
            "hoodie.compact.inline.trigger.strategy": "num_and_time",
        }
    )
    assert (s.min_commits, s.max_commits, s.beyond_savepoint) == (3, 4, True)
    assert s.compaction_trigger is TriggerStrategy.NUM_AND_TIME
    assert s.options()["hoodie.keep.max.commits"] == "4"
    with pytest.raises(ValueError, match="not an archival option"):
        ArchivalSettings.from_options({"hoodie.keep.many": "1"})
    with pytest.raises(ValueError, match="hoodie.archive.beyond.savepoint=yes"):
        ArchivalSettings.from_options({"hoodie.archive.beyond.savepoint": "yes"})
    with pytest.raises(ValueError, match="greater than"):
        ArchivalSettings.from_options({"hoodie.keep.min.commits": "30"})
    v6 = ArchivalSettings.from_options(
        {"hoodie.commits.archival.batch.size": "7", "hoodie.archive.merge.enable": "false"}
    )
    assert (v6.archival_batch_size, v6.merge_small_files) == (7, False)
    with pytest.raises(ValueError, match="merging small archive files is not supported"):
        ArchivalSettings.from_options({"hoodie.archive.merge.enable": "true"})
    with pytest.raises(ValueError, match="at least 1"):
        ArchivalSettings.from_options({"hoodie.commits.archival.batch.size": "0"})


def test_settings_under_hudis_other_key_names() -> None:
    """Hudi 0.14-1.0 writers name the cleaner's keys hoodie.cleaner.*, Hudi 1.1 hoodie.clean.* (the old
    names its alternatives): both are taken, and given both ways 1.1's wins (HoodieConfig.getRawValue)."""
    older = ArchivalSettings.from_options(
        {"hoodie.cleaner.commits.retained": "1", "hoodie.cleaner.policy": "KEEP_LATEST_BY_HOURS",
         "hoodie.cleaner.hours.retained": "5"})
    newer = ArchivalSettings.from_options(
        {"hoodie.clean.commits.retained": "1", "hoodie.clean.policy": "KEEP_LATEST_BY_HOURS",
         "hoodie.clean.hours.retained": "5"})
    assert older == newer
    assert (older.clean_commits_retained, older.clean_policy, older.clean_hours_retained) == (
        1, CleanPolicy.KEEP_LATEST_BY_HOURS, 5)
    both = ArchivalSettings.from_options(
        {"hoodie.cleaner.commits.retained": "7", "hoodie.clean.commits.retained": "3"})
    assert both.clean_commits_retained == 3
    assert ArchivalSettings.from_options(older.options()) == older
