"""The daemon's per-table books (``service.daemon.table_state``): readiness and what an outcome leads to.

A real fixture table, its real poll and the default registry; no daemon loop.
"""

from __future__ import annotations

from hoodied.hoodie.storage import LocalStorage
from hoodied.service.config import load_config
from hoodied.service.daemon.jobs import Job, JobOutcome
from hoodied.service.daemon.poll import poll_table
from hoodied.service.daemon.registry import default_registry
from hoodied.service.daemon.table_state import TableState, item_status, next_for_table, record_outcome

V9 = "mor/avro/v9_txns_simple_nometa"
CLUSTERING = "20260307135840454"
COMPACTION = "20260307135839895"


def _state(root):  # type: ignore[no-untyped-def]
    settings = load_config(overrides={"retry": {"max_attempts": 3}, "http": "off"})
    storage = LocalStorage(str(root))
    ts = TableState(str(root), settings.defaults, "config", storage)
    ts.poll = poll_table(storage, None, ts.policy, default_registry(), settings.heartbeat)
    return settings, ts


def test_lock_outages_never_count_towards_quarantine(hudi_table) -> None:  # type: ignore[no-untyped-def]
    root = hudi_table(V9)
    for f in (root / ".hoodie" / "timeline").glob(f"{CLUSTERING}_*"):
        f.unlink()  # a pending clustering: an instant with a key of its own
    settings, ts = _state(root)
    (item,) = ts.poll.pending
    job = Job(ts.uri, ts.storage, ts.poll.config, "clustering", "clustering", ts.policy, item.instant)
    now = 1000.0
    for n in range(1, 6):  # a long Redis outage: backoff grows, the table stays served
        outcome = JobOutcome("lock_unavailable", "redis down")
        verdict = record_outcome(ts, job, "execute", outcome, settings, now)
        assert verdict.quarantine is None and verdict.level == "warning"
        assert ts.failures[CLUSTERING].count == n and ts.failures[CLUSTERING].lock
    # then the work itself fails: the first real failure of the instant, not the sixth
    verdict = record_outcome(ts, job, "execute", JobOutcome("failed", "boom"), settings, now)
    assert verdict.quarantine is None and ts.failures[CLUSTERING].count == 1
    record_outcome(ts, job, "execute", JobOutcome("failed", "boom"), settings, now)
    verdict = record_outcome(ts, job, "execute", JobOutcome("failed", "boom"), settings, now)
    assert verdict.quarantine == f"clustering {CLUSTERING} failed 3 times; last: boom"
    assert [o["outcome"] for o in ts.outcomes][:4] == ["failed"] * 3 + ["lock_unavailable"]


def test_a_failed_instant_waits_in_backoff_while_planning_goes_on_then_runs_again(hudi_table) -> None:  # type: ignore[no-untyped-def]
    root = hudi_table(V9)
    for f in (root / ".hoodie" / "timeline").glob(f"{COMPACTION}_*"):
        f.unlink()  # a failed compaction attempt
    settings, ts = _state(root)
    (item,) = ts.poll.pending
    registry = default_registry()
    assert item_status(ts, item, None, registry, 0.0) == ("ready", "")
    assert next_for_table(ts, registry, 0.0).item == item  # type: ignore[union-attr]
    job = Job(ts.uri, ts.storage, ts.poll.config, "compaction", "compaction", ts.policy, item.instant)
    record_outcome(ts, job, "execute", JobOutcome("failed", "boom"), settings, 0.0)
    status, note = item_status(ts, item, None, registry, 1.0)
    assert status == "backoff" and note.endswith("last error: boom")
    planned = next_for_table(ts, registry, 1.0)  # meanwhile the clean that is due is planned
    assert planned is not None and (planned.kind, planned.service) == ("plan", "clean")
    again = next_for_table(ts, registry, settings.retry.backoff(1) + 1)
    assert again is not None and (again.kind, again.item) == ("execute", item)
