"""File-system view: listing, file groups and slices of real Hudi tables (and states derived from them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from hoodied.hoodie.avro.container import write_single_record
from hoodied.hoodie.fsview import FileSystemView, list_storage
from hoodied.hoodie.log import BlockType, HeaderKey, encode_avro_data_block, encode_block, write_log_file
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.plans import ClusteringPlan

V8_TRIPS = "mor/avro/v8_trips_8i3u1d"
V8_COMPACTION = "20251220210129235"
V8_COMPACTION_DONE = "20251220210129235_20251220210129883.commit"
V8_LATE_UPDATE = "20251220210130911"  # delta commit after the compaction (rider-G, sao_paulo)
V9_MOR = "mor/avro/v9_txns_simple_nometa"
V9_CLUSTERING = "20260307135840454"
V9_CLUSTERING_DONE = "20260307135840454_20260307135840902.replacecommit"


def _view(path: Path, **kwargs: Any) -> FileSystemView:
    table = HoodieTable.open(str(path))
    return table.file_system_view(**kwargs)


# --------------------------------------------------------------------------------------
# Listing
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fid", "partitions"),
    [
        ("cow/v6_nonpartitioned", [""]),
        (
            "cow/v8_complexkeygen_hivestyle",
            ["byteField=10/shortField=300", "byteField=20/shortField=100", "byteField=30/shortField=100"],
        ),
        (
            "cow/v6_timebasedkeygen_nonhivestyle",
            ["2023/04/01/12", "2023/04/02/12", "2023/04/03/12", "2023/04/04/13"],
        ),
        ("cow/v6_empty", [""]),  # non-partitioned: the root, holding no files
    ],
)
def test_list_storage_finds_partitions(fid: str, partitions: list[str], shared_table: Any) -> None:
    table = HoodieTable.open(str(shared_table(fid)))
    listing = list_storage(table.storage, table.config)
    assert sorted(listing) == partitions
    names = [n for files in listing.values() for n, _ in files]
    assert not any(n.startswith(".hoodie_partition_metadata") for n in names)
    assert all(size > 0 for files in listing.values() for _, size in files)
    assert bool(names) == (fid != "cow/v6_empty")


@pytest.mark.parametrize("fid", [V8_TRIPS, "cow/v9_txns_simple_meta", "mor/avro/v9_txns_simple_meta"])
def test_metadata_listing_gives_the_same_view_as_storage(fid: str, shared_table: Any) -> None:
    table = HoodieTable.open(str(shared_table(fid)))
    assert table.metadata is not None
    by_mdt = table.file_system_view(listing="metadata")
    by_storage = table.file_system_view(listing="storage")
    assert [str(s) for s in by_mdt.read_slices()] == [str(s) for s in by_storage.read_slices()]
    assert [(g.partition, g.file_id, len(g.slices)) for g in by_mdt.file_groups(include_replaced=True)] == [
        (g.partition, g.file_id, len(g.slices)) for g in by_storage.file_groups(include_replaced=True)
    ]


# --------------------------------------------------------------------------------------
# Layout 2 (v8/v9): completion-time slicing, pending compaction, replaced file groups
# --------------------------------------------------------------------------------------


def test_v8_slices_by_completion_time(shared_table: Any) -> None:
    view = _view(shared_table(V8_TRIPS), listing="storage")
    groups = view.file_groups()
    assert len(groups) == 3
    for g in groups:
        assert [s.base_instant for s in g.slices] == ["20251220210108078", V8_COMPACTION]
        older, newer = g.slices
        assert older.base_file is not None and newer.base_file is not None
        # every log completed before the compaction: it stays in the older slice
        assert all(
            lf.completion_time is not None and lf.completion_time < V8_COMPACTION for lf in older.log_files
        )
        assert [lf.instant_time for lf in newer.log_files] == (
            [V8_LATE_UPDATE] if g.partition == "city=sao_paulo" else []
        )
        assert g.pending_compaction is None
    assert [s.base_instant for s in view.read_slices()] == [V8_COMPACTION] * 3


def test_v8_time_travel_selects_older_slices(shared_table: Any) -> None:
    view = _view(shared_table(V8_TRIPS), as_of="20251220210128625", listing="storage")
    slices = view.read_slices()
    assert [s.base_instant for s in slices] == ["20251220210108078"] * 3
    assert sum(len(s.log_files) for s in slices) == 4
    assert _view(shared_table(V8_TRIPS), as_of="20200101000000000").read_slices() == []


def test_v8_pending_compaction_opens_a_new_slice(hudi_table: Any) -> None:
    path = hudi_table(V8_TRIPS)
    (path / ".hoodie" / "timeline" / V8_COMPACTION_DONE).unlink()
    view = _view(path, listing="storage")
    for g in view.file_groups():
        assert g.pending_compaction == V8_COMPACTION
        older, newer = g.slices
        assert newer.base_instant == V8_COMPACTION and newer.base_file is None  # partial output ignored
        assert [lf.instant_time for lf in newer.log_files] == (
            [V8_LATE_UPDATE] if g.partition == "city=sao_paulo" else []
        )
    # reading merges the pending compaction's slice into the one before it
    for s in view.read_slices():
        assert s.base_instant == "20251220210108078" and s.base_file is not None
        assert V8_LATE_UPDATE in {lf.instant_time for lf in s.log_files} or s.partition != "city=sao_paulo"
    # the raw latest slice is the empty one
    assert all(s.base_file is None for s in view.latest_slices())


def test_v9_replaced_file_groups_are_excluded_as_of(shared_table: Any) -> None:
    path = shared_table(V9_MOR)
    view = _view(path, listing="storage")
    replaced = {(g.partition, g.file_id): g.replaced_by for g in view.replaced_file_groups()}
    assert set(replaced.values()) == {"20260307135837782", V9_CLUSTERING}
    visible = {(g.partition, g.file_id) for g in view.file_groups()}
    assert not visible & set(replaced)
    # as of just before the clustering, the file groups it replaced are visible again
    before = _view(path, as_of="20260307135840408", listing="storage")
    clustered = {k for k, v in replaced.items() if v == V9_CLUSTERING}
    assert clustered <= {(g.partition, g.file_id) for g in before.file_groups()}


def test_v9_pending_clustering_recorded_and_outputs_ignored(hudi_table: Any) -> None:
    path = hudi_table(V9_MOR)
    (path / ".hoodie" / "timeline" / V9_CLUSTERING_DONE).unlink()
    table = HoodieTable.open(str(path))
    view = table.file_system_view(listing="storage")
    clustering = table.timeline.get(V9_CLUSTERING)
    assert clustering is not None
    plan = table.timeline.plan(clustering)
    assert isinstance(plan, ClusteringPlan)
    planned = plan.file_groups
    assert planned
    for g in view.file_groups(include_replaced=True):
        assert (g.pending_clustering == V9_CLUSTERING) == ((g.partition, g.file_id) in planned)
        # no slice has a base file written by the uncommitted clustering
        assert all(s.base_instant != V9_CLUSTERING for s in g.slices)
    assert not any(g.replaced_by == V9_CLUSTERING for g in view.file_groups(include_replaced=True))


def test_uncommitted_base_file_is_ignored_unless_pending_asked(hudi_table: Any) -> None:
    path = hudi_table("cow/v8_nonpartitioned")
    table = HoodieTable.open(str(path))
    (group,) = table.file_system_view().file_groups()
    assert group.latest_slice is not None and group.latest_slice.base_file is not None
    inflight = "20990101000000000"
    old = group.latest_slice.base_file
    new_name = f"{old.name.file_id}_0-1-1_{inflight}.parquet"
    shutil.copy(path / old.path, path / new_name)
    (path / ".hoodie" / "timeline" / f"{inflight}.commit.requested").write_bytes(b"")
    table = HoodieTable.open(str(path))
    (group,) = table.file_system_view().file_groups()
    assert [s.base_instant for s in group.slices][-1] != inflight
    (group,) = table.file_system_view(include_pending=True).file_groups()
    assert group.slices[-1].base_instant == inflight


# --------------------------------------------------------------------------------------
# Layout 1 (v6): base-instant slicing, rollback, pending compaction
# --------------------------------------------------------------------------------------


def test_v6_log_files_join_the_slice_named_in_their_file_name(shared_table: Any) -> None:
    view = _view(shared_table("mor/avro/v6_trips_8i1u"))
    with_logs = [s for s in view.read_slices() if s.log_files]
    assert len(with_logs) == 1
    (s,) = with_logs
    assert all(lf.instant_time == s.base_instant and lf.completion_time is None for lf in s.log_files)


def test_v6_rolled_back_instant_is_not_committed(shared_table: Any) -> None:
    table = HoodieTable.open(str(shared_table("mor/parquet/v6_nonpartitioned_rollback")))
    rolled = table.timeline.rolled_back_instants()
    assert rolled
    state = table.commit_state()
    assert not any(state.is_committed(t) for t in rolled)
    (s,) = table.file_system_view().read_slices()
    assert [lf.name.version for lf in s.log_files] == [1, 2, 3]


def test_v6_pending_compaction_splits_slices(hudi_table: Any) -> None:
    """A compaction scheduled on a v6 table: later log files carry its instant and form a new slice."""
    path = hudi_table("mor/avro/v6_trips_8i1u")
    table = HoodieTable.open(str(path))
    (fs,) = [s for s in table.file_system_view().read_slices() if s.log_files]
    last_write = table.timeline.completed()[-1].requested_time
    compaction = str(int(last_write) + 1000)
    later = str(int(compaction) + 1000)
    plan = {
        "operations": [
            {
                "baseInstantTime": fs.base_instant,
                "deltaFilePaths": [lf.file_name for lf in fs.log_files],
                "dataFilePath": fs.base_file.file_name if fs.base_file else None,
                "fileId": fs.file_id,
                "partitionPath": fs.partition,
                "metrics": {},
                "bootstrapFilePath": None,
            }
        ],
        "extraMetadata": {},
        "version": 2,
    }
    hoodie = path / ".hoodie"
    (hoodie / f"{compaction}.compaction.requested").write_bytes(
        write_single_record(plan, "HoodieCompactionPlan")
    )
    shutil.copy(hoodie / f"{last_write}.deltacommit", hoodie / f"{later}.deltacommit")
    # a delta commit after the schedule writes a log file named after the compaction instant
    rider_d = {r["rider"]: r for r in table.to_arrow().to_pylist()}["rider-D"]
    schema = json.loads(table.avro_schema() or "{}")
    meta = [{"name": n, "type": ["null", "string"], "default": None} for n in table.schema().names[:5]]
    full = json.dumps(dict(schema, fields=meta + schema["fields"]))
    record = dict(rider_d, fare=11.0, _hoodie_commit_time=later)
    block = encode_block(
        BlockType.AVRO_DATA,
        {HeaderKey.INSTANT_TIME: later, HeaderKey.SCHEMA: full},
        encode_avro_data_block([record], full),
    )
    write_log_file(LocalStorage(str(path)), f"{fs.partition}/.{fs.file_id}_{compaction}.log.1_0-1-1", [block])

    table = HoodieTable.open(str(path))
    group = table.file_system_view().file_group(fs.partition, fs.file_id)
    assert group is not None and group.pending_compaction == compaction
    assert [s.base_instant for s in group.slices] == [fs.base_instant, compaction]
    assert [lf.instant_time for lf in group.slices[1].log_files] == [compaction]
    merged = group.merged_slice_as_of(None)
    assert merged is not None and merged.base_file == fs.base_file and len(merged.log_files) == 2
    fares = {r["rider"]: r["fare"] for r in table.to_arrow().to_pylist()}
    assert fares["rider-D"] == 11.0


def test_completed_instant_named_by_an_earlier_rollback_still_counts(hudi_table) -> None:
    """A table service retried after the rollback of its failed attempt completes under the
    same instant time: the completed instant is committed although a rollback names it."""
    from hoodied.hoodie.avro.container import write_single_record
    from hoodied.hoodie.fsview import CommitState
    from hoodied.hoodie.table import HoodieTable

    path = hudi_table("mor/avro/v8_trips_8i3u1d")
    compaction = "20251220210129235"
    rollback = "20251220210129300"
    metadata = {
        "startRollbackTime": rollback,
        "timeTakenInMillis": 5,
        "totalFilesDeleted": 0,
        "commitsRollback": [compaction],
        "partitionMetadata": {},
        "version": 1,
        "instantsRollback": [{"commitTime": compaction, "action": "compaction"}],
    }
    timeline = path / ".hoodie" / "timeline"
    (timeline / f"{rollback}.rollback.inflight").write_bytes(b"")
    (timeline / f"{rollback}_20251220210129400.rollback").write_bytes(
        write_single_record(metadata, "HoodieRollbackMetadata")
    )
    table = HoodieTable.open(str(path))
    assert compaction in table.timeline.rolled_back_instants()
    assert CommitState(table.timeline, table.config).is_committed(compaction)
    assert table.to_arrow().num_rows == 6
