"""The compaction planner on real tables: triggers, eligibility, strategies, and the plan it writes.

Plans are decoded with Apache Hudi's own ``HoodieCompactionPlan`` schema. Eligibility is
checked against the file-system view written out here again (latest slices with log files,
groups with pending services left out), not against the planner's own code.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.fsview import FileSystemView, list_storage
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline, datetime_to_instant_time
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.compaction import (
    CompactionSettings,
    CompactionStrategy,
    TriggerStrategy,
    needs_compaction,
    plan_compaction,
    schedule_compaction,
)
from tests.helpers.hudi_schemas import decode_with_hudi_schema
from tests.helpers.mor_tables import written_mor_table

FAST = TimeSettings(max_expected_clock_skew_ms=5)
ONE = CompactionSettings(max_delta_commits=1)
V6_FIXTURES = [
    "mor/avro/v6_trips_8i1u",
    "mor/avro/v6_trips_8i3d",
    "mor/parquet/v6_nonpartitioned",
    "mor/parquet/v6_nonpartitioned_rollback",
    "mor/parquet/v6_simplekeygen_nonhivestyle",
]


def _open(root: Path) -> tuple[LocalStorage, Any, Timeline]:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    return storage, config, Timeline.load(storage, config)


def _schedule(root: Path, settings: CompactionSettings = ONE) -> tuple[Instant | None, Any]:
    storage = LocalStorage(str(root))
    return schedule_compaction(storage, InProcessLock(storage.base_uri), settings, time_settings=FAST)


def _expected_ops(root: Path) -> dict[tuple[str, str], tuple[str | None, list[str]]]:
    """(partition, file id) -> (base file, log files) of every latest slice with log files."""
    storage, config, timeline = _open(root)
    view = FileSystemView.build(list_storage(storage, config), timeline, config)
    out = {}
    for group in view.file_groups():
        s = group.latest_slice
        if s is None or not s.log_files or group.pending_compaction or group.pending_clustering:
            continue
        out[(s.partition, s.file_id)] = (
            s.base_file.file_name if s.base_file else None, [lf.file_name for lf in s.log_files]
        )
    return out


@pytest.mark.parametrize("fid", V6_FIXTURES)
def test_plans_every_slice_with_log_files_as_hudi_writes_it(hudi_table, fid: str) -> None:
    root = hudi_table(fid)
    expected = _expected_ops(root)
    inst, result = _schedule(root)
    assert inst is not None and inst.state is State.REQUESTED and inst.action is Action.COMPACTION
    requested = root / ".hoodie" / f"{inst.requested_time}.compaction.requested"
    # Hudi's HoodieCompactionOperation.avsc defines the HoodieCompactionPlan record
    plan = decode_with_hudi_schema(requested.read_bytes(), "HoodieCompactionOperation")
    assert plan["version"] == 2 and plan["extraMetadata"] == {} and plan["preserveHoodieMetadata"] is False
    got = {(op["partitionPath"], op["fileId"]): (op["dataFilePath"], op["deltaFilePaths"])
           for op in plan["operations"]}
    assert got == expected
    for op in plan["operations"]:
        sizes = [(root / op["partitionPath"] / n).stat().st_size for n in op["deltaFilePaths"]]
        base = (root / op["partitionPath"] / op["dataFilePath"]).stat().st_size
        m = op["metrics"]
        assert m["TOTAL_LOG_FILES"] == len(sizes) and m["TOTAL_LOG_FILES_SIZE"] == sum(sizes)
        assert m["TOTAL_IO_READ_MB"] == (base + sum(sizes)) // 2**20
        assert m["TOTAL_IO_WRITE_MB"] == base // 2**20
        assert m["TOTAL_IO_MB"] == m["TOTAL_IO_READ_MB"] + m["TOTAL_IO_WRITE_MB"]
        assert op["baseInstantTime"] == op["dataFilePath"].rsplit("_", 1)[-1].split(".")[0]
    assert result.summary().startswith(f"{len(expected)} file groups")
    # the groups are now pending: a second schedule finds nothing, and says why
    again, second = _schedule(root)
    assert again is None and second.skipped_pending and "pending table services" in second.reason


def test_triggers(hudi_table) -> None:
    root = hudi_table("mor/avro/v6_trips_8i1u")  # 2 delta commits, 20250331030642808 and ...45735
    _, config, timeline = _open(root)
    soon, late = "20250331040000000", "20250331030700000"  # 57 min / 17 s after the first delta commit
    cases = [
        (CompactionSettings(), soon, False),  # 2 < 5 delta commits
        (CompactionSettings(max_delta_commits=2), soon, True),
        (CompactionSettings(trigger=TriggerStrategy.TIME_ELAPSED), soon, False),  # 3438 s < 3600
        (CompactionSettings(trigger=TriggerStrategy.TIME_ELAPSED, max_delta_seconds=60), soon, True),
        (CompactionSettings(trigger=TriggerStrategy.TIME_ELAPSED, max_delta_seconds=60), late, False),
        (CompactionSettings(trigger=TriggerStrategy.NUM_AND_TIME, max_delta_commits=2), soon, False),
        (CompactionSettings(trigger=TriggerStrategy.NUM_AND_TIME, max_delta_commits=2, max_delta_seconds=60),
         soon, True),
        (CompactionSettings(trigger=TriggerStrategy.NUM_OR_TIME, max_delta_seconds=60), late, False),
        (CompactionSettings(trigger=TriggerStrategy.NUM_OR_TIME, max_delta_seconds=60), soon, True),
        (CompactionSettings(trigger=TriggerStrategy.NUM_OR_TIME, max_delta_commits=2), late, True),
    ]
    for settings, at, due in cases:
        assert needs_compaction(timeline, config, settings, at)[0] is due, (settings, at)
    result = plan_compaction(config, timeline, list_storage(LocalStorage(str(root)), config), soon)
    assert result.plan is None and result.reason.startswith("not due: 2 delta commits")


def test_delta_commits_count_from_the_last_completed_compaction(tmp_path: Path) -> None:
    written_mor_table(tmp_path, 9)  # 6 delta commits
    inst, _ = _schedule(tmp_path, CompactionSettings(max_delta_commits=6))
    assert inst is not None
    storage, config, timeline = _open(tmp_path)
    writer_time = "29990101000000000"
    assert needs_compaction(timeline, config, CompactionSettings(max_delta_commits=6), writer_time)[0]
    after_request = CompactionSettings(trigger=TriggerStrategy.NUM_COMMITS_AFTER_LAST_REQUEST)
    assert not needs_compaction(timeline, config, after_request, writer_time)[0]  # 0 since the request
    # the compaction completes (a commit): no delta commit after it, nothing is due
    folder = tmp_path / ".hoodie" / "timeline"
    (folder / f"{inst.requested_time}.compaction.inflight").write_bytes(b"")
    (folder / f"{inst.requested_time}_{inst.requested_time[:-1]}9.commit").write_bytes(b"")
    timeline = Timeline.load(storage, config)
    due, why = needs_compaction(timeline, config, ONE, writer_time)
    assert not due and why.startswith(f"0 delta commits since {inst.requested_time}")


def test_strategies_order_by_log_size_within_the_io_budget(tmp_path: Path) -> None:
    written_mor_table(tmp_path, 9)
    storage, config, timeline = _open(tmp_path)
    files = list_storage(storage, config)
    t = "29990101000000000"
    every = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED)
    unbounded = plan_compaction(config, timeline, files, t, every)
    assert set(_key(op) for op in unbounded.operations) == set(_expected_ops(tmp_path))
    assert len(unbounded.operations) >= 6
    by_size = plan_compaction(config, timeline, files, t, ONE)
    sizes = [op["metrics"]["TOTAL_LOG_FILES_SIZE"] for op in by_size.operations]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == len(unbounded.operations)
    # files under 1 MB count 0 MB (Hudi's whole MB): a budget of 0 still takes the largest op
    none_left = CompactionSettings(max_delta_commits=1, target_io_mb=0)
    bounded = plan_compaction(config, timeline, files, t, none_left)
    assert [_key(op) for op in bounded.operations] == [_key(by_size.operations[0])]
    threshold = CompactionSettings(max_delta_commits=1, log_file_size_threshold=int(sizes[2]))
    assert len(plan_compaction(config, timeline, files, t, threshold).operations) == len(
        [s for s in sizes if s >= sizes[2]]
    )
    io_only = CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.BOUNDED_IO, target_io_mb=0)
    assert [_key(op) for op in plan_compaction(config, timeline, files, t, io_only).operations] == [
        _key(unbounded.operations[0])  # listing order, not size order
    ]


def _now(config: Any) -> str:
    """An instant time of this very moment, in the table's timezone (later ones would fool TrueTime)."""
    t = datetime_to_instant_time(datetime.now(config.tzinfo), config.tzinfo)
    time.sleep(0.01)
    return t


def _key(op: dict[str, Any]) -> tuple[str, str]:
    return (op["partitionPath"], op["fileId"])


def test_only_log_files_completed_before_the_compaction(tmp_path: Path) -> None:
    """v9: a delta commit still inflight (its log file on storage) is left out of the plan."""
    written_mor_table(tmp_path, 9)
    storage, config, timeline = _open(tmp_path)
    expected = _expected_ops(tmp_path)
    (partition, file_id), (_, logs) = next(iter(expected.items()))
    pending = _now(config)
    folder = tmp_path / ".hoodie" / "timeline"
    (folder / f"{pending}.deltacommit.requested").write_bytes(b"")
    (folder / f"{pending}.deltacommit.inflight").write_bytes(b"")
    src = tmp_path / partition / logs[-1]
    (tmp_path / partition / f".{file_id}_{pending}.log.1_0-1-1").write_bytes(src.read_bytes())
    inst, result = _schedule(tmp_path)
    assert inst is not None
    got = {_key(op): op["deltaFilePaths"] for op in result.operations}
    assert got[(partition, file_id)] == logs  # the pending delta commit's log file is not planned


def test_table_version_6_refuses_while_a_write_is_pending(hudi_table) -> None:
    root = hudi_table("mor/avro/v6_trips_8i1u")
    pending = _now(_open(root)[1])
    (root / ".hoodie" / f"{pending}.deltacommit.requested").write_bytes(b"")
    inst, result = _schedule(root)
    assert inst is None
    assert f"deltacommit {pending} is still pending" in result.reason
    assert not list((root / ".hoodie").glob("*.compaction.*"))


def test_nothing_to_compact_in_a_compacted_table(hudi_table) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_nometa")  # Hudi compacted and clustered every log file
    inst, result = _schedule(root)
    assert inst is None and "no file slice has log files to compact" in result.reason


def test_refusals(hudi_table) -> None:
    meta = hudi_table("mor/avro/v8_trips_8i3u1d")  # an MDT partition no compaction keeps exact
    props = meta / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("record_index,", "record_index,expr_index_ts_day,"))
    with pytest.raises(UnsupportedTableError, match="MDT partition expr_index_ts_day is not maintained"):
        _schedule(meta)
    with pytest.raises(UnsupportedTableError, match="MERGE_ON_READ"):
        _schedule(hudi_table("cow/v6_nonpartitioned"))


def test_options_use_hudis_keys() -> None:
    settings = CompactionSettings.from_options({
        "hoodie.compact.inline.trigger.strategy": "num_or_time",
        "hoodie.compact.inline.max.delta.commits": "3",
        "hoodie.compact.inline.max.delta.seconds": "120",
        "hoodie.compaction.strategy": CompactionStrategy.UNBOUNDED.value,  # the full Java class name
        "hoodie.compaction.target.io": "100",
    })
    assert settings == CompactionSettings(TriggerStrategy.NUM_OR_TIME, 3, 120, CompactionStrategy.UNBOUNDED,
                                          100)
    assert CompactionStrategy.UNBOUNDED.value.startswith("org.apache.hudi.table.action.compact.strategy.")
    assert CompactionSettings.from_options({}) == CompactionSettings()
    assert settings.options()["hoodie.compact.inline.max.delta.commits"] == "3"
    with pytest.raises(ValueError, match="hoodie.compact.inline.max.delta.comits: not a compaction option"):
        CompactionSettings.from_options({"hoodie.compact.inline.max.delta.comits": "3"})
    with pytest.raises(ValueError, match="DayBasedCompactionStrategy: not supported"):
        CompactionSettings.from_options({"hoodie.compaction.strategy": "DayBasedCompactionStrategy"})
    with pytest.raises(ValueError, match="max.delta.commits=x: not a valid value"):
        CompactionSettings.from_options({"hoodie.compact.inline.max.delta.commits": "x"})
