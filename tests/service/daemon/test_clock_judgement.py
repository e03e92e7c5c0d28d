"""The clock verdict (``service.daemon.clock``): the judgement with its uncertainty, the best of
several readings, the verdict's age, one log line per change, and the readings against a real
Redis and a real object store (moto's S3 server)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.service.daemon import clock
from hoodied.service.daemon.clock import (
    MAX_AGE_S,
    MAX_UNCERTAINTY_S,
    PROBE_FOLDER,
    ClockCheck,
    ClockReading,
    ClockState,
    ClockWatch,
    ObjectStoreClock,
    RedisClock,
    best_reading,
    judge,
    probe_path,
)
from hoodied.service.locks import RedisLockFactory
from tests.helpers.object_servers import MotoServer, moto_server, s3_env  # noqa: F401  (fixtures)
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)

BOUND = 0.2


def reading(offset: float, rtt: float = 0.0, resolution: float = 0.0) -> ClockReading:
    return ClockReading(offset, rtt, resolution)


# ---------------------------------------------------------------------------- the judgement


@pytest.mark.parametrize("offset", [0.0, 0.1, -0.1, 0.2, -0.2])
def test_offsets_within_the_bound_are_in_bounds(offset: float) -> None:
    assert judge(reading(offset, rtt=0.001), BOUND) is ClockState.IN_BOUNDS


@pytest.mark.parametrize("offset", [0.25, -0.25, 30.0, -30.0])
def test_offsets_past_the_bound_with_a_precise_reading_are_skewed(offset: float) -> None:
    assert judge(reading(offset, rtt=0.001), BOUND) is ClockState.SKEWED


def test_the_uncertainty_counts_in_the_replicas_favour() -> None:
    # 0.5 s off, but the round trip took 0.7 s: the true offset may be 0.15 s, within the bound
    assert judge(reading(0.5, rtt=0.7), BOUND) is ClockState.IN_BOUNDS
    assert judge(reading(-0.5, rtt=0.7), BOUND) is ClockState.IN_BOUNDS
    # a shorter round trip leaves no doubt: at least 0.5 - 0.1 = 0.4 s off
    assert judge(reading(0.5, rtt=0.2), BOUND) is ClockState.SKEWED
    # exactly at the edge: |offset| - uncertainty == bound is not past it
    assert judge(reading(0.45, rtt=0.5), BOUND) is ClockState.IN_BOUNDS
    assert judge(reading(0.4501, rtt=0.5), BOUND) is ClockState.SKEWED


def test_whole_second_store_times_still_catch_large_skews() -> None:
    store = 0.5  # a whole-second last-modified time read at the middle of its second
    assert judge(reading(0.6, rtt=0.01, resolution=store), BOUND) is ClockState.IN_BOUNDS
    assert judge(reading(30.0, rtt=0.01, resolution=store), BOUND) is ClockState.SKEWED
    assert judge(reading(-30.0, rtt=0.01, resolution=store), BOUND) is ClockState.SKEWED


def test_a_failed_or_imprecise_measurement_judges_nothing() -> None:
    assert judge(None, BOUND) is ClockState.UNCHECKED
    assert judge(reading(math.nan), BOUND) is ClockState.UNCHECKED
    assert judge(reading(30.0, rtt=2 * MAX_UNCERTAINTY_S + 0.1), BOUND) is ClockState.UNCHECKED
    assert judge(reading(0.0, rtt=2 * MAX_UNCERTAINTY_S + 0.1), BOUND) is ClockState.UNCHECKED


def test_the_reading_with_the_shortest_round_trip_is_kept() -> None:
    readings = [reading(0.9, rtt=1.0), reading(0.31, rtt=0.02), reading(0.5, rtt=0.4)]
    best = best_reading(readings)
    assert best == readings[1]
    assert best_reading([]) is None
    assert readings[1].uncertainty_s == pytest.approx(0.01)


def test_a_verdict_allows_work_only_while_it_allows_and_is_fresh() -> None:
    now = time.monotonic()
    ok = ClockCheck(ClockState.IN_BOUNDS, "ref", reading(0.0), at=now, bound_s=BOUND)
    assert ok.allows_work and ok.fresh(now + MAX_AGE_S) and not ok.fresh(now + MAX_AGE_S + 1)
    assert ClockCheck(ClockState.UNKNOWN, "none", at=now).allows_work
    assert not ClockCheck(ClockState.SKEWED, "ref", reading(30.0), at=now).allows_work
    assert not ClockCheck(ClockState.UNCHECKED, "ref", error="down", at=now).allows_work
    skewed = ClockCheck(ClockState.SKEWED, "redis TIME", reading(30.0, rtt=0.002), at=now, bound_s=BOUND)
    assert skewed.describe() == (
        "clock skewed: clock offset +30.000 s against redis TIME (± 0.001 s, bound 0.200 s)")


class _Fixed:
    def __init__(self, offsets: list[float | None]) -> None:
        self.source = "fixed"
        self.offsets = offsets
        self.closed = False

    def read(self) -> ClockReading:
        offset = self.offsets.pop(0)
        if offset is None:
            raise ConnectionError("no answer")
        return reading(offset, rtt=0.001)

    def close(self) -> None:
        self.closed = True


class _Recorder:
    """Stands in for the clock module's logger: keeps each event with its fields (structlog's own
    capture depends on the process's logging settings, which earlier tests in the process change)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def _log(self, event: str, **fields: Any) -> None:
        self.events.append({"event": event, **fields})

    info = warning = error = _log


def test_the_watch_logs_once_per_change_and_resumes_by_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = ClockWatch(BOUND)
    assert not watch.allows_work(time.monotonic())  # nothing measured yet
    ref = _Fixed([0.01, 30.0, 29.0, None, 0.02, 0.0])
    watch.use(ref)
    states = []
    recorder = _Recorder()
    monkeypatch.setattr(clock, "log", recorder)
    logs = recorder.events
    for _ in range(6):
        check = watch.measure()
        watch.record(check)
        states.append((check.state, watch.allows_work(time.monotonic())))
    assert states == [
        (ClockState.IN_BOUNDS, True), (ClockState.SKEWED, False), (ClockState.SKEWED, False),
        (ClockState.UNCHECKED, False), (ClockState.IN_BOUNDS, True), (ClockState.IN_BOUNDS, True),
    ]
    assert [e["event"] for e in logs] == [
        "clock checked", "clock skewed: taking no work", "clock not checked: taking no work",
        "clock back in bounds: taking work again",
    ]
    assert logs[1]["offset_seconds"] == 30.0 and "offset +30.000 s" in logs[1]["reason"]
    assert logs[2]["error"] == "no answer"
    watch.use(None)
    assert ref.closed
    check = watch.measure()
    assert check.state is ClockState.UNKNOWN and check.reading is None and check.allows_work


# ---------------------------------------------------------------------------- real references


def test_redis_time_reads_a_small_offset_with_a_short_round_trip(redis_server: RedisServer) -> None:  # noqa: F811
    with RedisLockFactory(redis_server.url) as factory:
        r = RedisClock(factory).read()
    # redis-server runs on this host's clock: the offset is within the round trip
    assert abs(r.offset_s) <= r.uncertainty_s + 0.005, r
    assert 0 < r.rtt_s < 0.5


def test_redis_down_leaves_the_clock_unchecked(tmp_path: Path, redis_server: RedisServer) -> None:  # noqa: F811
    redis_server.stop()
    with RedisLockFactory(redis_server.url, socket_timeout_ms=300) as factory:
        watch = ClockWatch(BOUND)
        watch.use(RedisClock(factory))
        check = watch.measure()
    assert check.state is ClockState.UNCHECKED and check.error and check.reading is None
    assert "clock not checked against redis TIME" in check.describe()


def test_object_store_probe_reads_the_stores_time_and_is_removed(s3_env: MotoServer) -> None:  # noqa: F811
    base = f"s3://{s3_env.new_bucket()}/t"
    storage = ObjectStorage.connect(base)
    clock = ObjectStoreClock(storage, "host-a:123", base)
    r = clock.read()
    # moto runs on this host's clock; its last-modified time has whole seconds
    assert r.resolution_s == 0.5
    assert abs(r.offset_s) <= r.uncertainty_s, r
    assert judge(r, BOUND) is ClockState.IN_BOUNDS
    assert clock.path == probe_path("host-a:123") == f"{PROBE_FOLDER}/hoodied.clock.host-a_123"
    assert storage.exists(clock.path)
    clock.close()
    assert not storage.exists(clock.path)
