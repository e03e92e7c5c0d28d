"""Executing a log compaction: stitch each planned slice's log blocks into one new log file.

Runs any pending ``logcompaction`` of a merge-on-read table (table versions 8 and 9), whoever
requested it (``planners.log_compaction`` or Apache Hudi). One Spark job per instant
(``executors.engine``), one task per operation, and in each task, as Hudi's
``LogCompactionExecutionHelper`` with ``HoodieAppendHandle`` does it:

1. the plan's log files of the slice (never the base file) are scanned as a reader would
   (``hoodie.reader.scan_log_blocks``: committed blocks as the driver saw the timeline, rolled
   back blocks dropped, earlier log compactions applied) and merged with the table's merge
   semantics into one record or delete per key;
2. the marker ``.hoodie/.temp/<T>/<partition>/<log file>.marker.APPEND`` is created, then the
   log file ``.<fileId>_<T>.log.1_<writeToken>`` is written (write-once) with an Avro data block
   of the surviving records (meta fields as they were: commit time and sequence number are
   preserved, ``_hoodie_file_name`` is the file id as Hudi's append handle sets it) followed by
   a delete block (version 3) of the surviving deletes. Both blocks carry ``INSTANT_TIME`` =
   ``T``, ``SCHEMA`` (the table schema with meta fields) and ``COMPACTED_BLOCK_TIMES``: the
   instants of the merged blocks, comma-joined, newest first (the order of Hudi's
   ``getValidBlockInstants``; an earlier log compaction appears by its own instant);
3. the task returns its ``HoodieDeltaWriteStat`` fields as one Arrow row.

The driver, under the table lock, deletes files that have markers but are not in the write
stats (failed or duplicate task attempts), checks it still holds the lock and completes the
instant as ``<T>_<completion>.deltacommit`` with ``HoodieCommitMetadata``: ``operationType``
``LOG_COMPACT``, ``compacted`` true, one write stat per new log file and
``extraMetadata.schema``. The write stats have the shape Hudi 1.x's append handle gives a
new log file in table versions 8 and 9 (as in the delta commits of the v8 fixture):
``prevCommit`` = the log file's own instant ``T``, ``baseFile`` "", ``logFiles`` = [the new
file], ``logVersion`` 1, ``logOffset`` 0, ``numUpdateWrites`` = ``numWrites`` = records written
(log compaction counts every record as an update), ``numInserts`` 0, ``numDeletes`` = deletes
written. Markers and the heartbeat go afterwards.

An inflight log compaction is a failed attempt (or a live one, by its heartbeat): refused
here, rolled back by ``service.cli.services.rollback_failed_attempt`` (markers name the log
files to delete), then re-executed from the plan. Tables with a metadata table: the MDT delta
commit T is written and completed under the lock right before T
(``hoodie.metadata.commit.write_commit_to_metadata_table``): the new log files in ``files``, their
column statistics in ``column_stats`` and ``partition_stats``, record-index deletes of their
deleted keys, nothing for secondary indexes. The driver derives the statistics by re-reading
each new log file (``hoodie.metadata.log_stats``), one file at a time: memory stays bounded by one
slice, the statistics are those of the bytes on storage (a task attempt that wrote the file
and one that reported stats cannot disagree), and the same code reproduces Hudi's own records
of Hudi-written log files; the cost is one extra read of what the job wrote. Tables with an MDT
partition a log compaction cannot keep exact (expression indexes, a partitioned record index)
are refused before anything is written. Refusals that depend on the written records (a log
file's column statistics hoodied cannot write exactly, a record-index delete that would drop a
live entry: ``hoodie.metadata.commit``) come after the tasks: the metadata table and the completed
timeline are untouched, the instant stays inflight as a failed attempt (rolled back before any
retry, as after a failed Spark job).

Test hook (``hoodie.crashpoints``): ``requested``, ``inflight``, ``written`` (all tasks done,
nothing committed), ``mdt-log-written``, ``mdt-done`` on the driver, ``task:<k>`` in the task
of operation ``k`` after its marker.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from hoodied.executors.attempt import (
    AttemptResult,
    by_partition,
    commit_attempt,
    pending_instant,
    read_plan,
    run_attempt,
    start_attempt,
)
from hoodied.executors.compaction import prepare_job as prepare_compaction_job
from hoodied.executors.engine import Progress, SparkOperations
from hoodied.hoodie.actions.log_compaction import (
    LOG_COMPACTION_COMPACTOR,
    LOG_COMPACTION_OPERATION,
    require_log_compaction_supported,
)
from hoodied.hoodie.basefile import FILE_NAME, repeat_string
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.filenames import LogFileName
from hoodied.hoodie.fsview import CommitState, FileSlice
from hoodied.hoodie.heartbeat import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOLERABLE_MISSES,
)
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.log import (
    BlockType,
    DeleteRecord,
    HeaderKey,
    encode_avro_data_block,
    encode_block,
    encode_delete_block,
    write_log_file,
)
from hoodied.hoodie.markers import IOType, WriteMarkers
from hoodied.hoodie.merge import MergedLogRecords, MergeSpec
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.reader import merge_log_blocks, scan_log_blocks
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline import commit_metadata as cm
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import CompactionPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "STATS_SCHEMA",
    "LogCompactionJob",
    "LogCompactionResult",
    "check_log_compaction",
    "execute_log_compaction",
    "log_compact_operation",
]

_COUNTS = ("num_writes", "num_deletes", "file_size", "blocks_merged", "upsert_ms")

#: One row per operation, returned by the tasks (``log_files`` as a JSON list).
STATS_SCHEMA = pa.schema(
    [
        ("op", pa.int64()),
        ("partition", pa.string()),
        ("file_id", pa.string()),
        ("path", pa.string()),
        ("prev_commit", pa.string()),
        ("base_file", pa.string()),
        ("log_files", pa.string()),
        ("compacted_block_times", pa.string()),
        *[(name, pa.int64()) for name in _COUNTS],
    ]
)

# Hudi's ordering-value wrapper for an Arrow type (DeleteRecord.orderingVal of a merged delete).
_WRAPPERS = {
    pa.int8(): "IntWrapper", pa.int16(): "IntWrapper", pa.int32(): "IntWrapper",
    pa.int64(): "LongWrapper", pa.float32(): "FloatWrapper", pa.float64(): "DoubleWrapper",
    pa.string(): "StringWrapper", pa.large_string(): "StringWrapper", pa.bool_(): "BooleanWrapper",
    pa.binary(): "BytesWrapper", pa.date32(): "DateWrapper",
}


# ---------------------------------------------------------------------------- the job (runs in tasks)


@dataclass(frozen=True)
class LogCompactionJob:
    """Everything a task needs, pickled to the Spark workers; called as ``job(index, write_token)``."""

    storage: Storage
    config: TableConfig
    timeline: Timeline
    instant_time: str
    schema: pa.Schema
    log_schema: str
    slices: tuple[FileSlice, ...]
    """Per operation: the slice with the plan's log files only (``base_file`` None)."""

    def __call__(self, index: int, write_token: str) -> pa.RecordBatch:
        return log_compact_operation(self, index, write_token)


def _compacted_block_times(blocks: list[Any]) -> list[str]:
    """The instants of the merged blocks, newest first, each once (Hudi's ``validBlockInstants``)."""
    out: list[str] = []
    for block in reversed(blocks):
        t = block.instant_time or ""
        if t not in out:
            out.append(t)
    return out


def _delete_records(merged: MergedLogRecords, partition: str) -> list[DeleteRecord]:
    """The surviving deletes, with the ordering value a reader needs to merge them the same way."""
    rows = [int(i) for i in np.flatnonzero(merged.is_delete)]
    if not rows:
        return []
    keys = merged.keys.take(pa.array(rows, pa.int64())).to_pylist()
    ordering = [col.take(pa.array(rows, pa.int64())) for col in merged.ordering]
    values = [col.to_pylist() for col in ordering]
    out = []
    for j, key in enumerate(keys):
        if merged.natural[rows[j]] or not ordering:
            out.append(DeleteRecord(key, partition, 0, "IntWrapper"))  # commit-time delete, as SQL writes it
            continue
        if len(ordering) == 1:
            value = values[0][j]
            kind = None if value is None else _WRAPPERS.get(ordering[0].type)
            out.append(DeleteRecord(key, partition, value, kind))
        else:
            out.append(DeleteRecord(key, partition, tuple(v[j] for v in values), "ArrayWrapper"))
    return out


def log_compact_operation(job: LogCompactionJob, index: int, write_token: str) -> pa.RecordBatch:
    """Merge the log blocks of operation ``index`` into one new log file; its write stat as one row."""
    s = job.slices[index]
    started = time.monotonic()
    commits = CommitState(job.timeline, job.config)
    blocks = scan_log_blocks(job.storage, s, commits)
    times = _compacted_block_times(blocks)
    merged = merge_log_blocks(blocks, MergeSpec.for_table(job.config), job.schema)
    live = merged.data_index[~merged.is_delete]  # rows of merged.records that survive
    records = merged.records.take(pa.array(live, pa.int64()))
    if records.num_rows:  # Hudi's append handle names the file group, not the file
        col = records.schema.get_field_index(FILE_NAME)
        records = records.set_column(col, records.schema.field(FILE_NAME),
                                     repeat_string(s.file_id, records.num_rows))
    deletes = _delete_records(merged, s.partition)
    name = LogFileName(s.file_id, job.instant_time, 1, write_token).format()
    path = f"{s.partition}/{name}" if s.partition else name
    header = {
        HeaderKey.INSTANT_TIME: job.instant_time,
        HeaderKey.SCHEMA: job.log_schema,
        HeaderKey.COMPACTED_BLOCK_TIMES: ",".join(times),
    }
    encoded = []
    if records.num_rows:
        content = encode_avro_data_block(records, job.log_schema)
        encoded.append(encode_block(BlockType.AVRO_DATA, header, content))
    if deletes:
        encoded.append(encode_block(BlockType.DELETE, header, encode_delete_block(deletes)))
    row: dict[str, Any] = {
        "op": index, "partition": s.partition, "file_id": s.file_id, "path": None,
        "prev_commit": job.instant_time, "base_file": "", "log_files": "[]",
        "compacted_block_times": ",".join(times), "num_writes": records.num_rows,
        "num_deletes": len(deletes), "file_size": 0, "blocks_merged": len(blocks), "upsert_ms": 0,
    }
    if encoded:  # nothing left to write when every block was rolled back since planning
        WriteMarkers(job.storage, job.instant_time).create(s.partition, name, IOType.APPEND)
        crash_point(f"task:{index}")
        row["file_size"] = write_log_file(job.storage, path, encoded)
        row["path"] = path
        row["log_files"] = json.dumps([name])
    row["upsert_ms"] = int((time.monotonic() - started) * 1000)
    return pa.RecordBatch.from_pylist([row], schema=STATS_SCHEMA)


# ---------------------------------------------------------------------------- the driver


@dataclass(slots=True)
class LogCompactionResult(AttemptResult):
    """What one run of ``execute_log_compaction`` did."""

    blocks_merged: int = 0

    SERVICE = "logcompaction"

    def work(self) -> str:
        deletes = sum(int(s.get("numDeletes") or 0) for s in self.write_stats)
        return (
            f"{len(self.write_stats)} file groups, {self.blocks_merged} log blocks merged into "
            f"{self.rows_written} records and {deletes} deletes"
        )


def check_log_compaction(
    storage: Storage, config: TableConfig, timeline: Timeline, inst: Instant
) -> tuple[LogCompactionJob, str | None]:
    """Everything a log compaction of the pending ``inst`` needs, checked without changing anything.

    The table's support, the plan (it decodes, its compactor, version and operations), every file
    it names and the write schema. ``execute_log_compaction`` calls it right before the inflight
    transition and ``service.spark_jobs`` before it rolls back a failed attempt: one check for both.
    """
    require_log_compaction_supported(storage, config)
    where = timeline.state_files(inst).get(State.REQUESTED) or timeline.state_file(inst)
    plan = read_plan(timeline, inst, "log compaction", CompactionPlan)
    if plan.compactor_class_name not in (None, "", LOG_COMPACTION_COMPACTOR):
        raise UnsupportedTableError(
            f"{where}: plan names compactor {plan.compactor_class_name}, not {LOG_COMPACTION_COMPACTOR}"
        )
    # The compaction executor's checks (plan version, operations, files, schema) apply as they are.
    base, table_schema = prepare_compaction_job(storage, config, timeline, inst, plan)
    slices: list[FileSlice] = []
    for op, s in zip(plan.operations, base.slices, strict=True):
        if not s.log_files:
            raise HoodieFormatError(f"{where}: operation for file group {op.file_id} names no log files")
        slices.append(FileSlice(s.partition, s.file_id, s.base_instant, None, list(s.log_files)))
    job = LogCompactionJob(storage, config, timeline, inst.requested_time, base.schema, base.footer_schema,
                           tuple(slices))
    return job, table_schema


def _write_stat(row: dict[str, Any]) -> dict[str, Any]:
    """A ``HoodieDeltaWriteStat`` of one new log file, with the fields Hudi's append handle fills."""
    stat = cm.write_stat(
        file_id=row["file_id"], path=row["path"], partition_path=row["partition"],
        prev_commit=row["prev_commit"], num_writes=row["num_writes"], num_updates=row["num_writes"],
        num_deletes=row["num_deletes"], file_size=row["file_size"], log_version=1,
        base_file=row["base_file"] or "", log_files=json.loads(row["log_files"]),
    )
    stat["runtimeStats"] = {"totalScanTime": 0, "totalUpsertTime": row["upsert_ms"], "totalCreateTime": 0}
    return stat


def execute_log_compaction(
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
) -> LogCompactionResult:
    """Run the requested log compaction ``instant_time`` on ``session`` and complete it (takes ``lock``).

    Raises ``InstantStateError`` when there is no such log compaction or it is inflight (a live
    executor, or a failed attempt to roll back first), ``HoodieFormatError`` for a plan that
    cannot be executed (a missing or foreign file) and ``UnsupportedTableError`` for tables
    hoodied cannot log-compact; in all these cases nothing was changed. A failing Spark job
    leaves the instant inflight without a heartbeat: a failed attempt.
    """
    # first: an unsupported table says so whatever its instants (check_log_compaction repeats it)
    require_log_compaction_supported(storage, config)
    started = time.monotonic()
    writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
    with lock:
        timeline = Timeline.load(storage, config)
        inst = pending_instant(storage, timeline, instant_time, "log compaction",
                               lambda i: i.action is Action.LOG_COMPACTION, heartbeat_interval_ms,
                               tolerable_misses)
        if inst.is_completed:
            return LogCompactionResult(inst, was_completed=True)
        job, table_schema = check_log_compaction(storage, config, timeline, inst)
        attempt = start_attempt(storage, writer, instant_time, Action.LOG_COMPACTION, heartbeat_interval_ms,
                                tolerable_misses)
        job = dataclasses.replace(job, storage=attempt.storage)  # its tasks write through the fence
    with attempt:  # a failure after a takeover is the other attempt's (AttemptSupersededError)
        rows = run_attempt(session, len(job.slices), job, STATS_SCHEMA, progress=progress,
                           description=f"log compaction {instant_time} of {storage.base_uri}")
        rows.sort(key=lambda r: r["op"])
        result = LogCompactionResult(inst, [_write_stat(r) for r in rows if r["path"] is not None],
                                     blocks_merged=sum(r["blocks_merged"] for r in rows))
        stats = by_partition(result.write_stats)
        metadata = cm.commit_metadata(stats, LOG_COMPACTION_OPERATION, table_schema, compacted=True)
        commit_attempt(result, attempt, config, lock, writer, Action.LOG_COMPACTION, metadata,
                       cm.encode_commit_metadata, time_settings=time_settings,
                       mdt_runner=SparkOperations(session))
    result.seconds = time.monotonic() - started
    log.info("%s", result.summary())
    return result
