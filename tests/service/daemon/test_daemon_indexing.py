"""The daemon, ``hoodied execute`` and ``hoodied rollback`` run Hudi's ``indexing`` instants.

Real processes on a copy of ``v8_trips_8i3u1d`` whose indexing (``secondary_index_rider_idx``)
is turned back into the state ``CREATE INDEX`` had scheduled (``test_indexing.derive_pending``).
What they check: a failed attempt is aborted (Hudi writes no rollback instant for indexing)
before the instant runs again, the instant is executed exactly once through the same runner
as the other Spark services, the built partition is Hudi's own (field by field), an indexing
that has to wait for a pending data write is skipped without counting a failure, and hudi-rs
reads the same rows before and after.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action, State
from tests.executors.test_indexing import (
    V8,
    V8_INDEXING,
    V8_INIT,
    V8_PARTITION,
    compare_with_hudi,
    derive_pending,
)
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows
from tests.service.daemon.test_daemon_spark_services import PROJECT, _env, _run_once, _timeline

NOTHING_TO_PLAN = {"clean": {"schedule": False}, "compaction": {"schedule": False}}


def _pending_indexing(tmp_path: Path, *, failed: bool) -> Path:
    root = unzip_table(require_fixture(V8), tmp_path / "hudi")
    derive_pending(root, V8_INDEXING, drop_later=True)
    if failed:  # an executor died after its inflight transition: no heartbeat file is left
        (root / ".hoodie/timeline" / f"{V8_INDEXING}.indexing.inflight").write_bytes(b"")
    return root


def _hoodied(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", *args],
        cwd=PROJECT, env=_env(), text=True, capture_output=True, timeout=300,
    )


def _metadata_partitions(root: Path) -> tuple[str, ...]:
    return load_table_config(LocalStorage(str(root))).metadata_partitions


def test_the_daemon_aborts_a_failed_indexing_then_executes_it_once(tmp_path: Path) -> None:
    root = _pending_indexing(tmp_path, failed=True)
    rows = hudi_rs_rows(root)

    ended = _run_once(tmp_path, [root], NOTHING_TO_PLAN)
    jobs = [(e["kind"], e["action"], e["instant"], e["outcome"]) for e in ended]
    assert jobs == [("execute", "indexing", V8_INDEXING, "success")], jobs

    timeline = _timeline(root)
    done = timeline.get(V8_INDEXING)
    assert done is not None and done.is_completed and done.action is Action.INDEXING
    assert not timeline.completed((Action.ROLLBACK,))  # aborted, not rolled back: Hudi's way
    assert V8_PARTITION in _metadata_partitions(root)
    hudi = unzip_table(require_fixture(V8), tmp_path / "hudi-original")
    compare_with_hudi(hudi, root, V8_PARTITION, V8_INIT, V8_INDEXING)
    assert hudi_rs_rows(root) == rows
    assert _run_once(tmp_path, [root], NOTHING_TO_PLAN) == []  # executed exactly once


def test_hoodied_rollback_aborts_and_execute_runs_the_indexing(tmp_path: Path) -> None:
    root = _pending_indexing(tmp_path, failed=True)
    rows = hudi_rs_rows(root)

    undone = _hoodied("rollback", str(root), "--instant", V8_INDEXING, "--clock-skew-ms", "5")
    assert undone.returncode == 0, undone.stderr[-3000:]
    assert undone.stdout.startswith(f"{V8_INDEXING} indexing: failed attempt undone ({V8_PARTITION};")
    assert _timeline(root).get(V8_INDEXING).state is State.REQUESTED  # type: ignore[union-attr]
    again = _hoodied("rollback", str(root), "--instant", V8_INDEXING, "--clock-skew-ms", "5")
    assert again.returncode == 0 and "only requested, nothing to roll back" in again.stdout

    executed = _hoodied("execute", str(root), "--instant", V8_INDEXING, "--spark", "local[2]",
                        "--clock-skew-ms", "5")
    assert executed.returncode == 0, executed.stderr[-3000:]
    (line,) = executed.stdout.splitlines()
    assert V8_INDEXING in line and V8_PARTITION in line, line
    assert _timeline(root).get(V8_INDEXING).is_completed  # type: ignore[union-attr]
    assert V8_PARTITION in _metadata_partitions(root)
    assert hudi_rs_rows(root) == rows


def test_an_indexing_waiting_for_a_pending_write_is_skipped_not_failed(tmp_path: Path) -> None:
    root = unzip_table(require_fixture(V8), tmp_path / "hudi")
    derive_pending(root, V8_INDEXING, drop_later=False)
    # the table's last delta commit is still being written
    (root / ".hoodie/timeline/20251220210130911_20251220210131755.deltacommit").unlink()
    before = sorted(p.name for p in (root / ".hoodie/timeline").iterdir())

    ended = _run_once(tmp_path, [root], NOTHING_TO_PLAN)
    outcomes = [(e["action"], e["instant"], e["outcome"]) for e in ended]
    assert outcomes == [("indexing", V8_INDEXING, "skipped")], outcomes
    assert "data writes are pending" in ended[0]["message"]
    assert sorted(p.name for p in (root / ".hoodie/timeline").iterdir()) == before
    assert V8_PARTITION not in _metadata_partitions(root)


def test_indexing_off_in_the_policy_leaves_the_instant_alone(tmp_path: Path) -> None:
    root = _pending_indexing(tmp_path, failed=False)
    ended = _run_once(tmp_path, [root], {**NOTHING_TO_PLAN, "indexing": {"enabled": False}})
    assert ended == []
    assert _timeline(root).get(V8_INDEXING).state is State.REQUESTED  # type: ignore[union-attr]
