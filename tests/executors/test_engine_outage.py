"""``hoodied execute`` with a Spark engine that is not there: one line, exit code 6, the table untouched.

Real CLI processes on a table with a pending compaction (``tests.helpers.mor_tables``):

- ``--spark sc://127.0.0.1:PORT`` on a closed port: the TCP check refuses it at once;
- a port that accepts connections and never answers (a server stuck in its handshake): the
  session start gives up after ``--spark-start-timeout``.

Both print one line on standard error naming the engine and the cause, exit 6 (the outage code
``StorageError`` has too), well within the timeout, and leave every file of the table bit for
bit as it was (the session starts before the instant is touched). ``connect_address`` and
``engine_error`` are checked on their own too.
"""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from py4j.protocol import Py4JNetworkError  # type: ignore[import-untyped]

from hoodied.executors.engine import CONNECT_DEFAULT_PORT, connect_address, engine_error, is_engine_lost
from hoodied.hoodie.errors import EngineUnavailableError
from hoodied.service.cli.main import TROUBLESHOOTING_URL
from tests.helpers.mor_tables import pending_compaction_table
from tests.helpers.redis_server import free_port

PROJECT = Path(__file__).resolve().parents[2]
EXIT_OUTAGE = 6


def _files(root: Path) -> dict[str, str]:
    """Every file and folder of the table: relative path -> content digest ('' for a folder)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
            for p in sorted(root.rglob("*"))}


TOKEN = "S3CRET-connect-token"


def _execute(root: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "hoodied.service.cli", "execute", str(root), "--clock-skew-ms", "5", *args],
        cwd=PROJECT, capture_output=True, text=True, timeout=120,
    )
    return proc, time.monotonic() - started


def test_execute_on_a_closed_port_prints_one_line_and_exits_6(tmp_path: Path) -> None:
    root = tmp_path / "t"
    pending_compaction_table(root)
    before = _files(root)
    port = free_port()
    # the server's token never shows, in the message as anywhere else
    proc, seconds = _execute(root, "--spark", f"sc://127.0.0.1:{port}/;token={TOKEN}",
                             "--spark-start-timeout", "10")
    assert proc.returncode == EXIT_OUTAGE, proc.stderr
    assert proc.stderr.splitlines() == [
        f"hoodied: error: Spark Connect sc://127.0.0.1:{port}/;token=*** unreachable: "
        f"cannot connect to 127.0.0.1:{port}: Connection refused"
        f" (see: {TROUBLESHOOTING_URL}#engineunavailableerror)"
    ]
    assert proc.stdout == ""
    assert seconds < 10, seconds
    assert _files(root) == before


def test_execute_against_a_server_that_never_answers_gives_up_after_the_start_timeout(tmp_path: Path) -> None:
    root = tmp_path / "t"
    pending_compaction_table(root)
    before = _files(root)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    port = int(listener.getsockname()[1])
    try:
        proc, seconds = _execute(root, "--spark", f"sc://127.0.0.1:{port}/;token={TOKEN}",
                                 "--spark-start-timeout", "3")
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert held, "the command never connected"
    assert proc.returncode == EXIT_OUTAGE, proc.stderr
    assert proc.stderr.splitlines()[-1] == \
        f"hoodied: error: Spark Connect sc://127.0.0.1:{port}/;token=***: session start: no answer in 3 s" \
        f" (see: {TROUBLESHOOTING_URL}#engineunavailableerror)"
    assert TOKEN not in proc.stderr + proc.stdout
    assert 3 <= seconds < 3 + 10, seconds  # the start timeout, then the process exits at once
    assert _files(root) == before


def test_connect_addresses_and_engine_errors() -> None:
    assert connect_address("sc://127.0.0.1:15010") == ("127.0.0.1", 15010)
    assert connect_address("sc://spark-connect/;token=abc") == ("spark-connect", CONNECT_DEFAULT_PORT)
    assert connect_address("sc://[::1]:9000/;use_ssl=true") == ("::1", 9000)
    with pytest.raises(ValueError):
        connect_address("sc://:15002")
    lost = Py4JNetworkError("Answer from Java side is empty")
    assert is_engine_lost(lost)
    err = engine_error(lost, "local[2]")
    assert isinstance(err, EngineUnavailableError)
    assert str(err) == "Spark engine local[2] unavailable: Answer from Java side is empty"
    assert not is_engine_lost(ValueError("a task failed: HoodieFormatError: bad block"))
    # a refused socket alone may be anything's (a lock service, an object store): not the engine's
    assert not is_engine_lost(ConnectionRefusedError(111, "Connection refused"))
