"""A separate process that writes a table's timeline under a lock, driven by the lock tests.

Run as ``python tests/helpers/lock_worker.py MODE ...`` with the project root on ``PYTHONPATH``:

- ``instants``: wait for a start file, then ``--n`` times take the lock, schedule a clean
  instant (TrueTime, with the clock shifted by ``--offset-ms``) and append ``<pid> <time>`` to
  ``--log`` while still holding the lock (so the log is in lock order).
- ``schedule-clean``: wait for a start file, then schedule a clean (``hoodied.service.cli.services``)
  and print ``SCHEDULED <time>`` or ``NOTHING <reason>``.
- ``stale``: take the lock, schedule a clean, print ``SCHEDULED <time>``, wait for a line on
  stdin, then try to move the instant to inflight: prints ``LOST`` (exit 3) when the write
  was refused, ``WROTE`` (exit 0) when it went through.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import Any

from hoodied.hoodie.errors import LockLostError
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings, TrueTime
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.service.locks import lock_from_option

CLEAN_PLAN: dict[str, Any] = {
    "earliestInstantToRetain": None,
    "policy": "KEEP_LATEST_COMMITS",
    "filePathsToBeDeletedPerPartition": {},
    "version": 2,
}


def _writer(args: argparse.Namespace):
    storage = LocalStorage(args.table)
    config = load_table_config(storage)
    settings = LockSettings(
        wait_ms=args.wait_ms, retries=2, retry_interval_ms=100, lease_ms=args.lease_ms, poll_ms=10
    )
    lock, factory = lock_from_option(args.lock, storage, settings)
    offset = args.offset_ms / 1000
    truetime = TrueTime.for_table(
        config, TimeSettings(max_expected_clock_skew_ms=args.skew_ms), clock=lambda: time.time() + offset
    )
    return TimelineWriter(storage, config, lock, truetime=truetime), lock, factory


def run_instants(args: argparse.Namespace) -> int:
    writer, lock, factory = _writer(args)
    while not os.path.exists(args.start):
        time.sleep(0.005)
    with open(args.log, "a", encoding="ascii") as log:
        for _ in range(args.n):
            with lock:
                inst = writer.schedule(Action.CLEAN, CLEAN_PLAN)
                log.write(f"{os.getpid()} {inst.requested_time}\n")
                log.flush()
            # work between instants, as a real writer does; it also lets the other process in
            time.sleep(random.uniform(0.0, 0.03))
    if factory is not None:
        factory.close()
    return 0


def run_stale(args: argparse.Namespace) -> int:
    writer, lock, factory = _writer(args)
    lock.acquire()
    inst = writer.schedule(Action.CLEAN, CLEAN_PLAN)
    print(f"SCHEDULED {inst.requested_time}", flush=True)
    sys.stdin.readline()
    try:
        writer.transition_to_inflight(inst.requested_time, Action.CLEAN)
    except LockLostError as exc:
        print(f"LOST {exc}", flush=True)
        return 3
    finally:
        lock.release()
        if factory is not None:
            factory.close()
    print("WROTE", flush=True)
    return 0


def run_schedule_clean(args: argparse.Namespace) -> int:
    from hoodied.planners.clean import CleanSettings, schedule_clean

    storage = LocalStorage(args.table)
    settings = LockSettings(wait_ms=args.wait_ms, retries=2, retry_interval_ms=100, lease_ms=args.lease_ms,
                            poll_ms=10)
    lock, factory = lock_from_option(args.lock, storage, settings)
    while not os.path.exists(args.start):
        time.sleep(0.005)
    try:
        instant, result = schedule_clean(storage, lock, CleanSettings(commits_retained=2),
                                         time_settings=TimeSettings(max_expected_clock_skew_ms=args.skew_ms))
    finally:
        if factory is not None:
            factory.close()
    print(f"SCHEDULED {instant.requested_time}" if instant else f"NOTHING {result.reason}", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["instants", "stale", "schedule-clean"])
    p.add_argument("--table", required=True)
    p.add_argument("--lock", required=True)
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--offset-ms", type=int, default=0)
    p.add_argument("--skew-ms", type=int, default=100)
    p.add_argument("--lease-ms", type=int, default=10_000)
    p.add_argument("--wait-ms", type=int, default=60_000)
    p.add_argument("--log", default="")
    p.add_argument("--start", default="")
    args = p.parse_args()
    if args.mode == "schedule-clean":
        return run_schedule_clean(args)
    return run_instants(args) if args.mode == "instants" else run_stale(args)


if __name__ == "__main__":
    sys.exit(main())
