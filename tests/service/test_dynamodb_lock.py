"""Hudi's DynamoDB lock (``service.dynamodb_lock``) on moto's DynamoDB server (loopback).

A "foreign" holder here is what a Hudi writer's AWS DynamoDB lock client does, written with raw
boto3 calls: the item ``{key, ownerName, leaseDuration, recordVersionNumber}`` put with
``attribute_not_exists(#pk)``, heartbeats that replace ``recordVersionNumber`` under a condition on
the old one and the owner, release by a conditional DeleteItem. Leases are a second or two long so
the tests run quickly; the AWS variables always point at the local server (``s3_env``).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import ClientError  # type: ignore[import-untyped]
from click.testing import CliRunner

from hoodied.hoodie.errors import HoodieFormatError, LockConfigError, LockLostError, LockUnavailableError
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.cli.main import EXIT_ERROR, cli
from hoodied.service.dynamodb_lock import (
    FENCE_ATTRIBUTE,
    FENCE_SUFFIX,
    DynamoDBLock,
    DynamoDBLockConfig,
)
from hoodied.service.locks import lock_from_option
from tests.helpers.lock_race import race
from tests.helpers.object_servers import MotoServer, moto_server, s3_env  # noqa: F401  (fixtures)

PROJECT = Path(__file__).resolve().parents[2]
UUID_TEXT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
LEASE_MS = 1_500


def _client(server: MotoServer) -> Any:
    return boto3.session.Session().client("dynamodb", region_name="us-east-1", endpoint_url=server.endpoint)


def _create_lock_table(server: MotoServer) -> str:
    """A lock table as Hudi creates it: one HASH key ``key`` of type S, on-demand billing."""
    name = f"locks-{uuid.uuid4().hex[:10]}"
    _client(server).create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "key", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "key", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


@pytest.fixture
def lock_table(s3_env: MotoServer) -> str:  # noqa: F811
    return _create_lock_table(s3_env)


def _config(server: MotoServer, table: str, key: str = "trips", refresh_ms: int = 20) -> DynamoDBLockConfig:
    return DynamoDBLockConfig(
        table=table,
        partition_key=key,
        region="us-east-1",
        endpoint_url=server.endpoint,
        refresh_ms=refresh_ms,
    )


def _lock(
    server: MotoServer, table: str, wait_ms: int, key: str = "trips", lease_ms: int = LEASE_MS
) -> DynamoDBLock:
    settings = LockSettings(wait_ms=wait_ms, retries=0, retry_interval_ms=0, lease_ms=lease_ms)
    return DynamoDBLock("/tables/trips", _config(server, table, key), settings)


def _item(server: MotoServer, table: str, key: str = "trips") -> dict[str, Any] | None:
    found = _client(server).get_item(TableName=table, Key={"key": {"S": key}}, ConsistentRead=True)
    item = found.get("Item")
    return dict(item) if item else None


class JavaStyleHolder:
    """What ``AmazonDynamoDBLockClient`` writes for a Hudi writer, with raw boto3 calls."""

    def __init__(self, server: MotoServer, table: str, key: str = "trips", lease_ms: int = LEASE_MS) -> None:
        self.client = _client(server)
        self.table, self.key, self.lease_ms = table, key, lease_ms
        self.owner = f"writer-host{uuid.uuid4()}"
        self.rvn = ""
        self.beats: list[float] = []  # time.monotonic() just before each successful write
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(
        self, condition: str = "attribute_not_exists(#pk)", values: dict[str, Any] | None = None
    ) -> None:
        """``upsertAndMonitorNewLock``: PutItem of the whole item, conditional (raises when refused)."""
        rvn = str(uuid.uuid4())
        names = {"#pk": "key"}
        if values and ":rvn" in values:
            names["#rvn"] = "recordVersionNumber"
        if values and ":ir" in values:
            names["#ir"] = "isReleased"
        request: dict[str, Any] = {
            "TableName": self.table,
            "Item": {
                "key": {"S": self.key},
                "ownerName": {"S": self.owner},
                "leaseDuration": {"S": str(self.lease_ms)},
                "recordVersionNumber": {"S": rvn},
            },
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
        }
        if values:
            request["ExpressionAttributeValues"] = values
        sent = time.monotonic()
        self.client.put_item(**request)
        self.rvn = rvn
        self.beats.append(sent)

    def heartbeat(self) -> None:
        """``sendHeartbeat``: a new record version under a condition on the old one and the owner."""
        rvn = str(uuid.uuid4())
        sent = time.monotonic()
        self.client.update_item(
            TableName=self.table,
            Key={"key": {"S": self.key}},
            UpdateExpression="SET #ld = :ld, #rvn = :newRvn",
            ConditionExpression="attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
            ExpressionAttributeNames={
                "#pk": "key",
                "#ld": "leaseDuration",
                "#rvn": "recordVersionNumber",
                "#on": "ownerName",
            },
            ExpressionAttributeValues={
                ":ld": {"S": str(self.lease_ms)},
                ":newRvn": {"S": rvn},
                ":rvn": {"S": self.rvn},
                ":on": {"S": self.owner},
            },
        )
        self.rvn = rvn
        self.beats.append(sent)

    def start_heartbeats(self) -> None:
        """The lock client's background thread, every third of the lease (as Hudi configures it)."""
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(self.lease_ms / 3000):
                self.heartbeat()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop_heartbeats(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def release(self) -> None:
        """``releaseLock`` with ``deleteLockOnRelease`` (Hudi's default): conditional DeleteItem."""
        self.stop_heartbeats()
        self.client.delete_item(
            TableName=self.table,
            Key={"key": {"S": self.key}},
            ConditionExpression="attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
            ExpressionAttributeNames={"#pk": "key", "#rvn": "recordVersionNumber", "#on": "ownerName"},
            ExpressionAttributeValues={":rvn": {"S": self.rvn}, ":on": {"S": self.owner}},
        )


@pytest.fixture
def foreign(s3_env: MotoServer, lock_table: str) -> Iterator[JavaStyleHolder]:  # noqa: F811
    holder = JavaStyleHolder(s3_env, lock_table)
    yield holder
    holder.stop_heartbeats()


def _refused(err: BaseException) -> bool:
    return isinstance(err, ClientError) and err.response["Error"]["Code"] == "ConditionalCheckFailedException"


# ---------------------------------------------------------------- configuration


def test_lock_option_parses_the_url_and_infers_the_key_from_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    (tmp_path / ".hoodie").mkdir()
    (tmp_path / ".hoodie" / "hoodie.properties").write_text(
        "hoodie.table.name=trips_cow\nhoodie.table.type=COPY_ON_WRITE\n"
    )
    storage = LocalStorage(str(tmp_path))
    lock, factory = lock_from_option("dynamodb://hudi-locks?endpoint_url=localhost:8000", storage)
    assert isinstance(lock, DynamoDBLock) and factory is None
    # Hudi's rules: the key defaults to hoodie.table.name, the region to AWS_REGION, https:// is added
    assert lock.config == DynamoDBLockConfig("hudi-locks", "trips_cow", "eu-west-3", "localhost:8000")
    assert lock.config.endpoint == "https://localhost:8000"
    assert lock.lease_ms == 60_000 and lock.heartbeat_ms == 20_000  # wait_time_ms default, lease / 3
    url = (
        "dynamodb://locks?region=us-east-2&partition_key=k1&endpoint_url=http://127.0.0.1:1"
        "&billing_mode=provisioned&read_capacity=5&write_capacity=6&table_creation_timeout=1000"
    )
    lock, _ = lock_from_option(url, storage)
    assert isinstance(lock, DynamoDBLock)
    assert lock.config == DynamoDBLockConfig(
        "locks", "k1", "us-east-2", "http://127.0.0.1:1", "PROVISIONED", 5, 6, 1000
    )
    lock, _ = lock_from_option("dynamodb://?partition_key=k1", storage)
    assert isinstance(lock, DynamoDBLock) and lock.config.table == "hudi_locks"  # Hudi 1.x default
    for bad, why in [
        ("dynamodb://locks?bogus=1", "unknown parameter 'bogus'"),
        ("dynamodb://locks/path", "no path"),
        ("dynamodb://x?partition_key=k", "table name 'x'"),
        ("dynamodb://locks?billing_mode=free", "billing mode 'FREE'"),
        ("dynamodb://locks?read_capacity=many", "read_capacity='many' is not a whole number"),
    ]:
        with pytest.raises(ValueError, match=f"^--lock .*{re.escape(why)}"):
            lock_from_option(bad, storage)
    with pytest.raises(ValueError, match="no partition_key and the table has no hoodie.table.name"):
        DynamoDBLockConfig.from_url("dynamodb://locks", lambda: None)
    with pytest.raises(ValueError, match="a dynamodb://TABLE.* URL, or 'storage'"):
        lock_from_option("bogus://x", storage)


def test_a_missing_lock_table_is_created_as_hudi_creates_it(s3_env: MotoServer) -> None:  # noqa: F811
    table = f"locks-{uuid.uuid4().hex[:10]}"
    lock = _lock(s3_env, table, wait_ms=0)
    lock.acquire()
    described = _client(s3_env).describe_table(TableName=table)["Table"]
    assert described["KeySchema"] == [{"AttributeName": "key", "KeyType": "HASH"}]
    assert described["AttributeDefinitions"] == [{"AttributeName": "key", "AttributeType": "S"}]
    assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert _item(s3_env, table) is not None
    lock.release()


def test_a_table_with_another_key_schema_is_a_one_line_config_error(s3_env: MotoServer) -> None:  # noqa: F811
    table = f"locks-{uuid.uuid4().hex[:10]}"
    _client(s3_env).create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(LockConfigError) as raised:
        _lock(s3_env, table, wait_ms=0).acquire()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"--lock dynamodb: table {table} has key schema [('id', 'HASH')]")
    assert "one HASH key 'key' of type S" in message


# ---------------------------------------------------------------- beside a Hudi writer


def test_a_heartbeating_hudi_writer_keeps_hoodied_out(
    s3_env: MotoServer,  # noqa: F811
    lock_table: str,
    foreign: JavaStyleHolder,
) -> None:
    foreign.acquire()
    foreign.start_heartbeats()
    lock = _lock(s3_env, lock_table, wait_ms=500)
    started = time.monotonic()
    with pytest.raises(LockUnavailableError, match=f"held by owner {foreign.owner}"):
        lock.acquire()
    waited = time.monotonic() - started
    # like the lock client: the wait plus one lease of the holder, then give up
    assert 0.5 + LEASE_MS / 1000 <= waited < 0.5 + LEASE_MS / 1000 + 2.0
    assert len(foreign.beats) >= 4  # it kept heartbeating, so its record version never stood still
    item = _item(s3_env, lock_table)
    assert item is not None and item["ownerName"]["S"] == foreign.owner
    foreign.release()


def test_a_hudi_writer_that_stops_heartbeating_is_taken_over_after_a_whole_lease(
    s3_env: MotoServer,  # noqa: F811
    lock_table: str,
    foreign: JavaStyleHolder,
) -> None:
    foreign.acquire()
    foreign.start_heartbeats()
    lock = _lock(s3_env, lock_table, wait_ms=15_000)
    result: dict[str, float | int] = {}

    def take() -> None:
        result["token"] = lock.acquire()
        result["at"] = time.monotonic()

    taker = threading.Thread(target=take)
    taker.start()
    time.sleep(2 * LEASE_MS / 1000)  # hoodied waits while the record version keeps changing
    assert "at" not in result
    foreign.stop_heartbeats()  # the writer froze (or died) without releasing
    last_write = foreign.beats[-1]
    taker.join(15)
    assert "at" in result
    unchanged_for = float(result["at"]) - last_write
    # taken only after the version stood still for a whole lease on the taker's clock (+ polls)
    assert LEASE_MS / 1000 <= unchanged_for < LEASE_MS / 1000 + 1.5, unchanged_for
    item = _item(s3_env, lock_table)
    assert item is not None and item["ownerName"]["S"] == lock.owner
    assert item["recordVersionNumber"]["S"] != foreign.rvn
    with pytest.raises(ClientError) as refused:
        foreign.heartbeat()  # the writer, back, finds its lock stolen (the lock client stops then)
    assert _refused(refused.value)
    lock.release()


def test_a_released_item_is_taken_at_once(
    s3_env: MotoServer,  # noqa: F811
    lock_table: str,
    foreign: JavaStyleHolder,
) -> None:
    """``deleteLockOnRelease=false`` leaves ``isReleased = "1"`` on the item: free without waiting."""
    foreign.acquire()
    foreign.client.update_item(
        TableName=lock_table,
        Key={"key": {"S": "trips"}},
        UpdateExpression="SET #ir = :ir",
        ConditionExpression="attribute_exists(#pk) AND #rvn = :rvn AND #on = :on",
        ExpressionAttributeNames={
            "#pk": "key",
            "#ir": "isReleased",
            "#rvn": "recordVersionNumber",
            "#on": "ownerName",
        },
        ExpressionAttributeValues={
            ":ir": {"S": "1"},
            ":rvn": {"S": foreign.rvn},
            ":on": {"S": foreign.owner},
        },
    )
    lock = _lock(s3_env, lock_table, wait_ms=0)
    started = time.monotonic()
    lock.acquire()
    assert time.monotonic() - started < LEASE_MS / 1000
    item = _item(s3_env, lock_table)
    assert item is not None and "isReleased" not in item and item["ownerName"]["S"] == lock.owner
    lock.release()


def test_hoodieds_item_has_the_lock_clients_shape_and_keeps_a_hudi_writer_out(
    s3_env: MotoServer,  # noqa: F811
    lock_table: str,
    foreign: JavaStyleHolder,
) -> None:
    lock = _lock(s3_env, lock_table, wait_ms=0)
    token = lock.acquire()
    item = _item(s3_env, lock_table)
    assert item is not None
    assert set(item) == {"key", "ownerName", "leaseDuration", "recordVersionNumber", FENCE_ATTRIBUTE}
    assert item["key"] == {"S": "trips"}
    assert item["ownerName"] == {"S": lock.owner} and lock.owner.startswith(socket.gethostname())
    assert UUID_TEXT.match(lock.owner[-36:])  # host name + UUID, as generateOwnerNameFromLocalhost
    assert item["leaseDuration"] == {"S": str(LEASE_MS)}
    assert UUID_TEXT.match(item["recordVersionNumber"]["S"])
    assert item[FENCE_ATTRIBUTE] == {"N": str(token)}
    fence = _item(s3_env, lock_table, "trips" + FENCE_SUFFIX)
    assert fence is not None and fence[FENCE_ATTRIBUTE] == {"N": str(token)} and "isReleased" in fence

    # a Hudi writer's acquire of a held lock is refused...
    with pytest.raises(ClientError) as refused:
        foreign.acquire()
    assert _refused(refused.value)
    # ...and a steal with a version it saw is refused once hoodied's heartbeat replaced it
    seen = item["recordVersionNumber"]["S"]
    time.sleep(2 * LEASE_MS / 1000)
    now = _item(s3_env, lock_table)
    assert now is not None and now["recordVersionNumber"]["S"] != seen
    with pytest.raises(ClientError) as refused:
        foreign.acquire("attribute_exists(#pk) AND #rvn = :rvn", {":rvn": {"S": seen}})
    assert _refused(refused.value)
    lock.ensure_held()

    lock.release()
    assert _item(s3_env, lock_table) is None  # deleteLockOnRelease, as Hudi leaves it
    foreign.acquire()  # free for the writer at once
    foreign.release()


def test_a_lost_lock_is_reported_by_ensure_held(
    s3_env: MotoServer,  # noqa: F811
    lock_table: str,
    foreign: JavaStyleHolder,
) -> None:
    lock = _lock(s3_env, lock_table, wait_ms=0)
    lock.acquire()
    item = _item(s3_env, lock_table)
    assert item is not None
    # someone deleted and re-took the item (an operator, a writer that judged it expired)
    _client(s3_env).delete_item(TableName=lock_table, Key={"key": {"S": "trips"}})
    foreign.acquire()
    with pytest.raises(LockLostError, match=f"now names owner {foreign.owner}"):
        lock.ensure_held()
    lock.release()
    assert _item(s3_env, lock_table) is not None  # release never removes another holder's item
    foreign.release()


def test_an_item_that_is_not_a_lock_client_item_is_never_taken(
    s3_env: MotoServer,  # noqa: F811
    lock_table: str,
) -> None:
    odd = {"key": {"S": "trips"}, "ownerName": {"S": "someone"}, "leaseDuration": {"N": "10"}}
    _client(s3_env).put_item(TableName=lock_table, Item=odd)
    with pytest.raises(HoodieFormatError, match="not a lock-client item"):
        _lock(s3_env, lock_table, wait_ms=0).acquire()
    assert _item(s3_env, lock_table) == odd


# ---------------------------------------------------------------- processes

#: The lock each process of the race builds (``tests.helpers.lock_race`` runs the race).
_WORKER = """
import sys
from hoodied.hoodie.locks import LockSettings
from hoodied.service.dynamodb_lock import DynamoDBLock, DynamoDBLockConfig

endpoint, table = sys.argv[1:3]
config = DynamoDBLockConfig(table, "race", "us-east-1", endpoint, refresh_ms=10)
lock = DynamoDBLock("/tables/race", config, LockSettings(wait_ms=60_000, retries=0, lease_ms=5_000))
"""


def test_two_processes_never_hold_the_lock_together(
    s3_env: MotoServer,  # noqa: F811
    lock_table: str,
    tmp_path: Path,
) -> None:
    tokens = race(_WORKER, [s3_env.endpoint, lock_table], tmp_path, 50, timeout=240)
    assert all(a < b for a, b in zip(tokens, tokens[1:], strict=False)), tokens


_HOLDER = """
import sys
from pathlib import Path
from hoodied.hoodie.errors import LockLostError
from hoodied.hoodie.locks import LockSettings
from hoodied.service.dynamodb_lock import DynamoDBLock, DynamoDBLockConfig

endpoint, table, target = sys.argv[1:4]
config = DynamoDBLockConfig(table, "trips", "us-east-1", endpoint, refresh_ms=20)
lock = DynamoDBLock("/tables/trips", config, LockSettings(wait_ms=0, retries=0, lease_ms=1_500))
token = lock.acquire()
print("held", token, lock.owner, flush=True)
sys.stdin.readline()
try:
    lock.ensure_held()
except LockLostError as exc:
    print("LOST", exc, flush=True)
else:
    Path(target).write_text("written under the lock")
    print("WROTE", flush=True)
lock.release()
"""


def test_a_paused_holder_is_taken_over_and_writes_nothing(
    s3_env: MotoServer,  # noqa: F811
    lock_table: str,
    tmp_path: Path,
) -> None:
    target = tmp_path / "timeline-write"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, s3_env.endpoint, lock_table, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        held = proc.stdout.readline().split()
        assert held[:1] == ["held"], (held, proc.stderr.read() if proc.stderr else "")
        token = int(held[1])
        proc.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen VM: no more heartbeats
        taker = _lock(s3_env, lock_table, wait_ms=10_000)
        started = time.monotonic()
        assert taker.acquire() > token
        assert time.monotonic() - started >= LEASE_MS / 1000  # a whole lease of the paused holder
        proc.send_signal(signal.SIGCONT)
        proc.stdin.write("write now\n")
        proc.stdin.flush()
        verdict = proc.stdout.readline()
        assert verdict.startswith("LOST "), verdict
        assert proc.wait(30) == 0
        assert not target.exists()
        item = _item(s3_env, lock_table)
        assert item is not None and item["ownerName"]["S"] == taker.owner  # its release left ours alone
        taker.ensure_held()
        taker.release()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(10)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_a_lock_still_held_at_exit_is_released(s3_env: MotoServer, lock_table: str, tmp_path: Path) -> None:  # noqa: F811
    script = _HOLDER.replace("sys.stdin.readline()\n", "sys.exit(0)\n")
    done = subprocess.run(
        [sys.executable, "-c", script, s3_env.endpoint, lock_table, str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == 0 and done.stdout.startswith("held "), done.stderr
    assert _item(s3_env, lock_table) is None


# ---------------------------------------------------------------- end to end


def test_cli_schedules_under_the_lock_a_hudi_writer_takes(
    s3_env: MotoServer,  # noqa: F811
    lock_table: str,
    hudi_table,
) -> None:
    table = hudi_table("cow/v9_txns_simple_nometa")
    props = (table / ".hoodie" / "hoodie.properties").read_text()
    name = re.search(r"^hoodie\.table\.name=(.+)$", props, re.M)
    assert name is not None
    # the writer's partition key is the table name (Hudi's inference); hoodied infers the same
    writer = JavaStyleHolder(s3_env, lock_table, key=name.group(1), lease_ms=1_000)
    writer.acquire()
    writer.start_heartbeats()
    timeline = sorted(p.name for p in (table / ".hoodie").rglob("*"))
    url = f"dynamodb://{lock_table}?region=us-east-1&endpoint_url={s3_env.endpoint}"
    args = [
        "schedule",
        "clean",
        str(table),
        "--retained",
        "1",
        "--clock-skew-ms",
        "0",
        "--lock",
        url,
        "--lock-retries",
        "0",
    ]
    try:
        busy = CliRunner().invoke(cli, [*args, "--lock-wait-ms", "300"])
        assert busy.exit_code == EXIT_ERROR, busy.output
        error = busy.stderr.splitlines()[-1]  # the lines before it are the attempts' log lines
        assert error.startswith(f"hoodied: error: DynamoDB lock dynamodb://{lock_table}/{name.group(1)}: ")
        assert (
            f"table lock not acquired after 1 attempt(s) of 300 ms each (held by owner {writer.owner}"
            in error
        )
        assert "credentials" not in busy.stderr  # botocore's chatter stays out of the output
        assert sorted(p.name for p in (table / ".hoodie").rglob("*")) == timeline  # nothing written
    finally:
        writer.release()
    ok = CliRunner().invoke(cli, [*args, "--lock-wait-ms", "10000"])
    assert ok.exit_code == 0, ok.output
    added = sorted(set(p.name for p in (table / ".hoodie").rglob("*")) - set(timeline))
    assert any(n.endswith(".clean.requested") for n in added), added  # planned under the lock
    assert _item(s3_env, lock_table, name.group(1)) is None  # released at the end of the command
