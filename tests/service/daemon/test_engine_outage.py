"""A lost Spark engine is an outage of the engine, never a failure of the table (real processes).

Real ``hoodied run`` daemons with a real ``redis-server`` lock, a real Spark Connect server (the one
pyspark ships, ``tests.executors.test_spark_connect.connect_server_command``) on a loopback port,
and a merge-on-read table with a pending compaction:

- the server is not running when the daemon starts: the compaction ends ``engine_unavailable``
  more times than ``retry.max_attempts`` and the table is not quarantined, ``/readyz`` is 503 and
  ``hoodied_engine_up`` 0; once the server is started on the same port the compaction completes,
  ``/readyz`` turns 200 and the change is logged once each way;
- the server is killed while a task of the compaction is paused on it (``hoodie.crashpoints``,
  set in the server's environment, so its Python worker stops inside the job): the job ends
  ``engine_unavailable``, the attempt stays inflight, nothing is quarantined; the restarted server
  gets the work, which is rolled back and executed again, and hudi-rs reads the rows it read before;
- SIGTERM ends the daemon with 0 within the grace period while a session start waits on a server
  that accepts connections but never answers, while the retries of an unreachable engine back
  off, and while a job waits on a server killed under it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hoodied.hoodie.timeline.instant import Action, State
from tests.executors.test_spark_connect import SPARK_HOME, STARTED, connect_server_command
from tests.helpers.daemon_procs import events, get_or_none, hoodied, timeline, wait_for
from tests.helpers.mor_tables import hudi_rs_rows, pending_compaction_table
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)

MAX_ATTEMPTS = 2
GRACE_S = 5.0


class ConnectServer:
    """pyspark's Spark Connect server on a fixed loopback port: started, killed, started again."""

    def __init__(self, folder: Path, port: int) -> None:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            pytest.skip("no Java (java on PATH or JAVA_HOME): cannot start a Spark Connect server")
        self.folder = folder
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        self.starts += 1
        work = self.folder / f"run{self.starts}"
        work.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "SPARK_CONF_DIR") and not k.startswith("HOODIED_")}
        env.update(SPARK_HOME=str(SPARK_HOME), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_DIRS=str(work))
        env.update(extra_env or {})
        log_path = work / "server.log"
        with open(log_path, "wb") as log_file:
            self.proc = subprocess.Popen(connect_server_command(self.port), cwd=work, env=env,
                                         stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 180
        while STARTED not in log_path.read_text(errors="replace"):
            if self.proc.poll() is not None:
                pytest.fail(f"Spark Connect server exited {self.proc.returncode}:\n"
                            f"{log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"Spark Connect server not started in 180 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)

    def kill(self) -> None:
        """SIGKILL the server and its Python workers (its own process group)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None


@pytest.fixture
def connect_server(tmp_path: Path) -> Iterator[ConnectServer]:
    server = ConnectServer(tmp_path / "spark-connect", free_port())
    try:
        yield server
    finally:
        server.kill()


class SilentServer:
    """A TCP port that accepts connections and never answers: a server that hangs in its handshake."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def _config(tmp_path: Path, tables: list[Path], spark: str, http_port: int, lock: str = "local",
            start_timeout: float = 60, retry: float = 3) -> Path:
    path = tmp_path / "hoodied.yaml"
    path.write_text(yaml.safe_dump({
        "tables": [str(t) for t in tables],
        "lock": {"url": lock},
        "spark": {"master": spark, "start_timeout_seconds": start_timeout, "retry_seconds": retry},
        "defaults": {"services": {"clean": {"schedule": False}, "compaction": {"schedule": False}}},
        "clock_skew_ms": 5, "poll_interval_seconds": 0.2, "grace_period_seconds": GRACE_S,
        "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
        "retry": {"max_attempts": MAX_ATTEMPTS, "backoff_seconds": 0.3, "backoff_max_seconds": 1},
        "log": {"format": "json"}, "http": f"127.0.0.1:{http_port}",
    }))
    return path


def _state(root: Path, t: str) -> State | None:
    """The state of instant ``t`` on the table's timeline (``None`` when completed or gone)."""
    inst = timeline(root).get(t)
    return None if inst is None or inst.is_completed else inst.state


def _metric(port: int, name: str, **labels: str) -> float | None:
    got = get_or_none(port, "/metrics")
    if got is None or got[0] != 200:
        return None
    total, seen = 0.0, False
    for line in got[1].splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and all(
                f'{k}="{v}"' in line for k, v in labels.items()):
            total, seen = total + float(line.rsplit(" ", 1)[1]), True
    return total if seen else None


def _status(port: int) -> dict[str, Any] | None:
    got = get_or_none(port, "/status")
    return yaml.safe_load(got[1]) if got is not None and got[0] == 200 else None


def _outages(port: int) -> float:
    return _metric(port, "hoodied_jobs_total", action="compaction", outcome="engine_unavailable") or 0.0


def _terminate_timed(proc: subprocess.Popen[str]) -> tuple[int, float, str]:
    """SIGTERM; the exit code, the seconds it took to exit and the standard error."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=GRACE_S + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the daemon did not exit within {GRACE_S + 30:.0f} s of SIGTERM:\n{err[-3000:]}")
    return proc.returncode, time.monotonic() - started, err


def _story(err: str) -> str:
    """The daemon's job and engine events, for a failure message."""
    keep = ("job ended", "Spark engine", "table quarantined", "rolled back", "Spark job")
    return "\n".join(line[:400] for line in err.splitlines() if any(k in line for k in keep))[-6000:]


def _assert_outage_only(logged: list[dict[str, Any]]) -> None:
    """No quarantine, no job counted as failed, the engine's changes logged once each."""
    assert not [e for e in logged if str(e.get("event", "")).startswith("table quarantined")]
    ended = [e["outcome"] for e in logged if e.get("event") == "job ended"]
    assert "failed" not in ended and "corrupt" not in ended, ended
    assert ended.count("engine_unavailable") > MAX_ATTEMPTS, ended
    down = [e for e in logged if str(e.get("event", "")).startswith("Spark engine unavailable")]
    back = [e for e in logged if str(e.get("event", "")).startswith("Spark engine available again")]
    assert len(down) == 1 and len(back) == 1, (down, back)


def test_an_engine_down_at_start_is_waited_out_then_the_compaction_runs(
    tmp_path: Path, connect_server: ConnectServer, redis_server: RedisServer,  # noqa: F811
) -> None:
    root = tmp_path / "t"
    t = pending_compaction_table(root)
    rows = hudi_rs_rows(root)
    port = free_port()
    proc = hoodied("run", "--config", str(_config(tmp_path, [root], connect_server.url, port,
                                                   lock=redis_server.url)))
    failed: AssertionError | None = None
    try:
        wait_for("compaction refused beyond max_attempts for want of the engine",
                 lambda: _outages(port) > MAX_ATTEMPTS, 60, (proc,))
        assert get_or_none(port, "/readyz") == (
            503, f"spark engine unavailable: Spark Connect {connect_server.url} unreachable: "
                 f"cannot connect to 127.0.0.1:{connect_server.port}: Connection refused\n")
        assert _metric(port, "hoodied_engine_up") == 0
        status = _status(port)
        assert status is not None and status["engine"]["up"] is False
        assert [tb["quarantined"] for tb in status["tables"]] == [None]
        assert _state(root, t) is State.REQUESTED

        connect_server.start()
        wait_for("compaction completed once the server is up",
                 lambda: _state(root, t) is None, 300, (proc,))
        wait_for("/readyz 200", lambda: get_or_none(port, "/readyz") == (200, "ready\n"), 30, (proc,))
        assert _metric(port, "hoodied_engine_up") == 1
    except AssertionError as exc:
        failed = exc
    finally:
        code, _, err = _terminate_timed(proc)
    if failed is not None:
        raise AssertionError(f"{failed}\nthe daemon's story:\n{_story(err)}") from failed
    assert code == 0, err[-3000:]
    _assert_outage_only(events(err))
    assert not timeline(root).completed((Action.ROLLBACK,))  # the refused attempts never touched the table
    assert hudi_rs_rows(root) == rows


def test_a_server_killed_mid_job_is_an_outage_and_the_attempt_is_rolled_back_and_retried(
    tmp_path: Path, connect_server: ConnectServer, redis_server: RedisServer,  # noqa: F811
) -> None:
    root = tmp_path / "t"
    t = pending_compaction_table(root)
    rows = hudi_rs_rows(root)
    ready = tmp_path / "task-paused"
    # the server's Python workers stop in the first task of the job (crash point ``task:0``)
    connect_server.start({"HOODIED_TEST_PAUSE_AT": "task:0", "HOODIED_TEST_PAUSE_READY": str(ready),
                          "HOODIED_TEST_PAUSE_S": "300"})
    port = free_port()
    proc = hoodied("run", "--config", str(_config(tmp_path, [root], connect_server.url, port,
                                                   lock=redis_server.url)))
    failed: AssertionError | None = None
    try:
        wait_for("a task of the compaction running on the server", ready.exists, 180, (proc,))
        assert _state(root, t) is State.INFLIGHT
        connect_server.kill()
        wait_for("the job ended engine_unavailable", lambda: _outages(port) > MAX_ATTEMPTS, 90, (proc,))
        assert get_or_none(port, "/readyz")[0] == 503  # type: ignore[index]
        assert _metric(port, "hoodied_engine_up") == 0
        status = _status(port)
        assert status is not None and [tb["quarantined"] for tb in status["tables"]] == [None]
        assert _state(root, t) is State.INFLIGHT  # a failed attempt, left as it was

        connect_server.start()
        wait_for("compaction completed on the restarted server",
                 lambda: _state(root, t) is None, 300, (proc,))
        wait_for("/readyz 200", lambda: get_or_none(port, "/readyz") == (200, "ready\n"), 30, (proc,))
    except AssertionError as exc:
        failed = exc
    finally:
        code, _, err = _terminate_timed(proc)
    if failed is not None:
        raise AssertionError(f"{failed}\nthe daemon's story:\n{_story(err)}") from failed
    assert code == 0, err[-3000:]
    logged = events(err)
    _assert_outage_only(logged)
    # the job that lost the server: one line naming it and the cause (its port refuses), then the
    # starts refused while it is down
    lost = [e["message"] for e in logged
            if e.get("event") == "job ended" and e["outcome"] == "engine_unavailable"]
    assert lost[0] == (f"EngineUnavailableError: Spark engine {connect_server.url} unavailable: "
                       f"cannot connect to 127.0.0.1:{connect_server.port}: Connection refused"), lost[0]
    assert (f"EngineUnavailableError: Spark Connect {connect_server.url} unreachable: "
            f"cannot connect to 127.0.0.1:{connect_server.port}: Connection refused") in lost[1:], lost
    done = timeline(root)
    rollbacks = done.completed((Action.ROLLBACK,))
    assert [done.read_commit_metadata(r)["commitsRollback"] for r in rollbacks] == [[t]]
    assert hudi_rs_rows(root) == rows


def test_sigterm_while_a_session_start_hangs_exits_within_the_grace_period(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = pending_compaction_table(root)
    silent = SilentServer()
    port = free_port()
    # the start would wait 120 s for the handshake: SIGTERM comes first
    proc = hoodied("run", "--config", str(_config(tmp_path, [root], f"sc://127.0.0.1:{silent.port}", port,
                                                   start_timeout=120)))
    try:
        def starting() -> bool:
            status = _status(port)
            return status is not None and status["tables"][0]["running"] is not None

        wait_for("the compaction job waiting for its session", starting, 60, (proc,))
        time.sleep(1)
        code, seconds, err = _terminate_timed(proc)
    finally:
        silent.close()
    assert code == 0, err[-3000:]
    assert seconds < GRACE_S + 2, seconds
    assert _state(root, t) is State.REQUESTED


def test_sigterm_while_retries_back_off_exits_at_once(tmp_path: Path) -> None:
    root = tmp_path / "t"
    pending_compaction_table(root)
    port = free_port()
    closed = free_port()
    proc = hoodied("run", "--config", str(_config(tmp_path, [root], f"sc://127.0.0.1:{closed}", port)))
    wait_for("compaction refused for want of the engine", lambda: _outages(port) > MAX_ATTEMPTS, 60, (proc,))
    code, seconds, err = _terminate_timed(proc)
    assert code == 0, err[-3000:]
    assert seconds < GRACE_S + 2, seconds
    logged = events(err)
    assert not [e for e in logged if str(e.get("event", "")).startswith("table quarantined")]
    assert len([e for e in logged if str(e.get("event", "")).startswith("Spark engine unavailable")]) == 1


def test_sigterm_while_a_job_waits_on_a_killed_server_exits_within_the_grace_period(
    tmp_path: Path, connect_server: ConnectServer,
) -> None:
    root = tmp_path / "t"
    t = pending_compaction_table(root)
    ready = tmp_path / "task-paused"
    connect_server.start({"HOODIED_TEST_PAUSE_AT": "task:0", "HOODIED_TEST_PAUSE_READY": str(ready),
                          "HOODIED_TEST_PAUSE_S": "300"})
    port = free_port()
    # the client would retry the lost server for 120 s: SIGTERM comes first
    proc = hoodied("run", "--config", str(_config(tmp_path, [root], connect_server.url, port, retry=120)))
    wait_for("a task of the compaction running on the server", ready.exists, 180, (proc,))
    connect_server.kill()
    time.sleep(1)
    code, seconds, err = _terminate_timed(proc)
    assert code == 0, err[-3000:]
    assert seconds < GRACE_S + 2, seconds
    assert _state(root, t) is State.INFLIGHT  # recovered by the next run
