"""Replicas with skewed clocks beside a healthy one, all sharing a real Redis: the skewed ones see
their own offset (Redis ``TIME``), report themselves not ready and write nothing; the healthy one
does every clean.

The clocks are moved with Debian's libfaketime (``LD_PRELOAD``; ``tests/run.sh`` installs it). It
moves the monotonic clock by the same offset, which a process only ever reads as differences
(libfaketime 0.9.10 breaks ``time.sleep`` when told to leave the monotonic clock alone). Only
cleans are due (no Spark job, so no JVM runs under the fake clock).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action, State, instant_time_to_epoch_ms
from hoodied.hoodie.timeline.truetime import TimeSettings, TrueTime, timeline_floor
from hoodied.service.locks import RedisLockFactory
from tests.helpers.daemon_procs import events, get, get_or_none, hoodied, running, stop, timeline, wait_for
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import CITIES, SCHEMA, hudi_rs_rows
from tests.helpers.object_servers import MotoServer, moto_server, s3_env, upload_tree  # noqa: F401  (fixtures)
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
#: Fixture tables where a clean is due with two commits retained (no metadata table).
CLEAN_FIXTURES = ["cow/v9_txns_simple_nometa", "mor/avro/v9_txns_simple_nometa", "cow/v9_txns_complex_nometa"]
SETTINGS: dict[str, Any] = {
    "defaults": {"services": {"clean": {"commits_retained": 2}, "compaction": {"schedule": False}}},
    "clock_skew_ms": 200,
    "poll_interval_seconds": 0.2,
    "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
    "retry": {"backoff_seconds": 0.05, "backoff_max_seconds": 0.2},
    "spark": {"master": "local[1]"},
    "log": {"format": "json"},
}


def _faketime_env(offset: str) -> dict[str, str]:
    if not os.path.exists(FAKETIME_LIB):
        pytest.fail(f"{FAKETIME_LIB} is missing (tests/run.sh installs Debian's faketime package)")
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": offset}


def _fake_clock_seen_by_python(env: dict[str, str]) -> float:
    """How far ``time.time()`` and ``datetime.now()`` of a Python started with ``env`` are ahead."""
    code = ("import time, datetime; time.sleep(0.01); print(time.time(), "
            "datetime.datetime.now(datetime.UTC).timestamp())")
    before = time.time()
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, check=True,
                         capture_output=True, text=True, timeout=30).stdout.split()
    after = time.time()
    wall, now = (float(x) for x in out)
    assert abs(wall - now) < 1.0, out  # datetime.now() reads the same fake clock
    return wall - (before + after) / 2


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time (ns)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def _metric(text: str, name: str) -> float | None:
    m = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


def _stop_all(procs: dict[str, subprocess.Popen[str]]) -> dict[str, list[dict[str, Any]]]:
    """SIGTERM every replica (each must exit 0), emptying ``procs``; their log events by name."""
    logs = {}
    for name in list(procs):
        code, err = stop(procs.pop(name))
        assert code == 0, (name, err[-3000:])
        logs[name] = events(err)
    return logs


def _skew_reported(port: int, sign: int) -> bool:
    ready = get_or_none(port, "/readyz")
    metrics = get_or_none(port, "/metrics")
    if ready is None or metrics is None or ready[0] != 503 or "clock skewed" not in ready[1]:
        return False
    offset = _metric(metrics[1], "hoodied_clock_offset_seconds")
    return offset is not None and abs(offset - sign * 30) < 1.0 and \
        _metric(metrics[1], "hoodied_clock_skewed") == 1


def test_skewed_replicas_take_no_work_while_a_healthy_one_cleans_every_table(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    fast, slow = _faketime_env("+30s"), _faketime_env("-30s")
    assert abs(_fake_clock_seen_by_python(fast) - 30) < 2
    assert abs(_fake_clock_seen_by_python(slow) + 30) < 2

    roots = [unzip_table(require_fixture(name), tmp_path / "lake" / f"t{i}")
             for i, name in enumerate(CLEAN_FIXTURES)]
    existing = {r: {i.requested_time for i in timeline(r).instants} for r in roots}
    config = tmp_path / "hoodied.yaml"
    tables = [str(r) for r in roots]
    config.write_text(yaml.safe_dump({**SETTINGS, "tables": tables, "lock": redis_server.url}))
    ports = {"fast": free_port(), "slow": free_port(), "healthy": free_port()}

    def start(name: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return hoodied("run", "--config", str(config), "--http", f"127.0.0.1:{ports[name]}", env=env)

    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        procs["fast"], procs["slow"] = start("fast", fast), start("slow", slow)
        wait_for("the fast replica reports its skew", lambda: _skew_reported(ports["fast"], +1), 60,
                 (procs["fast"],))
        wait_for("the slow replica reports its skew", lambda: _skew_reported(ports["slow"], -1), 60,
                 (procs["slow"],))
        status, body = get(ports["fast"], "/readyz")
        assert status == 503 and body.startswith("clock skewed: clock offset +"), body
        assert "against redis TIME" in body and "bound 0.200 s" in body, body
        assert get(ports["slow"], "/readyz")[1].startswith("clock skewed: clock offset -")
        # many poll cycles with a clean due on every table: nothing is written
        untouched = {r: _tree(r) for r in roots}
        time.sleep(3)
        assert {r: _tree(r) for r in roots} == untouched
        assert {r: {i.requested_time for i in timeline(r).instants} for r in roots} == existing

        healthy_from = time.time()
        procs["healthy"] = start("healthy")

        def cleaned() -> bool:
            for r in roots:
                new = [i for i in timeline(r).instants if i.requested_time not in existing[r]]
                if not any(i.action is Action.CLEAN and i.state is State.COMPLETED for i in new):
                    return False
                if any(i.state is not State.COMPLETED for i in new):
                    return False
            return True

        wait_for("the healthy replica cleans every table", cleaned, 120, tuple(procs.values()))
        healthy_to = time.time()
        assert get(ports["healthy"], "/readyz") == (200, "ready\n")
        healthy_metrics = get(ports["healthy"], "/metrics")[1]
        offset = _metric(healthy_metrics, "hoodied_clock_offset_seconds")
        assert offset is not None and abs(offset) < 0.2, offset
        assert _metric(healthy_metrics, "hoodied_clock_skewed") == 0
        # the skewed ones still refuse work, and nobody quarantined anything
        assert _skew_reported(ports["fast"], +1) and _skew_reported(ports["slow"], -1)
        for name, port in ports.items():
            doc = json.loads(get(port, "/status")[1])
            assert doc["tables_quarantined"] == 0, (name, doc["recent_errors"])
            assert doc["clock"]["state"] == ("in_bounds" if name == "healthy" else "skewed"), doc["clock"]
        logs = _stop_all(procs)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()

    # every new instant (requested and completed) carries the healthy clock
    for r in roots:
        tz = load_table_config(LocalStorage(str(r))).tzinfo
        for inst in timeline(r).instants:
            if inst.requested_time in existing[r]:
                continue
            for t in (inst.requested_time, inst.completion_time):
                assert t is not None, inst
                epoch = instant_time_to_epoch_ms(t, tz) / 1000
                assert healthy_from - 1 <= epoch <= healthy_to + 1, (r, inst, healthy_from, healthy_to)
    for name in ("fast", "slow"):
        names = [e.get("event") for e in logs[name]]
        assert names.count("clock skewed: taking no work") == 1, names
        assert "job started" not in names and "clock back in bounds: taking work again" not in names
        assert not [e for e in logs[name] if e.get("event") == "table quarantined"]
    started = [e for e in logs["healthy"] if e.get("event") == "job started"]
    assert started and {e["action"] for e in started} == {"clean"}
    assert "clock skewed: taking no work" not in [e.get("event") for e in logs["healthy"]]


def test_a_replica_resumes_by_itself_once_its_clock_is_back_in_bounds(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    # the offset is read from a file libfaketime re-reads every second; going from -30 s to 0 moves
    # the (faked) monotonic clock forward, never back
    offset_file = tmp_path / "faketime"
    offset_file.write_text("-30s\n")
    env = {**_faketime_env("-30s"), "FAKETIME_TIMESTAMP_FILE": str(offset_file),
           "FAKETIME_CACHE_DURATION": "1"}
    del env["FAKETIME"]
    root = unzip_table(require_fixture(CLEAN_FIXTURES[0]), tmp_path / "lake" / "t0")
    existing = {i.requested_time for i in timeline(root).instants}
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({**SETTINGS, "tables": [str(root)], "lock": redis_server.url}))
    port = free_port()
    with running("run", "--config", str(config), "--http", f"127.0.0.1:{port}", env=env) as proc:
        wait_for("the replica reports its skew", lambda: _skew_reported(port, -1), 60, (proc,))
        untouched = _tree(root)
        time.sleep(2)
        assert _tree(root) == untouched
        offset_file.write_text("+0s\n")
        def ready() -> bool:
            return (get_or_none(port, "/readyz") or (0, ""))[0] == 200

        wait_for("the replica is ready again", ready, 60, (proc,))
        back_from = time.time()

        def cleaned() -> bool:
            new = [i for i in timeline(root).instants if i.requested_time not in existing]
            return bool(new) and all(i.state is State.COMPLETED for i in new) and \
                any(i.action is Action.CLEAN for i in new)

        wait_for("the replica cleans the table", cleaned, 60, (proc,))
        back_to = time.time()
        offset = _metric(get(port, "/metrics")[1], "hoodied_clock_offset_seconds")
        assert offset is not None and abs(offset) < 0.5, offset
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    names = [e.get("event") for e in events(err)]
    assert names.count("clock skewed: taking no work") == 1, names
    assert names.count("clock back in bounds: taking work again") == 1, names
    assert names.index("clock back in bounds: taking work again") < names.index("job started")
    tz = load_table_config(LocalStorage(str(root))).tzinfo
    for inst in timeline(root).instants:
        if inst.requested_time not in existing:
            for t in (inst.requested_time, inst.completion_time):
                assert t is not None
                assert back_from - 1 <= instant_time_to_epoch_ms(t, tz) / 1000 <= back_to + 1, inst


def test_a_one_pass_run_with_a_skewed_clock_does_nothing_and_fails(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    root = unzip_table(require_fixture(CLEAN_FIXTURES[0]), tmp_path / "lake" / "t0")
    untouched = _tree(root)
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({**SETTINGS, "tables": [str(root)], "lock": redis_server.url,
                                      "http": "off"}))
    proc = hoodied("run", "--config", str(config), "--once", env=_faketime_env("+30s"))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    (skewed,) = [e for e in events(err) if e.get("event") == "clock skewed: taking no work"]
    assert 29 < skewed["offset_seconds"] < 31 and skewed["bound_seconds"] == 0.2
    assert "job started" not in [e.get("event") for e in events(err)]
    assert _tree(root) == untouched


def _rows(keys: range, ts: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": f"key-{i:04d}", "ts": ts, "city": CITIES[i % 3], "v": float(ts)}
                                 for i in keys], schema=SCHEMA)


def test_a_writer_beside_skewed_replicas_loses_nothing(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    """A writer commits under the same Redis lock while a fast and a slow replica sit beside a
    healthy one: the table ends up reading exactly like a twin that got the same writes and no
    table service, every hoodied instant carries the healthy clock, nothing is rolled back."""
    spec = TableSpec("trips", SCHEMA, "id", "city", "ts", TableType.COPY_ON_WRITE, 9)
    root, twin = tmp_path / "lake" / "trips", tmp_path / "twin" / "trips"
    writers = [create_table(LocalStorage(str(r)), spec, max_file_rows=40) for r in (root, twin)]
    first = writers[0].insert(_rows(range(120), 1)).instant_time
    writers[1].insert(_rows(range(120), 1), instant_time=first)
    written = {first}
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        **SETTINGS, "tables": [str(root)], "lock": redis_server.url,
        "defaults": {"services": {"clean": {"commits_retained": 1}, "compaction": {"schedule": False}}},
    }))
    ports = {"fast": free_port(), "slow": free_port(), "healthy": free_port()}
    envs = {"fast": _faketime_env("+30s"), "slow": _faketime_env("-30s"), "healthy": None}
    procs: dict[str, subprocess.Popen[str]] = {}
    factory = RedisLockFactory(redis_server.url)
    storage = LocalStorage(str(root))
    truetime = TrueTime.for_table(load_table_config(storage), TimeSettings(max_expected_clock_skew_ms=200))
    try:
        procs = {name: hoodied("run", "--config", str(config), "--http", f"127.0.0.1:{port}", env=envs[name])
                 for name, port in ports.items()}
        wait_for("the fast replica reports its skew", lambda: _skew_reported(ports["fast"], +1), 60,
                 tuple(procs.values()))
        wait_for("the slow replica reports its skew", lambda: _skew_reported(ports["slow"], -1), 60,
                 tuple(procs.values()))
        for n in range(2, 10):  # updates of a third of the keys and new keys, as a writer would
            rows = _rows(range(n * 7 % 40, 120 + 5 * n, 3), n)
            lock = factory.lock(storage.base_uri)
            with lock:  # Hudi's writer protocol: the instant time is taken and used under the lock
                t = truetime.generate(lock, timeline_floor(storage, load_table_config(storage)))
                writers[0].upsert(rows, instant_time=t)
            writers[1].upsert(rows, instant_time=t)
            written.add(t)
            time.sleep(0.4)

        def settled() -> bool:
            instants = timeline(root).instants
            cleans = [i for i in instants if i.action is Action.CLEAN]
            return all(i.is_completed for i in instants) and bool(cleans) and \
                cleans[-1].requested_time > max(written)

        wait_for("the healthy replica cleans after the last write", settled, 120, tuple(procs.values()))
        ended_at = time.time()
        assert _skew_reported(ports["fast"], +1) and _skew_reported(ports["slow"], -1)
        logs = _stop_all(procs)
    finally:
        factory.close()
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert hudi_rs_rows(root) == hudi_rs_rows(twin)
    for name in ("fast", "slow"):
        assert "job started" not in [e.get("event") for e in logs[name]], name
    instants = timeline(root).instants
    assert not [i for i in instants if i.action is Action.ROLLBACK]
    mine = [i for i in instants if i.requested_time not in written]
    assert mine and {i.action for i in mine} == {Action.CLEAN}
    # every hoodied instant carries the healthy clock: none lands in the fast replica's future
    tz = load_table_config(storage).tzinfo
    for inst in mine:
        for when in (inst.requested_time, inst.completion_time):
            assert when is not None and instant_time_to_epoch_ms(when, tz) / 1000 <= ended_at + 1, inst


def _objects(storage: ObjectStorage) -> dict[str, int]:
    return {i.path: i.size for i in storage.walk()}


@pytest.mark.parametrize("offset", ["+30s", "-30s"])
def test_without_redis_the_object_store_time_catches_a_skewed_replica(
    offset: str, tmp_path: Path, s3_env: MotoServer  # noqa: F811
) -> None:
    bucket = s3_env.new_bucket()
    uri = upload_tree(unzip_table(require_fixture(CLEAN_FIXTURES[0]), tmp_path / "t0"), bucket, "t0")
    storage = ObjectStorage.connect(uri)
    before = _objects(storage)
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({**SETTINGS, "tables": [uri], "http": "off"}))
    proc = hoodied("run", "--config", str(config), "--once", env=_faketime_env(offset))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-3000:]
    (skewed,) = [e for e in events(err) if e.get("event") == "clock skewed: taking no work"]
    sign = 1 if offset.startswith("+") else -1
    # whole-second store times: the offset is known to within half a second and the round trip
    assert abs(skewed["offset_seconds"] - sign * 30) < 1.5, skewed
    assert 0.5 <= skewed["uncertainty_seconds"] < 1.5, skewed
    assert skewed["source"] == f"object store {uri}/.hoodie/.locks", skewed
    assert "job started" not in [e.get("event") for e in events(err)]
    # nothing written: the probe was removed when the daemon stopped
    assert _objects(storage) == before
