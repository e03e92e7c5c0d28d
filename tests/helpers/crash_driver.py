"""A driver process killed with SIGKILL at a crash point (``hoodie.crashpoints``), for the kill -9 tests.

``start_paused`` runs a Python snippet in its own process group with the crash-point environment
set and waits until it reaches the point (or fails the test with its stderr), where it sleeps or,
with ``resume``, waits for a file that lets it go on; ``kill_group``
SIGKILLs the driver and waits for its Spark JVM and Python workers to go with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]

__all__ = ["kill_group", "start_paused"]


def start_paused(
    code: str, args: list[str], point: str, ready: Path, timeout: float = 180, *, resume: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``python -c code *args`` paused at ``point``; returns once it is there. With ``resume``
    it waits there until that file exists, then goes on (``HOODIED_TEST_PAUSE_UNTIL``)."""
    env = dict(os.environ, PYTHONPATH=str(PROJECT), HOODIED_TEST_PAUSE_AT=point,
               HOODIED_TEST_PAUSE_READY=str(ready), HOODIED_TEST_PAUSE_S="120")
    if resume is not None:
        env["HOODIED_TEST_PAUSE_UNTIL"] = str(resume)
    proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env, cwd=PROJECT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not ready.exists():
            if proc.poll() is not None:
                _, err = proc.communicate()
                pytest.fail(f"driver exited ({proc.returncode}) before {point}: {err.decode()[-3000:]}")
            assert time.monotonic() < deadline, f"driver never reached {point}"
            time.sleep(0.05)
    except BaseException:
        kill_group(proc)
        raise
    return proc


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver (unless it is gone); its process group (Spark JVM, Python workers) must be
    gone within 30 s."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
    else:
        proc.communicate(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the killed driver's own process group
    pytest.fail("the killed driver's Spark processes outlived it by 30 s")
