"""The daemon's per-table books (``service.daemon.table_state``): readiness and what an outcome leads to.

A real fixture table, its real poll and the default registry; no daemon loop.
"""

from __future__ import annotations

from pathlib import Path

from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.config import DaemonConfig, load_config
from hoodied.service.daemon.jobs import Job, JobKind, JobOutcome, Outcome
from hoodied.service.daemon.poll import poll_table
from hoodied.service.daemon.registry import build_registry
from hoodied.service.daemon.table_state import TableState, item_status, next_for_table, record_outcome

V9 = "mor/avro/v9_txns_simple_nometa"
CLUSTERING = "20260307135840454"
COMPACTION = "20260307135839895"


def _state(root: Path) -> tuple[DaemonConfig, TableState]:
    settings = load_config(overrides={"retry": {"max_attempts": 3}, "http": "off"})
    storage = LocalStorage(str(root))
    ts = TableState(str(root), settings.defaults, "config", storage)
    ts.poll = poll_table(storage, None, ts.policy, build_registry(), settings.heartbeat)
    return settings, ts


def test_lock_outages_never_count_towards_quarantine(hudi_table) -> None:
    root = hudi_table(V9)
    for f in (root / ".hoodie" / "timeline").glob(f"{CLUSTERING}_*"):
        f.unlink()  # a pending clustering: an instant with a key of its own
    settings, ts = _state(root)
    assert ts.poll is not None and ts.storage is not None
    (item,) = ts.poll.pending
    job = Job(ts.uri, ts.storage, ts.poll.config, TableService.CLUSTERING, "clustering", ts.policy,
              item.instant)
    now = 1000.0
    for n in range(1, 6):  # a long Redis outage: backoff grows, the table stays served
        outcome = JobOutcome(Outcome.LOCK_UNAVAILABLE, "redis down")
        verdict = record_outcome(ts, job, JobKind.EXECUTE, outcome, settings, now)
        assert verdict.quarantine is None and verdict.level == "warning"
        assert ts.failures[CLUSTERING].count == n and ts.failures[CLUSTERING].lock
    # then the work itself fails: the first real failure of the instant, not the sixth
    verdict = record_outcome(ts, job, JobKind.EXECUTE, JobOutcome(Outcome.FAILED, "boom"), settings, now)
    assert verdict.quarantine is None and ts.failures[CLUSTERING].count == 1
    record_outcome(ts, job, JobKind.EXECUTE, JobOutcome(Outcome.FAILED, "boom"), settings, now)
    verdict = record_outcome(ts, job, JobKind.EXECUTE, JobOutcome(Outcome.FAILED, "boom"), settings, now)
    assert verdict.quarantine == f"clustering {CLUSTERING} failed 3 times; last: boom"
    assert [o["outcome"] for o in ts.outcomes][:4] == ["failed"] * 3 + ["lock_unavailable"]


def test_a_failed_instant_waits_in_backoff_while_planning_goes_on_then_runs_again(hudi_table) -> None:
    root = hudi_table(V9)
    for f in (root / ".hoodie" / "timeline").glob(f"{COMPACTION}_*"):
        f.unlink()  # a failed compaction attempt
    settings, ts = _state(root)
    assert ts.poll is not None and ts.storage is not None
    (item,) = ts.poll.pending
    registry = build_registry()
    assert item_status(ts, item, None, registry, 0.0) == ("ready", "")
    first = next_for_table(ts, registry, 0.0)
    assert first is not None and first.item == item
    job = Job(ts.uri, ts.storage, ts.poll.config, TableService.COMPACTION, "compaction", ts.policy,
              item.instant)
    record_outcome(ts, job, JobKind.EXECUTE, JobOutcome(Outcome.FAILED, "boom"), settings, 0.0)
    status, note = item_status(ts, item, None, registry, 1.0)
    assert status == "backoff" and note.endswith("last error: boom")
    planned = next_for_table(ts, registry, 1.0)  # meanwhile the clean that is due is planned
    assert planned is not None and (planned.kind, planned.service) == ("plan", "clean")
    again = next_for_table(ts, registry, settings.retry.backoff(1) + 1)
    assert again is not None and (again.kind, again.item) == ("execute", item)
