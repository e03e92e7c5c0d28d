"""Executing a compaction: merge each planned file slice into a new base file, commit the instant.

Runs any pending ``HoodieCompactionPlan`` of a merge-on-read table, whoever requested it
(hoodied's planner or Apache Hudi; files are resolved with ``hoodie.plan_files``). One
Spark job per instant (``executors.engine``): one task per operation, and in each task

1. the slice (base file + the plan's log files) is read and merged by
   ``hoodie.reader.read_file_slice`` with the table's merge semantics and the timeline as the
   driver saw it when the job started (bounded memory: the slice's log records + one row group);
2. the marker ``.hoodie/.temp/<T>/<partition>/<file>.marker.MERGE`` (``CREATE`` without a base
   file) is created, then ``<fileId>_<writeToken>_<T>.parquet`` is written with
   ``hoodie.basefile`` (Hudi footer: min/max record key, bloom filter, Avro schema). Every
   record keeps its ``_hoodie_commit_time`` and ``_hoodie_commit_seqno``;
   ``_hoodie_file_name`` becomes the new file's name;
3. the task returns its write statistics as one Arrow row.

The driver, under the table lock, deletes files that have markers but are not in the
statistics (a failed or duplicate task attempt), checks it still holds the lock and writes
``<T>_<completion>.commit`` (layout 1: ``<T>.commit``) with ``HoodieCommitMetadata``:
``compacted`` true, ``operationType`` ``COMPACT``, one write stat per new file (``prevCommit``
and ``prevBaseFile`` from the slice, log-file and record counts) and ``extraMetadata.schema``
(the table's Avro schema). Markers and the heartbeat go afterwards, as in Hudi.

Counts in the write stats: ``numWrites`` rows written; ``numInserts`` / ``numDeletes`` the
growth / shrinkage of the file group (exact unless one compaction both adds and removes
keys of the same group); ``numUpdateWrites`` the remaining rows that came from log files
(commit time after the slice's base instant); ``totalLogRecords`` / ``totalLogBlocks`` /
``totalRollbackBlocks`` from the committed blocks of the log files.

A compaction that is inflight when ``execute_compaction`` starts is a failed attempt (or a
live one: its heartbeat says which); it is refused here and must be rolled back first, which
``service.spark_jobs.run_spark_service`` does (the rollback-then-retry of Hudi) after running
``check_compaction``, the same check this executor makes before its inflight transition: a
corrupt or unsupported plan, or a missing input file, is found before the failed attempt's files
are deleted. Tables without meta fields are refused.

Tables with a metadata table (versions 8 and 9): after the markers are reconciled, under the
same lock, the MDT delta commit T is written and completed
(``hoodie.metadata.commit.write_commit_to_metadata_table``: the new base files in ``files``, their
``column_stats`` and ``bloom_filters``, tight-bound ``partition_stats``), then the data instant
T. A crash in between leaves a completed MDT T under a pending data T, which readers ignore;
the rollback of the failed attempt rolls it back, and a retry that finds one rolls it back
first. A table with an MDT partition a compaction cannot keep exact is refused before anything
is written (``hoodie.metadata.commit.require_commit_maintainable``, the planner's rule).

Test hook (``hoodie.crashpoints``): ``requested``, ``inflight``, ``written`` (all tasks done,
nothing committed), ``mdt-log-written`` (an MDT log file of T written), ``mdt-done`` (MDT T
completed, data T not) on the driver, ``task:<k>`` in the task of operation ``k`` after its
marker, before its file.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from hoodied.executors.attempt import (
    AttemptResult,
    by_partition,
    commit_attempt,
    pending_instant,
    read_plan,
    require_rewritable,
    run_attempt,
    start_attempt,
)
from hoodied.executors.engine import Progress, SparkOperations
from hoodied.hoodie.actions.write_schema import write_schemas
from hoodied.hoodie.basefile import (
    COMMIT_TIME,
    FILE_NAME,
    BaseFileSettings,
    BaseFileWriter,
    repeat_string,
)
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.fsview import CommitState, FileSlice
from hoodied.hoodie.heartbeat import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOLERABLE_MISSES,
)
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.log import BlockType, delete_block_records, is_rollback_command, read_log_blocks
from hoodied.hoodie.markers import IOType, WriteMarkers
from hoodied.hoodie.merge import MergeSpec
from hoodied.hoodie.metadata.commit import COMPACT
from hoodied.hoodie.plan_files import operation_slice
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.reader import BlockRecords, block_key, read_file_slice
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline import commit_metadata as cm
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import CompactionOperation, CompactionPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "STATS_SCHEMA",
    "CompactionJob",
    "CompactionResult",
    "check_compaction",
    "compact_operation",
    "execute_compaction",
    "prepare_job",
]

_COUNTS = (
    "num_writes", "num_deletes", "num_update_writes", "num_inserts", "file_size", "total_log_records",
    "total_log_blocks", "total_rollback_blocks", "total_log_files", "total_log_size",
    "total_updated_records_compacted", "log_read_ms", "upsert_ms",
)

#: One row per operation, returned by the tasks.
STATS_SCHEMA = pa.schema(
    [
        ("op", pa.int64()),
        ("partition", pa.string()),
        ("file_id", pa.string()),
        ("path", pa.string()),
        ("prev_commit", pa.string()),
        ("prev_base_file", pa.string()),
        *[(name, pa.int64()) for name in _COUNTS],
    ]
)


# ---------------------------------------------------------------------------- the job (runs in tasks)


@dataclass(frozen=True)
class CompactionJob:
    """Everything a task needs, pickled to the Spark workers; called as ``job(index, write_token)``."""

    storage: Storage
    config: TableConfig
    timeline: Timeline
    instant_time: str
    schema: pa.Schema
    footer_schema: str
    slices: tuple[FileSlice, ...]
    file_settings: BaseFileSettings = BaseFileSettings()
    """Codec and bloom filter of the new base files: Hudi's for the table (``BaseFileSettings.for_table``)."""

    def __call__(self, index: int, write_token: str) -> pa.RecordBatch:
        return compact_operation(self, index, write_token)


def _log_counts(
    job: CompactionJob, file_slice: FileSlice, commits: CommitState, decoded: BlockRecords
) -> dict[str, int]:
    """Committed blocks and records of the slice's log files, and the rollback command blocks.

    ``decoded``: record counts of the delete blocks the read already decoded (not decoded again).
    """
    blocks = records = rollbacks = 0
    for lf in file_slice.log_files:
        for block in read_log_blocks(job.storage, lf.path, ignorable=lambda t: not commits.is_committed(t)):
            if is_rollback_command(block):
                rollbacks += 1
                continue
            if block.block_type not in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE):
                continue
            if not block.instant_time or not commits.is_committed(block.instant_time):
                continue
            blocks += 1
            if block.block_type is BlockType.DELETE:
                known = decoded.get(block_key(block))
                records += known if known is not None else len(delete_block_records(block))
            elif block.block_type is BlockType.AVRO_DATA:  # int32 version, int32 record count
                head = job.storage.read_range(block.path, block.content_offset, 8)
                records += int.from_bytes(head[4:8], "big", signed=True)
            else:
                records += pq.ParquetFile(pa.BufferReader(block.content())).metadata.num_rows
    return {"total_log_blocks": blocks, "total_log_records": records, "total_rollback_blocks": rollbacks}


def compact_operation(job: CompactionJob, index: int, write_token: str) -> pa.RecordBatch:
    """Compact the slice of operation ``index`` into a new base file; its write stats as one row."""
    s = job.slices[index]
    name = f"{s.file_id}_{write_token}_{job.instant_time}.parquet"
    path = f"{s.partition}/{name}" if s.partition else name
    commits = CommitState(job.timeline, job.config)
    started = time.monotonic()
    decoded: BlockRecords = {}
    batches = read_file_slice(
        job.storage, s, job.config, job.timeline, job.schema, commits=commits,
        spec=MergeSpec.for_table(job.config), block_records=decoded,
    )
    first = next(batches, None)  # the log records are read and merged before the first batch
    read_ms = int((time.monotonic() - started) * 1000)
    WriteMarkers(job.storage, job.instant_time).create(
        s.partition, name, IOType.MERGE if s.base_file is not None else IOType.CREATE
    )
    crash_point(f"task:{index}")
    with BaseFileWriter(job.storage, path, job.schema, avro_schema=job.footer_schema,
                        settings=job.file_settings) as writer:
        file_col = job.schema.get_field_index(FILE_NAME)
        file_field = job.schema.field(FILE_NAME)
        from_logs = 0
        for batch in itertools.chain([first] if first is not None else [], batches):
            batch = batch.set_column(file_col, file_field, repeat_string(name, batch.num_rows))
            if s.base_file is not None:
                newer = pc.greater(batch.column(COMMIT_TIME), pa.scalar(s.base_instant))
                from_logs += int(pc.sum(pc.fill_null(newer, True).cast(pa.int64())).as_py() or 0)
            else:
                from_logs += batch.num_rows
            writer.write(batch)
        stats = writer.close()
    base_rows = 0
    if s.base_file is not None:
        with job.storage.open(s.base_file.path) as f:
            base_rows = pq.ParquetFile(f).metadata.num_rows
    written = stats.num_records
    inserts = max(0, written - base_rows)
    row: dict[str, Any] = {
        "op": index,
        "partition": s.partition,
        "file_id": s.file_id,
        "path": path,
        "prev_commit": s.base_instant,
        "prev_base_file": s.base_file.file_name if s.base_file is not None else None,
        "num_writes": written,
        "num_deletes": max(0, base_rows - written),
        "num_update_writes": max(0, from_logs - inserts),
        "num_inserts": inserts,
        "file_size": stats.file_size,
        "total_log_files": len(s.log_files),
        "total_log_size": sum(lf.size for lf in s.log_files),
        "log_read_ms": read_ms,
        "upsert_ms": int((time.monotonic() - started) * 1000),
        **_log_counts(job, s, commits, decoded),
    }
    row["total_updated_records_compacted"] = row["total_log_records"]
    return pa.RecordBatch.from_pylist([row], schema=STATS_SCHEMA)


# ---------------------------------------------------------------------------- the driver


@dataclass(slots=True)
class CompactionResult(AttemptResult):
    """What one run of ``execute_compaction`` did."""

    SERVICE = "compaction"

    def work(self) -> str:
        logs = sum(int(s.get("totalLogFilesCompacted") or 0) for s in self.write_stats)
        return f"{len(self.write_stats)} file groups, {logs} log files merged, {self.rows_written} rows"



def check_compaction(
    storage: Storage, config: TableConfig, timeline: Timeline, inst: Instant
) -> tuple[CompactionJob, str | None]:
    """Everything a compaction of the pending ``inst`` needs, checked without changing anything.

    The table's support (meta fields, MDT partitions a compaction keeps exact), the plan (it
    decodes, its version), every file it names and the write schema: ``prepare_job``'s result.
    ``execute_compaction`` calls it under the lock right before the inflight transition, and
    ``service.spark_jobs`` before it rolls back a failed attempt, so a bad input is found before
    anything is deleted or written, by the one check the execution itself relies on.
    """
    require_rewritable(storage, config, COMPACT, "compaction")
    plan = read_plan(timeline, inst, "compaction", CompactionPlan)
    return prepare_job(storage, config, timeline, inst, plan)


def prepare_job(
    storage: Storage, config: TableConfig, timeline: Timeline, inst: Instant, plan: CompactionPlan
) -> tuple[CompactionJob, str | None]:
    """The job of a plan (files resolved and checked) and the table schema for the commit metadata."""
    where = timeline.state_files(inst).get(State.REQUESTED) or timeline.state_file(inst)
    if plan.version not in (None, 1, 2):
        raise UnsupportedTableError(
            f"{where}: compaction plan version {plan.version} is not supported (hoodied reads 1 and 2)"
        )
    if not plan.operations:
        raise HoodieFormatError(f"{where}: compaction plan has no operations")
    slices: list[FileSlice] = []
    seen: set[tuple[str, str]] = set()
    for op in plan.operations:
        slices.append(_slice(storage, op, where))
        key = (slices[-1].partition, op.file_id)
        if key in seen:
            raise HoodieFormatError(
                f"{where}: file group {op.file_id} in partition {op.partition_path!r} is planned twice"
            )
        seen.add(key)
    schemas = write_schemas(HoodieTable(storage, config, timeline), where)
    # an unsupported codec or bloom setting is refused here, before anything is written
    job = CompactionJob(storage, config, timeline, inst.requested_time, schemas.arrow, schemas.footer,
                        tuple(slices), BaseFileSettings.for_table(config))
    return job, schemas.table


def _slice(storage: Storage, op: CompactionOperation, where: str) -> FileSlice:
    if op.bootstrap_file_path:
        raise UnsupportedTableError(
            f"{where}: file group {op.file_id} has bootstrap base file {op.bootstrap_file_path}; "
            "hoodied does not support bootstrapped tables"
        )
    return operation_slice(storage, op.partition_path, op.file_id, op.base_instant_time,
                           op.data_file_path, op.delta_file_paths, where)


def _write_stat(row: dict[str, Any]) -> dict[str, Any]:
    """A ``HoodieWriteStat`` of a compacted file, with the fields Hudi's compactor fills."""
    stat = cm.write_stat(
        file_id=row["file_id"], path=row["path"], partition_path=row["partition"],
        prev_commit=row["prev_commit"], num_writes=row["num_writes"], num_inserts=row["num_inserts"],
        num_updates=row["num_update_writes"], num_deletes=row["num_deletes"], file_size=row["file_size"],
        prev_base_file=row["prev_base_file"],
    )
    stat.update({
        "totalLogRecords": row["total_log_records"],
        "totalLogFilesCompacted": row["total_log_files"],
        "totalLogSizeCompacted": row["total_log_size"],
        "totalUpdatedRecordsCompacted": row["total_updated_records_compacted"],
        "totalLogBlocks": row["total_log_blocks"],
        "totalRollbackBlocks": row["total_rollback_blocks"],
        "totalLogReadTimeMs": row["log_read_ms"],
        "runtimeStats": {"totalScanTime": row["log_read_ms"], "totalUpsertTime": row["upsert_ms"],
                         "totalCreateTime": 0},
    })
    return stat


def execute_compaction(
    storage: Storage,
    config: TableConfig,
    lock: TableLock,
    instant_time: str,
    session: SparkSession,
    *,
    time_settings: TimeSettings | None = None,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    progress: Progress | None = None,
) -> CompactionResult:
    """Run the requested compaction ``instant_time`` on ``session`` and complete it (takes ``lock``).

    Raises ``InstantStateError`` when there is no such compaction or it is inflight (a live
    executor, or a failed attempt to roll back first), ``HoodieFormatError`` for a plan that
    cannot be executed (a missing or foreign file) and ``UnsupportedTableError`` for tables
    hoodied cannot compact; in all these cases nothing was changed. A failing Spark job
    leaves the instant inflight without a heartbeat: a failed attempt. ``progress(done, total)``
    hears of completed operations while the job runs (``executors.engine.run_operations``).
    """
    # first: an unsupported table says so whatever its instants
    require_rewritable(storage, config, COMPACT, "compaction")
    started = time.monotonic()
    writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
    with lock:
        timeline = Timeline.load(storage, config)
        inst = pending_instant(storage, timeline, instant_time, "compaction",
                               lambda i: i.action is Action.COMPACTION, heartbeat_interval_ms,
                               tolerable_misses)
        if inst.is_completed:
            return CompactionResult(inst, was_completed=True)
        job, table_schema = check_compaction(storage, config, timeline, inst)
        attempt = start_attempt(storage, writer, instant_time, Action.COMPACTION, heartbeat_interval_ms,
                                tolerable_misses)
        job = dataclasses.replace(job, storage=attempt.storage)  # its tasks write through the fence
    with attempt:  # a failure after a takeover is the other attempt's (AttemptSupersededError)
        rows = run_attempt(session, len(job.slices), job, STATS_SCHEMA, progress=progress,
                           description=f"compaction {instant_time} of {storage.base_uri}")
        result = CompactionResult(inst, [_write_stat(row) for row in sorted(rows, key=lambda r: r["op"])])
        metadata = cm.commit_metadata(by_partition(result.write_stats), COMPACT, table_schema, compacted=True)
        commit_attempt(result, attempt, config, lock, writer, Action.COMPACTION, metadata,
                       cm.encode_commit_metadata, time_settings=time_settings,
                       mdt_runner=SparkOperations(session))
    result.seconds = time.monotonic() - started
    log.info("%s", result.summary())
    return result
