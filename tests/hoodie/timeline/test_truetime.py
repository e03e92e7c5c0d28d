"""TrueTime instant generation: skew wait, timezone, floors, process-local monotonicity."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from hoodied.hoodie.errors import ClockOutOfBoundsError, ClockSkewError, LockLostError
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.truetime import TimeSettings, TrueTime, timeline_floor


class SimClock:
    """Simulated wall clock: only ``sleep`` moves it, so every wait is visible and instant."""

    def __init__(self, start: float) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _gen(sim: SimClock, skew_ms: int = 200, catch_up_ms: int = 5_000, tz=UTC) -> TrueTime:
    return TrueTime(
        tz, TimeSettings(max_expected_clock_skew_ms=skew_ms, max_catch_up_ms=catch_up_ms),
        clock=sim.clock, sleep=sim.sleep,
    )


def test_format_17_digits_in_table_zone() -> None:
    assert TrueTime(UTC).format(T0 + 0.123) == "20260101000000123"
    assert TrueTime(ZoneInfo("Asia/Kolkata")).format(T0) == "20260101053000000"
    assert TrueTime(ZoneInfo("America/Los_Angeles")).format(T0) == "20251231160000000"


def test_generate_reads_clock_then_waits_the_skew(tmp_path: Path) -> None:
    sim = SimClock(T0)
    with InProcessLock(str(tmp_path)) as lock:
        t = _gen(sim, skew_ms=200).generate(lock)
    assert t == "20260101000000000"  # the reading before the wait is the instant
    assert sim.sleeps == [0.2]


def test_generate_needs_the_lock(tmp_path: Path) -> None:
    with pytest.raises(LockLostError, match="not held"):
        _gen(SimClock(T0)).generate(InProcessLock(str(tmp_path)))


def test_a_clock_guard_that_refuses_reads_no_clock_and_issues_no_time(tmp_path: Path) -> None:
    sim = SimClock(T0)
    verdicts = [None, ClockOutOfBoundsError("clock skewed: clock offset +5.000 s")]

    def guard() -> None:
        refusal = verdicts.pop(0)
        if refusal is not None:
            raise refusal

    gen = TrueTime(UTC, TimeSettings(max_expected_clock_skew_ms=200, clock_guard=guard),
                   clock=sim.clock, sleep=sim.sleep)
    with InProcessLock(str(tmp_path)) as lock:
        assert gen.generate(lock) == "20260101000000000"
        with pytest.raises(ClockOutOfBoundsError, match="offset"):
            gen.generate(lock)
    assert sim.sleeps == [0.2] and not verdicts  # the refused call neither read nor waited


def test_new_time_is_after_the_timeline_floor(tmp_path: Path) -> None:
    sim = SimClock(T0)
    floor = "20260101000000150"  # another writer's clock ran 150 ms ahead of ours
    with InProcessLock(str(tmp_path)) as lock:
        t = _gen(sim, skew_ms=100).generate(lock, floor)
    assert t > floor
    # first reading 000 was too early: waited until past the floor, then re-read (+ skew again)
    assert sim.sleeps[0] == pytest.approx(0.1)
    assert t == TrueTime(UTC).format(sim.now - 0.1)


def test_clock_far_behind_timeline_is_a_clear_error(tmp_path: Path) -> None:
    sim = SimClock(T0)
    with InProcessLock(str(tmp_path)) as lock:
        with pytest.raises(ClockSkewError) as err:
            _gen(sim, skew_ms=10, catch_up_ms=1_000).generate(lock, "20260101000010000")
    msg = str(err.value)
    assert "not after 20260101000010000" in msg and "NTP" in msg and "\n" not in msg


def test_times_issued_by_this_process_increase_even_with_a_stuck_clock(tmp_path: Path) -> None:
    sim = SimClock(T0)
    gen = _gen(sim, skew_ms=0)
    with InProcessLock(str(tmp_path)) as lock:
        times = [gen.generate(lock) for _ in range(5)]
    assert times == sorted(set(times))
    assert len(times) == 5


def test_legacy_14_digit_floor(tmp_path: Path) -> None:
    sim = SimClock(T0)
    with InProcessLock(str(tmp_path)) as lock:
        t = _gen(sim, skew_ms=0).generate(lock, "20260101000000")
    # Hudi orders instants as strings: a 17-digit time sorts after its 14-digit prefix
    assert t == "20260101000000000" > "20260101000000"


def test_timeline_floor_reads_requested_and_completion_times(shared_table) -> None:
    root = shared_table("cow/v9_txns_simple_nometa")
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    names = [p.name for p in (root / ".hoodie" / "timeline").iterdir() if p.is_file()]
    expected = max(part for n in names for part in n.split(".")[0].split("_"))
    assert timeline_floor(storage, config) == expected


def test_timeline_floor_layout_1(shared_table) -> None:
    root = shared_table("mor/parquet/v6_nonpartitioned_rollback")
    storage = LocalStorage(str(root))
    assert timeline_floor(storage, load_table_config(storage)) == "20250126060846931"


def test_timeline_floor_empty_table(shared_table) -> None:
    storage = LocalStorage(str(shared_table("cow/v8_empty")))
    assert timeline_floor(storage, load_table_config(storage)) is None
