"""Attempt fencing: only the current attempt of a pending instant may change the table's files.

hoodied's own protocol (Apache Hudi has none: two executors of one plan is its open HUDI-7503).
One executor per instant is kept by leases and heartbeats, but a process paused past them (a
long GC, a frozen VM, SIGSTOP) wakes up still believing it owns the instant. Its Spark tasks
and its driver must then be unable to make a file visible, delete one or complete the instant.

The protocol:

- **Identity.** Each attempt of instant ``T`` has a random identity, written to
  ``.hoodie/.locks/attempts/<T>`` (one atomic overwrite) under the table lock: by the attempt
  itself right before its inflight transition (``claim``), and by a takeover (the rollback of a
  failed attempt) before the rollback deletes anything. The file is hoodied's, like the rest of
  ``.hoodie/.locks``; Hudi readers and writers never look at it.
- **Checks.** Every write and delete of an attempt goes through ``FencedStorage``, which reads
  the identity before it (``AttemptFence.check``) and refuses with ``AttemptSupersededError``
  when it is not the attempt's own, or gone (a missing file never admits anyone). A write-once
  file is checked again right after it became visible, and removed by its writer when the
  identity changed meanwhile. The driver checks under the table lock before it reconciles
  markers, writes the metadata table and completes ``T``; while it holds the lock no takeover
  can change the identity, so the completion itself cannot race one.
- **Release.** An attempt deletes the identity at its end (completed or failed), only while it
  is still its own; from then on nothing is admitted until the next attempt claims it. An
  attempt that fails after it was taken over (whatever the error: its inputs may be gone, cleaned
  after the takeover) ends with ``AttemptSupersededError`` (``Attempt`` as a context manager):
  that the identity is no longer its own decides, not the error.
- **One job per table.** Before claiming, under the same table lock, an attempt lists the
  identities of the table's other instants and refuses to start (``TableBusyError``) while one of
  them has a live heartbeat (Hudi's expiry rule, ``hoodie.heartbeat``). The identities and
  heartbeats live in the table, so this holds when the daemon's Redis table slot is lost (a
  Redis restarted empty) and between the daemon and a one-off ``hoodied execute``: the claim and
  the first beat are made under the lock the check ran under, so of two attempts racing for one
  table the second always sees the first. A leftover identity of a dead attempt (no heartbeat,
  or an expired one) blocks nothing.

The window left: a task that passed its check, was then paused for longer than the takeover
(lease expiry, rollback, the new attempt's whole run) and made its file visible after that. The
file is never referenced: the superseded driver cannot complete, and the new attempt commits only
the files its own tasks reported. The paused task's check right after the upload removes the
file at once; only a process that dies in the instant between that upload and that check leaves
it behind, as an unreferenced file that readers using the metadata table never list.
"""

from __future__ import annotations

import builtins
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO

from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import AttemptSupersededError, StorageFileNotFoundError, TableBusyError
from hoodied.hoodie.heartbeat import DEFAULT_TOLERABLE_MISSES, Heartbeat, heartbeat_times
from hoodied.hoodie.storage import FileInfo, Storage, WriteOnceFile
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.writer import TimelineWriter

__all__ = [
    "ATTEMPTS_FOLDER",
    "Attempt",
    "AttemptFence",
    "FencedStorage",
    "attempt_path",
    "current_attempt",
    "require_table_idle",
    "start_attempt",
]

log = logging.getLogger(__name__)

#: Where the identity of each instant's current attempt lives (relative to the table's base path).
ATTEMPTS_FOLDER = ".hoodie/.locks/attempts"


def attempt_path(instant_time: str) -> str:
    return f"{ATTEMPTS_FOLDER}/{instant_time}"


def current_attempt(storage: Storage, instant_time: str) -> str | None:
    """The identity of the current attempt of ``instant_time``; ``None`` when none holds it."""
    try:
        return storage.read(attempt_path(instant_time)).decode("utf-8", "replace").strip()
    except StorageFileNotFoundError:
        return None


def require_table_idle(
    storage: Storage,
    instant_time: str,
    *,
    interval_ms: int,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    now_ms: int | None = None,
) -> None:
    """Refuse (``TableBusyError``) while an attempt of another instant of the table is alive: its
    identity is present and its heartbeat is not expired by Hudi's rule. Call it under the table
    lock, right before ``AttemptFence.claim``; costs one listing, two when other identities exist."""
    prefix = ATTEMPTS_FOLDER + "/"
    others = sorted(info.path[len(prefix):] for info in storage.list(ATTEMPTS_FOLDER)
                    if not info.is_dir and info.path.startswith(prefix)
                    and info.path[len(prefix):] != instant_time and "." not in info.path[len(prefix):])
    if not others:
        return
    beats = heartbeat_times(storage)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    for other in others:
        age_ms = now - beats.get(other, 0)
        if age_ms <= interval_ms * tolerable_misses:
            raise TableBusyError(
                f"{storage.base_uri}: instant {other} is being worked on by another attempt (its heartbeat "
                f"beat {max(age_ms, 0) / 1000:.1f} s ago); one job per table at a time, so {instant_time} "
                "waits for it"
            )


@dataclass(frozen=True, slots=True)
class AttemptFence:
    """One attempt's claim on instant ``instant_time`` of the table at ``storage`` (its root)."""

    storage: Storage
    instant_time: str
    identity: str

    @classmethod
    def claim(cls, storage: Storage, instant_time: str, role: str) -> AttemptFence:
        """Make a new attempt (``role``: what it is, for people reading the file) the instant's
        only writer; every earlier attempt's writes are refused from now on. Call it under the
        table lock, before the first write of the attempt."""
        identity = f"{uuid.uuid4().hex} {role} {socket.gethostname()} {os.getpid()}"
        storage.put(attempt_path(instant_time), identity.encode())
        return cls(storage, instant_time, identity)

    def check(self) -> None:
        """Raise ``AttemptSupersededError`` unless this attempt is still the instant's current one."""
        current = current_attempt(self.storage, self.instant_time)
        if current != self.identity:
            raise self._superseded(current)

    def superseded(self) -> AttemptSupersededError | None:
        """The error that says this attempt is no longer the instant's current one; ``None`` while it
        is, or when the identity cannot be read (then nothing is known either way)."""
        try:
            current = current_attempt(self.storage, self.instant_time)
        except Exception as exc:
            log.warning("%s: could not read the attempt of %s: %s", self.storage.base_uri,
                        self.instant_time, exc)
            return None
        return self._superseded(current) if current != self.identity else None

    def _superseded(self, current: str | None) -> AttemptSupersededError:
        by = f"attempt {current.split(' ', 1)[0]}" if current else "no attempt (released)"
        return AttemptSupersededError(
            f"{self.storage.base_uri}: instant {self.instant_time} was taken over ({by} holds it now); "
            "this attempt writes nothing more"
        )

    def release(self) -> None:
        """Delete the identity while it is still this attempt's (never another's claim)."""
        try:
            if current_attempt(self.storage, self.instant_time) == self.identity:
                self.storage.delete(attempt_path(self.instant_time))
        except Exception as exc:  # a leftover identity admits nobody; the next claim replaces it
            log.warning("%s: could not release the attempt of %s: %s", self.storage.base_uri,
                        self.instant_time, exc)


class _FencedWriteOnceFile(WriteOnceFile):
    """A write-once file published only while the fence admits it, and withdrawn when the fence
    changed during the publication."""

    def __init__(self, inner: WriteOnceFile, storage: Storage, path: str, fence: AttemptFence) -> None:
        super().__init__(inner.path)
        self._inner, self._storage, self._target, self._fence = inner, storage, path, fence

    def commit(self) -> int:
        try:
            self._fence.check()
        except BaseException:
            self._inner.abort()
            raise
        size = self._inner.commit()
        self._done = True
        _recheck(self._fence, self._storage, self._target)
        return size

    def abort(self) -> None:
        self._done = True
        self._inner.abort()


def _recheck(fence: AttemptFence, storage: Storage, path: str) -> None:
    """After ``path`` became visible: withdraw it when the attempt was taken over meanwhile."""
    try:
        fence.check()
    except AttemptSupersededError:
        storage.delete(path)
        raise


@dataclass(frozen=True, slots=True)
class FencedStorage:
    """A ``Storage`` whose writes and deletes are admitted by ``fence`` (reads pass through).

    Pickled with the job to Spark tasks, so tasks check the same identity as their driver.
    """

    inner: Storage
    fence: AttemptFence

    @property
    def base_uri(self) -> str:
        return self.inner.base_uri

    def read(self, path: str) -> bytes:
        return self.inner.read(path)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        return self.inner.read_range(path, offset, length)

    def open(self, path: str) -> BinaryIO:
        return self.inner.open(path)

    def size(self, path: str) -> int:
        return self.inner.size(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def list(self, path: str = "") -> list[FileInfo]:
        return self.inner.list(path)

    def walk(self, path: str = "") -> Iterator[FileInfo]:
        return self.inner.walk(path)

    def list_after(
        self, path: str, after: str | None = None, before: str | None = None
    ) -> builtins.list[FileInfo]:
        return self.inner.list_after(path, after, before)

    def put_if_absent(self, path: str, data: bytes) -> None:
        self.fence.check()
        self.inner.put_if_absent(path, data)
        _recheck(self.fence, self.inner, path)

    def put(self, path: str, data: bytes) -> None:
        self.fence.check()
        self.inner.put(path, data)

    def create_if_absent(self, path: str) -> WriteOnceFile:
        self.fence.check()  # before the bytes are written, not only before they are published
        return _FencedWriteOnceFile(self.inner.create_if_absent(path), self.inner, path, self.fence)

    def delete(self, path: str) -> bool:
        self.fence.check()
        return self.inner.delete(path)

    def child(self, path: str) -> FencedStorage:
        return FencedStorage(self.inner.child(path), self.fence)

    def local_path(self, path: str = "") -> str | None:
        return self.inner.local_path(path)

    def __repr__(self) -> str:
        return f"FencedStorage({self.inner!r}, attempt of {self.fence.instant_time})"


@dataclass(slots=True)
class Attempt:
    """A started attempt: its fence, the fenced storage its job and commit write through, its heartbeat."""

    fence: AttemptFence
    storage: FencedStorage
    heartbeat: Heartbeat

    def end(self) -> None:
        """Stop the heartbeat (deleting it while the attempt is still the instant's) and release the fence."""
        self.heartbeat.stop(delete=True)
        self.fence.release()

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """End the attempt. An error of an attempt that was taken over meanwhile (paused past its
        heartbeat: another executor rolled it back, and a later clean may have deleted its inputs)
        is raised as ``AttemptSupersededError``, from the error: whatever failed, the instant is
        another's, so the failure is not this attempt's to count."""
        superseded = None
        if isinstance(exc, Exception) and not isinstance(exc, AttemptSupersededError):
            superseded = self.fence.superseded()
        self.end()
        if superseded is not None:
            raise superseded from exc


def start_attempt(
    storage: Storage,
    writer: TimelineWriter,
    instant_time: str,
    action: Action,
    heartbeat_interval_ms: int,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
) -> Attempt:
    """Check that no other attempt is alive on the table (``require_table_idle``), claim the
    instant (``hoodie.fence``), start the heartbeat, then ``T.<action>.inflight`` (the caller
    holds the lock). The heartbeat beats through the fence, so a superseded attempt neither keeps
    the instant alive nor deletes the heartbeat of the attempt that took over."""
    require_table_idle(storage, instant_time, interval_ms=heartbeat_interval_ms,
                       tolerable_misses=tolerable_misses)
    fence = AttemptFence.claim(storage, instant_time, action.value)
    fenced = FencedStorage(storage, fence)
    heartbeat = Heartbeat(fenced, instant_time, interval_ms=heartbeat_interval_ms)
    try:
        heartbeat.start()
    except BaseException:
        fence.release()
        raise
    attempt = Attempt(fence, fenced, heartbeat)
    try:
        crash_point("requested")
        writer.transition_to_inflight(instant_time, action)
    except BaseException:
        attempt.end()
        raise
    return attempt
