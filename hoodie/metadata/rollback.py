"""Metadata-table rollbacks: undoing an MDT delta commit the way Hudi 1.x does (table versions 8, 9).

Hudi never repairs the metadata table (MDT) by writing compensating records in 1.x; it rolls
the MDT delta commit back with an MDT ``rollback`` instant (``HoodieBackedTableMetadataWriter``):

- **Data-table rollback R of instant T** (``update(HoodieRollbackMetadata, R)``): when the MDT
  timeline holds a delta commit T, in any state, it is rolled back with an MDT rollback that
  has the *same* instant time R (``writeClient.rollback(T, R)``). No MDT delta commit is
  written for R itself. When the MDT has no T (the data instant failed before its MDT write)
  nothing happens on the MDT. This runs inside the data rollback's ``finishRollback``, before
  the data rollback completes.
- **Retry of MDT delta commit T** (``commitInternal``): when T is already on the MDT timeline
  (completed because the data instant failed after its MDT commit, or pending because the MDT
  write itself failed), it is rolled back first with an MDT rollback at a *new* instant time
  (``writeClient.rollback(T)``), then written again.
- **Refusal** (``validateRollback``): a *completed* MDT delta commit whose completion time is
  not after the latest completed MDT compaction cannot be rolled back (its records are in an
  MDT base file now; Hudi asks for a restore).

An MDT rollback instant, as the MDT write client writes it for a merge-on-read table of
version 8+ (``MergeOnReadRollbackActionExecutor`` with ``deleteInstants``, notes §3.7 and §4):

1. ``R.rollback.requested``: a ``HoodieRollbackPlan`` whose requests delete the files the MDT
   delta commit T wrote (log files named ``.<fileId>_T.log.*`` and base files ``*_T.hfile``,
   found by listing: v8+ log names carry their writer's instant), no ``logBlocksToBeDeleted``
   (rollback command blocks exist only in table version 6);
2. ``R.rollback.inflight``;
3. a completed T is un-published first (its completed file is removed), then the files are
   deleted, then T's inflight and requested files (deleting the instant);
4. ``R_<completion>.rollback`` with ``HoodieRollbackMetadata``.

Every step can be re-run after a crash: a pending MDT rollback that targets T is finished
rather than planned again, and files already gone count as deleted. Readers never see a half
state: T is pending (or gone) on the MDT timeline from step 3 on, and MDT readers skip pending
instants. The caller holds the data table's lock throughout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.errors import HoodieFormatError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.metadata.reader import METADATA_FOLDER, metadata_table_in_use
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.rollback_files import delete_planned_files, rollback_metadata, rollback_plan
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.truetime import TimeSettings, TrueTime
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "MdtRollbackResult",
    "check_data_rollback",
    "check_mdt_rollback",
    "latest_mdt_compaction",
    "open_mdt_timeline",
    "pending_mdt_rollback_for",
    "plan_mdt_rollback",
    "require_rollback_supported",
    "rollback_mdt_deltacommit",
    "rollback_mdt_for_data_rollback",
]

_COMPACTION_ACTIONS = (Action.COMPACTION, Action.COMMIT)

Pause = Callable[[str], None]


@dataclass(slots=True)
class MdtRollbackResult:
    """What an MDT rollback did."""

    rollback: Instant
    target_time: str
    deleted: list[str] = field(default_factory=list)  # relative to the MDT
    already_gone: list[str] = field(default_factory=list)


def require_rollback_supported(storage: Storage, config: TableConfig) -> None:
    """Refuse rollbacks on tables whose metadata table hoodied cannot roll back (before any write).

    Table versions 8 and 9 with a ``files`` partition are supported; a version-6 metadata table
    (0.x applies rollbacks as ``files`` records) or a metadata table the properties do not
    declare is refused.
    """
    why = metadata_table_in_use(storage, config)
    if why is None:
        return
    if config.version not in (8, 9):
        raise UnsupportedTableError(
            f"{storage.base_uri}: the table has a version-{config.version} metadata table ({why}); "
            "hoodied rolls back metadata-table instants of table versions 8 and 9 only (nothing was changed)"
        )
    if not config.metadata_table_available:
        raise UnsupportedTableError(
            f"{storage.base_uri}: the metadata table is not declared complete ({why}, no 'files' in "
            "hoodie.table.metadata.partitions); hoodied cannot keep it in step (nothing was changed)"
        )


def latest_mdt_compaction(timeline: Timeline) -> Instant | None:
    """The latest completed MDT compaction (a ``commit`` on the MDT timeline)."""
    return timeline.latest_completed(_COMPACTION_ACTIONS)


def check_mdt_rollback(timeline: Timeline, target: Instant) -> None:
    """Hudi's ``validateRollback``: a completed delta commit already compacted cannot be rolled back."""
    if not target.is_completed:
        return
    compaction = latest_mdt_compaction(timeline)
    if compaction is None or len(compaction.requested_time) != len(target.requested_time):
        return
    done = target.completion_time or target.requested_time
    if done <= compaction.requested_time:
        since = [i for i in timeline.completed((Action.DELTA_COMMIT,))
                 if i.requested_time > compaction.requested_time]
        raise UnsupportedTableError(
            f"{METADATA_FOLDER}: MDT delta commit {target.requested_time} (completed {done}) is "
            f"earlier than the latest MDT compaction {compaction.requested_time} ({len(since)} delta "
            "commits since), so its records are in the MDT base files; Hudi refuses this rollback "
            "too and asks for a restore (nothing was changed)"
        )


def pending_mdt_rollback_for(timeline: Timeline, target_time: str) -> Instant | None:
    """A pending MDT rollback whose plan targets ``target_time`` (finished, never re-planned)."""
    for inst in timeline.pending((Action.ROLLBACK,)):
        plan = timeline.read_plan(inst) or {}
        if (plan.get("instantToRollback") or {}).get("commitTime") == target_time:
            return inst
    return None


def _mdt_partitions(storage: Storage) -> list[str]:
    return sorted(i.name for i in storage.list("") if i.is_dir and not i.name.startswith("."))


def _files_of(storage: Storage, target_time: str) -> dict[str, list[str]]:
    """MDT files written by instant ``target_time``, by MDT partition (relative paths)."""
    out: dict[str, list[str]] = {}
    for partition in _mdt_partitions(storage):
        for info in storage.list(partition):
            if info.is_dir:
                continue
            base = BaseFileName.parse(info.name)
            log_name = LogFileName.parse(info.name) if base is None else None
            written_by = base.instant_time if base is not None else (
                log_name.instant_time if log_name is not None else None)
            if written_by == target_time:
                out.setdefault(partition, []).append(f"{partition}/{info.name}")
    return out


def plan_mdt_rollback(storage: Storage, target: Instant) -> dict[str, Any]:
    """The ``HoodieRollbackPlan`` deleting every MDT file the delta commit ``target`` wrote."""
    return rollback_plan(storage, target, _files_of(storage, target.requested_time))


def rollback_mdt_deltacommit(
    mdt: TimelineWriter,
    target_time: str,
    rollback_time: str | None = None,
    *,
    pause: Pause | None = None,
) -> MdtRollbackResult | None:
    """Roll back MDT delta commit ``target_time`` with MDT rollback ``rollback_time`` (new if None).

    Returns ``None`` when the MDT holds neither the delta commit nor a pending rollback of it.
    A pending MDT rollback of ``target_time`` is finished instead of planning a new one. The
    caller holds the data table's lock; ``mdt`` writes the MDT timeline. ``pause`` is a test
    hook called at ``mdt-rollback-inflight`` and ``mdt-rollback-deletes-done``.
    """
    storage = mdt.storage
    timeline = Timeline.load(storage, mdt.config)
    inst = pending_mdt_rollback_for(timeline, target_time)
    if inst is None:
        target = timeline.get(target_time)
        if target is None or target.action is not Action.DELTA_COMMIT:
            return None
        check_mdt_rollback(timeline, target)
        plan = plan_mdt_rollback(storage, target)
        when = rollback_time or mdt.new_instant_time()
        inst = mdt.create_requested(Action.ROLLBACK, when, plan)
        if inst.is_completed:  # this rollback time was used already: never with TrueTime
            raise InstantStateError(f"{METADATA_FOLDER}: MDT rollback {when} is already completed")
        log.info("%s: MDT rollback %s of delta commit %s planned (%d files)", METADATA_FOLDER,
                 when, target_time, sum(len(r["filesToBeDeleted"]) for r in plan["RollbackRequests"]))
        timeline = Timeline.load(storage, mdt.config)
        inst = timeline.get(when) or inst
    return _execute(mdt, timeline, inst, pause)


def _execute(
    mdt: TimelineWriter, timeline: Timeline, inst: Instant, pause: Pause | None
) -> MdtRollbackResult:
    storage = mdt.storage
    where = f"{METADATA_FOLDER}/{timeline.state_file(inst, State.REQUESTED)}"
    plan = timeline.read_plan(inst) or {}
    target_time = str((plan.get("instantToRollback") or {}).get("commitTime") or "")
    if not target_time:
        raise HoodieFormatError(f"{where}: rollback plan names no instant to roll back")
    result = MdtRollbackResult(inst, target_time)
    started = time.monotonic()
    mdt.transition_to_inflight(inst.requested_time, Action.ROLLBACK)
    # un-publish a completed target first: from here on readers skip its blocks
    _delete_instant_file(mdt, target_time, State.COMPLETED)
    if pause is not None:
        pause("mdt-rollback-inflight")
    files = delete_planned_files(storage, mdt.lock, plan, where, in_partition=True)
    result.deleted, result.already_gone = files.deleted, files.already_gone
    if pause is not None:
        pause("mdt-rollback-deletes-done")
    _delete_instant_file(mdt, target_time, State.INFLIGHT)
    _delete_instant_file(mdt, target_time, State.REQUESTED)
    metadata = rollback_metadata(inst.requested_time, target_time, Action.DELTA_COMMIT.value, started, files)
    result.rollback = mdt.complete(inst.requested_time, Action.ROLLBACK, metadata)
    log.info("%s: MDT rollback %s of delta commit %s completed (%d files deleted)", METADATA_FOLDER,
             inst.requested_time, target_time, metadata["totalFilesDeleted"])
    return result


def _delete_instant_file(mdt: TimelineWriter, requested_time: str, state: State) -> None:
    name = mdt.files(requested_time, Action.DELTA_COMMIT).names.get(state)
    if name is None:
        return
    mdt.lock.ensure_held()
    mdt.storage.delete(mdt.path(name))
    log.info("%s/%s: deleted (MDT delta commit %s rolled back)",
             METADATA_FOLDER, mdt.path(name), requested_time)


def open_mdt_timeline(
    data_storage: Storage,
    lock: TableLock,
    *,
    truetime: TrueTime | None = None,
    time_settings: TimeSettings | None = None,
) -> TimelineWriter:
    """A timeline writer of the table's metadata table (sharing the data table's lock and TrueTime)."""
    storage = data_storage.child(METADATA_FOLDER)
    config = load_table_config(storage, metadata_table=True)
    return TimelineWriter(storage, config, lock, truetime=truetime, time_settings=time_settings)


def check_data_rollback(data_storage: Storage, data_config: TableConfig, target_time: str) -> None:
    """Everything a data rollback of ``target_time`` needs from the MDT, checked before it writes."""
    require_rollback_supported(data_storage, data_config)
    if metadata_table_in_use(data_storage, data_config) is None:
        return
    storage = data_storage.child(METADATA_FOLDER)
    timeline = Timeline.load(storage, load_table_config(storage, metadata_table=True))
    if pending_mdt_rollback_for(timeline, target_time) is not None:
        return
    target = timeline.get(target_time)
    if target is not None and target.action is Action.DELTA_COMMIT:
        check_mdt_rollback(timeline, target)


def rollback_mdt_for_data_rollback(
    data_storage: Storage,
    data_config: TableConfig,
    lock: TableLock,
    target_time: str,
    rollback_time: str,
    *,
    truetime: TrueTime | None = None,
    time_settings: TimeSettings | None = None,
    pause: Pause | None = None,
) -> MdtRollbackResult | None:
    """The MDT side of data rollback ``rollback_time`` of ``target_time`` (``None``: nothing to do).

    Call it after the data files are deleted and before the data rollback completes.
    """
    require_rollback_supported(data_storage, data_config)
    if metadata_table_in_use(data_storage, data_config) is None:
        return None
    mdt = open_mdt_timeline(data_storage, lock, truetime=truetime, time_settings=time_settings)
    done = mdt.files(rollback_time, Action.ROLLBACK)
    if done.latest_state is State.COMPLETED:
        log.info("%s: MDT rollback %s already completed", METADATA_FOLDER, rollback_time)
        return None
    result = rollback_mdt_deltacommit(mdt, target_time, rollback_time, pause=pause)
    if result is None:
        log.info("%s: no MDT delta commit %s; the data rollback %s changes nothing in the MDT",
                 METADATA_FOLDER, target_time, rollback_time)
    return result
