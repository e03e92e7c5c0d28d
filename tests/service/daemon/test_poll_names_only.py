"""The names-only poll: ``scan_names`` counts what ``timeline_from_names`` builds, and every
built-in trigger answers the same from those counts as from the ``Timeline``.

Timelines are generated at random (seeded) over real table configs of layout 2 (a merge-on-read
v8 and a copy-on-write v9 fixture): writes, compactions and log compactions (completed under
``commit`` / ``deltacommit``), clusterings (under ``replacecommit``), insert-overwrites, cleans and
rollbacks, each requested, inflight or completed, the plain commit's ``T.inflight`` quirk
included. The poll itself is checked against full loads of every fixture in
``test_daemon_poll_light``.
"""

from __future__ import annotations

import functools
import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.compact import TimelineCounts, scan_names, timeline_from_names
from hoodied.planners.archival import archival_due
from hoodied.planners.clean import clean_due, clean_due_counts
from hoodied.planners.clustering import clustering_due, clustering_due_counts
from hoodied.planners.compaction import (
    CompactionSettings,
    TriggerStrategy,
    compaction_due,
    compaction_due_counts,
)
from hoodied.planners.log_compaction import (
    LogCompactionSettings,
    log_compaction_due,
    log_compaction_due_counts,
)
from hoodied.service.config import Policy, load_config
from hoodied.service.daemon.registry import build_registry
from tests.helpers.fixtures import ALL_FIXTURES, unzip_table

#: (pending action, the action its completed file carries)
KINDS = [("deltacommit", "deltacommit"), ("commit", "commit"), ("compaction", "commit"),
         ("logcompaction", "deltacommit"), ("clustering", "replacecommit"),
         ("replacecommit", "replacecommit"), ("clean", "clean"), ("rollback", "rollback")]


def _names(rng: random.Random, count: int, pending_replace: bool) -> list[str]:
    names = ["history", "20250101000000000.schemacommit"]  # a folder and a skipped action
    if rng.random() < 0.4:  # names that are no instant: the completed ones are then split one by one
        names += ["notes_1.txt", "20991231235959000_20991231235959001.clean.inflight"]
    at = datetime(2025, 1, 1)
    for _ in range(count):
        at += timedelta(milliseconds=rng.randint(1, 5_000_000))
        t = _time(at)
        action, done_as = rng.choice(KINDS)
        state = rng.choices(["completed", "inflight", "requested"], [8, 1, 1])[0]
        if action == "replacecommit" and not pending_replace:
            state = "completed"
        names.append(f"{t}.{action}.requested")
        if state != "requested":
            quirk = action == "commit" and rng.random() < 0.5
            names.append(f"{t}.inflight" if quirk else f"{t}.{action}.inflight")
        if state == "completed":
            names.append(f"{t}_{_time(at + timedelta(milliseconds=rng.randint(1, 9000)))}.{done_as}")
    return names


def _time(at: datetime) -> str:
    return at.strftime("%Y%m%d%H%M%S") + f"{at.microsecond // 1000:03d}"


@pytest.fixture(scope="module", params=["mor/avro/v8_trips_8i3u1d", "cow/v9_txns_simple_nometa"])
def table(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[
        LocalStorage, TableConfig]:
    root = unzip_table(ALL_FIXTURES[request.param], tmp_path_factory.mktemp("t") / "t")
    storage = LocalStorage(str(root))
    return storage, load_table_config(storage)


def _summary(timeline: Timeline) -> list[tuple[str, str, str, str | None, bool]]:
    return [(i.requested_time, i.action.value, i.state.value, i.completion_time, i.legacy)
            for i in timeline.instants]


@pytest.mark.parametrize("seed", range(40))
def test_the_counts_of_names_equal_the_built_timeline_and_every_trigger_agrees(
    table: tuple[LocalStorage, TableConfig], seed: int
) -> None:
    storage, config = table
    rng = random.Random(seed)
    names = _names(rng, rng.randint(0, 60), pending_replace=seed % 8 == 0)
    full = timeline_from_names(storage, config, names, lambda want: {})
    scan = scan_names(config, names)
    if any(i.is_pending and i.action.value == "replacecommit" for i in full.instants):
        assert scan is None  # its plan tells a clustering from an insert-overwrite: the timeline is built
        return
    assert scan is not None
    assert scan.counts == TimelineCounts.of(full)
    assert scan.pending == full.pending()
    again = scan.view.timeline(storage, config)
    assert len(scan.view) == len(full) and _summary(again) == _summary(full)
    for inst in full.instants:
        assert again.state_files(inst) == full.state_files(inst)
    counts = scan.counts
    for n in (1, 2, 3, 5, 8, 13, 40):
        assert clean_due_counts(counts, n) == clean_due(full, n)
        assert clustering_due_counts(counts, n) == clustering_due(full, n)
        if n >= 2:
            assert archival_due(full, n) == _archival_counts(counts, n)
        for trigger in TriggerStrategy:
            for seconds in (1, 10**9):
                settings = CompactionSettings(trigger=trigger, max_delta_commits=n, max_delta_seconds=seconds)
                assert compaction_due_counts(counts, settings) == compaction_due(full, settings)
    for enabled in (False, True):
        settings_l = LogCompactionSettings(enabled=enabled)
        assert log_compaction_due_counts(counts, settings_l) == log_compaction_due(full, settings_l)


@functools.cache
def _archival_policy(keep_max: int) -> Policy:
    return load_config(overrides={"tables": ["/x"], "http": "off", "defaults": {
        "services": {"archival": {"enabled": True, "keep_max_commits": keep_max,
                                  "keep_min_commits": 1}}}}).tables[0].policy


def _archival_counts(counts: TimelineCounts, keep_max: int) -> str | None:
    spec = build_registry().planners[TableService.ARCHIVAL]
    assert spec.due_counts is not None
    return spec.due_counts(counts, _archival_policy(keep_max))


def test_names_that_need_more_than_their_name_go_to_the_timeline(
    table: tuple[LocalStorage, TableConfig],
) -> None:
    _, config = table
    t = "20250101000000000"
    assert scan_names(config, [f"{t}.deltacommit"]) is None  # a completion time from the file's mtime
    assert scan_names(config, [f"{t}.replacecommit.requested"]) is None  # its plan says what it is
    two = [f"{t}_20250101000000001.deltacommit", f"{t}_20250101000000002.deltacommit"]
    assert scan_names(config, two) is None  # one instant, two completed files
    assert scan_names(config, [f"{t}.commit.requested", f"{t}.compaction.requested"]) is None
    ok = scan_names(config, [f"{t}.compaction.requested", f"{t}_20250101000000001.commit", "history"])
    assert ok is not None and ok.counts.completed == {"compaction": [t]} and not ok.pending


def test_a_paused_or_custom_trigger_keeps_the_poll_deciding_as_before(tmp_path: Path) -> None:
    """A planner registered without ``due_counts`` has its tables' timelines built: its ``due`` is asked."""
    from hoodied.service.daemon.poll import poll_table
    from hoodied.service.daemon.registry import PlanContext, PlanOutcome, Registry, register_planner

    root = unzip_table(ALL_FIXTURES["mor/avro/v8_trips_8i3u1d"], tmp_path / "t")
    seen: list[Timeline] = []

    def due(timeline: Timeline, policy: object) -> str | None:
        seen.append(timeline)
        return "asked"

    def never(ctx: PlanContext) -> PlanOutcome:
        raise AssertionError("the poll never plans")

    registry = Registry()
    register_planner("clean", due, never, registry=registry)
    settings = load_config(overrides={"tables": [str(root)], "http": "off"})
    policy = settings.tables[0].policy
    result = poll_table(LocalStorage(str(root)), None, policy, registry, settings.heartbeat)
    assert len(seen) == 1 and result.due == {"clean": "asked"}
