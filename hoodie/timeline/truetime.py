"""TrueTime instant times: unique and ordered across every writer that shares the table lock.

Hudi's ``SkewAdjustingTimeGenerator`` rule: while holding the table lock, read the wall
clock, then sleep ``max_expected_clock_skew_ms`` before using the reading (and before the
lock is released). Any later holder, on any host whose clock is off by less than that skew,
then reads a larger time. The reading is formatted as 17 digits (``yyyyMMddHHmmssSSS``) in the
table's timeline timezone (``hoodie.table.timeline.timezone``: UTC, or LOCAL = this host's zone,
as each Java writer uses its own).

On top of Hudi's rule hoodied also requires the new time to be strictly greater than
``floor`` (the newest requested or completion time already on the timeline, read under the
same lock) and than the last time this process issued for the table. When the clock is
behind, it waits for it to pass (bounded by ``max_catch_up_ms``, then ``ClockSkewError``)
rather than inventing a time ahead of the clock, which would break the ordering for Java
writers that only trust their clocks. Completion times come from the same generator with
the instant's requested time as an extra floor.

A process that can tell whether its clock is still trustworthy (the daemon measures its offset
against a shared reference) hands that check over as ``TimeSettings.clock_guard``: it is called
right before every time is read here (``TrueTime.check_clock``), and by ``TimelineWriter`` right
before a layout-1 completion, so a clock that jumped after the job started puts nothing on the
timeline. Hudi's writers trust their clock; a guard that refuses raises, and the caller's
instant stays as it was.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import tzinfo

from hoodied.hoodie.errors import ClockSkewError
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.instant import (
    epoch_to_instant_time,
    instant_time_to_datetime,
    parse_instant_file_name,
)

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_SKEW_MS", "TimeSettings", "TrueTime", "timeline_floor"]

#: ``hoodie.time.generator.max_expected_clock_skew_ms`` default.
DEFAULT_MAX_SKEW_MS = 200


@dataclass(frozen=True, slots=True)
class TimeSettings:
    """Clock assumptions shared by every writer of a table."""

    max_expected_clock_skew_ms: int = DEFAULT_MAX_SKEW_MS
    """Worst clock difference between any two writers' hosts; every new time waits this long.
    Must match ``hoodie.time.generator.max_expected_clock_skew_ms`` of the Java writers."""
    max_catch_up_ms: int = 5_000
    """How long to wait for this host's clock to pass the newest time on the timeline."""
    clock_guard: Callable[[], None] | None = field(default=None, compare=False)
    """Called right before every time is taken and every layout-1 completion is written; raises
    (``ClockOutOfBoundsError``) when this host's clock may not be used now. ``None``: always trusted."""

    def __post_init__(self) -> None:
        if self.max_expected_clock_skew_ms < 0 or self.max_catch_up_ms < 0:
            raise ValueError("clock skew and catch-up waits must not be negative")


# Last time issued per table (lock key) by this process; Hudi keeps one per JVM.
_LAST_ISSUED: dict[str, str] = {}
_LAST_GUARD = threading.Lock()


def timeline_floor(storage: Storage, config: TableConfig) -> str | None:
    """The greatest requested or completion time named by a file of the active timeline.

    Read from the file names only (one listing), so it is cheap to do under the lock before
    every new time. Layout-1 completion times live in file modification times, not names;
    they are not trusted here (the requested times are).
    """
    best: str | None = None
    for info in storage.list(config.timeline_path):
        if info.is_dir:
            continue
        inst = parse_instant_file_name(info.name)
        if inst is None:
            continue
        for t in (inst.requested_time, inst.completion_time if not inst.legacy else None):
            if t is not None and (best is None or t > best):
                best = t
    return best


class TrueTime:
    """Generates instant times for one table timezone; ``clock`` and ``sleep`` are injectable."""

    def __init__(
        self,
        tz: tzinfo,
        settings: TimeSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.tz = tz
        self.settings = settings or TimeSettings()
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def for_table(
        cls,
        config: TableConfig,
        settings: TimeSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> TrueTime:
        """A generator in the table's timeline timezone."""
        return cls(config.tzinfo, settings, clock=clock, sleep=sleep)

    def format(self, epoch_s: float) -> str:
        """``epoch_s`` as a 17-digit instant time in this generator's zone."""
        return epoch_to_instant_time(epoch_s, self.tz)

    def check_clock(self) -> None:
        """Run the settings' ``clock_guard`` (raises when this host's clock may not be used now)."""
        if self.settings.clock_guard is not None:
            self.settings.clock_guard()

    def generate(self, lock: TableLock, floor: str | None = None) -> str:
        """A new time, strictly greater than ``floor`` and every time issued here for the table.

        The caller holds ``lock`` and keeps holding it until the time is used (the requested or
        completed file is written), exactly as Hudi's ``consumeTime`` does.
        """
        lock.ensure_held()
        # right before the clock is read: a guard that refuses leaves no time issued
        self.check_clock()
        skew_s = self.settings.max_expected_clock_skew_ms / 1000
        with _LAST_GUARD:
            last = _LAST_ISSUED.get(lock.key)
        bound = max(t for t in (floor, last, "") if t is not None)
        deadline = time.monotonic() + self.settings.max_catch_up_ms / 1000
        while True:
            reading = self._clock()
            self._sleep(skew_s)
            candidate = self.format(reading)
            if candidate > bound:
                break
            behind_ms = self._ms_behind(bound, reading)
            if time.monotonic() + behind_ms / 1000 > deadline:
                raise ClockSkewError(
                    f"{lock.key}: this host's clock reads {candidate}, not after {bound} already on the "
                    f"timeline ({behind_ms:.0f} ms behind, more than the {self.settings.max_catch_up_ms} ms "
                    "hoodied waits); check NTP and hoodie.table.timeline.timezone"
                )
            log.info("%s: clock %s not after %s yet, waiting %.0f ms", lock.key, candidate, bound, behind_ms)
            self._sleep(behind_ms / 1000)
        with _LAST_GUARD:
            prev = _LAST_ISSUED.get(lock.key)
            if prev is None or candidate > prev:
                _LAST_ISSUED[lock.key] = candidate
        return candidate

    def _ms_behind(self, bound: str, reading: float) -> float:
        """Milliseconds until the clock passes ``bound`` (at least 1)."""
        try:
            target = instant_time_to_datetime(bound, self.tz).timestamp()
        except Exception:  # an odd-looking time on the timeline: just wait one skew period
            return max(1.0, float(self.settings.max_expected_clock_skew_ms))
        return max(1.0, (target - reading) * 1000 + 1)
