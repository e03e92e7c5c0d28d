"""Two daemon replicas sharing work through a real Redis: exactly-once execution and takeover.

Real ``hoodied run`` processes, a real ``redis-server``, real tables (fixture copies and
tables written by ``hoodie.demo.writer``) and, for compactions, each replica's own Spark local
session. Spark jobs are kept few (four compactions, one killed attempt) so the file runs in
about two minutes on two cores.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import datetime_to_instant_time
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clean import CleanSettings, schedule_clean
from hoodied.planners.compaction import schedule_compaction
from hoodied.service.config import load_config
from hoodied.service.daemon.loop import Daemon
from hoodied.service.daemon.registry import JobContext, Registry, build_registry, register_executor
from tests.helpers.daemon_procs import (
    events,
    get,
    get_or_none,
    replicas_once,
    running,
    service_instants,
    stop,
    timeline,
    wait_for,
)
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, written_mor_table
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)

#: Fixture tables where a clean is due with two commits retained (no metadata table).
CLEAN_FIXTURES = ["cow/v9_txns_simple_nometa", "mor/avro/v9_txns_simple_nometa", "cow/v9_txns_complex_nometa"]
QUICK = TimeSettings(max_expected_clock_skew_ms=5)
SETTINGS: dict[str, Any] = {
    "defaults": {"services": {"clean": {"commits_retained": 2}, "compaction": {"schedule": False}}},
    "clock_skew_ms": 5,
    "poll_interval_seconds": 0.2,
    "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
    "retry": {"backoff_seconds": 0.05, "backoff_max_seconds": 0.2},
    # no session started ahead (``tests.helpers.daemon_procs.SPARK_AHEAD_OFF``): in-process daemons too
    "spark": {"master": "local[1]", "start_at_startup": False},
    "log": {"format": "json"},
}


def _config(path: Path, **values: Any) -> Path:
    path.write_text(yaml.safe_dump({**SETTINGS, **values}))
    return path


def _redis_keys(server: RedisServer) -> list[str]:
    """The keys of locks, leases and slots (not the per-table controls: service.table_controls)."""
    resp = server.command("KEYS", "hoodied:*").decode()
    return [k for k in resp.split("\r\n")
            if k.startswith(("hoodied:lock:", "hoodied:lease:", "hoodied:slot:"))]


def _redis_int(server: RedisServer, key: str) -> int:
    resp = server.command("GET", key).decode()
    return int(resp.split("\r\n")[1]) if resp.startswith("$") and not resp.startswith("$-1") else 0


def _lease_fence(server: RedisServer, table: Path) -> int:
    """How many times a lease of one of ``table``'s instants was taken (the per-table fencing counter)."""
    keys = [k for k in _redis_keys(server) if k.startswith("hoodied:lease:{") and k.endswith("}:fence")]
    mine = [k for k in keys if k[len("hoodied:lease:{"):-len("}:fence")].rstrip("/").endswith(str(table))]
    return sum(_redis_int(server, k) for k in mine)


def _compaction_outputs_once(root: Path, instants: list[Instant]) -> None:
    """The compactions wrote exactly one base file per planned file group, and no marker is left."""
    tl = timeline(root)
    for inst in instants:
        assert inst.is_completed, (root, inst)
        plan = tl.read_plan(inst)
        assert plan is not None
        planned = sorted(op["fileId"] for op in plan["operations"])
        written = sorted(p.name.split("_")[0] for p in root.rglob(f"*_{inst.requested_time}.parquet"))
        assert written == planned, (root, inst.requested_time, written, planned)
        markers = root / ".hoodie" / ".temp" / inst.requested_time  # empty folders may stay behind
        assert not [p for p in markers.rglob("*") if p.is_file()], (root, inst.requested_time)


def _no_heartbeats(root: Path) -> bool:
    beats = root / ".hoodie" / ".heartbeat"
    return not beats.exists() or not any(beats.iterdir())


# ---------------------------------------------------------------------------- 20 tables, 2 replicas


def test_twenty_tables_two_replicas_execute_every_instant_exactly_once(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    lake = tmp_path / "lake"
    mor = [lake / f"written_mor_{i}" for i in range(4)]
    for root in mor:
        written_mor_table(root)  # six delta commits: compaction is due by the default trigger (5)
    cleans = [unzip_table(require_fixture(CLEAN_FIXTURES[i % 3]), lake / f"fixture_{i:02d}")
              for i in range(16)]
    tables = [*mor, *cleans]
    before = {t: hudi_rs_rows(t) for t in tables}
    existing = {t: {i.requested_time for i in timeline(t).instants} for t in tables}
    requested: dict[Path, list[str]] = {}
    # half of the work is requested by "another writer" before the daemons start
    for root in mor[:2]:
        storage = LocalStorage(str(root))
        inst, _ = schedule_compaction(storage, InProcessLock(storage.base_uri), time_settings=QUICK)
        assert inst is not None
        requested[root] = [inst.requested_time]
    for root in cleans[:8]:
        storage = LocalStorage(str(root))
        inst, _ = schedule_clean(storage, InProcessLock(storage.base_uri), CleanSettings(commits_retained=2),
                                 time_settings=QUICK)
        assert inst is not None
        requested[root] = [inst.requested_time]
    # the other half is planned by the daemons' policy (compaction planning only where it is on)
    entries: list[Any] = [{"path": str(t), "policy": {"services": {"compaction": {"schedule": True}}}}
                          for t in mor[2:]]
    entries += [str(t) for t in tables if t not in mor[2:]]
    config = _config(tmp_path / "hoodied.yaml", tables=entries, lock=redis_server.url, http="off",
                     concurrency={"workers": 2})

    ended, executed = replicas_once(config, 2, 240)
    assert set(executed.values()) == {1}
    for root in tables:
        new = [i for i in timeline(root).instants if i.requested_time not in existing[root]]
        comps = [i for i in new if i.action is Action.COMPACTION]
        cleaned = [i for i in new if i.action is Action.CLEAN]
        # one instant per service and table: no duplicate plans by the two replicas
        assert len(comps) == (1 if root in mor else 0), (root, comps)
        assert len(cleaned) == (1 if root in cleans else len(cleaned)) and len(cleaned) <= 1, (root, cleaned)
        for inst in [*comps, *cleaned]:
            assert inst.state is State.COMPLETED, (root, inst)
            assert executed[(str(root), inst.requested_time)] == 1, (root, inst)
        assert set(requested.get(root, [])) <= {i.requested_time for i in [*comps, *cleaned]}
        _compaction_outputs_once(root, comps)
        assert _no_heartbeats(root)
        # every lease taken is accounted for: one per execution that got past the lease
        took_lease = sum(1 for e in ended if e["table"] == str(root) and e["kind"] == "execute"
                         and e["outcome"] != "claimed")
        assert _lease_fence(redis_server, root) == took_lease, root
        assert hudi_rs_rows(root) == before[root], f"{root} reads differently after its services"
    planned = Counter((e["table"], e["action"]) for e in ended if e["outcome"] == "planned")
    assert set(planned.values()) == {1}
    assert {t for t, a in planned if a == "compaction"} == {str(t) for t in mor[2:]}
    assert all(k.endswith(":fence") for k in _redis_keys(redis_server))  # every lock and lease released


# ---------------------------------------------------------------------------- kill -9 and takeover


@pytest.mark.parametrize("service", ["clean", "compaction"])
def test_a_killed_replicas_instant_is_taken_over_after_its_lease_expires(
    tmp_path: Path, redis_server: RedisServer, service: str  # noqa: F811
) -> None:
    if service == "compaction":
        root = tmp_path / "mor"
        written_mor_table(root)
        storage = LocalStorage(str(root))
        inst, _ = schedule_compaction(storage, InProcessLock(storage.base_uri), time_settings=QUICK)
        pause_at, action = "written", Action.COMPACTION  # every task done, nothing committed
    else:
        root = unzip_table(require_fixture(CLEAN_FIXTURES[0]), tmp_path / "cow")
        storage = LocalStorage(str(root))
        inst, _ = schedule_clean(storage, InProcessLock(storage.base_uri), CleanSettings(commits_retained=2),
                                 time_settings=QUICK)
        pause_at, action = "deletes-half", Action.CLEAN
    assert inst is not None
    t = inst.requested_time
    rows = hudi_rs_rows(root)
    # the lease outlives the heartbeat (1 s) by far: B sees the instant free by its heartbeat
    # while A's lease still holds it, and must wait for the lease
    lease_ms = 6000
    config = _config(tmp_path / "hoodied.yaml", tables=[str(root)],
                     lock={"url": redis_server.url, "instant_lease_ms": lease_ms},
                     defaults={"services": {"clean": {"schedule": False}, "compaction": {"schedule": False}}})
    ready = tmp_path / "paused"
    port_a, port_b = free_port(), free_port()
    with running("run", "--config", str(config), "--http", f"127.0.0.1:{port_a}", env={
        "HOODIED_TEST_PAUSE_AT": pause_at, "HOODIED_TEST_PAUSE_READY": str(ready),
        "HOODIED_TEST_PAUSE_S": "300",
    }) as a:
        wait_for("replica A reaches the pause point", ready.exists, 120, (a,))
        assert service_instants(root, action)[0].state is State.INFLIGHT
        with running("run", "--config", str(config), "--http", f"127.0.0.1:{port_b}") as b:
            def b_sees_it_busy() -> bool:
                got = get_or_none(port_b, "/status")
                if got is None or got[0] != 200:
                    return False
                doc = json.loads(got[1])["tables"][0]
                outcomes = {o["outcome"] for o in doc["last_outcomes"]}
                statuses = {p["status"] for p in doc["pending"]}
                return "claimed" in outcomes or bool(statuses & {"running-elsewhere", "held"})

            wait_for("replica B sees the instant owned by A", b_sees_it_busy, 60, (b,))
            assert service_instants(root, action)[0].state is State.INFLIGHT  # B did not touch it
            a.send_signal(signal.SIGKILL)
            a.communicate(timeout=30)

            def done() -> bool:
                return service_instants(root, action)[0].state is State.COMPLETED

            wait_for("replica B completes the instant", done, 180, (b,))
            code, err_b = stop(b)
    assert code == 0, err_b[-3000:]
    ended = [e for e in events(err_b) if e.get("event") == "job ended" and e.get("kind") == "execute"]
    outcomes = [e["outcome"] for e in ended]
    # B was refused by A's lease after the kill, then took the instant over once it expired
    assert outcomes[-1] == "success" and outcomes.count("success") == 1, outcomes
    assert "claimed" in outcomes[:-1], outcomes
    assert {e["instant"] for e in ended} == {t}
    (final,) = service_instants(root, action)
    assert final.requested_time == t and final.state is State.COMPLETED
    rollbacks = service_instants(root, Action.ROLLBACK)
    if service == "compaction":
        # Hudi's rule: the failed attempt is rolled back (its files deleted) before the retry
        assert [timeline(root).read_commit_metadata(r)["commitsRollback"] for r in rollbacks] == [[t]]
        _compaction_outputs_once(root, [final])
    else:
        assert rollbacks == []  # a clean resumes its plan
    assert _no_heartbeats(root)
    assert hudi_rs_rows(root) == rows
    assert all(k.endswith(":fence") for k in _redis_keys(redis_server)), _redis_keys(redis_server)



# ---------------------------------------------------------------------------- Redis restart


def _planned_deletes(plan: dict[str, Any]) -> set[str]:
    """File names a clean plan deletes (version 2 plans: full paths per partition)."""
    out: set[str] = set()
    for infos in (plan.get("filePathsToBeDeletedPerPartition") or {}).values():
        out.update(os.path.basename(info["filePath"]) for info in infos)
    return out


def test_redis_restarted_while_the_daemon_runs_nothing_is_corrupted_and_work_resumes(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    roots = [unzip_table(require_fixture(f), tmp_path / f"t{i}") for i, f in enumerate(CLEAN_FIXTURES)]
    rows = {r: hudi_rs_rows(r) for r in roots}
    files = {r: {p for p in r.rglob("*") if p.is_file()} for r in roots}
    existing = {r: {i.requested_time for i in timeline(r).instants} for r in roots}
    port = free_port()
    ready = tmp_path / "paused"
    config = _config(tmp_path / "hoodied.yaml", tables=[str(r) for r in roots], http=f"127.0.0.1:{port}",
                     lock={"url": redis_server.url, "wait_ms": 200, "retries": 1, "instant_lease_ms": 3000},
                     retry={"max_attempts": 2, "backoff_seconds": 0.05, "backoff_max_seconds": 0.2})
    def status() -> dict[str, Any]:
        got = get_or_none(port, "/status")
        assert got is not None and got[0] == 200
        return dict(json.loads(got[1]))

    def new_cleans(root: Path) -> list[Instant]:
        return [i for i in service_instants(root, Action.CLEAN) if i.requested_time not in existing[root]]

    # every clean the daemon runs stops half-way through its deletes for 4 s
    with running("run", "--config", str(config), env={
        "HOODIED_TEST_PAUSE_AT": "deletes-half", "HOODIED_TEST_PAUSE_READY": str(ready),
        "HOODIED_TEST_PAUSE_S": "4",
    }) as proc:
        wait_for("a clean reaches its pause point", ready.exists, 60, (proc,))
        redis_server.stop()  # a job is in the middle of its deletes, holding its lease

        def lock_errors() -> bool:
            outcomes = [o["outcome"] for t in status()["tables"] for o in t["last_outcomes"]]
            return outcomes.count("lock_unavailable") >= 2

        wait_for("jobs report the lock service down", lock_errors, 60, (proc,))
        wait_for("/readyz reports not ready", lambda: get(port, "/readyz")[0] == 503, 30, (proc,))
        assert "lock service unreachable" in get(port, "/readyz")[1]
        assert get(port, "/healthz")[0] == 200  # the loop itself is alive
        assert 'outcome="lock_unavailable"' in get(port, "/metrics")[1]
        assert status()["tables_quarantined"] == 0
        for root in roots:  # nothing completed, nothing deleted outside the plans while Redis is away
            gone = {p.name for p in files[root] if not p.exists()}
            planned: set[str] = set()
            tl = timeline(root)
            for inst in new_cleans(root):
                assert inst.state is not State.COMPLETED, (root, inst)
                planned |= _planned_deletes(tl.read_plan(inst) or {})
            assert gone <= planned, (root, gone - planned)

        redis_server.start()  # same port, empty: every lock, lease and fencing counter is gone
        wait_for("/readyz ready again", lambda: get(port, "/readyz")[0] == 200, 60, (proc,))
        wait_for("every table's clean completes",
                 lambda: all([i.state for i in new_cleans(r)] == [State.COMPLETED] for r in roots),
                 120, (proc,))
        doc = status()
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    assert doc["tables_quarantined"] == 0
    for root in roots:
        assert [i.state for i in new_cleans(root)] == [State.COMPLETED]  # one clean each, completed once
        assert hudi_rs_rows(root) == rows[root]
        assert _no_heartbeats(root)
    assert all(k.endswith(":fence") for k in _redis_keys(redis_server)), _redis_keys(redis_server)


# ---------------------------------------------------------------------------- ordering per table


def test_a_table_runs_one_job_at_a_time_across_replicas(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    """Two replicas (in this process, sharing Redis) never run two jobs of one table at once.

    Each table has a requested clean (real plan, real executor) and a later requested
    compaction (a real Hudi-written plan; its stand-in executor only records and withdraws it,
    this test being about dispatch). Every job holds its table for a while, so a second
    replica that ignored the table's slot would run the other instant beside it.
    """
    roots = [unzip_table(require_fixture("mor/avro/v9_txns_simple_nometa"), tmp_path / f"t{i}")
             for i in range(4)]
    compactions: dict[str, str] = {}
    for root in roots:
        storage = LocalStorage(str(root))
        inst, _ = schedule_clean(storage, InProcessLock(storage.base_uri), CleanSettings(commits_retained=2),
                                 time_settings=QUICK)
        assert inst is not None
        folder = root / ".hoodie" / "timeline"
        t = datetime_to_instant_time(datetime.now(UTC), UTC)
        hudi_plan = folder / "20260307135839895.compaction.requested"
        shutil.copyfile(hudi_plan, folder / f"{t}.compaction.requested")
        compactions[str(root)] = t
    spans: list[tuple[str, str, float, float]] = []
    real_clean = build_registry().executor_for(Action.CLEAN)
    assert real_clean is not None

    def held(ctx: JobContext, work: Any) -> str:
        start = time.monotonic()
        time.sleep(0.3)
        out = work(ctx)
        spans.append((ctx.storage.base_uri.rstrip("/"), ctx.instant.action.value, start, time.monotonic()))
        return str(out)

    def withdraw(ctx: JobContext) -> str:
        name = f"{ctx.instant.requested_time}.compaction.requested"
        path = ctx.storage.local_path(f"{ctx.table.timeline_path}/{name}")
        assert path is not None
        os.unlink(path)
        return "withdrawn"

    registry = Registry()
    register_executor(Action.CLEAN, lambda ctx: held(ctx, real_clean.run), resumes_inflight=True,
                      registry=registry)
    register_executor(Action.COMPACTION, lambda ctx: held(ctx, withdraw), registry=registry)
    settings = load_config(overrides={**SETTINGS, "tables": [str(r) for r in roots], "http": "off",
                                      "lock": redis_server.url, "poll_interval_seconds": 0.1})
    daemons = [Daemon(settings, registry=registry) for _ in range(2)]

    def finished() -> bool:
        return len(spans) >= 2 * len(roots)

    async def main() -> list[int]:
        codes: list[int] = []

        async def one(d: Daemon) -> None:
            codes.append(await d.run())

        async with anyio.create_task_group() as tg:
            for d in daemons:
                tg.start_soon(one, d)
            with anyio.fail_after(60):
                while not finished():
                    await anyio.sleep(0.05)
            for d in daemons:
                d.request_stop("test done")
        return codes

    assert anyio.run(main) == [0, 0]
    by_table: dict[str, list[tuple[str, float, float]]] = {}
    for table, action, start, end in spans:
        by_table.setdefault(table, []).append((action, start, end))
    for table, jobs in by_table.items():
        assert sorted(a for a, _, _ in jobs) == ["clean", "compaction"], (table, jobs)  # each once
        (_, s1, e1), (_, s2, e2) = sorted(jobs, key=lambda j: j[1])
        assert e1 <= s2, f"{table}: two jobs at once"
    for root in roots:
        assert [i.state for i in service_instants(root, Action.CLEAN) if i.is_pending] == []
        assert compactions[str(root)] not in {i.requested_time for i in timeline(root).instants}
    assert all(k.endswith(":fence") for k in _redis_keys(redis_server))
