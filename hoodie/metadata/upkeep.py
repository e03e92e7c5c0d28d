"""Metadata-table upkeep: the MDT's own table services, run as Hudi 1.x runs them.

Hudi runs them from ``HoodieBackedTableMetadataWriter.performTableServices`` when a writer of
the data table sets up its MDT writer, i.e. while its data instant is pending and before its
MDT delta commit is written. hoodied does the same: ``MetadataWriter.write_deltacommit`` calls
``maintain`` before it writes the delta commit of instant T (T pending on the data timeline,
not yet in the MDT). In Hudi's order:

1. finish pending MDT compactions (``runPendingTableServicesOperationsAndRefreshTimeline``);
2. nothing more without a completed MDT delta commit;
3. clean (``cleanIfNecessary``): only when the latest completed MDT compaction is followed by
   at least 3 completed MDT instants (a reader that started before the compaction may still be
   reading the older slice). Policy ``KEEP_LATEST_COMMITS`` with 20 commits retained (below). The
   earliest commit to retain (ECTR) is the 20th newest completed MDT write (delta commit or
   compaction), never later than the earliest pending one; in each MDT file group the slices
   older than the newest slice before the ECTR are deleted, the latest slice never, nor the slices
   of a group with a pending compaction. Completed as an MDT ``clean`` (``HoodieCleanerPlan`` /
   ``HoodieCleanMetadata``, version 2) at a new instant time;
4. compaction (``compactIfNecessary``, ``hoodie.metadata.compaction``).

The MDT cleaner's retention (``mdt_cleaner_retention``, shared with the MDT archival planner).
Hudi 1.0.x and 1.1.x (the writers of table versions 8 and 9) build the MDT writer's clean config
in ``HoodieMetadataWriteUtils.createMetadataWriteConfig`` from the data table's writer config
(HUDI-7402, merged in February 2024, before 1.0.0): the MDT cleaner takes the data table's
``hoodie.clean.policy``; ``KEEP_LATEST_COMMITS`` retains max(20, int(data
``hoodie.clean.commits.retained`` x 1.2)) commits (20 is
``HoodieMetadataConfig.DEFAULT_METADATA_CLEANER_COMMITS_RETAINED``, a constant: the 0.x key
``hoodie.metadata.cleaner.commits.retained`` has not been settable since 0.13),
``KEEP_LATEST_BY_HOURS`` ceil(data hours x 1.2) hours, ``KEEP_LATEST_FILE_VERSIONS``
ceil(data versions x 1.2) versions.

The data table's clean policy and retention are writer settings, not stored in
``hoodie.properties``, and the MDT writer that runs this upkeep is given only the data table's
``hoodie.properties``. Upkeep therefore cleans as Hudi does under Hudi's default data-table
cleaner (``HoodieCleanConfig``: ``KEEP_LATEST_COMMITS``, 10 commits retained):
``KEEP_LATEST_COMMITS`` with max(20, int(10 x 1.2)) = 20 MDT commits retained. ``retained``
overrides that number (``mdt_cleaner_retention(data commits retained).commits``). A data table
whose writers retain more than 16 commits, or clean by hours or by file versions, gets a
longer-lived or differently cleaned MDT from Hudi than from this upkeep.

Every step is re-runnable: a pending MDT compaction or clean is finished from its plan. The
caller holds the data table's lock.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.fsview import FileGroup, FileSystemView, list_storage
from hoodied.hoodie.metadata.compaction import (
    compaction_instant_time,
    deltas_since_last_compaction,
    execute_mdt_compaction,
    max_delta_commits,
    schedule_mdt_compaction,
)
from hoodied.hoodie.metadata.rollback import latest_mdt_compaction
from hoodied.hoodie.plan_files import plan_path, plan_relative_path
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.tasks import OperationRunner, run_in_process
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, latest_commits_to_retain
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "DATA_COMMITS_RETAINED",
    "DATA_FILE_VERSIONS_RETAINED",
    "DATA_HOURS_RETAINED",
    "MDT_COMMITS_RETAINED",
    "MdtCleanerRetention",
    "UpkeepResult",
    "clean_if_necessary",
    "compact_if_necessary",
    "maintain",
    "mdt_cleaner_retention",
    "plan_mdt_clean",
]

#: ``HoodieMetadataConfig.DEFAULT_METADATA_CLEANER_COMMITS_RETAINED``: the MDT cleaner's floor.
MDT_COMMITS_RETAINED = 20
#: ``HoodieCleanConfig`` defaults of the data table's cleaner: ``hoodie.clean.commits.retained``,
#: ``hoodie.clean.hours.retained``, ``hoodie.clean.fileversions.retained``.
DATA_COMMITS_RETAINED = 10
DATA_HOURS_RETAINED = 24
DATA_FILE_VERSIONS_RETAINED = 3
#: ``createMetadataWriteConfig``: the MDT keeps this much more history than the data table.
_MDT_RETENTION_FACTOR = 1.2
#: ``cleanIfNecessary``: completed MDT instants needed after the latest MDT compaction.
_INSTANTS_AFTER_COMPACTION = 3
_WRITES = (Action.DELTA_COMMIT, Action.COMPACTION, Action.COMMIT, Action.LOG_COMPACTION,
           Action.REPLACE_COMMIT)
CLEAN_VERSION = 2


@dataclass(frozen=True, slots=True)
class MdtCleanerRetention:
    """The MDT cleaner's retention for each data-table clean policy (the policy itself is the data
    table's, unchanged)."""

    commits: int
    """``KEEP_LATEST_COMMITS``: MDT commits retained."""
    hours: int
    """``KEEP_LATEST_BY_HOURS``: hours retained."""
    file_versions: int
    """``KEEP_LATEST_FILE_VERSIONS``: file versions retained."""


def mdt_cleaner_retention(
    data_commits_retained: int = DATA_COMMITS_RETAINED,
    data_hours_retained: int = DATA_HOURS_RETAINED,
    data_file_versions_retained: int = DATA_FILE_VERSIONS_RETAINED,
) -> MdtCleanerRetention:
    """The MDT cleaner's retention derived from the data table's cleaner settings, as
    ``HoodieMetadataWriteUtils.createMetadataWriteConfig`` derives it (module docstring).

    Same arithmetic as Hudi's: a product in double precision, truncated for commits (Java's
    ``(int)`` cast of ``Math.max``), rounded up for hours and file versions.
    """
    if data_commits_retained < 1 or data_hours_retained < 0 or data_file_versions_retained < 1:
        raise ValueError("data clean retention must keep at least one commit / one file version")
    return MdtCleanerRetention(
        commits=int(max(MDT_COMMITS_RETAINED, data_commits_retained * _MDT_RETENTION_FACTOR)),
        hours=math.ceil(data_hours_retained * _MDT_RETENTION_FACTOR),
        file_versions=math.ceil(data_file_versions_retained * _MDT_RETENTION_FACTOR),
    )


#: What upkeep retains: the data table's cleaner settings are not known here (module docstring).
_DEFAULT_RETAINED = mdt_cleaner_retention().commits


@dataclass(slots=True)
class UpkeepResult:
    """What one ``maintain`` call did on the MDT."""

    compactions: list[str] = field(default_factory=list)
    cleans: list[str] = field(default_factory=list)
    why_not_compacted: str = ""


# ---------------------------------------------------------------------------- clean


def _ectr(timeline: Timeline, retained: int) -> Instant | None:
    return latest_commits_to_retain([i for i in timeline.instants if i.action in _WRITES], retained)


def _doomed(group: FileGroup, ectr: str) -> list[str]:
    """Files of the slices ``KEEP_LATEST_COMMITS`` deletes in one file group.

    ``CleanPlanner.getFilesToCleanKeepingLatestCommits``: every slice based before the ECTR goes,
    except the latest slice and the newest slice based before the ECTR (a query as of the ECTR
    still reads it); these may be one and the same slice.
    """
    if group.pending_compaction or group.pending_log_compaction:
        return []
    slices = group.slices  # oldest first
    if not slices:
        return []
    latest = slices[-1].base_instant
    before_ectr = next((s.base_instant for s in reversed(slices) if s.base_instant < ectr), None)
    out: list[str] = []
    for s in slices:
        if s.base_instant >= ectr or s.base_instant in (latest, before_ectr):
            continue
        out.extend(s.paths())
    return out


def plan_mdt_clean(storage: Storage, config: TableConfig, timeline: Timeline,
                   retained: int = _DEFAULT_RETAINED) -> dict[str, Any] | None:
    """The ``HoodieCleanerPlan`` of an MDT clean (``None``: nothing outside retention)."""
    ectr = _ectr(timeline, retained)
    if ectr is None:
        return None
    view = FileSystemView.build(list_storage(storage, config), timeline, config)
    files: dict[str, list[str]] = {}
    for group in view.file_groups():
        doomed = _doomed(group, ectr.requested_time)
        if doomed:
            files.setdefault(group.partition, []).extend(doomed)
    if not files:
        return None
    completed = [i for i in timeline.completed(_WRITES)]
    return {
        "earliestInstantToRetain": {"timestamp": ectr.requested_time, "action": ectr.file_action.value,
                                    "state": "COMPLETED"},
        "lastCompletedCommitTimestamp": completed[-1].requested_time if completed else "",
        "policy": "KEEP_LATEST_COMMITS",
        "filesToBeDeletedPerPartition": {},
        "version": CLEAN_VERSION,
        "filePathsToBeDeletedPerPartition": {
            p: [{"filePath": plan_path(storage, rel), "isBootstrapBaseFile": False} for rel in sorted(rels)]
            for p, rels in sorted(files.items())
        },
        "partitionsToBeDeleted": [],
        "extraMetadata": {},
    }


def execute_mdt_clean(mdt: TimelineWriter, clean_time: str) -> Instant:
    """Run the MDT clean ``clean_time`` from its plan to ``<T>_<completion>.clean``."""
    storage = mdt.storage
    timeline = Timeline.load(storage, mdt.config)
    inst = timeline.get(clean_time)
    assert inst is not None and inst.action is Action.CLEAN
    if inst.is_completed:
        return inst
    plan = timeline.read_plan(inst) or {}
    # every planned path is resolved (and refused when outside the MDT) before the first delete
    where = f"MDT clean {clean_time}"
    planned = {
        partition: [plan_relative_path(storage, str(i["filePath"]), where, in_partition=True) for i in infos]
        for partition, infos in sorted((plan.get("filePathsToBeDeletedPerPartition") or {}).items())
    }
    started = time.monotonic()
    mdt.transition_to_inflight(clean_time, Action.CLEAN)
    crash_point("mdt-clean-inflight")
    partitions: dict[str, dict[str, Any]] = {}
    for partition, paths in planned.items():
        entry = partitions.setdefault(partition, {
            "partitionPath": partition, "policy": plan.get("policy") or "KEEP_LATEST_COMMITS",
            "deletePathPatterns": [], "successDeleteFiles": [], "failedDeleteFiles": [],
            "isPartitionDeleted": False,
        })
        for rel in paths:
            name = rel.rsplit("/", 1)[-1]
            entry["deletePathPatterns"].append(name)
            mdt.lock.ensure_held()
            (entry["successDeleteFiles"] if storage.delete(rel) else entry["failedDeleteFiles"]).append(name)
            crash_point("mdt-clean-deleted")
    ectr = plan.get("earliestInstantToRetain") or {}
    metadata = {
        "startCleanTime": clean_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": sum(len(p["successDeleteFiles"]) for p in partitions.values()),
        "earliestCommitToRetain": ectr.get("timestamp") or "",
        "lastCompletedCommitTimestamp": plan.get("lastCompletedCommitTimestamp") or "",
        "partitionMetadata": partitions,
        "version": CLEAN_VERSION,
        "bootstrapPartitionMetadata": {},
        "extraMetadata": {},
    }
    done = mdt.complete(clean_time, Action.CLEAN, metadata)
    log.info("%s: MDT clean %s completed (%d files)", storage.base_uri, clean_time,
             metadata["totalFilesDeleted"])
    return done


def clean_if_necessary(mdt: TimelineWriter, retained: int = _DEFAULT_RETAINED) -> Instant | None:
    """``cleanIfNecessary``: an MDT clean when due and something is outside retention."""
    timeline = Timeline.load(mdt.storage, mdt.config)
    for pending in timeline.pending((Action.CLEAN,)):
        return execute_mdt_clean(mdt, pending.requested_time)
    last = latest_mdt_compaction(timeline)
    if last is not None:
        after = [i for i in timeline.completed() if i.requested_time > last.requested_time]
        if len(after) < _INSTANTS_AFTER_COMPACTION:
            return None
    plan = plan_mdt_clean(mdt.storage, mdt.config, timeline, retained)
    if plan is None:
        return None
    inst = mdt.schedule(Action.CLEAN, plan)
    log.info("%s: MDT clean %s scheduled", mdt.storage.base_uri, inst.requested_time)
    return execute_mdt_clean(mdt, inst.requested_time)


# ---------------------------------------------------------------------------- compaction


def compact_if_necessary(
    mdt: TimelineWriter, data: Timeline, data_config: TableConfig, *, max_deltas: int | None = None,
    runner: OperationRunner = run_in_process,
) -> tuple[Instant | None, str]:
    """``compactIfNecessary``: (the completed MDT compaction or None, why); ``runner`` runs its
    per-file-group operations (``execute_mdt_compaction``)."""
    timeline = Timeline.load(mdt.storage, mdt.config)
    count, since = deltas_since_last_compaction(timeline)
    limit = max_delta_commits(data_config, max_deltas)
    why = f"{count} MDT delta commits since {since or 'the start'} (compaction at {limit})"
    if count < limit:
        return None, f"not due: {why}"
    when = compaction_instant_time(data, timeline, mdt.config, mdt.new_instant_time)
    if timeline.is_completed(when):
        return None, f"MDT instant {when} is already completed; compaction not repeated"
    inst = schedule_mdt_compaction(mdt, when)
    if inst is None:
        return None, f"{why}, but no MDT file slice has log files completed before {when}"
    result = execute_mdt_compaction(mdt, when, data_config.version, runner=runner)
    return result.instant, why


def maintain(
    mdt: TimelineWriter,
    data_storage: Storage,
    data_config: TableConfig,
    *,
    max_deltas: int | None = None,
    retained: int = _DEFAULT_RETAINED,
    runner: OperationRunner = run_in_process,
) -> UpkeepResult:
    """``performTableServices`` on the MDT of a data table (see the module docstring). ``runner``
    runs the MDT compactions' per-file-group operations (``hoodie.tasks``; default: this process)."""
    result = UpkeepResult()
    timeline = Timeline.load(mdt.storage, mdt.config)
    for pending in timeline.pending((Action.COMPACTION,)):
        execute_mdt_compaction(mdt, pending.requested_time, data_config.version, runner=runner)
        result.compactions.append(pending.requested_time)
    timeline = Timeline.load(mdt.storage, mdt.config)
    if not timeline.completed((Action.DELTA_COMMIT,)):
        return result
    clean = clean_if_necessary(mdt, retained)
    if clean is not None:
        result.cleans.append(clean.requested_time)
    data = Timeline.load(data_storage, data_config)
    done, why = compact_if_necessary(mdt, data, data_config, max_deltas=max_deltas, runner=runner)
    if done is not None:
        result.compactions.append(done.requested_time)
    result.why_not_compacted = "" if done is not None else why
    return result
