"""Clock discipline: a replica takes work only while its wall clock agrees with a shared reference.

Hudi's instant times come from the writer's wall clock. Its ``SkewAdjustingTimeGenerator``
(``hoodie.time.generator.max_expected_clock_skew_ms``, ``HoodieTimeGeneratorConfig``, 200 ms by
default) waits out that bound under the table lock, so instants stay ordered across writers only
while every writer's clock is within the bound of the others. A replica whose clock runs ahead
sets instants in the future and writers with correct clocks then commit below them; one whose
clock runs behind commits below instants already on the timeline. Neither notices by itself, so
every replica measures its own offset and stops taking work while it is past the bound.

The reference, in order:

- Redis ``TIME`` when the daemon uses Redis for its locks (``redis`` source): the offset is the
  local wall clock at the midpoint of the round trip minus Redis's time; the uncertainty is half
  the round trip (plus Redis's microsecond resolution). Of ``SAMPLES`` readings the one with the
  shortest round trip is kept, as NTP keeps its best sample.
- Without Redis, for tables on an object store (``object-store`` source): hoodied writes a small
  probe object, ``.hoodie/.locks/hoodied.clock.<replica>`` of one watched table (Hudi's
  ``HoodieTableMetaClient.LOCKS_FOLDER_NAME``; Hudi's readers and writers never look there), and
  reads its last-modified time back from a listing. obstore's ``put`` answers only an ETag and a
  version, not the HTTP ``Date`` header, so the store's clock is read from the object's
  ``Last-Modified``, set while the store received the upload and given in whole seconds by S3: it
  is read at the middle of its second, so the uncertainty is half the round trip plus half of
  ``STORE_RESOLUTION_S``. That catches large skews (the
  30 s of an unsynchronised host), not ones of a few hundred milliseconds. The probe is
  overwritten each check and deleted when the daemon stops (a crashed replica leaves one small
  object behind).
- Local tables without Redis: the file system's timestamps come from this host's own clock, so
  there is nothing to compare; the offset is reported as unknown and work goes on (every writer
  of such a table shares the host's clock).

The judgement (``judge``) counts the uncertainty in the replica's favour: the clock is skewed only
when even the nearest reading the measurement allows, ``|offset| - uncertainty``, is past the bound.
A reading less precise than ``MAX_UNCERTAINTY_S`` judges nothing, and neither does a failed
measurement: both leave the clock ``unchecked``, and an unchecked clock takes no work. The
verdict is kept for ``MAX_AGE_S``; an older one (the process was paused, a poll cycle stalled)
must be measured again before any job is dispatched.

Expiry of Hudi heartbeats (``HoodieHeartbeatUtils.isHeartbeatExpired``: now minus the heartbeat
file's time against interval x tolerable misses) is judged with this host's clock in three places:
the poll (``service.daemon.poll``, which only decides whether to dispatch), and inside jobs by the
executors' ``hoodie.heartbeat.require_startable`` and by rollbacks (``is_heartbeat_expired``,
also for failed writes). A replica whose clock is skewed or unchecked dispatches no job, so its
poll's judgement leads to nothing and the other two never run: a fast clock cannot declare a live
attempt dead and roll it back. The Redis table slots and instant leases (``service.daemon.leases``,
``service.locks``) expire by Redis's own TTL clock, which no replica's clock moves. Left to the
bound: two healthy replicas may still differ by up to ``clock_skew_ms`` plus the uncertainty,
which the heartbeat expiry (two intervals, two minutes by default) dwarfs.

A clock may also jump while a job runs, after the verdict that let it start. So every job's
``TimeSettings.clock_guard`` is ``ClockWatch.guard``: right before the job takes an instant time
(a plan, a rollback, a layout-2 completion time, the metadata table's) or writes a layout-1
completion, the clock is measured again against the same reference, and a verdict that does not
allow work raises ``ClockOutOfBoundsError``: the job writes nothing with that clock, ends
``handed_back`` and its instant is retried once the clock is back in bounds. It costs one
measurement per time taken (three Redis round trips; one upload and one listing on an object
store; nothing without a reference).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

import structlog

from hoodied.hoodie.errors import ClockOutOfBoundsError
from hoodied.hoodie.storage import Storage
from hoodied.service.locks import RedisLockFactory

log = structlog.get_logger("hoodied.clock")

__all__ = [
    "MAX_AGE_S",
    "MAX_UNCERTAINTY_S",
    "PROBE_FOLDER",
    "SAMPLES",
    "STORE_RESOLUTION_S",
    "ClockCheck",
    "ClockReading",
    "ClockState",
    "ClockWatch",
    "ObjectStoreClock",
    "RedisClock",
    "best_reading",
    "judge",
    "probe_path",
]

#: Readings taken per check; the one with the shortest round trip is kept.
SAMPLES = 3
#: A reading less precise than this judges nothing (an overloaded link, a stalled host).
MAX_UNCERTAINTY_S = 2.0
#: Seconds a verdict holds; an older one is measured again before work is dispatched.
MAX_AGE_S = 60.0
#: Resolution of an object's last-modified time (S3 gives whole seconds).
STORE_RESOLUTION_S = 1.0
#: Where the object-store probe lives (Hudi's ``.hoodie/.locks``).
PROBE_FOLDER = ".hoodie/.locks"


class ClockState(StrEnum):
    """What the replica knows of its clock."""

    IN_BOUNDS = "in_bounds"
    """Measured, and within the bound (allowing for the measurement's uncertainty)."""
    SKEWED = "skewed"
    """Measured, and past the bound even at the nearest reading the uncertainty allows: no work."""
    UNCHECKED = "unchecked"
    """The measurement failed or was too imprecise: no work until it succeeds."""
    UNKNOWN = "unknown"
    """No shared reference (local tables, no Redis): the host's clock is every writer's clock."""


@dataclass(frozen=True, slots=True)
class ClockReading:
    """One measurement of the local wall clock against a reference."""

    offset_s: float
    """Local wall clock minus the reference's (positive: this host runs ahead)."""
    rtt_s: float
    """Round trip of the measurement (monotonic clock)."""
    resolution_s: float
    """How far the reference's own time may be from the moment it stamps: its resolution, or half of
    it when a truncated time is read at the middle of its step."""

    @property
    def uncertainty_s(self) -> float:
        """How far the true offset may be from ``offset_s``: half the round trip plus the resolution."""
        return self.rtt_s / 2 + self.resolution_s


def judge(reading: ClockReading | None, bound_s: float) -> ClockState:
    """The verdict of one reading against the skew bound (``None``: the measurement failed)."""
    if reading is None or not math.isfinite(reading.offset_s) or reading.uncertainty_s > MAX_UNCERTAINTY_S:
        return ClockState.UNCHECKED
    # skewed only when the nearest offset the measurement allows is past the bound: an imprecise
    # reading (a slow round trip, whole-second store times) never stops a healthy replica
    if abs(reading.offset_s) - reading.uncertainty_s > bound_s:
        return ClockState.SKEWED
    return ClockState.IN_BOUNDS


def best_reading(readings: list[ClockReading]) -> ClockReading | None:
    """The reading with the shortest round trip (the least uncertain); ``None`` for none."""
    return min(readings, key=lambda r: r.uncertainty_s, default=None)


@dataclass(frozen=True, slots=True)
class ClockCheck:
    """The outcome of one check: the verdict, its reading and where it came from."""

    state: ClockState
    source: str
    reading: ClockReading | None = None
    error: str | None = None
    at: float = 0.0
    """When the check ended (monotonic)."""
    bound_s: float = 0.0

    @property
    def allows_work(self) -> bool:
        return self.state in (ClockState.IN_BOUNDS, ClockState.UNKNOWN)

    def fresh(self, now: float) -> bool:
        return now - self.at <= MAX_AGE_S

    def describe(self) -> str:
        """One line for ``/readyz``, the log and ``/status``."""
        if self.state is ClockState.UNKNOWN:
            return f"clock offset unknown ({self.source})"
        if self.reading is None:
            return f"clock not checked against {self.source}: {self.error}"
        r = self.reading
        text = (f"clock offset {r.offset_s:+.3f} s against {self.source} "
                f"(± {r.uncertainty_s:.3f} s, bound {self.bound_s:.3f} s)")
        if self.state is ClockState.UNCHECKED:
            return f"clock not checked: {text}: measurement too imprecise"
        return f"clock skewed: {text}" if self.state is ClockState.SKEWED else text


class RedisClock:
    """Readings against Redis ``TIME``, on the lock factory's connection."""

    def __init__(self, factory: RedisLockFactory) -> None:
        self._factory = factory
        self.source = f"redis TIME at {factory.where}"

    async def _sample(self) -> ClockReading:
        # timed on the factory's loop thread, around the command alone, so no thread hand-off
        # lengthens the round trip
        client = await self._factory._get_client()
        start_wall, start = time.time(), time.monotonic()
        seconds, micros = await client.time()
        rtt = time.monotonic() - start
        reference = int(seconds) + int(micros) / 1e6
        return ClockReading(start_wall + rtt / 2 - reference, rtt, 1e-6)

    def read(self) -> ClockReading:
        """The best of ``SAMPLES`` readings (blocking; raises ``LockBackendError`` when Redis fails)."""
        readings = []
        for _ in range(SAMPLES):
            make: Callable[[], Coroutine[Any, Any, ClockReading]] = self._sample
            readings.append(self._factory.call(make()))
        best = best_reading(readings)
        assert best is not None
        return best

    def close(self) -> None:
        """Nothing to remove: the factory is the daemon's."""


def probe_path(replica: str) -> str:
    """The probe object of ``replica`` (its name made safe for a key)."""
    return f"{PROBE_FOLDER}/hoodied.clock.{re.sub(r'[^A-Za-z0-9._-]', '_', replica)}"


class ObjectStoreClock:
    """Readings against an object store: the last-modified time of a probe this replica writes."""

    def __init__(self, storage: Storage, replica: str, table: str) -> None:
        self.storage = storage
        self.table = table
        """The watched table whose ``.hoodie/.locks`` holds the probe."""
        self.path = probe_path(replica)
        self.source = f"object store {storage.base_uri.rstrip('/')}/{PROBE_FOLDER}"
        self._written = False

    def read(self) -> ClockReading:
        """One upload and one listing (blocking; raises ``StorageError`` when the store fails)."""
        start_wall, start = time.time(), time.monotonic()
        self.storage.put(self.path, f"{start_wall:.6f}\n".encode())
        rtt = time.monotonic() - start
        self._written = True
        # the store stamps the object somewhere within the upload's round trip
        mine = [i for i in self.storage.list(PROBE_FOLDER) if i.path == self.path and not i.is_dir]
        if not mine:
            raise FileNotFoundError(f"{self.source}: the probe just written is not listed")
        # a whole-second stamp is the start of its second: its middle is the best estimate
        reference = mine[0].mtime_ms / 1000 + STORE_RESOLUTION_S / 2
        return ClockReading(start_wall + rtt / 2 - reference, rtt, STORE_RESOLUTION_S / 2)

    def close(self) -> None:
        """Remove the probe (best effort: a store that is down keeps one small object)."""
        if self._written:
            try:
                self.storage.delete(self.path)
            except Exception:  # noqa: BLE001,S110 - stopping; the object is harmless
                pass


class Reference(Protocol):
    """A shared clock to read this host's offset against."""

    source: str

    def read(self) -> ClockReading: ...

    def close(self) -> None: ...


#: The source named when there is no shared reference.
NO_REFERENCE = "local tables only, no Redis: the file system's times come from this host's own clock"


class ClockWatch:
    """The replica's current verdict on its clock, and the log line when it changes."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self.current = ClockCheck(ClockState.UNCHECKED, "no reference yet", error="not measured yet",
                                  at=-math.inf, bound_s=bound_s)
        self.reference: Reference | None = None
        self._state: ClockState | None = None
        # the poll's check and the jobs' guards measure from different threads: one at a time, so
        # two uploads of the object-store probe never overlap
        self._measuring = threading.Lock()
        self._recording = threading.Lock()

    def use(self, reference: Reference | None) -> None:
        """Read ``reference`` from now on (``None``: no shared reference); the old one is closed."""
        with self._measuring:
            if reference is self.reference:
                return
            if self.reference is not None:
                self.reference.close()
            self.reference = reference

    def measure(self) -> ClockCheck:
        """One check against the current reference (blocking: run it in a worker thread)."""
        with self._measuring:
            ref = self.reference
            if ref is None:
                return ClockCheck(ClockState.UNKNOWN, NO_REFERENCE, at=time.monotonic(), bound_s=self.bound_s)
            try:
                reading: ClockReading | None = ref.read()
                error = None
            except Exception as exc:  # noqa: BLE001 - any failure leaves the clock unchecked
                reading, error = None, (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return ClockCheck(judge(reading, self.bound_s), ref.source, reading, error, time.monotonic(),
                              self.bound_s)

    def guard(self) -> None:
        """Measure now and raise ``ClockOutOfBoundsError`` unless the verdict allows work (a job's
        ``TimeSettings.clock_guard``, called in its worker thread right before it takes an instant
        time or writes a completion); the verdict is kept, so no new job starts on a bad one."""
        check = self.measure()
        self.record(check)
        if not check.allows_work:
            raise ClockOutOfBoundsError(
                f"{check.describe()}; nothing written with this clock, the instant is retried once it is "
                "back in bounds"
            )

    def record(self, check: ClockCheck) -> bool:
        """Keep ``check`` as the verdict; whether the state changed (one log line when it did)."""
        with self._recording:
            before, self.current = self._state, check
            self._state = check.state
        if check.state is before:
            return False
        r = check.reading
        fields: dict[str, Any] = {
            "state": check.state.value, "source": check.source, "reason": check.describe(),
            "offset_seconds": None if r is None else round(r.offset_s, 6),
            "uncertainty_seconds": None if r is None else round(r.uncertainty_s, 6),
            "bound_seconds": self.bound_s,
        }
        if check.state is ClockState.SKEWED:
            log.error("clock skewed: taking no work", **fields)
        elif check.state is ClockState.UNCHECKED:
            log.warning("clock not checked: taking no work", error=check.error, **fields)
        elif before in (ClockState.SKEWED, ClockState.UNCHECKED):
            log.info("clock back in bounds: taking work again", **fields)
        else:
            log.info("clock checked", **fields)
        return True

    def allows_work(self, now: float) -> bool:
        """Whether a job may be dispatched now (a verdict that allows it, and is fresh)."""
        return self.current.allows_work and self.current.fresh(now)

    def close(self) -> None:
        self.use(None)
