"""The daemon plans and executes compactions with its Spark engine (real files, real Spark local).

``hoodied run --once`` runs as a subprocess: the daemon's own lazily started Spark session
is the one extra session of this test (it must not share the process of the session-scoped
session of ``test_compaction``, which the daemon would stop on shutdown).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.service.config import load_config
from hoodied.service.daemon.loop import Daemon
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, written_mor_table

PROJECT = Path(__file__).resolve().parents[3]
V9 = "mor/avro/v9_txns_simple_nometa"
HUDI_COMPACTION = "20260307135839895"  # inflight once its completion and outputs are gone


def _timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def _reopen(root: Path, t: str) -> None:
    """Make the fixture's completed compaction ``t`` a failed attempt: completion and outputs gone."""
    timeline_dir = root / ".hoodie" / "timeline"
    for f in timeline_dir.glob(f"{t}*"):
        if not f.name.endswith((".requested", ".inflight")):
            f.unlink()
    outputs = list(root.rglob(f"*_{t}.parquet"))
    assert len(outputs) == 2
    for p in outputs:
        p.unlink()


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HOODIED_* setting of the machine running the tests leaks into them."""
    for name in list(os.environ):
        if name.startswith("HOODIED_"):
            monkeypatch.delenv(name)


def test_run_once_plans_and_executes_compactions(tmp_path: Path) -> None:
    a = tmp_path / "written"
    written_mor_table(a)  # six delta commits: the default trigger (5) fires
    b = unzip_table(require_fixture(V9), tmp_path / "hudi")
    a_rows, b_rows = hudi_rs_rows(a), hudi_rs_rows(b)
    _reopen(b, HUDI_COMPACTION)
    assert not [i for i in _timeline(a).instants if i.action is Action.COMPACTION]
    assert _timeline(b).get(HUDI_COMPACTION).is_pending  # type: ignore[union-attr]

    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "spark": {"master": "local[2]"}, "clock_skew_ms": 5, "poll_interval_seconds": 0.2,
        "heartbeat": {"interval_ms": 500, "tolerable_misses": 2}, "log": {"format": "json"},
        "http": "off",
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    env["PYTHONPATH"] = str(PROJECT)
    proc = subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "run", "--config", str(config),
         "--once", "--table", str(a), "--table", str(b)],
        cwd=PROJECT, env=env, text=True, capture_output=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    events: list[dict[str, Any]] = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    ended = [(e["table"], e["kind"], e["outcome"]) for e in events
             if e.get("event") == "job ended" and e.get("action") == "compaction"]
    assert (str(a), "plan", "planned") in ended
    assert (str(a), "execute", "success") in ended
    assert (str(b), "execute", "success") in ended
    assert not [e for e in ended if e[2] not in ("planned", "success", "nothing_due")], ended

    for root, rows in ((a, a_rows), (b, b_rows)):
        timeline = _timeline(root)
        compactions = [i for i in timeline.instants if i.action is Action.COMPACTION]
        assert compactions and all(i.is_completed for i in compactions), compactions
        assert hudi_rs_rows(root) == rows
    rollbacks = _timeline(b).completed((Action.ROLLBACK,))
    assert [_timeline(b).read_commit_metadata(r)["commitsRollback"] for r in rollbacks] == [[HUDI_COMPACTION]]


def test_an_mdt_partition_hoodied_cannot_maintain_reports_the_services_unsupported(
    tmp_path: Path,
) -> None:
    """A metadata table with a partition no hoodied service keeps exact (an expression index):
    compaction and clean are reported unsupported, nothing is written, the table is not quarantined."""
    root = unzip_table(require_fixture("mor/avro/v9_txns_simple_meta"), tmp_path / "meta")
    props = root / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("record_index,", "record_index,expr_index_amount,"))
    rows = hudi_rs_rows(root)
    before = sorted(p.name for p in (root / ".hoodie" / "timeline").iterdir())
    settings = load_config(overrides={
        "tables": [str(root)], "http": "off", "clock_skew_ms": 5, "poll_interval_seconds": 0.2,
        "defaults": {"services": {"clean": {"commits_retained": 2}, "compaction": {"delta_commits": 1}}},
    })
    daemon = Daemon(settings, once=True)
    assert anyio.run(daemon.run) == 0
    ts = daemon.tables[str(root)]
    assert ts.quarantine is None
    by_action = {(o["kind"], o["action"]): o for o in ts.outcomes}
    for action in ("compaction", "clean"):
        plan = by_action[("plan", action)]
        assert plan["outcome"] == "unsupported" and "expr_index_amount" in plan["message"], plan
    metrics = daemon.metrics.render().decode()
    assert f'hoodied_plans_total{{action="compaction",outcome="unsupported",table="{root}"}} 1.0' in metrics
    assert not daemon.engine.started
    assert sorted(p.name for p in (root / ".hoodie" / "timeline").iterdir()) == before
    assert hudi_rs_rows(root) == rows


def test_run_demo_once_compacts_and_cleans_the_demo_table_and_prints_its_status(tmp_path: Path) -> None:
    """The README's set-up command: ``hoodied run --demo PATH --once`` on the demo table."""
    from hoodied.hoodie.demo.demo_table import create_demo_table

    demo = tmp_path / "demo-table"
    create_demo_table(str(demo))  # the same table `hoodied run --demo` creates when PATH is new
    rows = hudi_rs_rows(demo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    env["PYTHONPATH"] = str(PROJECT)
    proc = subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "run", "--demo", str(demo), "--once",
         "--spark", "local[2]"],
        cwd=PROJECT, env=env, text=True, capture_output=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "created the demo table" not in proc.stderr  # an existing table is reused as it is
    assert "job ended" in proc.stderr and not proc.stderr.lstrip().startswith("{")  # console log lines
    timeline = _timeline(demo)
    (compaction,) = [i for i in timeline.instants if i.action is Action.COMPACTION]
    (clean,) = [i for i in timeline.instants if i.action is Action.CLEAN]
    assert compaction.is_completed and clean.is_completed and clean.requested_time > compaction.requested_time
    out = proc.stdout
    assert f"{demo}  (demo_trips, MERGE_ON_READ, v9)" in out, out
    assert f"compaction {compaction.requested_time}: success" in out, out
    assert f"clean {clean.requested_time}: success" in out, out
    # the clean removed exactly the slices the compaction replaced: one base file per file group left
    assert not list(demo.rglob(".*.log.*"))
    bases = [p.name.split("_")[0] for p in demo.rglob("*.parquet")]
    assert len(bases) == len(set(bases)) == 8
    assert hudi_rs_rows(demo) == rows


def test_demo_option_creates_the_demo_table_when_absent(tmp_path: Path) -> None:
    from hoodied.service.cli.daemon import DEMO_POLICY, _demo_overrides

    overrides: dict[str, Any] = {"tables": ["/data/other"]}
    _demo_overrides(str(tmp_path / "fresh"), overrides, None)
    assert (tmp_path / "fresh" / ".hoodie" / "hoodie.properties").is_file()
    assert overrides["tables"] == ["/data/other", {"path": str(tmp_path / "fresh"), "policy": DEMO_POLICY}]
    settings = load_config(overrides=overrides)
    assert settings.http.address is None and settings.log.format == "console"
    assert settings.tables[1].policy.services.clean.file_versions_retained == 1
    assert len([i for i in _timeline(tmp_path / "fresh").instants if i.action is Action.DELTA_COMMIT]) == 6
