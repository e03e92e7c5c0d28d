"""A storage outage is waited out, never a reason to quarantine a table (real daemon, real S3 server).

Two tables with a clean due sit in a moto bucket that the daemon reaches through a fault-injecting
proxy (``tests.helpers.fault_proxy``), with the client's own retries off so every fault reaches
hoodied. First every request is throttled (``503 SlowDown``): each poll fails, more times than
``retry.max_attempts``; then only the planners' writes of ``.clean.requested`` are throttled: each
plan fails as ``storage_unavailable``, again more times than ``max_attempts``. Neither quarantines
a table; once the proxy forwards everything, both cleans are planned and executed, and the daemon
exits 0 on SIGTERM. A disk that fills up or turns read-only is classified the same way
(``is_storage_outage``), while a file gone from under a job still counts as a failure.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore
import pytest
import yaml
from obstore.store import S3Store

from hoodied.hoodie.errors import FileAlreadyExistsError, StorageError, StorageFileNotFoundError
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.daemon.jobs import is_storage_outage
from tests.helpers.daemon_procs import events, get_or_none, running, stop, wait_for
from tests.helpers.fault_proxy import SLOW_DOWN, Fault, FaultProxy, fault_proxy  # noqa: F401  (fixture)
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.object_servers import MotoServer, moto_server, s3_env, upload_tree  # noqa: F401  (fixtures)
from tests.helpers.redis_server import free_port

TABLE = "cow/v9_txns_simple_nometa"
MAX_ATTEMPTS = 2



def _cleans(uri: str) -> list[str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    store = S3Store.from_url(f"s3://{bucket}")
    names = [o["path"] for batch in obstore.list(store, prefix=f"{prefix}/.hoodie/timeline/") for o in batch]
    return sorted(n.rsplit("/", 1)[-1] for n in names if n.endswith(".clean"))


def _metric(page: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in page.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture
def tables(s3_env: MotoServer, tmp_path: Path) -> Iterator[list[str]]:  # noqa: F811
    bucket = s3_env.new_bucket()
    uris = []
    for n in range(2):
        upload_tree(unzip_table(require_fixture(TABLE), tmp_path / f"t{n}"), bucket, f"lake/t{n}")
        uris.append(f"s3://{bucket}/lake/t{n}")
    yield uris


def test_throttled_polls_and_writes_are_waited_out_without_quarantine(
    tables: list[str], fault_proxy: FaultProxy, tmp_path: Path  # noqa: F811
) -> None:
    port = free_port()
    config = tmp_path / "hoodied.yaml"
    config.write_text(yaml.safe_dump({
        "tables": tables,
        "defaults": {"services": {"clean": {"commits_retained": 2}, "compaction": {"schedule": False}}},
        "clock_skew_ms": 5, "poll_interval_seconds": 0.2,
        "retry": {"max_attempts": MAX_ATTEMPTS, "backoff_seconds": 0.05, "backoff_max_seconds": 0.2},
        "object_store": {"max_retries": 0, "retry_timeout_seconds": 1},
        "log": {"format": "json"}, "http": f"127.0.0.1:{port}",
    }))
    fault_proxy.fault = SLOW_DOWN
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    env["AWS_ENDPOINT_URL"] = fault_proxy.endpoint
    with running("run", "--config", str(config), env=env) as proc:
        def status() -> dict[str, Any] | None:
            got = get_or_none(port, "/status")
            return yaml.safe_load(got[1]) if got is not None and got[0] == 200 else None

        def polls_failed() -> bool:
            s = status()
            return s is not None and all(t["poll_failures"] > MAX_ATTEMPTS for t in s["tables"])

        wait_for("polls fail beyond max_attempts", polls_failed, 60, (proc,))
        assert all(t["quarantined"] is None for t in status()["tables"])  # type: ignore[index]

        # polls go through; every plan's write of its requested clean is throttled
        fault_proxy.fault = Fault(503, "SlowDown", frozenset({"PUT"}), ".clean.requested")

        def plans_throttled() -> bool:
            got = get_or_none(port, "/metrics")
            return got is not None and all(
                _metric(got[1], "hoodied_plans_total", table=uri, action="clean",
                        outcome="storage_unavailable") > MAX_ATTEMPTS for uri in tables)

        wait_for("plans fail on the storage beyond max_attempts", plans_throttled, 60, (proc,))
        assert all(t["quarantined"] is None for t in status()["tables"])  # type: ignore[index]
        assert not any(_cleans(uri) for uri in tables)

        fault_proxy.fault = None
        wait_for("both cleans done", lambda: all(_cleans(uri) for uri in tables), 120, (proc,))
        code, err = stop(proc, 60)
    assert code == 0, err[-3000:]
    logged = events(err)
    assert not [e for e in logged if str(e.get("event", "")).startswith("table quarantined")]
    assert fault_proxy.faulted() > 2 * MAX_ATTEMPTS
    ended = [(e["kind"], e["outcome"]) for e in logged if e.get("event") == "job ended"]
    assert ("plan", "storage_unavailable") in ended and ("execute", "success") in ended, ended
    assert re.search(r"SlowDown|503", " ".join(str(e.get("message", "")) for e in logged))


def test_storage_outages_are_told_apart_from_broken_tables(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    with pytest.raises(StorageFileNotFoundError) as gone:
        storage.read("nope")
    assert not is_storage_outage(gone.value)  # a file gone under a job: a failure, retried, then quarantine
    assert not is_storage_outage(FileAlreadyExistsError("x: already exists"))
    assert is_storage_outage(StorageError("s3://b/k: get failed on bucket 'b': 503 SlowDown"))
    assert is_storage_outage(OSError(errno.ENOSPC, "No space left on device"))
    assert is_storage_outage(OSError(errno.EROFS, "Read-only file system"))
    assert is_storage_outage(OSError(errno.EACCES, "Permission denied"))  # as a 403 from a bucket
    assert not is_storage_outage(OSError(errno.EINVAL, "Invalid argument"))
