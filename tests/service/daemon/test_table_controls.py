"""Per-table controls in the daemon: pause and resume, a quarantine shared by replicas and kept across
restarts, one replica retrying a quarantine per backoff, the job history, and the HTTP write endpoints.

Real tables (fresh fixture copies where a clean is due), a real ``redis-server`` or the real local
SQLite store, daemons in this process (``Daemon`` on ``anyio.run``) or as real ``hoodied run``
processes. A clean executor that always fails (a registry of the test's own) causes quarantines whose
cause stays; a corrupt ``hoodie.properties`` one whose cause a test can take away.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.service.cli.main import cli
from hoodied.service.config import DaemonConfig, load_config
from hoodied.service.daemon.loop import Daemon
from hoodied.service.daemon.registry import JobContext, Registry, build_registry, register_executor
from hoodied.service.locks import RedisLockFactory
from hoodied.service.table_controls import (
    JobRecord,
    Pause,
    Quarantine,
    RedisControlStore,
    SqliteControlStore,
    open_store,
)
from tests.deploy.test_deploy import _render, helm  # noqa: F401  (fixture)
from tests.helpers.daemon_procs import events, hoodied, service_instants, stop, wait_for
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)

FAST: dict[str, Any] = {
    "defaults": {"services": {"clean": {"commits_retained": 2}}},
    "clock_skew_ms": 5,
    "poll_interval_seconds": 0.2,
    "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
    "retry": {"backoff_seconds": 0.05, "backoff_max_seconds": 0.2},
    "log": {"format": "json"},
    "http": "off",
    # in-process daemons start no Spark session ahead (``tests.helpers.daemon_procs.SPARK_AHEAD_OFF``)
    "spark": {"start_at_startup": False},
}


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HOODIED_* setting of the machine running the tests leaks into them."""
    for name in list(os.environ):
        if name.startswith("HOODIED_") and name[8:].split("__")[0].lower() in DaemonConfig.model_fields:
            monkeypatch.delenv(name)


def _table(tmp_path: Path, name: str = "t") -> Path:
    """A fresh copy of a copy-on-write table where a clean is due (two commits retained)."""
    return unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / name)


def _cleans(root: Path) -> list[Instant]:
    return service_instants(root, Action.CLEAN)


def _settings(tmp_path: Path, table: Path, **values: Any) -> DaemonConfig:
    controls = {"local_store": str(tmp_path / "controls.sqlite"), **values.pop("controls", {})}
    return load_config(overrides={**FAST, "tables": [str(table)], "controls": controls, **values})


def _failing_cleans() -> Registry:
    """The real planners, and a clean executor that always fails (not for a storage reason)."""
    registry = Registry(planners=dict(build_registry().planners))

    def fail(ctx: JobContext) -> str:
        raise ValueError(f"{ctx.storage.base_uri}/x.parquet: cannot decode the plan's file")

    register_executor(Action.CLEAN, fail, resumes_inflight=True, registry=registry)
    return registry


def _serve(
    settings: DaemonConfig, steps: Callable[[Daemon], Awaitable[None]], *, registry: Registry | None = None,
    replica: str | None = None, timeout: float = 45,
) -> Daemon:
    """Run a daemon in this process while ``steps`` drives the test, then stop it."""
    daemon = Daemon(settings, registry=registry)
    if replica is not None:
        daemon.replica = replica

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(daemon.run)
            try:
                with anyio.fail_after(timeout):
                    await steps(daemon)
            finally:
                daemon.request_stop("test done")

    anyio.run(main)
    return daemon


def _once(settings: DaemonConfig, *, registry: Registry | None = None, replica: str | None = None) -> tuple[
        Daemon, int]:
    daemon = Daemon(settings, once=True, registry=registry)
    if replica is not None:
        daemon.replica = replica
    return daemon, anyio.run(daemon.run)


async def _until(what: str, check: Callable[[], Any]) -> Any:
    while not (value := check()):
        await anyio.sleep(0.02)
    assert value, what
    return value


def _cycles(daemon: Daemon) -> float:
    counts = [s.value for m in daemon.metrics.poll_cycle.collect()
              for s in m.samples if s.name.endswith("_count")]
    return sum(counts)


def _gauge(daemon: Daemon, name: str, table: Path) -> float:
    for family in text_string_to_metric_families(daemon.metrics.render().decode()):
        for s in family.samples:
            if s.name == name and s.labels.get("table") == str(table):
                return s.value
    raise AssertionError(f"{name} of {table} is not on /metrics")


def _table_doc(daemon: Daemon, table: Path) -> dict[str, Any]:
    (doc,) = [t for t in daemon.status()["tables"] if t["path"] == str(table)]
    return doc


def _redis_store(server: RedisServer) -> RedisControlStore:
    return RedisControlStore(RedisLockFactory(server.url), 500, own_factory=True)


# ---------------------------------------------------------------------------- pause


def test_a_paused_table_is_polled_but_never_planned_or_executed_until_resumed(tmp_path: Path) -> None:
    table = _table(tmp_path)
    settings = _settings(tmp_path, table)
    store = open_store(settings)
    store.pause(str(table), Pause("ann@desk", 1.0, "backfill running"))

    async def steps(d: Daemon) -> None:
        await _until("three poll cycles", lambda: _cycles(d) >= 3)
        doc = _table_doc(d, table)
        assert doc["name"] is not None and "clean" in doc["due"]  # polled: a clean is due
        assert doc["paused"] and doc["pause"] == {"by": "ann@desk", "at": 1.0, "reason": "backfill running"}
        assert _cleans(table) == [] and doc["history"] == [] and not d.running
        assert _gauge(d, "hoodied_table_paused", table) == 1
        assert await anyio.to_thread.run_sync(store.resume, str(table))
        await _until("the clean is executed", lambda: [c.state for c in _cleans(table)] == [State.COMPLETED])
        await _until("its history is read", lambda: len(_table_doc(d, table)["history"]) == 2)

    daemon = _serve(settings, steps)
    doc = _table_doc(daemon, table)
    assert not doc["paused"] and doc["pause"] is None and _gauge(daemon, "hoodied_table_paused", table) == 0
    assert [(r["kind"], r["outcome"], r["replica"]) for r in doc["history"]] == [
        ("execute", "success", daemon.replica), ("plan", "planned", daemon.replica)]


# ---------------------------------------------------------------------------- quarantine across replicas


def test_a_quarantine_is_honoured_by_every_replica_and_restart_until_released(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    table = _table(tmp_path)
    values = {**FAST, "tables": [str(table)], "lock": redis_server.url, "retry": {"max_attempts": 1},
              "controls": {"quarantine_retry_seconds": 3600}}
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump(values))
    settings = load_config(config)

    # replica A plans the clean, fails to execute it and quarantines the table
    a, code = _once(settings, registry=_failing_cleans(), replica="replica-a")
    assert code == 1 and a.tables[str(table)].quarantine is not None
    (clean,) = _cleans(table)
    assert clean.state is State.REQUESTED

    def replica_b() -> tuple[int, str, str]:
        proc = hoodied("run", "--config", str(config), "--once")
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err

    # replica B (another process) honours it; so do both after a restart
    for _ in range(2):
        code, out, err = replica_b()
        # not 0: the pass left a table unserved (its exact code is `run --once`'s to choose)
        assert code != 0 and "QUARANTINED: clean " in out and "failed 1 times" in out, out + err[-2000:]
        seen = [e for e in events(err) if e["event"].startswith("table quarantined by another replica")]
        assert seen and seen[0]["replica"] == "replica-a", err[-2000:]
        assert not [e for e in events(err) if e.get("event") == "job started"]
        restarted, code = _once(settings, replica="replica-a")
        assert code == 1 and _table_doc(restarted, table)["quarantine"]["replica"] == "replica-a"
        assert _table_doc(restarted, table)["quarantine"]["instant"] == clean.requested_time
        assert [c.state for c in _cleans(table)] == [State.REQUESTED]

    released = CliRunner().invoke(cli, ["table", "release", str(table), "--config", str(config)])
    assert released.exit_code == 0 and released.output.startswith(f"released {table} (quarantined: clean ")
    code, out, err = replica_b()
    assert code == 0, err[-3000:]
    assert [c.state for c in _cleans(table)] == [State.COMPLETED]
    history = _redis_store(redis_server)
    try:
        records = history.history(str(table), 10)
    finally:
        history.close()
    assert [(r.kind, r.outcome) for r in records] == [("execute", "success"), ("execute", "failed"),
                                                       ("plan", "planned")]
    assert records[0].replica != "replica-a" and records[1].replica == "replica-a"
    assert "cannot decode the plan's file" in records[1].message


def test_two_replicas_retry_a_quarantined_table_one_at_a_time_until_its_cause_is_gone(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    table = _table(tmp_path)
    props = table / ".hoodie" / "hoodie.properties"
    good = props.read_bytes()
    props.write_text("hoodie.table.name=x\nhoodie.table.checksum=1\n")
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({**FAST, "tables": [str(table)], "lock": redis_server.url, "controls": {
        "quarantine_retry_seconds": 0.1, "quarantine_retry_max_seconds": 0.1, "history_size": 1000}}))
    store = _redis_store(redis_server)
    replicas = [hoodied("run", "--config", str(config)) for _ in range(2)]
    try:
        def retries() -> int:
            q = store.read_all().of(str(table)).quarantine
            return q.retries if q is not None else 0

        wait_for("ten retries", lambda: retries() >= 10, 30, tuple(replicas))
        props.write_bytes(good)  # the cause goes: the next retry releases the table
        wait_for("the clean after the release",
                 lambda: [c.state for c in _cleans(table)] == [State.COMPLETED], 30, tuple(replicas))
    finally:
        results = [stop(p) for p in replicas]
    assert [code for code, _ in results] == [0, 0], [err[-2000:] for _, err in results]
    records = store.history(str(table), 1000)
    store.close()
    tries = [r for r in records if r.kind == "retry"]
    assert tries[0].outcome == "released" and {r.outcome for r in tries[1:]} == {"quarantined"}
    # each retry number was run once: a second replica retrying at the same time would repeat one
    numbers = sorted(int(re.match(r"retry (\d+): ", r.message).group(1)) for r in tries[1:])  # type: ignore[union-attr]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 10, numbers
    assert all("cannot read the table" in r.message for r in tries[1:])
    assert {r.replica for r in tries} <= {e["replica"] for _, err in results for e in events(err)
                                          if e.get("event") == "daemon starting"}


def test_of_two_replicas_that_both_find_a_retry_due_only_one_runs_it(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    table = _table(tmp_path)
    (table / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=x\n")  # the cause stays
    settings = _settings(tmp_path, table, lock=redis_server.url,
                         controls={"quarantine_retry_seconds": 0.05, "quarantine_retry_max_seconds": 0.05})
    store = _redis_store(redis_server)
    store.quarantine(str(table), Quarantine("cannot read the table: x", time.time(), "replica-0",
                                            next_retry_at=time.time()))
    replicas = [Daemon(settings), Daemon(settings)]
    for i, d in enumerate(replicas):
        d.replica, d.store = f"replica-{i + 1}", open_store(settings)

    async def backoff() -> None:
        # both replicas read the quarantine while its retry is due, then both try to run it
        for d in replicas:
            await d.controls.sync()
        assert all(d.tables[str(table)].stored_quarantine is not None for d in replicas)
        for d in replicas:
            await d.controls.retry_quarantined()
        await anyio.sleep(0.1)  # the next retry comes due

    try:
        for _ in range(3):
            anyio.run(backoff)
        tries = [r for r in store.history(str(table), 10) if r.kind == "retry"]
        q = store.read_all().of(str(table)).quarantine
    finally:
        for d in replicas:
            assert d.store is not None
            d.store.close()
        store.close()
    assert len(tries) == 3 and q is not None and q.retries == 3, tries
    assert all(r.outcome == "quarantined" and "cannot read the table" in r.message for r in tries)


def test_a_quarantine_back_soon_after_a_retry_released_it_keeps_backing_off(tmp_path: Path) -> None:
    """A cause a retry cannot see (a plan that fails: the table reads fine) is released by the retry;
    quarantined again soon after, the table goes on from the retry count, so the waits keep growing."""
    table = _table(tmp_path)
    settings = _settings(tmp_path, table, controls={"quarantine_retry_seconds": 60,
                                                    "quarantine_retry_max_seconds": 3600})
    store = open_store(settings)
    store.quarantine(str(table), Quarantine("clean plan failed 3 times", time.time(), "replica-0",
                                            retries=2, next_retry_at=time.time()))
    daemon = Daemon(settings)
    daemon.store = store

    async def retry_then_fail_again() -> None:
        await daemon.controls.sync()
        await daemon.controls.retry_quarantined()  # the table reads: released
        ts = daemon.tables[str(table)]
        assert ts.quarantine is None and ts.released_by_retry is not None
        daemon._quarantine(ts, "clean plan failed 3 times")
        await daemon.controls.flush()

    try:
        anyio.run(retry_then_fail_again)
        q = store.read_all().of(str(table)).quarantine
    finally:
        store.close()
    assert q is not None and q.retries == 3
    assert 480 - 5 <= q.next_retry_at - q.at <= 480 + 5  # 60 s x 2^3, not the first 60 s again


# ---------------------------------------------------------------------------- history, local store


def test_history_records_each_outcome_with_its_replica_and_keeps_the_newest(tmp_path: Path) -> None:
    table = _table(tmp_path)
    settings = _settings(tmp_path, table, retry={"max_attempts": 4, "backoff_seconds": 0.05},
                         controls={"history_size": 3, "quarantine_retry_seconds": 0.1,
                                   "quarantine_retry_max_seconds": 0.1})
    store = open_store(settings)

    def retried() -> list[JobRecord]:
        return [r for r in store.history(str(table), 10) if r.kind == "retry"]

    async def steps(d: Daemon) -> None:
        await _until("a quarantine retry", lambda: d.tables[str(table)].quarantine and retried())

    daemon = _serve(settings, steps, registry=_failing_cleans(), replica="replica-1")
    (clean,) = _cleans(table)
    records = store.history(str(table), 10)
    assert len(records) == 3  # 1 plan, 4 failed executions and at least 1 retry: the newest 3 are kept
    assert records[0].kind == "retry" and records[0].outcome == "quarantined"
    assert f"instant {clean.requested_time} is still pending" in records[0].message
    failed = [r for r in records if r.kind == "execute"]
    assert failed and all(r.outcome == "failed" and r.instant == clean.requested_time and r.action == "clean"
                          for r in failed)
    assert {r.replica for r in records} == {"replica-1"}
    assert all("cannot decode the plan's file" in r.message for r in failed)
    shown = _table_doc(daemon, table)
    assert shown["quarantine"]["instant"] == clean.requested_time and shown["quarantine"]["retries"] >= 1
    assert shown["history"] and shown["history"][0]["replica"] == "replica-1"


def test_the_local_store_keeps_a_quarantine_across_a_restart_until_released(tmp_path: Path) -> None:
    table = _table(tmp_path)
    settings = _settings(tmp_path, table, retry={"max_attempts": 1})
    _, code = _once(settings, registry=_failing_cleans())
    assert code == 1
    restarted, code = _once(settings)
    assert code == 1 and [c.state for c in _cleans(table)] == [State.REQUESTED]
    doc = _table_doc(restarted, table)
    assert doc["quarantined"].startswith("clean ") and doc["quarantine"]["reason"] == doc["quarantined"]
    assert isinstance(open_store(settings), SqliteControlStore)
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({"tables": [str(table)],
                                      "controls": {"local_store": settings.controls.local_store}}))
    assert CliRunner().invoke(cli, ["table", "release", str(table), "--config", str(config)]).exit_code == 0
    _, code = _once(settings)
    assert code == 0 and [c.state for c in _cleans(table)] == [State.COMPLETED]


# ---------------------------------------------------------------------------- HTTP


def _post(port: int, path: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=b"", method="POST")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_write_endpoints_are_off_by_default_and_need_the_token(tmp_path: Path) -> None:
    table = _table(tmp_path)
    off = _settings(tmp_path, table, http="127.0.0.1:0")

    async def refused(d: Daemon) -> None:
        await _until("a poll", lambda: d.http_port and d.last_cycle_end)
        assert d.http_port is not None
        code, body = await anyio.to_thread.run_sync(_post, d.http_port, f"/tables/{table}/pause", "any")
        assert code == 403 and "controls.http_writes" in body["error"]

    _serve(off, refused)

    on = _settings(tmp_path, table, http="127.0.0.1:0", controls={"http_writes": True, "http_token": "t0ken"},
                   defaults={"services": {"clean": {"schedule": False}}})

    async def allowed(d: Daemon) -> None:
        await _until("a poll", lambda: d.http_port and d.last_cycle_end)
        port = d.http_port
        assert port is not None

        def calls() -> None:
            assert _post(port, f"/tables/{table}/pause")[0] == 401
            assert _post(port, f"/tables/{table}/pause", "wrong")[0] == 401
            assert _post(port, f"/tables/{tmp_path / 'other'}/pause", "t0ken")[0] == 404
            assert _post(port, f"/tables/{table}/explode", "t0ken")[0] == 404
            with pytest.raises(urllib.error.HTTPError, match="405"):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/tables/{table}/pause", timeout=5)
            code, body = _post(port, f"/tables{table}/pause?reason=disk%20full&by=oncall", "t0ken")
            assert code == 200 and body["pause"]["reason"] == "disk full" and body["pause"]["by"] == "oncall"

        await anyio.to_thread.run_sync(calls)
        await _until("the pause in status", lambda: _table_doc(d, table)["paused"])
        assert _table_doc(d, table)["pause"]["by"] == "oncall"
        name = _table_doc(d, table)["name"]
        encoded = urllib.parse.quote(str(table), safe="")
        code, body = await anyio.to_thread.run_sync(_post, port, f"/tables/{encoded}/resume", "t0ken")
        assert code == 200 and body == {"table": str(table), "action": "resume", "was_paused": True}
        await _until("the resume in status", lambda: not _table_doc(d, table)["paused"])
        code, body = await anyio.to_thread.run_sync(_post, port, f"/tables/{name}/release", "t0ken")
        assert code == 200 and body["table"] == str(table) and body["released"] is None

    _serve(on, allowed)


def test_a_daemon_whose_local_store_cannot_be_opened_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({"tables": [str(tmp_path / "t")],
                                      "controls": {"local_store": str(tmp_path / "file" / "c.sqlite")}}))
    proc = hoodied("run", "--config", str(config), "--once")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 6, err
    assert err.strip().splitlines()[-1].startswith(f"hoodied: error: table controls at {tmp_path / 'file'}")


def test_the_chart_turns_the_write_endpoints_on_with_a_token_from_an_existing_secret(
    helm: str,  # noqa: F811  (the fixture)
) -> None:
    def daemon_env(*extra: str) -> dict[str, Any]:
        docs = _render(helm, None, *extra)
        (deployment,) = [d for d in docs
                         if d["kind"] == "Deployment" and d["metadata"]["name"] == "t-hoodied"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}

    off = daemon_env()
    assert "HOODIED_CONTROLS__HTTP_TOKEN" not in off and "HOODIED_CONTROLS__HTTP_WRITES" not in off
    on = daemon_env("--set", "controls.httpTokenSecret.name=hoodied-controls")
    assert on["HOODIED_CONTROLS__HTTP_WRITES"] == "true"
    token = {"secretKeyRef": {"name": "hoodied-controls", "key": "token"}}
    assert on["HOODIED_CONTROLS__HTTP_TOKEN"] == token
