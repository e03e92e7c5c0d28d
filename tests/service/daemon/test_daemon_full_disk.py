"""A disk that fills up or turns read-only is an outage: waited out, never a quarantine.

The table lives on a real tmpfs mounted for the test (``mount`` as root, else ``sudo -n``). The
daemon (real ``hoodied run``, real Spark compaction, local lock) meets the disk full before the
compaction starts, full again in the middle of its attempt (paused after its inflight transition
while the test fills the disk), then read-only. Each time its jobs end as ``storage_unavailable``
(or ``lock_unavailable``, when the local lock's files on that disk cannot be written), far more
often than ``retry.max_attempts``, and the table is never quarantined; once the disk is
writable with space again the failed attempt is rolled back and the compaction completes by itself,
no ``.tmp`` file is left anywhere in the table, and hudi-rs reads the same rows.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hoodied.hoodie.timeline.instant import Action, State
from tests.helpers.daemon_procs import events, get_or_none, running, service_instants, stop, wait_for
from tests.helpers.mor_tables import hudi_rs_rows, pending_compaction_table
from tests.helpers.redis_server import free_port

MAX_ATTEMPTS = 2
#: A full or read-only disk: the storage failed, or the local lock kept on that disk could not be had.
OUTAGES = ("storage_unavailable", "lock_unavailable")
DISK_MB = 48


def _mount(*args: str) -> None:
    cmd = ["mount", *args] if os.geteuid() == 0 else ["sudo", "-n", "mount", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"this test mounts a tmpfs and needs root or passwordless sudo: {' '.join(cmd)}: "
                    f"{done.stderr.strip()}")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of ``DISK_MB`` MB, unmounted at the end."""
    where = tmp_path / "disk"
    where.mkdir()
    _mount("-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(where))
    try:
        yield where
    finally:
        cmd = ["umount", "-l", str(where)]
        subprocess.run(cmd if os.geteuid() == 0 else ["sudo", "-n", *cmd], capture_output=True)


def _fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte (the filler grows until the kernel says ENOSPC)."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 20)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, chunk[:size])
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def _status(port: int) -> dict[str, Any]:
    got = get_or_none(port, "/status")
    assert got is not None and got[0] == 200, got
    doc: dict[str, Any] = json.loads(got[1])
    assert doc["tables_quarantined"] == 0, doc
    return doc


def _outages(port: int) -> float:
    """Jobs ended as an outage so far (the counters, never capped); the table is not quarantined
    (checked at every look); 0 until the daemon answers."""
    got = get_or_none(port, "/metrics")
    if got is None:
        return 0
    _status(port)
    return sum(float(line.rsplit(" ", 1)[1]) for line in got[1].splitlines()
               if line.startswith("hoodied_jobs_total{") and any(f'outcome="{o}"' in line for o in OUTAGES))


def _tmp_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp" in p.name)


def test_a_full_then_read_only_disk_is_waited_out_and_the_compaction_completes(
    tmp_path: Path, disk: Path
) -> None:
    root = disk / "table"
    t = pending_compaction_table(root)
    rows = hudi_rs_rows(root)
    port = free_port()
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "tables": [str(root)],
        "defaults": {"services": {"clean": {"schedule": False}, "compaction": {"schedule": False}}},
        "lock": "local",
        "clock_skew_ms": 5,
        "poll_interval_seconds": 0.2,
        "heartbeat": {"interval_ms": 500, "tolerable_misses": 2},
        "retry": {"max_attempts": MAX_ATTEMPTS, "backoff_seconds": 0.05, "backoff_max_seconds": 0.3},
        "spark": {"master": "local[1]"},
        "log": {"format": "json"},
        "http": f"127.0.0.1:{port}",
    }))
    ready, resume = tmp_path / "paused", tmp_path / "resume"
    filler = _fill(disk)  # full before the daemon even starts
    with running("run", "--config", str(config), env={
        "HOODIED_TEST_PAUSE_AT": "inflight", "HOODIED_TEST_PAUSE_READY": str(ready),
        "HOODIED_TEST_PAUSE_UNTIL": str(resume),
    }) as proc:
        wait_for("jobs fail on the full disk", lambda: _outages(port) > MAX_ATTEMPTS, 120, (proc,))
        assert not ready.exists()  # nothing got as far as an attempt
        filler.unlink()
        wait_for("the compaction's attempt starts", ready.exists, 120, (proc,))
        before = _outages(port)
        _fill(disk)  # full again in the middle of the attempt, before its tasks write
        resume.write_text("")
        wait_for("the attempt fails on the full disk", lambda: _outages(port) > before + MAX_ATTEMPTS, 120,
                 (proc,))
        (disk / "filler").unlink()
        _mount("-o", "remount,ro", str(disk))
        before = _outages(port)
        wait_for("jobs fail on the read-only disk", lambda: _outages(port) > before + MAX_ATTEMPTS, 120,
                 (proc,))
        _mount("-o", "remount,rw", str(disk))

        def completed() -> bool:
            return [i.state for i in service_instants(root, Action.COMPACTION) if i.requested_time == t] \
                == [State.COMPLETED]

        wait_for("the compaction completes by itself", completed, 180, (proc,))

        def succeeded() -> bool:  # recorded once the job has returned, just after the instant completed
            return bool(_status(port)["tables"][0]["last_outcomes"][0]["outcome"] == "success")

        wait_for("the job's success is recorded", succeeded, 30, (proc,))
        code, err = stop(proc, timeout=60)
    assert code == 0, err[-3000:]
    ended = [e for e in events(err) if e.get("event") == "job ended"]
    # the attempt itself met the full disk in its Spark tasks: an outage too, never a failure
    assert {e["outcome"] for e in ended} <= {*OUTAGES, "success"}, [(e["outcome"], e["message"][-200:])
                                                                    for e in ended]
    assert [e["outcome"] for e in ended].count("success") == 1
    assert not [e for e in events(err) if e.get("event") == "table quarantined"]
    assert _tmp_files(root) == []
    assert hudi_rs_rows(root) == rows
    shutil.rmtree(root)
