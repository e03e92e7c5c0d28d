"""One job of the daemon, run in a worker thread: execute a pending instant or plan a service.

``execute(job, ...)``: take the table's job slot (Redis only; ``service.daemon.leases``) and the
instant's lease (one non-blocking try each: busy means another replica has the table or the
instant), run the executor (which rolls a failed attempt back first when it cannot resume one:
``service.operations.recover_failed_attempt``), release the lease. ``plan(job, ...)``: run the
service's planner (archival's archives at once: ``success`` when it moved instants). Both
return a ``JobOutcome`` (an ``Outcome``); they never raise for errors of the table or the work,
so the loop decides retries and quarantine from one place (``outcome`` and ``retryable``).

How errors are read (``classify``):

- ``HeartbeatAliveError`` (the instant's heartbeat is fresh): ``skipped``, another executor is at work;
  ``AttemptSupersededError`` (this replica was paused past its lease and another took the instant
  over: ``hoodie.fence`` refused every write after that, and any error of the attempt after the
  takeover, its inputs cleaned meanwhile included, is raised as this one): ``claimed``, the
  instant is the other's; never counted as a failure;
  ``InstantNotReadyError`` (an indexing waiting for pending data writes): ``skipped`` too, tried
  again at the next poll;
- ``HoodieFormatError`` / ``TableNotFoundError``: ``corrupt``; executors and planners check
  before they change anything, so the table is quarantined untouched;
- ``UnsupportedTableError``: ``unsupported``; the instant (or service) is left alone;
- ``LockError`` (the table lock or a lease could not be had or kept: the lock service is
  down, or another writer held the table lock past every retry): ``lock_unavailable``;
  retried with backoff for as long as it lasts and never a reason to quarantine the table,
  whose files the lock protocol kept untouched;
- a retryable ``StorageError`` (throttling or network errors the client's own retries did not
  outlast, denied access, a missing bucket) and ``OSError`` of a full or read-only disk:
  ``storage_unavailable``; an outage of the storage, not a broken table: retried with backoff for
  as long as it lasts, never a reason to quarantine (writes are write-once or atomic, so a failed
  one leaves nothing half-written; a failed attempt is rolled back before its retry);
- ``EngineUnavailableError`` (the Spark engine cannot be reached or was lost mid-job: a Spark
  Connect server down or stopped, a local JVM that died or did not start in time):
  ``engine_unavailable``; an outage of the engine, not of the table: retried with backoff for as
  long as it lasts, never a reason to quarantine (the attempt that was running stays inflight and
  is rolled back before its retry);
- any other error (a file gone under the job, clock skew, a bug): ``failed`` and retryable, with
  backoff, until the attempts run out;
- anything raised after the daemon asked the job to stop, and ``ClockOutOfBoundsError`` (the clock,
  measured again right before an instant time or a completion, is out of bounds: nothing was written
  with it): ``handed_back``.

Every outcome is logged once by the loop (``job ended``, its message the error's first line); the
traceback of a ``failed`` job is a DEBUG record of its own, so at the default level a failed job is
one line, and ``log.level: debug`` shows where it failed.

Before running an executor the timeline is listed again under the lease: an instant that
another executor completed since the poll is ``already_done`` and not touched. An executor that
finds it completed itself, under the table lock (completed between that listing and the lock),
answers ``AlreadyCompleted``: ``already_done`` too, so one instant never counts two successes.

The table lock handed to executors is wrapped so every acquisition's wait is measured.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType

from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.errors import (
    OUTAGE_ERRNOS,
    AttemptSupersededError,
    ClockOutOfBoundsError,
    EngineUnavailableError,
    HeartbeatAliveError,
    HoodieFormatError,
    InstantNotReadyError,
    LockError,
    LockServiceDownError,
    LockUnavailableError,
    StorageError,
    TableNotFoundError,
    UnsupportedTableError,
)
from hoodied.hoodie.heartbeat import delete_heartbeat
from hoodied.hoodie.locks import TableLock, TableLockBase
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Instant
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.service.config import DaemonConfig, Policy
from hoodied.service.daemon.leases import make_lease, make_table_slot
from hoodied.service.daemon.registry import (
    AlreadyCompleted,
    ArchivalReport,
    Dropped,
    ExecutorSpec,
    JobContext,
    PlanContext,
    PlannerSpec,
)
from hoodied.service.hudi_lock import hudi_table_lock
from hoodied.service.locks import LocalFileLock, RedisLockFactory, lock_from_option
from hoodied.service.spark_jobs import SparkEngine

log = logging.getLogger("hoodied.job")

__all__ = [
    "COUNTED_ARCHIVAL_OUTCOMES",
    "COUNTED_JOB_OUTCOMES",
    "COUNTED_PLAN_OUTCOMES",
    "Job",
    "JobKind",
    "JobOutcome",
    "OUTAGE_OUTCOMES",
    "Outcome",
    "TimedLock",
    "classify",
    "execute",
    "is_storage_outage",
    "plan",
]


class JobKind(StrEnum):
    """What a job does: run a pending instant or plan a service."""

    EXECUTE = "execute"
    PLAN = "plan"


class Outcome(StrEnum):
    """How a job ended; the value is the ``outcome`` label of the metrics and ``/status``."""

    SUCCESS = "success"
    """The instant was executed (archival, which writes no instant: instants were archived)."""
    PLANNED = "planned"
    """A new instant was requested."""
    NOTHING_DUE = "nothing_due"
    """The planner found nothing to do."""
    ALREADY_DONE = "already_done"
    """Another executor completed the instant since the poll (found before or by the executor):
    nothing was done; neither a success nor a failure."""
    SKIPPED = "skipped"
    """Another executor is alive on the instant, or it waits for pending writes: held until the next poll."""
    CLAIMED = "claimed"
    """Another replica holds the table's slot or the instant's lease, or took the instant over from
    this attempt (superseded: ``AttemptSupersededError``); not a failure."""
    LOCK_UNAVAILABLE = "lock_unavailable"
    """The lock service is down (or the table lock stayed busy): retried, never a quarantine."""
    STORAGE_UNAVAILABLE = "storage_unavailable"
    """The storage failed (throttled, unreachable, denied, full, read-only): retried, never a quarantine."""
    ENGINE_UNAVAILABLE = "engine_unavailable"
    """The Spark engine is unreachable or was lost mid-job: retried, never a quarantine."""
    UNSUPPORTED = "unsupported"
    """The instant or service is one hoodied cannot do: left waiting."""
    CORRUPT = "corrupt"
    """A file of the table is corrupt: the table is quarantined."""
    FAILED = "failed"
    """Any other error: retried with backoff until the attempts run out."""
    DROPPED = "dropped"
    """A clustering that lost a write conflict was rolled back and removed: its file groups can be
    planned again; neither a success nor a failure."""
    HANDED_BACK = "handed_back"
    """Stopped by the daemon's shutdown."""


#: Outages of what a job needs (the lock service, the storage, the Spark engine), not of the table:
#: retried with backoff for as long as they last, never counted as failures, never a quarantine.
OUTAGE_OUTCOMES = frozenset(
    {Outcome.LOCK_UNAVAILABLE, Outcome.STORAGE_UNAVAILABLE, Outcome.ENGINE_UNAVAILABLE}
)
#: Job outcomes whose counters start at 0 for each table and service (``Metrics.track_table``).
COUNTED_JOB_OUTCOMES = (Outcome.SUCCESS.value, Outcome.FAILED.value, Outcome.CORRUPT.value)
#: Plan outcomes whose counters start at 0 for each table and planned service.
COUNTED_PLAN_OUTCOMES = (Outcome.PLANNED.value, Outcome.FAILED.value)
#: The same for archival, whose plan job archives (``success``) and requests nothing.
COUNTED_ARCHIVAL_OUTCOMES = (Outcome.SUCCESS.value, Outcome.FAILED.value)


@dataclass(slots=True)
class JobOutcome:
    outcome: Outcome
    message: str
    retryable: bool = False
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    """What the job did besides its instant or plan (``registry.FAILED_WRITES_ROLLED_BACK``)."""
    archival: ArchivalReport | None = None
    """What an archival job moved, and where it stopped and why."""

    def __post_init__(self) -> None:
        self.outcome = Outcome(self.outcome)  # a misspelt outcome fails here, not in the books


@dataclass(slots=True)
class Job:
    """One unit of work for one table: ``instant`` set for executions, ``service`` for both."""

    table_uri: str
    storage: Storage
    config: TableConfig
    service: TableService
    action: str
    """The service's action, naming the job in logs and metrics (a v6 clustering: ``clustering``)."""
    policy: Policy
    instant: Instant | None = None
    timeline: Timeline | None = None
    started: float = field(default_factory=time.time)
    lease: TableLockBase | None = None
    slot: TableLockBase | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    abandoned: bool = False
    clock_guard: Callable[[], None] | None = None
    """The replica's clock check, run right before every instant time and completion of the job
    (``service.daemon.clock.ClockWatch.guard``)."""

    def time_settings(self, settings: DaemonConfig) -> TimeSettings:
        return TimeSettings(max_expected_clock_skew_ms=settings.clock_skew_ms, clock_guard=self.clock_guard)

    @property
    def key(self) -> str:
        return self.instant.requested_time if self.instant is not None else f"plan:{self.service}"

    def release_after_abandon(self) -> None:
        """The process is about to exit with this job's thread still running: free the instant now.

        The lease is released and the heartbeat deleted, so another executor may take the
        instant over at once instead of waiting for both to expire.
        """
        if self.lease is not None:
            self.lease.release()
        if self.slot is not None:
            self.slot.release()
        if self.instant is not None:
            try:
                delete_heartbeat(self.storage, self.instant.requested_time)
            except Exception as exc:  # it expires by itself
                log.warning("%s: heartbeat not deleted: %s", self.instant.requested_time, exc)


class TimedLock:
    """A ``TableLock`` that reports how long each ``acquire`` waited."""

    def __init__(self, inner: TableLock, on_wait: Callable[[float], None]) -> None:
        self._inner = inner
        self._on_wait = on_wait

    @property
    def key(self) -> str:
        return self._inner.key

    @property
    def is_held(self) -> bool:
        return self._inner.is_held

    @property
    def fencing_token(self) -> int | None:
        return self._inner.fencing_token

    def acquire(self) -> int:
        started = time.monotonic()
        try:
            return self._inner.acquire()
        finally:
            self._on_wait(time.monotonic() - started)

    def release(self) -> None:
        self._inner.release()

    def ensure_held(self) -> None:
        self._inner.ensure_held()

    def __enter__(self) -> TimedLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def table_lock(
    factory: RedisLockFactory | None, settings: DaemonConfig, storage: Storage, policy: Policy | None = None
) -> TableLockBase:
    """The table lock of a job: the Hudi lock the table's policy names (``hudi_lock``, the writers'
    own lock: ``service.hudi_lock``); else Redis when configured; else a file lock on a local table,
    and the lock ``auto`` picks on an object store (a lock kept in the bucket, ``service.locks``)."""
    lock_settings = settings.lock.table_lock_settings()
    hudi = hudi_table_lock(policy.hudi_lock, storage, lock_settings) if policy is not None else None
    if hudi is not None:
        return hudi
    if factory is not None:
        return factory.lock(storage.base_uri, lock_settings)
    if storage.local_path() is None:
        lock, _ = lock_from_option("auto", storage, lock_settings)
        return lock
    return LocalFileLock(storage, lock_settings)


def _one_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def classify(exc: BaseException, cancel: threading.Event) -> JobOutcome:
    """An error of a job -> its outcome (see the module docstring)."""
    if cancel.is_set() or isinstance(exc, ClockOutOfBoundsError):
        why = "daemon stopping, or its clock out of bounds"
        return JobOutcome(Outcome.HANDED_BACK, f"handed back ({why}): {_one_line(exc)}")
    if isinstance(exc, InstantNotReadyError | HeartbeatAliveError):
        return JobOutcome(Outcome.SKIPPED, str(exc))
    if isinstance(exc, AttemptSupersededError):  # paused past its lease: the instant is another's now
        return JobOutcome(Outcome.CLAIMED, _one_line(exc))
    if isinstance(exc, HoodieFormatError | TableNotFoundError):
        return JobOutcome(Outcome.CORRUPT, str(exc))
    if isinstance(exc, UnsupportedTableError):
        return JobOutcome(Outcome.UNSUPPORTED, str(exc))
    if isinstance(exc, LockError):
        return JobOutcome(Outcome.LOCK_UNAVAILABLE, _one_line(exc), retryable=True)
    if isinstance(exc, EngineUnavailableError):
        return JobOutcome(Outcome.ENGINE_UNAVAILABLE, _one_line(exc), retryable=True)
    if is_storage_outage(exc):
        return JobOutcome(Outcome.STORAGE_UNAVAILABLE, _one_line(exc), retryable=True)
    return JobOutcome(Outcome.FAILED, _one_line(exc), retryable=True)


#: ``OSError`` numbers of a storage that cannot take writes for now (the space or quota comes back,
#: the volume is remounted read-write).
def is_storage_outage(exc: BaseException) -> bool:
    """The storage is unavailable (``storage_unavailable``), the table itself is not at fault."""
    if isinstance(exc, StorageError):
        return exc.retryable or isinstance(exc.__cause__, OSError) and exc.__cause__.errno in OUTAGE_ERRNOS
    return isinstance(exc, OSError) and exc.errno in OUTAGE_ERRNOS


def execute(
    job: Job,
    spec: ExecutorSpec,
    settings: DaemonConfig,
    factory: RedisLockFactory | None,
    on_lock_wait: Callable[[float], None],
    engine: SparkEngine,
) -> JobOutcome:
    """Run the pending instant ``job.instant`` with ``spec`` (see the module docstring);
    ``engine`` is the daemon's Spark engine, handed to the executor."""
    assert job.instant is not None
    started = time.monotonic()
    t = job.instant.requested_time
    slot = make_table_slot(factory, job.storage, settings.lock.lease_settings())
    if slot is not None:
        refused = _take(slot, t, "another replica runs a job on this table", started)
        if refused is not None:
            return refused
        job.slot = slot
    try:
        return _execute_leased(job, spec, settings, factory, on_lock_wait, engine, started)
    finally:
        if slot is not None and not job.abandoned:
            slot.release()


def _take(lock: TableLockBase, t: str, busy: str, started: float) -> JobOutcome | None:
    """One try at a slot or lease: ``None`` when taken, else the outcome that says why not."""
    try:
        lock.acquire()
    except LockUnavailableError as exc:
        if isinstance(exc, LockServiceDownError):  # else busy: another replica holds it
            return JobOutcome(Outcome.LOCK_UNAVAILABLE, f"{t}: not started: {_one_line(exc)}",
                              retryable=True, seconds=time.monotonic() - started)
        return JobOutcome(Outcome.CLAIMED, f"{t}: {busy} ({exc})", seconds=time.monotonic() - started)
    return None


def _execute_leased(
    job: Job,
    spec: ExecutorSpec,
    settings: DaemonConfig,
    factory: RedisLockFactory | None,
    on_lock_wait: Callable[[float], None],
    engine: SparkEngine,
    started: float,
) -> JobOutcome:
    assert job.instant is not None
    t = job.instant.requested_time
    lease = make_lease(factory, job.storage, t, settings.lock.lease_settings())
    refused = _take(lease, t, "another replica holds the instant", started)
    if refused is not None:
        return refused
    job.lease = lease
    time_settings = job.time_settings(settings)
    counts: dict[str, int] = {}
    try:
        # the poll may be stale: another replica may have finished the instant and freed its lease
        instant = Timeline.load(job.storage, job.config).get(t)
        if instant is None or instant.is_completed:
            gone = "completed" if instant is not None else "gone from the timeline"
            return JobOutcome(Outcome.ALREADY_DONE, f"{t}: {gone} since the poll (another executor)",
                              seconds=time.monotonic() - started)
        lock = TimedLock(table_lock(factory, settings, job.storage, job.policy), on_lock_wait)
        ctx = JobContext(
            job.storage, job.config, instant, lock, job.policy, settings, time_settings, job.cancel, engine,
            counts,
        )
        executed = spec.run(ctx)
        if isinstance(executed, AlreadyCompleted):  # completed by another executor after the check above
            outcome = JobOutcome(Outcome.ALREADY_DONE, executed.summary)
        elif isinstance(executed, Dropped):
            outcome = JobOutcome(Outcome.DROPPED, executed.summary)
        else:
            outcome = JobOutcome(Outcome.SUCCESS, executed)
    except Exception as exc:
        outcome = classify(exc, job.cancel)
        if outcome.outcome is Outcome.FAILED:
            log.debug("%s %s failed", spec.action.value, t, exc_info=True)
    finally:
        if not job.abandoned:
            lease.release()
    outcome.counts = counts  # what it did before it failed counts too
    outcome.seconds = time.monotonic() - started
    return outcome


def plan(
    job: Job,
    spec: PlannerSpec,
    settings: DaemonConfig,
    factory: RedisLockFactory | None,
    on_lock_wait: Callable[[float], None],
) -> JobOutcome:
    """Run the planner of ``job.service``: ``planned`` with the new instant, ``success`` when it did the
    work itself (archival), or ``nothing_due``."""
    assert job.timeline is not None
    started = time.monotonic()
    time_settings = job.time_settings(settings)
    try:
        inner = table_lock(factory, settings, job.storage, job.policy)
    except Exception as exc:  # a Hudi lock that cannot work on this table, or its name unreadable
        refused = classify(exc, job.cancel)
        refused.seconds = time.monotonic() - started
        return refused
    lock = TimedLock(inner, on_lock_wait)
    ctx = PlanContext(job.storage, job.config, job.timeline, lock, job.policy, settings, time_settings)
    outcome: JobOutcome
    try:
        result = spec.plan(ctx)
        if result.instant is not None:
            outcome = JobOutcome(Outcome.PLANNED, f"{result.instant.requested_time} {job.action} requested: "
                                                  f"{result.summary}")
        else:
            outcome = JobOutcome(Outcome.SUCCESS if result.done else Outcome.NOTHING_DUE, result.summary,
                                 archival=result.archival)
    except Exception as exc:
        outcome = classify(exc, job.cancel)
        if outcome.outcome is Outcome.FAILED:
            log.debug("planning %s failed", job.service, exc_info=True)
    outcome.counts = ctx.counts
    outcome.seconds = time.monotonic() - started
    return outcome
