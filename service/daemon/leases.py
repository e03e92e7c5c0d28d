"""Execution leases: at most one executor per instant across every replica of the daemon.

A lease is a lock on one (table, instant) pair, taken with one non-blocking try before a job
starts and released when it ends. It is built from the table-lock implementations of
``service.locks``, so it has their guarantees (compare-and-delete release, loss detection):

- Redis (several replicas): key ``hoodied:lease:{<base>}:<instant>`` set with ``NX PX`` and
  renewed every third of ``lock.instant_lease_ms`` on the lock factory's own event-loop
  thread, so it keeps being renewed while the job's worker thread is busy. When a replica
  dies, its leases lapse and another replica takes the instant over. The fencing counter
  is one per table (``hoodied:lease:{<base>}:fence``), not one per instant, so keys do not
  pile up in Redis.
- local (one replica): a ``flock`` on ``.hoodie/.locks/lease-<instant>.lock``; the file is
  removed while still locked, so a process that opened the old file cannot lock it after us.
- local, table on an object store (one replica): ``ProcessLease``, held in this process's
  memory. Without Redis the daemon is one replica (``lock.url: local`` means "one host, one
  replica"; the Helm chart runs one replica unless a Redis URL is given), so the only other
  executors of the instant are outside hoodied, and those the heartbeat check under the table
  lock (``service.locks.lock_from_option("auto", ...)``: a lock kept in the bucket) turns
  away. A lease stored in the bucket would cost requests on every job for no added safety.

The lease guards the daemon's own replicas. Hudi's heartbeat (checked by every executor
under the table lock) guards against any other executor of the instant.

Table slots (Redis only): before an instant's lease, a job takes its table's slot,
``hoodied:slot:{<base>}`` (same lease time and renewal, its own fencing counter), so one table
runs one job at a time across every replica, as the loop already ensures within one replica.
That keeps Hudi's ordering between the services of a table (oldest pending instant first; a
clean never runs beside another clean; a compaction, log compaction or clustering never beside
another service's work on the same table, whose plan may name the same file groups when
another writer planned it) without a dependency graph. Planning needs no slot: planners run
under the table lock and leave out file groups that pending services hold.

What Redis cannot keep: a Redis restarted empty (or flushed) loses every slot and lease, and its
fencing counters start again at 1, while the jobs that held them go on. The slot and the lease
are therefore the cheap first filter, not the guarantee. The guarantee is kept in the table and
checked under the table lock before any attempt starts (``hoodie.fence``): an instant is written
only by the attempt whose identity is in ``.hoodie/.locks/attempts/<T>``, and no attempt starts
while another instant of its table has a live attempt (its identity present, its heartbeat
fresh). The Redis counters only number the holders in logs; nothing compares them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Iterator
from typing import ClassVar

from hoodied.hoodie.locks import LockSettings, TableLockBase
from hoodied.hoodie.storage import Storage
from hoodied.service.locks import LocalFileLock, RedisLockFactory, RedisTableLock

__all__ = [
    "LocalLease", "ProcessLease", "RedisLease", "RedisSlot", "lease_key", "make_lease", "make_table_slot",
    "slot_key",
]


def lease_key(base_uri: str, instant_time: str) -> str:
    """``hoodied:lease:{<base>}:<instant>`` (the braces keep one table's keys in one cluster slot)."""
    base = base_uri.rstrip("/") or "/"
    return "hoodied:lease:{" + base + "}:" + instant_time


class RedisLease(RedisTableLock):
    """A ``RedisTableLock`` on the instant's lease key."""

    def __init__(self, factory: RedisLockFactory, base_uri: str, instant_time: str, settings: LockSettings):
        super().__init__(factory, base_uri, settings)
        self._key = lease_key(base_uri, instant_time)
        self.fence_key = lease_key(base_uri, "fence")


def slot_key(base_uri: str) -> str:
    """``hoodied:slot:{<base>}``: the table's job slot across replicas."""
    return "hoodied:slot:{" + (base_uri.rstrip("/") or "/") + "}"


class RedisSlot(RedisTableLock):
    """A ``RedisTableLock`` on the table's job slot (fencing counter ``<slot key>:fence``)."""

    def __init__(self, factory: RedisLockFactory, base_uri: str, settings: LockSettings):
        super().__init__(factory, base_uri, settings)
        self._key = slot_key(base_uri)
        self.fence_key = self._key + ":fence"


class LocalLease(LocalFileLock):
    """A ``LocalFileLock`` on ``.hoodie/.locks/lease-<instant>.lock``."""

    def __init__(self, storage: Storage, instant_time: str, settings: LockSettings):
        super().__init__(storage, settings)
        self._key = lease_key(storage.base_uri, instant_time)
        path = storage.local_path(f".hoodie/.locks/lease-{instant_time}.lock")
        fence = storage.local_path(".hoodie/.locks/lease.fence")
        assert path is not None and fence is not None  # LocalFileLock checked the storage is local
        self.path, self.fence_path = path, fence

    def _release(self) -> None:
        # unlink while the flock is still ours: anyone who opened the old file fails its same-file check
        with contextlib.suppress(FileNotFoundError):
            if self._fd is not None and self._same_file(self._fd):
                os.unlink(self.path)
        super()._release()


class ProcessLease(TableLockBase):
    """A lease held in this process's memory (object-store tables without Redis: one replica)."""

    #: the lease keys held in this process, shared by every ``ProcessLease``
    _held: ClassVar[set[str]] = set()
    _guard: ClassVar[threading.Lock] = threading.Lock()
    _tokens: ClassVar[Iterator[int]] = itertools.count(1)

    def __init__(self, storage: Storage, instant_time: str, settings: LockSettings):
        super().__init__(lease_key(storage.base_uri, instant_time), settings)

    def _describe(self) -> str:
        return f"in-process lease {self._key}"

    def _try_acquire(self, wait_s: float) -> int | None:
        # leases are taken with wait 0 (one try): a busy lease is another job of this process
        with self._guard:
            if self._key in self._held:
                return None
            self._held.add(self._key)
            return next(self._tokens)

    def _check_held(self) -> str | None:
        with self._guard:
            return None if self._key in self._held else "the lease is no longer held by this process"

    def _release(self) -> None:
        with self._guard:
            self._held.discard(self._key)


def make_lease(
    factory: RedisLockFactory | None, storage: Storage, instant_time: str, settings: LockSettings
) -> TableLockBase:
    """The lease of ``instant_time`` (Redis when a factory is given, else local: a file lock, or
    in memory for a table on an object store); not yet acquired."""
    if factory is not None:
        return RedisLease(factory, storage.base_uri, instant_time, settings)
    if storage.local_path() is None:
        return ProcessLease(storage, instant_time, settings)
    return LocalLease(storage, instant_time, settings)


def make_table_slot(
    factory: RedisLockFactory | None, storage: Storage, settings: LockSettings
) -> TableLockBase | None:
    """The table's job slot (Redis), or ``None`` with the local lock (one replica: the loop's own rule)."""
    if factory is None:
        return None
    return RedisSlot(factory, storage.base_uri, settings)
