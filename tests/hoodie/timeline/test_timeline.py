"""The active timeline on every fixture, derived pending states, bad files and a 10,000-instant table."""

from __future__ import annotations

import json
import logging
import os
import pickle
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from hoodied.hoodie.avro.container import write_single_record
from hoodied.hoodie.errors import CorruptPlanError, HoodieFormatError
from hoodied.hoodie.properties import (
    TableConfig,
    format_java_properties,
    parse_java_properties,
    read_table_properties,
)
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline, datetime_to_instant_time, instant_time_to_datetime
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import ClusteringPlan, CompactionPlan, IndexPlan, RollbackPlan
from tests.helpers.fixtures import ALL_FIXTURES
from tests.helpers.hudi_index import INDEX

V8_TRIPS = "mor/avro/v8_trips_8i3u1d"
V9_MOR = "mor/avro/v9_txns_simple_nometa"
V6_OVERWRITE = "cow/v6_simplekeygen_nonhivestyle_overwritetable"


def open_timeline(table: Path, *, include_history: bool = False) -> Timeline:
    storage = LocalStorage(str(table))
    props, _ = read_table_properties(storage)  # also for the LANCE table, which the config loader refuses
    return Timeline.load(storage, TableConfig.from_props(props), include_history=include_history)


def timeline_dir(table: Path) -> Path:
    tl = table / ".hoodie" / "timeline"
    return tl if tl.is_dir() else table / ".hoodie"


# ------------------------------------------------------------------ every fixture


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES))
def test_fixture_timeline_matches_index(fid: str, shared_table) -> None:
    table = shared_table(fid)
    timeline = open_timeline(table)
    expected = INDEX.get(fid)
    if expected is None:
        pytest.skip(f"{fid} is not described in INDEX.md")
    assert len(timeline) == expected.instant_count
    assert timeline.pending() == []
    got = []
    for inst in timeline.instants:
        metadata = timeline.read_commit_metadata(inst)
        op = metadata.get("operationType")
        got.append((inst.action, op.upper() if op else None))
    assert got == expected.instants
    layout2 = timeline.config.timeline_layout == 2
    for inst in timeline.instants:
        assert inst.completion_time is not None and len(inst.completion_time) == 17
        assert timeline.is_completed(inst.requested_time)
        assert timeline.get(inst.requested_time) == inst
        completed_file = timeline.state_file(inst)
        assert Path(table, completed_file).is_file()
        if layout2:
            name = f"{inst.requested_time}_{inst.completion_time}.{inst.file_action.value}"
            assert completed_file == f".hoodie/timeline/{name}"
            assert not inst.legacy
        # every instant of every fixture kept its requested file
        assert Path(table, timeline.state_file(inst, State.REQUESTED)).is_file()
    if timeline.instants:
        assert timeline.latest_completed() == timeline.instants[-1]


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES))
def test_fixture_plans_and_metadata_decode(fid: str, shared_table) -> None:
    """Every plan and every completed metadata file of the table and of its metadata table decodes."""
    table = shared_table(fid)
    timelines = [open_timeline(table)]
    if (table / ".hoodie" / "metadata" / ".hoodie").is_dir():
        timelines.append(open_timeline(table / ".hoodie" / "metadata"))
    for timeline in timelines:
        for inst in timeline.instants:
            raw = timeline.read_plan(inst)
            plan = timeline.plan(inst)
            if inst.action in (Action.COMPACTION, Action.LOG_COMPACTION):
                assert isinstance(plan, CompactionPlan) and plan.operations
            elif inst.action is Action.CLUSTERING:
                assert isinstance(plan, ClusteringPlan) and plan.input_groups
                assert timeline.is_clustering(inst)
            elif inst.action is Action.INDEXING:
                assert isinstance(plan, IndexPlan) and plan.partition_infos
            elif inst.action is Action.ROLLBACK:
                assert isinstance(plan, RollbackPlan)
            elif inst.action is Action.REPLACE_COMMIT:
                assert raw is not None and plan is None  # insert-overwrite: requested metadata without a plan
                assert not timeline.is_clustering(inst)
            else:
                assert raw is None and plan is None
            if plan is not None:
                assert "\n" not in plan.summary()
            metadata = timeline.read_commit_metadata(inst)
            assert isinstance(metadata, dict)
            if inst.action in (Action.COMMIT, Action.DELTA_COMMIT, Action.COMPACTION, Action.REPLACE_COMMIT):
                assert "partitionToWriteStats" in metadata


def test_metadata_table_timeline(shared_table) -> None:
    timeline = open_timeline(shared_table(V8_TRIPS) / ".hoodie" / "metadata")
    times = [i.requested_time for i in timeline.instants]
    assert times[:5] == [f"0000000000000000{n}" for n in range(5)]
    compaction = timeline.get("20251220210130942")
    assert compaction is not None and compaction.action is Action.COMPACTION and compaction.is_completed
    assert compaction.completion_time == "20251220210131219"
    assert all(i.action is Action.DELTA_COMMIT for i in timeline.instants if i is not compaction)


def test_replacecommits_and_rollbacks(shared_table) -> None:
    timeline = open_timeline(shared_table(V6_OVERWRITE))
    rc = timeline.get("20240707001303088")
    assert rc is not None and rc.action is Action.REPLACE_COMMIT
    assert not timeline.is_clustering(rc)
    replaced = timeline.replaced_file_groups()
    assert len(replaced) == 3 and set(replaced.values()) == {"20240707001303088"}
    assert {p for p, _ in replaced} == {"10", "20", "30"}
    assert timeline.replaced_file_groups(as_of="20240707001302376") == {}
    assert timeline.rolled_back_instants() == set()

    rollback = open_timeline(shared_table("mor/parquet/v6_nonpartitioned_rollback"))
    assert rollback.rolled_back_instants() == {"20250126040826878"}

    v9 = open_timeline(shared_table(V9_MOR))
    clustering = v9.get("20260307135840454")
    assert clustering is not None and clustering.action is Action.CLUSTERING
    by_instant: dict[str, int] = {}
    for t in v9.replaced_file_groups().values():
        by_instant[t] = by_instant.get(t, 0) + 1
    assert by_instant == {"20260307135837782": 2, "20260307135840454": 5}
    assert set(v9.replaced_file_groups(as_of="20260307135840453").values()) == {"20260307135837782"}


# ------------------------------------------------------------------ derived pending states


def test_pending_compaction_after_removing_its_completion(hudi_table) -> None:
    table = hudi_table(V8_TRIPS)
    (table / ".hoodie/timeline/20251220210129235_20251220210129883.commit").unlink()
    timeline = open_timeline(table)
    inst = timeline.get("20251220210129235")
    assert inst == Instant("20251220210129235", Action.COMPACTION, State.INFLIGHT)
    assert timeline.pending() == [inst]
    assert timeline.pending_table_services() == [inst]
    assert timeline.completion_time("20251220210129235") is None
    assert timeline.is_completed("20251220210130911")  # the later delta commit stays completed
    assert timeline.state_file(inst) == ".hoodie/timeline/20251220210129235.compaction.inflight"
    plan = timeline.plan(inst)
    assert isinstance(plan, CompactionPlan)
    assert plan.file_groups == {
        ("city=chennai", "6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0"),
        ("city=san_francisco", "036ded81-9ed4-479f-bcea-7145dfa0079b-0"),
        ("city=sao_paulo", "8aa68f7e-afd6-4c94-b86c-8a886552e08d-0"),
    }
    with pytest.raises(ValueError, match="not completed"):
        timeline.read_commit_metadata(inst)
    # without the inflight file as well, it is a requested compaction
    (table / ".hoodie/timeline/20251220210129235.compaction.inflight").unlink()
    requested = open_timeline(table).get("20251220210129235")
    assert requested is not None and requested.state is State.REQUESTED


def test_pending_clustering_after_removing_its_completion(hudi_table) -> None:
    table = hudi_table(V9_MOR)
    before = open_timeline(table).replaced_file_groups()
    (table / ".hoodie/timeline/20260307135840454_20260307135840902.replacecommit").unlink()
    timeline = open_timeline(table)
    inst = timeline.get("20260307135840454")
    assert inst == Instant("20260307135840454", Action.CLUSTERING, State.INFLIGHT)
    assert timeline.pending_table_services() == [inst]
    plan = timeline.plan(inst)
    assert isinstance(plan, ClusteringPlan) and plan.operation_type == "CLUSTER"
    assert len(plan.input_groups) == 3 and len(plan.file_groups) == 5
    # the replaced file groups of a pending clustering come back
    after = timeline.replaced_file_groups()
    assert set(before) - set(after) == set(plan.file_groups)
    # both services pending at once
    (table / ".hoodie/timeline/20260307135839895_20260307135840408.commit").unlink()
    both = open_timeline(table).pending_table_services()
    assert [(i.requested_time, i.action) for i in both] == [
        ("20260307135839895", Action.COMPACTION),
        ("20260307135840454", Action.CLUSTERING),
    ]


def test_v6_pending_clustering_is_a_replacecommit_with_a_cluster_plan(hudi_table) -> None:
    table = hudi_table("cow/v6_nonpartitioned")
    requested = {
        "operationType": "CLUSTER",
        "clusteringPlan": {
            "inputGroups": [
                {
                    "slices": [{"dataFilePath": "a.parquet", "fileId": "f1", "partitionPath": ""}],
                    "numOutputFileGroups": 1,
                }
            ],
            "strategy": {"strategyClassName": "x.Strategy", "strategyParams": {}},
        },
    }
    data = write_single_record(requested, "HoodieRequestedReplaceMetadata")
    (table / ".hoodie/20240418180000000.replacecommit.requested").write_bytes(data)
    timeline = open_timeline(table)
    inst = timeline.get("20240418180000000")
    assert inst == Instant("20240418180000000", Action.REPLACE_COMMIT, State.REQUESTED)
    assert timeline.is_clustering(inst)
    assert timeline.pending_table_services() == [inst]
    plan = timeline.plan(inst)
    assert isinstance(plan, ClusteringPlan) and plan.file_groups == {("", "f1")}


# ------------------------------------------------------------------ completion times


def test_layout1_completion_time_is_the_file_mtime_in_the_table_timezone(hudi_table) -> None:
    table = hudi_table("cow/v6_nonpartitioned")
    props_file = table / ".hoodie/hoodie.properties"
    props = parse_java_properties(props_file.read_text(encoding="latin-1"))
    props["hoodie.table.timeline.timezone"] = "UTC"
    props_file.write_text(format_java_properties(props), encoding="latin-1")
    when = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    ns = int(when.timestamp()) * 10**9 + 678 * 10**6
    os.utime(table / ".hoodie/20240418173550988.commit", ns=(ns, ns))
    timeline = open_timeline(table)
    inst = timeline.get("20240418173550988")
    assert inst is not None and inst.completion_time == "20240102030405678" and not inst.legacy


def test_0x_metadata_table_suffixed_times(hudi_table) -> None:
    # a 0.x metadata table names its compaction <T>001 and its clean <T>002 after delta commit T
    table = hudi_table("mor/parquet/v6_nonpartitioned")
    hoodie = table / ".hoodie"
    t = "20250117083136333"
    for name in (f"{t}001.compaction.requested", f"{t}001.compaction.inflight", f"{t}001.commit",
                 f"{t}002.clean.requested", f"{t}002.clean.inflight"):
        (hoodie / name).write_bytes(b"")
    timeline = open_timeline(table)
    assert sorted((i.action.value, i.state.value) for i in timeline.instants if i.requested_time == t) == [
        ("clean", "inflight"), ("compaction", "completed"), ("deltacommit", "completed")
    ]
    # its log compaction <T>005 completes as a delta commit: cut to 17 digits it would be the delta
    # commit T of the same family, so one of the two would be lost; refused, naming both files
    (hoodie / f"{t}005.logcompaction.requested").write_bytes(b"")
    with pytest.raises(HoodieFormatError, match=r"are one instant in hoodied's timeline") as caught:
        open_timeline(table)
    assert f"{t}005.logcompaction.requested" in str(caught.value) and f"{t}.deltacommit" in str(caught.value)


def test_legacy_completed_file_in_layout2(hudi_table) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    folder = table / ".hoodie/timeline"
    # a v6-era completed instant migrated into a v8 timeline: no completion time, JSON content
    (folder / "20250713010535797_20250713010536200.commit").unlink()
    (folder / "20250713010535797.commit").write_text(
        json.dumps({"partitionToWriteStats": {}, "operationType": "UPSERT"}, indent=2)
    )
    timeline = open_timeline(table)
    inst = timeline.get("20250713010535797")
    assert inst is not None and inst.is_completed and inst.legacy and inst.completion_time is not None
    assert timeline.read_commit_metadata(inst)["operationType"] == "UPSERT"


def test_instant_time_helpers() -> None:
    tz = timezone(timedelta(hours=-5))
    dt = instant_time_to_datetime("20240418173550988", tz)
    assert dt == datetime(2024, 4, 18, 17, 35, 50, 988000, tzinfo=tz)
    assert datetime_to_instant_time(dt, tz) == "20240418173550988"
    assert datetime_to_instant_time(dt, UTC) == "20240418223550988"
    assert instant_time_to_datetime("20240418173550", UTC).microsecond == 999000  # legacy 14 digits
    with pytest.raises(HoodieFormatError):
        instant_time_to_datetime("2024", UTC)


# ------------------------------------------------------------------ bad input


def test_garbage_plan_names_the_file(hudi_table) -> None:
    table = hudi_table(V8_TRIPS)
    path = table / ".hoodie/timeline/20251220210129235.compaction.requested"
    good = path.read_bytes()
    path.write_bytes(b"this is not avro at all")
    timeline = open_timeline(table)  # loading reads names only
    inst = timeline.get("20251220210129235")
    assert inst is not None
    with pytest.raises(CorruptPlanError) as err:  # a HoodieFormatError the diagnostic commands can mark
        timeline.read_plan(inst)
    assert isinstance(err.value, HoodieFormatError)
    assert (err.value.requested_time, err.value.action, err.value.pending) == ("20251220210129235",
                                                                               "compaction", False)
    assert err.value.reason.startswith(".hoodie/timeline/20251220210129235.compaction.requested: ")
    assert str(err.value).startswith("compaction 20251220210129235: corrupt plan (.hoodie/timeline/")
    assert "\n" not in str(err.value)
    assert pickle.loads(pickle.dumps(err.value)).reason == err.value.reason
    path.write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(HoodieFormatError, match="20251220210129235.compaction.requested: corrupt Avro"):
        open_timeline(table).read_plan(inst)
    path.write_bytes(b"")
    assert open_timeline(table).read_plan(inst) is None


def test_garbage_commit_metadata_names_the_file(hudi_table) -> None:
    table = hudi_table("cow/v6_nonpartitioned")
    (table / ".hoodie/20240418173550988.commit").write_bytes(b"{ not json")
    timeline = open_timeline(table)
    inst = timeline.get("20240418173550988")
    assert inst is not None
    with pytest.raises(HoodieFormatError, match=r"^\.hoodie/20240418173550988\.commit: corrupt JSON"):
        timeline.read_commit_metadata(inst)
    (table / ".hoodie/20240418173550988.commit").write_bytes(b"\x00\x01\x02")
    with pytest.raises(HoodieFormatError, match="neither Avro nor JSON"):
        timeline.read_commit_metadata(inst)


def test_unknown_action_files_are_ignored_with_warnings(hudi_table, caplog: pytest.LogCaptureFixture) -> None:
    table = hudi_table("cow/v8_nonpartitioned")
    folder = table / ".hoodie/timeline"
    for name in (
        "20250713010600000.frobnicate.requested",
        "20250713010600000_20250713010600001.frobnicate",
        "20250713010600000.commit.halfway",
    ):
        (folder / name).write_bytes(b"")
    (folder / "notes.txt").write_text("not a timeline file")
    with caplog.at_level(logging.WARNING, logger="hoodie.timeline"):
        timeline = open_timeline(table)
    assert len(timeline) == 2
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3
    assert any("20250713010600000.frobnicate.requested: unknown timeline action" in m for m in warned)
    assert not any("notes.txt" in m for m in warned)


# ------------------------------------------------------------------ scale


def test_ten_thousand_instants(tmp_path: Path, shared_table) -> None:
    """A generated 10,000-instant layout-2 timeline loads correctly from names alone."""
    table = tmp_path / "big"
    folder = table / ".hoodie" / "timeline"
    folder.mkdir(parents=True)
    (table / ".hoodie/hoodie.properties").write_bytes(
        (shared_table("cow/v9_txns_simple_nometa") / ".hoodie/hoodie.properties").read_bytes()
    )
    start = datetime(2026, 1, 1, tzinfo=UTC)
    names: list[str] = []
    expected: list[tuple[str, Action, State]] = []
    for n in range(10_000):
        t = datetime_to_instant_time(start + timedelta(seconds=n), UTC)
        c = datetime_to_instant_time(start + timedelta(seconds=n, milliseconds=500), UTC)
        kind = n % 10
        if kind == 3:
            names += [f"{t}.compaction.requested", f"{t}.compaction.inflight", f"{t}_{c}.commit"]
            expected.append((t, Action.COMPACTION, State.COMPLETED))
        elif kind == 7:
            names += [f"{t}.clustering.requested", f"{t}.clustering.inflight", f"{t}_{c}.replacecommit"]
            expected.append((t, Action.CLUSTERING, State.COMPLETED))
        elif n >= 9_990 and kind == 9:
            names += [f"{t}.deltacommit.requested"]
            expected.append((t, Action.DELTA_COMMIT, State.REQUESTED))
        elif n >= 9_990 and kind == 5:
            names += [f"{t}.logcompaction.requested", f"{t}.logcompaction.inflight"]
            expected.append((t, Action.LOG_COMPACTION, State.INFLIGHT))
        else:
            names += [f"{t}.commit.requested", f"{t}.inflight", f"{t}_{c}.commit"]
            expected.append((t, Action.COMMIT, State.COMPLETED))
    for name in names:
        (folder / name).touch()
    timeline = open_timeline(table)
    assert len(timeline) == 10_000
    assert [(i.requested_time, i.action, i.state) for i in timeline.instants] == expected
    assert all(i.completion_time and i.completion_time > i.requested_time for i in timeline.completed())
    assert [i.requested_time for i in timeline.pending()] == [expected[9995][0], expected[9999][0]]
    assert [i.action for i in timeline.pending_table_services()] == [Action.LOG_COMPACTION]
    last_done = timeline.latest_completed()
    assert last_done is not None and last_done.requested_time == expected[9998][0]
