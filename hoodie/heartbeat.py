"""Writer heartbeats: ``.hoodie/.heartbeat/<instant>``, kept fresh while an instant is worked on.

As in Hudi's ``HoodieHeartbeatClient``, the heartbeat of an instant is an empty file that
is re-created every ``interval_ms`` (default 60 s, ``hoodie.client.heartbeat.interval_in_ms``);
its modification time is the last sign of life. It is expired when
``now - mtime > interval_ms * tolerable_misses`` (default 2,
``hoodie.client.heartbeat.tolerable.misses``), and a missing file counts as time 0, i.e.
expired. The file is deleted when the instant completes or is rolled back, or when this
process stops working on it (so another process may take over at once).

A pending table service whose heartbeat is alive belongs to a live executor and is never
taken over; one whose heartbeat expired is a failed attempt to recover.

On an object store the file is re-created by one PUT per beat and its time is the store's
last-modified time (whole seconds on S3) compared with this host's clock, as Hudi compares a
Hadoop file status with its own: the default interval (60 s) dwarfs both the rounding and a
reasonable clock skew.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from hoodied.hoodie.errors import HeartbeatAliveError, InstantStateError
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.instant import Instant, State

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_INTERVAL_MS",
    "DEFAULT_TOLERABLE_MISSES",
    "HEARTBEAT_FOLDER",
    "Heartbeat",
    "delete_heartbeat",
    "heartbeat_path",
    "heartbeat_times",
    "is_heartbeat_expired",
    "last_heartbeat_ms",
    "require_startable",
]

HEARTBEAT_FOLDER = ".hoodie/.heartbeat"
DEFAULT_INTERVAL_MS = 60_000
DEFAULT_TOLERABLE_MISSES = 2


def heartbeat_path(instant_time: str) -> str:
    return f"{HEARTBEAT_FOLDER}/{instant_time}"


def last_heartbeat_ms(storage: Storage, instant_time: str) -> int:
    """Modification time (epoch ms) of the instant's heartbeat file; 0 when there is none."""
    path = heartbeat_path(instant_time)
    for info in storage.list(HEARTBEAT_FOLDER):
        if info.path == path and not info.is_dir:
            return info.mtime_ms
    return 0


def heartbeat_times(storage: Storage) -> dict[str, int]:
    """Last beat (epoch ms) of every heartbeat file, by instant time, from one listing; an
    instant absent from it has no heartbeat (time 0 for Hudi's ``getLastHeartbeatTime``)."""
    prefix = HEARTBEAT_FOLDER + "/"
    return {info.path[len(prefix):]: info.mtime_ms for info in storage.list(HEARTBEAT_FOLDER)
            if not info.is_dir and info.path.startswith(prefix)}


def is_heartbeat_expired(
    storage: Storage,
    instant_time: str,
    *,
    interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    now_ms: int | None = None,
) -> bool:
    """Hudi's rule: no heartbeat for longer than ``interval_ms * tolerable_misses`` (or none at all)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return now - last_heartbeat_ms(storage, instant_time) > interval_ms * tolerable_misses


def require_startable(
    storage: Storage, inst: Instant, what: str, interval_ms: int, tolerable_misses: int
) -> None:
    """A requested table service may start; an inflight one is a live executor's (its heartbeat
    is fresh) or a failed attempt to roll back first: ``InstantStateError`` either way."""
    if inst.state is State.REQUESTED:
        return
    t = inst.requested_time
    if not is_heartbeat_expired(storage, t, interval_ms=interval_ms, tolerable_misses=tolerable_misses):
        raise HeartbeatAliveError(
            f"{t}: {what} has a live heartbeat (last beat at {last_heartbeat_ms(storage, t)} ms since "
            "the epoch); another executor is working on it"
        )
    raise InstantStateError(
        f"{t}: {what} is inflight from a failed attempt; roll it back first "
        f"(`hoodied rollback TABLE --instant {t}`, or run it through `hoodied execute`)"
    )


def delete_heartbeat(storage: Storage, instant_time: str) -> bool:
    """Remove the instant's heartbeat; ``False`` when there was none."""
    return storage.delete(heartbeat_path(instant_time))


class Heartbeat:
    """Keeps one instant's heartbeat fresh from a daemon thread while the work runs.

    ``start()`` beats once right away (so the instant is claimed before any work begins),
    then every ``interval_ms``. ``stop()`` ends the thread and, by default, deletes the file.
    Used as a context manager it starts and stops around the block.
    """

    def __init__(
        self,
        storage: Storage,
        instant_time: str,
        *,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError("heartbeat interval must be positive")
        self.storage = storage
        self.instant_time = instant_time
        self.interval_ms = interval_ms
        self.path = heartbeat_path(instant_time)
        self.beats = 0
        self.last_error: Exception | None = None
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def beat(self) -> None:
        """Re-create the heartbeat file now (atomic replace: a fresh modification time)."""
        self.storage.put(self.path, b"")
        self.beats += 1

    def start(self) -> Heartbeat:
        if self._thread is not None:
            raise RuntimeError(f"{self.path}: heartbeat already started")
        self.beat()  # a failure here is raised: never start work without a heartbeat
        self._stop.clear()
        name = f"hoodied-heartbeat {self.instant_time}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            try:
                self.beat()
                self.last_error = None
            except Exception as exc:  # keep beating; the owner decides what a failing heartbeat means
                self.last_error = exc
                log.warning("%s: heartbeat failed: %s", self.path, exc)
                if self._on_error is not None:
                    self._on_error(exc)

    def stop(self, *, delete: bool = True) -> None:
        """Stop beating; with ``delete`` the file goes too (instant done, or given up)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=max(5.0, self.interval_ms / 1000))
        if delete:
            try:
                self.storage.delete(self.path)
            except Exception as exc:  # a leftover heartbeat simply expires
                log.warning("%s: could not delete heartbeat: %s", self.path, exc)

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop(delete=True)
