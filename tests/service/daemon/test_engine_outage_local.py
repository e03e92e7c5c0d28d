"""A local Spark whose JVM dies mid-job is an engine outage too (real daemon, real local Spark).

``hoodied run`` with ``spark.master: local[1]`` runs a pending compaction whose first task pauses
(``hoodie.crashpoints``: the daemon's Python workers inherit its environment); the test kills the
daemon's Spark JVM (its ``java`` child process) with SIGKILL there. The job ends
``engine_unavailable`` (pyspark's gateway connection is gone), the table is not quarantined and
``/readyz`` is 503; the next attempt starts a new JVM, rolls the failed attempt back and completes
the compaction (its task pauses a few seconds again, then goes on), and hudi-rs reads the rows it
read before.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from hoodied.hoodie.timeline.instant import Action, State
from tests.helpers.daemon_procs import events, get_or_none, hoodied, timeline, wait_for
from tests.helpers.mor_tables import hudi_rs_rows, pending_compaction_table
from tests.helpers.redis_server import free_port
from tests.service.daemon.test_engine_outage import (
    _config,
    _metric,
    _outages,
    _state,
    _terminate_timed,
)


def _java_children(pid: int) -> list[int]:
    """The ``java`` processes among the children of ``pid`` (the local Spark's JVM)."""
    out = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(line.split()[0]) for line in out.stdout.splitlines() if line.split()[1:] == ["java"]]


def test_a_local_jvm_killed_mid_job_is_an_outage_and_a_new_jvm_finishes_the_work(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = pending_compaction_table(root)
    rows = hudi_rs_rows(root)
    ready = tmp_path / "task-paused"
    port = free_port()
    env = {"HOODIED_TEST_PAUSE_AT": "task:0", "HOODIED_TEST_PAUSE_READY": str(ready),
           "HOODIED_TEST_PAUSE_S": "6"}
    proc = hoodied("run", "--config", str(_config(tmp_path, [root], "local[1]", port)), env=env)
    try:
        wait_for("a task of the compaction running in the local Spark", ready.exists, 180, (proc,))
        java = _java_children(proc.pid)
        if not java:
            pytest.skip("the local Spark JVM is not a child process of the daemon here")
        for pid in java:
            subprocess.run(["kill", f"-{signal.SIGKILL.value}", str(pid)], check=True)
        wait_for("the job ended engine_unavailable", lambda: _outages(port) >= 1, 60, (proc,))
        # down until a new JVM has started (seconds): readiness and the gauge say so meanwhile
        assert get_or_none(port, "/readyz")[0] == 503  # type: ignore[index]
        assert _metric(port, "hoodied_engine_up") == 0
        assert _state(root, t) is State.INFLIGHT
        wait_for("compaction completed on a new JVM", lambda: _state(root, t) is None, 240, (proc,))
        wait_for("/readyz 200", lambda: get_or_none(port, "/readyz") == (200, "ready\n"), 30, (proc,))
        assert _metric(port, "hoodied_engine_up") == 1
    finally:
        code, _, err = _terminate_timed(proc)
    assert code == 0, err[-3000:]
    logged = events(err)
    assert not [e for e in logged if str(e.get("event", "")).startswith("table quarantined")]
    ended = [e["outcome"] for e in logged if e.get("event") == "job ended"]
    assert "failed" not in ended and "corrupt" not in ended and "engine_unavailable" in ended, ended
    done = timeline(root)
    rollbacks = done.completed((Action.ROLLBACK,))
    assert [done.read_commit_metadata(r)["commitsRollback"] for r in rollbacks] == [[t]]
    assert hudi_rs_rows(root) == rows
