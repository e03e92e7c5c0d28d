"""Views of the daemon's state: the ``/status`` document and the snapshot ``/metrics`` reads.

Both are built on the event loop from the daemon's books, so they never wait for a worker
thread. They (and ``service.daemon.http``) read the daemon through ``DaemonView``, the part of
``service.daemon.loop.Daemon`` a view may see, so neither imports the loop that serves them.

Per-table keys of the ``/status`` document about its controls (``service.table_controls``, shared by
every replica; times are epoch seconds):

- ``paused`` (bool): paused by the policy or by a person; ``pause``: ``null`` or
  ``{"by", "at", "reason"}`` (``by`` is ``policy`` for ``paused: true`` in the settings);
- ``quarantined`` (the reason, or ``null``) and ``quarantined_at``; ``quarantine``: ``null`` or
  ``{"reason", "at", "replica", "instant", "retries", "next_retry_at", "last_retry_error"}``
  (``replica``: the one that quarantined it; ``instant``: the instant at fault, if any);
- ``history``: the table's newest jobs of every replica, newest first, each
  ``{"kind", "action", "instant", "outcome", "seconds", "message", "replica", "finished_at"}``
  (``kind``: ``execute``, ``plan`` or ``retry``, a quarantine retry); ``last_outcomes`` stays this
  replica's own recent outcomes.

Per-table ``lock``: which lock guards the table's planning and timeline writes, secrets masked: the
Hudi lock its ``hudi_lock`` settings name (``ZookeeperBasedLockProvider zk:2181/hudi/locks/trips``),
else the daemon's own (the Redis address; ``local``; Hudi's storage lock for a table on an object store).

Per-table archival keys (this replica's jobs): ``instants_archived`` since start (the metadata
table's included), and ``last_archival``: ``null`` or ``{"at", "archived", "recovered", "stop",
"stop_instant", "detail", "metadata_table"}`` (``stop``: the ``planners.archival.StopReason`` it
stopped at, ``stop_instant`` the instant kept from there on; ``metadata_table``: the same for the
metadata table's timeline, or ``null``), also when nothing moved.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any, Protocol

from hoodied.hoodie.secrets import mask_secrets
from hoodied.hoodie.storage import STORAGE_REQUESTS
from hoodied.service.config import DaemonConfig
from hoodied.service.daemon.clock import ClockState, ClockWatch
from hoodied.service.daemon.jobs import Job, JobKind
from hoodied.service.daemon.metrics import Metrics, StateSnapshot, TableSnapshot
from hoodied.service.daemon.registry import Registry
from hoodied.service.daemon.table_state import TableState, item_status
from hoodied.service.hudi_lock import describe_hudi_lock
from hoodied.service.locks import RedisLockFactory
from hoodied.service.spark_jobs import SparkEngine
from hoodied.service.storage_lock import LOCK_FILE as STORAGE_LOCK_FILE
from hoodied.service.table_controls import ControlStore

__all__ = ["DaemonView", "clock_document", "state_snapshot", "status_document"]


class DaemonView(Protocol):
    """What the views and the HTTP endpoint read of the daemon (``service.daemon.loop.Daemon``)."""

    @property
    def settings(self) -> DaemonConfig: ...
    @property
    def registry(self) -> Registry: ...
    @property
    def tables(self) -> Mapping[str, TableState]: ...
    @property
    def running(self) -> Mapping[str, Job]: ...
    @property
    def draining(self) -> bool: ...
    @property
    def stop_reason(self) -> str | None: ...
    @property
    def once(self) -> bool: ...
    @property
    def replica(self) -> str: ...
    @property
    def started_at(self) -> float: ...
    @property
    def last_cycle_end(self) -> float | None: ...
    @property
    def last_cycle_seconds(self) -> float | None: ...
    @property
    def last_cycle_requests(self) -> Mapping[str, int] | None: ...
    @property
    def recent_errors(self) -> Sequence[dict[str, Any]]: ...
    @property
    def factory(self) -> RedisLockFactory | None: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def engine(self) -> SparkEngine: ...
    @property
    def clock(self) -> ClockWatch: ...
    @property
    def store(self) -> ControlStore | None: ...

    def controls_changed(self) -> None:
        """A control was changed through the views (the HTTP API): the daemon reads them again."""
        ...

    def lock_where(self) -> str:
        """Where the table locks live: ``local`` or the lock service's address."""
        ...

    def loop_heartbeat_age(self) -> float:
        """Seconds since the last poll cycle ended (or the daemon started)."""
        ...


def state_snapshot(daemon: DaemonView) -> StateSnapshot:
    """What ``/metrics`` reads at scrape time."""
    tables = []
    now = time.time()
    for ts in daemon.tables.values():
        snap = TableSnapshot(ts.uri, ts.quarantine is not None, ts.policy.paused or ts.pause is not None,
                             last_success=dict(ts.last_success))
        if ts.poll is not None:
            for item in ts.poll.pending:
                # the service's action (a v6 clustering replacecommit counts as clustering)
                action = item.service.action.value if item.service is not None else item.instant.action.value
                count, oldest = snap.pending.get(action, (0, 0.0))
                snap.pending[action] = (count + 1, max(oldest, now - item.requested_epoch))
            snap.delta_commits_since_compaction = ts.poll.delta_commits_since_compaction
        tables.append(snap)
    running = Counter(j.action for j in daemon.running.values())
    check = daemon.clock.current
    offset = None if check.reading is None else (check.reading.offset_s, check.reading.uncertainty_s)
    return StateSnapshot(tables, dict(running), daemon.draining, daemon.last_cycle_end,
                         STORAGE_REQUESTS.snapshot(), engine_down=daemon.engine.up is False,
                         clock_offset=offset, clock_skewed=check.state is ClockState.SKEWED)


def clock_document(daemon: DaemonView) -> dict[str, Any]:
    """The clock part of ``/status``: the verdict, the measured offset and where it came from."""
    check, mono = daemon.clock.current, time.monotonic()
    reading = check.reading
    return {
        "state": check.state.value, "source": check.source, "summary": check.describe(),
        "offset_seconds": None if reading is None else round(reading.offset_s, 6),
        "uncertainty_seconds": None if reading is None else round(reading.uncertainty_s, 6),
        "round_trip_seconds": None if reading is None else round(reading.rtt_s, 6),
        "bound_seconds": check.bound_s, "error": check.error,
        "checked_seconds_ago": round(mono - check.at, 3) if check.at > -1e300 else None,
        "takes_work": daemon.clock.allows_work(mono),
    }


def _pause(ts: TableState) -> dict[str, Any] | None:
    if ts.pause is not None:
        return asdict(ts.pause)
    if ts.policy.paused:
        return {"by": "policy", "at": None, "reason": "paused: true in the settings"}
    return None


def _archival(ts: TableState) -> dict[str, Any] | None:
    if ts.last_archival is None:
        return None
    at, report = ts.last_archival
    return {"at": at, **asdict(report)}


def _lock(ts: TableState, daemon: DaemonView) -> str:
    """Which lock guards the table's planning and timeline writes (secrets masked): the Hudi lock its
    policy names, else the daemon's (Redis; or a file lock, Hudi's storage lock on an object store)."""
    hudi = describe_hudi_lock(ts.policy.hudi_lock) if ts.policy.hudi_lock else None
    if hudi is not None:
        return hudi
    if daemon.factory is None and ts.storage is not None and ts.storage.local_path() is None:
        return f"StorageBasedLockProvider {STORAGE_LOCK_FILE}"
    return daemon.lock_where()


def status_document(daemon: DaemonView) -> dict[str, Any]:
    """The ``/status`` document (``hoodied status`` renders it)."""
    now, mono = time.time(), time.monotonic()
    tables = []
    for ts in sorted(daemon.tables.values(), key=lambda t: t.uri):
        pending = []
        if ts.poll is not None:
            for item in ts.poll.pending:
                status, note = item_status(ts, item, daemon.running.get(ts.uri), daemon.registry, mono)
                failure = ts.failures.get(item.instant.requested_time)
                pending.append({
                    "instant": item.instant.requested_time, "action": item.instant.action.value,
                    "state": item.instant.state.value,
                    "age_seconds": round(now - item.requested_epoch, 1),
                    "status": status, "note": note, "failures": failure.count if failure else 0,
                })
        job = daemon.running.get(ts.uri)
        config = ts.poll.config if ts.poll is not None else None
        tables.append({
            "path": ts.uri, "source": ts.source,
            "name": config.name if config else None,
            "type": config.table_type.value if config else None,
            "version": config.version if config else None,
            "paused": ts.policy.paused or ts.pause is not None, "pause": _pause(ts),
            "priority": ts.policy.priority, "lock": _lock(ts, daemon),
            "quarantined": ts.quarantine, "quarantined_at": ts.quarantined_at,
            "quarantine": asdict(ts.stored_quarantine) if ts.stored_quarantine else None,
            "history": [asdict(r) for r in ts.history or []],
            "poll_failures": ts.poll_failures,
            "pending": pending,
            "running": None if job is None else {
                "action": job.action, "instant": job.instant.requested_time if job.instant else None,
                "kind": JobKind.EXECUTE if job.instant else JobKind.PLAN,
                "seconds": round(now - job.started, 1),
            },
            "due": dict(ts.poll.due) if ts.poll else {},
            "planning": dict(ts.plan_notes),
            "last_outcomes": list(ts.outcomes),
            "failed_writes_rolled_back": ts.failed_writes_rolled_back,
            "instants_archived": ts.instants_archived, "last_archival": _archival(ts),
            "delta_commits_since_compaction": ts.poll.delta_commits_since_compaction if ts.poll else None,
        })
    return {
        "replica": daemon.replica, "started_at": daemon.started_at, "draining": daemon.draining,
        "stop_reason": daemon.stop_reason, "once": daemon.once, "lock": daemon.lock_where(),
        "workers": {"limit": daemon.settings.concurrency.workers, "busy": len(daemon.running)},
        # up: None before the first session start ended; state: not_started, starting, up or down
        "engine": {"master": mask_secrets(daemon.settings.spark.master), "up": daemon.engine.up,
                   "state": daemon.engine.state.value,
                   "problem": daemon.engine.problem and mask_secrets(daemon.engine.problem)},
        "clock": clock_document(daemon),
        "last_poll": {"ended_at": daemon.last_cycle_end, "seconds": daemon.last_cycle_seconds,
                      "age_seconds": round(daemon.loop_heartbeat_age(), 3),
                      # object-store requests while the cycle ran (jobs running meanwhile included)
                      "storage_requests": dict(daemon.last_cycle_requests or {})},
        "tables_watched": len(tables),
        "tables_quarantined": sum(1 for t in tables if t["quarantined"]),
        "tables": tables,
        "recent_errors": list(daemon.recent_errors),
    }
