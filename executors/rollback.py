"""Executing a rollback plan: delete the listed files, complete the rollback, reset the target.

Works on any ``HoodieRollbackPlan`` on the timeline, whoever wrote it (hoodied's planner or
Apache Hudi), as long as it only deletes files: plans with ``logBlocksToBeDeleted`` (table
version 6 rollback command blocks) are refused before anything is touched.

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
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.actions.services import TableService, service_of
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError
from hoodied.hoodie.heartbeat import delete_heartbeat
from hoodied.hoodie.markers import WriteMarkers
from hoodied.hoodie.metadata.rollback import check_data_rollback, rollback_mdt_for_data_rollback
from hoodied.hoodie.rollback_files import delete_planned_files, rollback_metadata
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = ["PAUSE_POINTS", "RollbackResult", "execute_rollback"]

#: Where the test hook can stop the executor (in this order).
PAUSE_POINTS = ("inflight", "deletes-done", "mdt-rollback-inflight", "mdt-rollback-deletes-done",
                "mdt-done", "completed")



@dataclass(slots=True)
class RollbackResult:
    rollback: Instant
    target_time: str
    target_action: str
    deleted: list[str] = field(default_factory=list)
    already_gone: list[str] = field(default_factory=list)

    def summary(self) -> str:
        gone = f" ({len(self.already_gone)} already gone)" if self.already_gone else ""
        return (f"rolled back {self.target_action} {self.target_time} with rollback "
                f"{self.rollback.requested_time}: {len(self.deleted)} files deleted{gone}; "
                f"{self.target_action} {self.target_time} is requested again")


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
    if not inst.is_completed:
        check_data_rollback(storage, config, result.target_time)
        started = time.monotonic()
        writer.transition_to_inflight(rollback_time, Action.ROLLBACK)
        crash_point("inflight")
        files = delete_planned_files(storage, writer.lock, plan, where)
        result.deleted, result.already_gone = files.deleted, files.already_gone
        crash_point("deletes-done")
        rollback_mdt_for_data_rollback(
            storage, config, writer.lock, result.target_time, rollback_time,
            truetime=writer.truetime, pause=crash_point,
        )
        crash_point("mdt-done")
        metadata = rollback_metadata(rollback_time, result.target_time, result.target_action, started, files)
        result.rollback = writer.complete(rollback_time, Action.ROLLBACK, metadata)
        crash_point("completed")
    _reset_target(writer, result, _action_to_reset(timeline, result))
    return result


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


