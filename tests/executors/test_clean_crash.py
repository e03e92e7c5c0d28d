"""A clean survives kill -9 at every step, and scheduling survives Redis going away.

``hoodied execute`` runs in a real subprocess; the executor's test hook
(``HOODIED_TEST_PAUSE_AT``) makes it write a ready file and sleep at the chosen point, and the
test kills it there with SIGKILL. A re-run must complete the clean from its unchanged plan
and delete exactly the plan's files. The Redis lock talks to a real ``redis-server``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hoodied.executors.clean import execute_clean
from hoodied.hoodie.errors import LockLostError
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners import clean as cli_services
from hoodied.planners.clean import CleanSettings, planned_files
from hoodied.service.cli.main import cli
from hoodied.service.locks import RedisLockFactory
from tests.executors.test_clean_executor import _files, _hudi_rs
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)

PROJECT = Path(__file__).resolve().parents[2]
FAST = TimeSettings(max_expected_clock_skew_ms=5)
HEARTBEAT = ["--heartbeat-interval-ms", "100"]
SKEW = ["--clock-skew-ms", "5"]

CRASHES = [
    ("cow/v9_txns_simple_nometa", "KEEP_LATEST_COMMITS", "requested"),
    ("cow/v9_txns_simple_nometa", "KEEP_LATEST_COMMITS", "inflight"),
    ("cow/v9_txns_simple_nometa", "KEEP_LATEST_COMMITS", "deletes-half"),
    ("cow/v9_txns_simple_nometa", "KEEP_LATEST_COMMITS", "deletes-done"),
    ("cow/v6_simplekeygen_nonhivestyle_overwritetable", "KEEP_LATEST_FILE_VERSIONS", "deletes-half"),
]


def _timeline_names(root: Path, t: str) -> list[str]:
    folder = root / ".hoodie" / "timeline"
    folder = folder if folder.is_dir() else root / ".hoodie"
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(t))


def _wait_ready(proc: subprocess.Popen[bytes], ready: Path) -> None:
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None:
            _, err = proc.communicate()
            tail = err.decode()[-2000:]
            pytest.fail(f"executor exited ({proc.returncode}) before the pause point: {tail}", pytrace=False)
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("executor never reached the pause point")
        time.sleep(0.01)


@pytest.mark.parametrize("fid,policy,point", CRASHES)
def test_kill_9_at_every_step_then_a_rerun_completes_the_clean(
    hudi_table, tmp_path: Path, fid: str, policy: str, point: str
) -> None:
    root = hudi_table(fid)
    run = CliRunner().invoke
    scheduled = run(cli, ["schedule", "clean", str(root), "--policy", policy, "--retained", "1", *SKEW])
    assert scheduled.exit_code == 0, scheduled.stdout
    t = scheduled.stdout.split()[0]
    storage = LocalStorage(str(root))
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    plan = timeline.read_plan(timeline.get(t))  # type: ignore[arg-type]
    planned = {p[len(storage.base_uri) + 1:] for p in planned_files(plan)}  # type: ignore[arg-type]
    assert len(planned) >= 4
    rows = _hudi_rs(root, None)
    before = _files(root)
    requested = _timeline_names(root, t)
    assert requested == [f"{t}.clean.requested"]

    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=str(PROJECT), HOODIED_TEST_PAUSE_AT=point,
               HOODIED_TEST_PAUSE_READY=str(ready), HOODIED_TEST_PAUSE_S="60")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hoodied.service.cli", "execute", str(root),
         "--parallelism", "4", *HEARTBEAT, *SKEW],
        env=env, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        _wait_ready(proc, ready)
        gone = {f for f in planned if not (root / f).exists()}
        names = _timeline_names(root, t)
        if point == "requested":
            assert names == [f"{t}.clean.requested"] and not gone
        elif point == "inflight":
            assert names == [f"{t}.clean.inflight", f"{t}.clean.requested"] and not gone
        elif point == "deletes-half":
            assert len(gone) == len(planned) // 2
        else:
            assert gone == planned
        assert (root / ".hoodie" / ".heartbeat" / t).exists()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert _timeline_names(root, t) == names, "the killed executor completed the clean"
    assert before - _files(root) == gone  # nothing outside the plan was touched

    time.sleep(0.3)  # the dead executor's heartbeat expires (2 misses of 100 ms)
    rerun = run(cli, ["execute", str(root), *HEARTBEAT, *SKEW])
    assert rerun.exit_code == 0, rerun.stdout + rerun.stderr
    already = f" ({len(gone)} already gone)" if gone else ""
    assert rerun.stdout.startswith(f"{t} clean: {len(planned) - len(gone)} files deleted{already}; completed")
    after = _files(root)
    assert before - after == planned, "files outside the plan were deleted, or plan files are left"
    # new files: the clean's own timeline files (a heartbeat temp file of the killed process may stay)
    new = {f for f in after - before if not f.startswith(".hoodie/.heartbeat/")}
    assert {Path(f).name for f in new} <= {f"{t}.clean.inflight", *(n for n in _timeline_names(root, t)
                                                                     if n.endswith(".clean"))}
    assert not (root / ".hoodie" / ".heartbeat" / t).exists()
    assert not [f for f in after if f.endswith(".tmp") and f.startswith(".hoodie/timeline")]
    timeline = Timeline.load(storage, config)
    inst = timeline.get(t)
    assert inst is not None and inst.is_completed
    metadata = timeline.read_commit_metadata(inst)
    # as Hudi records a retried clean: files the killed attempt deleted are "failed" deletes now
    assert metadata["totalFilesDeleted"] == len(planned) - len(gone)
    assert sum(len(p["failedDeleteFiles"]) for p in metadata["partitionMetadata"].values()) == len(gone)
    assert _hudi_rs(root, None) == rows


# ---------------------------------------------------------------------------- Redis goes away


def test_redis_stopped_during_scheduling(
    hudi_table, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    storage = LocalStorage(str(root))
    before = _files(root)
    run = CliRunner().invoke
    one = CleanSettings(commits_retained=1)

    # Redis down before the lock is taken: bounded retries, one clear line, nothing written
    redis_server.stop()
    started = time.monotonic()
    down = run(cli, ["schedule", "clean", str(root), "--retained", "1", "--lock", redis_server.url,
                     "--lock-wait-ms", "100", "--lock-retries", "1", *SKEW])
    assert time.monotonic() - started < 8
    assert down.exit_code == 1, down.stdout
    errors = [line for line in down.stderr.splitlines() if line.startswith("hoodied: error:")]
    assert len(errors) == 1 and "not acquired after 2 attempt(s)" in errors[0]
    assert "lock service unreachable" in errors[0]
    assert _files(root) == before
    redis_server.start()

    settings = LockSettings(wait_ms=500, retries=2, retry_interval_ms=100, lease_ms=3_000, poll_ms=20)
    with RedisLockFactory(redis_server.url, settings, socket_timeout_ms=300) as factory:
        # Redis goes away while the scheduler holds the lock, after planning, before the plan is written
        real = cli_services.plan_clean

        def plan_then_lose_redis(*args, **kwargs):
            result = real(*args, **kwargs)
            redis_server.stop()
            return result

        monkeypatch.setattr(cli_services, "plan_clean", plan_then_lose_redis)
        with pytest.raises(LockLostError, match="cannot be confirmed"):
            cli_services.schedule_clean(storage, factory.lock(storage.base_uri), one, time_settings=FAST)
        assert _files(root) == before, "a plan was written without confirmed ownership"
        monkeypatch.undo()

        # Redis is back: scheduling and executing work again, under the same lock
        redis_server.start()
        instant, result = cli_services.schedule_clean(storage, factory.lock(storage.base_uri), one,
                                                      time_settings=FAST)
        assert instant is not None and result.file_count == 12
        done = execute_clean(storage, load_table_config(storage), factory.lock(storage.base_uri),
                             instant.requested_time, time_settings=FAST)
    assert len(done.deleted) == 12 and done.instant.is_completed


@pytest.mark.parametrize("lock", ["local", "redis"])
def test_two_processes_scheduling_at_once_make_exactly_one_plan(
    hudi_table, redis_server: RedisServer, lock: str  # noqa: F811
) -> None:
    root = hudi_table("cow/v9_txns_simple_nometa")
    option = redis_server.url if lock == "redis" else "local"
    command = [sys.executable, "-m", "hoodied.service.cli", "schedule", "clean", str(root), "--retained", "1",
               "--lock", option, *SKEW]
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    procs = [subprocess.Popen(command, cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    requested = sorted((root / ".hoodie" / "timeline").glob("*.clean.requested"))
    assert len(requested) == 1, requested
    said = b"".join(out for out, _ in outs).decode()
    assert "still pending" in said  # the second scheduler saw the first one's plan
