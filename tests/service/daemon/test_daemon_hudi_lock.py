"""``hoodied run`` beside a Hudi writer that holds the table's Hudi lock, configured with Hudi's keys.

Two real daemons, each on its own table: one whose settings name ``FileSystemBasedLockProvider``
(the foreign holder is a Hudi-shaped ``.hoodie/lock`` file created and deleted as Hudi's provider
does), one naming ``ZookeeperBasedLockProvider`` against a real ZooKeeper server (the foreign holder
is a real Apache Curator ``InterProcessMutex`` process, the recipe Hudi's provider uses). While the
foreign holder has the lock, the daemon tries to plan the clean that is due and plans nothing; the
"writer" meanwhile completes a commit on the timeline; once the lock is released, the daemon's
clean instant is later than every time the writer produced under the lock. ``/status`` names the
Hudi lock guarding each table.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action, Instant
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from tests.helpers import zookeeper_server as zk_helpers
from tests.helpers.daemon_procs import get_or_none, hoodied, service_instants, wait_for
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.redis_server import free_port

zookeeper_server = zk_helpers.zookeeper_server
curator_holder = zk_helpers.curator_holder

FIXTURE = "cow/v9_txns_simple_nometa"
ZOOKEEPER_PROVIDER = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
#: Hudi's lock keys shared by both tables: short attempts, so a busy lock shows in /status at once.
ATTEMPT = {"hoodie.write.lock.wait_time_ms": 300, "hoodie.write.lock.num_retries": 0,
           "hoodie.time.generator.max_expected_clock_skew_ms": 5}
#: ``LockInfo`` as Hudi's ``FileSystemBasedLockProvider`` writes it (Jackson's pretty printer).
HUDI_LOCK_INFO = (
    b'{\n  "lockCreateTime" : "2024-05-06 07:08:09.123",\n  "lockThreadName" : "pool-7-thread-1",\n'
    b'  "lockStacksInfo" : [ ]\n}'
)


def _settings(path: Path, table: Path, hudi_lock: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({
        "tables": [{"path": str(table), "policy": {"hudi_lock": {**ATTEMPT, **hudi_lock}}}],
        "defaults": {"services": {"clean": {"commits_retained": 2}}},
        "clock_skew_ms": 5,
        "poll_interval_seconds": 0.2,
        "retry": {"backoff_seconds": 0.05, "backoff_max_seconds": 0.2},
        "log": {"format": "json"},
    }))
    return path


def _table_status(port: int, table: Path) -> dict[str, Any] | None:
    got = get_or_none(port, "/status")
    if got is None or got[0] != 200:
        return None
    return next((t for t in json.loads(got[1])["tables"] if t["path"] == str(table)), None)


def _foreign_commit(table: Path) -> Instant:
    """What the writer does while it holds the lock: a commit, requested to completed (its times
    come from its own clock, as a Hudi writer's do; the lock it holds is the foreign holder's)."""
    storage = LocalStorage(str(table))
    lock = InProcessLock(storage.base_uri)
    with lock:
        writer = TimelineWriter(storage, load_table_config(storage), lock,
                                time_settings=TimeSettings(max_expected_clock_skew_ms=5))
        instant = writer.schedule(Action.COMMIT, None)
        writer.transition_to_inflight(instant.requested_time, Action.COMMIT)
        return writer.complete(instant.requested_time, Action.COMMIT, {
            "partitionToWriteStats": {}, "compacted": False, "extraMetadata": {}, "operationType": "UPSERT",
        })


def _run_beside_holder(
    tmp_path: Path, table: Path, hudi_lock: dict[str, Any], expected_lock: str, release: Callable[[], None]
) -> None:
    """The daemon on ``table`` while the foreign holder (already holding) has the lock, then after
    ``release``: nothing planned while held, a clean later than the writer's times after."""
    port = free_port()
    daemon = hoodied("run", "--config", str(_settings(tmp_path / "hoodied.yaml", table, hudi_lock)),
                     "--http", f"127.0.0.1:{port}")
    try:
        def refused_while_held() -> dict[str, Any] | None:
            entry = _table_status(port, table)
            outcomes = entry["last_outcomes"] if entry else []
            return entry if any(o["outcome"] == "lock_unavailable" and o["action"] == "clean"
                                for o in outcomes) else None

        entry = wait_for("the daemon tries to plan the clean and finds the lock held", refused_while_held,
                         60, (daemon,))
        assert entry["lock"] == expected_lock
        foreign = _foreign_commit(table)
        assert service_instants(table, Action.CLEAN) == [], "planned while the writer held the lock"
        release()
        cleans = wait_for("the daemon plans the clean once the lock is free",
                          lambda: service_instants(table, Action.CLEAN), 60, (daemon,))
        assert foreign.completion_time is not None
        # later than the writer's requested and completion times (Hudi's ordering of instants)
        assert cleans[0].requested_time > foreign.completion_time > foreign.requested_time
    finally:
        daemon.terminate()
        try:
            daemon.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.communicate()


def test_filesystem_lock_holder_keeps_the_daemon_from_planning(tmp_path: Path) -> None:
    table = unzip_table(require_fixture(FIXTURE), tmp_path / "lake" / "t")
    lock_file = table / ".hoodie" / "lock"
    # Hudi's provider: create(path, overwrite=false), then the LockInfo text; no expiry (the default)
    with open(lock_file, "xb") as f:
        f.write(HUDI_LOCK_INFO)
    _run_beside_holder(
        tmp_path, table,
        {"hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"},
        "FileSystemBasedLockProvider .hoodie/lock + .hoodie/.aux/lock",
        lambda: os.unlink(lock_file),  # Hudi's unlock: delete the file
    )


def test_zookeeper_lock_holder_keeps_the_daemon_from_planning(
    tmp_path: Path, zookeeper_server: zk_helpers.ZooKeeperServer, curator_holder: zk_helpers.CuratorHolder
) -> None:
    table = unzip_table(require_fixture(FIXTURE), tmp_path / "lake" / "t")
    name = load_table_config(LocalStorage(str(table))).name
    base_path = f"/hudi/daemon-{tmp_path.name}"
    # the lock key is left to Hudi's inference: the table's name, as the daemon reads it too
    holder = curator_holder.start(zookeeper_server.hosts, f"{base_path}/{name}")
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("held "), "the Curator holder did not take the lock"

        def release() -> None:
            assert holder.stdin is not None and holder.stdout is not None
            holder.stdin.close()
            assert holder.stdout.readline().strip() == "released"

        _run_beside_holder(tmp_path, table, {
            "hoodie.write.lock.provider": ZOOKEEPER_PROVIDER,
            "hoodie.write.lock.zookeeper.url": zookeeper_server.hosts,
            "hoodie.write.lock.zookeeper.base_path": base_path,
            "hoodie.write.lock.zookeeper.session_timeout_ms": 10_000,
        }, f"ZookeeperBasedLockProvider {zookeeper_server.hosts}{base_path}/<hoodie.table.name>", release)
    finally:
        holder.kill()
        holder.wait()
        for stream in (holder.stdin, holder.stdout):
            if stream is not None:
                stream.close()

