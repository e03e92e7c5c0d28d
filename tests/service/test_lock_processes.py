"""Several processes on one table: TrueTime under a shared lock, and a stale holder's refused write.

The workers are real processes (``tests/helpers/lock_worker.py``) and the Redis lock talks to a real
``redis-server`` on loopback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from hoodied.hoodie.avro.container import read_single_record
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline, instant_time_to_datetime
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.service.locks import RedisLockFactory
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)

PROJECT = Path(__file__).resolve().parents[2]
WORKER = str(PROJECT / "tests" / "helpers" / "lock_worker.py")
SKEW_MS = 100
N = 50


def _spawn(*args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(PROJECT))
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        env=env, cwd=PROJECT, text=True, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("lock_kind,offset_ms", [("local", -SKEW_MS), ("redis", SKEW_MS)])
def test_two_processes_issue_unique_ordered_instants(
    hudi_table, redis_server: RedisServer, tmp_path: Path, lock_kind: str, offset_ms: int  # noqa: F811
) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    before = Timeline.load(storage, config)
    lock = "local" if lock_kind == "local" else redis_server.url
    log, start = tmp_path / "order.log", tmp_path / "go"
    common = ["--table", str(root), "--lock", lock, "--n", str(N), "--skew-ms", str(SKEW_MS),
              "--log", str(log), "--start", str(start)]
    # one worker's clock is off by the whole configured skew
    procs = [_spawn("instants", *common), _spawn("instants", *common, "--offset-ms", str(offset_ms))]
    time.sleep(1.0)  # both imported and waiting
    start.touch()
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]

    lines = [line.split() for line in log.read_text().splitlines()]
    times = [t for _, t in lines]
    assert len(times) == 2 * N
    assert len(set(times)) == 2 * N, "duplicate instant times"
    assert times == sorted(times), "instant times out of lock order"
    assert sorted(Counter(pid for pid, _ in lines).values()) == [N, N]
    switches = sum(1 for a, b in zip(lines, lines[1:], strict=False) if a[0] != b[0])
    assert switches >= 2, "the two processes never interleaved"
    last_completion = before.instants[-1].completion_time
    assert last_completion is not None
    assert times[0] > last_completion  # after everything already on the timeline
    now = datetime.now(config.tzinfo)
    assert abs((instant_time_to_datetime(times[-1], config.tzinfo) - now).total_seconds()) < 120

    after = Timeline.load(storage, config)
    cleans = [i for i in after.pending() if i.action is Action.CLEAN]
    assert sorted(i.requested_time for i in cleans) == times
    plan = after.read_plan(cleans[0])
    assert plan is not None
    assert plan["policy"] == "KEEP_LATEST_COMMITS"


def _timeline_names(root: Path, t: str) -> list[str]:
    return sorted(p.name for p in (root / ".hoodie" / "timeline").iterdir() if p.name.startswith(t))


def test_stale_holder_after_pause_is_refused_and_next_owner_completes(
    hudi_table, redis_server: RedisServer  # noqa: F811
) -> None:
    root = hudi_table("cow/v8_nonpartitioned")
    lease_ms = 1_000
    stale = _spawn("stale", "--table", str(root), "--lock", redis_server.url, "--lease-ms", str(lease_ms),
                   "--skew-ms", "50", stdin=subprocess.PIPE)
    assert stale.stdout is not None and stale.stdin is not None
    line = stale.stdout.readline().split()
    assert line[:1] == ["SCHEDULED"], stale.stderr.read() if stale.stderr else ""
    t = line[1]
    os.kill(stale.pid, signal.SIGSTOP)  # the holder pauses (GC, VM freeze...) past its lease
    try:
        storage = LocalStorage(str(root))
        config = load_table_config(storage)
        settings = LockSettings(wait_ms=5_000, retries=0, lease_ms=5_000, poll_ms=50)
        with RedisLockFactory(redis_server.url, settings) as factory:
            lock = factory.lock(storage.base_uri)
            started = time.monotonic()
            with lock:  # granted only once the stale lease ran out
                assert time.monotonic() - started > 0.3
                writer = TimelineWriter(storage, config, lock)
                writer.transition_to_inflight(t, Action.CLEAN)
                done = writer.complete(t, Action.CLEAN, _clean_metadata(t))
    finally:
        os.kill(stale.pid, signal.SIGCONT)
    out, err = stale.communicate("go\n", timeout=60)
    assert stale.returncode == 3, (out, err[-2000:])
    assert "LOST" in out and "refusing to write" in out

    names = _timeline_names(root, t)
    assert names == [f"{t}.clean.inflight", f"{t}.clean.requested", f"{t}_{done.completion_time}.clean"]
    assert (root / ".hoodie" / "timeline" / f"{t}.clean.inflight").read_bytes() == b""
    assert not [p for p in (root / ".hoodie" / "timeline").iterdir() if p.name.endswith(".tmp")]
    tl = Timeline.load(storage, config)
    inst = tl.get(t)
    assert inst is not None and inst.state is State.COMPLETED
    assert tl.read_commit_metadata(inst)["totalFilesDeleted"] == 0


def test_stale_holder_is_refused_even_when_nobody_took_over(hudi_table, redis_server: RedisServer) -> None:  # noqa: F811  # type: ignore[no-untyped-def]
    root = hudi_table("cow/v6_nonpartitioned")
    stale = _spawn("stale", "--table", str(root), "--lock", redis_server.url, "--lease-ms", "600",
                   "--skew-ms", "10", stdin=subprocess.PIPE)
    assert stale.stdout is not None
    t = stale.stdout.readline().split()[1]
    os.kill(stale.pid, signal.SIGSTOP)
    time.sleep(1.2)
    os.kill(stale.pid, signal.SIGCONT)
    out, err = stale.communicate("go\n", timeout=60)
    assert stale.returncode == 3, (out, err[-2000:])
    names = sorted(p.name for p in (root / ".hoodie").iterdir() if p.name.startswith(t))
    assert names == [f"{t}.clean.requested"]  # the instant stays requested for the next owner
    record = read_single_record((root / ".hoodie" / names[0]).read_bytes(), names[0])
    assert record["policy"] == "KEEP_LATEST_COMMITS"


def _clean_metadata(t: str) -> dict[str, object]:
    return {
        "startCleanTime": t,
        "timeTakenInMillis": 5,
        "totalFilesDeleted": 0,
        "earliestCommitToRetain": "",
        "lastCompletedCommitTimestamp": "",
        "partitionMetadata": {},
        "version": 2,
    }


@pytest.mark.parametrize("lock_kind", ["local", "redis"])
def test_two_processes_scheduling_clean_make_exactly_one_plan(
    hudi_table, redis_server: RedisServer, tmp_path: Path, lock_kind: str  # noqa: F811
) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    lock = "local" if lock_kind == "local" else redis_server.url
    start = tmp_path / "go"
    args = ["--table", str(root), "--lock", lock, "--skew-ms", "50", "--start", str(start)]
    procs = [_spawn("schedule-clean", *args), _spawn("schedule-clean", *args)]
    time.sleep(1.0)
    start.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
        outs.append(out.strip())
    scheduled = [o.split()[1] for o in outs if o.startswith("SCHEDULED")]
    assert len(scheduled) == 1, outs
    assert any(o.startswith("NOTHING") and "still pending" in o for o in outs), outs
    cleans = sorted(p.name for p in (root / ".hoodie" / "timeline").iterdir() if ".clean" in p.name)
    assert cleans == [f"{scheduled[0]}.clean.requested"]
