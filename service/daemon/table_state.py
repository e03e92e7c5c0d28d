"""What the daemon knows about each table, and the decisions it takes from it alone.

``TableState`` holds one table's books (owned by the event loop; threads get copies): the
last poll, failures with their backoff, holds (another executor is at work), instants and
services left waiting, planning notes and the last outcomes, and the table's shared controls as
last read from their store (``service.table_controls``: a pause, a quarantine, the recent history
of every replica's jobs). From them:

- ``item_status``: whether a pending instant is ready to run, and if not why
  (``running``, ``waiting``, ``disabled``, ``paused``, ``running-elsewhere``, ``backoff``,
  ``held``, ``quarantined``);
- ``next_for_table``: the table's next job, the oldest ready instant before any new plan
  (``service.daemon.loop`` then orders the tables' candidates);
- ``record_outcome``: how a job's outcome changes the books (retry with backoff, hold,
  wait, quarantine); the loop applies what it returns;
- ``history_record``: the entry a finished job adds to the table's shared history (every outcome
  but ``nothing_due`` and ``claimed``, which say only that there was nothing for this replica to do).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.storage import Storage
from hoodied.service.config import DaemonConfig, Policy
from hoodied.service.daemon.jobs import OUTAGE_OUTCOMES, Job, JobKind, JobOutcome, Outcome
from hoodied.service.daemon.poll import PendingItem, PollResult
from hoodied.service.daemon.registry import ArchivalReport, Registry
from hoodied.service.table_controls import JobRecord, Pause, Quarantine

__all__ = [
    "Candidate", "Failure", "TableState", "Verdict", "history_record", "item_status", "next_for_table",
    "record_outcome",
]

#: A service found "nothing due" is asked again when the timeline moves, or after this long
#: (time-based retention and triggers change with the clock alone).
REPLAN_AFTER_S = 600.0
#: Outcomes kept per table for /status.
KEEP_OUTCOMES = 10


@dataclass(slots=True)
class Failure:
    count: int
    next_at: float
    last_error: str
    lock: bool = False
    """Counted outages of the lock service, the storage or the Spark engine (never a quarantine)."""
    engine: bool = False
    """The last outage was the Spark engine's: retried at once when its server answers again."""


@dataclass(slots=True)
class TableState:
    """What the loop knows about one table (owned by the event loop; threads get copies)."""

    uri: str
    policy: Policy
    source: str
    """``config`` or the discover root that found it."""
    storage: Storage | None = None
    poll: PollResult | None = None
    poll_failures: int = 0
    quarantine: str | None = None
    """Why the table is quarantined (set here at once, shared through ``stored_quarantine``)."""
    quarantined_at: float | None = None
    stored_quarantine: Quarantine | None = None
    """The quarantine as the shared store holds it (any replica's), at the last read or write."""
    quarantine_stored_at: float | None = None
    """When (monotonic) this replica's quarantine was written to the store: a read that started
    later and finds none means it was released."""
    released_by_retry: tuple[int, float] | None = None
    """(retries so far, epoch) when this replica's retry released the table's quarantine: a new
    quarantine soon after goes on from that count, so a cause a retry cannot see (a failing plan)
    still backs off instead of being released every first retry."""
    pause: Pause | None = None
    """A pause set with ``hoodied table pause`` or the HTTP API (``policy.paused`` is the settings')."""
    history: list[JobRecord] | None = None
    """The table's newest jobs of every replica, from the store (``None``: not read yet)."""
    failures: dict[str, Failure] = field(default_factory=dict)
    holds: dict[str, tuple[float, str]] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)
    plan_checked: dict[TableService, tuple[int, float]] = field(default_factory=dict)
    plan_notes: dict[TableService, str] = field(default_factory=dict)
    outcomes: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=KEEP_OUTCOMES))
    last_success: dict[str, float] = field(default_factory=dict)
    failed_writes_rolled_back: int = 0
    """Failed data writes its clean jobs rolled back since the daemon started."""
    last_archival: tuple[float, ArchivalReport] | None = None
    """When (epoch seconds) its last archival job ended, and what it did (also when nothing moved)."""
    instants_archived: int = 0
    """Instants its archival jobs moved into the history since the daemon started (its MDT's included)."""


@dataclass(slots=True)
class Candidate:
    table: TableState
    kind: JobKind
    service: TableService
    sort_key: tuple[int, int, str, str]
    item: PendingItem | None = None


def item_status(
    ts: TableState, item: PendingItem, job: Job | None, registry: Registry, now: float
) -> tuple[str, str]:
    """``ready`` or why not, with a note; ``job`` is the table's running job, if any."""
    t = item.instant.requested_time
    if job is not None and job.instant is not None and job.instant.requested_time == t:
        return "running", f"since {time.time() - job.started:.0f} s"
    if ts.quarantine:
        return "quarantined", ts.quarantine
    if item.service is None:
        return "waiting", "not a table service hoodied runs; left untouched"
    spec = registry.executor_for(item.service.action)
    if spec is None:
        return "waiting", f"no executor for {item.service} yet; left untouched"
    if ts.policy.paused:
        return "paused", "table paused by policy"
    if ts.pause is not None:
        why = f": {ts.pause.reason}" if ts.pause.reason else ""
        return "paused", f"table paused by {ts.pause.by}{why}"
    if not ts.policy.services.get(item.service).enabled:
        return "disabled", f"{item.service} disabled by policy"
    if t in ts.waiting:
        return "waiting", ts.waiting[t]
    if item.heartbeat_alive:
        return "running-elsewhere", "heartbeat alive: another executor is working on it"
    failure = ts.failures.get(t)
    if failure is not None and failure.next_at > now:
        return "backoff", f"attempt {failure.count + 1} in {failure.next_at - now:.0f} s; " \
                          f"last error: {failure.last_error}"
    hold = ts.holds.get(t)
    if hold is not None and hold[0] > now:
        return "held", hold[1]
    return "ready", ""


def _plan_ready(ts: TableState, service: TableService, now: float) -> bool:
    key = f"plan:{service}"
    if key in ts.waiting:
        return False
    failure = ts.failures.get(key)
    if failure is not None and failure.next_at > now:
        return False
    checked = ts.plan_checked.get(service)
    assert ts.poll is not None
    return not (checked and checked[0] == ts.poll.signature and now - checked[1] < REPLAN_AFTER_S)


def next_for_table(ts: TableState, registry: Registry, now: float) -> Candidate | None:
    """The next job of a polled table with no running job: its oldest ready instant, else a plan."""
    assert ts.poll is not None
    prio = -ts.policy.priority
    for item in ts.poll.pending:  # oldest first
        if item_status(ts, item, None, registry, now)[0] == "ready":
            assert item.service is not None
            key = (prio, 0, item.instant.requested_time, ts.uri)
            return Candidate(ts, JobKind.EXECUTE, item.service, key, item)
    for service in ts.poll.due:
        if _plan_ready(ts, service, now):
            return Candidate(ts, JobKind.PLAN, service, (prio, 1, "", ts.uri))
    return None


@dataclass(slots=True)
class Verdict:
    """What the loop does after ``record_outcome``: log at ``level``, note ``error``, quarantine."""

    level: str = "info"
    error: str | None = None
    """A problem of this pass, for ``recent_errors``."""
    quarantine: str | None = None
    """Quarantine the table with this reason."""


def record_outcome(
    ts: TableState, job: Job, kind: JobKind, outcome: JobOutcome, settings: DaemonConfig, now: float
) -> Verdict:
    """Book a finished job on its table (``now``: monotonic)."""
    record = {"at": time.time(), "kind": kind, "action": job.action, "instant": job.instant.requested_time
              if job.instant else None, "outcome": outcome.outcome, "message": outcome.message,
              "seconds": round(outcome.seconds, 3)}
    ts.outcomes.appendleft(record)
    key = job.key
    what = f"{job.action} {job.instant.requested_time}" if job.instant else f"{job.service} plan"
    verdict = Verdict()
    if outcome.outcome in (Outcome.SUCCESS, Outcome.PLANNED, Outcome.NOTHING_DUE, Outcome.ALREADY_DONE,
                           Outcome.DROPPED):
        ts.failures.pop(key, None)
        if outcome.outcome is Outcome.SUCCESS:
            ts.last_success[job.action] = time.time()
        if kind == JobKind.PLAN:
            ts.plan_notes[job.service] = outcome.message
            assert ts.poll is not None
            ts.plan_checked[job.service] = (ts.poll.signature, now)
    elif outcome.outcome in (Outcome.SKIPPED, Outcome.CLAIMED):
        ts.holds[key] = (now + settings.poll_interval_seconds, outcome.message)
    elif outcome.outcome in OUTAGE_OUTCOMES:
        # the lock service, the storage or the Spark engine, not the table: retried with backoff for
        # as long as it lasts, never quarantined
        verdict = Verdict("warning", f"{what}: {outcome.message}")
        n = (ts.failures[key].count if key in ts.failures else 0) + 1
        delay = settings.retry.backoff(n)
        ts.failures[key] = Failure(n, now + delay, outcome.message, lock=True,
                                   engine=outcome.outcome is Outcome.ENGINE_UNAVAILABLE)
        record["retry_in_seconds"] = delay
    elif outcome.outcome is Outcome.UNSUPPORTED:
        ts.waiting[key] = outcome.message
        if kind == JobKind.PLAN:
            ts.plan_notes[job.service] = outcome.message
        verdict = Verdict("warning")
    elif outcome.outcome is Outcome.CORRUPT:
        verdict = Verdict("error", quarantine=f"{what}: {outcome.message}")
    elif outcome.outcome is Outcome.FAILED:
        verdict = Verdict("warning", f"{what}: {outcome.message}")
        prev = ts.failures.get(key)
        n = (prev.count if prev is not None and not prev.lock else 0) + 1
        if n >= settings.retry.max_attempts:
            ts.failures.pop(key, None)
            verdict.quarantine = f"{what} failed {n} times; last: {outcome.message}"
        else:
            delay = settings.retry.backoff(n)
            ts.failures[key] = Failure(n, now + delay, outcome.message)
            record["retry_in_seconds"] = delay
    return verdict


def history_record(
    job: Job, kind: JobKind, outcome: JobOutcome, replica: str, finished_at: float
) -> JobRecord | None:
    """The shared history's entry for a finished job (``None`` for ``nothing_due``, ``claimed`` and
    ``skipped``: a table busy on another replica would otherwise fill its history at every poll)."""
    if outcome.outcome in (Outcome.NOTHING_DUE, Outcome.CLAIMED, Outcome.SKIPPED):
        return None
    return JobRecord(kind=str(kind), action=job.action,
                     instant=job.instant.requested_time if job.instant else None,
                     outcome=str(outcome.outcome), seconds=round(outcome.seconds, 3),
                     message=outcome.message, replica=replica, finished_at=finished_at)
