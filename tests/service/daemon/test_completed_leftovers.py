"""A writer killed right after its completed file: its markers, heartbeat and attempt identity are left
in the table, and the daemon's poll removes them (``hoodie.leftovers``), never a pending instant's.

``hoodied execute`` runs in a real subprocess held at the crash point ``completed`` (right after the
completed file) and is killed there with SIGKILL (``tests.helpers.crash_driver``): a clean on a local
table, and a compaction (the service with markers) on a local table and on the S3 test server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.fence import attempt_path
from hoodied.hoodie.heartbeat import heartbeat_path
from hoodied.hoodie.leftovers import Leftovers
from hoodied.hoodie.markers import WriteMarkers
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import State
from hoodied.service.config import HeartbeatConfig, load_config
from hoodied.service.daemon.poll import PollResult, poll_table
from hoodied.service.daemon.registry import build_registry
from tests.executors.test_services_s3 import COMPACT_ALL, HEARTBEAT, SKEW, hoodied, upload
from tests.helpers.crash_driver import kill_group, start_paused
from tests.helpers.daemon_procs import events, get, running, stop, wait_for
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import written_mor_table
from tests.helpers.object_servers import MotoServer, moto_server, s3_env  # noqa: F401  (fixtures)
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)

CLEAN_TABLE = "cow/v9_txns_simple_nometa"
#: The driver's heartbeat beats every 100 ms (``HEARTBEAT``): expired after two misses.
EXPIRED = HeartbeatConfig(interval_ms=100, tolerable_misses=2)
#: Hudi's default: the same heartbeat looks alive.
ALIVE = HeartbeatConfig()


def _kill_at(tmp_path: Path, point: str, *args: str) -> None:
    """``hoodied execute ARGS`` SIGKILLed at ``point``."""
    ready = tmp_path / f"ready-{point}-{time.monotonic_ns()}"
    proc = start_paused("from hoodied.service.cli.main import main; main()",
                        ["execute", *args, *HEARTBEAT, *SKEW], point, ready)
    kill_group(proc)


def _schedule(target: str, service: str, *options: str) -> str:
    out = hoodied("schedule", service, target, *options, *SKEW)
    assert out.exit_code == 0, out.output
    return out.stdout.split(" ", 1)[0]


def _state(storage: Storage, t: str) -> State:
    inst = Timeline.load(storage, load_table_config(storage)).get(t)
    assert inst is not None
    return inst.state


def _left(storage: Storage, t: str) -> tuple[bool, bool, bool]:
    """(markers, heartbeat, attempt identity) of ``t`` in the table."""
    markers = WriteMarkers(storage, t).exists()
    return markers, storage.exists(heartbeat_path(t)), storage.exists(attempt_path(t))


def _poll(storage: Storage, heartbeat: HeartbeatConfig, cached: PollResult | None = None) -> PollResult:
    settings = load_config(overrides={"tables": [storage.base_uri], "http": "off"})
    return poll_table(storage, cached, settings.tables[0].policy, build_registry(), heartbeat, tidy=True)


def test_the_poll_removes_a_completed_cleans_leftovers_never_a_pending_ones(tmp_path: Path) -> None:
    done_root = unzip_table(require_fixture(CLEAN_TABLE), tmp_path / "done")
    pending_root = unzip_table(require_fixture(CLEAN_TABLE), tmp_path / "pending")
    done, pending = storage_for(str(done_root)), storage_for(str(pending_root))
    t = _schedule(str(done_root), "clean", "--retained", "1")
    p = _schedule(str(pending_root), "clean", "--retained", "1")
    _kill_at(tmp_path, "completed", str(done_root))
    _kill_at(tmp_path, "inflight", str(pending_root))
    assert _state(done, t) is State.COMPLETED and _state(pending, p) is State.INFLIGHT
    # a clean writes no markers: the heartbeat and the identity stay behind the completed file
    assert _left(done, t) == (False, True, True)
    assert _left(pending, p) == (False, True, True)

    # a heartbeat still fresh by the daemon's settings: a writer may still be tidying up itself
    assert _poll(done, ALIVE).leftovers_removed == []
    assert _left(done, t) == (False, True, True)
    time.sleep(0.3)
    # the pending clean's expired heartbeat and identity are its recovery's, not the poll's
    assert _poll(pending, EXPIRED).leftovers_removed == []
    assert _left(pending, p) == (False, True, True)
    first = _poll(done, EXPIRED)
    assert first.leftovers_removed == [(Leftovers(t, markers=False, heartbeat=True, attempt=True),
                                        TableService.CLEAN)]
    assert _left(done, t) == (False, False, False)
    # the next pass over the same names finds nothing (and does not look again until they change)
    assert _poll(done, EXPIRED).leftovers_removed == []
    assert _poll(done, EXPIRED, first).leftovers_removed == []


def _metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head.startswith(name + "{") and all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return None


def test_the_daemon_tidies_a_killed_cleans_leftovers_and_counts_its_success(tmp_path: Path) -> None:
    root = unzip_table(require_fixture(CLEAN_TABLE), tmp_path / "t0")
    storage = storage_for(str(root))
    t = _schedule(str(root), "clean", "--retained", "1")
    _kill_at(tmp_path, "completed", str(root))
    assert _state(storage, t) is State.COMPLETED and _left(storage, t) == (False, True, True)
    config = tmp_path / "hoodied.yaml"
    settings: dict[str, Any] = {
        "tables": [str(root)], "poll_interval_seconds": 0.2, "log": {"format": "json"},
        "heartbeat": {"interval_ms": 100, "tolerable_misses": 2},
        "defaults": {"services": {"clean": {"schedule": False}, "compaction": {"schedule": False}}},
    }
    config.write_text(yaml.safe_dump(settings))
    port = free_port()
    with running("run", "--config", str(config), "--http", f"127.0.0.1:{port}") as proc:
        wait_for("the leftovers are removed", lambda: _left(storage, t) == (False, False, False), 60, (proc,))
        metrics = get(port, "/metrics")[1]
        status = json.loads(get(port, "/status")[1])
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    assert _metric(metrics, "hoodied_jobs_total", table=str(root), action="clean", outcome="success") == 1
    assert status["tables_quarantined"] == 0
    (tidied,) = [e for e in events(err) if e.get("event") == "completed instant's leftovers removed"]
    assert tidied["instant"] == t and tidied["removed"] == "heartbeat, attempt identity", tidied
    assert "job started" not in [e.get("event") for e in events(err)]


def _compaction_killed_after_completing(target: str, tmp_path: Path, *lock: str) -> str:
    t = _schedule(target, "compaction", *lock, *COMPACT_ALL)
    _kill_at(tmp_path, "completed", target, *lock, "--spark", "local[1]")
    return t


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_compaction_killed_after_completing_leaves_markers_the_poll_removes(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = tmp_path / "local"
    written_mor_table(root, 9)
    lock: tuple[str, ...] = ()
    target = str(root)
    if where == "s3":
        s3: MotoServer = request.getfixturevalue("s3_env")
        redis: RedisServer = request.getfixturevalue("redis_server")
        target, lock = upload(root, s3.new_bucket()), ("--lock", redis.url)
    storage = storage_for(target)
    t = _compaction_killed_after_completing(target, tmp_path, *lock)
    assert _state(storage, t) is State.COMPLETED
    assert _left(storage, t) == (True, True, True)
    time.sleep(0.3)
    (removed,) = _poll(storage, EXPIRED).leftovers_removed
    assert removed == (Leftovers(t, markers=True, heartbeat=True, attempt=True), TableService.COMPACTION)
    assert _left(storage, t) == (False, False, False)
    assert not list(storage.list(f".hoodie/.temp/{t}"))  # the local marker folder goes too
