"""The table lock, as the timeline writer sees it: a small synchronous interface.

Every timeline write of hoodied happens while holding the table's lock, and the writer calls
``ensure_held()`` right before each write: a holder that lost its lock (lease expired while
the process was paused, lock taken over, lock service unreachable) gets ``LockLostError``
and must not write again. Timeline files are write-once, so even a stale holder that races
past the check cannot overwrite what the next owner wrote.

This module owns the interface (``TableLock``), the shared acquire policy (wait, retries,
one clear ``LockUnavailableError``), the lock key of a table, an in-process lock for
single-process use and tests, and the read-only view of a lock (``InspectableLock``: where it
lives, ``LockLocation``, and who holds it now, ``LockHolder``) that ``hoodied inspect`` shows.
The implementations that talk to a lock service (Redis) or to the operating system (file
locks) live in ``service.locks``; ``hoodie`` stays free of them.

Lock key grammar: ``"hoodied:lock:{" + base + "}"`` where ``base`` is the table's base URI
without a trailing ``/`` (the braces make it a Redis Cluster hash tag, so the lock and its
fencing counter live in one slot).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Protocol, runtime_checkable

from hoodied.hoodie.errors import LockLostError, LockServiceDownError, LockUnavailableError

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_INSPECT_TIMEOUT_S",
    "InProcessLock",
    "InspectableLock",
    "LockBackendError",
    "LockHolder",
    "LockLocation",
    "LockSettings",
    "TableLock",
    "TableLockBase",
    "bump_fence_file",
    "lock_key",
    "utc_from_ms",
]


@dataclass(frozen=True, slots=True)
class LockSettings:
    """How long and how often to try for a table lock, and how long a lease lasts."""

    wait_ms: int = 60_000
    """One attempt waits this long for a lock another holder has (``hoodie.write.lock.wait_time_ms``)."""
    retries: int = 3
    """Further attempts after a failed one (lock still busy, or the lock service unreachable)."""
    retry_interval_ms: int = 1_000
    """Pause between attempts (``hoodie.write.lock.wait_time_ms_between_retry``)."""
    lease_ms: int = 60_000
    """Lease of a lock held in a lock service; renewed every third of it while held."""
    poll_ms: int = 100
    """How often a waiting attempt looks again whether the lock became free."""

    def __post_init__(self) -> None:
        if self.wait_ms < 0 or self.retries < 0 or self.retry_interval_ms < 0:
            raise ValueError("lock wait, retries and retry interval must not be negative")
        if self.lease_ms < 100:
            raise ValueError(f"lock lease of {self.lease_ms} ms is too short (at least 100 ms)")
        if self.poll_ms <= 0:
            raise ValueError("lock poll interval must be positive")


def lock_key(base_uri: str) -> str:
    """The lock key of the table at ``base_uri`` (see the module docstring for the grammar)."""
    base = base_uri.rstrip("/") or "/"
    return "hoodied:lock:{" + base + "}"


@runtime_checkable
class TableLock(Protocol):
    """What the timeline writer needs from a table lock."""

    @property
    def key(self) -> str: ...

    @property
    def is_held(self) -> bool: ...

    @property
    def fencing_token(self) -> int | None:
        """Strictly increasing number handed to each new holder of this key; ``None`` when not held."""
        ...

    def acquire(self) -> int:
        """Take the lock (waiting and retrying as configured); returns the fencing token."""
        ...

    def release(self) -> None:
        """Give the lock back; a no-op when not held."""
        ...

    def ensure_held(self) -> None:
        """Raise ``LockLostError`` unless this holder still owns the lock (called right before each write)."""
        ...

    def __enter__(self) -> TableLock: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class LockBackendError(Exception):
    """Raised by an implementation when its lock service cannot be reached; the attempt is retried."""


#: How long a read-only look at a lock service (``InspectableLock.holder``) may wait for an answer.
DEFAULT_INSPECT_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class LockLocation:
    """Which lock guards a table and where it lives."""

    kind: str
    """The ``--lock`` kind: ``local``, ``storage``, ``filesystem``, ``zookeeper``, ``dynamodb``, ``redis``,
    ``in-process``."""
    where: str
    """Where the lock lives: a file path, an object URI, ``zookeeper://HOSTS/PATH``,
    ``dynamodb://TABLE/KEY``, ``redis://HOST:PORT/DB KEY`` (passwords masked)."""


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds a table lock now, as the lock's own record says (read without taking the lock)."""

    owner: str
    """The owner text exactly as the backend records it (lock file content, ``owner``, node data...)."""
    location: LockLocation
    """The lock the holder holds; for a lock kept in several files, the file found held."""
    since: datetime | None = None
    """When the holding began or was last renewed, when the record tells (UTC)."""
    until: datetime | None = None
    """When the holding ends unless renewed, when the record tells (UTC)."""
    lease_ms: int | None = None
    """The lease the holder wrote, when it is a duration rather than an end time (DynamoDB)."""
    expired: bool = False
    """The record looks expired by the backend's own rule: another writer may take the lock over."""
    detail: str | None = None
    """Anything else the record tells (a process id, a record version, the rule applied)."""


@runtime_checkable
class InspectableLock(Protocol):
    """A lock that can say where it lives and who holds it, without taking or changing it."""

    def location(self) -> LockLocation:
        """Which lock this is and where it lives (no I/O)."""
        ...

    def holder(self, timeout_s: float = DEFAULT_INSPECT_TIMEOUT_S) -> LockHolder | None:
        """Who holds the lock now, or ``None`` when it is free; read-only.

        Waits at most about ``timeout_s`` for a lock service; raises ``LockBackendError`` when the
        service cannot be reached and ``HoodieFormatError`` when the lock record cannot be read.
        """
        ...


def utc_from_ms(ms: int | float) -> datetime:
    """Epoch milliseconds as an aware UTC datetime (for ``LockHolder`` times)."""
    return datetime.fromtimestamp(ms / 1000, UTC)


class TableLockBase(ABC):
    """Shared acquire policy and holder bookkeeping; implementations fill in the ``_`` methods.

    A lock object is not re-entrant: acquiring it twice without a release is a bug.
    Once a loss is seen, the object stays lost until it is released and acquired again.
    """

    def __init__(self, key: str, settings: LockSettings | None = None) -> None:
        self._key = key
        self.settings = settings or LockSettings()
        self._token: int | None = None
        self._lost: str | None = None
        self._state = threading.Lock()

    # ------------------------------------------------------------ implementation hooks

    @abstractmethod
    def _try_acquire(self, wait_s: float) -> int | None:
        """One attempt: wait up to ``wait_s`` for the lock; the fencing token, or ``None`` if still busy.

        Raises ``LockBackendError`` when the lock service cannot be reached.
        """

    @abstractmethod
    def _check_held(self) -> str | None:
        """``None`` while this holder owns the lock, else why it does not (one line)."""

    @abstractmethod
    def _release(self) -> None:
        """Give the lock back (best effort; an error here is logged, never raised)."""

    def _describe(self) -> str:
        """Where the lock lives, for messages (e.g. the lock service address)."""
        return self._key

    def _holder(self) -> str | None:
        """Who holds the lock now, if the implementation can tell (for error messages)."""
        return None

    # ------------------------------------------------------------ public API

    @property
    def key(self) -> str:
        return self._key

    @property
    def is_held(self) -> bool:
        return self._token is not None and self._lost is None

    @property
    def fencing_token(self) -> int | None:
        return self._token

    def acquire(self) -> int:
        if self._token is not None:
            raise RuntimeError(f"{self._describe()}: lock is already held by this object (not re-entrant)")
        s = self.settings
        attempts = s.retries + 1
        problem = "no attempt made"
        error = LockUnavailableError  # the last attempt's cause decides: a busy lock or a service down
        for attempt in range(attempts):
            if attempt:
                time.sleep(s.retry_interval_ms / 1000)
            try:
                token = self._try_acquire(s.wait_ms / 1000)
            except LockBackendError as exc:
                problem, error = f"lock service unreachable: {exc}", LockServiceDownError
                log.warning("%s: attempt %d/%d failed: %s", self._describe(), attempt + 1, attempts, problem)
                continue
            if token is not None:
                with self._state:
                    self._token = token
                    self._lost = None
                log.debug("%s: acquired (fencing token %d)", self._describe(), token)
                return token
            holder = self._holder()
            problem = f"held by {holder}" if holder else "held by another writer"
            error = LockUnavailableError
            log.info("%s: attempt %d/%d: %s", self._describe(), attempt + 1, attempts, problem)
        raise error(
            f"{self._describe()}: table lock not acquired after {attempts} attempt(s) "
            f"of {s.wait_ms} ms each ({problem})"
        )

    def ensure_held(self) -> None:
        if self._token is None:
            raise LockLostError(f"{self._describe()}: table lock is not held; refusing to write")
        if self._lost is None:
            why = self._check_held()
            if why is not None:
                self._mark_lost(why)
        if self._lost is not None:
            raise LockLostError(f"{self._describe()}: table lock lost ({self._lost}); refusing to write")

    def release(self) -> None:
        with self._state:
            if self._token is None:
                return
            self._token = None
            self._lost = None
        try:
            self._release()
        except Exception as exc:  # release is best effort: the lease or the OS frees the lock anyway
            log.warning("%s: release failed (%s); the lease or the OS frees it", self._describe(), exc)

    def _mark_lost(self, why: str) -> None:
        with self._state:
            if self._token is not None and self._lost is None:
                self._lost = why
                log.warning("%s: table lock lost: %s", self._describe(), why)

    def __enter__(self) -> TableLockBase:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


# One mutex and one fencing counter per key, shared by every InProcessLock of this process.
_IN_PROCESS: dict[str, tuple[threading.Lock, itertools.count[int]]] = {}
_IN_PROCESS_GUARD = threading.Lock()


class InProcessLock(TableLockBase):
    """A lock that only excludes threads of this process (like Hudi's ``InProcessLockProvider``).

    Enough for one hoodied process alone on a table and for tests; it cannot be lost.
    """

    def __init__(self, base_uri: str, settings: LockSettings | None = None) -> None:
        super().__init__(lock_key(base_uri), settings)
        with _IN_PROCESS_GUARD:
            entry = _IN_PROCESS.get(self._key)
            if entry is None:
                entry = _IN_PROCESS[self._key] = (threading.Lock(), itertools.count(1))
        self._mutex, self._counter = entry

    def _try_acquire(self, wait_s: float) -> int | None:
        if not self._mutex.acquire(timeout=wait_s):
            return None
        return next(self._counter)

    def _check_held(self) -> str | None:
        return None

    def _release(self) -> None:
        self._mutex.release()

    def _describe(self) -> str:
        return f"in-process lock {self._key}"

    def location(self) -> LockLocation:
        return LockLocation("in-process", self._key)

    def holder(self, timeout_s: float = DEFAULT_INSPECT_TIMEOUT_S) -> LockHolder | None:
        # only this process can hold it; the mutex tells whether some lock object of the key does
        if not self._mutex.locked():
            return None
        return LockHolder(owner=f"process {os.getpid()}", location=self.location())


def bump_fence_file(path: str) -> int:
    """The next fencing token of a counter kept in a local file (``path``; its folder is created):
    read, add one, write back atomically (temp file, then rename). The caller holds the lock the
    counter fences. A garbled counter restarts above any time-based value in ms, so a token is never
    handed out again."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, encoding="ascii") as f:
            current = int(f.read().strip() or 0)
    except FileNotFoundError:
        current = 0
    except ValueError:
        current = int(time.time() * 1000)
    token = current + 1
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{token}\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return token
