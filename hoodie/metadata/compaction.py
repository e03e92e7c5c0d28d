"""Metadata-table compaction: when it is due, at which instant, and how MDT records merge (Hudi 1.x).

The metadata table (MDT) is a merge-on-read table of HFiles. Hudi compacts it from
``HoodieBackedTableMetadataWriter.compactIfNecessary``; this module keeps its rules:

- **Trigger** (``ScheduleCompactionActionExecutor.needCompact``, ``NUM_COMMITS``): at least
  ``hoodie.metadata.compact.max.delta.commits`` (default 10, read from the data table's
  properties) MDT delta commits, in any state, with a requested time after the latest completed
  MDT compaction (all delta commits when there is none).
- **Instant** (``compactIfNecessary``): when some instant is pending on the data timeline but
  already completed on the MDT timeline, the first such instant minus 1 ms
  (``instantTimeMinusMillis``), so that instant's records stay out of the base files and it can
  still be rolled back; otherwise a fresh instant. A compaction already completed at that time
  is not repeated.
- **Plan** (``UnBoundedCompactionStrategy``, ``BaseHoodieCompactionPlanGenerator``): the latest
  slice of every MDT file group without a pending compaction, with the log files whose delta
  commit completed before the compaction instant (completion-time slicing: later ones belong
  to the new slice). A ``HoodieCompactionPlan`` (version 2) on the MDT timeline, requested ->
  inflight -> ``C_<completion>.commit`` (``COMPACT`` commit metadata, one write stat per base file).
- **Merge** (``hoodie.metadata.merge``, ``HoodieMetadataPayload``): the base file, then the log
  blocks, per key by record type; one base HFile ``<fileId>_<writeToken>_<C>.hfile`` per
  operation, cells sorted by key, ``_hoodie_file_name`` set to the file's own name. Table
  version 9 (Hudi 1.1) writes it even when the slice merges to nothing; for version 8 (Hudi 1.0)
  a slice without base file whose logs hold no record gets none, as the fixtures show.

Checked against Hudi: on the v9 fixtures, re-running Hudi's own MDT compaction gives the same
plan (metrics included) and the same cells, byte for byte, in all 14 base files.

Each base file is merged and written as a stream (``merge.compact_file_slice`` into a
``BaseHFileWriter`` on the temp file of ``Storage.create_if_absent``), so memory does not grow
with the file group (a record index has hundreds of millions of keys). Each planned slice is one
operation (``hoodie.tasks``, ``MdtCompactionTask``): run in this process one after the other by
default, or by the caller's runner as one engine task per MDT file group, in parallel, as Hudi
runs ``HoodieCompactor.compact`` over the plan's operations. A task returns one small row; the
driver builds the write stats and completes the instant, so its memory does not depend on the
number of keys either.

Re-running a compaction finishes it from its plan (a base file already written is kept: it was
published whole, and only its trailer is read back). The caller holds the data table's lock;
the driver checks it before the completion (tasks publish without it: a base file of a pending
compaction is read by nobody, and a re-run keeps it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa

from hoodied.hoodie.config_keys import HUDI_KEYS
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import FileAlreadyExistsError, HoodieFormatError, InstantStateError
from hoodied.hoodie.filenames import BaseFileName, make_write_token
from hoodied.hoodie.fsview import FileSystemView, LogFile, list_storage
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.hfile.writer import BaseHFileWriter
from hoodied.hoodie.metadata.encode import metadata_payload_schema_json, metadata_schema_json
from hoodied.hoodie.metadata.merge import CompactedSlice, compact_file_slice
from hoodied.hoodie.metadata.rollback import latest_mdt_compaction
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.tasks import OperationRunner, run_in_process
from hoodied.hoodie.timeline.active import Timeline, datetime_to_instant_time, instant_time_to_datetime
from hoodied.hoodie.timeline.commit_metadata import write_stat
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import compaction_operation
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_DELTA_COMMITS",
    "MAX_DELTA_COMMITS_KEY",
    "RESULT_SCHEMA",
    "MdtCompactionResult",
    "MdtCompactionTask",
    "MdtOperation",
    "compaction_instant_time",
    "deltas_since_last_compaction",
    "execute_mdt_compaction",
    "instant_minus_millis",
    "max_delta_commits",
    "plan_mdt_compaction",
    "schedule_mdt_compaction",
]

MAX_DELTA_COMMITS_KEY = HUDI_KEYS.METADATA_COMPACT_NUM_DELTA_COMMITS.key
#: ``HoodieMetadataConfig.COMPACT_NUM_DELTA_COMMITS`` default in 1.x (0.x: 24).
DEFAULT_MAX_DELTA_COMMITS = 10
COMPACTION_PLAN_VERSION = 2
#: What ``FileSliceMetricUtils`` counts as the write size of a slice without base file (observed
#: ``TOTAL_IO_WRITE_MB`` 120 in Hudi's MDT plans).
_NEW_BASE_WRITE_MB = 120
_MB = 1024 * 1024


def max_delta_commits(data_config: TableConfig, override: int | None = None) -> int:
    """``hoodie.metadata.compact.max.delta.commits``: ``override``, else the data table's property,
    else 10."""
    if override is not None:
        return override
    raw = data_config.props.get(MAX_DELTA_COMMITS_KEY)
    try:
        return int(raw) if raw is not None else DEFAULT_MAX_DELTA_COMMITS
    except ValueError:
        raise HoodieFormatError(
            f"hoodie.properties: {MAX_DELTA_COMMITS_KEY}={raw!r} is not a number") from None


def deltas_since_last_compaction(mdt: Timeline) -> tuple[int, str | None]:
    """(MDT delta commits after the latest completed compaction, that compaction's time or None)."""
    last = latest_mdt_compaction(mdt)
    deltas = [i for i in mdt.instants if i.action is Action.DELTA_COMMIT]
    if last is None:
        return len(deltas), None
    return sum(1 for i in deltas if i.requested_time > last.requested_time), last.requested_time


def instant_minus_millis(instant: str, millis: int, config: TableConfig) -> str:
    """``HoodieInstantTimeGenerator.instantTimeMinusMillis`` (table timezone)."""
    tz = config.tzinfo
    earlier = instant_time_to_datetime(instant, tz) - timedelta(milliseconds=millis)
    return datetime_to_instant_time(earlier, tz)


def compaction_instant_time(
    data: Timeline, mdt: Timeline, mdt_config: TableConfig, new_instant: Callable[[], str]
) -> str:
    """The MDT compaction instant (``compactIfNecessary``): before the first data instant that is
    pending on the data timeline but completed in the MDT, else a fresh one."""
    for inst in data.pending():
        if mdt.is_completed(inst.requested_time):
            return instant_minus_millis(inst.requested_time, 1, mdt_config)
    return new_instant()


# ---------------------------------------------------------------------------- plan


def _operation(partition: str, file_id: str, base_instant: str, base: tuple[str, int] | None,
               logs: list[LogFile]) -> dict[str, Any]:
    base_size = base[1] if base else 0
    return compaction_operation(
        partition, file_id, base_instant, base[0] if base else None, base_size,
        [(lf.file_name, lf.size) for lf in logs], base_size if base else _NEW_BASE_WRITE_MB * _MB,
    )


def plan_mdt_compaction(storage: Storage, config: TableConfig, timeline: Timeline,
                        instant_time: str) -> dict[str, Any] | None:
    """The ``HoodieCompactionPlan`` of an MDT compaction at ``instant_time`` (``None``: nothing to do)."""
    view = FileSystemView.build(list_storage(storage, config), timeline, config)
    ops = []
    for group in view.file_groups():
        if group.pending_compaction or group.pending_log_compaction:
            continue
        s = group.latest_slice
        if s is None:
            continue
        logs = sorted((lf for lf in s.log_files
                       if lf.completion_time is not None and lf.completion_time < instant_time),
                      key=LogFile.sort_key)
        if not logs:
            continue
        base = (s.base_file.file_name, s.base_file.size) if s.base_file is not None else None
        ops.append(_operation(s.partition, s.file_id, s.base_instant, base, logs))
    if not ops:
        return None
    return {
        "operations": ops,
        "extraMetadata": {},
        "version": COMPACTION_PLAN_VERSION,
        "strategy": None,
        "preserveHoodieMetadata": False,
        "missingSchedulePartitions": [],
    }


# ---------------------------------------------------------------------------- execute


@dataclass(slots=True)
class MdtCompactionResult:
    instant: Instant
    base_files: list[str] = field(default_factory=list)  # relative to the MDT
    records: int = 0


#: What the task of one operation returns: the base file it published (``path`` empty when it
#: published none), its record count and size, and how many log files it merged.
RESULT_SCHEMA = pa.schema([
    ("op", pa.int64()),
    ("partition", pa.string()),
    ("file_id", pa.string()),
    ("path", pa.string()),
    ("records", pa.int64()),
    ("size", pa.int64()),
    ("log_count", pa.int64()),
])


@dataclass(frozen=True, slots=True)
class MdtOperation:
    """One planned MDT file slice (paths relative to the MDT)."""

    partition: str
    file_id: str
    base: str | None
    logs: tuple[str, ...]
    existing: str | None
    """The name of the base file a crashed attempt of this compaction published, if any."""


@dataclass(frozen=True, slots=True)
class MdtCompactionTask:
    """The per-operation work of one MDT compaction (``hoodie.tasks``): merge slice ``index`` into
    its new base file and publish it. Pickled to the engine's tasks with the MDT's ``Storage``
    (fenced when the data instant's attempt is) and the MDT timeline as the driver loaded it."""

    storage: Storage
    timeline: Timeline
    instant_time: str
    table_version: int
    operations: tuple[MdtOperation, ...]

    def __call__(self, index: int, write_token: str) -> pa.RecordBatch:
        # The name does not take the engine's write token: an MDT compaction has no markers to
        # reconcile, so a retried or duplicate task attempt must collide with the file of the
        # first (write-once create) instead of leaving a second base file of the same group.
        del write_token
        op = self.operations[index]
        storage = self.storage
        name = op.existing
        if name is not None:  # a crashed attempt published it whole; keep it
            count = HFileReader.open(storage, f"{op.partition}/{name}", where=name).entry_count
        else:
            name = BaseFileName(op.file_id, make_write_token(index, 1, index), self.instant_time,
                                "hfile").format()
            try:
                done = _write_base_file(storage, self.timeline, op.base, list(op.logs),
                                        f"{op.partition}/{name}", self.table_version)
            except FileAlreadyExistsError:  # another attempt of this operation published it first
                count = HFileReader.open(storage, f"{op.partition}/{name}", where=name).entry_count
            else:
                if done is None:
                    # Hudi 1.0 writes nothing for a slice whose logs hold no record (1.1 does)
                    log.info("%s/%s: nothing to compact into %s", storage.base_uri, op.partition, op.file_id)
                    return _result_row(index, op, "", 0, 0)
                count = done.records
                crash_point("mdt-compaction-base-written")
                log.info("%s/%s: compacted base file written (%d records from %d log files)",
                         storage.base_uri, f"{op.partition}/{name}", count, len(op.logs))
        return _result_row(index, op, name, count, storage.size(f"{op.partition}/{name}"))


def _result_row(index: int, op: MdtOperation, name: str, records: int, size: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"op": index, "partition": op.partition, "file_id": op.file_id,
          "path": f"{op.partition}/{name}" if name else "", "records": records, "size": size,
          "log_count": len(op.logs)}],
        schema=RESULT_SCHEMA,
    )


def _published(storage: Storage, partitions: set[str], instant_time: str) -> dict[tuple[str, str], str]:
    """(partition, file id) -> the base file of ``instant_time`` already there (one listing per partition)."""
    out: dict[tuple[str, str], str] = {}
    for partition in sorted(partitions):
        for info in storage.list(partition):
            b = BaseFileName.parse(info.name)
            if b is not None and b.instant_time == instant_time:
                out.setdefault((partition, b.file_id), info.name)
    return out


def execute_mdt_compaction(mdt: TimelineWriter, instant_time: str, table_version: int, *,
                           runner: OperationRunner = run_in_process) -> MdtCompactionResult:
    """Run the MDT compaction ``instant_time`` from its requested plan to ``C_<completion>.commit``.

    Each planned slice is one operation of ``runner`` (``hoodie.tasks``: in this process by
    default, or one engine task per MDT file group), which merges and publishes its base file
    and returns one small row; this driver keeps the plan, the write stats and the completion,
    so its memory does not depend on the size of the index. The lock is checked here, before
    the completion: a task cannot hold it, and a base file published under a lost lock is
    never referenced (a re-run keeps it: it is whole, with the records a re-run would write).
    """
    storage = mdt.storage
    timeline = Timeline.load(storage, mdt.config)
    inst = timeline.get(instant_time)
    if inst is None or inst.action is not Action.COMPACTION:
        raise InstantStateError(f"{storage.base_uri}: no MDT compaction {instant_time} on the timeline")
    result = MdtCompactionResult(inst)
    if inst.is_completed:
        return result
    plan = timeline.read_plan(inst) or {}
    mdt.transition_to_inflight(instant_time, Action.COMPACTION)
    crash_point("mdt-compaction-inflight")
    planned = list(plan.get("operations") or [])
    published = _published(storage, {str(op["partitionPath"]) for op in planned}, instant_time)
    operations = []
    for op in planned:
        partition, file_id = str(op["partitionPath"]), str(op["fileId"])
        operations.append(MdtOperation(
            partition, file_id,
            f"{partition}/{op['dataFilePath']}" if op.get("dataFilePath") else None,
            tuple(f"{partition}/{name}" for name in op.get("deltaFilePaths") or []),
            published.get((partition, file_id)),
        ))
    task = MdtCompactionTask(storage, timeline, instant_time, table_version, tuple(operations))
    rows = runner(len(operations), task, RESULT_SCHEMA,
                  description=f"MDT compaction {instant_time} of {storage.base_uri}").to_pylist()
    by_op = {int(r["op"]): r for r in rows}
    if sorted(by_op) != list(range(len(operations))):
        raise InstantStateError(
            f"{storage.base_uri}: MDT compaction {instant_time}: results for {len(by_op)} of "
            f"{len(operations)} operations")
    stats: dict[str, list[dict[str, Any]]] = {}
    for index, op in enumerate(planned):  # the plan's order, whatever order the tasks ended in
        row = by_op[index]
        if not row["path"]:
            continue
        partition, file_id, count = str(row["partition"]), str(row["file_id"]), int(row["records"])
        base = operations[index].base
        result.base_files.append(str(row["path"]))
        result.records += count
        stat = write_stat(
            file_id=file_id, path=str(row["path"]), partition_path=partition,
            prev_commit=str(op.get("baseInstantTime") or "null") if base else "null",
            num_writes=count, num_inserts=count if base is None else 0,
            num_updates=count if base is not None else 0, file_size=int(row["size"]),
            prev_base_file=op.get("dataFilePath"),
        )
        stat["totalLogFilesCompacted"] = int(row["log_count"])
        stat["totalLogSizeCompacted"] = int(op.get("metrics", {}).get("TOTAL_LOG_FILES_SIZE", 0))
        stats.setdefault(partition, []).append(stat)
    metadata = {
        "partitionToWriteStats": stats,
        "compacted": True,
        "extraMetadata": {"schema": metadata_payload_schema_json(table_version)},
        "version": None,
        "operationType": "COMPACT",
    }
    mdt.lock.ensure_held()  # the tasks published without the lock: nothing refers to their files yet
    result.instant = mdt.complete(instant_time, Action.COMPACTION, metadata)
    log.info("%s: MDT compaction %s completed (%d base files)", storage.base_uri, instant_time,
             len(result.base_files))
    return result


def _write_base_file(storage: Storage, timeline: Timeline, base: str | None, logs: list[str],
                     path: str, table_version: int) -> CompactedSlice | None:
    """Merge one slice into the new base file ``path``, streamed to a temp file and published
    whole; ``None`` (nothing published) for a table version 8 slice without base file whose
    logs hold no record."""
    name = path.rsplit("/", 1)[-1]
    with storage.create_if_absent(path) as out:
        with open(out.path, "wb") as f:
            writer = BaseHFileWriter(metadata_schema_json(table_version), sink=f)
            done = compact_file_slice(storage, timeline, base, logs, table_version, name, writer)
            writer.close()
        if base is None and not done.log_keys and table_version < 9:
            return None  # leaving the block drops the temp file
        out.commit()
    return done


def schedule_mdt_compaction(mdt: TimelineWriter, instant_time: str) -> Instant | None:
    """Write ``C.compaction.requested`` with the plan for ``instant_time`` (``None``: nothing to compact)."""
    timeline = Timeline.load(mdt.storage, mdt.config)
    plan = plan_mdt_compaction(mdt.storage, mdt.config, timeline, instant_time)
    if plan is None:
        return None
    inst = mdt.create_requested(Action.COMPACTION, instant_time, plan)
    if inst.state is not State.REQUESTED:
        raise InstantStateError(
            f"{mdt.storage.base_uri}: MDT compaction {instant_time} is already {inst.state.value}")
    log.info("%s: MDT compaction %s scheduled (%d file groups)", mdt.storage.base_uri, instant_time,
             len(plan["operations"]))
    return inst
