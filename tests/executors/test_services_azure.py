"""Table services on a table in Azure Blob storage (a real Azurite server), run through the command line.

A real Hudi fixture table (with a metadata table) is uploaded to a fresh container under ``az://``;
a compaction and then a clean are planned by ``hoodied schedule`` and run by ``hoodied execute``
with the standard Azure variables as the only credentials and a real Redis lock. hudi-rs reads
the table from Azurite (its ``azure_storage_*`` options), through the metadata table and through
a storage listing, before and after: the rows must not change. Credentials that may read but not
write (a read-only SAS token) make ``execute`` fail in one line naming the container and the
refused operation, with nothing written; a wrong account key fails the same way.

The module's Spark session gets the Azurite credentials for its Python workers through
``spark.executorEnv`` (a JVM started earlier in the same test process keeps its environment).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import obstore
import pytest
from click.testing import CliRunner, Result
from obstore.store import AzureStore

from hoodied.executors.engine import Session, spark_session
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.service.cli.main import EXIT_STORAGE, cli
from tests.helpers.fixtures import require_fixture, unzip_table
from tests.helpers.mor_tables import hudi_rs_rows, multiset
from tests.helpers.object_servers import (  # noqa: F401  (fixtures)
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    AzuriteServer,
    azure_env,
    azurite_server,
)
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401

SKEW = ["--clock-skew-ms", "5"]
HEARTBEAT = ["--heartbeat-interval-ms", "100"]
COMPACT_ALL = ["-o", "hoodie.compact.inline.max.delta.commits=1",
               "-o", "hoodie.compaction.strategy=UnBoundedCompactionStrategy"]
V8 = "mor/avro/v8_trips_8i3u1d"
WRONG_KEY = "d3Jvbmcta2V5LW5vdC10aGUtYWNjb3VudHM="


def _azure(server: AzuriteServer) -> dict[str, str]:
    return {"AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
            "AZURE_STORAGE_ENDPOINT": server.endpoint, "AZURE_ALLOW_HTTP": "true"}


@pytest.fixture(scope="module")
def spark(azurite_server: AzuriteServer) -> Iterator[Session]:  # noqa: F811
    conf = {f"spark.executorEnv.{k}": v for k, v in _azure(azurite_server).items()}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in _azure(azurite_server).items():
            mp.setenv(key, value)
        with spark_session("local[2]", conf) as session:
            yield session


def upload(root: Path, container: str, prefix: str = "t") -> str:
    """The local table ``root`` copied to ``az://container/prefix``; returns that URI."""
    store = AzureStore.from_url(f"az://{container}")
    for path in sorted(root.rglob("*")):
        if path.is_file():
            obstore.put(store, f"{prefix}/{path.relative_to(root).as_posix()}", path.read_bytes())
    return f"az://{container}/{prefix}"


def objects(container: str) -> dict[str, str]:
    store = AzureStore.from_url(f"az://{container}")
    return {o["path"]: str(o["e_tag"]) for batch in obstore.list(store) for o in batch}


def hudi_rs(uri: str, server: AzuriteServer, *, metadata: bool, read_optimized: bool = False) -> Counter[Any]:
    options = {"azure_storage_account_name": AZURITE_ACCOUNT, "azure_storage_account_key": AZURITE_KEY,
               "azure_storage_endpoint": server.endpoint, "allow_http": "true"}
    return hudi_rs_rows(uri, options=options, metadata=metadata, read_optimized=read_optimized)


def rows_both_ways(uri: str, server: AzuriteServer) -> Counter[Any]:
    listed = hudi_rs(uri, server, metadata=False)
    assert hudi_rs(uri, server, metadata=True) == listed
    assert multiset(HoodieTable.open(uri).to_arrow()) == listed
    assert sum(listed.values()) > 0
    return listed


def hoodied(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def schedule(uri: str, service: str, redis: RedisServer, *options: str) -> str:
    out = hoodied("schedule", service, uri, "--lock", redis.url, *options, *SKEW)
    assert out.exit_code == 0, out.output
    t, rest = out.stdout.split(" ", 1)
    assert rest.startswith(f"{service} requested"), out.stdout
    return t


def execute(uri: str, redis: RedisServer) -> Result:
    return hoodied("execute", uri, "--lock", redis.url, "--spark", "local[2]", *HEARTBEAT, *SKEW)


def timeline(uri: str) -> Timeline:
    storage = storage_for(uri)
    return Timeline.load(storage, load_table_config(storage))


def test_compaction_then_clean_on_azure(azure_env: AzuriteServer, redis_server: RedisServer,  # noqa: F811
                                        spark: Session, tmp_path: Path) -> None:
    uri = upload(unzip_table(require_fixture(V8), tmp_path / "local"), azure_env.new_container())
    before = rows_both_ways(uri, azure_env)
    t = schedule(uri, "compaction", redis_server, *COMPACT_ALL)
    done = execute(uri, redis_server)
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith(f"{t} compaction: "), done.stdout
    inst = timeline(uri).get(t)
    assert inst is not None and inst.is_completed and inst.action is Action.COMPACTION
    assert rows_both_ways(uri, azure_env) == before
    assert hudi_rs(uri, azure_env, metadata=False, read_optimized=True) == before
    files_before = {f.path for f in storage_for(uri).walk()}
    c = schedule(uri, "clean", redis_server, "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1")
    cleaned = execute(uri, redis_server)
    assert cleaned.exit_code == 0, cleaned.output
    assert cleaned.stdout.startswith(f"{c} clean: "), cleaned.stdout
    gone = files_before - {f.path for f in storage_for(uri).walk()}
    deleted = {p for p in gone if not p.startswith(".hoodie/")}
    assert deleted and not any(p.endswith(f"_{t}.parquet") for p in deleted)
    assert rows_both_ways(uri, azure_env) == before
    storage = storage_for(uri)
    for done_t in (t, c):
        assert not list(storage.walk(f".hoodie/.temp/{done_t}"))
        assert not storage.exists(f".hoodie/.heartbeat/{done_t}")


def one_error_line(result: Result) -> str:
    """The command's one error line (standard error also carries log lines; standard output is empty)."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("hoodied: error: ")]
    assert len(errors) == 1 and result.stderr.endswith(errors[0] + "\n") and not result.stdout, result.output
    return errors[0]


def _read_only_sas(container: str) -> str:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    return generate_container_sas(
        AZURITE_ACCOUNT, container, account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


def test_credentials_that_cannot_write_fail_in_one_line_and_write_nothing(
    azure_env: AzuriteServer, redis_server: RedisServer, spark: Session,  # noqa: F811
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    container = azure_env.new_container()
    uri = upload(unzip_table(require_fixture(V8), tmp_path / "local"), container)
    t = schedule(uri, "compaction", redis_server, *COMPACT_ALL)
    before = objects(container)
    with monkeypatch.context() as mp:  # a SAS token that may read and list, not write
        mp.delenv("AZURE_STORAGE_ACCOUNT_KEY")
        mp.setenv("AZURE_STORAGE_SAS_KEY", _read_only_sas(container))
        refused = execute(uri, redis_server)
    assert refused.exit_code == EXIT_STORAGE, refused.output
    assert "sig=" not in refused.output  # the SAS token's signature is never shown
    error = one_error_line(refused)
    assert f"bucket {container!r}" in error and "write refused: permission denied" in error
    assert objects(container) == before  # nothing written, nothing partial
    with monkeypatch.context() as mp:
        mp.setenv("AZURE_STORAGE_ACCOUNT_KEY", WRONG_KEY)
        wrong = execute(uri, redis_server)
    assert wrong.exit_code == EXIT_STORAGE, wrong.output
    error = one_error_line(wrong)
    # the store's listing answers 403 (AuthorizationFailure): the opening listing names it
    assert f"list failed on bucket {container!r}" in error and "403 Forbidden" in error
    assert WRONG_KEY not in wrong.output and AZURITE_KEY not in wrong.output
    assert objects(container) == before
    # the right credentials: the compaction runs (the failed attempt left nothing in the way)
    done = execute(uri, redis_server)
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith(f"{t} compaction: "), done.stdout
