"""kill -9 at every step of ``execute_indexing``, then undo and re-run: the result is Hudi's.

A real subprocess executes the pending ``indexing`` of the v8 fixture (derived as in
``test_indexing``); the crash point (``hoodie.crashpoints``) stops it, the test kills it and
its Spark processes with SIGKILL. ``rollback_failed_indexing`` then undoes the failed attempt
(Hudi's ``RunIndexActionExecutor.abort``) and ``execute_indexing`` runs again; the outcome is
compared with Hudi's own build field by field, and hudi-rs reads the same rows throughout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hoodied.executors.engine import Session
from hoodied.executors.indexing import rollback_failed_indexing
from hoodied.hoodie.errors import InstantStateError
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.storage import LocalStorage
from tests.executors.test_indexing import (
    V8,
    V8_INDEXING,
    V8_INIT,
    V8_PARTITION,
    _execute,
    _without_mdt,
    compare_with_hudi,
    derive_pending,
    live_index_keys,
    spark,  # noqa: F401  (the module's Spark session fixture)
)
from tests.helpers.mor_tables import hudi_rs_rows

PROJECT = Path(__file__).resolve().parents[2]

_DRIVER = """
import sys
from hoodied.executors.engine import spark_session
from hoodied.executors.indexing import execute_indexing
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.truetime import TimeSettings
storage = LocalStorage(sys.argv[1])
with spark_session("local[2]") as spark:
    execute_indexing(storage, load_table_config(storage), InProcessLock(storage.base_uri), sys.argv[2], spark,
                     time_settings=TimeSettings(max_expected_clock_skew_ms=5), heartbeat_interval_ms=100)
"""


def _kill_at(root: Path, point: str, tmp: Path) -> None:
    ready = tmp / f"ready-{point}"
    env = dict(os.environ, PYTHONPATH=str(PROJECT), HOODIED_TEST_PAUSE_AT=point,
               HOODIED_TEST_PAUSE_READY=str(ready), HOODIED_TEST_PAUSE_S="300")
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(root), V8_INDEXING], env=env, cwd=PROJECT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 240
    while not ready.exists():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the driver exited ({proc.returncode}) before {point}: {err.decode()[-2000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"the driver never reached {point}")
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Spark JVM and Python workers
    proc.communicate(timeout=60)


def _undo(root: Path) -> Any:
    storage = LocalStorage(str(root))
    lock = InProcessLock(storage.base_uri)
    deadline = time.monotonic() + 30
    while True:  # the killed attempt's heartbeat expires after 2 missed 100 ms beats
        try:
            return rollback_failed_indexing(storage, lock, V8_INDEXING, heartbeat_interval_ms=100)
        except InstantStateError as exc:
            if "live heartbeat" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("point", [
    "indexing-inflight", "indexing-file-groups", "indexing-task", "indexing-mdt-committed",
    "indexing-properties",
])
def test_killed_indexing_converges(point: str, hudi_table: Any, shared_table: Any, spark: Session,  # noqa: F811
                                   tmp_path: Path) -> None:
    root = hudi_table(V8)
    derive_pending(root, V8_INDEXING, drop_later=True)
    rows = hudi_rs_rows(root)
    _kill_at(root, point, tmp_path)
    assert hudi_rs_rows(root) == rows
    with pytest.raises(InstantStateError):  # a failed attempt is refused until undone
        _execute(root, spark, V8_INDEXING)
    undone = _undo(root)
    assert undone is not None
    assert not (root / ".hoodie/timeline" / f"{V8_INDEXING}.indexing.inflight").exists()
    assert not [p for p in (root / ".hoodie/metadata" / V8_PARTITION).rglob("*") if p.is_file()]
    assert _undo(root) is None  # idempotent: only requested now
    result = _execute(root, spark, V8_INDEXING)
    assert result.init_instant == V8_INIT
    compare_with_hudi(shared_table(V8), root, V8_PARTITION, V8_INIT, V8_INDEXING)
    assert len(live_index_keys(root, V8_PARTITION)) == 8
    assert hudi_rs_rows(root) == rows == hudi_rs_rows(_without_mdt(root, tmp_path))
