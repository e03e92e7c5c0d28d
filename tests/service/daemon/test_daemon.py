"""The daemon on real tables: settings, one pass with two replicas, quarantine, retries, SIGTERM, metrics.

Tables are fresh copies of the fixtures; Redis is a real ``redis-server`` on loopback; the
daemon runs either in this process (``Daemon`` on ``anyio.run``) or as real ``hoodied run``
subprocesses. The clean executor's test hook (``HOODIED_TEST_PAUSE_AT``) holds a job at a
known point so a test can stop the daemon while it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import hudi
import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.service.cli.daemon import _flag_overrides, render_status
from hoodied.service.cli.main import cli
from hoodied.service.config import ConfigError, DaemonConfig, load_config
from hoodied.service.daemon.loop import POLL_BATCH, Daemon
from hoodied.service.daemon.registry import (
    Executed,
    JobContext,
    Registry,
    build_registry,
    register_executor,
    register_planner,
)
from tests.helpers.daemon_procs import events, get, get_or_none, hoodied, running
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)

PROJECT = Path(__file__).resolve().parents[3]
#: Tables where a clean is due with two commits retained (and no metadata table).
DUE = ["cow/v9_txns_simple_nometa", "mor/avro/v9_txns_simple_nometa", "cow/v9_txns_complex_nometa"]
FAST = {
    "defaults": {"services": {"clean": {"commits_retained": 2}}},
    "clock_skew_ms": 5,
    "poll_interval_seconds": 0.2,
    "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
    "retry": {"backoff_seconds": 0.05, "backoff_max_seconds": 0.2},
    "log": {"format": "json"},
}


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HOODIED_* setting of the machine running the tests leaks into them."""
    for name in list(os.environ):
        if name.startswith("HOODIED_") and name[8:].split("__")[0].lower() in DaemonConfig.model_fields:
            monkeypatch.delenv(name)


# ---------------------------------------------------------------------------- helpers


def _copies(tmp_path: Path, fids: list[str], n: int = 1) -> list[Path]:
    out = []
    for i in range(n):
        for fid in fids:
            out.append(unzip_table(require_fixture(fid), tmp_path / "lake" / f"{fid.replace('/', '_')}_{i}"))
    return out


def _timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def _cleans(root: Path) -> list[Any]:
    return [i for i in _timeline(root).instants if i.action is Action.CLEAN]


def _snapshot(root: Path) -> Counter[Any]:
    batches = hudi.HudiTableBuilder(str(root)).build().read(hudi.HudiReadOptions())
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    return Counter(tuple(sorted((k, repr(v)) for k, v in r.items())) for r in rows)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".locks" not in p.parts}


def _write_config(path: Path, **values: Any) -> Path:
    path.write_text(yaml.safe_dump({**FAST, **values}))
    return path


def _run_in_process(settings: DaemonConfig, *, once: bool = True, registry: Registry | None = None,
                    until: Any = None, timeout: float = 30) -> tuple[Daemon, int]:
    daemon = Daemon(settings, once=once, registry=registry)

    async def main() -> int:
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                while until is not None and not until(daemon):
                    await anyio.sleep(0.02)
                daemon.request_stop("test done")

            if until is not None:
                tg.start_soon(watch)
            with anyio.fail_after(timeout):
                code = await daemon.run()
            tg.cancel_scope.cancel()
        # after the block: a task group's exit may swallow its own cancellation
        return code

    return daemon, anyio.run(main)


def _check_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse with prometheus_client's parser (and promtool when installed); samples by (name, labels)."""
    samples = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("hoodied_"), family.name
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    promtool = shutil.which("promtool")
    if promtool is not None:
        checked = subprocess.run([promtool, "check", "metrics"], input=text, text=True, capture_output=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    return samples


# ---------------------------------------------------------------------------- settings


def test_settings_precedence_is_file_then_environment_then_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "hoodied.yaml"
    f.write_text(
        "poll_interval_seconds: 30\n"
        "concurrency: {workers: 2, poll_threads: 5}\n"
        "tables: [/data/a, {path: /data/b,\n"
        "         policy: {priority: 7, services: {clean: {commits_retained: 4}}}}]\n"
        "defaults: {services: {clean: {trigger_commits: 3}}}\n"
        "lock: local\n"
    )
    from_file = load_config(f)
    assert from_file.poll_interval_seconds == 30 and from_file.concurrency.workers == 2
    b = from_file.tables[1].policy
    assert (b.priority, b.services.clean.commits_retained, b.services.clean.trigger_commits) == (7, 4, 3)
    assert from_file.tables[0].policy.services.clean.commits_retained == 10  # Hudi's default

    monkeypatch.setenv("HOODIED_POLL_INTERVAL_SECONDS", "20")
    monkeypatch.setenv("HOODIED_CONCURRENCY__WORKERS", "3")
    monkeypatch.setenv("HOODIED_LOCK__URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("HOODIED_DEFAULTS__SERVICES__CLEAN__TRIGGER_COMMITS", "5")
    monkeypatch.setenv("HOODIED_TEST_PAUSE_AT", "not-a-setting")  # other HOODIED_ names are ignored
    env = load_config(f)
    assert env.poll_interval_seconds == 20
    assert (env.concurrency.workers, env.concurrency.poll_threads) == (3, 5)  # mappings merge key by key
    assert env.lock.url == "redis://127.0.0.1:1/0"
    assert env.tables[1].policy.services.clean.trigger_commits == 5  # env defaults reach every table
    assert env.tables[1].policy.services.clean.commits_retained == 4  # the table's own value still wins

    flags = _flag_overrides(("/data/c",), (), "local", None, "off", 5.0, None)
    final = load_config(f, flags)
    assert final.poll_interval_seconds == 5 and final.lock.url == "local" and final.http.address is None
    assert [t.path for t in final.tables] == ["/data/c"]  # lists are replaced whole
    assert final.concurrency.workers == 3


def test_invalid_settings_name_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("tables: [{path: /t, bogus: 1}]\nconcurrency: {workers: 0}\nlock: zk://x\n"
                   "spark: {master: yarn}\nhttp: nope\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    text = "\n".join(err.value.problems)
    for expected in ("tables.0.bogus: unknown setting", "concurrency.workers: Input should be greater",
                     "lock.url: Value error, 'zk://x'", "spark.master", "http.address"):
        assert expected in text
    run = CliRunner().invoke
    result = run(cli, ["config", "check", str(bad)])
    assert result.exit_code == 2 and result.stderr.count("hoodied: invalid settings:") == 5
    dup = tmp_path / "dup.yaml"
    dup.write_text("poll_interval_seconds: 1\npoll_interval_seconds: 2\n")
    result = run(cli, ["config", "check", str(dup)])
    assert result.exit_code == 2 and f"{dup}:2: invalid YAML: duplicate key" in result.stderr
    good = _write_config(tmp_path / "good.yaml", tables=["/data/x"], discover=["/data/lake"])
    result = run(cli, ["config", "check", str(good)])
    assert result.exit_code == 0 and "ok: 1 tables, 1 discover roots, lock local" in result.stdout
    shown = yaml.safe_load(run(cli, ["config", "check", str(good), "--print"]).stdout)
    assert shown["tables"][0]["policy"]["services"]["clean"]["commits_retained"] == 2


def test_the_example_settings_file_is_complete_and_valid() -> None:
    example = PROJECT / "deploy" / "hoodied.yaml"
    settings = load_config(example)
    assert [t.path for t in settings.tables] == ["/data/lake/trips", "/data/lake/payments"]
    assert settings.tables[1].policy.services.clean.commits_retained == 30
    written = yaml.safe_load(example.read_text())

    def keys(model: Any, doc: Any, where: str) -> None:
        # every setting appears in the example, so it documents them all
        for name in type(model).model_fields:
            assert name in doc, f"deploy/hoodied.yaml lacks {where}{name}"
            value = getattr(model, name)
            if hasattr(type(value), "model_fields") and isinstance(doc[name], dict):
                keys(value, doc[name], f"{where}{name}.")

    keys(settings, written, "")


def test_registry_refuses_unknown_services() -> None:
    with pytest.raises(ValueError, match="not a table-service action"):
        register_executor(Action.COMMIT, lambda ctx: "", registry=Registry())
    with pytest.raises(ValueError, match="not a service"):
        register_planner("vacuum", lambda t, p: None, lambda c: None, registry=Registry())  # type: ignore[arg-type,return-value]
    assert build_registry().executor_for(Action.CLEAN) is not None


# ---------------------------------------------------------------------------- one pass, two replicas


def test_two_replicas_run_once_and_every_clean_is_planned_and_executed_exactly_once(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    tables = _copies(tmp_path, DUE, n=3)
    before = {t: _snapshot(t) for t in tables}
    config = _write_config(tmp_path / "hoodied.yaml", discover=[str(tmp_path / "lake")],
                           lock=redis_server.url, http="off", concurrency={"workers": 2})
    replicas = [hoodied("run", "--config", str(config), "--once") for _ in range(2)]
    results = [p.communicate(timeout=60) for p in replicas]
    for p, (_, err) in zip(replicas, results, strict=True):
        assert p.returncode == 0, err[-3000:]
    ended = [e for _, err in results for e in events(err) if e.get("event") == "job ended"]
    executed = Counter(e["table"] for e in ended if e["kind"] == "execute" and e["outcome"] == "success")
    planned = Counter(e["table"] for e in ended if e["outcome"] == "planned")
    assert set(executed.values()) == {1} and set(planned.values()) == {1}
    assert sorted(executed) == sorted(str(t) for t in tables)
    for t in tables:
        cleans = _cleans(t)
        assert len(cleans) == 1 and cleans[0].is_completed, (t, cleans)
        beats = t / ".hoodie" / ".heartbeat"
        assert not beats.exists() or not any(beats.iterdir())
        assert _snapshot(t) == before[t]  # hudi-rs reads the same rows after the clean
    outcomes = Counter((e["kind"], e["outcome"]) for e in ended)
    allowed = {"planned", "nothing_due", "success", "claimed", "already_done"}
    assert not {o for _, o in outcomes} - allowed, outcomes
    resp = redis_server.command("KEYS", "hoodied:*").decode()
    keys = [k for k in resp.split("\r\n")
            if k.startswith(("hoodied:lock:", "hoodied:lease:", "hoodied:slot:"))]
    assert keys and all(k.endswith(":fence") for k in keys), keys  # every lock and lease was released


# ---------------------------------------------------------------------------- quarantine and waiting


def test_corrupt_tables_are_quarantined_untouched_and_the_others_complete(tmp_path: Path) -> None:
    healthy = _copies(tmp_path, DUE[:2])
    bad_props, bad_plan, with_index, paused = _copies(tmp_path / "more", ["cow/v9_txns_simple_nometa"], n=4)
    (bad_props / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=x\nhoodie.table.checksum=1\n")
    bad_time = "20991231235959000"
    (bad_plan / ".hoodie" / "timeline" / f"{bad_time}.clean.requested").write_bytes(b"Obj\x01garbage")
    index_time = "20200101000000000"  # an indexing requested long ago by another writer
    storage = LocalStorage(str(with_index))
    lock = InProcessLock(storage.base_uri)
    plan = {"version": 1, "indexPartitionInfos": [{
        "version": 1, "metadataPartitionPath": "bloom_filters", "indexUptoInstant": "20200101000000000",
        "extraMetadata": {}}]}
    with lock:  # an index hoodied does not build, on a table without a metadata table: it waits
        TimelineWriter(storage, load_table_config(storage), lock, time_settings=TimeSettings(
            max_expected_clock_skew_ms=5)).create_requested(Action.INDEXING, index_time, plan)
    untouched = {t: _files(t) for t in (bad_props, bad_plan, paused)}
    paths: list[Any] = [str(p) for p in (*healthy, bad_props, bad_plan, with_index)]
    paths.append({"path": str(paused), "policy": {"paused": True}})
    settings = load_config(overrides={**FAST, "tables": paths, "http": "off"})
    daemon, code = _run_in_process(settings)
    assert code == 1  # a pass that quarantined something says so
    status = daemon.status()
    by_path = {t["path"]: t for t in status["tables"]}
    props_reason = by_path[str(bad_props)]["quarantined"]
    assert props_reason.startswith("cannot read the table: ") and "hoodie.properties" in props_reason
    plan_reason = by_path[str(bad_plan)]["quarantined"]
    assert plan_reason.startswith(f"clean {bad_time}: ") and f"{bad_time}.clean.requested" in plan_reason
    for t, files in untouched.items():
        assert _files(t) == files, f"{t} was modified"
    for t in [*healthy, with_index]:
        assert by_path[str(t)]["quarantined"] is None
        assert [c.state for c in _cleans(t)] == [State.COMPLETED]
    waiting = by_path[str(with_index)]["pending"]
    assert [(p["action"], p["status"]) for p in waiting] == [("indexing", "waiting")]
    assert "the table has no metadata table" in waiting[0]["note"], waiting
    assert (with_index / ".hoodie" / "timeline" / f"{index_time}.indexing.requested").exists()
    assert by_path[str(paused)]["paused"] and not by_path[str(paused)]["last_outcomes"]
    text = render_status(json.loads(json.dumps(status)))
    assert "QUARANTINED: cannot read the table" in text, text
    assert f"{paused}  (" in text and "PAUSED" in text, text

    samples = _check_metrics(daemon.metrics.render().decode())
    assert samples[("hoodied_tables_watched", ())] == 6
    assert samples[("hoodied_tables_quarantined", ())] == 2
    assert samples[("hoodied_table_quarantined", (("table", str(bad_props)),))] == 1
    ok = (("action", "clean"), ("outcome", "success"), ("table", str(healthy[0])))
    assert samples[("hoodied_jobs_total", ok)] == 1
    assert samples[("hoodied_job_duration_seconds_count", (("action", "clean"), ("outcome", "success")))] == 3
    assert samples[("hoodied_pending_instants", (("action", "indexing"), ("table", str(with_index))))] == 1
    assert samples[("hoodied_oldest_pending_instant_age_seconds",
                    (("action", "indexing"), ("table", str(with_index))))] > 5 * 365 * 86400
    assert samples[("hoodied_delta_commits_since_last_compaction", (("table", str(healthy[1])),))] >= 0
    last_ok = (("action", "clean"), ("table", str(healthy[0])))
    assert samples[("hoodied_last_success_timestamp_seconds", last_ok)] > time.time() - 60
    assert samples[("hoodied_lock_wait_seconds_count", (("action", "clean"),))] >= 6
    assert samples[("hoodied_poll_cycle_duration_seconds_count", ())] == 1


def test_failures_are_retried_with_backoff_then_the_table_is_quarantined(tmp_path: Path) -> None:
    flaky, fine = _copies(tmp_path, DUE[:2])
    real = build_registry().executor_for(Action.CLEAN)
    assert real is not None
    calls: list[float] = []

    def sometimes(ctx: JobContext) -> Executed:
        if ctx.storage.base_uri.rstrip("/") == str(flaky):
            calls.append(time.monotonic())
            # not the storage (its outages are waited out, never quarantined: test_daemon_storage_outage)
            raise ValueError(f"{flaky}/x.parquet: cannot decode the plan's file")
        return real.run(ctx)

    registry = Registry(planners=dict(build_registry().planners))
    register_executor(Action.CLEAN, sometimes, resumes_inflight=True, registry=registry)
    settings = load_config(overrides={**FAST, "tables": [str(flaky), str(fine)], "http": "off",
                                      "retry": {"max_attempts": 3, "backoff_seconds": 0.1}})
    daemon, code = _run_in_process(
        settings, once=False, registry=registry,
        until=lambda d: d.tables[str(flaky)].quarantine and _cleans(fine)[0].is_completed,
    )
    assert code == 0
    reason = daemon.tables[str(flaky)].quarantine
    assert reason is not None and "failed 3 times; last: ValueError" in reason
    assert "cannot decode the plan's file" in reason
    assert len(calls) == 3 and calls[2] - calls[1] >= 0.19 and calls[1] - calls[0] >= 0.09  # doubled backoff
    assert [c.state for c in _cleans(flaky)] == [State.REQUESTED]  # left as it was for a person to look at


# ---------------------------------------------------------------------------- SIGTERM, probes, metrics


def test_sigterm_while_a_job_runs_exits_0_within_the_grace_period_and_a_restart_completes_it(
    tmp_path: Path,
) -> None:
    (table,) = _copies(tmp_path, DUE[:1])
    port = free_port()
    ready = tmp_path / "paused"
    config = _write_config(tmp_path / "hoodied.yaml", tables=[str(table)], http=f"127.0.0.1:{port}",
                           grace_period_seconds=3)
    with running("run", "--config", str(config), env={
        "HOODIED_TEST_PAUSE_AT": "deletes-half", "HOODIED_TEST_PAUSE_READY": str(ready),
        "HOODIED_TEST_PAUSE_S": "60",
    }) as proc:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the clean never reached its pause point"
            time.sleep(0.02)
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/readyz") == (200, "ready\n")
        code, body = get(port, "/status")
        job = json.loads(body)["tables"][0]["running"]
        assert code == 200 and job["action"] == "clean" and job["kind"] == "execute"
        code, metrics = get(port, "/metrics")
        samples = _check_metrics(metrics)
        assert code == 200 and samples[("hoodied_running_jobs", (("action", "clean"),))] == 1
        assert get(port, "/nope")[0] == 404

        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        code, body = get(port, "/readyz")
        assert code == 503 and body.startswith("draining: received SIGTERM")
        assert get(port, "/healthz")[0] == 200
        _, err = proc.communicate(timeout=10)
        took = time.monotonic() - sent
    assert proc.returncode == 0, err[-3000:]
    assert took < 3.0 + 0.5, f"exit took {took:.1f} s with a 3 s grace period"
    stopped = [e for e in events(err) if e.get("event") == "daemon stopped"]
    assert stopped and stopped[0]["reason"] == "received SIGTERM" and stopped[0]["abandoned_jobs"] == 1
    (clean,) = _cleans(table)
    assert clean.state is State.INFLIGHT  # stopped half-way, recoverable

    again = hoodied("run", "--config", str(config), "--once", "--http", "off")
    _, err = again.communicate(timeout=60)
    assert again.returncode == 0, err[-3000:]
    (clean,) = _cleans(table)
    assert clean.state is State.COMPLETED and clean.requested_time == _cleans(table)[0].requested_time


def test_status_command_reads_a_running_daemon(tmp_path: Path) -> None:
    (table,) = _copies(tmp_path, ["cow/v6_nonpartitioned"])
    port = free_port()
    with running("run", "--table", str(table), "--http", f"127.0.0.1:{port}", "--poll-interval", "0.2",
                 "--lock", "local") as proc:
        deadline = time.monotonic() + 20
        while (get_or_none(port, "/readyz") or (None,))[0] != 200:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        run = CliRunner().invoke
        text = run(cli, ["status", "--http", f"127.0.0.1:{port}"])
        assert text.exit_code == 0 and str(table) in text.stdout and "1 tables, 0 quarantined" in text.stdout
        doc = json.loads(run(cli, ["status", "--http", f"127.0.0.1:{port}", "--json"]).stdout)
        assert doc["tables"][0]["name"] and doc["tables"][0]["quarantined"] is None
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err[-2000:]
    missing = CliRunner().invoke(cli, ["status", "--http", f"127.0.0.1:{port}"])
    assert missing.exit_code == 1 and "no daemon answers" in missing.stderr


# ---------------------------------------------------------------------------- the first cycle


def test_the_first_cycle_starts_work_before_the_last_table_is_polled(tmp_path: Path) -> None:
    """A restart over many tables parses every timeline once; work must not wait for the last.

    One poll thread reads the tables in batches of ``POLL_BATCH``, in the order of the settings.
    The first table holds a requested clean; every table after the first batch is held up in
    its poll (a trigger check, called for every table polled) until that clean has started, or
    at most 10 s: without the early dispatch the clean would start only after the whole cycle.
    """
    (first,) = _copies(tmp_path, DUE[:1])
    scheduled = CliRunner().invoke(cli, ["schedule", "clean", str(first), "--retained", "1",
                                         "--clock-skew-ms", "5"])
    assert scheduled.exit_code == 0 and "clean requested" in scheduled.stdout, scheduled.output
    others = [unzip_table(require_fixture("cow/v8_empty"), tmp_path / "others" / str(i))
              for i in range(POLL_BATCH + 8)]
    started = threading.Event()
    seen: list[float | None] = []
    polled = Counter[str]()
    daemon: Daemon | None = None
    clean = build_registry().executor_for(Action.CLEAN)
    assert clean is not None

    def run_clean(ctx: JobContext) -> Executed:
        assert daemon is not None
        seen.append(daemon.last_cycle_end)  # None: the first cycle is still going
        started.set()
        return clean.run(ctx)

    def compaction_due(timeline: Timeline, policy: Any) -> None:
        polled["tables"] += 1
        if polled["tables"] > POLL_BATCH:
            started.wait(10)
        return None

    registry = Registry()
    register_executor(Action.CLEAN, run_clean, resumes_inflight=True, registry=registry)
    register_planner("compaction", compaction_due, lambda ctx: None, registry=registry)  # type: ignore[arg-type,return-value]
    settings = load_config(overrides={
        **FAST, "tables": [str(first), *map(str, others)], "http": "off",
        "concurrency": {"poll_threads": 1}, "defaults": {"services": {"compaction": {"schedule": True}}},
    })
    daemon = Daemon(settings, once=True, registry=registry)

    async def main() -> int:
        with anyio.fail_after(60):
            return await daemon.run()

    assert anyio.run(main) == 0
    assert seen == [None]
    assert polled["tables"] >= len(others) + 1
    assert [c.state for c in _cleans(first)] == [State.COMPLETED]
