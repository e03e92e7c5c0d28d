"""The clean planner: which file slices fall outside retention, as Apache Hudi's ``CleanPlanner`` decides.

Policies (``hoodie.clean.policy``):

- ``KEEP_LATEST_COMMITS`` (default, ``commits_retained`` 10): the *earliest commit to retain*
  (ECTR) is the N-th newest completed write instant, but never later than the earliest
  pending write or table service (then: the last completed instant before it). In each file
  group, slices whose base instant is older than the ECTR are deleted, except the latest
  slice and the newest slice older than the ECTR (a query as of the ECTR still reads it).
  Nothing is cleaned until more than N write instants have completed.
- ``KEEP_LATEST_BY_HOURS`` (``hours_retained`` 24): ECTR = the first completed write instant
  not older than now - hours (table timezone); then as above.
- ``KEEP_LATEST_FILE_VERSIONS`` (``file_versions_retained`` 3): keep the newest N slices of
  every file group, whatever their age.

Always: slices holding a savepointed file are kept; slices a pending compaction or log
compaction needs (base instant >= the operation's base instant) are kept, and so are the
slices a pending clustering reads; file groups replaced by a clustering or insert_overwrite
are deleted whole once the replacing instant is older than the ECTR (with
``KEEP_LATEST_FILE_VERSIONS``: at once). Files of pending writes are never touched.
Failed-write leftovers are: data files written by an instant that a completed rollback
undid and that is neither pending nor completed on the timeline (a rollback that could not
delete everything, a writer that kept writing after it was rolled back); they are planned
for deletion whatever the retention, since no reader counts them. In table version 6 only
base files can be attributed (log file names carry the slice's base instant there).

Tables with a metadata table are planned only where the clean can keep every metadata
partition exact (``hoodie.metadata.clean.require_clean_maintainable``).

Incremental planning (``hoodie.clean.incremental.enabled``, default on): with a completed
clean whose ECTR is still on the active timeline, only partitions written by instants in
[previous ECTR, new ECTR) are looked at, plus partitions of savepoints removed since.

The plan is a ``HoodieCleanerPlan`` (version 2) with full file paths. Partitions are never
planned for deletion, and no plan is made when nothing is due (a reason says why).

Beside the planner: its trigger, ``clean_due`` (``hoodie.clean.max.commits``, the timeline only,
cheap enough for every poll), and ``schedule_clean``, which plans under the table lock and writes
``<T>.clean.requested``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from hoodied.hoodie.filenames import BaseFileName, writer_instant
from hoodied.hoodie.fsview import FileGroup, FilesByPartition, FileSlice, FileSystemView, list_storage
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.metadata.clean import require_clean_maintainable
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline, datetime_to_instant_time
from hoodied.hoodie.timeline.compact import TimelineCounts
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, Instant, latest_commits_to_retain
from hoodied.hoodie.timeline.plans import ClusteringPlan, CompactionPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "CLEAN_PLAN_VERSION",
    "CleanPlanResult",
    "CleanPolicy",
    "CleanSettings",
    "clean_due",
    "clean_due_counts",
    "completed_writes_after",
    "earliest_commit_to_retain",
    "failed_write_leftovers",
    "plan_clean",
    "planned_files",
    "schedule_clean",
]

#: ``CleanPlanner.LATEST_CLEAN_PLAN_VERSION``.
CLEAN_PLAN_VERSION = 2
SAVEPOINTED_TIMESTAMPS = "savepointed_timestamps"


class CleanPolicy(StrEnum):
    KEEP_LATEST_COMMITS = "KEEP_LATEST_COMMITS"
    KEEP_LATEST_FILE_VERSIONS = "KEEP_LATEST_FILE_VERSIONS"
    KEEP_LATEST_BY_HOURS = "KEEP_LATEST_BY_HOURS"


@dataclass(frozen=True, slots=True)
class CleanSettings:
    """The cleaner's retention settings (Hudi's ``hoodie.clean.*`` keys and defaults)."""

    policy: CleanPolicy = CleanPolicy.KEEP_LATEST_COMMITS
    commits_retained: int = 10
    """``hoodie.clean.commits.retained``."""
    file_versions_retained: int = 3
    """``hoodie.clean.fileversions.retained``."""
    hours_retained: int = 24
    """``hoodie.clean.hours.retained``."""
    incremental: bool = True
    """``hoodie.clean.incremental.enabled``."""

    def __post_init__(self) -> None:
        if self.commits_retained < 1 or self.file_versions_retained < 1 or self.hours_retained < 0:
            raise ValueError("clean retention must keep at least one commit / one file version")


@dataclass(slots=True)
class CleanPlanResult:
    """The plan (``None`` when nothing is due), why, and the files it deletes (relative paths)."""

    plan: dict[str, Any] | None
    reason: str
    earliest_commit_to_retain: Instant | None = None
    files: dict[str, list[str]] = field(default_factory=dict)

    @property
    def file_count(self) -> int:
        return sum(len(v) for v in self.files.values())

    def summary(self) -> str:
        if self.plan is None:
            return f"nothing to clean: {self.reason}"
        ectr = self.earliest_commit_to_retain.requested_time if self.earliest_commit_to_retain else "-"
        return (
            f"{self.plan['policy']}: {self.file_count} files in {len(self.files)} partitions, "
            f"earliest commit to retain {ectr}"
        )


# ---------------------------------------------------------------------------- earliest commit to retain


def _writes(timeline: Timeline) -> list[Instant]:
    """The commits-and-compaction timeline: every write instant, completed or pending, by requested time."""
    return [i for i in timeline.instants if i.action in WRITE_ACTIONS and not timeline.is_archived(i)]


def earliest_commit_to_retain(
    timeline: Timeline, settings: CleanSettings, config: TableConfig, *, now: datetime | None = None
) -> Instant | None:
    """Hudi's ``CleanerUtils.getEarliestCommitToRetain`` (``None`` for KEEP_LATEST_FILE_VERSIONS)."""
    writes = _writes(timeline)
    completed = [i for i in writes if i.is_completed]
    if settings.policy is CleanPolicy.KEEP_LATEST_COMMITS:
        return latest_commits_to_retain(writes, settings.commits_retained)
    if settings.policy is CleanPolicy.KEEP_LATEST_BY_HOURS:
        tz = config.tzinfo
        moment = (now or datetime.now(tz)) - timedelta(hours=settings.hours_retained)
        cutoff = datetime_to_instant_time(moment.astimezone(tz), tz)
        return next((i for i in completed if i.requested_time >= cutoff), None)
    return None


# ---------------------------------------------------------------------------- protected slices


def _savepointed_files(timeline: Timeline) -> tuple[set[str], list[str]]:
    """File names kept by completed savepoints, and the savepoint times."""
    names: set[str] = set()
    times: list[str] = []
    for inst in timeline.completed((Action.SAVEPOINT,)):
        times.append(inst.requested_time)
        md = timeline.read_commit_metadata(inst)
        for part in (md.get("partitionMetadata") or {}).values():
            names.update(str(n).rsplit("/", 1)[-1] for n in (part or {}).get("savepointDataFile") or ())
    return names, times


def _pending_needs(timeline: Timeline) -> dict[tuple[str, str], str | None]:
    """(partition, file id) -> oldest base instant a pending compaction / log compaction / clustering
    still needs (``None``: every slice of the group is needed)."""
    needs: dict[tuple[str, str], str | None] = {}

    def need(key: tuple[str, str], base: str | None) -> None:
        if key in needs and (needs[key] is None or (base is not None and needs[key] <= base)):  # type: ignore[operator]
            return
        needs[key] = base

    for inst in timeline.pending():
        plan = timeline.plan(inst) if inst.action in (
            Action.COMPACTION, Action.LOG_COMPACTION, Action.CLUSTERING, Action.REPLACE_COMMIT
        ) else None
        if isinstance(plan, CompactionPlan):
            for op in plan.operations:
                need((op.partition_path, op.file_id), op.base_instant_time)
        elif isinstance(plan, ClusteringPlan):
            for group in plan.input_groups:
                for s in group.slices:
                    base = _instant_of(s.data_file_path) if s.data_file_path else None
                    need((s.partition_path, s.file_id), base)
    return needs


def _instant_of(path: str) -> str | None:
    parsed = BaseFileName.parse(path.rsplit("/", 1)[-1])
    return parsed.instant_time if parsed is not None else None


def _slice_files(s: FileSlice) -> list[str]:
    return s.paths()


def _is_savepointed(s: FileSlice, savepointed: set[str]) -> bool:
    return any(p.rsplit("/", 1)[-1] in savepointed for p in s.paths())


# ---------------------------------------------------------------------------- per policy


def _by_commits(
    group: FileGroup, ectr: str, savepointed: set[str], needed_from: str | None, needed: bool
) -> list[str]:
    slices = [s for s in reversed(group.slices) if not s.is_empty]  # newest first, as Hudi iterates
    if not slices:
        return []
    last_version = slices[0].base_instant
    before_ectr = next((s.base_instant for s in slices if s.base_instant < ectr), None)
    out: list[str] = []
    for s in slices:
        if _is_savepointed(s, savepointed) or s.base_instant in (last_version, before_ectr):
            continue
        if needed and (needed_from is None or s.base_instant >= needed_from):
            continue
        if s.base_instant < ectr:
            out.extend(_slice_files(s))
    return out


def _by_versions(
    group: FileGroup, keep: int, savepointed: set[str], needed_from: str | None, needed: bool
) -> list[str]:
    slices = [s for s in reversed(group.slices) if not s.is_empty]
    if needed:
        slices = [s for s in slices if not (needed_from is None or s.base_instant >= needed_from)]
        keep -= 1  # the slice the pending service needs counts as a kept version
    out: list[str] = []
    for s in slices[max(keep, 0):]:
        if not _is_savepointed(s, savepointed):
            out.extend(_slice_files(s))
    return out


# ---------------------------------------------------------------------------- partitions


def _partitions_of(timeline: Timeline, inst: Instant) -> set[str]:
    md = timeline.read_commit_metadata(inst)
    parts = set((md.get("partitionToWriteStats") or {}).keys())
    parts.update((md.get("partitionToReplaceFileIds") or {}).keys())
    return {str(p) for p in parts}


def _partitions_to_clean(
    timeline: Timeline, settings: CleanSettings, ectr: Instant | None, all_partitions: Iterable[str],
    savepoint_times: list[str],
) -> tuple[list[str], str]:
    every = sorted(set(all_partitions))
    if settings.policy is CleanPolicy.KEEP_LATEST_FILE_VERSIONS or not settings.incremental or ectr is None:
        return every, "full"
    last_clean = timeline.latest_completed((Action.CLEAN,))
    if last_clean is None:
        return every, "full"
    md = timeline.read_commit_metadata(last_clean)
    previous = str(md.get("earliestCommitToRetain") or "")
    writes = [i for i in _writes(timeline) if i.is_completed]
    if not previous or not writes or previous < writes[0].requested_time:
        return every, "full"  # the previous boundary was archived: look everywhere
    parts: set[str] = set()
    for inst in writes:
        if previous <= inst.requested_time < ectr.requested_time:
            parts |= _partitions_of(timeline, inst)
    extra = md.get("extraMetadata") or {}
    old_savepoints = [t for t in str(extra.get(SAVEPOINTED_TIMESTAMPS) or "").split(",") if t]
    for t in set(old_savepoints) - set(savepoint_times):
        savepointed = timeline.get(t)
        if savepointed is not None and savepointed.is_completed and savepointed.action in WRITE_ACTIONS:
            parts |= _partitions_of(timeline, savepointed)
    return sorted(p for p in parts if p in set(every)), f"incremental since {previous}"


# ---------------------------------------------------------------------------- the plan


def plan_clean(
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    files_by_partition: FilesByPartition,
    settings: CleanSettings | None = None,
    *,
    now: datetime | None = None,
) -> CleanPlanResult:
    """Plan a clean of the table as it is now (the caller holds the lock and writes the plan).

    Tables whose metadata table a clean cannot keep exact are refused (``UnsupportedTableError``),
    exactly as ``executors.clean`` refuses to execute a clean there: both use
    ``hoodie.metadata.clean.require_clean_maintainable``.
    """
    require_clean_maintainable(storage, config, "clean")
    settings = settings or CleanSettings()
    pending_clean = timeline.pending((Action.CLEAN,))
    if pending_clean:
        t = pending_clean[0].requested_time
        return CleanPlanResult(None, f"clean {t} is still pending; run it first")
    completed_writes = [i for i in _writes(timeline) if i.is_completed]
    ectr = earliest_commit_to_retain(timeline, settings, config, now=now)
    by_commits = settings.policy is not CleanPolicy.KEEP_LATEST_FILE_VERSIONS
    listing = {p: list(v) for p, v in files_by_partition.items()}
    savepointed, savepoint_times = _savepointed_files(timeline)
    leftovers = failed_write_leftovers(timeline, config, listing, savepointed)
    if by_commits and ectr is None and not leftovers:
        if settings.policy is CleanPolicy.KEEP_LATEST_COMMITS:
            why = (f"{len(completed_writes)} completed write instants, not more than the "
                   f"{settings.commits_retained} retained")
        else:
            why = f"no completed write instant in the last {settings.hours_retained} hours"
        return CleanPlanResult(None, why)

    partitions, mode = _partitions_to_clean(timeline, settings, ectr, listing.keys(), savepoint_times)
    if by_commits and ectr is None:
        partitions, mode = [], "failed-write leftovers only"
    view = FileSystemView.build({p: listing[p] for p in partitions}, timeline, config)
    needs = _pending_needs(timeline)

    files: dict[str, list[str]] = {}
    for group in view.file_groups(include_replaced=True):
        key = (group.partition, group.file_id)
        if group.replaced_by is not None:
            if by_commits and not (ectr is not None and group.replaced_by < ectr.requested_time):
                continue
            doomed = [p for s in group.slices if not _is_savepointed(s, savepointed) for p in s.paths()]
        elif by_commits:
            assert ectr is not None
            doomed = _by_commits(group, ectr.requested_time, savepointed, needs.get(key), key in needs)
        else:
            doomed = _by_versions(group, settings.file_versions_retained, savepointed, needs.get(key),
                                  key in needs)
        if doomed:
            files.setdefault(group.partition, []).extend(doomed)
    for partition, rels in leftovers.items():
        planned = set(files.get(partition, ()))
        files.setdefault(partition, []).extend(r for r in rels if r not in planned)

    if not files:
        return CleanPlanResult(None, f"no file slice outside retention ({mode})", ectr)
    last = completed_writes[-1].requested_time if completed_writes else ""
    base = storage.base_uri.rstrip("/")
    plan: dict[str, Any] = {
        "earliestInstantToRetain": (
            {"timestamp": ectr.requested_time, "action": ectr.file_action.value, "state": "COMPLETED"}
            if ectr is not None else None
        ),
        "lastCompletedCommitTimestamp": last,
        "policy": settings.policy.value,
        "filesToBeDeletedPerPartition": {},
        "version": CLEAN_PLAN_VERSION,
        "filePathsToBeDeletedPerPartition": {
            p: [{"filePath": f"{base}/{rel}", "isBootstrapBaseFile": False} for rel in sorted(rels)]
            for p, rels in sorted(files.items())
        },
        "partitionsToBeDeleted": [],
        "extraMetadata": {SAVEPOINTED_TIMESTAMPS: ",".join(savepoint_times)} if savepoint_times else {},
    }
    log.info("clean plan (%s): %d files in %d partitions", mode, sum(map(len, files.values())), len(files))
    return CleanPlanResult(plan, mode, ectr, {p: sorted(v) for p, v in files.items()})


def failed_write_leftovers(
    timeline: Timeline, config: TableConfig, listing: FilesByPartition, savepointed: set[str]
) -> dict[str, list[str]]:
    """Relative paths of data files whose writer a completed rollback undid, per partition."""
    rolled_back = timeline.rolled_back_instants()
    if not rolled_back:
        return {}
    on_timeline = {i.requested_time for i in timeline.instants}
    undone = rolled_back - on_timeline
    out: dict[str, list[str]] = {}
    for partition, files in listing.items():
        for name, _size in files:
            writer = writer_instant(name, config.version)
            if writer in undone and name not in savepointed:
                out.setdefault(partition, []).append(f"{partition}/{name}" if partition else name)
    return out


def planned_files(plan: Mapping[str, Any]) -> list[str]:
    """Full paths a ``HoodieCleanerPlan`` deletes (v2 field, falling back to the deprecated v1 one)."""
    out: list[str] = []
    for infos in (plan.get("filePathsToBeDeletedPerPartition") or {}).values():
        out.extend(str(i.get("filePath")) for i in infos or () if i.get("filePath"))
    if not out:
        for names in (plan.get("filesToBeDeletedPerPartition") or {}).values():
            out.extend(str(n) for n in names or ())
    return out


# ---------------------------------------------------------------------------- trigger and scheduling


def completed_writes_after(timeline: Timeline, last: Instant | None) -> int:
    """Completed instants of Hudi's commits timeline requested after ``last`` (all of them without one)."""
    since = last.requested_time if last is not None else ""
    return sum(
        1 for i in timeline.instants
        if i.is_completed and i.action in WRITE_ACTIONS and i.requested_time > since
    )


def clean_due(timeline: Timeline, trigger_commits: int) -> str | None:
    """``hoodie.clean.max.commits``: why a clean should be planned now (enough completed writes
    since the last completed clean, none pending), or ``None``."""
    return clean_due_counts(TimelineCounts.of(timeline), trigger_commits)


def clean_due_counts(counts: TimelineCounts, trigger_commits: int) -> str | None:
    """``clean_due`` on the timeline's counts (the daemon's names-only poll)."""
    if counts.has_pending((Action.CLEAN,)):
        return None
    writes = counts.completed_after(WRITE_ACTIONS, counts.latest_completed((Action.CLEAN,)) or "")
    if writes < trigger_commits:
        return None
    return f"{writes} completed writes since the last clean (trigger {trigger_commits})"


def schedule_clean(
    storage: Storage,
    lock: TableLock,
    settings: CleanSettings | None = None,
    *,
    dry_run: bool = False,
    time_settings: TimeSettings | None = None,
) -> tuple[Instant | None, CleanPlanResult]:
    """Plan a clean under the table lock and write ``<T>.clean.requested`` (unless ``dry_run``).

    Returns the new instant (``None`` when nothing is due or on a dry run) and the plan result.
    A clean already pending blocks a new one, so two schedulers racing for the lock produce
    exactly one plan.
    """
    config = load_table_config(storage)
    require_clean_maintainable(storage, config, "clean")
    with lock:
        timeline = Timeline.load(storage, config)
        result = plan_clean(storage, config, timeline, list_storage(storage, config), settings)
        if result.plan is None or dry_run:
            return None, result
        writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
        return writer.schedule(Action.CLEAN, result.plan), result
