"""A daemon replica frozen past its leases (SIGSTOP) while another takes its compaction over.

Real ``hoodied run`` replicas sharing a real Redis. Replica A runs a compaction and is stopped,
with its Spark JVM and workers, after its tasks wrote every file and before its commit. Its
instant lease and heartbeat lapse; replica B takes the instant over: it rolls A's attempt back,
runs the compaction again and completes it. Then A is continued. A's job must end as
``claimed`` (the attempt was taken over: ``hoodie.fence``), not as a failure, and must change
nothing: the compaction completed once with B's files only, the rows read by hudi-rs are those
of before, and neither replica quarantines the table.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from hoodied.hoodie.fence import attempt_path
from hoodied.hoodie.locks import InProcessLock
from hoodied.hoodie.storage import LocalStorage
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.planners.compaction import schedule_compaction
from tests.helpers.daemon_procs import (
    events,
    get_or_none,
    hoodied,
    service_instants,
    stop,
    timeline,
    wait_for,
)
from tests.helpers.mor_tables import hudi_rs_rows, written_mor_table
from tests.helpers.redis_server import RedisServer, free_port, redis_server  # noqa: F401  (fixture)
from tests.service.daemon.test_daemon_replicas import QUICK, _compaction_outputs_once, _config, _no_heartbeats


def _status(port: int) -> dict[str, Any] | None:
    got = get_or_none(port, "/status")
    return json.loads(got[1]) if got is not None and got[0] == 200 else None


def test_a_replica_paused_past_its_lease_writes_nothing_after_the_takeover(
    tmp_path: Path, redis_server: RedisServer  # noqa: F811
) -> None:
    root = tmp_path / "mor"
    written_mor_table(root)
    storage = LocalStorage(str(root))
    inst, _ = schedule_compaction(storage, InProcessLock(storage.base_uri), time_settings=QUICK)
    assert inst is not None
    t = inst.requested_time
    rows = hudi_rs_rows(root)
    config = _config(tmp_path / "hoodied.yaml", tables=[str(root)],
                     lock={"url": redis_server.url, "instant_lease_ms": 3000},
                     defaults={"services": {"clean": {"schedule": False}, "compaction": {"schedule": False}}})
    ready, go = tmp_path / "paused", tmp_path / "go"
    port_a, port_b = free_port(), free_port()
    a = hoodied("run", "--config", str(config), "--http", f"127.0.0.1:{port_a}", new_session=True, env={
        "HOODIED_TEST_PAUSE_AT": "written", "HOODIED_TEST_PAUSE_READY": str(ready),
        "HOODIED_TEST_PAUSE_UNTIL": str(go),
    })
    b = None
    try:
        wait_for("replica A's tasks wrote every file", ready.exists, 180, (a,))
        os.killpg(a.pid, signal.SIGSTOP)  # a frozen machine: driver, JVM and Python workers
        b = hoodied("run", "--config", str(config), "--http", f"127.0.0.1:{port_b}")
        wait_for("replica B completes the compaction",
                 lambda: service_instants(root, Action.COMPACTION)[0].state is State.COMPLETED, 240, (b,))
        go.write_text("")
        os.killpg(a.pid, signal.SIGCONT)

        def a_gave_up() -> bool:
            doc = _status(port_a)
            return doc is not None and any(o["instant"] == t for tbl in doc["tables"]
                                           for o in tbl["last_outcomes"])

        wait_for("replica A ends its job", a_gave_up, 120, (a,))
        status_a = _status(port_a)
        code_a, err_a = stop(a)
        code_b, err_b = stop(b)
        b = None
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGCONT)
            a.kill()
            a.communicate()
        if b is not None and b.poll() is None:
            b.kill()
            b.communicate()
    assert code_a == 0, err_a[-3000:]
    assert code_b == 0, err_b[-3000:]
    ended_a = [e for e in events(err_a) if e.get("event") == "job ended" and e.get("instant") == t]
    assert [e["outcome"] for e in ended_a] == ["claimed"], ended_a
    assert "taken over" in ended_a[0]["message"]
    assert status_a is not None and status_a["tables_quarantined"] == 0
    ended_b = [e["outcome"] for e in events(err_b) if e.get("event") == "job ended" and e.get("instant") == t]
    assert ended_b[-1] == "success" and ended_b.count("success") == 1, ended_b

    (final,) = service_instants(root, Action.COMPACTION)
    assert final.state is State.COMPLETED
    assert len(list((root / ".hoodie" / "timeline").glob(f"{t}_*"))) == 1
    rollbacks = service_instants(root, Action.ROLLBACK)
    assert [timeline(root).read_commit_metadata(r)["commitsRollback"] for r in rollbacks] == [[t]]
    _compaction_outputs_once(root, [final])  # one base file per file group: B's
    assert hudi_rs_rows(root) == rows
    assert _no_heartbeats(root)
    assert not (root / attempt_path(t)).exists()
