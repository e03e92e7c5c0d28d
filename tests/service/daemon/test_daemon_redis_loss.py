"""Redis restarted empty while a job runs: two replicas still never run two jobs on one table at once.

The daemon's table slot lives in Redis (``service.daemon.leases``); a Redis restarted empty loses it
with every lease while the job that held it goes on. What keeps the second replica off the table
is kept in the table itself: the running attempt's identity and heartbeat, checked under the
table lock before any attempt starts (``hoodie.fence.require_table_idle``).

Real ``hoodied run`` processes, a real ``redis-server`` (stopped and started empty on its port),
a real fixture table (version 8, with a metadata table) with a requested clean (real executor,
paused half-way through its deletes) and a later requested compaction (real Spark executor). The
jobs' start and end come from the replicas' own ``job ended`` log records; every job that got
past its start checks must have run alone on the table.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clean import CleanSettings, schedule_clean
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy, schedule_compaction
from tests.helpers.daemon_procs import events, hoodied, service_instants, stop, wait_for
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)

QUICK = TimeSettings(max_expected_clock_skew_ms=5)
#: Outcomes of jobs that were turned away before their attempt started (nothing of theirs ran).
TURNED_AWAY = {"skipped", "claimed", "lock_unavailable", "already_done"}


def _span(event: dict[str, Any]) -> tuple[float, float]:
    end = datetime.fromisoformat(event["timestamp"]).timestamp()
    return end - float(event["seconds"]), end


def test_redis_restarted_empty_mid_job_leaves_one_job_per_table(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    root = unzip_table(require_fixture("mor/avro/v8_trips_8i3u1d"), tmp_path / "t")
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    clean, _ = schedule_clean(storage, lock, CleanSettings(commits_retained=1), time_settings=QUICK)
    compaction, why = schedule_compaction(
        storage, lock, CompactionSettings(max_delta_commits=1, strategy=CompactionStrategy.UNBOUNDED),
        time_settings=QUICK)
    assert clean is not None and compaction is not None, why
    rows = hudi_rs_rows(root)
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "tables": [str(root)],
        "defaults": {"services": {"clean": {"schedule": False}, "compaction": {"schedule": False}}},
        "lock": {"url": redis_server.url, "wait_ms": 200, "retries": 1, "instant_lease_ms": 3000},
        "clock_skew_ms": 5,
        "poll_interval_seconds": 0.2,
        "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
        "retry": {"backoff_seconds": 0.05, "backoff_max_seconds": 0.5},
        "spark": {"master": "local[1]"},
        "log": {"format": "json"},
        "http": "off",
    }))
    ready = tmp_path / "paused"
    # whichever replica takes the clean stops half-way through its deletes for 20 s, beating
    pause = {"HOODIED_TEST_PAUSE_AT": "deletes-half", "HOODIED_TEST_PAUSE_READY": str(ready),
             "HOODIED_TEST_PAUSE_S": "20"}
    replicas = [hoodied("run", "--config", str(config), env=pause) for _ in range(2)]
    try:
        wait_for("a replica's clean reaches its pause point", ready.exists, 90, tuple(replicas))
        redis_server.stop()
        redis_server.start()  # same port, empty: the table slot and both instants' leases are gone

        def both_completed() -> bool:
            done = {i.requested_time for a in (Action.CLEAN, Action.COMPACTION)
                    for i in service_instants(root, a) if i.state is State.COMPLETED}
            return {clean.requested_time, compaction.requested_time} <= done

        wait_for("the clean and the compaction complete", both_completed, 240, tuple(replicas))
    finally:
        results = [stop(p, timeout=60) for p in replicas]
    for code, err in results:
        assert code == 0, err[-3000:]
    ended = [e for _, err in results for e in events(err)
             if e.get("event") == "job ended" and e.get("kind") == "execute"]
    worked = sorted((_span(e), e["action"], e["outcome"]) for e in ended if e["outcome"] not in TURNED_AWAY)
    assert {a for _, a, o in worked if o == "success"} == {"clean", "compaction"}, worked
    for (first, a1, o1), (second, a2, o2) in zip(worked, worked[1:], strict=False):
        assert first[1] <= second[0], f"two jobs at once: {a1} ({o1}) {first}, {a2} ({o2}) {second}"
    # the compaction was turned away while the paused clean was alive, not run beside it
    busy = [e for e in ended
            if e["action"] == "compaction" and "one job per table" in (e.get("message") or "")]
    assert busy, [(e["action"], e["outcome"], e.get("message")) for e in ended]
    assert hudi_rs_rows(root) == rows
