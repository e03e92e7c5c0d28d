"""The daemon's light poll on every Hudi fixture: a timeline built from names in one pass, kept compact.

``hoodie.timeline.compact.timeline_from_names`` must give the instants of ``Timeline.load``
(legacy, mtime-derived completion times included), and ``CompactTimeline`` must give them back
with the file names decisions read. ``poll_table`` must keep no ``Timeline`` and no parsed instant
beyond the pending ones, and take the same decisions as the planners' triggers on a full load:
at the first poll, and again when an unchanged timeline's triggers are evaluated again.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hoodied.hoodie.actions.services import TableService, service_of
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline, parse_timeline_file_name
from hoodied.hoodie.timeline.compact import CompactTimeline, timeline_from_names
from hoodied.hoodie.timeline.instant import Instant, State
from hoodied.service.config import Policy, load_config
from hoodied.service.daemon.poll import RECHECK_DUE_S, PollResult, poll_table
from hoodied.service.daemon.registry import (
    PlanContext,
    PlanOutcome,
    Registry,
    build_registry,
    register_planner,
)
from tests.helpers.fixtures import ALL_FIXTURES, unzip_table

#: Every fixture hoodied serves (a Lance table is refused before its timeline is read).
EVERY_FIXTURE = sorted(f for f in ALL_FIXTURES if "lance" not in f)
#: Every trigger as low as it goes, clustering and log compaction planned: every check has work.
EAGER = {"clean": {"trigger_commits": 1}, "compaction": {"delta_commits": 1},
         "clustering": {"schedule": True, "trigger_commits": 1}, "log_compaction": {"schedule": True}}


def _summary(timeline: Timeline) -> list[tuple[str, str, str, str | None, bool]]:
    return [(i.requested_time, i.action.value, i.state.value, i.completion_time, i.legacy)
            for i in timeline.instants]


def _local_timeline(root: Path) -> tuple[LocalStorage, Timeline, Path]:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    local = storage.local_path(config.timeline_path)
    assert local is not None
    return storage, Timeline.load(storage, config), Path(local)


def _stat_mtimes(folder: Path) -> Any:
    return lambda names: {n: os.stat(folder / n).st_mtime_ns // 1_000_000 for n in names}


def _kept(timeline: Timeline, inst: Instant) -> bool:
    return inst.is_pending or inst.action.value in ("replacecommit", "clustering")


@pytest.mark.parametrize("fid", EVERY_FIXTURE)
def test_a_timeline_from_names_and_its_compact_copy_equal_a_full_load(tmp_path: Path, fid: str) -> None:
    root = unzip_table(ALL_FIXTURES[fid], tmp_path / "t")
    storage, full, folder = _local_timeline(root)
    light = timeline_from_names(storage, full.config, os.listdir(folder), _stat_mtimes(folder))
    assert _summary(light) == _summary(full)
    view = CompactTimeline.of(light)
    again = view.timeline(storage, full.config)
    assert len(view) == len(full) and _summary(again) == _summary(full)
    for inst in full.instants:
        if _kept(full, inst):  # the files decisions read: plans of pending instants, v6 replacecommits
            assert light.state_files(inst) == full.state_files(inst) == again.state_files(inst)
            assert again.read_plan(inst) == full.read_plan(inst)
            assert service_of(again, inst) == service_of(full, inst)


def test_a_legacy_completed_file_gone_since_the_listing_leaves_its_other_states(tmp_path: Path) -> None:
    root = unzip_table(ALL_FIXTURES["mor/parquet/v6_nonpartitioned_rollback"], tmp_path / "t")
    storage, full, folder = _local_timeline(root)
    names = os.listdir(folder)
    done = next(i for i in reversed(full.instants) if i.is_completed and len(full.state_files(i)) > 1)
    gone = Path(full.state_file(done, State.COMPLETED)).name
    (folder / gone).unlink()  # a rollback or an archival between the listing and the stat
    light = timeline_from_names(storage, full.config, names,
                                lambda want: {n: os.stat(folder / n).st_mtime_ns // 1_000_000
                                              for n in want if (folder / n).exists()})
    assert _summary(light) == _summary(Timeline.load(storage, full.config))
    assert light.get(done.requested_time) is not None and light.get(done.requested_time).is_pending  # type: ignore[union-attr]


def test_look_alike_names_are_logged_and_other_names_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = unzip_table(ALL_FIXTURES["cow/v9_txns_simple_nometa"], tmp_path / "t")
    storage, full, folder = _local_timeline(root)
    odd = ["20991231235959000.vacuum.requested", "20991231235959000_20991231235959001.clean.inflight",
           "notes.txt", "20991231235959000.commit.requested.tmp"]
    with caplog.at_level(logging.WARNING):
        light = timeline_from_names(storage, full.config, [*os.listdir(folder), *odd], _stat_mtimes(folder))
    assert _summary(light) == _summary(full)
    logged = {n for n in odd if any(n in r.getMessage() for r in caplog.records)}
    assert logged == set(odd) - {"notes.txt"}  # the look-alikes parse_timeline_file_name logs
    assert all(parse_timeline_file_name("x", n) is None for n in odd)


def _poll(root: Path, cached: PollResult | None, services: dict[str, Any] | None = None) -> PollResult:
    overrides: dict[str, Any] = {"tables": [str(root)], "http": "off"}
    if services:
        overrides["defaults"] = {"services": services}
    settings = load_config(overrides=overrides)
    return poll_table(LocalStorage(str(root)), cached, settings.tables[0].policy, build_registry(),
                      settings.heartbeat)


def _expected_due(root: Path, timeline: Timeline) -> dict[Any, str]:
    policy = load_config(overrides={"tables": [str(root)], "http": "off",
                                    "defaults": {"services": EAGER}}).tables[0].policy
    due = {}
    for service, spec in build_registry().planners.items():
        if policy.services.schedules(service):
            reason = spec.due(timeline, policy)
            if reason:
                due[service] = reason
    return due


@pytest.mark.parametrize("fid", EVERY_FIXTURE)
def test_the_poll_decides_as_the_triggers_on_a_full_load(tmp_path: Path, fid: str) -> None:
    root = unzip_table(ALL_FIXTURES[fid], tmp_path / "t")
    storage, full, _ = _local_timeline(root)
    first = _poll(root, None, EAGER)
    assert first.due == _expected_due(root, full)
    assert [(i.instant, i.service) for i in first.pending] == [
        (i, service_of(full, i)) for i in full.pending() if service_of(full, i) is not None]
    deltas = [i for i in full.instants if i.is_completed and i.action.value == "deltacommit"]
    if full.config.is_mor:
        last = full.latest_completed(("compaction",))  # type: ignore[arg-type]
        since = last.requested_time if last is not None else ""
        assert first.delta_commits_since_compaction == sum(1 for i in deltas if i.requested_time > since)
    # an unchanged timeline: its triggers are evaluated again from the compact view, same answers
    first.due_at = time.monotonic() - RECHECK_DUE_S - 1
    first.relist_at = 0.0
    again = _poll(root, first, EAGER)
    assert again.view is first.view and again.due_at > first.due_at
    assert again.due == first.due


def test_a_poll_holds_no_timeline_and_no_instant_but_the_pending_ones(tmp_path: Path) -> None:
    root = unzip_table(ALL_FIXTURES["mor/avro/v8_trips_8i3u1d"], tmp_path / "t")
    folder = _local_timeline(root)[2]
    t = "20991231235959000"
    (folder / f"{t}.clean.requested").write_bytes(b"")  # one pending instant
    result = _poll(root, None)
    assert [i.instant.requested_time for i in result.pending] == [t]
    seen: set[int] = set()
    held: list[object] = []
    stack: list[object] = [getattr(result, name) for name in PollResult.__slots__
                           if name not in ("config", "storage")]
    while stack:  # everything the result holds (its config and storage are the table's, held anyway)
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        held.append(obj)
        stack.extend(gc.get_referents(obj))
    assert not [o for o in held if isinstance(o, Timeline)]
    assert [o for o in held if isinstance(o, Instant)] == [result.pending[0].instant]
    assert len(result.view) == len(Timeline.load(LocalStorage(str(root)), result.config)) > 1


def test_an_unchanged_folder_keeps_its_view_and_a_new_file_makes_a_new_one(tmp_path: Path) -> None:
    root = unzip_table(ALL_FIXTURES["cow/v9_txns_simple_nometa"], tmp_path / "t")
    storage, _, folder = _local_timeline(root)
    past = time.time() - 60
    os.utime(folder, (past, past))  # quiet for a minute: its mtime can be trusted
    first = _poll(root, None)
    second = _poll(root, first)
    assert second.view is first.view and second.signature == first.signature  # nothing listed or parsed
    t = "20991231235959000"
    (folder / f"{t}.clean.requested").write_bytes(b"")
    third = _poll(root, second)
    assert third.view is not first.view and third.signature != first.signature
    assert [(i.instant.requested_time, i.instant.state) for i in third.pending][-1] == (t, State.REQUESTED)
    assert _summary(third.timeline) == _summary(Timeline.load(storage, third.config))


def test_an_unchanged_timeline_asks_again_only_when_a_trigger_reads_the_clock(tmp_path: Path) -> None:
    """Count-based triggers give the same answer while the timeline stays the same: they are not
    asked again every ``RECHECK_DUE_S``; a time-based compaction trigger makes every trigger asked."""
    root = unzip_table(ALL_FIXTURES["mor/avro/v8_trips_8i3u1d"], tmp_path / "t")
    asked: Counter[str] = Counter()

    def due(name: str, reason: str | None) -> Callable[[Timeline, Policy], str | None]:
        def check(timeline: Timeline, policy: Policy) -> str | None:
            asked[name] += 1
            return reason
        return check

    def never(ctx: PlanContext) -> PlanOutcome:
        raise AssertionError("the poll never plans")

    registry = Registry()
    register_planner("clean", due("clean", None), never, registry=registry, reads_clock=lambda p: False)
    register_planner("compaction", due("compaction", "5 delta commits"), never, registry=registry,
                     reads_clock=lambda p: p.services.compaction.trigger != "NUM_COMMITS")

    def poll(cached: PollResult | None, trigger: str) -> PollResult:
        settings = load_config(overrides={"tables": [str(root)], "http": "off",
                                          "defaults": {"services": {"compaction": {"trigger": trigger}}}})
        return poll_table(LocalStorage(str(root)), cached, settings.tables[0].policy, registry,
                          settings.heartbeat)

    first = poll(None, "NUM_COMMITS")
    assert asked == {"clean": 1, "compaction": 1}
    assert first.due == {TableService.COMPACTION: "5 delta commits"}
    first.due_at = time.monotonic() - RECHECK_DUE_S - 1
    again = poll(first, "NUM_COMMITS")
    assert asked == {"clean": 1, "compaction": 1}  # nothing the clock can change: not asked
    assert again.due == first.due and again.due_at > first.due_at
    again.due_at = time.monotonic() - RECHECK_DUE_S - 1
    timed = poll(again, "NUM_OR_TIME")
    assert asked == {"clean": 2, "compaction": 2} and timed.due == first.due
