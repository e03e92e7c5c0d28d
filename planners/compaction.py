"""The compaction planner: when a merge-on-read table needs compacting, and which file slices.

Trigger (``hoodie.compact.inline.trigger.strategy``), as Hudi's
``ScheduleCompactionActionExecutor.needCompact`` decides it. The reference point is the last
completed compaction (a ``commit`` on the timeline; table version 6 also counts
``replacecommit``, as 0.x's commit timeline did); without one, the first delta commit.

- ``NUM_COMMITS`` (default): at least ``hoodie.compact.inline.max.delta.commits`` (5) delta
  commits (any state, as Hudi counts them) after the reference point;
- ``NUM_COMMITS_AFTER_LAST_REQUEST``: the same, counted after the last compaction requested;
- ``TIME_ELAPSED``: at least ``hoodie.compact.inline.max.delta.seconds`` (3600) between the
  reference point and the new compaction instant;
- ``NUM_AND_TIME`` / ``NUM_OR_TIME``: both / either.

Eligibility (``BaseHoodieCompactionPlanGenerator``): the latest file slice of every file group
that is not replaced and has no pending compaction, log compaction or clustering; of its log
files only those whose delta commit completed before the compaction instant (table versions
8 and 9: completion time < instant; pending log files are never taken). Table version 6
names log files after the slice's base instant, so a log file written by a delta commit that
is still running would be orphaned by the new slice: as Hudi 0.x requires, the compaction
instant must be earlier than every pending write and later than every completed one, i.e.
no plan while a write is pending. Slices without log files are not compacted.

Strategy (``hoodie.compaction.strategy``): ``LogFileSizeBasedCompactionStrategy`` (default)
drops slices whose log files are smaller than ``hoodie.compaction.logfile.size.threshold``,
orders the rest by total log size, largest first, and takes them while the IO budget
``hoodie.compaction.target.io`` (MB, default 512000) lasts (the operation that exhausts it is
still taken, as ``BoundedIOCompactionStrategy`` does); ``BoundedIOCompactionStrategy`` keeps
the listing order under the same budget; ``UnBoundedCompactionStrategy`` takes everything.

The plan is a ``HoodieCompactionPlan`` of version 2: per operation the base instant, the log
**file names** (Hudi's log-file order), the base file name (or null), file id, relative
partition path and the metrics of ``FileSliceMetricUtils`` (``TOTAL_LOG_FILES``,
``TOTAL_LOG_FILES_SIZE`` in bytes, ``TOTAL_IO_READ_MB``, ``TOTAL_IO_WRITE_MB``, ``TOTAL_IO_MB``
in whole MB). ``schedule_compaction`` writes it as ``<T>.compaction.requested`` under the
table lock with a TrueTime instant ``T``.

Tables with a metadata table are planned when the compaction's MDT delta commit can keep every
MDT partition exact (``hoodie.metadata.commit.require_commit_maintainable``); others are refused
with nothing written.

The trigger, ``compaction_due`` (``needs_compaction`` for a compaction requested now, plus the
no-compaction-pending rule), sits beside the planner; it takes the planner's settings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from hoodied.hoodie.config_keys import HUDI_KEYS, ConfigKey, by_key
from hoodied.hoodie.errors import InstantStateError, UnsupportedTableError
from hoodied.hoodie.fsview import FilesByPartition, FileSlice, FileSystemView, LogFile, list_storage
from hoodied.hoodie.human import format_size
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.metadata.commit import COMPACT, require_commit_maintainable
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline, datetime_to_instant_time, instant_time_to_datetime
from hoodied.hoodie.timeline.compact import TimelineCounts
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from hoodied.hoodie.timeline.plans import compaction_operation
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "COMPACTION_PLAN_VERSION",
    "CompactionPlanResult",
    "CompactionSettings",
    "CompactionStrategy",
    "TriggerStrategy",
    "compaction_due",
    "compaction_due_counts",
    "needs_compaction",
    "plan_compaction",
    "schedule_compaction",
]

#: ``CompactionUtils.LATEST_COMPACTION_METADATA_VERSION``.
COMPACTION_PLAN_VERSION = 2
_STRATEGY_PACKAGE = "org.apache.hudi.table.action.compact.strategy."


class TriggerStrategy(StrEnum):
    """``hoodie.compact.inline.trigger.strategy`` (Hudi's ``CompactionTriggerStrategy``)."""

    NUM_COMMITS = "NUM_COMMITS"
    NUM_COMMITS_AFTER_LAST_REQUEST = "NUM_COMMITS_AFTER_LAST_REQUEST"
    TIME_ELAPSED = "TIME_ELAPSED"
    NUM_AND_TIME = "NUM_AND_TIME"
    NUM_OR_TIME = "NUM_OR_TIME"


class CompactionStrategy(StrEnum):
    """``hoodie.compaction.strategy``: the strategies hoodied implements (full Hudi class names)."""

    LOG_FILE_SIZE = _STRATEGY_PACKAGE + "LogFileSizeBasedCompactionStrategy"
    BOUNDED_IO = _STRATEGY_PACKAGE + "BoundedIOCompactionStrategy"
    UNBOUNDED = _STRATEGY_PACKAGE + "UnBoundedCompactionStrategy"

    @classmethod
    def parse(cls, value: str) -> CompactionStrategy:
        """A full class name or the simple one (``UnBoundedCompactionStrategy``)."""
        for member in cls:
            if value in (member.value, member.value.rsplit(".", 1)[-1]):
                return member
        known = ", ".join(m.value.rsplit(".", 1)[-1] for m in cls)
        raise ValueError(f"hoodie.compaction.strategy={value}: not supported (hoodied implements {known})")


#: Hudi key -> settings field (each key also read under its alternatives, ``config_keys.by_key``).
_KEYS: dict[ConfigKey, str] = {
    HUDI_KEYS.INLINE_COMPACT_TRIGGER_STRATEGY: "trigger",
    HUDI_KEYS.INLINE_COMPACT_NUM_DELTA_COMMITS: "max_delta_commits",
    HUDI_KEYS.INLINE_COMPACT_TIME_DELTA_SECONDS: "max_delta_seconds",
    HUDI_KEYS.COMPACTION_STRATEGY: "strategy",
    HUDI_KEYS.TARGET_IO_PER_COMPACTION_IN_MB: "target_io_mb",
    HUDI_KEYS.COMPACTION_LOG_FILE_SIZE_THRESHOLD: "log_file_size_threshold",
    HUDI_KEYS.PARQUET_MAX_FILE_SIZE: "max_file_size",
}
_OPTION_KEYS = {entry.key: name for entry, name in _KEYS.items()}


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """The compaction scheduler's settings, with Hudi's keys and defaults (``from_options``)."""

    trigger: TriggerStrategy = TriggerStrategy.NUM_COMMITS
    """``hoodie.compact.inline.trigger.strategy``."""
    max_delta_commits: int = 5
    """``hoodie.compact.inline.max.delta.commits``: delta commits that trigger a compaction."""
    max_delta_seconds: int = 3600
    """``hoodie.compact.inline.max.delta.seconds``: seconds since the last compaction that trigger one."""
    strategy: CompactionStrategy = CompactionStrategy.LOG_FILE_SIZE
    """``hoodie.compaction.strategy``."""
    target_io_mb: int = 512_000
    """``hoodie.compaction.target.io``: IO budget of one plan in MB (read + write)."""
    log_file_size_threshold: int = 0
    """``hoodie.compaction.logfile.size.threshold``: bytes of log files below which a slice waits."""
    max_file_size: int = 125_829_120
    """``hoodie.parquet.max.file.size``: the write estimate of a slice without a base file (bytes)."""

    def __post_init__(self) -> None:
        if self.max_delta_commits < 1 or self.max_delta_seconds < 0:
            raise ValueError("hoodie.compact.inline.max.delta.commits must be >= 1 and .seconds >= 0")
        if self.target_io_mb < 0 or self.log_file_size_threshold < 0 or self.max_file_size < 0:
            raise ValueError("compaction IO budget, log size threshold and max file size must be >= 0")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> CompactionSettings:
        """Settings from Hudi option keys; unknown keys and bad values raise ``ValueError``."""
        values: dict[str, Any] = {}
        for key, raw in by_key(options, _KEYS).items():
            name = _OPTION_KEYS.get(key)
            if name is None:
                known = ", ".join(sorted(_OPTION_KEYS))
                raise ValueError(f"{key}: not a compaction option (known: {known})")
            text = str(raw).strip()
            try:
                if name == "trigger":
                    values[name] = TriggerStrategy(text.upper())
                elif name == "strategy":
                    values[name] = CompactionStrategy.parse(text)
                else:
                    values[name] = int(text)
            except ValueError as exc:
                if name == "strategy":
                    raise
                raise ValueError(f"{key}={raw}: not a valid value ({exc})") from None
        return replace(cls(), **values)

    def options(self) -> dict[str, str]:
        """The settings as Hudi option keys (for logs and summaries)."""
        by_field = {v: k for k, v in _OPTION_KEYS.items()}
        return {by_field[f.name]: str(getattr(self, f.name)) for f in fields(self)}


@dataclass(slots=True)
class CompactionPlanResult:
    """The plan (``None`` when nothing is due) and why."""

    plan: dict[str, Any] | None
    reason: str
    instant_time: str
    candidates: int = 0
    """File slices with log files that could be compacted, before the strategy chose."""
    skipped_pending: list[tuple[str, str]] = field(default_factory=list)
    """(partition, file id) left out because a compaction, log compaction or clustering is pending."""

    @property
    def operations(self) -> list[dict[str, Any]]:
        return list((self.plan or {}).get("operations") or [])

    def summary(self) -> str:
        if self.plan is None:
            return f"nothing to compact: {self.reason}"
        ops = self.operations
        logs = sum(len(op["deltaFilePaths"]) for op in ops)
        size = sum(op["metrics"]["TOTAL_LOG_FILES_SIZE"] for op in ops)
        parts = len({op["partitionPath"] for op in ops})
        return (
            f"{len(ops)} file groups in {parts} partitions, {logs} log files ({format_size(size)}); "
            f"{self.reason}"
        )


# ---------------------------------------------------------------------------- trigger


def _seconds(instant: str, config: TableConfig) -> float:
    if len(instant) == 17 and instant.isdigit():
        # what ``instant_time_to_datetime``'s strptime gives a 17-digit time, without its regex (asked
        # twice per merge-on-read table at every trigger check); an invalid date goes the long way
        try:
            return datetime(int(instant[:4]), int(instant[4:6]), int(instant[6:8]), int(instant[8:10]),
                            int(instant[10:12]), int(instant[12:14]), int(instant[14:]) * 1000,
                            tzinfo=config.tzinfo).timestamp()
        except ValueError:
            pass
    return instant_time_to_datetime(instant, config.tzinfo).timestamp()


def _deltas_since(counts: TimelineCounts, config: TableConfig, after_request: bool) -> tuple[int, str] | None:
    """(delta commits after the reference point, the reference instant) or ``None`` without any."""
    commit_actions = {Action.COMMIT, Action.COMPACTION}
    if config.version < 8:
        commit_actions.add(Action.REPLACE_COMMIT)
    if after_request:
        last = counts.latest(Action.COMPACTION)  # the last compaction in any state
    else:
        last = counts.latest_completed(commit_actions)
    if last is not None:
        return counts.count(Action.DELTA_COMMIT, last), last
    first = counts.first(Action.DELTA_COMMIT)
    if first is None:
        return None
    return counts.count(Action.DELTA_COMMIT), first


def needs_compaction(
    timeline: Timeline, config: TableConfig, settings: CompactionSettings, instant_time: str
) -> tuple[bool, str]:
    """Whether the trigger fires for a compaction at ``instant_time``, and a one-line why."""
    return _needs_compaction(TimelineCounts.of(timeline), config, settings, instant_time)


def _needs_compaction(
    counts: TimelineCounts, config: TableConfig, settings: CompactionSettings, instant_time: str
) -> tuple[bool, str]:
    trigger = settings.trigger
    info = _deltas_since(counts, config, trigger is TriggerStrategy.NUM_COMMITS_AFTER_LAST_REQUEST)
    if info is None:
        return False, "no delta commits on the timeline"
    count, since = info
    n_ok = count >= settings.max_delta_commits
    elapsed = _seconds(instant_time, config) - _seconds(since, config)
    t_ok = elapsed >= settings.max_delta_seconds
    num = f"{count} delta commits since {since} (trigger at {settings.max_delta_commits})"
    age = f"{elapsed:.0f} s since {since} (trigger at {settings.max_delta_seconds} s)"
    if trigger in (TriggerStrategy.NUM_COMMITS, TriggerStrategy.NUM_COMMITS_AFTER_LAST_REQUEST):
        return n_ok, num
    if trigger is TriggerStrategy.TIME_ELAPSED:
        return t_ok, age
    if trigger is TriggerStrategy.NUM_AND_TIME:
        return n_ok and t_ok, f"{num} and {age}"
    return n_ok or t_ok, f"{num} or {age}"


def compaction_due(timeline: Timeline, settings: CompactionSettings) -> str | None:
    """Why a compaction should be planned now (merge-on-read, none pending, the trigger fires
    for a compaction requested now), or ``None``; the timeline only, cheap enough for every poll.

    Tables with a metadata table are not excluded here: planning them reports the service as
    unsupported (``UnsupportedTableError``).
    """
    return compaction_due_counts(TimelineCounts.of(timeline), settings)


def compaction_due_counts(counts: TimelineCounts, settings: CompactionSettings) -> str | None:
    """``compaction_due`` on the timeline's counts (the daemon's names-only poll)."""
    config = counts.config
    if not config.is_mor or counts.has_pending((Action.COMPACTION,)):
        return None
    now = datetime_to_instant_time(datetime.now(UTC), config.tzinfo)
    due, why = _needs_compaction(counts, config, settings, now)
    return why if due else None


# ---------------------------------------------------------------------------- eligibility


def _v6_ordering_problem(timeline: Timeline, instant_time: str) -> str | None:
    """Hudi 0.x's rule for layout-1 tables; the reason no plan can be made, or ``None``."""
    pending = [
        i for i in timeline.pending(WRITE_ACTIONS)
        if i.action not in (Action.COMPACTION, Action.LOG_COMPACTION)
    ]
    if pending and pending[0].requested_time <= instant_time:
        first = pending[0]
        return (
            f"{first.action.value} {first.requested_time} is still pending; in table version 6 a "
            f"compaction must be scheduled before every pending write (its log files would be orphaned)"
        )
    later = [i for i in timeline.instants if i.action in WRITE_ACTIONS and i.requested_time >= instant_time
             and (i.is_completed or i.action is Action.COMPACTION)]
    if later:
        first = later[0]
        return f"{first.action.value} {first.requested_time} is not before the compaction {instant_time}"
    return None


def _eligible_logs(s: FileSlice, config: TableConfig, instant_time: str) -> list[LogFile]:
    if config.timeline_layout >= 2:
        logs = [lf for lf in s.log_files
                if lf.completion_time is not None and lf.completion_time < instant_time]
    else:
        logs = list(s.log_files)  # committed ones only (the view), pending writes refused above
    return sorted(logs, key=LogFile.sort_key)


def _operation(s: FileSlice, logs: list[LogFile], settings: CompactionSettings) -> dict[str, Any]:
    """A ``HoodieCompactionOperation`` with ``FileSliceMetricUtils`` metrics."""
    base_size = s.base_file.size if s.base_file is not None else 0
    return compaction_operation(
        s.partition, s.file_id, s.base_instant,
        s.base_file.file_name if s.base_file is not None else None, base_size,
        [(lf.file_name, lf.size) for lf in logs], base_size if base_size > 0 else settings.max_file_size,
    )


def _order_and_filter(ops: list[dict[str, Any]], settings: CompactionSettings) -> list[dict[str, Any]]:
    strategy = settings.strategy
    if strategy is CompactionStrategy.UNBOUNDED:
        return ops
    if strategy is CompactionStrategy.LOG_FILE_SIZE:
        ops = [op for op in ops if op["metrics"]["TOTAL_LOG_FILES_SIZE"] >= settings.log_file_size_threshold]
        ops = sorted(ops, key=lambda op: -int(op["metrics"]["TOTAL_LOG_FILES_SIZE"]))  # stable
    chosen: list[dict[str, Any]] = []
    remaining = settings.target_io_mb
    for op in ops:
        remaining -= int(op["metrics"]["TOTAL_IO_MB"])
        chosen.append(op)
        if remaining <= 0:
            break
    return chosen


# ---------------------------------------------------------------------------- the plan


def plan_compaction(
    config: TableConfig,
    timeline: Timeline,
    files_by_partition: FilesByPartition,
    instant_time: str,
    settings: CompactionSettings | None = None,
) -> CompactionPlanResult:
    """The compaction plan for a compaction at ``instant_time`` (nothing is written here)."""
    if not config.is_mor:
        raise UnsupportedTableError(
            f"{config.name}: compaction needs a MERGE_ON_READ table, not {config.table_type.value}"
        )
    settings = settings or CompactionSettings()
    due, why = needs_compaction(timeline, config, settings, instant_time)
    if not due:
        return CompactionPlanResult(None, f"not due: {why}", instant_time)
    if config.timeline_layout < 2:
        problem = _v6_ordering_problem(timeline, instant_time)
        if problem is not None:
            return CompactionPlanResult(None, problem, instant_time)
    view = FileSystemView.build(files_by_partition, timeline, config)
    result = CompactionPlanResult(None, "", instant_time)
    ops: list[dict[str, Any]] = []
    for group in view.file_groups():
        if group.pending_compaction or group.pending_log_compaction or group.pending_clustering:
            result.skipped_pending.append((group.partition, group.file_id))
            continue
        s = group.latest_slice
        logs = _eligible_logs(s, config, instant_time) if s is not None else []
        if s is not None and logs:
            ops.append(_operation(s, logs, settings))
    result.candidates = len(ops)
    chosen = _order_and_filter(ops, settings)
    if not chosen:
        result.reason = f"{why}, but no file slice has log files to compact"
        if result.skipped_pending:
            result.reason += f" ({len(result.skipped_pending)} file groups have pending table services)"
        return result
    result.plan = {
        "operations": chosen,
        "extraMetadata": {},
        "version": COMPACTION_PLAN_VERSION,
        "strategy": None,
        "preserveHoodieMetadata": False,
        "missingSchedulePartitions": [],
    }
    result.reason = why
    log.info("compaction plan %s: %s", instant_time, result.summary())
    return result


def schedule_compaction(
    storage: Storage,
    lock: TableLock,
    settings: CompactionSettings | None = None,
    *,
    dry_run: bool = False,
    time_settings: TimeSettings | None = None,
) -> tuple[Instant | None, CompactionPlanResult]:
    """Plan under the table lock and write ``<T>.compaction.requested`` (unless ``dry_run``).

    ``T`` is a TrueTime instant taken under the lock, later than everything on the timeline,
    and the plan is made from the timeline and listing read under the same lock. Returns the
    requested instant (``None`` when nothing is due or on a dry run) and the plan result.
    """
    config = load_table_config(storage)
    require_commit_maintainable(storage, config, COMPACT, "compaction")
    if not config.is_mor:
        raise UnsupportedTableError(
            f"{storage.base_uri}: compaction needs a MERGE_ON_READ table, not {config.table_type.value}"
        )
    with lock:
        timeline = Timeline.load(storage, config)
        writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
        instant_time = writer.new_instant_time()
        result = plan_compaction(config, timeline, list_storage(storage, config), instant_time, settings)
        if result.plan is None or dry_run:
            return None, result
        instant = writer.create_requested(Action.COMPACTION, instant_time, result.plan)
        if instant.state is not State.REQUESTED:  # someone wrote this time already: never with TrueTime
            raise InstantStateError(f"{instant_time}: compaction instant already {instant.state.value}")
        return instant, result
