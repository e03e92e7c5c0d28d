"""The daemon's side of the shared per-table controls: ``ControlsSync`` keeps each ``TableState`` in
step with the store of ``service.table_controls`` (a ``ControlStore``: Redis, else a local SQLite file).

It owns the store once ``loop.Daemon.run`` opens it, and:

- reads every pause and quarantine of the store, and the history of the tables whose jobs changed,
  into the tables' books (``sync``; a quarantine gone from the store is lifted);
- writes what this replica decides (a quarantine, a job's history record, a retry's verdict) through
  an outbox flushed from a worker thread (``flush``), so a slow or unreachable store never blocks the
  event loop; a write that fails waits for the next flush, the oldest dropped past ``OUTBOX_MAX``;
- retries the quarantined tables whose retry is due and that this replica claims first
  (``retry_quarantined``): the cause gone, the quarantine is released, else the retry is recorded
  with its next time; a quarantine soon after a release carries the retry count on
  (``TableState.released_by_retry``), so the backoff keeps growing.

The rules (backoff, who retries, what a pause stops) are in ``service.daemon.loop``'s docstring; the
loop decides when each step runs and what a quarantine does to the table's serving. It mirrors no
Hudi class: the controls are hoodied's own.
"""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import structlog

from hoodied.hoodie.storage_factory import storage_for
from hoodied.service.config import DaemonConfig
from hoodied.service.daemon.jobs import Job
from hoodied.service.daemon.poll import poll_table
from hoodied.service.daemon.registry import Registry
from hoodied.service.daemon.table_state import TableState
from hoodied.service.table_controls import (
    RETRY_CLAIM_S,
    ControlStore,
    ControlStoreError,
    JobRecord,
    Quarantine,
    with_retry,
)

if TYPE_CHECKING:
    from hoodied.hoodie.object_storage import ObjectStoreSettings

__all__ = ["FINAL_FLUSH_S", "OUTBOX_MAX", "STATUS_HISTORY", "ControlsSync", "Host"]

# the loop's logger: these lines were the loop's and keep its name
log = structlog.get_logger("hoodied.loop")

#: Jobs of each table's shared history kept in memory for ``/status``.
STATUS_HISTORY = 10
#: Store writes kept while the store is unreachable (the oldest are dropped past it).
OUTBOX_MAX = 10_000
#: Longest wait for the store's last writes when the daemon stops.
FINAL_FLUSH_S = 3.0


class Host(Protocol):
    """What ``ControlsSync`` reads of the daemon that owns it, at each call (a test may set
    ``replica`` or ``settings`` after the daemon is made)."""

    @property
    def settings(self) -> DaemonConfig: ...
    @property
    def registry(self) -> Registry: ...
    @property
    def replica(self) -> str: ...
    @property
    def draining(self) -> bool: ...
    @property
    def tables(self) -> Mapping[str, TableState]: ...
    @property
    def running(self) -> Mapping[str, Job]: ...


class ControlsSync:
    """The store, its outbox and the quarantine retries of one daemon; see the module docstring.

    ``store_settings`` gives a table's object-store settings, ``error`` adds to the daemon's recent
    errors, ``repoll`` has the loop poll a table again at once (one whose quarantine was lifted)."""

    def __init__(
        self,
        daemon: Host,
        *,
        store_settings: Callable[[str], ObjectStoreSettings | None],
        error: Callable[[str, str], None],
        repoll: Callable[[str], None],
    ) -> None:
        self.daemon = daemon
        self.store: ControlStore | None = None
        """The shared per-table controls (``service.table_controls``), opened by ``Daemon.run``."""
        self.dirty = False
        """A control was changed here (the HTTP API): the loop syncs at once instead of next cycle."""
        self._store_settings = store_settings
        self._error = error
        self._repoll = repoll
        self._outbox: deque[Callable[[ControlStore], None]] = deque(maxlen=OUTBOX_MAX)
        self._history_dirty: set[str] = set()

    def changed(self) -> None:
        """A control was changed here (the HTTP API): the next sync comes at once (``dirty``)."""
        self.dirty = True

    def history_changed(self, uri: str) -> None:
        """The table's timeline changed (a job of another replica may have ended): read its history again."""
        self._history_dirty.add(uri)

    def record(self, ts: TableState, record: JobRecord) -> None:
        """A job's outcome: first in the table's history here, and into the store through the outbox."""
        if ts.history is not None:
            ts.history = [record, *ts.history][:STATUS_HISTORY]
        self._outbox.append(functools.partial(_record, uri=ts.uri, record=record))

    def quarantine(self, ts: TableState, reason: str, instant: str | None) -> None:
        """Write the quarantine the loop just set on ``ts`` (``quarantine``, ``quarantined_at``) for
        every replica, with its first retry time."""
        assert ts.quarantined_at is not None
        settings, replica = self.daemon.settings, self.daemon.replica
        carried, ts.released_by_retry = ts.released_by_retry, None
        retries = 0
        window = settings.controls.quarantine_retry_max_seconds
        if carried is not None and ts.quarantined_at - carried[1] < window:
            retries = carried[0]  # back soon after a retry released it: the backoff goes on growing
        first_retry = ts.quarantined_at + settings.controls.retry_backoff(retries)
        q = Quarantine(reason, ts.quarantined_at, replica, instant, retries=retries,
                       next_retry_at=first_retry)
        ts.stored_quarantine = q
        log.error("table quarantined: left untouched until a retry finds the cause gone or it is released",
                  table=ts.uri, reason=reason, instant=instant,
                  retry_in_seconds=round(first_retry - time.time()))

        def write(store: ControlStore) -> None:
            kept = store.quarantine(ts.uri, q)  # another replica's quarantine, if first, is the one kept
            ts.stored_quarantine, ts.quarantine_stored_at = kept, time.monotonic()

        self._outbox.append(write)

    def lift(self, ts: TableState, why: str) -> None:
        """The quarantine is gone from the store: serve the table again, with fresh books."""
        log.info("table quarantine lifted", table=ts.uri, reason=ts.quarantine, why=why)
        ts.quarantine = ts.quarantined_at = ts.stored_quarantine = ts.quarantine_stored_at = None
        ts.poll_failures = 0
        ts.failures.clear()
        ts.plan_checked.clear()
        self._repoll(ts.uri)

    async def flush(self, *, abandon_on_cancel: bool = False) -> None:
        """Run the writes waiting in the outbox, in a worker thread; failed ones wait for the next flush."""
        if self.store is None or not self._outbox:
            return
        writes = list(self._outbox)
        self._outbox.clear()
        store = self.store

        def run() -> list[Callable[[ControlStore], None]]:
            failed = []
            for i, write in enumerate(writes):
                try:
                    write(store)
                except ControlStoreError as exc:
                    log.warning("table controls: write failed, kept for the next try", error=str(exc))
                    failed = writes[i:]
                    break
            return failed

        failed = await anyio.to_thread.run_sync(run, abandon_on_cancel=abandon_on_cancel)
        # the failed writes go before those queued meanwhile; when full, the oldest are dropped
        self._outbox = deque([*failed, *self._outbox], maxlen=OUTBOX_MAX)

    async def close(self) -> None:
        """The last jobs' history and quarantines, within a bound, then the store is closed."""
        if self.store is None:
            return
        # an unreachable store must not hold the exit past the grace period
        with anyio.CancelScope(shield=True), anyio.move_on_after(FINAL_FLUSH_S):
            await self.flush(abandon_on_cancel=True)
        self.store.close()

    async def sync(self) -> None:
        """Read every pause and quarantine of the store, and the history of tables whose jobs changed."""
        self.dirty = False
        if self.store is None:
            return
        await self.flush()
        store, started = self.store, time.monotonic()
        stale = [u for u, ts in self.daemon.tables.items() if ts.history is None or u in self._history_dirty]
        self._history_dirty.difference_update(stale)

        def read() -> tuple[Any, dict[str, list[JobRecord]]]:
            return store.read_all(), store.histories(stale, STATUS_HISTORY)

        try:
            controls, histories = await anyio.to_thread.run_sync(read)
        except ControlStoreError as exc:
            self._history_dirty.update(stale)
            self._error("table controls", str(exc))
            log.warning("table controls: cannot read them; the last ones read stay in force", error=str(exc))
            return
        for uri, ts in self.daemon.tables.items():
            if uri in histories:
                ts.history = histories[uri]
            c = controls.of(uri)
            if (c.pause is None) != (ts.pause is None):
                log.info("table paused" if c.pause else "table resumed", table=uri,
                         by=c.pause.by if c.pause else None, reason=c.pause.reason if c.pause else None)
            ts.pause = c.pause
            q = c.quarantine
            if q is not None:
                if ts.quarantine is None:
                    log.warning("table quarantined by another replica or before a restart: left untouched",
                                table=uri, reason=q.reason, replica=q.replica)
                ts.quarantine, ts.quarantined_at, ts.stored_quarantine = q.reason, q.at, q
                ts.quarantine_stored_at = min(ts.quarantine_stored_at or started, started)
            elif ts.quarantine is not None and (ts.quarantine_stored_at or math.inf) < started:
                self.lift(ts, "released")

    async def retry_quarantined(self) -> None:
        """Retry the quarantined tables whose retry is due and that this replica claims first."""
        daemon = self.daemon
        if self.store is None or daemon.draining:
            return
        store, replica = self.store, daemon.replica
        for ts in [t for t in daemon.tables.values() if t.stored_quarantine is not None]:
            seen, now = ts.stored_quarantine, time.time()
            if seen is None or seen.next_retry_at > now or ts.uri in daemon.running:
                continue
            try:
                claim = functools.partial(store.claim_retry, ts.uri, replica, now, RETRY_CLAIM_S)
                q = await anyio.to_thread.run_sync(claim)
            except ControlStoreError as exc:
                log.warning("table controls: cannot claim a quarantine retry", table=ts.uri, error=str(exc))
                return
            if q is None:
                continue  # another replica's retry, or one already done (read at the next sync)
            delay = daemon.settings.controls.retry_backoff(q.retries + 1)
            started = time.monotonic()
            cause = await anyio.to_thread.run_sync(self.quarantine_cause, ts, q)
            seconds = round(time.monotonic() - started, 3)
            if cause is None:
                outcome, message = "released", "the cause is gone: quarantine released"
                self._outbox.append(functools.partial(_release, uri=ts.uri, expected=q))
                self.lift(ts, "a retry found the cause gone")
                ts.released_by_retry = (q.retries + 1, time.time())
            else:
                retried = with_retry(q, error=cause, next_at=time.time() + delay)
                ts.stored_quarantine = retried
                outcome, message = "quarantined", f"retry {retried.retries}: {cause}; next in {delay:.0f} s"
                self._outbox.append(functools.partial(_retried, uri=ts.uri, replica=replica, q=retried))
                log.warning("quarantine retry: the cause is still there", table=ts.uri, cause=cause,
                            retries=retried.retries, next_in_seconds=delay)
            record = JobRecord("retry", "quarantine", q.instant, outcome, seconds, message, replica,
                               time.time())
            self._outbox.append(functools.partial(_record, uri=ts.uri, record=record))
            self._history_dirty.add(ts.uri)
        await self.flush()

    def quarantine_cause(self, ts: TableState, q: Quarantine) -> str | None:
        """Why the table must stay quarantined (in a worker thread), or ``None`` when the cause is gone:
        the table reads, and the instant at fault, if any, is no longer pending."""
        settings = self.daemon.settings
        try:
            storage = storage_for(ts.uri, self._store_settings(ts.uri))
            result = poll_table(storage, None, ts.policy, self.daemon.registry, settings.heartbeat)
        except Exception as exc:  # the table still cannot be read: the cause is still there
            return f"cannot read the table: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        if q.instant is not None and any(i.instant.requested_time == q.instant for i in result.pending):
            return f"instant {q.instant} is still pending"
        return None


# the outbox's writes (``ControlsSync.flush`` runs them in a worker thread)


def _record(store: ControlStore, *, uri: str, record: JobRecord) -> None:
    store.record(uri, [record])


def _release(store: ControlStore, *, uri: str, expected: Quarantine | None = None) -> None:
    store.release(uri, expected)


def _retried(store: ControlStore, *, uri: str, replica: str, q: Quarantine) -> None:
    store.retried(uri, replica, q)
