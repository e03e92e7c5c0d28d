"""The log compaction planner: which file slices have enough log blocks to stitch into one.

Log compaction (Hudi's RFC-48) merges the log records of a file slice, without its base file,
into one new log block and leaves the base file alone. Scheduling follows Hudi 1.x:

- trigger (``ScheduleCompactionActionExecutor.needCompact`` for ``LOG_COMPACT``): due as soon
  as the timeline has a delta commit. hoodied adds ``hoodie.log.compaction.enable`` (default
  false) to the cheap trigger ``needs_log_compaction``, so a daemon does not schedule log
  compactions unless the table asks for them; ``schedule_log_compaction`` is an explicit
  request and does not look at it;
- eligibility (``HoodieLogCompactionPlanGenerator`` on top of
  ``BaseHoodieCompactionPlanGenerator``): the latest slice of every file group that has log
  files and no pending compaction, log compaction or clustering; of its log files only those
  whose delta commit completed before the log compaction instant (as for compaction); and
  the slice is taken when the blocks a reader would merge from those files number at least
  ``hoodie.log.compaction.blocks.threshold`` (5). Blocks are counted as Hudi's optimized scan
  sees them (``HoodieUnMergedLogRecordScanner`` with the optimized scan): committed data and
  delete blocks, not rolled back, with the blocks of an earlier log compaction replaced by
  the compacted block(s) (so stitched slices only come back after enough new writes);
- no compaction strategy filters or orders the operations: every eligible slice is taken.

The plan is a ``HoodieCompactionPlan`` (version 2) with the operations of
``hoodie.timeline.plans.compaction_operation`` (``FileSliceMetricUtils`` metrics),
``strategy.compactorClassName`` ``org.apache.hudi.table.action.compact.LogCompactionExecutionHelper``
with empty ``strategyParams``, and ``preserveHoodieMetadata`` true. ``schedule_log_compaction``
writes it as ``<T>.logcompaction.requested`` under the table lock with a TrueTime instant.

Table version 6 is refused: its log files carry the slice's base instant, so the attempt's
output cannot be rolled back by deleting files, and Hudi 0.x readers only honour
``COMPACTED_BLOCK_TIMES`` with the optimized scan switched on. Tables with a metadata table
are planned when the log compaction's MDT delta commit keeps every MDT partition exact
(``hoodie.actions.log_compaction.require_log_compaction_supported``).

The trigger, ``log_compaction_due``, sits beside the planner and takes its settings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hoodied.hoodie.actions.log_compaction import LOG_COMPACTION_COMPACTOR, require_log_compaction_supported
from hoodied.hoodie.config_keys import HUDI_KEYS, ConfigKey, by_key
from hoodied.hoodie.errors import InstantStateError
from hoodied.hoodie.fsview import (
    CommitState,
    FilesByPartition,
    FileSlice,
    FileSystemView,
    LogFile,
    list_storage,
)
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.reader import scan_log_blocks
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.compact import TimelineCounts
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import compaction_operation
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "LogCompactionPlanResult",
    "LogCompactionSettings",
    "log_compaction_due",
    "log_compaction_due_counts",
    "needs_log_compaction",
    "plan_log_compaction",
    "schedule_log_compaction",
    "slice_block_count",
]

_PLAN_VERSION = 2  # CompactionUtils.LATEST_COMPACTION_METADATA_VERSION
_MAX_FILE_SIZE = 125_829_120  # hoodie.parquet.max.file.size: write estimate without a base file

#: Hudi key -> settings field (each key also read under its alternatives, ``config_keys.by_key``).
_KEYS: dict[ConfigKey, str] = {
    HUDI_KEYS.LOG_COMPACTION_ENABLE: "enabled",
    HUDI_KEYS.LOG_COMPACTION_BLOCKS_THRESHOLD: "blocks_threshold",
}
_OPTION_KEYS = {entry.key: name for entry, name in _KEYS.items()}


@dataclass(frozen=True, slots=True)
class LogCompactionSettings:
    """The log compaction scheduler's settings, with Hudi's keys and defaults (``from_options``)."""

    enabled: bool = False
    """``hoodie.log.compaction.enable``: whether the daemon's trigger schedules log compactions."""
    blocks_threshold: int = 5
    """``hoodie.log.compaction.blocks.threshold``: log blocks a slice needs to be log-compacted."""

    def __post_init__(self) -> None:
        if self.blocks_threshold < 2:  # one block (or one log compaction's output) has nothing to stitch
            raise ValueError("hoodie.log.compaction.blocks.threshold must be >= 2")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> LogCompactionSettings:
        """Settings from Hudi option keys; unknown keys and bad values raise ``ValueError``."""
        values: dict[str, Any] = {}
        for key, raw in by_key(options, _KEYS).items():
            name = _OPTION_KEYS.get(key)
            if name is None:
                known = ", ".join(sorted(_OPTION_KEYS))
                raise ValueError(f"{key}: not a log compaction option (known: {known})")
            text = str(raw).strip()
            if name == "enabled":
                if text.lower() not in ("true", "false"):
                    raise ValueError(f"{key}={raw}: not a valid value (true or false)")
                values[name] = text.lower() == "true"
            else:
                try:
                    values[name] = int(text)
                except ValueError as exc:
                    raise ValueError(f"{key}={raw}: not a valid value ({exc})") from None
        return replace(cls(), **values)

    def options(self) -> dict[str, str]:
        """The settings as Hudi option keys (for logs and summaries)."""
        return {
            HUDI_KEYS.LOG_COMPACTION_ENABLE.key: str(self.enabled).lower(),
            HUDI_KEYS.LOG_COMPACTION_BLOCKS_THRESHOLD.key: str(self.blocks_threshold),
        }


@dataclass(slots=True)
class LogCompactionPlanResult:
    """The plan (``None`` when nothing is due) and why."""

    plan: dict[str, Any] | None
    reason: str
    instant_time: str
    blocks: dict[tuple[str, str], int] = field(default_factory=dict)
    """(partition, file id) -> log blocks counted, for every slice with eligible log files."""
    skipped_pending: list[tuple[str, str]] = field(default_factory=list)
    """(partition, file id) left out because a compaction, log compaction or clustering is pending."""

    @property
    def operations(self) -> list[dict[str, Any]]:
        return list((self.plan or {}).get("operations") or [])

    def summary(self) -> str:
        if self.plan is None:
            return f"nothing to log-compact: {self.reason}"
        ops = self.operations
        logs = sum(len(op["deltaFilePaths"]) for op in ops)
        blocks = sum(self.blocks.get((op["partitionPath"], op["fileId"]), 0) for op in ops)
        parts = len({op["partitionPath"] for op in ops})
        return (
            f"{len(ops)} file groups in {parts} partitions, {logs} log files, {blocks} log blocks; "
            f"{self.reason}"
        )


# ---------------------------------------------------------------------------- trigger


def needs_log_compaction(
    timeline: Timeline, config: TableConfig, settings: LogCompactionSettings
) -> tuple[bool, str]:
    """Whether a log compaction is worth planning (timeline only), and a one-line why."""
    if not settings.enabled:
        return False, "hoodie.log.compaction.enable is false"
    if not config.is_mor:
        return False, f"a {config.table_type.value} table has no log files"
    if config.version < 8:
        return False, f"table version {config.version} is not log-compacted by hoodied"
    return _needs_log_compaction(TimelineCounts.of(timeline), settings)


def _needs_log_compaction(counts: TimelineCounts, settings: LogCompactionSettings) -> tuple[bool, str]:
    deltas = counts.count(Action.DELTA_COMMIT)
    if not deltas:
        return False, "no delta commits on the timeline"
    threshold = settings.blocks_threshold
    return True, f"{deltas} delta commits on the timeline (log block threshold {threshold})"


def log_compaction_due(timeline: Timeline, settings: LogCompactionSettings) -> str | None:
    """Why a log compaction should be planned now (merge-on-read, no log compaction or compaction
    pending, ``needs_log_compaction``), or ``None``."""
    return log_compaction_due_counts(TimelineCounts.of(timeline), settings)


def log_compaction_due_counts(counts: TimelineCounts, settings: LogCompactionSettings) -> str | None:
    """``log_compaction_due`` on the timeline's counts (the daemon's names-only poll)."""
    config = counts.config
    if not config.is_mor or counts.has_pending((Action.LOG_COMPACTION, Action.COMPACTION)):
        return None
    if not settings.enabled or config.version < 8:
        return None
    due, why = _needs_log_compaction(counts, settings)
    return why if due else None


# ---------------------------------------------------------------------------- eligibility


def _eligible_logs(s: FileSlice, instant_time: str) -> list[LogFile]:
    logs = [lf for lf in s.log_files if lf.completion_time is not None and lf.completion_time < instant_time]
    return sorted(logs, key=LogFile.sort_key)


def slice_block_count(storage: Storage, s: FileSlice, commits: CommitState) -> int:
    """The log blocks a read of ``s`` merges (after earlier log compactions are applied).

    The blocks one log compaction wrote (a data block and a delete block with the same
    ``INSTANT_TIME``) count as one: otherwise a slice that is exactly one log compaction's output
    would reach a threshold of 2 again and be log-compacted over and over without new data.
    """
    seen_compactions: set[str | None] = set()
    count = 0
    for b in scan_log_blocks(storage, s, commits):
        if b.compacted_block_times:
            if b.instant_time in seen_compactions:
                continue
            seen_compactions.add(b.instant_time)
        count += 1
    return count


def plan_log_compaction(
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    files_by_partition: FilesByPartition,
    instant_time: str,
    settings: LogCompactionSettings | None = None,
) -> LogCompactionPlanResult:
    """The log compaction plan for an instant at ``instant_time`` (nothing is written here)."""
    settings = settings or LogCompactionSettings()
    result = LogCompactionPlanResult(None, "", instant_time)
    if not any(i.action is Action.DELTA_COMMIT for i in timeline.instants):
        result.reason = "no delta commits on the timeline"
        return result
    view = FileSystemView.build(files_by_partition, timeline, config)
    commits = CommitState(timeline, config)
    ops: list[dict[str, Any]] = []
    for group in view.file_groups():
        if group.pending_compaction or group.pending_log_compaction or group.pending_clustering:
            result.skipped_pending.append((group.partition, group.file_id))
            continue
        s = group.latest_slice
        logs = _eligible_logs(s, instant_time) if s is not None else []
        if s is None or not logs:
            continue
        eligible = FileSlice(s.partition, s.file_id, s.base_instant, None, logs)
        count = slice_block_count(storage, eligible, commits)
        result.blocks[(s.partition, s.file_id)] = count
        if count < settings.blocks_threshold:
            continue
        base_size = s.base_file.size if s.base_file is not None else 0
        ops.append(compaction_operation(
            s.partition, s.file_id, s.base_instant,
            s.base_file.file_name if s.base_file is not None else None, base_size,
            [(lf.file_name, lf.size) for lf in logs], base_size if base_size > 0 else _MAX_FILE_SIZE,
        ))
    threshold = f"hoodie.log.compaction.blocks.threshold={settings.blocks_threshold}"
    if not ops:
        most = max(result.blocks.values(), default=0)
        result.reason = f"no file slice has {threshold} log blocks (most: {most})"
        if result.skipped_pending:
            result.reason += f"; {len(result.skipped_pending)} file groups have pending table services"
        return result
    result.plan = {
        "operations": ops,
        "extraMetadata": {},
        "version": _PLAN_VERSION,
        "strategy": {"compactorClassName": LOG_COMPACTION_COMPACTOR, "strategyParams": {}},
        "preserveHoodieMetadata": True,
        "missingSchedulePartitions": [],
    }
    result.reason = f"{len(ops)} of {len(result.blocks)} file slices with log files reach {threshold}"
    log.info("log compaction plan %s: %s", instant_time, result.summary())
    return result


def schedule_log_compaction(
    storage: Storage,
    lock: TableLock,
    settings: LogCompactionSettings | None = None,
    *,
    dry_run: bool = False,
    time_settings: TimeSettings | None = None,
) -> tuple[Instant | None, LogCompactionPlanResult]:
    """Plan under the table lock and write ``<T>.logcompaction.requested`` (unless ``dry_run``).

    ``T`` is a TrueTime instant taken under the lock, later than everything on the timeline;
    the plan is made from the timeline and listing read under the same lock. Returns the
    requested instant (``None`` when nothing is due or on a dry run) and the plan result.
    """
    config = load_table_config(storage)
    require_log_compaction_supported(storage, config)
    with lock:
        timeline = Timeline.load(storage, config)
        writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
        instant_time = writer.new_instant_time()
        result = plan_log_compaction(storage, config, timeline, list_storage(storage, config),
                                     instant_time, settings)
        if result.plan is None or dry_run:
            return None, result
        instant = writer.create_requested(Action.LOG_COMPACTION, instant_time, result.plan)
        if instant.state is not State.REQUESTED:  # someone wrote this time already: never with TrueTime
            raise InstantStateError(f"{instant_time}: log compaction instant already {instant.state.value}")
        return instant, result
