"""Executing a rollback plan: delete the listed files, complete the rollback, reset the target.

Works on any ``HoodieRollbackPlan`` on the timeline, whoever wrote it (hoodied's planner or
Apache Hudi). Plans with ``logBlocksToBeDeleted`` (table version 6 merge-on-read appends) get
their rollback command blocks written after the file deletions
(``hoodie.rollback_files.write_rollback_blocks``, as Hudi 0.14/0.15's ``BaseRollbackHelper``);
in table versions 8+ such a plan is refused before anything is touched.

On a table with a metadata table (versions 8 and 9), the rollback R of instant T rolls back
the MDT delta commit T with an MDT rollback at the same instant time R, after the data files
are deleted and before R completes, as Hudi 1.x does in ``finishRollback``
(``hoodie.metadata.rollback``); no MDT delta commit is written for R. When the MDT has no T (the
attempt failed before its MDT write) the MDT is left alone. An MDT delta commit T already
folded into an MDT compaction is refused before anything is written (Hudi asks for a restore).

Every step can be re-run after a crash: the inflight transition and completion are no-ops
when done, and deleting a file that is already gone counts as deleted; a completed MDT
rollback R is not redone, a pending one is finished.

Test hook: with ``HOODIED_TEST_PAUSE_AT`` set to one of ``PAUSE_POINTS`` the executor writes
the file named by ``HOODIED_TEST_PAUSE_READY`` when it reaches that point and sleeps
(``HOODIED_TEST_PAUSE_S``, default 60 s), so a test can kill it there with SIGKILL. When the target is a
table service (compaction, log compaction, clustering), its inflight file is removed after
the rollback completes, with its markers and heartbeat, so it can be re-executed from its
unchanged plan.

When the target is a data write (a commit, delta commit or replace commit that is not a
clustering: a failed write, ``planners.failed_writes``), the target instant itself goes, as
Hudi's ``BaseRollbackActionExecutor.finishRollback`` with ``deleteInstants`` does it: after the
MDT rollback and before R completes, T's inflight file then its requested file are deleted
(``deleteInflightAndRequestedInstant``; crash point ``target-deleted``); after R completes its
markers (``quietDeleteMarkerDir``) and its heartbeat (``HeartbeatUtils.deleteHeartbeatFile``)
go. A data-write target found completed before R started is refused with nothing written.

A pending clustering target goes the same way, instead of being requested again, when it can never
run: it was only requested when R started (``service.operations`` rolls back a requested plan only to
remove it: ``unschedule``, or a plan that lost a write conflict), or a write completed since it was
planned touched its file groups (``hoodie.actions.clustering.conflicting_writes``). Hudi's writer
ends such a clustering so (``hoodie.clustering.rollback.pending.replacecommit.on.conflict``: its
rollback with ``deleteInstants``), and the next planning pass may take its file groups again. Both
facts are read from the table when R runs, so a rerun after a crash decides the same.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.actions.clustering import conflicting_writes
from hoodied.hoodie.actions.services import TableService, service_of
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError
from hoodied.hoodie.heartbeat import delete_heartbeat
from hoodied.hoodie.markers import WriteMarkers
from hoodied.hoodie.metadata.rollback import check_data_rollback, rollback_mdt_for_data_rollback
from hoodied.hoodie.rollback_files import delete_planned_files, rollback_metadata, write_rollback_blocks
from hoodied.hoodie.temp_files import remove_leftover_temps
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.plans import ClusteringPlan
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = ["PAUSE_POINTS", "RollbackResult", "execute_rollback"]

#: Where the test hook can stop the executor (in this order).
PAUSE_POINTS = ("inflight", "deletes-done", "mdt-rollback-inflight", "mdt-rollback-deletes-done",
                "mdt-done", "target-deleted", "completed")
#: A data write's target is a pending instant of one of these that is not a clustering.
_DATA_WRITE_ACTIONS = (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT)



@dataclass(slots=True)
class RollbackResult:
    rollback: Instant
    target_time: str
    target_action: str
    deleted: list[str] = field(default_factory=list)
    already_gone: list[str] = field(default_factory=list)
    target_deleted: bool = False
    """The target was a data write: its instant is gone from the timeline (not requested again)."""
    temp_files_removed: list[str] = field(default_factory=list)
    """Temp files of the target's data files, left by its killed writer."""

    def summary(self) -> str:
        gone = f" ({len(self.already_gone)} already gone)" if self.already_gone else ""
        after = "removed from the timeline" if self.target_deleted else "requested again"
        n = len(self.temp_files_removed)
        temps = f", {n} leftover temp files removed" if n else ""
        return (f"rolled back {self.target_action} {self.target_time} with rollback "
                f"{self.rollback.requested_time}: {len(self.deleted)} files deleted{gone}{temps}; "
                f"{self.target_action} {self.target_time} is {after}")


def _read_plan(timeline: Timeline, inst: Instant, where: str) -> dict[str, Any]:
    plan = timeline.read_plan(inst)
    if not plan:
        raise HoodieFormatError(f"{where}: rollback plan is empty")
    target = plan.get("instantToRollback") or {}
    if not target.get("commitTime"):
        raise HoodieFormatError(f"{where}: rollback plan names no instant to roll back")
    return plan


def execute_rollback(writer: TimelineWriter, rollback_time: str) -> RollbackResult:
    """Run the rollback ``rollback_time`` to completion; the caller holds the table lock."""
    storage, config = writer.storage, writer.config
    timeline = Timeline.load(storage, config)
    inst = timeline.get(rollback_time)
    if inst is None or inst.action is not Action.ROLLBACK:
        raise InstantStateError(f"{rollback_time}: no rollback instant with this time on the timeline")
    where = timeline.state_file(inst, State.REQUESTED) if not inst.is_completed else rollback_time
    plan = _read_plan(timeline, inst, where)
    target = plan["instantToRollback"]
    result = RollbackResult(inst, str(target["commitTime"]), str(target.get("action") or ""))
    reset = _action_to_reset(timeline, result)
    data_write = reset is None and result.target_action in {a.value for a in _DATA_WRITE_ACTIONS}
    if not data_write and not inst.is_completed and _drops_clustering(timeline, result.target_time):
        data_write, reset = True, None  # removed as a failed write is (the module docstring)
    if not inst.is_completed:
        if data_write:
            _require_pending(timeline, result)
        check_data_rollback(storage, config, result.target_time)
        started = time.monotonic()
        writer.transition_to_inflight(rollback_time, Action.ROLLBACK)
        crash_point("inflight")
        v6 = config.version < 8
        files = delete_planned_files(storage, writer.lock, plan, where, with_log_blocks=v6)
        if v6:
            write_rollback_blocks(storage, writer.lock, plan, rollback_time, where, files)
        result.deleted, result.already_gone = files.deleted, files.already_gone
        # the temps of files the attempt was writing when it died (hoodie.temp_files)
        result.temp_files_removed = remove_leftover_temps(storage, min_age_s=0,
                                                          instant_time=result.target_time)
        crash_point("deletes-done")
        rollback_mdt_for_data_rollback(
            storage, config, writer.lock, result.target_time, rollback_time,
            truetime=writer.truetime, pause=crash_point,
        )
        crash_point("mdt-done")
        if data_write:
            _delete_target_instant(writer, result)
            crash_point("target-deleted")
        metadata = rollback_metadata(rollback_time, result.target_time, result.target_action, started, files)
        result.rollback = writer.complete(rollback_time, Action.ROLLBACK, metadata)
        crash_point("completed")
    if data_write:
        _forget_data_write(writer, result)
        result.target_deleted = True
    else:
        _reset_target(writer, result, reset)
    return result


def _drops_clustering(timeline: Timeline, target_time: str) -> bool:
    """Whether the rollback removes the pending clustering ``target_time`` instead of requesting it
    again: it was never started (a rollback of a requested plan is its removal), or a write
    completed since it was planned touched its file groups, so it can never complete."""
    target = timeline.get(target_time)
    if target is None or not target.is_pending or not timeline.is_clustering(target):
        return False
    if target.state is State.REQUESTED:
        return True
    plan = timeline.plan(target)
    return isinstance(plan, ClusteringPlan) and bool(conflicting_writes(timeline, target, plan))


def _require_pending(timeline: Timeline, result: RollbackResult) -> None:
    """A data write completed since its rollback was planned is not undone (nothing written yet)."""
    target = timeline.get(result.target_time)
    if target is not None and target.is_completed:
        raise InstantStateError(
            f"{result.rollback.requested_time}: its target {result.target_action} {result.target_time} "
            "is completed; the rollback of a failed write does not undo a completed one"
        )


def _delete_target_instant(writer: TimelineWriter, result: RollbackResult) -> None:
    """Delete the data write's inflight file, then its requested file (either may be gone already)."""
    files = writer.files(result.target_time, Action(result.target_action))
    if files.latest_state is State.COMPLETED:  # checked before R started; a late writer is not undone
        raise InstantStateError(f"{result.target_action} {result.target_time} completed during its rollback")
    for state in (State.INFLIGHT, State.REQUESTED):
        name = files.names.get(state)
        if name is not None:
            writer.lock.ensure_held()
            writer.storage.delete(writer.path(name))
            log.info("%s: deleted (%s %s rolled back)", writer.path(name), result.target_action,
                     result.target_time)


def _forget_data_write(writer: TimelineWriter, result: RollbackResult) -> None:
    """After R completed: the data write's markers and heartbeat go (safe to repeat)."""
    removed = WriteMarkers(writer.storage, result.target_time).delete_all()
    delete_heartbeat(writer.storage, result.target_time)
    log.info("%s %s: rolled back, instant deleted (%d markers removed)", result.target_action,
             result.target_time, removed)


def _action_to_reset(timeline: Timeline, result: RollbackResult) -> Action | None:
    """The target's action when it is a table service that rewrites data (``TableService.rewrites_data``)."""
    try:
        action = Action(result.target_action)
    except ValueError:  # an action hoodied does not know is no table service
        return None
    if action is Action.REPLACE_COMMIT:  # a v6 clustering, told apart by its plan
        target = timeline.get(result.target_time)
        service = service_of(timeline, target) if target is not None else None
    else:
        service = TableService.of_action(action)
    return action if service is not None and service.rewrites_data else None


def _reset_target(writer: TimelineWriter, result: RollbackResult, action: Action | None) -> None:
    """Table-service target: back to requested, markers and heartbeat gone (safe to repeat)."""
    if action is None:
        log.info("%s: target %s %s is not a table service; left as it is",
                 result.rollback.requested_time, result.target_action, result.target_time)
        return
    files = writer.files(result.target_time, action)
    if files.latest_state is State.COMPLETED:
        return  # re-executed and completed since; nothing to reset
    if files.latest_state is not None:
        writer.revert_inflight_to_requested(result.target_time, action)
    removed = WriteMarkers(writer.storage, result.target_time).delete_all()
    delete_heartbeat(writer.storage, result.target_time)
    log.info("%s %s: back to requested (%d markers removed)", action.value, result.target_time, removed)


