"""Timeline writes on real tables, in both layouts, read back with ``hoodie.timeline.active.Timeline``."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import fastavro
import pytest

from hoodied.hoodie.avro.container import read_single_record
from hoodied.hoodie.errors import InstantStateError, LockLostError
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter, jackson_json
from hoodied.service.locks import LocalFileLock
from tests.helpers.fixtures import ALL_FIXTURES

FAST = TimeSettings(max_expected_clock_skew_ms=5)

# One table per layout / version: v6 (layout 1) and v8, v9 (layout 2).
TABLES = ["cow/v6_nonpartitioned", "cow/v8_nonpartitioned", "mor/avro/v9_txns_simple_nometa"]

PLANS: dict[Action, dict[str, Any] | None] = {
    Action.COMPACTION: {"operations": [], "version": 2},
    Action.LOG_COMPACTION: {"operations": [], "version": 2},
    Action.CLUSTERING: {"operationType": "CLUSTER", "version": 1},
    Action.REPLACE_COMMIT: {"operationType": "INSERT_OVERWRITE", "version": 1},
    Action.CLEAN: {"policy": "KEEP_LATEST_COMMITS", "version": 2},
    Action.ROLLBACK: {"instantToRollback": {"commitTime": "20240101000000000", "action": "commit"}},
    Action.RESTORE: {"instantsToRollback": [], "savepointToRestoreTimestamp": "20240101000000000"},
    Action.INDEXING: {"indexPartitionInfos": []},
    Action.COMMIT: None,
    Action.DELTA_COMMIT: None,
}

COMMIT_MD = {"partitionToWriteStats": {}, "compacted": False, "extraMetadata": {}, "operationType": "UPSERT"}

METADATA: dict[Action, dict[str, Any]] = {
    Action.COMPACTION: {**COMMIT_MD, "compacted": True, "operationType": "COMPACT"},
    Action.LOG_COMPACTION: {**COMMIT_MD, "operationType": "LOG_COMPACT"},
    Action.CLUSTERING: {**COMMIT_MD, "operationType": "CLUSTER", "partitionToReplaceFileIds": {"": ["f-0"]}},
    Action.REPLACE_COMMIT: {
        **COMMIT_MD, "operationType": "INSERT_OVERWRITE", "partitionToReplaceFileIds": {},
    },
    Action.COMMIT: COMMIT_MD,
    Action.DELTA_COMMIT: COMMIT_MD,
    Action.CLEAN: {
        "startCleanTime": "20240101000000000", "timeTakenInMillis": 3, "totalFilesDeleted": 0,
        "earliestCommitToRetain": "", "partitionMetadata": {}, "version": 2,
    },
    Action.ROLLBACK: {
        "startRollbackTime": "20240101000000000", "timeTakenInMillis": 3, "totalFilesDeleted": 0,
        "commitsRollback": ["20240101000000000"], "partitionMetadata": {},
    },
    Action.RESTORE: {
        "startRestoreTime": "20240101000000000", "timeTakenInMillis": 3, "instantsToRollback": [],
        "hoodieRestoreMetadata": {},
    },
    Action.SAVEPOINT: {
        "savepointedBy": "hoodied", "savepointedAt": 1, "comments": "test", "partitionMetadata": {},
    },
    Action.INDEXING: {"indexPartitionInfos": []},
}

COMPLETED_NAME = {Action.COMPACTION: "commit", Action.LOG_COMPACTION: "deltacommit",
                  Action.CLUSTERING: "replacecommit"}


def _open(root: Path) -> tuple[LocalStorage, Any, InProcessLock, TimelineWriter]:
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    lock = InProcessLock(storage.base_uri)
    return storage, config, lock, TimelineWriter(storage, config, lock, time_settings=FAST)


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("fid", TABLES)
@pytest.mark.parametrize("action", [*PLANS, Action.SAVEPOINT], ids=lambda a: a.value)
def test_every_action_in_both_layouts(hudi_table, fid: str, action: Action) -> None:
    root = hudi_table(fid)
    storage, config, lock, writer = _open(root)
    folder = root / config.timeline_path
    layout = config.timeline_layout
    on_disk = Action.REPLACE_COMMIT if (action is Action.CLUSTERING and layout == 1) else action
    with lock:
        if action is Action.SAVEPOINT:
            t = writer.new_instant_time()
        else:
            t = writer.schedule(action, PLANS[action]).requested_time
        writer.transition_to_inflight(t, action)
        done = writer.complete(t, action, METADATA[action])

    names = sorted(p.name for p in folder.iterdir() if p.name.startswith(t))
    completed = COMPLETED_NAME.get(on_disk, on_disk.value)
    expected_done = f"{t}_{done.completion_time}.{completed}" if layout == 2 else f"{t}.{completed}"
    inflight = f"{t}.inflight" if action is Action.COMMIT else f"{t}.{on_disk.value}.inflight"
    expected = {expected_done, inflight}
    if action is not Action.SAVEPOINT:
        expected.add(f"{t}.{on_disk.value}.requested")
    assert names == sorted(expected)
    if layout == 2:
        assert done.completion_time is not None and done.completion_time > t
    else:
        assert done.completion_time is None

    # requested: the Avro plan (object container, null codec, one record) or empty
    if action is not Action.SAVEPOINT:
        data = (folder / f"{t}.{on_disk.value}.requested").read_bytes()
        if PLANS[action] is None:
            assert data == b""
        else:
            reader = fastavro.reader(io.BytesIO(data))
            assert reader.metadata.get("avro.codec", "null") == "null"
            assert len(list(reader)) == 1

    tl = Timeline.load(storage, config)
    inst = tl.get(t)
    assert inst is not None and inst.state is State.COMPLETED
    assert inst.action is (Action.REPLACE_COMMIT if on_disk is Action.REPLACE_COMMIT else action)
    if layout == 2:
        assert inst.completion_time == done.completion_time
    md = tl.read_commit_metadata(inst)
    for key, value in METADATA[action].items():
        if key != "version":
            assert md[key] == value, key
    if action in (Action.CLUSTERING,):
        assert tl.is_clustering(inst)
    expected_plan = PLANS.get(action)
    if expected_plan is not None:
        plan = tl.read_plan(inst)
        assert plan is not None
        for key, value in expected_plan.items():
            assert plan[key] == value


@pytest.mark.parametrize("fid", TABLES)
def test_rerunning_transitions_is_a_no_op(hudi_table, fid: str) -> None:
    root = hudi_table(fid)
    storage, config, lock, writer = _open(root)
    folder = root / config.timeline_path
    with lock:
        t = writer.schedule(Action.CLEAN, PLANS[Action.CLEAN]).requested_time
        before = _snapshot(folder)
        again = writer.create_requested(Action.CLEAN, t, {"policy": "KEEP_LATEST_FILE_VERSIONS"})
        assert again.state is State.REQUESTED
        assert _snapshot(folder) == before  # the other plan was not written over the first
        writer.transition_to_inflight(t, Action.CLEAN)
        after_inflight = _snapshot(folder)
        assert writer.transition_to_inflight(t, Action.CLEAN).state is State.INFLIGHT
        assert _snapshot(folder) == after_inflight
        done = writer.complete(t, Action.CLEAN, METADATA[Action.CLEAN])
        final = _snapshot(folder)
        # every step again, in any order: nothing changes, the completed instant comes back
        assert writer.complete(t, Action.CLEAN, METADATA[Action.CLEAN]) == done
        assert writer.transition_to_inflight(t, Action.CLEAN) == done
        assert writer.create_requested(Action.CLEAN, t, PLANS[Action.CLEAN]) == done
        assert _snapshot(folder) == final
    if config.timeline_layout == 1:
        # layout 1 (0.x): the clean plan is copied into the inflight file
        assert final[f"{t}.clean.inflight"][1] == final[f"{t}.clean.requested"][1]
    else:
        assert final[f"{t}.clean.inflight"][1] == b""


@pytest.mark.parametrize("fid", TABLES)
def test_existing_file_is_never_overwritten(hudi_table, fid: str) -> None:
    root = hudi_table(fid)
    storage, config, lock, writer = _open(root)
    folder = root / config.timeline_path
    with lock:
        t = writer.schedule(Action.COMPACTION, PLANS[Action.COMPACTION]).requested_time
        # another writer (one that ignores the lock) got its inflight in first
        (folder / f"{t}.compaction.inflight").write_bytes(b"theirs")
        writer.transition_to_inflight(t, Action.COMPACTION)
    assert (folder / f"{t}.compaction.inflight").read_bytes() == b"theirs"
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_transitions_need_the_previous_state(hudi_table) -> None:
    storage, config, lock, writer = _open(hudi_table("cow/v8_nonpartitioned"))
    with lock:
        t = writer.new_instant_time()
        with pytest.raises(InstantStateError, match="has no requested file"):
            writer.transition_to_inflight(t, Action.CLEAN)
        writer.create_requested(Action.CLEAN, t, PLANS[Action.CLEAN])
        with pytest.raises(InstantStateError, match="not inflight"):
            writer.complete(t, Action.CLEAN, METADATA[Action.CLEAN])


def test_bad_content_is_refused_before_writing(hudi_table) -> None:
    root = hudi_table("cow/v8_nonpartitioned")
    storage, config, lock, writer = _open(root)
    folder = root / config.timeline_path
    before = _snapshot(folder)
    with lock:
        with pytest.raises(ValueError, match="HoodieCleanerPlan"):
            writer.schedule(Action.CLEAN, {"policy": 42})
        with pytest.raises(ValueError, match="needs a HoodieCompactionPlan"):
            writer.schedule(Action.COMPACTION, None)
        with pytest.raises(ValueError, match="no requested state"):
            writer.schedule(Action.SAVEPOINT, None)
    assert _snapshot(folder) == before


def test_no_write_without_the_lock(hudi_table) -> None:
    root = hudi_table("cow/v8_nonpartitioned")
    storage, config, _, _ = _open(root)
    folder = root / config.timeline_path
    lock = LocalFileLock(storage)
    writer = TimelineWriter(storage, config, lock, time_settings=FAST)
    before = _snapshot(folder)
    with pytest.raises(LockLostError, match="not held"):
        writer.schedule(Action.CLEAN, PLANS[Action.CLEAN])
    with lock:
        t = writer.schedule(Action.CLEAN, PLANS[Action.CLEAN]).requested_time
        os.unlink(lock.path)  # the lock is gone: another process may hold a new one now
        with pytest.raises(LockLostError, match="removed or replaced"):
            writer.transition_to_inflight(t, Action.CLEAN)
    after = _snapshot(folder)
    assert set(after) - set(before) == {f"{t}.clean.requested"}


@pytest.mark.parametrize("fid", ["mor/avro/v9_txns_simple_nometa", "mor/parquet/v6_nonpartitioned"])
def test_compaction_with_a_real_plan_and_retry_after_revert(hudi_table, fid: str) -> None:
    # the plan Hudi wrote for the v9 table's compaction, scheduled again as a new instant
    root = hudi_table(fid)
    storage, config, lock, writer = _open(root)
    source = hudi_table("mor/avro/v9_txns_simple_nometa") if fid.startswith("mor/parquet") else root
    req = next((source / ".hoodie" / "timeline").glob("*.compaction.requested"))
    plan = read_single_record(req.read_bytes(), req.name)
    assert plan["operations"]
    with lock:
        t = writer.schedule(Action.COMPACTION, plan).requested_time
        writer.transition_to_inflight(t, Action.COMPACTION)
        # a failed attempt: back to requested (the plan stays), then the retry goes through
        writer.revert_inflight_to_requested(t, Action.COMPACTION)
        reverted = Timeline.load(storage, config).get(t)
        assert reverted is not None and reverted.state is State.REQUESTED
        writer.transition_to_inflight(t, Action.COMPACTION)
        done = writer.complete(t, Action.COMPACTION, METADATA[Action.COMPACTION])
        with pytest.raises(InstantStateError, match="is completed"):
            writer.revert_inflight_to_requested(t, Action.COMPACTION)
    tl = Timeline.load(storage, config)
    inst = tl.get(t)
    assert inst is not None and inst.action is Action.COMPACTION and inst.is_completed
    written = tl.read_plan(inst)
    assert written is not None and written["operations"] == plan["operations"]
    assert tl.read_commit_metadata(inst)["compacted"] is True
    if config.timeline_layout == 1:
        text = (root / ".hoodie" / f"{t}.commit").read_text()
        assert text.startswith('{\n  "partitionToWriteStats" : { },\n  "compacted" : true,')
        assert '"version"' not in text
    else:
        assert done.completion_time is not None


def test_completion_time_follows_everything_on_the_timeline(hudi_table) -> None:
    root = hudi_table("mor/avro/v9_txns_simple_nometa")
    storage, config, lock, writer = _open(root)
    with lock:
        t = writer.schedule(Action.CLEAN, PLANS[Action.CLEAN]).requested_time
        writer.transition_to_inflight(t, Action.CLEAN)
        # a Java writer, clock ahead, completed something while we worked
        ahead = str(int(t) + 300)
        (root / ".hoodie" / "timeline" / f"{t[:-3]}001_{ahead}.deltacommit").write_bytes(b"")
        done = writer.complete(t, Action.CLEAN, METADATA[Action.CLEAN])
    assert done.completion_time is not None and done.completion_time > ahead


@pytest.mark.parametrize("fid", [f for f in ALL_FIXTURES if "/v6_" in f and not f.endswith("_empty")])
def test_jackson_json_matches_hudi_v6_files_byte_for_byte(shared_table, fid: str) -> None:
    hoodie = shared_table(fid) / ".hoodie"
    checked = 0
    for path in sorted(hoodie.iterdir()):
        if not path.is_file() or path.name == "hoodie.properties":
            continue
        data = path.read_bytes()
        if data.lstrip()[:1] != b"{":
            continue
        assert jackson_json(json.loads(data)).encode("utf-8") == data, path.name
        checked += 1
    assert checked > 0


@pytest.mark.parametrize(
    "fid", ["cow/v6_nonpartitioned", "cow/v8_nonpartitioned", "mor/avro/v9_txns_simple_nometa"]
)
def test_hudi_rs_reads_the_table_after_our_timeline_writes(hudi_table, fid: str) -> None:
    import hudi

    root = hudi_table(fid)

    def rows() -> int:
        return sum(b.num_rows for b in hudi.HudiTableBuilder(str(root)).build().read())

    before = rows()
    storage, config, lock, writer = _open(root)
    with lock:
        t = writer.schedule(Action.CLEAN, PLANS[Action.CLEAN]).requested_time
        writer.transition_to_inflight(t, Action.CLEAN)
        writer.complete(t, Action.CLEAN, METADATA[Action.CLEAN])
        writer.schedule(Action.ROLLBACK, PLANS[Action.ROLLBACK])  # left pending
    assert rows() == before
