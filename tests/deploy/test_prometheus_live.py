"""The dashboard and the alert rules against a real Prometheus scraping two real replicas.

Two ``hoodied run`` processes share three tables through a real Redis: a corrupt one (both
replicas quarantine it), one with an indexing instant hoodied leaves waiting (both replicas see it
pending) and one whose clean the test requests once Prometheus has scraped the fleet (one replica
runs it). A real Prometheus (Debian
``prometheus``) scrapes both every second with ``deploy/prometheus/rules.yaml`` loaded. Every
expression of ``deploy/grafana/hoodied.json`` is evaluated through Prometheus's HTTP API, and the
fleet panels must count tables, not replicas: 3 tables watched (not 6), 1 quarantined (not 2), one
pending indexing instant (not 2); the clean's success shows in the "Job outcomes" panel although
it is the table's first job; the rules load and evaluate without errors.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from tests.helpers.daemon_procs import get_or_none, hoodied, stop, wait_for
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)

PROJECT = Path(__file__).resolve().parents[2]
RULES = PROJECT / "deploy" / "prometheus" / "rules.yaml"
DASHBOARD = PROJECT / "deploy" / "grafana" / "hoodied.json"
TABLE = "cow/v9_txns_simple_nometa"
WAITING_INDEX = "20200101000000000"
SETTINGS: dict[str, Any] = {
    # nothing is planned by the daemons: the test requests the one clean once the fleet is scraped
    "defaults": {"services": {"clean": {"schedule": False}, "compaction": {"schedule": False}}},
    "clock_skew_ms": 5,
    "poll_interval_seconds": 0.5,
    "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
    "spark": {"master": "local[1]"},
    "log": {"format": "json"},
}


def _tables(tmp_path: Path) -> tuple[Path, Path, Path]:
    source = require_fixture(TABLE)
    bad, waiting, due = (unzip_table(source, tmp_path / name) for name in ("bad", "waiting", "due"))
    (bad / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=x\nhoodie.table.checksum=1\n")
    storage = LocalStorage(str(waiting))
    lock = InProcessLock(storage.base_uri)
    plan = {"version": 1, "indexPartitionInfos": [{
        "version": 1, "metadataPartitionPath": "bloom_filters", "indexUptoInstant": WAITING_INDEX,
        "extraMetadata": {}}]}
    with lock:  # an index hoodied does not build, on a table without a metadata table: it waits
        TimelineWriter(storage, load_table_config(storage), lock, time_settings=TimeSettings(
            max_expected_clock_skew_ms=5)).create_requested(Action.INDEXING, WAITING_INDEX, plan)
    return bad, waiting, due


class Prometheus:
    def __init__(self, workdir: Path, targets: list[str]) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is not installed (tests/run.sh installs the Debian package)")
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "hoodied", "static_configs": [{"targets": targets}]}],
        }))
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=out, stderr=subprocess.STDOUT)

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return list(data["result"])

    def value(self, expr: str) -> float:
        (sample,) = self.query(expr)
        return float(sample["value"][1])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def fleet(tmp_path: Path, redis_server: RedisServer) -> Iterator[tuple[Prometheus, tuple[Path, Path, Path]]]:  # noqa: F811
    tables = _tables(tmp_path / "lake")
    ports = [free_port(), free_port()]
    procs = []
    for n, port in enumerate(ports):
        config = tmp_path / f"hoodied-{n}.yaml"
        config.write_text(yaml.safe_dump({**SETTINGS, "tables": [str(t) for t in tables],
                                          "lock": {"url": redis_server.url}, "http": f"127.0.0.1:{port}"}))
        procs.append(hoodied("run", "--config", str(config)))
    prometheus = Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{p}" for p in ports])
    try:
        for port in ports:
            def polled(port: int = port) -> bool:
                page = get_or_none(port, "/metrics")
                return page is not None and "hoodied_last_poll_timestamp_seconds " in page[1]

            wait_for("a poll cycle ends", polled, 120, tuple(procs))
        yield prometheus, tables
    finally:
        prometheus.stop()
        for proc in procs:
            stop(proc)


def _dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", []) if "expr" in t]


def _concrete(expr: str) -> str:
    """A dashboard expression as Grafana sends it with every replica and table selected."""
    return expr.replace("$instance", ".*").replace("$table", ".*").replace("$__rate_interval", "1m")


def test_dashboard_counts_tables_not_replicas(fleet: tuple[Prometheus, tuple[Path, Path, Path]]) -> None:
    prometheus, (bad, waiting, due) = fleet
    wait_for("both replicas scraped", lambda: prometheus.query('count(up{job="hoodied"} == 1) == 2'), 60)
    success = f'sum(hoodied_jobs_total{{table="{due}", action="clean", outcome="success"}})'
    wait_for("the clean counters scraped at 0", lambda: prometheus.query(f"{success} == 0"), 60)
    planned = hoodied("schedule", "clean", str(due), "--retained", "2", "--clock-skew-ms", "5")
    _, err = planned.communicate(timeout=120)
    assert planned.returncode == 0, err[-2000:]
    wait_for("the clean ran on one replica", lambda: prometheus.query(f"{success} == 1"), 120)
    # every replica reports every table: the per-replica figures are twice the fleet's
    assert prometheus.value('sum(hoodied_tables_watched{job="hoodied"})') == 6
    assert prometheus.value('sum(hoodied_tables_quarantined{job="hoodied"})') == 2

    # each panel's expression parses and evaluates
    panels = {e: prometheus.query(_concrete(e)) for e in _dashboard_exprs()}

    def only(expr_start: str) -> list[dict[str, Any]]:
        (expr,) = [e for e in panels if e.startswith(expr_start)]
        return panels[expr]

    (watched,) = only("max(hoodied_tables_watched")
    assert float(watched["value"][1]) == 3
    (quarantined,) = only("count(max by (table) (hoodied_table_quarantined")
    assert float(quarantined["value"][1]) == 1
    pending = {(s["metric"]["table"], s["metric"]["action"]): float(s["value"][1])
               for s in only("max by (table, action) (hoodied_pending_instants")}
    assert pending[(str(waiting), "indexing")] == 1
    (listed,) = only("max by (table) (hoodied_table_quarantined")
    assert listed["metric"]["table"] == str(bad)

    # the table's first job outcome is seen by increase(): its counter was there at 0 before the job
    outcomes = {(s["metric"]["action"], s["metric"]["outcome"]): float(s["value"][1])
                for s in prometheus.query('sum by (action, outcome) (increase(hoodied_jobs_total{'
                                          f'table="{due}", outcome!="lock_unavailable"}}[10m]))')}
    assert outcomes[("clean", "success")] > 0.5, outcomes

    # the rules loaded and evaluate without errors
    groups = prometheus.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    names = {r["name"] for r in rules}
    assert names == {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    time.sleep(2)  # one more evaluation round
    rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    alerts = prometheus.api("alerts")["alerts"]  # pending ones included (rules wait with `for`)
    assert ("HoodiedTableQuarantined", str(bad)) in {(a["labels"]["alertname"], a["labels"].get("table"))
                                                     for a in alerts}
