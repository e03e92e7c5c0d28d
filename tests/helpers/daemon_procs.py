"""Helpers for the daemon tests that run real ``hoodied run`` processes and look at real tables.

``hoodied(...)`` starts the command line as a subprocess of this checkout (``HOODIED_TEST_*``
hooks of the calling environment are not inherited, so each test sets its own; the daemon starts no
Spark session at start-up, ``SPARK_AHEAD_OFF``, unless the test's ``env`` turns it on); ``running(...)``
starts it for the body of a ``with`` and kills what is left of it on the way out; ``events``
parses its JSON log lines; ``replicas_once`` runs replicas of ``run --once`` side by side;
``get`` asks its HTTP endpoint; ``wait_for`` polls a condition
with a deadline; ``timeline`` / ``service_instants`` read a table's timeline as it is on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant

PROJECT = Path(__file__).resolve().parents[2]

#: ``spark.start_at_startup`` off: most daemons of the tests never run a Spark job, and a JVM started
#: ahead in each would cost every one of them Spark's start-up on a small CI machine. The environment
#: beats a settings file: a test that wants the start ahead passes ``HOODIED_SPARK__START_AT_STARTUP``.
SPARK_AHEAD_OFF = {"HOODIED_SPARK__START_AT_STARTUP": "false"}


def hoodied(
    *args: str, env: dict[str, str] | None = None, new_session: bool = False
) -> subprocess.Popen[str]:
    """``hoodied ARGS`` (``new_session``: in its own process group, with its Spark JVM and workers,
    so a test can stop or kill the whole group)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HOODIED_")}
    full_env["PYTHONPATH"] = str(PROJECT)
    full_env.update(SPARK_AHEAD_OFF)
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "hoodied.service.cli", *args],
        cwd=PROJECT, env=full_env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=new_session,
    )


@contextlib.contextmanager
def running(
    *args: str, env: dict[str, str] | None = None, new_session: bool = False, timeout: float = 30
) -> Iterator[subprocess.Popen[str]]:
    """``hoodied(ARGS)`` for the body of a ``with``. On the way out, a process still running (the body
    failed, or did not stop it) is killed, with its process group under ``new_session``, and reaped
    with its pipes closed within ``timeout`` seconds. A test that wants the exit code or standard
    error stops the process in the body (``stop``, ``communicate``); what it read stays with it."""
    proc = hoodied(*args, env=env, new_session=new_session)
    try:
        yield proc
    finally:
        _end(proc, group=new_session, timeout=timeout)


def _end(proc: subprocess.Popen[str], *, group: bool, timeout: float) -> None:
    if proc.poll() is None:
        if group:
            with contextlib.suppress(ProcessLookupError):  # gone meanwhile
                os.killpg(proc.pid, signal.SIGKILL)  # its Spark JVM and Python workers too
        else:
            proc.kill()
    try:
        proc.communicate(timeout=timeout)  # after the body's own, returns at once
    except subprocess.TimeoutExpired:
        # a child of the daemon outside its group still holds the pipes: stop reading them
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait(timeout)


def events(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def get_or_none(port: int, path: str) -> tuple[int, str] | None:
    try:
        return get(port, path)
    except OSError:
        return None


def wait_for(
    what: str, check: Callable[[], Any], timeout: float, procs: tuple[subprocess.Popen[str], ...] = ()
) -> Any:
    """``check()``'s first truthy value; fails naming ``what`` after ``timeout`` seconds or when one
    of ``procs`` exits (with the end of its standard error)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{what}: the daemon exited with {p.returncode}: "
                                     f"{p.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)


def stop(proc: subprocess.Popen[str], timeout: float = 20) -> tuple[int, str]:
    """SIGTERM, then the exit code and standard error (SIGKILL if it does not exit in time)."""
    if proc.poll() is None:
        proc.terminate()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


#: The job outcomes of replicas sharing work without faults.
CLEAN_RUN_OUTCOMES = frozenset({"planned", "nothing_due", "success", "claimed", "already_done"})


def replicas_once(
    config: Path, count: int, timeout: float
) -> tuple[list[dict[str, Any]], Counter[tuple[str, str]]]:
    """``count`` replicas of ``hoodied run --config CONFIG --once`` at once; each must exit 0, every
    job end with an outcome of ``CLEAN_RUN_OUTCOMES`` and no instant succeed twice. Returns the
    ``job ended`` events of all replicas and the successful executions by (table, instant)."""
    replicas = [hoodied("run", "--config", str(config), "--once") for _ in range(count)]
    results = [p.communicate(timeout=timeout) for p in replicas]
    for p, (_, err) in zip(replicas, results, strict=True):
        assert p.returncode == 0, err[-4000:]
    ended = [e for _, err in results for e in events(err) if e.get("event") == "job ended"]
    assert not {e["outcome"] for e in ended} - CLEAN_RUN_OUTCOMES
    executed = Counter((e["table"], e["instant"]) for e in ended
                       if e["kind"] == "execute" and e["outcome"] == "success")
    assert set(executed.values()) <= {1}, [k for k, n in executed.items() if n > 1]
    return ended, executed


def timeline(root: Path) -> Timeline:
    storage = LocalStorage(str(root))
    return Timeline.load(storage, load_table_config(storage))


def service_instants(root: Path, action: Action) -> list[Instant]:
    return [i for i in timeline(root).instants if i.action is action]
