"""The daemon rolls back failed data writes before its cleans, only on tables configured LAZY.

A real ``hoodied run`` process watches two copies of one fixture table, each with a failed write
(an inflight commit, its files and markers, an expired heartbeat) left as Hudi leaves it. The
policy of one says ``failed_writes_policy: LAZY``: its clean rolls the failed write back first
(Hudi's ``BaseHoodieTableServiceClient.clean``), and ``/status`` and
``hoodied_failed_writes_rolled_back_total`` count it. The other keeps Hudi's default (EAGER): its
failed write is left to its writer, and its counter stays at 0.
"""

from __future__ import annotations

import json
from pathlib import Path

from hoodied.hoodie.timeline.instant import Action, State
from tests.executors.test_failed_writes import check_rolled_back, fail_a_write
from tests.helpers.daemon_procs import get, running, service_instants, stop, timeline, wait_for
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows
from tests.helpers.redis_server import free_port
from tests.service.daemon.test_daemon_replicas import _config

FIXTURE = "cow/v9_txns_simple_nometa"


def test_lazy_tables_have_failed_writes_rolled_back_before_their_clean(tmp_path: Path) -> None:
    lazy = unzip_table(require_fixture(FIXTURE), tmp_path / "lazy")
    eager = unzip_table(require_fixture(FIXTURE), tmp_path / "eager")
    rows = hudi_rs_rows(lazy)
    t, action, written = fail_a_write(lazy)
    e, _, _ = fail_a_write(eager)
    port = free_port()
    config = _config(tmp_path / "hoodied.yaml", http=f"127.0.0.1:{port}", tables=[
        {"path": str(lazy), "policy": {"services": {"clean": {"failed_writes_policy": "LAZY"}}}},
        str(eager),
    ])
    with running("run", "--config", str(config)) as proc:
        def cleaned(root: Path) -> bool:
            return any(i.state is State.COMPLETED for i in service_instants(root, Action.CLEAN))

        wait_for("both tables cleaned", lambda: cleaned(lazy) and cleaned(eager), 120, (proc,))
        status = json.loads(get(port, "/status")[1])
        metrics = get(port, "/metrics")[1]
        code, err = stop(proc)
    assert code == 0, err[-3000:]
    counted = {Path(tbl["path"]): tbl["failed_writes_rolled_back"] for tbl in status["tables"]}
    assert counted == {lazy: 1, eager: 0}
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in metrics.splitlines()
               if line.startswith("hoodied_failed_writes_rolled_back_total{")}
    assert sorted(samples.values()) == [0.0, 1.0], samples
    # the rollback came before the clean, and left what Hudi leaves
    r = check_rolled_back(lazy, tmp_path, t, action, written, rows)
    (clean,) = [i for i in service_instants(lazy, Action.CLEAN) if i.state is State.COMPLETED]
    assert r < clean.requested_time
    # EAGER: the failed write is its writer's to roll back
    pending = timeline(eager).get(e)
    assert pending is not None and pending.state is State.INFLIGHT
