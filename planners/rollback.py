"""Rollback planning for failed table-service attempts (compaction, log compaction, clustering).

A table service whose instant is inflight but whose executor is gone (its heartbeat expired,
or there is none) is a failed attempt. As Apache Hudi does before it re-executes such an
instant (``BaseHoodieTableServiceClient``, ``HoodieTable.rollbackInflightInstant``):

1. reuse a pending rollback that already targets the instant, else schedule a new rollback
   instant ``R`` whose ``HoodieRollbackPlan`` lists the files the attempt wrote;
2. execute it (``executors.rollback``): delete those files, complete ``R`` with
   ``HoodieRollbackMetadata``;
3. delete the target's inflight file (its requested plan stays) and re-execute from the plan.

The files of the attempt come from its markers (``.hoodie/.temp/<T>/``); when there are none
(an executor that wrote no markers, or a marker folder already cleaned), from a listing:
every base or log file whose name carries the instant ``T``. In table version 8+ that is
exact, because log files carry their own instant (notes: rollback in v8+ deletes files and
writes no command blocks). In table version 6 a log file carries its slice's base instant,
so an attempt that appended log blocks (log compaction) cannot be undone by deleting files;
hoodied refuses that case instead of guessing.

Plan paths are full paths (the table base path + the relative path), as Hudi writes them
(``hoodie.plan_files.plan_path``).

Tables with a metadata table (versions 8 and 9): the executor also rolls back the MDT delta
commit of the target (``hoodie.metadata.rollback``); ``schedule_rollback`` checks first that it can
(a version-6 MDT, or an MDT delta commit already folded into an MDT compaction, is refused
with nothing written).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hoodied.hoodie.actions.services import service_of
from hoodied.hoodie.errors import InstantStateError, UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.fsview import list_storage
from hoodied.hoodie.heartbeat import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOLERABLE_MISSES,
    is_heartbeat_expired,
    last_heartbeat_ms,
)
from hoodied.hoodie.markers import IOType, WriteMarkers
from hoodied.hoodie.metadata.rollback import check_data_rollback
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.rollback_files import ROLLBACK_PLAN_VERSION, rollback_plan
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.writer import TimelineWriter

log = logging.getLogger(__name__)

__all__ = [
    "ROLLBACK_PLAN_VERSION",
    "FailedAttempt",
    "attempt_files",
    "find_failed_attempts",
    "is_table_service",
    "pending_rollback_for",
    "plan_rollback",
    "plan_summary",
    "schedule_rollback",
]


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """An inflight table service nobody is executing any more."""

    instant: Instant
    last_heartbeat_ms: int


def is_table_service(timeline: Timeline, instant: Instant) -> bool:
    """Whether ``instant`` is a table service this module rolls back: one that rewrites data
    (``TableService.rewrites_data``: compaction, log compaction, clustering)."""
    service = service_of(timeline, instant)
    return service is not None and service.rewrites_data


def find_failed_attempts(
    storage: Storage,
    timeline: Timeline,
    *,
    interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    now_ms: int | None = None,
) -> list[FailedAttempt]:
    """Inflight table services whose heartbeat expired (or never existed), oldest first."""
    out = []
    for inst in timeline.pending():
        if inst.state is not State.INFLIGHT or not is_table_service(timeline, inst):
            continue
        t = inst.requested_time
        if is_heartbeat_expired(storage, t, interval_ms=interval_ms, tolerable_misses=tolerable_misses,
                                now_ms=now_ms):
            out.append(FailedAttempt(inst, last_heartbeat_ms(storage, t)))
    return out


def pending_rollback_for(timeline: Timeline, requested_time: str) -> Instant | None:
    """A pending rollback whose plan targets ``requested_time`` (to be finished, not re-planned)."""
    for inst in timeline.pending((Action.ROLLBACK,)):
        plan = timeline.read_plan(inst)
        target = (plan or {}).get("instantToRollback") or {}
        if target.get("commitTime") == requested_time:
            return inst
    return None


def attempt_files(storage: Storage, config: TableConfig, target: Instant) -> dict[str, list[str]]:
    """Relative paths of the files a pending instant wrote, by partition (markers first, listing
    as fallback); shared by table-service attempts and failed data writes (``planners.failed_writes``)."""
    t = target.requested_time
    markers = WriteMarkers(storage, t)
    found = markers.markers() if markers.exists() else []
    by_partition: dict[str, list[str]] = {}
    if found:
        for m in found:
            if m.io_type is IOType.APPEND and config.version < 8:
                raise UnsupportedTableError(
                    f"{markers.folder}: {target.action.value} {t} appended to log file {m.data_path}; "
                    "undoing appends in table version 6 needs rollback command blocks, which hoodied "
                    "does not write"
                )
            by_partition.setdefault(m.partition, []).append(m.data_path)
        return by_partition
    log.info("%s: no markers, finding the attempt's files by listing", markers.folder)
    for partition, files in list_storage(storage, config).items():
        for name, _size in files:
            base = BaseFileName.parse(name)
            if base is not None and base.instant_time == t:
                by_partition.setdefault(partition, []).append(_rel(partition, name))
                continue
            log_name = LogFileName.parse(name)
            if log_name is not None and log_name.instant_time == t:
                if config.version < 8:
                    raise UnsupportedTableError(
                        f"{_rel(partition, name)}: a table-version-6 log file named after {t}; "
                        "hoodied cannot tell which blocks the failed attempt wrote"
                    )
                by_partition.setdefault(partition, []).append(_rel(partition, name))
    return by_partition


def _rel(partition: str, name: str) -> str:
    return f"{partition}/{name}" if partition else name


def plan_rollback(
    storage: Storage, config: TableConfig, timeline: Timeline, target: Instant
) -> dict[str, Any]:
    """The ``HoodieRollbackPlan`` that undoes a failed attempt of the pending table service ``target``."""
    if not target.is_pending:
        raise InstantStateError(
            f"{target.requested_time}: {target.action.value} is completed, not a failed attempt"
        )
    if not is_table_service(timeline, target):
        raise UnsupportedTableError(
            f"{target.requested_time}: rolling back a {target.action.value} (a regular write) is not "
            "supported; hoodied rolls back table services only"
        )
    return rollback_plan(storage, target, attempt_files(storage, config, target))


def schedule_rollback(writer: TimelineWriter, timeline: Timeline, target: Instant) -> Instant:
    """Reuse the pending rollback of ``target`` or schedule a new one (the caller holds the lock)."""
    existing = pending_rollback_for(timeline, target.requested_time)
    if existing is not None:
        log.info("%s: reusing pending rollback %s", target.requested_time, existing.requested_time)
        return existing
    plan = plan_rollback(writer.storage, writer.config, timeline, target)
    check_data_rollback(writer.storage, writer.config, target.requested_time)
    return writer.schedule(Action.ROLLBACK, plan)


def plan_summary(plan: Mapping[str, Any]) -> str:
    """One line: how many files in how many file groups."""
    requests = plan.get("RollbackRequests") or []
    files = sum(len(r.get("filesToBeDeleted") or []) for r in requests)
    target = plan.get("instantToRollback") or {}
    what = f"{target.get('action')} {target.get('commitTime')}"
    return f"rollback of {what}: {files} files in {len(requests)} file groups"
