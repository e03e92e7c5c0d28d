"""Which failed data writes Hudi's clean rolls back (``planners.failed_writes``), on a real v9 table.

Pending instants are added to a copy of a Hudi-written copy-on-write table by copying the
timeline files Hudi wrote for its own instants (a commit, an insert overwrite, a clustering)
under new instant times; the heartbeats are given as a mapping and the clock as ``now_ms``, so
the selection is checked as the pure rule it is.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hoodied.hoodie.errors import InstantStateError, UnsupportedTableError
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.failed_writes import (
    FAILED_WRITES_POLICY_KEY,
    HEARTBEAT_INTERVAL_KEY,
    HEARTBEAT_MISSES_KEY,
    FailedWritesPolicy,
    FailedWritesSettings,
    is_data_write,
    plan_failed_write_rollback,
    select_failed_writes,
)

FID = "cow/v9_txns_simple_nometa"
COMMIT = "20260307135709890"  # a completed upsert
OVERWRITE = "20260307135707243"  # a completed insert overwrite (replacecommit)
CLUSTERING = "20260307135709297"  # a completed clustering
NOW = 1_800_000_000_000
LAZY = FailedWritesSettings(FailedWritesPolicy.LAZY)

EXPIRED_COMMIT = "20261101000000001"
NO_HEARTBEAT = "20261101000000002"  # requested only, no heartbeat file at all
LIVE_COMMIT = "20261101000000003"
EXPIRED_OVERWRITE = "20261101000000004"
PENDING_CLUSTERING = "20261101000000005"
PENDING_CLEAN = "20261101000000006"

HEARTBEATS = {
    EXPIRED_COMMIT: NOW - 120_001,  # just past 60 s x 2
    LIVE_COMMIT: NOW - 120_000,  # exactly at the limit: still alive (Hudi: expired when strictly more)
    EXPIRED_OVERWRITE: NOW - 3_600_000,
    PENDING_CLUSTERING: NOW - 3_600_000,
    PENDING_CLEAN: NOW - 3_600_000,
}


def _copy(folder: Path, old: str, new: str, suffixes: tuple[str, ...]) -> None:
    for suffix in suffixes:
        shutil.copyfile(folder / f"{old}{suffix}", folder / f"{new}{suffix}")


@pytest.fixture()
def table(hudi_table) -> Path:
    root: Path = hudi_table(FID)
    tl = root / ".hoodie" / "timeline"
    _copy(tl, COMMIT, EXPIRED_COMMIT, (".commit.requested", ".inflight"))
    _copy(tl, COMMIT, NO_HEARTBEAT, (".commit.requested",))
    _copy(tl, COMMIT, LIVE_COMMIT, (".commit.requested", ".inflight"))
    _copy(tl, OVERWRITE, EXPIRED_OVERWRITE, (".replacecommit.requested", ".replacecommit.inflight"))
    _copy(tl, CLUSTERING, PENDING_CLUSTERING, (".clustering.requested", ".clustering.inflight"))
    (tl / f"{PENDING_CLEAN}.clean.requested").write_bytes(b"")
    return root


def _timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def test_lazy_selects_expired_data_writes_newest_first(table: Path) -> None:
    selected = select_failed_writes(_timeline(table), HEARTBEATS, LAZY, now_ms=NOW)
    # NO_HEARTBEAT is left alone: hoodied never rolls back a write without a heartbeat file
    assert [(f.target_time, f.target_action) for f in selected] == [
        (EXPIRED_OVERWRITE, "replacecommit"),
        (EXPIRED_COMMIT, "commit"),
    ]
    assert all(f.rollback is None for f in selected)


@pytest.mark.parametrize("policy", [FailedWritesPolicy.EAGER, FailedWritesPolicy.NEVER])
def test_other_policies_select_nothing(table: Path, policy: FailedWritesPolicy) -> None:
    assert select_failed_writes(_timeline(table), {}, FailedWritesSettings(policy), now_ms=NOW) == []


def test_heartbeat_settings_move_the_limit(table: Path) -> None:
    # one tolerable miss: 60 s; the live commit's 120 s old beat is now expired too
    settings = FailedWritesSettings(FailedWritesPolicy.LAZY, 60_000, 1)
    found = select_failed_writes(_timeline(table), HEARTBEATS, settings, now_ms=NOW)
    selected = [f.target_time for f in found]
    assert LIVE_COMMIT in selected
    assert PENDING_CLUSTERING not in selected and PENDING_CLEAN not in selected


def test_table_services_and_completed_instants_are_no_data_writes(table: Path) -> None:
    timeline = _timeline(table)
    kinds = {t: is_data_write(timeline, timeline.get(t)) for t in  # type: ignore[arg-type]
             (EXPIRED_COMMIT, NO_HEARTBEAT, EXPIRED_OVERWRITE, PENDING_CLUSTERING, PENDING_CLEAN, COMMIT)}
    assert kinds == {EXPIRED_COMMIT: True, NO_HEARTBEAT: True, EXPIRED_OVERWRITE: True,
                     PENDING_CLUSTERING: False, PENDING_CLEAN: False, COMMIT: False}


def test_pending_rollback_of_a_data_write_is_finished_whatever_the_heartbeat(table: Path) -> None:
    storage = LocalStorage(str(table))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    live = timeline.get(LIVE_COMMIT)
    assert live is not None
    plan = plan_failed_write_rollback(storage, config, timeline, live)
    with InProcessLock(storage.base_uri) as lock:
        fast = TimeSettings(max_expected_clock_skew_ms=5)
        writer = TimelineWriter(storage, config, lock, time_settings=fast)
        r = writer.schedule(Action.ROLLBACK, plan)
    selected = select_failed_writes(_timeline(table), HEARTBEATS, LAZY, now_ms=NOW)
    (mine,) = [f for f in selected if f.target_time == LIVE_COMMIT]
    assert mine.rollback is not None and mine.rollback.requested_time == r.requested_time
    assert [f.target_time for f in selected] == sorted((f.target_time for f in selected), reverse=True)


def test_plan_of_a_requested_write_has_no_requests(table: Path) -> None:
    storage = LocalStorage(str(table))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    plan = plan_failed_write_rollback(storage, config, timeline, timeline.get(NO_HEARTBEAT))  # type: ignore[arg-type]
    assert plan == {"instantToRollback": {"commitTime": NO_HEARTBEAT, "action": "commit"},
                    "RollbackRequests": [], "version": 1}


def test_plan_refuses_what_is_not_a_failed_write(table: Path) -> None:
    storage = LocalStorage(str(table))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    for t in (COMMIT, PENDING_CLUSTERING, PENDING_CLEAN):
        with pytest.raises(InstantStateError, match="not a failed data write"):
            plan_failed_write_rollback(storage, config, timeline, timeline.get(t))  # type: ignore[arg-type]


def test_bootstrap_instant_is_refused(table: Path) -> None:
    tl = table / ".hoodie" / "timeline"
    _copy(tl, COMMIT, "00000000000001", (".commit.requested", ".inflight"))
    storage = LocalStorage(str(table))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    with pytest.raises(UnsupportedTableError, match="failed bootstrap"):
        plan_failed_write_rollback(storage, config, timeline, timeline.get("00000000000001"))  # type: ignore[arg-type]


def test_settings_from_hudi_keys() -> None:
    table = {FAILED_WRITES_POLICY_KEY: "lazy", HEARTBEAT_INTERVAL_KEY: "30000"}
    settings = FailedWritesSettings.from_options(table, {HEARTBEAT_MISSES_KEY: "4"})
    assert settings == FailedWritesSettings(FailedWritesPolicy.LAZY, 30_000, 4)
    assert settings.max_gap_ms == 120_000
    # the command-line options win over the table's own keys
    assert FailedWritesSettings.from_options(table, {FAILED_WRITES_POLICY_KEY: "EAGER"}).policy is (
        FailedWritesPolicy.EAGER)
    assert FailedWritesSettings.from_options({}).policy is FailedWritesPolicy.EAGER  # Hudi's default
    with pytest.raises(ValueError, match="expected one of EAGER, LAZY, NEVER"):
        FailedWritesSettings.from_options({FAILED_WRITES_POLICY_KEY: "SOMETIMES"})
    with pytest.raises(ValueError, match="must be positive"):
        FailedWritesSettings.from_options({HEARTBEAT_INTERVAL_KEY: "0"})


def test_settings_under_hudis_other_key_name() -> None:
    """Hudi 1.2 spells the policy hoodie.clean.failed.writes.policy: taken too, in a table's
    hoodie.properties and in -o; within one mapping the name 0.14-1.1 writers read wins."""
    newer = "hoodie.clean.failed.writes.policy"
    assert FailedWritesSettings.from_options({newer: "LAZY"}).policy is FailedWritesPolicy.LAZY
    # the options win over the table's keys, whichever name each uses
    table = {FAILED_WRITES_POLICY_KEY: "EAGER"}
    assert FailedWritesSettings.from_options(table, {newer: "LAZY"}).policy is FailedWritesPolicy.LAZY
    assert FailedWritesSettings.from_options({newer: "LAZY"}, table).policy is FailedWritesPolicy.EAGER
    both = {newer: "LAZY", FAILED_WRITES_POLICY_KEY: "NEVER"}
    assert FailedWritesSettings.from_options(both).policy is FailedWritesPolicy.NEVER
