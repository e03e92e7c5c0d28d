"""The use cases the command line and the daemon share: run pending instants, roll back failed attempts.

- ``rollback_failed_attempt``: roll back the failed attempt of a pending table service exactly as
  Apache Hudi does before it retries one: a rollback instant whose plan deletes the attempt's
  files, then the service is requested again with its unchanged plan (``hoodied rollback``). A
  failed ``indexing`` attempt is aborted instead (Hudi writes no rollback instant for indexing:
  ``hoodie.metadata.index_rollback``). A live attempt (heartbeat not expired) is refused unless
  ``force``. On a table with a metadata table the attempt's MDT delta commit is rolled back too
  (``hoodie.metadata.rollback``).
- ``recover_failed_attempt``: the one place that decides *rollback-then-retry*: a pending instant
  of a service that rewrites data (or indexing) that is inflight, or that a pending rollback
  targets, is a failed attempt and is rolled back before it runs again. Clean resumes an inflight
  attempt itself. ``service.spark_jobs.run_spark_service`` calls it for both the CLI and the daemon,
  once the executor's input check passed (a bad plan is found before the rollback deletes anything).
- ``drop_conflicting_clustering``: a clustering that lost a write conflict can never complete; it is
  rolled back and removed from the timeline, as Hudi's writer removes a pending clustering it
  conflicts with, so its file groups can be planned again (``service.spark_jobs`` calls it).
- ``unschedule``: ``hoodied unschedule``: remove a requested clustering or compaction plan nobody
  started, as Hudi leaves the table (a rollback of the clustering; the compaction's file deleted).
- ``execute_pending``: ``hoodied execute``: run pending cleans (``executors.clean``) and hand
  the instants of other services to their runners (the Spark services:
  ``service.spark_jobs.SparkRunner``); report every other pending instant, left untouched.

Nothing here imports click, the daemon or pyspark.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from hoodied.executors.clean import DEFAULT_PARALLELISM, CleanResult, execute_clean
from hoodied.executors.rollback import RollbackResult, execute_rollback
from hoodied.hoodie.actions.clustering import conflicting_writes
from hoodied.hoodie.actions.services import TableService, is_table_service, service_of
from hoodied.hoodie.errors import (
    HeartbeatAliveError,
    HoodieFormatError,
    InstantStateError,
    UnsupportedTableError,
)
from hoodied.hoodie.fence import AttemptFence
from hoodied.hoodie.filenames import LogFileName
from hoodied.hoodie.fsview import list_storage
from hoodied.hoodie.heartbeat import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOLERABLE_MISSES,
    is_heartbeat_expired,
    last_heartbeat_ms,
)
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.metadata.clean import require_clean_maintainable
from hoodied.hoodie.metadata.index_rollback import IndexingAbort, rollback_failed_indexing
from hoodied.hoodie.metadata.rollback import require_rollback_supported
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.rollback_files import rollback_plan
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from hoodied.hoodie.timeline.plans import ClusteringPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.rollback import pending_rollback_for, schedule_rollback

__all__ = [
    "ExecuteOutcome",
    "ExecuteStatus",
    "Runner",
    "execute_pending",
    "executed_status",
    "drop_conflicting_clustering",
    "recover_failed_attempt",
    "rollback_failed_attempt",
    "unschedule",
]

log = logging.getLogger(__name__)


def rollback_failed_attempt(
    storage: Storage,
    instant_time: str,
    lock: TableLock,
    *,
    force: bool = False,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    time_settings: TimeSettings | None = None,
) -> RollbackResult | IndexingAbort | None:
    """Roll back the failed attempt of the pending table service ``instant_time``.

    ``None`` when there is nothing to roll back (the service is only requested and no
    rollback of it is pending). A failed ``indexing`` attempt is aborted as Hudi aborts one
    (Hudi writes no rollback instant for indexing): ``hoodie.metadata.index_rollback``.
    """
    config = load_table_config(storage)
    target = Timeline.load(storage, config).get(instant_time)
    if target is not None and target.action is Action.INDEXING:
        return rollback_failed_indexing(
            storage, lock, instant_time, force=force, heartbeat_interval_ms=heartbeat_interval_ms,
            tolerable_misses=tolerable_misses, time_settings=time_settings,
        )
    require_rollback_supported(storage, config)
    with lock:
        timeline = Timeline.load(storage, config)
        target = timeline.get(instant_time)
        if target is None:
            finished = _finish_removing_rollback(storage, config, timeline, instant_time, lock, time_settings)
            if finished is not None:
                return finished
            raise InstantStateError(f"{storage.base_uri}: no instant {instant_time} on the active timeline")
        if target.is_completed:
            raise InstantStateError(f"{instant_time}: {target.action.value} is completed, nothing to undo")
        if not is_table_service(timeline, target):
            raise UnsupportedTableError(
                f"{instant_time}: {target.action.value} is a regular write, not a table service; "
                "hoodied rolls back failed table-service attempts only"
            )
        pending = pending_rollback_for(timeline, instant_time)
        if target.state is State.REQUESTED and pending is None:
            return None
        expired = is_heartbeat_expired(
            storage, instant_time, interval_ms=heartbeat_interval_ms, tolerable_misses=tolerable_misses
        )
        if not expired and not force:
            raise HeartbeatAliveError(
                f"{instant_time}: {target.action.value} has a live heartbeat (last beat at "
                f"{last_heartbeat_ms(storage, instant_time)} ms since the epoch); another executor is "
                "working on it (use --force only if you know it is dead)"
            )
        # take the instant from the failed attempt before deleting anything (``hoodie.fence``): if
        # it is only paused, it can neither write nor complete once it resumes
        fence = AttemptFence.claim(storage, instant_time, "rollback")
        writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
        try:
            rollback_instant = schedule_rollback(writer, timeline, target)
        except BaseException:  # refused (nothing written): the claim goes too
            fence.release()
            raise
        result = execute_rollback(writer, rollback_instant.requested_time)
        fence.release()  # nobody may write for the instant until its next attempt claims it
        return result


def drop_conflicting_clustering(
    storage: Storage,
    instant_time: str,
    lock: TableLock,
    *,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    time_settings: TimeSettings | None = None,
) -> RollbackResult | None:
    """Roll back and remove the pending clustering ``instant_time`` that lost a write conflict.

    A write completed since the plan was made touched its file groups (``conflicting_writes``):
    it can never complete, so it is rolled back as Hudi's writer rolls back a pending clustering it
    conflicts with (``hoodie.clustering.rollback.pending.replacecommit.on.conflict``: a rollback
    instant, then the clustering's files deleted from the timeline), and the next planning pass may
    plan its file groups again. A failed attempt's files go with its rollback (``rollback_failed_attempt``,
    whose executor removes a conflicting clustering); a plan that was never started gets a rollback
    with nothing to delete. ``None`` when, under the lock, it no longer conflicts or is gone.
    """
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    target = timeline.get(instant_time)
    if target is None or not target.is_pending or not timeline.is_clustering(target):
        return None
    plan = timeline.plan(target)
    if not isinstance(plan, ClusteringPlan) or not conflicting_writes(timeline, target, plan):
        return None
    if target.state is State.INFLIGHT or pending_rollback_for(timeline, instant_time) is not None:
        rolled = rollback_failed_attempt(
            storage, instant_time, lock, heartbeat_interval_ms=heartbeat_interval_ms,
            tolerable_misses=tolerable_misses, time_settings=time_settings,
        )
        return rolled if isinstance(rolled, RollbackResult) else None
    return _remove_requested_clustering(storage, instant_time, lock, time_settings)


def unschedule(
    storage: Storage, service: TableService, instant_time: str, lock: TableLock,
    *, time_settings: TimeSettings | None = None,
) -> RollbackResult | None:
    """``hoodied unschedule``: remove the requested plan ``instant_time`` of ``service`` (compaction or
    clustering) that nobody started, under the table lock, leaving the table as Hudi would.

    A clustering is rolled back and removed (a rollback instant with nothing to delete, then its
    requested file), as Hudi rolls back a pending clustering (``drop_conflicting_clustering``). A
    compaction's requested file is deleted, as Hudi's ``CompactionAdminClient.unscheduleCompactionPlan``
    does (no rollback instant; returns ``None``); on table version 6 a log file already named after the
    compaction (a slice it opened) is refused, as those would need renaming back. An inflight plan is
    refused (``InstantStateError``: roll its attempt back first), as Hudi refuses it.
    """
    if service not in (TableService.CLUSTERING, TableService.COMPACTION):
        raise UnsupportedTableError(f"unschedule: {service.value} plans cannot be unscheduled")
    config = load_table_config(storage)
    with lock:
        timeline = Timeline.load(storage, config)
        target = timeline.get(instant_time)
        if target is None and service is TableService.CLUSTERING:  # an unschedule that stopped midway
            finished = _finish_removing_rollback(storage, config, timeline, instant_time, lock, time_settings)
            if finished is not None:
                return finished
        if target is None or service_of(timeline, target) is not service:
            raise InstantStateError(
                f"{storage.base_uri}: no {service.value} instant {instant_time} on the active timeline"
            )
        if target.is_completed:
            raise InstantStateError(f"{instant_time}: {service.value} is completed, nothing to unschedule")
        # a pending rollback of a requested clustering is an unschedule that stopped midway: finished
        rolling = pending_rollback_for(timeline, instant_time) is not None
        if target.state is not State.REQUESTED or (rolling and service is not TableService.CLUSTERING):
            raise InstantStateError(
                f"{instant_time}: {service.value} is inflight (an attempt started); roll it back first "
                f"(`hoodied rollback TABLE --instant {instant_time}`), then unschedule it"
            )
        if service is TableService.COMPACTION:
            _delete_requested_compaction(storage, config, timeline, target, lock)
            return None
        return _rollback_requested_clustering(storage, config, timeline, target, lock, time_settings)


def _finish_removing_rollback(
    storage: Storage, config: TableConfig, timeline: Timeline, instant_time: str, lock: TableLock,
    time_settings: TimeSettings | None,
) -> RollbackResult | None:
    """Finish the pending rollback of ``instant_time`` when its target is gone already: a rollback
    that removes a clustering stopped after it deleted the clustering's files (crash point
    ``target-deleted``). ``None`` when no pending rollback targets it. The caller holds the lock."""
    pending = pending_rollback_for(timeline, instant_time)
    if pending is None:
        return None
    log.info("%s: gone, finishing its pending rollback %s", instant_time, pending.requested_time)
    return execute_rollback(TimelineWriter(storage, config, lock, time_settings=time_settings),
                            pending.requested_time)


def _remove_requested_clustering(
    storage: Storage, instant_time: str, lock: TableLock, time_settings: TimeSettings | None
) -> RollbackResult | None:
    """Takes the lock: ``_rollback_requested_clustering`` when ``instant_time`` is still a requested
    clustering that conflicts; ``None`` when it is gone or was started meanwhile."""
    config = load_table_config(storage)
    with lock:
        timeline = Timeline.load(storage, config)
        target = timeline.get(instant_time)
        if target is None or target.state is not State.REQUESTED or not timeline.is_clustering(target):
            return None
        plan = timeline.plan(target)
        if not isinstance(plan, ClusteringPlan) or not conflicting_writes(timeline, target, plan):
            return None
        return _rollback_requested_clustering(storage, config, timeline, target, lock, time_settings)


def _rollback_requested_clustering(
    storage: Storage, config: TableConfig, timeline: Timeline, target: Instant, lock: TableLock,
    time_settings: TimeSettings | None,
) -> RollbackResult:
    """A rollback with nothing to delete of the requested clustering ``target``, whose executor
    removes it (``executors.rollback``); the caller holds the lock."""
    require_rollback_supported(storage, config)
    writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
    rollback = pending_rollback_for(timeline, target.requested_time) or writer.schedule(
        Action.ROLLBACK, rollback_plan(storage, target, {}))
    return execute_rollback(writer, rollback.requested_time)


def _delete_requested_compaction(
    storage: Storage, config: TableConfig, timeline: Timeline, target: Instant, lock: TableLock
) -> None:
    """Delete the requested compaction file (the caller holds the lock); its auxiliary copy stays."""
    t = target.requested_time
    if config.version < 8:
        for partition, files in list_storage(storage, config).items():
            for name, _size in files:
                log_name = LogFileName.parse(name)
                if log_name is not None and log_name.instant_time == t:
                    raise UnsupportedTableError(
                        f"{t}: log file {'/'.join(p for p in (partition, name) if p)} was written in the "
                        "slice this compaction opened; unscheduling it would need that file renamed, "
                        "which hoodied does not do"
                    )
    lock.ensure_held()
    storage.delete(timeline.state_file(target, State.REQUESTED))
    log.info("compaction %s: requested plan deleted (unscheduled)", t)


def recover_failed_attempt(
    storage: Storage,
    timeline: Timeline,
    inst: Instant,
    service: TableService,
    lock: TableLock,
    *,
    force: bool = False,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    time_settings: TimeSettings | None = None,
) -> RollbackResult | IndexingAbort | None:
    """Roll back ``inst`` first when it is a failed attempt that cannot simply be run again.

    The rule (see the module docstring): a pending compaction, log compaction, clustering or
    indexing that is inflight, or that a pending rollback targets, is rolled back (an indexing
    aborted) before it runs again; a clean resumes its own inflight attempt. A live attempt
    (fresh heartbeat) raises ``InstantStateError`` unless ``force``. ``None``: nothing rolled back.
    """
    if service is TableService.CLEAN or not inst.is_pending:
        return None
    t = inst.requested_time
    if inst.state is not State.INFLIGHT and pending_rollback_for(timeline, t) is None:
        return None
    log.info("%s %s: rolling back the failed attempt before running it again", service.value, t)
    rolled = rollback_failed_attempt(
        storage, t, lock, force=force, heartbeat_interval_ms=heartbeat_interval_ms,
        tolerable_misses=tolerable_misses, time_settings=time_settings,
    )
    if rolled is not None:
        log.info("%s %s: %s", t, service.value, rolled.summary())
    return rolled


class ExecuteStatus(StrEnum):
    """What ``execute`` did with one pending instant."""

    EXECUTED = "executed"
    ALREADY_COMPLETED = "already-completed"
    """Completed already (by another executor) when its executor looked under the lock: nothing done."""
    SKIPPED = "skipped"
    """Another executor is alive on it (fresh heartbeat)."""
    DROPPED = "dropped"
    """A clustering that lost a write conflict: rolled back and removed from the timeline."""
    NO_EXECUTOR = "no-executor"
    """Not a table service hoodied runs (a data write, its writer's rollback), or no runner for it."""


@dataclass(slots=True)
class ExecuteOutcome:
    """One pending instant ``execute`` looked at: what happened to it, in one line."""

    instant: Instant
    status: ExecuteStatus
    message: str
    clean: CleanResult | None = None


#: Runs one pending instant of a service other than clean: ``runner(instant, service)``.
Runner = Callable[[Instant, TableService], ExecuteOutcome]


def _no_executor(timeline: Timeline, inst: Instant) -> str:
    t, action = inst.requested_time, inst.action.value
    if inst.action is Action.ROLLBACK:
        try:
            rolled = (timeline.read_plan(inst) or {}).get("instantToRollback") or {}
        except HoodieFormatError:
            rolled = {}  # reported as it is; `hoodied rollback` gives the error
        target = rolled.get("commitTime")
        undone = timeline.get(target) if target else None
        # a clustering already removed by its rollback, which stopped before completing
        gone_clustering = target and undone is None and rolled.get("action") == Action.CLUSTERING.value
        if gone_clustering or (undone is not None and is_table_service(timeline, undone)):
            return f"{t} rollback: pending; finish it with `hoodied rollback TABLE --instant {target}`"
        if target:
            return (f"{t} rollback: pending rollback of the data write {target}; the table's writer finishes "
                    f"it (or `hoodied rollback TABLE --instant {target}` on a LAZY table); left untouched")
    if inst.action in WRITE_ACTIONS and not is_table_service(timeline, inst):
        return f"{t} {action} ({inst.state.value}): a data write, not a table service; left untouched"
    return f"{t} {action} ({inst.state.value}): no executor yet, left untouched"


def execute_pending(
    storage: Storage,
    lock: TableLock,
    instant_time: str | None = None,
    *,
    time_settings: TimeSettings | None = None,
    parallelism: int = DEFAULT_PARALLELISM,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    force: bool = False,
    runners: Mapping[TableService, Runner] | None = None,
) -> list[ExecuteOutcome]:
    """Run pending cleans (all, oldest first, or ``instant_time``); report every other pending instant.

    With ``instant_time``: a completed clean is reported as such, a pending instant of
    another action raises ``UnsupportedTableError`` (no executor yet; left untouched) and a
    clean owned by a live executor raises ``HeartbeatAliveError``. ``runners`` execute pending
    instants of other services (``hoodie.actions.services.service_of``), called with the
    instant and its service.
    """
    runners = runners or {}
    config = load_table_config(storage)
    require_clean_maintainable(storage, config, "execute")
    timeline = Timeline.load(storage, config)
    if instant_time is not None:
        inst = timeline.get(instant_time)
        if inst is None:
            raise InstantStateError(f"{storage.base_uri}: no instant {instant_time} on the active timeline")
        if inst.action is not Action.CLEAN and service_of(timeline, inst) not in runners:
            if inst.is_completed:
                raise InstantStateError(
                    f"{instant_time}: {inst.action.value} is completed, nothing to execute"
                )
            raise UnsupportedTableError(_no_executor(timeline, inst))
        targets = [inst]
    else:
        targets = timeline.pending()  # sorted by requested time
    outcomes: list[ExecuteOutcome] = []
    for n, inst in enumerate(targets):
        # a job may have finished later instants (a rollback)
        if n and outcomes[-1].status in (ExecuteStatus.EXECUTED, ExecuteStatus.DROPPED):
            timeline = Timeline.load(storage, config)
            current = timeline.get(inst.requested_time)
            if current is None or current.is_completed:
                continue
        service = service_of(timeline, inst)
        runner = runners.get(service) if service is not None else None
        if inst.action is not Action.CLEAN and runner is None:
            outcomes.append(ExecuteOutcome(inst, ExecuteStatus.NO_EXECUTOR, _no_executor(timeline, inst)))
            continue
        try:
            if runner is not None and service is not None:
                outcomes.append(runner(inst, service))
                continue
            result = execute_clean(
                storage, config, lock, inst.requested_time, time_settings=time_settings,
                parallelism=parallelism, heartbeat_interval_ms=heartbeat_interval_ms,
                tolerable_misses=tolerable_misses, force=force,
            )
        except HeartbeatAliveError as exc:
            if instant_time is not None:
                raise
            what = f"{inst.requested_time} {inst.action.value}"
            outcomes.append(ExecuteOutcome(inst, ExecuteStatus.SKIPPED, f"{what}: skipped, {exc}"))
            continue
        status = executed_status(result.was_completed)
        outcomes.append(ExecuteOutcome(result.instant, status, result.summary(), result))
    return outcomes


def executed_status(was_completed: bool) -> ExecuteStatus:
    """What running an executor did: ``ALREADY_COMPLETED`` when it found its instant completed."""
    return ExecuteStatus.ALREADY_COMPLETED if was_completed else ExecuteStatus.EXECUTED
