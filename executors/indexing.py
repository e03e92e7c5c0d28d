"""Executing a pending ``indexing`` instant: build an MDT index partition with Spark, then commit.

Runs an ``indexing`` instant that Apache Hudi scheduled (``HoodieIndexer --mode schedule``,
SQL ``CREATE INDEX``), as ``RunIndexActionExecutor`` does (the rules are in
``hoodie.metadata.index_build``). One run, under the table lock where it touches shared state:

1. checks: the plan, the index definition, table version 8/9, a requested instant (an inflight
   one is a live executor or a failed attempt to undo first: ``rollback_failed_indexing``), no
   pending data write (Hudi's catch-up waits for those; hoodied asks to retry later);
2. the attempt claims the instant and starts its heartbeat (``executors.attempt.start_attempt``:
   every later write of the build, tasks included, goes through its fence, ``hoodie.fence``),
   ``indexing`` -> inflight; the partition is marked inflight in ``hoodie.properties``;
3. Spark job 1, one task per operation: a latest merged file slice of the data table (secondary
   and record index: the slice is read, base + log files, ``hoodie.reader``), a listed base file
   (column stats: its footer) or a data partition (partition stats: the footers of its latest
   base files, each column given the table schema's type before they merge, as Hudi's
   initialization does: ``hoodie.metadata.index_records``); the (key, value) records are kept
   (``persist``) and counted, which gives the file group count of the secondary and record indexes;
4. the MDT partition folder is cleared and its file groups created (``.hoodie_partition_metadata``
   and one empty log file each), then MDT delta commit ``<init>`` requested -> inflight;
5. Spark job 2: the records are routed to file groups, shuffled and sorted, and each task writes
   one base HFile per file group it holds (marker first; memory: one file group's records);
6. under the lock: files of failed task attempts are removed (markers), the MDT delta commit
   completes, nothing was written to the data table meanwhile (else the attempt fails, to be
   undone and re-run), the partition moves to ``hoodie.table.metadata.partitions`` and
   ``indexing`` completes with ``HoodieIndexCommitMetadata``.

Crash points (``hoodie.crashpoints``): ``indexing-inflight``, ``indexing-file-groups``,
``indexing-task`` (in tasks, after the marker), ``indexing-written``,
``indexing-mdt-committed``, ``indexing-properties``. A killed run leaves an inflight instant
without heartbeat; ``rollback_failed_indexing`` undoes it (``hoodie.metadata.index_rollback``) and
the instant can be executed again (``rollback_failed_indexing`` is re-exported here).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from hoodied.executors.attempt import Attempt, start_attempt
from hoodied.executors.engine import Progress, current_write_token, spark_ddl, task_error
from hoodied.hoodie.basefile import avro_schema_json
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import (
    HoodieServiceError,
    InstantNotReadyError,
    InstantStateError,
    UnsupportedTableError,
)
from hoodied.hoodie.filenames import LogFileName
from hoodied.hoodie.fsview import CommitState, FileSlice
from hoodied.hoodie.heartbeat import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOLERABLE_MISSES,
    require_startable,
)
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.log import write_log_file
from hoodied.hoodie.markers import IOType, WriteMarkers
from hoodied.hoodie.merge import MergeSpec
from hoodied.hoodie.metadata.encode import PARTITION_STATS, RECORD_INDEX
from hoodied.hoodie.metadata.index_build import (
    SECONDARY_INDEX,
    FileGroupSizing,
    IndexPartitionInfo,
    IndexSpec,
    base_file_stat,
    estimate_file_group_count,
    file_group_ids,
    index_commit_metadata,
    init_commit_metadata,
    init_instant_time,
    init_log_block,
    init_log_file_name,
    read_index_plan,
    require_indexable,
    require_not_started,
)
from hoodied.hoodie.metadata.index_records import (
    base_file_cells,
    column_stats_cells,
    encode_index_base_file,
    partition_stats_cells,
    record_index_value,
    secondary_index_key,
    secondary_key_strings,
)
from hoodied.hoodie.metadata.index_rollback import rollback_failed_indexing
from hoodied.hoodie.metadata.range_types import ValueTypes, column_value_types
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.metadata.rollback import open_mdt_timeline
from hoodied.hoodie.properties import TableConfig, partition_metadata_text
from hoodied.hoodie.reader import read_file_slice
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.table_config_update import set_metadata_partition_state
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State, instant_time_to_epoch_ms
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "IndexingCheck",
    "IndexingResult",
    "check_indexing",
    "execute_indexing",
    "rollback_failed_indexing",
]

RECORD_KEY = "_hoodie_record_key"
#: Data actions whose pending instants make the indexer wait (they change keys or values).
_WRITES = (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT, Action.ROLLBACK, Action.RESTORE)
KEYS_SCHEMA = pa.schema([("key", pa.string()), ("value", pa.binary())])
KEYS_DDL = "`key` string, `value` binary"
ROUTED_SCHEMA = pa.schema([("fg", pa.int64()), ("key", pa.string()), ("value", pa.binary())])
ROUTED_DDL = "`fg` bigint, `key` string, `value` binary"
STATS_SCHEMA = pa.schema([("fg", pa.int64()), ("file_id", pa.string()), ("name", pa.string()),
                          ("records", pa.int64()), ("size", pa.int64())])


# ---------------------------------------------------------------------------- tasks


def _keys_batch(keys: list[str], values: list[bytes | None] | None = None) -> pa.RecordBatch:
    column = pa.array(values or [None] * len(keys), pa.binary())
    return pa.RecordBatch.from_arrays([pa.array(keys, pa.string()), column], schema=KEYS_SCHEMA)


@dataclass(frozen=True)
class _SliceKeys:
    """Job 1 of a secondary index (``mapInArrow``): slice index -> keys of its merged records."""

    storage: Storage
    config: TableConfig
    timeline: Timeline
    schema: pa.Schema
    slices: tuple[FileSlice, ...]
    source_field: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        commits = CommitState(self.timeline, self.config)
        spec = MergeSpec.for_table(self.config) if self.config.is_mor else None
        for batch in batches:
            for index in batch.column(0).to_pylist():
                s = self.slices[int(index)]
                for records in read_file_slice(self.storage, s, self.config, self.timeline, self.schema,
                                               commits=commits, spec=spec):
                    values = secondary_key_strings(records.column(self.source_field), str(s))
                    keys = [secondary_index_key(v, k) for v, k in
                            zip(values, records.column(RECORD_KEY).to_pylist(), strict=True)]
                    yield _keys_batch(keys)


@dataclass(frozen=True)
class _SliceRecordIndex:
    """Job 1 of ``record_index``: slice index -> (record key, location) of its merged records."""

    storage: Storage
    config: TableConfig
    timeline: Timeline
    schema: pa.Schema
    slices: tuple[FileSlice, ...]
    instant_millis: tuple[int, ...]  # the slices' base instants in epoch ms (timeline time zone)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        commits = CommitState(self.timeline, self.config)
        spec = MergeSpec.for_table(self.config) if self.config.is_mor else None
        for batch in batches:
            for index in batch.column(0).to_pylist():
                s, millis = self.slices[int(index)], self.instant_millis[int(index)]
                value = record_index_value(s.partition, s.file_id, millis, self.config.version)
                for records in read_file_slice(self.storage, s, self.config, self.timeline, self.schema,
                                               commits=commits, spec=spec):
                    keys = records.column(RECORD_KEY).to_pylist()
                    yield _keys_batch(keys, [value] * len(keys))


@dataclass(frozen=True)
class _FileColumnStats:
    """Job 1 of ``column_stats``: base file index -> its column stats records (footer only)."""

    storage: Storage
    files: tuple[tuple[str, str], ...]  # (partition, file name)
    columns: tuple[str, ...]
    table_version: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                partition, name = self.files[int(index)]
                cells = column_stats_cells(self.storage, partition, name, self.columns, self.table_version)
                if cells:
                    yield _keys_batch([k for k, _ in cells], [v for _, v in cells])


@dataclass(frozen=True)
class _PartitionStats:
    """Job 1 of ``partition_stats``: data partition index -> its records (latest base files' footers)."""

    storage: Storage
    partitions: tuple[tuple[str, tuple[str, ...]], ...]  # (partition, latest base file names)
    columns: tuple[str, ...]
    table_version: int
    column_types: ValueTypes  # the table schema's (hoodie.metadata.range_types)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                partition, names = self.partitions[int(index)]
                cells = partition_stats_cells(self.storage, partition, names, self.columns,
                                              self.table_version, self.column_types)
                if cells:
                    yield _keys_batch([k for k, _ in cells], [v for _, v in cells])


@dataclass(frozen=True)
class _Route:
    """Keys -> (file group, key)."""

    file_groups: int
    spec: IndexSpec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            keys = batch.column(0).to_pylist()
            fgs = [self.spec.file_group_of(k, self.file_groups) for k in keys]
            yield pa.RecordBatch.from_arrays([pa.array(fgs, pa.int64()), batch.column(0), batch.column(1)],
                                             schema=ROUTED_SCHEMA)


@dataclass(frozen=True)
class _WriteFileGroups:
    """Job 2: (file group, key) rows sorted by both -> one base HFile per file group."""

    mdt_storage: Storage
    partition: str
    instant_time: str
    table_version: int
    file_ids: tuple[str, ...]
    unique_keys: bool = False

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        token = current_write_token()
        current: int | None = None
        rows: list[tuple[str, bytes | None]] = []
        for batch in batches:
            columns = (batch.column(0).to_pylist(), batch.column(1).to_pylist(), batch.column(2).to_pylist())
            for fg, key, value in zip(*columns, strict=True):
                if fg != current:
                    if current is not None:
                        yield self._write(current, rows, token)
                    current, rows = fg, []
                rows.append((key, value))
        if current is not None:
            yield self._write(current, rows, token)

    def _write(self, fg: int, rows: list[tuple[str, bytes | None]], token: str) -> pa.RecordBatch:
        file_id = self.file_ids[fg]
        name = f"{file_id}_{token}_{self.instant_time}.hfile"
        WriteMarkers(self.mdt_storage, self.instant_time).create(self.partition, name, IOType.CREATE)
        crash_point("indexing-task")
        cells = base_file_cells(rows, self.table_version, name, unique=self.unique_keys)
        data = encode_index_base_file(cells, self.table_version)
        self.mdt_storage.put_if_absent(f"{self.partition}/{name}", data)
        row = {"fg": fg, "file_id": file_id, "name": name, "records": len(cells), "size": len(data)}
        return pa.RecordBatch.from_pylist([row], schema=STATS_SCHEMA)


_Job = _SliceKeys | _SliceRecordIndex | _FileColumnStats | _PartitionStats


# ---------------------------------------------------------------------------- result


@dataclass(slots=True)
class IndexingResult:
    """What one run of ``execute_indexing`` did."""

    instant: Instant
    partition: str = ""
    init_instant: str = ""
    file_groups: int = 0
    base_files: list[str] = field(default_factory=list)
    records: int = 0
    was_completed: bool = False
    seconds: float = 0.0

    def summary(self) -> str:
        t = self.instant.requested_time
        if self.was_completed:
            return f"{t} indexing: already completed, nothing to do"
        done = f"completed at {self.instant.completion_time}" if self.instant.completion_time else "completed"
        return (f"{t} indexing: {self.partition} built at MDT instant {self.init_instant}: "
                f"{self.file_groups} file groups, {len(self.base_files)} base files, {self.records} "
                f"records in {self.seconds:.1f} s; {done}")


# ---------------------------------------------------------------------------- driver


def _require_no_pending_writes(timeline: Timeline, where: str) -> None:
    pending = [i for i in timeline.pending(_WRITES)]
    if pending:
        names = ", ".join(f"{i.requested_time} {i.action.value}" for i in pending)
        raise InstantNotReadyError(f"{where}: data writes are pending ({names}); indexing waits for them "
                                "to finish (Hudi's catch-up does too), retry later")


def _completed_writes(timeline: Timeline) -> set[str]:
    return {i.requested_time for i in timeline.completed(_WRITES)}


@dataclass(frozen=True)
class IndexingCheck:
    """What ``check_indexing`` found: the plan's partition, what to build and job 1 of the build."""

    infos: list[IndexPartitionInfo]
    spec: IndexSpec
    job: _Job
    operations: int


def check_indexing(storage: Storage, config: TableConfig, timeline: Timeline, inst: Instant) -> IndexingCheck:
    """Everything a build of the pending ``inst`` needs from its inputs, checked without changing anything.

    The plan decodes and names one partition hoodied builds, the table supports it (version,
    metadata table, index definition), and job 1 can be made (its columns exist, no log files
    where hoodied reads footers only). ``service.spark_jobs`` runs it before it aborts a failed
    attempt; ``execute_indexing`` runs its two steps (``_plan``, ``_job``) before the inflight
    transition, with the state checks between them (a startable instant, a partition not
    already inflight, no pending data write). Those are not inputs: a failed attempt fails them
    until it is aborted, so only the executor makes them.
    """
    where = f"{storage.base_uri}/{timeline.state_file(inst, State.REQUESTED)}"
    infos, spec = _plan(storage, config, timeline, inst, where)
    job, operations = _job(storage, config, timeline, spec, where)
    return IndexingCheck(infos, spec, job, operations)


def _plan(storage: Storage, config: TableConfig, timeline: Timeline, inst: Instant,
          where: str) -> tuple[list[IndexPartitionInfo], IndexSpec]:
    """The plan's partition infos and what to build (one partition: ``require_indexable``)."""
    infos = read_index_plan(timeline, inst)
    return infos, require_indexable(storage, config, infos, where)[0]


@dataclass
class _Build:
    inst: Instant
    info: IndexPartitionInfo
    spec: IndexSpec
    init: str
    operations: int
    writes: set[str]
    job: _Job
    mdt: TimelineWriter
    attempt: Attempt


def _start(storage: Storage, config: TableConfig, writer: TimelineWriter, instant_time: str,
           interval_ms: int, misses: int) -> _Build | Instant:
    """Checks and the inflight transitions (under the lock); the completed instant when done already."""
    timeline = Timeline.load(storage, config)
    inst = timeline.get(instant_time)
    if inst is None or inst.action is not Action.INDEXING:
        raise InstantStateError(
            f"{storage.base_uri}: no indexing instant {instant_time} on the active timeline")
    if inst.is_completed:
        return inst
    where = f"{storage.base_uri}/{timeline.state_file(inst, State.REQUESTED)}"
    # check_indexing's two steps, with the state checks between them (the order of the refusals)
    infos, spec = _plan(storage, config, timeline, inst, where)
    require_startable(storage, inst, "indexing", interval_ms, misses)
    require_not_started(config, infos, where)
    _require_no_pending_writes(timeline, where)
    job, operations = _job(storage, config, timeline, spec, where)
    mdt = open_mdt_timeline(storage, writer.lock, truetime=writer.truetime)
    init = init_instant_time(timeline, Timeline.load(mdt.storage, mdt.config))
    attempt = start_attempt(storage, writer, instant_time, Action.INDEXING, interval_ms, misses)
    try:
        crash_point("indexing-inflight")
        set_metadata_partition_state(attempt.storage, writer.lock, [infos[0].partition], state="inflight")
        # the MDT files of the build (tasks and driver) are written through the attempt's fence
        mdt = open_mdt_timeline(attempt.storage, writer.lock, truetime=writer.truetime)
    except BaseException:
        attempt.end()
        raise
    return _Build(inst, infos[0], spec, init, operations, _completed_writes(timeline), job, mdt, attempt)


def _job(storage: Storage, config: TableConfig, timeline: Timeline, spec: IndexSpec,
         where: str) -> tuple[_Job, int]:
    """Job 1 of the build and its number of operations (file slices, or base files)."""
    table = HoodieTable(storage, config, timeline)
    if spec.kind == SECONDARY_INDEX:
        schema = table.schema()
        if spec.source_fields[0] not in schema.names:
            raise UnsupportedTableError(f"{where}: {spec.partition} indexes {spec.source_fields[0]}, "
                                        "which is not a column of the table")
        slices = tuple(table.file_system_view().read_slices())
        return _SliceKeys(storage, config, timeline, schema, slices, spec.source_fields[0]), len(slices)
    if spec.kind == RECORD_INDEX:
        schema = table.schema()
        slices = tuple(table.file_system_view().read_slices())
        tz = config.tzinfo
        millis = tuple(instant_time_to_epoch_ms(s.base_instant, tz) for s in slices)
        return _SliceRecordIndex(storage, config, timeline, schema, slices, millis), len(slices)
    if spec.kind == PARTITION_STATS:
        # the latest merged slices (getLazyLatestMergedPartitionFileSliceList), base files only
        by_partition: dict[str, list[str]] = {}
        for s in table.file_system_view().read_slices():
            if s.log_files:
                raise UnsupportedTableError(f"{where}: {s}: partition stats over log files are not built "
                                            "by hoodied (Hudi reads their records)")
            if s.base_file is not None:
                by_partition.setdefault(s.partition, []).append(s.base_file.file_name)
        parts = tuple((p, tuple(sorted(n))) for p, n in sorted(by_partition.items()))
        types = _table_value_types(table, config) if parts else {}
        return _PartitionStats(storage, parts, spec.source_fields, config.version, types), len(parts)
    # column_stats: every file the files partition lists (all versions, as initializeFromFilesystem)
    files = []
    for partition, names in sorted(table.list_files().items()):
        for name, _ in sorted(names):
            if LogFileName.parse(name) is not None:
                raise UnsupportedTableError(f"{where}: {partition}/{name}: column stats of log files are not "
                                            "built by hoodied (Hudi reads their records)")
            files.append((partition, name))
    return _FileColumnStats(storage, tuple(files), spec.source_fields, config.version), len(files)


def _table_value_types(table: HoodieTable, config: TableConfig) -> ValueTypes:
    """The column types of the partition stats Hudi initializes: those of the table schema
    (``tryResolveSchemaForTable`` -> ``TableSchemaResolver.getTableAvroSchema``: the latest commit's
    schema, else the create schema, else a data file's; meta fields as strings when populated)."""
    text = table.avro_schema()
    if text is None:  # no schema in the commits nor the properties: the latest base file's
        text = avro_schema_json(table.schema(), config.name, meta_fields=False)
    return column_value_types(text, meta_fields=config.populate_meta_fields)


def _create_file_groups(mdt: TimelineWriter, partition: str, init: str, count: int) -> list[str]:
    """Clear the partition folder, then one empty log file per file group (``initializeFileGroups``)."""
    storage = mdt.storage
    for info in list(storage.walk(partition)):
        mdt.lock.ensure_held()
        storage.delete(info.path)
    mdt.lock.ensure_held()
    storage.put_if_absent(f"{partition}/.hoodie_partition_metadata",
                          partition_metadata_text(init, 1, datetime.now(UTC)).encode("latin-1"))
    ids = file_group_ids(partition, count)
    for file_id in ids:
        mdt.lock.ensure_held()
        write_log_file(storage, f"{partition}/{init_log_file_name(file_id, init)}", [init_log_block(init)])
    return ids


def execute_indexing(
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
) -> IndexingResult:
    """Build and complete the requested ``indexing`` instant ``instant_time`` on ``session``.

    Raises ``InstantStateError`` when there is no such instant, it is inflight (a live executor
    or a failed attempt: ``rollback_failed_indexing`` first), data writes are pending, or data
    was written while the index was built (the attempt is left failed); ``HoodieFormatError``
    for an unusable plan or index definition; ``UnsupportedTableError`` for what hoodied does
    not build (nothing is changed in those cases). ``progress(done, total)`` hears of finished
    slices (job 1).
    """
    started = time.monotonic()
    writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
    with lock:
        build = _start(storage, config, writer, instant_time, heartbeat_interval_ms, tolerable_misses)
    if isinstance(build, Instant):
        return IndexingResult(build, was_completed=True)
    partition, init = build.info.partition, build.init
    result = IndexingResult(build.inst, partition=partition, init_instant=init)
    mdt = build.mdt
    with build.attempt:  # a failure after a takeover is the other attempt's (AttemptSupersededError)
        stats = _build_partition(session, storage, config, mdt, build, result, progress)
        with lock:
            _commit(storage, writer, mdt, build, stats, result)
    result.seconds = time.monotonic() - started
    log.info("%s", result.summary())
    return result


def _build_partition(
    session: SparkSession, storage: Storage, config: TableConfig, mdt: TimelineWriter, build: _Build,
    result: IndexingResult, progress: Progress | None,
) -> list[dict[str, Any]]:
    partition, init = build.info.partition, build.init
    description = f"indexing {build.inst.requested_time} of {storage.base_uri}"
    keys: Any = None
    count = 0
    try:
        if build.operations:
            keys = session.range(0, build.operations, 1, numPartitions=build.operations).mapInArrow(
                build.job, KEYS_DDL).persist()
            count = keys.count()
        if progress is not None:
            progress(build.operations, build.operations)
        result.file_groups = build.spec.file_groups or estimate_file_group_count(
            count, FileGroupSizing.from_options(config.props))
        with mdt.lock:
            ids = _create_file_groups(mdt, partition, init, result.file_groups)
            crash_point("indexing-file-groups")
            mdt.create_requested(Action.DELTA_COMMIT, init, None)
            mdt.transition_to_inflight(init, Action.DELTA_COMMIT)
        rows: list[dict[str, Any]] = []
        if count:
            writer = _WriteFileGroups(mdt.storage, partition, init, config.version, tuple(ids),
                                      build.spec.kind == RECORD_INDEX)
            routed = keys.mapInArrow(_Route(result.file_groups, build.spec), ROUTED_DDL)
            written = (routed.repartition(result.file_groups, "fg").sortWithinPartitions("fg", "key")
                       .mapInArrow(writer, spark_ddl(STATS_SCHEMA)).toArrow())
            rows = sorted(written.to_pylist(), key=lambda r: r["fg"])
    except HoodieServiceError:
        raise
    except Exception as exc:  # Spark's errors carry the worker's traceback as text
        raise task_error(exc, description) from exc
    finally:
        if keys is not None:
            keys.unpersist()
    crash_point("indexing-written")
    return rows


def _commit(storage: Storage, writer: TimelineWriter, mdt: TimelineWriter, build: _Build,
            rows: list[dict[str, Any]], result: IndexingResult) -> None:
    """Under the lock: MDT delta commit, the no-concurrent-write check, properties, ``indexing``."""
    partition, init = build.info.partition, build.init
    build.attempt.fence.check()  # a superseded attempt changes nothing
    if len({r["fg"] for r in rows}) != len(rows):
        raise InstantStateError(f"{init}: two task results for one MDT file group of {partition}")
    stats = [base_file_stat(partition, r["file_id"], r["name"], r["records"], r["size"]) for r in rows]
    markers = WriteMarkers(mdt.storage, init)
    markers.reconcile({s["path"] for s in stats})
    mdt.complete(init, Action.DELTA_COMMIT, init_commit_metadata({partition: stats} if stats else {},
                                                                  writer.config.version))
    markers.delete_all()
    result.base_files = [s["path"] for s in stats]
    result.records = sum(int(r["records"]) for r in rows)
    crash_point("indexing-mdt-committed")
    timeline = Timeline.load(storage, writer.config)
    _require_no_pending_writes(timeline, f"{storage.base_uri}: indexing {build.inst.requested_time}")
    late = _completed_writes(timeline) - build.writes
    if late:
        raise InstantStateError(
            f"{storage.base_uri}: data instants {', '.join(sorted(late))} completed while {partition} was "
            "built; this attempt has failed: roll it back and execute the indexing again")
    set_metadata_partition_state(build.attempt.storage, writer.lock, [partition], state="completed")
    crash_point("indexing-properties")
    build.attempt.fence.check()
    result.instant = writer.complete(build.inst.requested_time, Action.INDEXING,
                                     index_commit_metadata([build.info]))
    log.info("%s/%s: MDT partition built and completed", METADATA_FOLDER, partition)
