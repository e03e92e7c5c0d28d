"""Typed plans from real Hudi-written plan files, and the Avro schema copies they rely on."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import fastavro
import pytest

from hoodied.hoodie.avro.container import (
    SCHEMA_NAMES,
    read_single_record,
    schema,
    schema_json,
    write_single_record,
    writer_schema_name,
)
from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import (
    CleanerPlan,
    ClusteringPlan,
    CompactionPlan,
    IndexPlan,
    RestorePlan,
    RollbackPlan,
    decode_plan,
)
from tests.helpers.fixtures import ALL_FIXTURES

V8_TRIPS = "mor/avro/v8_trips_8i3u1d"
V9_MOR = "mor/avro/v9_txns_simple_nometa"


def timeline_file(table: Path, name: str) -> bytes:
    folder = table / ".hoodie" / "timeline"
    return ((folder if folder.is_dir() else table / ".hoodie") / name).read_bytes()


def pending(action: Action, t: str = "20260101000000000") -> Instant:
    return Instant(t, action, State.REQUESTED)


# ------------------------------------------------------------------ real plans


def test_compaction_plan_of_v8_trips(shared_table) -> None:
    data = timeline_file(shared_table(V8_TRIPS), "20251220210129235.compaction.requested")
    plan = decode_plan(pending(Action.COMPACTION), read_single_record(data, "compaction.requested"))
    assert isinstance(plan, CompactionPlan)
    assert plan.version == 2 and plan.missing_schedule_partitions == () and not plan.preserve_hoodie_metadata
    assert plan.extra_metadata == {"_hoodie.spark.sql.writes.prepped": "true"}
    partitions = [op.partition_path for op in plan.operations]
    assert partitions == ["city=chennai", "city=san_francisco", "city=sao_paulo"]
    chennai = plan.operations[0]
    assert chennai.file_id == "6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0"
    assert chennai.base_instant_time == "20251220210108078"
    assert chennai.base_file_name == f"{chennai.file_id}_2-986-2794_20251220210108078.parquet"
    assert chennai.log_file_names == (
        ".6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0_20251220210127080.log.1_0-1072-3078",
        ".6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0_20251220210128625.log.1_0-1097-3150",
    )
    assert chennai.metrics["TOTAL_LOG_FILES"] == 2.0 and chennai.log_files_size == 2117.0
    assert plan.summary() == "3 file groups in 3 partitions, 4 log files, 4.1 KB"
    # the same Avro type is the log-compaction plan
    log_plan = decode_plan(pending(Action.LOG_COMPACTION), read_single_record(data, "x"))
    assert isinstance(log_plan, CompactionPlan)


def test_metadata_table_compaction_plan_has_no_base_files(shared_table) -> None:
    table = shared_table(V8_TRIPS) / ".hoodie" / "metadata"
    data = timeline_file(table, "20251220210130942.compaction.requested")
    plan = CompactionPlan.from_avro(read_single_record(data, "x"))
    assert any(op.data_file_path is None and op.base_file_name is None for op in plan.operations)
    assert all(op.base_instant_time for op in plan.operations)
    assert {op.partition_path for op in plan.operations} >= {"files", "record_index"}


def test_clustering_plan_of_v9(shared_table) -> None:
    data = timeline_file(shared_table(V9_MOR), "20260307135840454.clustering.requested")
    plan = decode_plan(pending(Action.CLUSTERING), read_single_record(data, "clustering.requested"))
    assert isinstance(plan, ClusteringPlan)
    assert plan.operation_type == "CLUSTER"
    strategy = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"
    assert plan.strategy_class_name == strategy
    assert [len(g.slices) for g in plan.input_groups] == [2, 1, 2]
    assert all(g.num_output_file_groups == 1 for g in plan.input_groups)
    first = plan.input_groups[0].slices[0]
    assert first.data_file_path is not None and first.data_file_path.startswith("file:/")
    assert first.base_file_name == "6c49c37a-faf6-4ab2-a4a7-d66e4ea05a2f-0_0-55-112_20260307135839205.parquet"
    assert first.partition_path == "region=apac" and first.log_file_names == ()
    assert first.bootstrap_file_path is None  # Hudi writes "" for "none"
    assert len(plan.file_groups) == 5
    assert plan.summary() == "3 groups, 5 file groups -> 3 output file groups, 0 log files"
    # a bare HoodieClusteringPlan decodes the same
    bare = ClusteringPlan.from_avro(read_single_record(data, "x")["clusteringPlan"])
    assert bare.input_groups == plan.input_groups


def test_rollback_and_index_plans(shared_table) -> None:
    table = shared_table("mor/parquet/v6_nonpartitioned_rollback")
    data = timeline_file(table, "20250126040936578.rollback.requested")
    plan = decode_plan(pending(Action.ROLLBACK), read_single_record(data, "x"))
    assert isinstance(plan, RollbackPlan)
    assert plan.instant_to_rollback is not None
    target = plan.instant_to_rollback
    assert (target.timestamp, target.action) == ("20250126040826878", "deltacommit")
    assert len(plan.requests) == 2 and plan.requests[0].file_id is None
    assert sum(len(r.log_blocks_to_be_deleted) for r in plan.requests) == 1
    assert plan.summary() == "roll back deltacommit 20250126040826878: 1 file to delete, 1 log file to revert"

    data = timeline_file(shared_table(V8_TRIPS), "20251220210117766.indexing.requested")
    index = decode_plan(pending(Action.INDEXING), read_single_record(data, "x"))
    assert isinstance(index, IndexPlan)
    assert [(p.metadata_partition_path, p.index_upto_instant) for p in index.partition_infos] == [
        ("secondary_index_rider_idx", "20251220210108078")
    ]
    assert index.summary() == "index 1 partition: secondary_index_rider_idx"


def test_replacecommit_without_clustering_plan_and_plain_actions() -> None:
    empty = {"operationType": None, "clusteringPlan": None, "extraMetadata": None, "version": None}
    assert decode_plan(pending(Action.REPLACE_COMMIT), empty) is None
    assert decode_plan(pending(Action.COMMIT), {"x": 1}) is None
    assert decode_plan(pending(Action.COMPACTION), None) is None


# ------------------------------------------------------------------ plans written with our schemas


def test_cleaner_plan_round_trip_v1_and_v2_file_lists() -> None:
    record = {
        "earliestInstantToRetain": {"timestamp": "20260101000000000", "action": "commit", "state": "DONE"},
        "lastCompletedCommitTimestamp": "20260102000000000",
        "policy": "KEEP_LATEST_COMMITS",
        "filesToBeDeletedPerPartition": {"old": ["a.parquet"]},
        "version": 2,
        "filePathsToBeDeletedPerPartition": {
            "p=1": [
                {"filePath": "file:/t/p=1/b.parquet", "isBootstrapBaseFile": False},
                {"filePath": "file:/t/p=1/.c.log.1_0-1-1", "isBootstrapBaseFile": None},
            ]
        },
        "partitionsToBeDeleted": ["p=9"],
    }
    decoded = read_single_record(write_single_record(record, "HoodieCleanerPlan"), "clean.requested")
    plan = decode_plan(pending(Action.CLEAN), decoded)
    assert isinstance(plan, CleanerPlan)
    assert plan.earliest_instant_to_retain is not None
    assert plan.earliest_instant_to_retain.timestamp == "20260101000000000"
    assert [f.file_name for f in plan.files_to_delete["p=1"]] == ["b.parquet", ".c.log.1_0-1-1"]
    assert [f.file_name for f in plan.files_to_delete["old"]] == ["a.parquet"]
    assert plan.partitions_to_delete == ("p=9",)
    assert plan.summary() == (
        "3 files in 2 partitions, 1 partition dropped, policy KEEP_LATEST_COMMITS, "
        "retain from 20260101000000000"
    )


def test_restore_plan_round_trip() -> None:
    record = {
        "instantsToRollback": [{"commitTime": "20260103000000000", "action": "deltacommit"}],
        "savepointToRestoreTimestamp": "20260102000000000",
    }
    decoded = read_single_record(write_single_record(record, "HoodieRestorePlan"), "restore.requested")
    plan = decode_plan(pending(Action.RESTORE), decoded)
    assert isinstance(plan, RestorePlan) and plan.version == 2  # the schema default
    assert plan.summary() == "restore to 20260102000000000: 1 instant rolled back"


def test_compaction_plan_written_with_our_schema_decodes_in_the_hudi_writer_shape(shared_table) -> None:
    """A plan we write carries every field Hudi 1.x's writer schema has (names, types, namespace)."""
    data = timeline_file(shared_table(V8_TRIPS), "20251220210129235.compaction.requested")
    original = read_single_record(data, "x")
    ours = write_single_record(original, "HoodieCompactionPlan")
    assert writer_schema_name(ours, "x") == "org.apache.hudi.avro.model.HoodieCompactionPlan"
    assert read_single_record(ours, "ours") == original


# ------------------------------------------------------------------ schemas and containers


def test_every_schema_parses_and_is_self_contained() -> None:
    for name in SCHEMA_NAMES:
        parsed = schema(name)
        assert isinstance(parsed, dict)  # a named record
        assert parsed["name"] == f"org.apache.hudi.avro.model.{name}"
        assert "avro.java.string" not in schema_json(name)
    with pytest.raises(KeyError):
        schema("HoodieNoSuchThing")


@pytest.mark.parametrize("fid", sorted(ALL_FIXTURES))
def test_our_schemas_read_every_hudi_written_file(fid: str, shared_table) -> None:
    """Schema resolution from Hudi's embedded writer schema to our copy succeeds for every timeline file."""
    table = shared_table(fid)
    meta = table / ".hoodie"
    folders = [meta / "timeline", meta, meta / "metadata" / ".hoodie" / "timeline"]
    checked = 0
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            data = path.read_bytes() if path.is_file() else b""
            if not data.startswith(b"Obj\x01"):
                continue
            name = writer_schema_name(data, path.name).rsplit(".", 1)[-1]
            records = list(fastavro.reader(io.BytesIO(data), reader_schema=schema(name)))
            assert len(records) == 1
            checked += 1
    # layout-1 tables keep JSON commit metadata (only plans and rollbacks are Avro there)
    if any(meta.joinpath("timeline").glob("*_*.*")):
        assert checked > 0


def test_read_single_record_errors() -> None:
    with pytest.raises(HoodieFormatError, match=r"^f\.requested: empty file"):
        read_single_record(b"", "f.requested")
    with pytest.raises(HoodieFormatError, match=r"^f\.requested: not an Avro object container"):
        read_single_record(b"{}", "f.requested")
    two = io.BytesIO()
    fastavro.writer(two, schema("HoodieIndexPlan"), [{"version": 1}, {"version": 2}])
    with pytest.raises(HoodieFormatError, match="holds 2 records, expected 1"):
        read_single_record(two.getvalue(), "f")
    good = write_single_record({"version": 1, "indexPartitionInfos": []}, "HoodieIndexPlan")
    with pytest.raises(HoodieFormatError, match="corrupt Avro object container"):
        read_single_record(good[:-5], "f")


def test_plans_pickle_and_hash(shared_table) -> None:
    """Plans travel to Spark workers: they pickle, compare equal and hash."""
    data = timeline_file(shared_table(V8_TRIPS), "20251220210129235.compaction.requested")
    plan = CompactionPlan.from_avro(read_single_record(data, "x"))
    copy = pickle.loads(pickle.dumps(plan))
    assert copy == plan and hash(copy) == hash(plan)
    assert len(set(plan.operations)) == 3
