"""A replica's clock that jumps ahead while a job runs: nothing is written with the jumped clock, and
the instant completes, with a time of the healthy clock, once the clock is back in bounds.

A real daemon (a subprocess sharing a real Redis, whose ``TIME`` is the reference) runs a clean; the
clean is held at its crash point ``deletes-done`` (``hoodie.crashpoints``: just before the table lock
is taken for its completion) while libfaketime moves the daemon's clock ahead, then let go. The
poll sees the skew but the job is already past its last look at the daemon's verdict: only the
clock check right before its completion time (layout 2) or its completed file (layout 1) stops it.

The jump is 5 s, not the 30 s of an unsynchronised host: libfaketime moves the monotonic clock
with the wall clock, so stepping back into bounds stalls the daemon's timers by the jump's size.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from hoodied.hoodie.demo.writer import TableSpec, create_table
from hoodied.hoodie.heartbeat import heartbeat_path
from hoodied.hoodie.properties import TableType, load_table_config
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action, State, instant_time_to_epoch_ms
from tests.helpers.daemon_procs import events, get, get_or_none, running, stop, timeline, wait_for
from tests.helpers.mor_tables import SCHEMA
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)
from tests.service.daemon.test_clock_skewed_replicas import FAKETIME_LIB, _rows, _tree
from tests.service.daemon.test_clock_skewed_replicas import SETTINGS as SKEWED_SETTINGS

#: A clean keeping one commit is due on the table ``_written_table`` writes.
SETTINGS: dict[str, Any] = {
    **SKEWED_SETTINGS,
    "defaults": {"services": {"clean": {"commits_retained": 1}, "compaction": {"schedule": False}}},
}


def _ready(port: int) -> int:
    return (get_or_none(port, "/readyz") or (0, ""))[0]


def _outcomes(port: int) -> list[dict[str, Any]]:
    doc = json.loads(get(port, "/status")[1])
    return [o for t in doc["tables"] for o in t["last_outcomes"]]


def _written_table(root: Path, version: int) -> None:
    """A COW table of three commits, so a clean keeping one is due."""
    spec = TableSpec("trips", SCHEMA, "id", "city", "ts", TableType.COPY_ON_WRITE, version)
    writer = create_table(LocalStorage(str(root)), spec, max_file_rows=40)
    writer.insert(_rows(range(120), 1))
    for n in (2, 3):
        writer.upsert(_rows(range(0, 120, 3), n))


@pytest.mark.parametrize("version", [9, 6])
def test_a_clock_jump_mid_job_writes_nothing_and_the_instant_completes_once_back_in_bounds(
    version: int, tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    if not os.path.exists(FAKETIME_LIB):
        pytest.fail(f"{FAKETIME_LIB} is missing (tests/run.sh installs Debian's faketime package)")
    root = tmp_path / "lake" / "t0"
    _written_table(root, version)
    existing = {i.requested_time for i in timeline(root).instants}
    offset_file, ready, resume = tmp_path / "faketime", tmp_path / "paused", tmp_path / "resume"
    offset_file.write_text("+0s\n")
    env = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_TIMESTAMP_FILE": str(offset_file),
           "FAKETIME_CACHE_DURATION": "1", "HOODIED_TEST_PAUSE_AT": "deletes-done",
           "HOODIED_TEST_PAUSE_READY": str(ready), "HOODIED_TEST_PAUSE_UNTIL": str(resume)}
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({**SETTINGS, "tables": [str(root)], "lock": redis_server.url}))
    port = free_port()
    storage = LocalStorage(str(root))
    tz = load_table_config(storage).tzinfo
    with running("run", "--config", str(config), "--http", f"127.0.0.1:{port}", env=env) as proc:
        wait_for("the clean reaches its last step before completing", ready.exists, 60, (proc,))
        (clean,) = [i for i in timeline(root).instants if i.requested_time not in existing]
        assert clean.action is Action.CLEAN and clean.state is State.INFLIGHT, clean
        t = clean.requested_time
        assert _ready(port) == 200

        offset_file.write_text("+5s\n")
        wait_for("the daemon sees its clock ahead", lambda: _ready(port) == 503, 60, (proc,))
        resume.touch()
        wait_for("the job is handed back", lambda: any(
            o["instant"] == t and o["outcome"] == "handed_back" for o in _outcomes(port)), 60, (proc,))
        # nothing written with the jumped clock, and nothing more while it stays ahead
        untouched = _tree(root)
        (clean,) = [i for i in timeline(root).instants if i.requested_time not in existing]
        assert clean.state is State.INFLIGHT, clean
        assert not (root / heartbeat_path(t)).exists()  # handed back: another attempt may take it at once
        time.sleep(2)
        assert _tree(root) == untouched

        back_from = time.time()
        offset_file.write_text("+0s\n")

        def completed() -> bool:
            inst = timeline(root).get(t)
            return inst is not None and inst.state is State.COMPLETED

        wait_for("the clean completes once the clock is back", completed, 90, (proc,))
        back_to = time.time()
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    logs = events(err)
    (handed,) = [e for e in logs if e.get("event") == "job ended" and e.get("outcome") == "handed_back"]
    assert "ClockOutOfBoundsError: clock skewed: clock offset +" in handed["message"], handed
    assert [e.get("outcome") for e in logs if e.get("event") == "job ended" and e.get("kind") == "execute"] \
        == ["handed_back", "success"]
    # every new time (requested and completion) comes from an in-bounds clock
    for inst in timeline(root).instants:
        if inst.requested_time in existing:
            continue
        assert inst.state is State.COMPLETED, inst
        assert instant_time_to_epoch_ms(inst.requested_time, tz) / 1000 < back_from, inst
        if inst.completion_time is not None:  # layout 2: in the completed file's name
            done = instant_time_to_epoch_ms(inst.completion_time, tz) / 1000
            assert back_from - 1 <= done <= back_to + 1, inst
