"""The daemon: one anyio task group that watches tables, plans and executes their services.

This module runs the loop; ``service.daemon.table_state`` keeps each table's books and decides
what is ready and what an outcome means, ``service.daemon.status`` renders ``/status`` and the
metrics snapshot, ``service.daemon.jobs`` runs one job in a worker thread. A ``Daemon`` owns
what its jobs share: the registry of executors and planners (``service.daemon.registry.build_registry``
unless one is given) and one ``SparkEngine``, whose session starts with the first Spark job and is
closed when ``run`` ends; with ``spark.start_at_startup`` (not in ``once`` mode) ``run`` starts it in
a thread of its own right away, so the first Spark job finds it started (or waits for that start)
while polls and probes go on.

Root tasks: the work loop (discover, poll, dispatch), the HTTP endpoint
(``service.daemon.http``, on this event loop) and, from the command line, the signal watcher.
Jobs run in a nested task group; every blocking call (listing, planning, executing) goes
through ``anyio.to_thread.run_sync`` with a capacity limiter, so the event loop only does
bookkeeping and keeps answering probes.

One cycle: re-discover tables when due, read the shared controls (``ControlsSync.sync``), poll every
table that is not quarantined (one timeline listing each, ``service.daemon.poll``), retry the
quarantined tables whose retry is due, then dispatch. A job that ends wakes the loop,
which re-polls that table at once and dispatches again, so follow-on work (the clean a plan
just requested) starts without waiting for the next cycle. The poll of a table that is not paused
also removes what a writer killed right after completing an instant left (its markers, heartbeat
and attempt identity: ``hoodie.leftovers``); when that writer was a hoodied job, its ``success``,
which it could not report, is counted then.

Dispatch rules:

- one job per table at a time, across every replica (with Redis, a job first takes its
  table's slot, ``service.daemon.leases``): Hudi's ordering between services on one table is kept
  without a dependency graph, and a table with a large backlog cannot take every worker;
- per table, the oldest pending instant that is ready goes first (pending work before new
  plans); across tables, higher ``priority`` first, then the oldest instant;
- at most ``concurrency.workers`` jobs, and ``concurrency.per_service`` per service;
- the first cycle after start, which parses every timeline, dispatches after each batch of
  tables (``POLL_BATCH``), so work starts before the last table is read; from then on the
  order above holds across all tables;
- an instant without an executor, or one its executor does not support, waits untouched;
  an inflight instant whose heartbeat is alive belongs to another executor.

Failures: a failed job is retried after ``retry.backoff(n)``; after ``retry.max_attempts``
the table is quarantined with the last error as the reason. A job that could not have or keep
the table lock or its lease (``lock_unavailable``: the lock service is down), or that failed on
the storage (``storage_unavailable``) or on the Spark engine (``engine_unavailable``: the server
unreachable, lost mid-job, a local JVM dead) is retried with backoff for as long as that lasts and
never quarantines a table. While the engine is down ``/readyz`` answers 503 and
``hoodied_engine_up`` is 0; each poll cycle asks a Spark Connect server's port (one TCP connect)
and, once it answers, the jobs that waited for the engine are retried at once. A
table whose config or timeline cannot be read (corrupt, unsupported, not found) is
quarantined at once, and a plan or executor that reports a corrupt file quarantines it too.
Every other table keeps being served.

Shared controls (``service.table_controls``; Redis with a Redis lock, else a local SQLite file;
``service.daemon.controls_sync`` keeps the tables' books in step with them): a quarantine is written
to the store, so every replica leaves the table alone and a restart does not clear it; it ends
when ``hoodied table release`` (or ``POST /tables/<table>/release``) lifts it, or when a retry finds
its cause gone. A quarantined table is not polled; its retry is due
``controls.quarantine_retry_seconds`` after the quarantine, then after twice that after each
retry that finds the cause still there, up to ``controls.quarantine_retry_max_seconds``. Only the
replica that claims the retry (``ControlStore.claim_retry``) runs it: it polls the table and, when
the table reads and the instant at fault (if any) is no longer pending, releases the quarantine;
otherwise it records the retry and the next time. A table paused in the store
(``hoodied table pause``) is polled and reported but never planned or executed (a job already
running finishes). Every job's outcome but ``nothing_due`` and ``claimed`` is added to the table's
history by the replica that ran it. Writes to the store go through an outbox flushed from worker
threads (after each job and each poll cycle), so a slow or unreachable store never blocks the
event loop; a write that fails is tried again at the next flush.

Clock (``service.daemon.clock``): each poll cycle starts by measuring this replica's wall clock
against a shared reference (Redis ``TIME``, else an object store's time, else none for local
tables), and a dispatch on a verdict older than ``CLOCK_RECHECK_S`` measures again first (after a
pause of the process, say). While the offset is past ``clock_skew_ms`` allowing for the
measurement's uncertainty, or the clock could not be checked, no job is dispatched and ``/readyz``
answers 503 naming the offset. A skew found while jobs run hands them back at their next safe
point (their commit or rollback would carry the skewed time; the instant stays recoverable by
another replica, as on SIGTERM), and every job measures the clock again right before each instant
time it takes and each completion it writes (``ClockWatch.guard``), so a jump between two polls
writes nothing either; a failed check only holds new work back (Redis or the store
being down stops running jobs by itself, through their leases and writes). Polling goes on, and
work resumes by itself once the clock is back in bounds. So a replica's instants, completion
times and heartbeat-expiry judgements (which only jobs make) all come from a checked clock.

Stopping (``request_stop``, SIGTERM/SIGINT): readiness turns 503, nothing new starts,
running jobs get ``cancel`` set and ``grace_period_seconds`` minus one second to finish;
jobs still running then are abandoned: their leases are released and heartbeats deleted
so another replica can take the instants over, and ``run`` returns (the CLI then exits
without waiting for those threads). ``once`` mode runs one pass, waits for its jobs and
the work they lead to (a plan, then its execution), and returns.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import socket
import time
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

import anyio
import structlog

from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.errors import HoodieFormatError, TableNotFoundError, UnsupportedTableError
from hoodied.hoodie.storage import OBJECT_STORE_SCHEMES, STORAGE_REQUESTS, Storage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.service.config import DaemonConfig, DiscoverRoot
from hoodied.service.daemon import jobs as joblib
from hoodied.service.daemon.clock import ClockCheck, ClockState, ClockWatch, ObjectStoreClock, RedisClock
from hoodied.service.daemon.controls_sync import ControlsSync
from hoodied.service.daemon.http import listen, serve_http
from hoodied.service.daemon.jobs import (
    COUNTED_ARCHIVAL_OUTCOMES,
    COUNTED_JOB_OUTCOMES,
    COUNTED_PLAN_OUTCOMES,
    Job,
    JobKind,
    JobOutcome,
    Outcome,
    is_storage_outage,
)
from hoodied.service.daemon.metrics import Metrics, StateSnapshot
from hoodied.service.daemon.poll import PollResult, discover_tables, poll_table
from hoodied.service.daemon.registry import FAILED_WRITES_ROLLED_BACK, Registry, build_registry
from hoodied.service.daemon.status import state_snapshot, status_document
from hoodied.service.daemon.table_state import (
    Candidate,
    TableState,
    history_record,
    next_for_table,
    record_outcome,
)
from hoodied.service.locks import RedisLockFactory
from hoodied.service.spark_jobs import SPARK_SERVICES, SparkEngine
from hoodied.service.table_controls import ControlStore, ControlStoreError, open_store

if TYPE_CHECKING:
    from hoodied.hoodie.object_storage import ObjectStoreSettings

__all__ = ["Daemon", "TableState"]

log = structlog.get_logger("hoodied.loop")

#: Most tables one poll thread takes in one hand-off.
POLL_BATCH = 64
#: During the first cycle, the tables polled so far are looked at for work at most this often (seconds).
FIRST_DISPATCH_S = 1.0
#: A clock verdict older than this is measured again before jobs are dispatched on it.
CLOCK_RECHECK_S = 5.0


class Daemon:
    """Run with ``await Daemon(settings).run()``; see the module docstring."""

    def __init__(
        self, settings: DaemonConfig, *, once: bool = False, registry: Registry | None = None
    ) -> None:
        self.settings = settings
        self.once = once
        self.registry = registry or build_registry()
        self.engine = SparkEngine(start_timeout_s=settings.spark.start_timeout_seconds,
                                  retry_s=settings.spark.retry_seconds, log_changes=True,
                                  log_level=settings.spark.log_level)
        """The Spark session of every table's Spark jobs: started by the first (or ahead of it,
        ``spark.start_at_startup``), closed when ``run`` ends."""
        self.tables: dict[str, TableState] = {
            t.path: TableState(t.path, t.policy, "config") for t in settings.tables
        }
        self.running: dict[str, Job] = {}
        self.abandoned: list[Job] = []
        self.draining = False
        self.stop_reason: str | None = None
        self.started_at = time.time()
        self.last_cycle_end: float | None = None
        self.last_cycle_seconds: float | None = None
        self.last_cycle_requests: dict[str, int] | None = None
        """Object-store requests sent while the last poll cycle ran, by operation."""
        self.recent_errors: deque[dict[str, Any]] = deque(maxlen=20)
        self.problems_in_pass = 0
        self.unlisted_roots: set[str] = set()
        """Discover roots whose last listing failed (``hoodied run --once`` exits 8 for them)."""
        self.http_port: int | None = None
        self.replica = f"{socket.gethostname()}:{os.getpid()}"
        self.clock = ClockWatch(settings.clock_skew_ms / 1000)
        """The verdict on this replica's clock (``service.daemon.clock``): no job starts unless it allows."""
        self._clock_lock: anyio.Lock | None = None
        self.metrics = Metrics(self.snapshot)
        self._counted: set[str] = set()
        """Tables whose counters were started at 0 (``_count_from_zero``)."""
        self._first_dispatch_at = 0.0
        """The first cycle dispatches after a batch from this moment on (monotonic; ``_poll_batch``)."""
        self.factory: RedisLockFactory | None = None
        self.controls = ControlsSync(self, store_settings=self._store_settings, error=self._error,
                                     repoll=self._repoll)
        """The shared per-table controls: the store, its outbox, the quarantine retries."""
        self._touched: set[str] = set()
        self._stop_at = math.inf
        self._wake: anyio.Event | None = None
        self._jobs_tg: anyio.abc.TaskGroup | None = None
        self._job_limiter: anyio.CapacityLimiter | None = None
        self._poll_limiter: anyio.CapacityLimiter | None = None

    # ------------------------------------------------------------------ running

    async def run(self, *, handle_signals: bool = False) -> int:
        """Serve until stopped (or one pass with ``once``); the process exit code."""
        s = self.settings
        self._wake = anyio.Event()
        self._make_limiters()
        address = s.http.host_port
        listener = None
        if address is not None:
            listener, self.http_port = await listen(*address)  # fails here, plainly, when the port is taken
        if s.lock.is_redis:
            self.factory = RedisLockFactory(s.lock.url, s.lock.table_lock_settings())
        try:
            self.store = open_store(s, self.factory)
        except ControlStoreError:
            if self.factory is not None:
                self.factory.close()
            if listener is not None:
                await listener.aclose()
            raise
        log.info("daemon starting", tables=len(self.tables), roots=len(s.discover), lock=self.lock_where(),
                 workers=s.concurrency.workers, once=self.once, replica=self.replica)
        if s.spark.start_at_startup and not self.once and self._runs_spark():
            # Spark's start-up (seconds) overlaps the first polls; closed with the engine in ``finally``
            self.engine.start_in_background(s.spark.master, s.spark.conf)
        try:
            async with anyio.create_task_group() as root:
                if listener is not None and address is not None:
                    root.start_soon(serve_http, listener, self)
                    log.info("http listening", address=f"{address[0]}:{self.http_port}")
                if handle_signals:
                    root.start_soon(self._watch_signals)
                async with anyio.create_task_group() as jobs:
                    self._jobs_tg = jobs
                    await self._work()
                    await self._drain(jobs)
                root.cancel_scope.cancel()
        finally:
            if listener is not None:
                with anyio.CancelScope(shield=True):
                    await listener.aclose()
            for job in self.abandoned:
                job.release_after_abandon()
            # jobs are over or abandoned (their instants stay recoverable); after a stop request
            # the session gets what is left of the grace period (at least a second) to stop, so a
            # dead engine cannot hold the exit up
            left = None
            if self.draining:
                left = max(self._stop_at + self.settings.grace_period_seconds - time.monotonic() - 0.5, 1.0)
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(functools.partial(self.engine.close, left))
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.clock.close)
            await self.controls.close()
            if self.factory is not None:
                self.factory.close()
        why = self.stop_reason or ("one pass done" if self.once else "stopped")
        quarantined = sum(1 for t in self.tables.values() if t.quarantine)
        log.info("daemon stopped", reason=why, abandoned_jobs=len(self.abandoned), quarantined=quarantined)
        if self.once and (self.problems_in_pass or quarantined or not self.clock.current.allows_work):
            return 1  # a pass that left work undone for a skewed or unchecked clock did not succeed
        return 0

    def _runs_spark(self) -> bool:
        """Whether an executor of a Spark service is registered (a build without them starts no Spark)."""
        return any(spec.service in SPARK_SERVICES for spec in self.registry.executors.values())

    def _make_limiters(self) -> None:
        # created on the event loop: anyio limiters belong to the loop that made them
        self._job_limiter = anyio.CapacityLimiter(self.settings.concurrency.workers)
        self._poll_limiter = anyio.CapacityLimiter(self.settings.concurrency.poll_threads)

    def request_stop(self, reason: str) -> None:
        """Stop taking work; running jobs get the grace period (a second request ends it at once)."""
        now = time.monotonic()
        if self.draining:
            self._stop_at = -math.inf
            log.warning("second stop request: not waiting for running jobs", reason=reason)
        else:
            self.draining = True
            self.stop_reason = reason
            self._stop_at = now
            log.info("stopping: no new work", reason=reason, running=len(self.running),
                     grace_seconds=self.settings.grace_period_seconds)
        for job in self.running.values():
            job.cancel.set()
        self._poke()

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.request_stop(f"received {signal.Signals(signum).name}")

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _repoll(self, uri: str) -> None:
        """Poll the table again at once (and dispatch its work)."""
        self._touched.add(uri)
        self._poke()

    async def _sleep(self, seconds: float | None) -> None:
        """Sleep until woken (a job ended, a stop request) or ``seconds`` passed."""
        assert self._wake is not None
        if seconds is None:
            await self._wake.wait()
        else:
            with anyio.move_on_after(max(seconds, 0)):
                await self._wake.wait()
        self._wake = anyio.Event()

    async def _work(self) -> None:
        s = self.settings
        next_discover = 0.0
        while not self.draining:
            started = time.monotonic()
            if s.discover and started >= next_discover:
                await self._discover()
                next_discover = time.monotonic() + s.discover_interval_seconds
            await self.poll_cycle(started)
            if self.once:
                while not self.draining:
                    await self._repoll_touched()
                    if not self.running and not self._touched:
                        return
                    await self._sleep(None)
                return
            deadline = started + s.poll_interval_seconds
            while not self.draining and time.monotonic() < deadline:
                await self._sleep(deadline - time.monotonic())
                if self.controls.dirty:
                    await self.controls.sync()
                await self._repoll_touched()

    async def poll_cycle(self, started: float | None = None) -> float:
        """One poll of every table that is not quarantined, then dispatch; the cycle's seconds."""
        started = time.monotonic() if started is None else started
        if self._poll_limiter is None:
            self._make_limiters()
        await self._check_clock(force=True)  # its probe requests are not the poll's
        await self.controls.sync()
        before = STORAGE_REQUESTS.snapshot()
        await self._poll([t for t in self.tables.values() if not t.quarantine])
        after = STORAGE_REQUESTS.snapshot()
        self.last_cycle_requests = {op: n - before.get(op, 0) for op, n in after.items()
                                    if n > before.get(op, 0)}
        self.last_cycle_seconds = time.monotonic() - started
        self.last_cycle_end = time.time()
        self.metrics.poll_cycle.observe(self.last_cycle_seconds)
        await self.controls.retry_quarantined()
        await self._engine_back()
        await self._check_clock()
        self._dispatch()
        await self.controls.flush()
        return self.last_cycle_seconds

    async def _engine_back(self) -> None:
        """While the Spark engine is down: once its server answers again, the jobs that waited for it
        are retried now instead of at the end of their backoff."""
        if self.engine.up is not False or not await anyio.to_thread.run_sync(self.engine.reachable):
            return
        now = time.monotonic()
        for ts in self.tables.values():
            for failure in ts.failures.values():
                if failure.engine:
                    failure.next_at = min(failure.next_at, now)

    async def _repoll_touched(self) -> None:
        touched = [self.tables[u] for u in self._touched if u in self.tables]
        self._touched.clear()
        await self._poll([t for t in touched if not t.quarantine])
        await self._check_clock()
        self._dispatch()

    async def _drain(self, jobs: anyio.abc.TaskGroup) -> None:
        budget = max(self.settings.grace_period_seconds - 1.0, 0.0)
        while self.running:
            left = self._stop_at + budget - time.monotonic()
            if left <= 0:
                break
            await self._sleep(left)
        if self.running:
            log.warning("grace period over: abandoning running jobs", jobs=len(self.running))
            for job in self.running.values():
                job.abandoned = True
                self.abandoned.append(job)
            jobs.cancel_scope.cancel()

    # ------------------------------------------------------------------ discovery and polling

    async def _discover(self) -> None:
        found: dict[str, DiscoverRoot] = {}
        failed = self.unlisted_roots = set()
        for root in self.settings.discover:
            try:
                paths = await anyio.to_thread.run_sync(
                    discover_tables, root.root, root.max_depth, self._store_settings(root.root)
                )
            except Exception as exc:  # an object store that does not answer: keep its tables as they are
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                failed.add(root.root)
                self._error(root.root, f"discovery failed: {message}")
                log.warning("discovery failed: the tables found before are kept", root=root.root,
                            error=message)
                continue
            if not paths:
                log.warning("discover root holds no tables", root=root.root)
            for p in paths:
                found.setdefault(p, root)
        for path, root in found.items():
            if path not in self.tables:
                self.tables[path] = TableState(path, self.settings.policy_for(path, root), root.root)
                log.info("table discovered", table=path, root=root.root)
        for uri, ts in list(self.tables.items()):
            kept = ts.source == "config" or ts.source in failed or uri in found or uri in self.running
            if not kept:
                self._forget(uri)
                log.info("table gone from its discover root", table=uri, root=ts.source)

    async def _poll(self, tables: list[TableState]) -> None:
        # tables go to the poll threads in batches: an unchanged table costs one stat, far less
        # than a thread hand-off (bench/poll.py)
        size = max(1, min(POLL_BATCH, math.ceil(len(tables) / self.settings.concurrency.poll_threads)))
        async with anyio.create_task_group() as tg:
            for i in range(0, len(tables), size):
                tg.start_soon(self._poll_batch, tables[i:i + size])

    def _store_settings(self, uri: str) -> ObjectStoreSettings | None:
        """The object-store client settings for ``uri`` (``None`` for a local path)."""
        if uri.split("://", 1)[0].lower() not in OBJECT_STORE_SCHEMES or "://" not in uri:
            return None
        return self.settings.object_store.settings()

    def _open_and_poll(self, ts: TableState, storage: Storage | None) -> tuple[Storage, PollResult]:
        storage = storage or storage_for(ts.uri, self._store_settings(ts.uri))
        # a paused table's files are left alone, its completed instants' leftovers too
        return storage, poll_table(storage, ts.poll, ts.policy, self.registry, self.settings.heartbeat,
                                   tidy=not (ts.policy.paused or ts.pause))

    def _poll_many(self, batch: list[TableState]) -> list[tuple[Storage, PollResult] | Exception]:
        out: list[tuple[Storage, PollResult] | Exception] = []
        for ts in batch:
            try:
                out.append(self._open_and_poll(ts, ts.storage))
            except Exception as exc:  # one table's trouble stays with that table
                out.append(exc)
        return out

    async def _poll_batch(self, batch: list[TableState]) -> None:
        results = await anyio.to_thread.run_sync(self._poll_many, batch, limiter=self._poll_limiter)
        for ts, got in zip(batch, results, strict=True):
            if isinstance(got, Exception):
                self._poll_failed(ts, got)
                continue
            ts.storage, result = got
            if ts.poll is None or ts.poll.signature != result.signature:
                self.controls.history_changed(ts.uri)  # a job of another replica may have ended
            ts.poll, ts.poll_failures = result, 0
            if ts.uri not in self._counted:
                self._count_from_zero(ts, result)
            self._tidied(ts, result)
            live = {i.instant.requested_time for i in result.pending}
            for book in (ts.failures, ts.holds, ts.waiting):
                for key in [k for k in book if not k.startswith("plan:") and k not in live]:
                    del book[key]
        if self.last_cycle_end is None and time.monotonic() >= self._first_dispatch_at:
            # the first cycle reads every timeline (seconds for 10,000 tables): work starts with the
            # tables polled so far instead of waiting for the last one; looked at again at most every
            # FIRST_DISPATCH_S, as each look goes over every table polled so far (after every batch of
            # 10,000 tables, 1.2 s of CPU: bench/poll.py)
            self._first_dispatch_at = time.monotonic() + FIRST_DISPATCH_S
            await self._check_clock()
            self._dispatch()

    def _tidied(self, ts: TableState, result: PollResult) -> None:
        """Book the completed instants whose leftovers the poll removed: one whose hoodied attempt
        died right after completing it never had its success counted, so it is counted now."""
        for left, service in result.leftovers_removed:
            log.info("completed instant's leftovers removed", table=ts.uri, instant=left.instant_time,
                     removed=left.describe(), service=service.label if service is not None else None)
            if left.attempt and service is not None:
                self.metrics.jobs.labels(ts.uri, service.label, Outcome.SUCCESS).inc()

    def _forget(self, uri: str) -> None:
        """Stop watching a table: its state and its counter series go."""
        self.tables.pop(uri, None)
        self._counted.discard(uri)
        self.metrics.forget_table(uri)

    def _count_from_zero(self, ts: TableState, result: PollResult) -> None:
        """The table's job and plan counters at 0 for the services it runs (``Metrics.track_table``)."""
        self._counted.add(ts.uri)
        if ts.policy.paused:
            return
        services = ts.policy.services
        runs = [s for s in TableService
                if result.config.is_mor or s not in (TableService.COMPACTION, TableService.LOG_COMPACTION)]
        # archival writes no instant: its one job is a plan job that archives
        jobs = {s.label: COUNTED_JOB_OUTCOMES for s in runs if s.writes_instants and services.get(s).enabled}
        plans = {s.label: COUNTED_PLAN_OUTCOMES if s.writes_instants else COUNTED_ARCHIVAL_OUTCOMES
                 for s in runs if services.schedules(s)}
        self.metrics.track_table(ts.uri, jobs, plans)

    def _poll_failed(self, ts: TableState, exc: Exception) -> None:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, TableNotFoundError) and ts.source != "config":
            self._forget(ts.uri)
            log.info("table gone", table=ts.uri, error=message)
            return
        if isinstance(exc, HoodieFormatError | UnsupportedTableError | TableNotFoundError):
            self._quarantine(ts, f"cannot read the table: {message}")
            return
        ts.poll, ts.poll_failures = None, ts.poll_failures + 1
        self._error(ts.uri, f"poll failed: {message}")
        if is_storage_outage(exc):
            # the storage, not the table: polled again next cycle for as long as it lasts
            log.warning("poll failed: storage unavailable", table=ts.uri, error=message,
                        failures=ts.poll_failures)
        elif ts.poll_failures >= self.settings.retry.max_attempts:
            last = f"{type(exc).__name__}: {message}"
            self._quarantine(ts, f"{ts.poll_failures} polls failed in a row; last: {last}")
        else:
            log.warning("poll failed", table=ts.uri, error=message, failures=ts.poll_failures,
                        exc_info=not isinstance(exc, OSError | HoodieFormatError))

    def _quarantine(self, ts: TableState, reason: str, instant: str | None = None) -> None:
        """Quarantine the table here at once and, through the outbox, for every replica."""
        if ts.quarantine is not None:
            return
        ts.quarantine, ts.quarantined_at = reason, time.time()
        self.problems_in_pass += 1
        self._error(ts.uri, f"quarantined: {reason}")
        self.controls.quarantine(ts, reason, instant)

    # ------------------------------------------------------------------ shared controls

    @property
    def store(self) -> ControlStore | None:
        """The shared per-table controls (``service.table_controls``), opened by ``run``."""
        return self.controls.store

    @store.setter
    def store(self, store: ControlStore | None) -> None:
        self.controls.store = store

    def controls_changed(self) -> None:
        """A control was changed here (the HTTP API): read the store again at once."""
        self.controls.changed()
        self._poke()

    def _error(self, table: str, message: str) -> None:
        self.recent_errors.appendleft({"at": time.time(), "table": table, "error": message})

    # ------------------------------------------------------------------ clock

    def _clock_reference(self) -> RedisClock | ObjectStoreClock | None:
        """What this replica's clock is compared with: Redis, else one watched object-store table
        (the one already probed while it is still watched), else nothing (local tables only)."""
        current = self.clock.reference
        if self.factory is not None:
            return current if isinstance(current, RedisClock) else RedisClock(self.factory)
        stores = sorted(t.uri for t in self.tables.values()
                        if not t.quarantine and self._store_settings(t.uri) is not None)
        if isinstance(current, ObjectStoreClock) and current.table in stores:
            return current
        if not stores:
            return None
        ts = self.tables[stores[0]]
        storage = ts.storage
        if storage is None:
            # not polled yet (the first cycle checks first): a client without a request, where
            # storage_for would list the table from the event loop
            from hoodied.hoodie.object_storage import ObjectStorage

            storage = ObjectStorage.connect(ts.uri, self._store_settings(ts.uri))
        return ObjectStoreClock(storage, self.replica, ts.uri)

    def _measure_clock(self, reference: RedisClock | ObjectStoreClock | None) -> ClockCheck:
        # in a worker thread: replacing a probe deletes the old one, and a measurement waits on the network
        self.clock.use(reference)
        return self.clock.measure()

    async def _check_clock(self, *, force: bool = False) -> None:
        """Measure the clock (every poll cycle, and before dispatching on a verdict older than
        ``CLOCK_RECHECK_S``); a skew found now hands running jobs back at their next safe point."""
        if self._clock_lock is None:
            self._clock_lock = anyio.Lock()
        async with self._clock_lock:
            if not force and time.monotonic() - self.clock.current.at < CLOCK_RECHECK_S:
                return
            check = await anyio.to_thread.run_sync(self._measure_clock, self._clock_reference())
            self.clock.record(check)
        told = [job for job in self.running.values() if not job.cancel.is_set()]
        if check.state is ClockState.SKEWED and told:
            # a job on this replica would stamp its commit or a rollback with the skewed clock:
            # it stops at its next safe point and hands the instant back, as on SIGTERM
            log.warning("clock skewed: handing running jobs back", jobs=len(told))
            for job in told:
                job.cancel.set()

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self) -> None:
        if self.draining or self._jobs_tg is None:
            return
        now = time.monotonic()
        if not self.clock.allows_work(now):
            return  # a skewed or unchecked clock sets no instant time (service.daemon.clock)
        candidates = []
        for ts in self.tables.values():
            if ts.quarantine or ts.poll is None or ts.policy.paused or ts.pause or ts.uri in self.running:
                continue
            c = next_for_table(ts, self.registry, now)
            if c is not None:
                candidates.append(c)
        candidates.sort(key=lambda c: c.sort_key)
        busy = Counter(j.service for j in self.running.values())
        limits = self.settings.concurrency.per_service
        for c in candidates:
            if len(self.running) >= self.settings.concurrency.workers:
                break
            limit = limits.get(c.service)
            if limit is not None and busy[c.service] >= limit:
                continue
            busy[c.service] += 1
            self._start(c)

    def _start(self, c: Candidate) -> None:
        ts = c.table
        assert ts.poll is not None and ts.storage is not None and self._jobs_tg is not None
        instant = c.item.instant if c.item is not None else None
        # the service's action names the job in logs and metrics (a v6 clustering replacecommit: clustering;
        # archival, which has no action: archival)
        action = c.service.label
        job = Job(ts.uri, ts.storage, ts.poll.config, c.service, action, ts.policy, instant, ts.poll.timeline,
                  clock_guard=self.clock.guard)
        self.running[ts.uri] = job
        self._jobs_tg.start_soon(self._run_job, ts, job, c.kind)

    async def _run_job(self, ts: TableState, job: Job, kind: JobKind) -> None:
        instant = job.instant.requested_time if job.instant is not None else None
        with structlog.contextvars.bound_contextvars(table=ts.uri, action=job.action, instant=instant):
            log.info("job started", kind=kind, state=job.instant.state.value if job.instant else None)
            try:
                outcome = await anyio.to_thread.run_sync(
                    self._work_of(job, kind), limiter=self._job_limiter, abandon_on_cancel=True
                )
            except anyio.get_cancelled_exc_class():
                log.warning("job abandoned: the daemon stops while it runs")
                raise
            except Exception as exc:  # the runners catch the work's errors; this is a bug of ours
                log.exception("job runner failed")
                outcome = JobOutcome(Outcome.FAILED, f"{type(exc).__name__}: {exc}", retryable=True)
            self._finish(ts, job, kind, outcome)
            await self.controls.flush()

    def _work_of(self, job: Job, kind: JobKind) -> functools.partial[JobOutcome]:
        """The job's runner with its arguments, for a worker thread."""
        observe = self.metrics.lock_wait.labels(job.action).observe
        if kind == JobKind.PLAN:
            planner = self.registry.planners[job.service]
            return functools.partial(joblib.plan, job, planner, self.settings, self.factory, observe)
        executor = self.registry.executor_for(job.service.action)
        if executor is None:  # dispatch checks first (table_state.item_status): a bug of ours
            raise LookupError(f"no executor for {job.service}")
        return functools.partial(
            joblib.execute, job, executor, self.settings, self.factory, observe, self.engine
        )

    def _finish(self, ts: TableState, job: Job, kind: JobKind, outcome: JobOutcome) -> None:
        self.running.pop(ts.uri, None)
        self._touched.add(ts.uri)
        self._poke()
        if kind == JobKind.EXECUTE:
            self.metrics.jobs.labels(ts.uri, job.action, outcome.outcome).inc()
            self.metrics.job_duration.labels(job.action, outcome.outcome).observe(outcome.seconds)
        else:
            self.metrics.plans.labels(ts.uri, job.action, outcome.outcome).inc()
        rolled = outcome.counts.get(FAILED_WRITES_ROLLED_BACK, 0)
        if rolled:
            self.metrics.failed_writes.labels(ts.uri).inc(rolled)
            ts.failed_writes_rolled_back += rolled
        if outcome.archival is not None:
            ts.last_archival = (time.time(), outcome.archival)
            ts.instants_archived += outcome.archival.total
            self.metrics.instants_archived.labels(ts.uri).inc(outcome.archival.total)
        verdict = record_outcome(ts, job, kind, outcome, self.settings, time.monotonic())
        record = history_record(job, kind, outcome, self.replica, time.time())
        if record is not None:
            self.controls.record(ts, record)
        if verdict.error is not None:
            self.problems_in_pass += 1
            self._error(ts.uri, verdict.error)
        if verdict.quarantine is not None:
            self._quarantine(ts, verdict.quarantine, job.instant.requested_time if job.instant else None)
        getattr(log, verdict.level)("job ended", kind=kind, outcome=outcome.outcome, message=outcome.message,
                                    seconds=round(outcome.seconds, 3))

    # ------------------------------------------------------------------ views

    def lock_where(self) -> str:
        return self.factory.where if self.factory is not None else "local"

    def snapshot(self) -> StateSnapshot:
        return state_snapshot(self)

    def loop_heartbeat_age(self) -> float:
        return time.time() - (self.last_cycle_end or self.started_at)

    def status(self) -> dict[str, Any]:
        """The ``/status`` document (``hoodied status`` renders it)."""
        return status_document(self)
