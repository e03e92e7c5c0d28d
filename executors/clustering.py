"""Executing a clustering: rewrite each planned group of file slices into new file groups, replace the old.

Runs any pending clustering, whoever planned it (``planners.clustering`` or Apache Hudi):
``<T>.clustering.requested`` on table versions 8/9, ``<T>.replacecommit.requested`` whose
``HoodieRequestedReplaceMetadata`` says ``CLUSTER`` on version 6. As Hudi's
``SparkExecuteClusteringCommitActionExecutor`` with ``SparkSortAndSizeExecutionStrategy``
(the rules are in ``hoodie.actions.clustering``): one Spark job per instant (``executors.engine``),
one task per clustering group, and in each task

1. the group's file slices (files resolved by ``hoodie.plan_files``: a plan written on
   another machine names them by partition + file name) are read and merged by
   ``hoodie.reader.read_file_slice`` (one slice's log records + one row group in memory);
2. with sort columns the rows are spilled to an uncompressed Arrow file on the task's local
   disk, memory-mapped, ordered (only the sort columns are materialised) and cut into
   ``numOutputFileGroups`` parts of equal rows; without, they stream in read order, the
   slices dealt to the outputs in contiguous runs (``hoodie.actions.clustering``);
3. each part becomes a new file group: marker ``.hoodie/.temp/<T>/<partition>/<file>.marker.CREATE``
   first, then ``<UUID>-<n>_<writeToken>_<T>.parquet`` written with ``hoodie.basefile`` (Hudi
   footer: min/max record key, bloom filter, Avro schema); a file that reaches the target
   size is closed and the part continues in the next file id of the same prefix. Records
   keep ``_hoodie_commit_time`` / ``_hoodie_commit_seqno`` (``preserveHoodieMetadata``);
   ``_hoodie_file_name`` becomes the new file's name;
4. the task returns one Arrow row per written file (write statistics).

The driver, under the table lock, deletes files that have markers but are not in the
statistics (failed or duplicate task attempts), applies the conflict rule
(``hoodie.actions.clustering.require_no_conflict``: a write completed since planning that touched a
planned file group aborts the clustering, which stays inflight and is recovered by
rollback-then-retry), checks it still holds the lock and completes the instant as
``<T>_<completion>.replacecommit`` (layout 1: ``<T>.replacecommit``, Jackson JSON) with
``HoodieReplaceCommitMetadata``. Markers and the heartbeat go afterwards.

Tables with a metadata table (versions 8 and 9): after the conflict check, under the same lock,
the MDT delta commit T is written and completed (``hoodie.metadata.commit.write_commit_to_metadata_table``:
the new base files in ``files`` (the replaced ones stay listed until a clean, as in Hudi), their
``column_stats`` and ``bloom_filters``, tight-bound ``partition_stats``, and in ``record_index``
every moved key pointing at its new file group with instant T), then the data instant T. The
``record_index`` log files are written by Spark tasks, one per MDT file group
(``hoodie.actions.clustering.MovedKeys`` through ``SparkOperations``): each reads the new base
files' key column and keeps its group's keys, so the driver never holds the moved keys; a key
written to two new file groups fails its task after the MDT delta commit went inflight, and the
attempt is rolled back before a retry like any failed one. A
crash in between leaves a completed MDT T under a pending data T, which readers ignore; the
rollback of the failed attempt rolls it back. A table with an MDT partition a clustering cannot
keep exact is refused before anything is written (``require_commit_maintainable``).

An inflight clustering is a failed attempt (or a live one: its heartbeat says which); it is
refused here and rolled back first by ``service.spark_jobs.run_spark_service``. Tables without
meta fields are refused, so are plans that do not preserve record metadata.

Test hook (``hoodie.crashpoints``): ``requested``, ``inflight``, ``written`` (all tasks done,
nothing committed), ``mdt-log-written`` / ``mdt-done`` (``hoodie.metadata.commit``) on the driver,
``task:<k>`` in the task of group ``k`` after its first marker.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
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
from hoodied.hoodie.actions.clustering import (
    check_sort_columns,
    moved_keys,
    output_file_id,
    replace_commit_metadata,
    require_no_conflict,
    sort_columns,
    split_points,
    target_file_max_bytes,
)
from hoodied.hoodie.actions.write_schema import write_schemas
from hoodied.hoodie.basefile import (
    DEFAULT_ROW_GROUP_ROWS,
    FILE_NAME,
    BaseFileSettings,
    BaseFileWriter,
    repeat_string,
)
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.fsview import CommitState, FileSlice
from hoodied.hoodie.heartbeat import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOLERABLE_MISSES,
)
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.markers import IOType, WriteMarkers
from hoodied.hoodie.merge import MergeSpec
from hoodied.hoodie.metadata.commit import CLUSTER
from hoodied.hoodie.metadata.encode import RECORD_INDEX
from hoodied.hoodie.plan_files import operation_slice
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.reader import read_file_slice
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline import commit_metadata as cm
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import ClusteringPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "EXECUTION_STRATEGIES",
    "STATS_SCHEMA",
    "ClusteringJob",
    "ClusteringResult",
    "check_clustering",
    "cluster_group",
    "execute_clustering",
    "prepare_job",
]

#: Execution strategies whose output this executor reproduces (sort + size, new file groups).
EXECUTION_STRATEGIES = (
    "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy",
    "org.apache.hudi.client.clustering.run.strategy.JavaSortAndSizeExecutionStrategy",
)
#: Rows taken from the memory-mapped spill per write (bounds the task's memory).
_TAKE_ROWS = 65_536

#: One row per written file (a group whose records were all deleted: one row, ``path`` null).
STATS_SCHEMA = pa.schema(
    [
        ("op", pa.int64()),
        ("partition", pa.string()),
        ("file_id", pa.string()),
        ("path", pa.string()),
        ("num_writes", pa.int64()),
        ("file_size", pa.int64()),
        ("create_ms", pa.int64()),
    ]
)


# ---------------------------------------------------------------------------- the job (runs in tasks)


@dataclass(frozen=True)
class ClusteringJob:
    """Everything a task needs, pickled to the Spark workers; called as ``job(index, write_token)``."""

    storage: Storage
    config: TableConfig
    timeline: Timeline
    instant_time: str
    schema: pa.Schema
    footer_schema: str
    groups: tuple[tuple[FileSlice, ...], ...]
    num_outputs: tuple[int, ...]
    sort_columns: tuple[str, ...]
    target_file_bytes: int
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS
    file_settings: BaseFileSettings = BaseFileSettings()
    """Codec and bloom filter of the new base files: Hudi's for the table (``BaseFileSettings.for_table``)."""

    def __call__(self, index: int, write_token: str) -> pa.RecordBatch:
        return cluster_group(self, index, write_token)


def _spill(job: ClusteringJob, slices: tuple[FileSlice, ...], folder: str) -> pa.Table:
    """The merged records of ``slices`` as one table backed by a memory-mapped Arrow file in ``folder``
    (uncompressed: the task's local disk holds the group's rows, its memory only what is touched)."""
    path = os.path.join(folder, "group.arrow")
    with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, job.schema) as writer:
        for batch in _read(job, slices):
            writer.write_batch(batch)
    return ipc.open_file(pa.memory_map(path)).read_all()  # zero copy: pages stay on disk


def _order(job: ClusteringJob, rows: pa.Table) -> pa.Array | None:
    """Row order of the output: Spark's ascending ``sort`` by the sort columns, nulls first.

    Spark orders NaN above every other floating-point value, Arrow with the nulls: a float
    column is preceded by its ``is_nan`` flag so NaNs come last, as in Spark.
    """
    if not job.sort_columns:
        return None
    keys: dict[str, pa.ChunkedArray] = {}
    for c in job.sort_columns:
        col = rows.column(c)
        if pa.types.is_floating(col.type):
            keys[f"{c} is NaN"] = pc.is_nan(col)
        keys[c] = col
    return pc.sort_indices(pa.table(keys), sort_keys=[(k, "ascending", "at_start") for k in keys])


def _batches(rows: pa.Table, order: pa.Array | None, start: int, stop: int) -> Iterator[pa.Table]:
    for lo in range(start, stop, _TAKE_ROWS):
        hi = min(stop, lo + _TAKE_ROWS)
        yield rows.slice(lo, hi - lo) if order is None else rows.take(order.slice(lo, hi - lo))


class _PartWriter:
    """The files of one output part: ``<prefix>-0``, ``<prefix>-1``... each closed at the target size."""

    def __init__(self, job: ClusteringJob, index: int, partition: str, write_token: str) -> None:
        self.job, self.index, self.partition, self.token = job, index, partition, write_token
        self.prefix = str(uuid.uuid4())
        self.count = 0
        self.writer: BaseFileWriter | None = None
        self.name = ""
        self.started = 0.0
        self.rows: list[dict[str, Any]] = []
        self.file_id = ""

    def write(self, batch: pa.Table) -> None:
        # one row group at a time: the size is checked whenever the file grew (Hudi's canWrite)
        step = self.job.row_group_rows
        for lo in range(0, batch.num_rows, step):
            if self.writer is None:
                self._open()
            assert self.writer is not None
            piece = batch.slice(lo, step)
            col = piece.schema.get_field_index(FILE_NAME)
            names = repeat_string(self.name, piece.num_rows)
            piece = piece.set_column(col, piece.schema.field(FILE_NAME), names)
            self.writer.write(piece)
            if self.writer.bytes_written >= self.job.target_file_bytes:
                self.close()

    def _open(self) -> None:
        file_id = output_file_id(self.prefix, self.count)
        self.count += 1
        self.name = f"{file_id}_{self.token}_{self.job.instant_time}.parquet"
        path = f"{self.partition}/{self.name}" if self.partition else self.name
        WriteMarkers(self.job.storage, self.job.instant_time).create(self.partition, self.name, IOType.CREATE)
        crash_point(f"task:{self.index}")
        self.started = time.monotonic()
        self.writer = BaseFileWriter(
            self.job.storage, path, self.job.schema, avro_schema=self.job.footer_schema,
            row_group_rows=self.job.row_group_rows, settings=self.job.file_settings,
        )
        self.file_id = file_id

    def close(self) -> None:
        if self.writer is None:
            return
        stats = self.writer.close()
        self.writer = None
        self.rows.append({
            "op": self.index, "partition": self.partition, "file_id": self.file_id, "path": stats.path,
            "num_writes": stats.num_records, "file_size": stats.file_size,
            "create_ms": int((time.monotonic() - self.started) * 1000),
        })

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
            self.writer = None


def _read(job: ClusteringJob, slices: tuple[FileSlice, ...]) -> Iterator[pa.RecordBatch]:
    """The merged records of ``slices``, slice after slice, in read order (streamed)."""
    commits = CommitState(job.timeline, job.config)
    spec = MergeSpec.for_table(job.config)
    for s in slices:
        yield from read_file_slice(job.storage, s, job.config, job.timeline, job.schema, commits=commits,
                                   spec=spec)


def _write_parts(
    job: ClusteringJob, index: int, write_token: str, parts: list[Iterator[pa.RecordBatch | pa.Table]]
) -> list[dict[str, Any]]:
    """Each part into its own new file group(s); the stats rows of every file written."""
    out: list[dict[str, Any]] = []
    partition = job.groups[index][0].partition
    for batches in parts:
        part = _PartWriter(job, index, partition, write_token)
        try:
            for batch in batches:
                part.write(batch)
            part.close()
        except BaseException:
            part.abort()
            raise
        out.extend(part.rows)
    return out


def cluster_group(job: ClusteringJob, index: int, write_token: str) -> pa.RecordBatch:
    """Rewrite clustering group ``index`` into new file groups; one stats row per written file.

    With sort columns the group is spilled, ordered and cut into ``numOutputFileGroups``
    parts of equal rows (``hoodie.actions.clustering.split_points``); without, nothing is spilled: the
    slices are dealt to the outputs in contiguous runs (Spark's ``coalesce`` of the per-slice
    read partitions) and streamed.
    """
    slices = job.groups[index]
    if job.sort_columns:
        with tempfile.TemporaryDirectory(prefix="hoodied-clustering-") as folder:
            rows = _spill(job, slices, folder)
            order = _order(job, rows)
            points = split_points(rows.num_rows, job.num_outputs[index])
            out = _write_parts(job, index, write_token,
                               [_batches(rows, order, a, b) for a, b in itertools.pairwise(points)])
            del rows, order  # release the memory maps before the folder goes
    else:
        points = split_points(len(slices), job.num_outputs[index])
        out = _write_parts(job, index, write_token,
                           [_read(job, slices[a:b]) for a, b in itertools.pairwise(points)])
    if not out:  # every record of the group was deleted: nothing to write, the groups are still replaced
        out.append({"op": index, "partition": slices[0].partition, "file_id": None, "path": None,
                    "num_writes": 0, "file_size": 0, "create_ms": 0})
    return pa.RecordBatch.from_pylist(out, schema=STATS_SCHEMA)


# ---------------------------------------------------------------------------- the driver


@dataclass(slots=True)
class ClusteringResult(AttemptResult):
    """What one run of ``execute_clustering`` did."""

    replaced: dict[str, list[str]] = field(default_factory=dict)
    """partition -> file ids replaced (``partitionToReplaceFileIds``)."""

    SERVICE = "clustering"

    def work(self) -> str:
        replaced = sum(len(ids) for ids in self.replaced.values())
        new = len(self.write_stats)
        return f"{replaced} file groups rewritten into {new} new files, {self.rows_written} rows"


def _check_plan(plan: ClusteringPlan, where: str) -> None:
    if plan.operation_type not in (None, "CLUSTER"):
        raise InstantStateError(f"{where}: operation type {plan.operation_type}, not a clustering")
    if plan.version not in (None, 1):
        raise UnsupportedTableError(f"{where}: clustering plan version {plan.version} is not supported (1)")
    if plan.strategy_class_name and plan.strategy_class_name not in EXECUTION_STRATEGIES:
        raise UnsupportedTableError(
            f"{where}: execution strategy {plan.strategy_class_name} is not supported "
            "(hoodied executes SparkSortAndSizeExecutionStrategy plans)"
        )
    if plan.preserve_hoodie_metadata is not True:
        raise UnsupportedTableError(
            f"{where}: plan does not preserve record metadata (preserveHoodieMetadata="
            f"{plan.preserve_hoodie_metadata}); hoodied only executes plans that keep commit times"
        )
    if not plan.input_groups:
        raise HoodieFormatError(f"{where}: clustering plan has no input groups")



def check_clustering(
    storage: Storage, config: TableConfig, timeline: Timeline, inst: Instant,
    *, row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
) -> tuple[ClusteringPlan, ClusteringJob, str | None]:
    """Everything a clustering of the pending ``inst`` needs, checked without changing anything.

    The table's support (meta fields, MDT partitions a clustering keeps exact), the plan (it
    decodes, its version, strategy and groups), every file it names, the write schema and the
    sort columns. ``execute_clustering`` calls it right before the inflight transition and
    ``service.spark_jobs`` before it rolls back a failed attempt: one check for both. A write
    conflict (``require_no_conflict``) is not a bad input: the attempt is rolled back and the
    executor refuses it then.
    """
    require_rewritable(storage, config, CLUSTER, "clustering")
    plan = read_plan(timeline, inst, "clustering", ClusteringPlan)
    job, table_schema = prepare_job(storage, config, timeline, inst, plan, row_group_rows=row_group_rows)
    return plan, job, table_schema


def prepare_job(
    storage: Storage, config: TableConfig, timeline: Timeline, inst: Instant, plan: ClusteringPlan,
    *, row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
) -> tuple[ClusteringJob, str | None]:
    """The job of a plan (files resolved and checked) and the table schema for the commit metadata."""
    where = timeline.state_files(inst).get(State.REQUESTED) or timeline.state_file(inst)
    _check_plan(plan, where)
    groups: list[tuple[FileSlice, ...]] = []
    seen: set[tuple[str, str]] = set()
    for n, group in enumerate(plan.input_groups):
        if not group.slices:
            raise HoodieFormatError(f"{where}: clustering group {n} has no file slices")
        if group.num_output_file_groups < 1:
            raise HoodieFormatError(f"{where}: clustering group {n} asks for "
                                    f"{group.num_output_file_groups} output file groups")
        slices = []
        for info in group.slices:
            if info.bootstrap_file_path:
                raise UnsupportedTableError(
                    f"{where}: file group {info.file_id} has bootstrap base file {info.bootstrap_file_path}; "
                    "hoodied does not support bootstrapped tables"
                )
            s = operation_slice(storage, info.partition_path, info.file_id, None, info.data_file_path,
                                info.delta_file_paths, where)
            if (s.partition, s.file_id) in seen:
                raise HoodieFormatError(
                    f"{where}: file group {s.file_id} in partition {s.partition!r} is planned twice"
                )
            seen.add((s.partition, s.file_id))
            slices.append(s)
        if len({s.partition for s in slices}) != 1:
            raise HoodieFormatError(f"{where}: clustering group {n} spans several partitions")
        groups.append(tuple(slices))
    schemas = write_schemas(HoodieTable(storage, config, timeline), where)
    columns = sort_columns(plan)
    check_sort_columns(columns, schemas.arrow, where)
    job = ClusteringJob(
        storage, config, timeline, inst.requested_time, schemas.arrow, schemas.footer, tuple(groups),
        tuple(g.num_output_file_groups for g in plan.input_groups), columns, target_file_max_bytes(plan),
        row_group_rows, BaseFileSettings.for_table(config),  # refused here when unsupported, before any write
    )
    return job, schemas.table


def _write_stat(row: dict[str, Any]) -> dict[str, Any]:
    """A ``HoodieWriteStat`` of a new file, as Hudi's create handle fills it (every record an insert)."""
    stat = cm.write_stat(
        file_id=row["file_id"], path=row["path"], partition_path=row["partition"],
        num_writes=row["num_writes"], num_inserts=row["num_writes"], file_size=row["file_size"],
    )
    stat["runtimeStats"] = {"totalScanTime": 0, "totalUpsertTime": 0, "totalCreateTime": row["create_ms"]}
    return stat


def execute_clustering(
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
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
) -> ClusteringResult:
    """Run the requested clustering ``instant_time`` on ``session`` and complete it (takes ``lock``).

    Raises ``InstantStateError`` when there is no such clustering or it is inflight (a live
    executor, or a failed attempt to roll back first), ``WriteConflictError`` (an
    ``InstantStateError``) when a write completed since planning touched a planned file group,
    ``HoodieFormatError`` for a plan that cannot be executed (a missing or foreign file) and
    ``UnsupportedTableError`` for tables or plans hoodied cannot cluster; before the inflight
    transition nothing was changed, after it the attempt stays inflight without a heartbeat:
    a failed attempt that rollback-then-retry recovers. ``progress(done, total)`` hears of
    completed groups while the job runs.
    """
    # first: an unsupported table says so whatever its instants
    require_rewritable(storage, config, CLUSTER, "clustering")
    started = time.monotonic()
    writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
    with lock:
        timeline = Timeline.load(storage, config)
        inst = pending_instant(storage, timeline, instant_time, "clustering", timeline.is_clustering,
                               heartbeat_interval_ms, tolerable_misses)
        if inst.is_completed:
            return ClusteringResult(inst, was_completed=True)
        plan, job, table_schema = check_clustering(storage, config, timeline, inst,
                                                   row_group_rows=row_group_rows)
        require_no_conflict(timeline, inst, plan)  # refuse early: nothing written yet
        attempt = start_attempt(storage, writer, instant_time, Action.CLUSTERING, heartbeat_interval_ms,
                                tolerable_misses)
        job = dataclasses.replace(job, storage=attempt.storage)  # its tasks write through the fence
    with attempt:  # a failure after a takeover is the other attempt's (AttemptSupersededError)
        rows = run_attempt(session, len(job.groups), job, STATS_SCHEMA, progress=progress,
                           description=f"clustering {instant_time} of {storage.base_uri}")
        rows.sort(key=lambda r: (r["op"], r["path"] or ""))
        result = ClusteringResult(inst, [_write_stat(r) for r in rows if r["path"] is not None])
        for group in job.groups:
            for s in group:
                result.replaced.setdefault(s.partition, []).append(s.file_id)
        metadata = replace_commit_metadata(by_partition(result.write_stats), result.replaced, table_schema)
        # the record-index entries of the moved keys are built in Spark tasks, one per MDT file group
        moved = moved_keys(storage, config, instant_time, result.write_stats)
        commit_attempt(result, attempt, config, lock, writer, Action.CLUSTERING, metadata,
                       cm.encode_replace_commit_metadata, time_settings=time_settings,
                       mdt_sharded={RECORD_INDEX: moved} if moved is not None else None,
                       check=lambda: require_no_conflict(Timeline.load(storage, config), inst, plan),
                       mdt_runner=SparkOperations(session))
    result.seconds = time.monotonic() - started
    log.info("%s", result.summary())
    return result
