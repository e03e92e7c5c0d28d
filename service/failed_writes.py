"""Use case: roll back failed data writes, as Hudi's clean does under the LAZY failed-writes policy.

- ``rollback_failed_writes``: what ``BaseHoodieTableServiceClient.clean`` runs first
  (``CleanerUtils.rollbackFailedWrites``): nothing unless the policy is ``LAZY``; then every
  pending data write whose heartbeat expired, and every pending rollback of a data write,
  newest first (``planners.failed_writes.select_failed_writes``). Each one is re-checked under
  the table lock on a timeline loaded under it (still pending, heartbeat still expired: a
  writer that came back or completed meanwhile keeps its instant), then its rollback is
  scheduled (or the pending one reused) and executed (``executors.rollback.execute_rollback``:
  the MDT delta commit first, then T's timeline files, then R completes, then markers and
  heartbeat go), one lock hold per instant.
- ``schedule_clean_after_failed_writes``: ``schedule_clean`` preceded by ``rollback_failed_writes``
  (not on a dry run), the order of Hudi's ``clean``: the plan is made on a timeline without the
  failed writes.
- ``rollback_failed_write``: ``hoodied rollback TABLE --instant T`` for a data write: the same
  checks for the one instant; a live heartbeat, a table not configured ``LAZY``, a completed
  instant are refused with nothing written.

Settings are Hudi's keys (``planners.failed_writes.FailedWritesSettings``): the table's
``hoodie.properties`` first, then the caller's options (``-o KEY=VALUE``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from hoodied.executors.rollback import RollbackResult, execute_rollback
from hoodied.hoodie.errors import HeartbeatAliveError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.heartbeat import heartbeat_times, last_heartbeat_ms
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Instant
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.clean import CleanPlanResult, CleanSettings, schedule_clean
from hoodied.planners.failed_writes import (
    FAILED_WRITES_POLICY_KEY,
    FailedWritesPolicy,
    FailedWritesSettings,
    is_data_write,
    pending_data_write_rollbacks,
    schedule_failed_write_rollback,
    select_failed_writes,
)

log = logging.getLogger(__name__)

__all__ = [
    "failed_writes_settings",
    "is_failed_write_target",
    "rollback_failed_write",
    "rollback_failed_writes",
    "schedule_clean_after_failed_writes",
]


def failed_writes_settings(
    config: TableConfig, options: Mapping[str, str] | None = None
) -> FailedWritesSettings:
    """The table's own keys (``hoodie.properties``), overridden by ``options``; ``ValueError`` on a
    bad value."""
    return FailedWritesSettings.from_options(config.props, options or {})


def is_failed_write_target(storage: Storage, instant_time: str) -> bool:
    """Whether ``instant_time`` is a pending data write, or the target of a pending rollback of one
    (so ``hoodied rollback`` takes this path rather than the table services' one)."""
    timeline = Timeline.load(storage, load_table_config(storage))
    target = timeline.get(instant_time)
    if target is not None and is_data_write(timeline, target):
        return True
    return target is None and instant_time in pending_data_write_rollbacks(timeline)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _rollback_one(
    storage: Storage,
    config: TableConfig,
    lock: TableLock,
    instant_time: str,
    settings: FailedWritesSettings,
    time_settings: TimeSettings | None,
    *,
    strict: bool,
) -> RollbackResult | None:
    """Re-check ``instant_time`` and roll it back; the caller holds ``lock``.

    ``strict`` (an operator asked for this instant): what is not a failed write raises;
    otherwise (the clean's sweep) it is logged and skipped.
    """
    timeline = Timeline.load(storage, config)
    writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
    pending = pending_data_write_rollbacks(timeline).get(instant_time)
    if pending is not None:  # its rollback already started: finish it, whatever the heartbeat
        return execute_rollback(writer, pending.requested_time)
    target = timeline.get(instant_time)
    if target is None or not is_data_write(timeline, target):
        if not strict:
            log.info("%s: no longer a pending data write, nothing to roll back", instant_time)
            return None
        if target is None:
            raise InstantStateError(f"{storage.base_uri}: no instant {instant_time} on the active timeline")
        what = "completed" if target.is_completed else "not a data write"
        raise InstantStateError(f"{instant_time}: {target.action.value} is {what}; nothing to roll back")
    beat = last_heartbeat_ms(storage, instant_time)
    if beat == 0:  # no heartbeat file: never rolled back (planners.failed_writes)
        message = (f"{instant_time}: {target.action.value} has no heartbeat file; its writer may keep none "
                   f"({FAILED_WRITES_POLICY_KEY}=EAGER) and still be alive, so hoodied does not roll it back")
        if strict:
            raise InstantStateError(message)
        log.info("%s", message)
        return None
    if _now_ms() - beat <= settings.max_gap_ms:
        message = (f"{instant_time}: {target.action.value} has a live heartbeat (last beat at {beat} ms "
                   f"since the epoch, expiry after {settings.max_gap_ms} ms); its writer is alive, not "
                   "rolled back")
        if strict:
            raise HeartbeatAliveError(message)
        log.info("%s", message)
        return None
    rollback = schedule_failed_write_rollback(writer, timeline, target)
    return execute_rollback(writer, rollback.requested_time)


def rollback_failed_writes(
    storage: Storage,
    lock: TableLock,
    options: Mapping[str, str] | None = None,
    *,
    time_settings: TimeSettings | None = None,
) -> list[RollbackResult]:
    """Roll back the table's failed data writes, newest first, when its policy is ``LAZY``
    (an empty list otherwise: ``EAGER`` and ``NEVER`` leave them to the writers)."""
    config = load_table_config(storage)
    settings = failed_writes_settings(config, options)
    if settings.policy is not FailedWritesPolicy.LAZY:
        return []
    timeline = Timeline.load(storage, config)
    selected = select_failed_writes(timeline, heartbeat_times(storage), settings, now_ms=_now_ms())
    results = []
    for failed in selected:
        with lock:
            result = _rollback_one(storage, config, lock, failed.target_time, settings, time_settings,
                                   strict=False)
        if result is not None:
            log.info("%s", result.summary())
            results.append(result)
    return results


def rollback_failed_write(
    storage: Storage,
    instant_time: str,
    lock: TableLock,
    options: Mapping[str, str] | None = None,
    *,
    time_settings: TimeSettings | None = None,
) -> RollbackResult:
    """Roll back the failed data write ``instant_time`` on a ``LAZY`` table (``hoodied rollback``)."""
    config = load_table_config(storage)
    settings = failed_writes_settings(config, options)
    if settings.policy is not FailedWritesPolicy.LAZY:
        raise UnsupportedTableError(
            f"{instant_time}: a data write; hoodied rolls back failed writes only on tables whose "
            f"writers use {FAILED_WRITES_POLICY_KEY}=LAZY (this one: {settings.policy.value}; with "
            "EAGER the next writer rolls it back); set it in hoodie.properties or pass "
            f"-o {FAILED_WRITES_POLICY_KEY}=LAZY"
        )
    with lock:
        result = _rollback_one(storage, config, lock, instant_time, settings, time_settings, strict=True)
    assert result is not None  # strict: every other case raised
    return result


def schedule_clean_after_failed_writes(
    storage: Storage,
    lock: TableLock,
    settings: CleanSettings | None = None,
    *,
    dry_run: bool = False,
    time_settings: TimeSettings | None = None,
    options: Mapping[str, str] | None = None,
) -> tuple[Instant | None, CleanPlanResult]:
    """``planners.clean.schedule_clean`` after the failed writes are rolled back (``LAZY`` only,
    not on a dry run), the order of Hudi's ``clean``; same arguments and result."""
    if not dry_run:
        rollback_failed_writes(storage, lock, options, time_settings=time_settings)
    return schedule_clean(storage, lock, settings, dry_run=dry_run, time_settings=time_settings)
