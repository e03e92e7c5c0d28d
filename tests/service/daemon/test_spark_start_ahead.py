"""Spark start-up off the critical path: ``spark.start_at_startup`` (real ``hoodied`` processes).

- ``hoodied run`` with the setting on and a merge-on-read table whose compaction is requested:
  the daemon's own log shows the session start began before the job started, one session was
  started (the job waited for that start, it did not start a second one), the compaction
  completed and hudi-rs reads the rows it read before;
- SIGTERM while that start is under way (a local JVM launched, ``/status`` saying ``starting``):
  exit 0 within 2 s past the grace period, and the JVM does not outlive the daemon's process group;
- a start against a Spark Connect port that accepts connections and never answers: while it
  waits, polls go on and ``/healthz`` answers 200; once ``spark.start_timeout_seconds`` is past,
  the engine is down (``/readyz`` 503, ``hoodied_engine_up`` 0, ``/status`` naming the problem).

And ``hoodied execute`` checks the plan before it starts Spark: a corrupt compaction plan ends
with its one error line and exit code 4 in a process that launched no JVM (no pyspark gateway, no
child process).

The test helpers start daemons with the setting off (``tests.helpers.daemon_procs.SPARK_AHEAD_OFF``);
these tests turn it on through the environment, which beats the settings file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hoodied.hoodie.timeline.instant import State
from tests.helpers.daemon_procs import PROJECT, events, get_or_none, hoodied, running, wait_for
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, pending_compaction_table
from tests.helpers.redis_server import free_port
from tests.service.daemon.test_engine_outage import (
    GRACE_S,
    SilentServer,
    _config,
    _metric,
    _state,
    _status,
    _terminate_timed,
)

AHEAD_ON = {"HOODIED_SPARK__START_AT_STARTUP": "true"}

#: Runs ``hoodied ARGS...`` in-process, then prints whether pyspark launched its JVM (its gateway)
#: and which child processes are left (a launched JVM lives as long as this process).
JVM_PROBE = """\
import os, subprocess, sys
from hoodied.service.cli.main import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
pyspark = sys.modules.get("pyspark")
jvm = pyspark is not None and pyspark.SparkContext._gateway is not None
ps = subprocess.run(["ps", "-o", "comm=", "--ppid", str(os.getpid())], capture_output=True, text=True)
children = sorted(name for name in ps.stdout.split() if name != "ps")
print(f"exit={code} jvm={jvm} children={children}")
"""

AHEAD = "starting a Spark session on"


def _said(logged: list[dict[str, Any]], prefix: str) -> list[int]:
    """Positions of the log records whose message starts with ``prefix``."""
    return [i for i, e in enumerate(logged) if str(e.get("event", "")).startswith(prefix)]


def _group_left(pgid: int) -> list[str]:
    """The processes still in process group ``pgid`` (pid and command)."""
    out = subprocess.run(["ps", "-o", "pid=,comm=", "-g", str(pgid)], capture_output=True, text=True)
    return out.stdout.split("\n")[:-1]


def _java_children(pid: int) -> list[str]:
    out = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(pid)], capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.split()[1:] == ["java"]]


def test_the_first_compaction_finds_the_session_started_ahead(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = pending_compaction_table(root)
    rows = hudi_rs_rows(root)
    port = free_port()
    proc = hoodied("run", "--config", str(_config(tmp_path, [root], "local[1]", port)), env=AHEAD_ON)
    try:
        wait_for("the compaction completed", lambda: _state(root, t) is None, 240, (proc,))
        wait_for("/status: engine up", lambda: (_status(port) or {}).get("engine", {}).get("state") == "up",
                 30, (proc,))
    finally:
        code, _, err = _terminate_timed(proc)
    assert code == 0, err[-3000:]
    logged = events(err)
    starts = _said(logged, AHEAD)
    said = [logged[i]["event"] for i in starts]
    assert said == ["starting a Spark session on local[1] in the background"], said
    job = next(i for i, e in enumerate(logged)
               if e.get("event") == "job started" and e.get("kind") == "execute")
    assert starts[0] < job  # begun before the job was even dispatched
    assert len(_said(logged, "local Spark session")) == 1  # the job used that start: one JVM, one session
    ended = [e for e in logged if e.get("event") == "job ended"]
    assert [(e["kind"], e["outcome"]) for e in ended] == [("execute", "success")], ended
    assert hudi_rs_rows(root) == rows


def test_sigterm_while_the_session_starts_ahead_exits_cleanly(tmp_path: Path) -> None:
    root = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "t")  # nothing due
    port = free_port()
    with running("run", "--config", str(_config(tmp_path, [root], "local[1]", port)), env=AHEAD_ON,
                 new_session=True) as proc:
        wait_for("the local JVM launched", lambda: _java_children(proc.pid), 120, (proc,))
        status = _status(port)
        assert status is not None and status["engine"]["state"] == "starting", status
        code, seconds, err = _terminate_timed(proc)
    assert code == 0, err[-3000:]
    assert seconds < GRACE_S + 2, seconds
    logged = events(err)
    # within the grace period the start ended and its session was stopped, or the start was left to
    # the exiting process: the JVM ends with it (it reads its parent's pipe, pyspark's gateway contract)
    assert (_said(logged, "Spark session stopped: the engine was closed while it started")
            or _said(logged, "Spark session still starting")), err[-3000:]
    assert not _said(logged, "Spark engine unavailable")
    wait_for("no process of the daemon's group left (its JVM)", lambda: not _group_left(proc.pid), 60)


def test_a_start_ahead_against_a_silent_connect_server_marks_the_engine_down_and_polls_go_on(
    tmp_path: Path,
) -> None:
    root = unzip_table(require_fixture("cow/v9_txns_simple_nometa"), tmp_path / "t")
    silent = SilentServer()
    port = free_port()
    url = f"sc://127.0.0.1:{silent.port}"
    config = _config(tmp_path, [root], url, port, start_timeout=12)
    proc = hoodied("run", "--config", str(config), env=AHEAD_ON)
    try:
        polls_while_starting: set[float] = set()

        def polled_twice_while_starting() -> bool:
            status = _status(port)
            if status is not None and status["engine"]["state"] == "starting":
                if status["last_poll"]["ended_at"] is not None:
                    polls_while_starting.add(status["last_poll"]["ended_at"])
                assert (get_or_none(port, "/healthz") or (0, ""))[0] == 200
            return len(polls_while_starting) >= 2

        wait_for("two poll cycles ended while the session starts", polled_twice_while_starting, 60, (proc,))

        def down() -> dict[str, Any] | None:
            status = _status(port)
            return status if status is not None and status["engine"]["state"] == "down" else None

        engine = wait_for("the engine down", down, 60, (proc,))["engine"]
        assert engine["up"] is False
        assert engine["problem"] == f"Spark Connect {url}: session start: no answer in 12 s", engine
        assert get_or_none(port, "/readyz") == (503, f"spark engine unavailable: {engine['problem']}\n")
        assert _metric(port, "hoodied_engine_up") == 0
        assert (get_or_none(port, "/healthz") or (0, ""))[0] == 200
        code, seconds, err = _terminate_timed(proc)
    finally:
        silent.close()
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err[-3000:]
    assert seconds < GRACE_S + 2, seconds
    assert len(_said(events(err), "Spark engine unavailable")) == 1


def test_execute_refuses_a_corrupt_plan_without_starting_spark(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = pending_compaction_table(root)
    requested = root / ".hoodie" / "timeline" / f"{t}.compaction.requested"
    data = requested.read_bytes()
    requested.write_bytes(data[: len(data) // 2])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    env["PYTHONPATH"] = str(PROJECT)
    done = subprocess.run(
        [sys.executable, "-c", JVM_PROBE, "execute", str(root), "--spark", "local[1]",
         "--clock-skew-ms", "5"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    # the check imports the executor (and so pyspark), but no session and no JVM was started
    assert done.stdout.strip().endswith("exit=4 jvm=False children=[]"), done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("hoodied: error: ")]
    assert len(errors) == 1 and t in errors[0], done.stderr
    assert _state(root, t) is State.REQUESTED

