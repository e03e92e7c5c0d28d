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
   reading the older slice); policy ``KEEP_LATEST_COMMITS`` with 20 commits retained
   (``DEFAULT_METADATA_CLEANER_COMMITS_RETAINED``, fixed for the MDT in 1.x: the 0.x option
   ``hoodie.metadata.cleaner.commits.retained`` is gone). The earliest commit to retain (ECTR)
   is the 20th newest completed MDT write (delta commit or compaction), never later than the
   earliest pending one; in each MDT file group the slices older than the newest slice before
   the ECTR are deleted, the latest slice never, nor the slices of a group with a pending
   compaction. Completed as an MDT ``clean`` (``HoodieCleanerPlan`` / ``HoodieCleanMetadata``,
   version 2) at a new instant time;
4. compaction (``compactIfNecessary``, ``hoodie.metadata.compaction``).

Every step is re-runnable: a pending MDT compaction or clean is finished from its plan. The
caller holds the data table's lock.
"""

from __future__ import annotations

import logging
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
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, latest_commits_to_retain
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = ["MDT_COMMITS_RETAINED", "UpkeepResult", "clean_if_necessary", "compact_if_necessary", "maintain",
           "plan_mdt_clean"]

#: ``HoodieMetadataConfig.DEFAULT_METADATA_CLEANER_COMMITS_RETAINED``.
MDT_COMMITS_RETAINED = 20
#: ``cleanIfNecessary``: completed MDT instants needed after the latest MDT compaction.
_INSTANTS_AFTER_COMPACTION = 3
_WRITES = (Action.DELTA_COMMIT, Action.COMPACTION, Action.COMMIT, Action.LOG_COMPACTION,
           Action.REPLACE_COMMIT)
CLEAN_VERSION = 2


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
    """Files of the slices ``KEEP_LATEST_COMMITS`` deletes in one file group."""
    if group.pending_compaction or group.pending_log_compaction:
        return []
    slices = group.slices  # oldest first
    out: list[str] = []
    kept_one_before = False
    for s in reversed(slices[:-1]):  # the latest slice always stays
        if s.base_instant >= ectr:
            continue
        if not kept_one_before:  # a query as of the ECTR still reads this one
            kept_one_before = True
            continue
        out.extend(s.paths())
    return out


def plan_mdt_clean(storage: Storage, config: TableConfig, timeline: Timeline,
                   retained: int = MDT_COMMITS_RETAINED) -> dict[str, Any] | None:
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


def clean_if_necessary(mdt: TimelineWriter, retained: int = MDT_COMMITS_RETAINED) -> Instant | None:
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
    mdt: TimelineWriter, data: Timeline, data_config: TableConfig, *, max_deltas: int | None = None
) -> tuple[Instant | None, str]:
    """``compactIfNecessary``: (the completed MDT compaction or None, why)."""
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
    result = execute_mdt_compaction(mdt, when, data_config.version)
    return result.instant, why


def maintain(
    mdt: TimelineWriter,
    data_storage: Storage,
    data_config: TableConfig,
    *,
    max_deltas: int | None = None,
    retained: int = MDT_COMMITS_RETAINED,
) -> UpkeepResult:
    """``performTableServices`` on the MDT of a data table (see the module docstring)."""
    result = UpkeepResult()
    timeline = Timeline.load(mdt.storage, mdt.config)
    for pending in timeline.pending((Action.COMPACTION,)):
        execute_mdt_compaction(mdt, pending.requested_time, data_config.version)
        result.compactions.append(pending.requested_time)
    timeline = Timeline.load(mdt.storage, mdt.config)
    if not timeline.completed((Action.DELTA_COMMIT,)):
        return result
    clean = clean_if_necessary(mdt, retained)
    if clean is not None:
        result.cleans.append(clean.requested_time)
    data = Timeline.load(data_storage, data_config)
    done, why = compact_if_necessary(mdt, data, data_config, max_deltas=max_deltas)
    if done is not None:
        result.compactions.append(done.requested_time)
    result.why_not_compacted = "" if done is not None else why
    return result
