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
with the file group (a record index has hundreds of millions of keys).

Re-running a compaction finishes it from its plan (a base file already written is kept: it was
published whole, and only its trailer is read back). The caller holds the data table's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError
from hoodied.hoodie.filenames import BaseFileName, make_write_token
from hoodied.hoodie.fsview import FileSystemView, LogFile, list_storage
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.hfile.writer import BaseHFileWriter
from hoodied.hoodie.metadata.encode import metadata_payload_schema_json, metadata_schema_json
from hoodied.hoodie.metadata.merge import CompactedSlice, compact_file_slice
from hoodied.hoodie.metadata.rollback import latest_mdt_compaction
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline, datetime_to_instant_time, instant_time_to_datetime
from hoodied.hoodie.timeline.commit_metadata import write_stat
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import compaction_operation
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_DELTA_COMMITS",
    "MAX_DELTA_COMMITS_KEY",
    "MdtCompactionResult",
    "compaction_instant_time",
    "deltas_since_last_compaction",
    "execute_mdt_compaction",
    "instant_minus_millis",
    "max_delta_commits",
    "plan_mdt_compaction",
    "schedule_mdt_compaction",
]

MAX_DELTA_COMMITS_KEY = "hoodie.metadata.compact.max.delta.commits"
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


def execute_mdt_compaction(mdt: TimelineWriter, instant_time: str, table_version: int) -> MdtCompactionResult:
    """Run the MDT compaction ``instant_time`` from its requested plan to ``C_<completion>.commit``."""
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
    stats: dict[str, list[dict[str, Any]]] = {}
    for index, op in enumerate(plan.get("operations") or []):
        partition, file_id = str(op["partitionPath"]), str(op["fileId"])
        base = f"{partition}/{op['dataFilePath']}" if op.get("dataFilePath") else None
        logs = [f"{partition}/{name}" for name in op.get("deltaFilePaths") or []]
        existing = [i.name for i in storage.list(partition)
                    if (b := BaseFileName.parse(i.name)) is not None
                    and b.file_id == file_id and b.instant_time == instant_time]
        if existing:  # a crashed attempt published it whole; keep it
            name = existing[0]
            count = HFileReader.open(storage, f"{partition}/{name}", where=name).entry_count
        else:
            name = BaseFileName(file_id, make_write_token(index, 1, index), instant_time, "hfile").format()
            done = _write_base_file(mdt, timeline, base, logs, f"{partition}/{name}", table_version)
            if done is None:
                # Hudi 1.0 writes nothing for a slice whose logs hold no record (1.1 does)
                log.info("%s/%s: nothing to compact into %s", storage.base_uri, partition, file_id)
                continue
            count = done.records
            crash_point("mdt-compaction-base-written")
            log.info("%s/%s: compacted base file written (%d records from %d log files)",
                     storage.base_uri, f"{partition}/{name}", count, len(logs))
        size = storage.size(f"{partition}/{name}")
        result.base_files.append(f"{partition}/{name}")
        result.records += count
        stat = write_stat(
            file_id=file_id, path=f"{partition}/{name}", partition_path=partition,
            prev_commit=str(op.get("baseInstantTime") or "null") if base else "null",
            num_writes=count, num_inserts=count if base is None else 0,
            num_updates=count if base is not None else 0, file_size=size,
            prev_base_file=op.get("dataFilePath"),
        )
        stat["totalLogFilesCompacted"] = len(logs)
        stat["totalLogSizeCompacted"] = int(op.get("metrics", {}).get("TOTAL_LOG_FILES_SIZE", 0))
        stats.setdefault(partition, []).append(stat)
    metadata = {
        "partitionToWriteStats": stats,
        "compacted": True,
        "extraMetadata": {"schema": metadata_payload_schema_json(table_version)},
        "version": None,
        "operationType": "COMPACT",
    }
    result.instant = mdt.complete(instant_time, Action.COMPACTION, metadata)
    log.info("%s: MDT compaction %s completed (%d base files)", storage.base_uri, instant_time,
             len(result.base_files))
    return result


def _write_base_file(mdt: TimelineWriter, timeline: Timeline, base: str | None, logs: list[str],
                     path: str, table_version: int) -> CompactedSlice | None:
    """Merge one slice into the new base file ``path``, streamed to a temp file and published
    whole; ``None`` (nothing published) for a table version 8 slice without base file whose
    logs hold no record."""
    storage = mdt.storage
    name = path.rsplit("/", 1)[-1]
    with storage.create_if_absent(path) as out:
        with open(out.path, "wb") as f:
            writer = BaseHFileWriter(metadata_schema_json(table_version), sink=f)
            done = compact_file_slice(storage, timeline, base, logs, table_version, name, writer)
            writer.close()
        if base is None and not done.log_keys and table_version < 9:
            return None  # leaving the block drops the temp file
        mdt.lock.ensure_held()
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
