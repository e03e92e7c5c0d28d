"""``hoodied inspect --lock ...``: the lock section, read without taking the lock, on real servers.

Every backend is looked at free, then held by another process: hoodied's own lock taken in a
subprocess (``HOLDER`` below), or a foreign holder shaped as Apache Hudi writes it (the storage
lock file, ``LockInfo`` lock files, a Curator lock node, a lock-client DynamoDB item). Redis,
ZooKeeper, moto (S3 and DynamoDB) run for real on loopback ports.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient  # type: ignore[import-untyped]

from hoodied.hoodie.locks import InProcessLock, InspectableLock, LockHolder
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.cli.main import EXIT_OK, EXIT_USAGE, cli
from hoodied.service.dynamodb_lock import DynamoDBLock
from hoodied.service.fs_lock import FileSystemLock
from hoodied.service.locks import LocalFileLock, RedisTableLock
from hoodied.service.storage_lock import LOCK_FILE, StorageBasedLock
from hoodied.service.zookeeper_lock import ZooKeeperLock
from tests.helpers import zookeeper_server as zk_helpers
from tests.helpers.object_servers import MotoServer, moto_server, s3_env, upload_tree  # noqa: F401  (fixtures)
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)
from tests.helpers.zookeeper_server import ZooKeeperServer

zookeeper_server = zk_helpers.zookeeper_server

FIXTURE = "mor/avro/v8_trips_8i3u1d"

# Takes the table lock --lock names and holds it until a line arrives on stdin.
HOLDER = """
import sys
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.storage_factory import storage_for
from hoodied.service.locks import lock_from_option

settings = LockSettings(wait_ms=10_000, retries=0)
lock, factory = lock_from_option(sys.argv[2], storage_for(sys.argv[1]), settings)
token = lock.acquire()
print("HELD", token, flush=True)
sys.stdin.readline()
lock.release()
if factory is not None:
    factory.close()
"""


def inspect(table: str, *options: str) -> tuple[int, dict[str, Any], str]:
    """``hoodied inspect TABLE --json OPTIONS``: exit code, the lock section, and the text form."""
    runner = CliRunner()
    result = runner.invoke(cli, ["inspect", table, "--json", *options], catch_exceptions=False)
    assert result.exit_code == EXIT_OK, result.output
    text = runner.invoke(cli, ["inspect", table, *options], catch_exceptions=False)
    assert text.exit_code == EXIT_OK, text.output
    lock_lines = [line for line in text.stdout.splitlines() if line.startswith("lock")]
    return result.exit_code, json.loads(result.stdout)["lock"], "\n".join(lock_lines)


class Holder:
    """hoodied's own lock held by a subprocess; ``release()`` lets it go and waits for the exit."""

    def __init__(self, table: str, option: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, table, option],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("HELD"):
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"holder did not take the lock: {line!r} {err}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.communicate("\n", timeout=30)
        assert self.proc.returncode == 0


@pytest.fixture
def table(hudi_table: Any) -> Iterator[Path]:
    yield hudi_table(FIXTURE)


def assert_json_shape(lock: dict[str, Any]) -> None:
    assert set(lock) == {"option", "kind", "where", "state", "holder", "error", "warnings"}
    assert lock["state"] in ("free", "held", "expired", "unreachable", "unreadable")
    if lock["holder"] is not None:
        assert set(lock["holder"]) == {"owner", "where", "since", "until", "lease_ms", "expired", "detail"}


def lock_info(thread_name: str) -> str:
    """``LockInfo`` as Hudi's ``FileSystemBasedLockProvider`` writes it (Jackson pretty printer)."""
    return (
        "{\n"
        '  "lockCreateTime" : "2026-01-05 10:11:12.345",\n'
        f'  "lockThreadName" : "{thread_name}",\n'
        '  "lockStacksInfo" : [ "org.apache.hudi.client.transaction.lock.LockManager.lock '
        '(LockManager.java:97)" ]\n'
        "}"
    )


# ---------------------------------------------------------------- local (flock)


def test_local_lock_free_then_held_by_another_process(table: Path) -> None:
    _, lock, text = inspect(str(table))
    assert_json_shape(lock)
    assert lock["option"] == "auto" and lock["kind"] == "local"
    assert lock["where"] == str(table / ".hoodie/.locks/hoodied.lock")
    assert lock["state"] == "free" and lock["holder"] is None and lock["warnings"] == []
    assert text == f"lock           local {table}/.hoodie/.locks/hoodied.lock: free"

    holder = Holder(str(table), "local")
    try:
        _, lock, text = inspect(str(table), "--lock", "local")
        assert_json_shape(lock)
        assert lock["state"] == "held"
        h = lock["holder"]
        # the owner text as the holder wrote it into the lock file: "<host> <pid> token <n>"
        assert h["owner"].startswith(f"{socket.gethostname()} {holder.pid} token ")
        assert h["owner"] == (table / ".hoodie/.locks/hoodied.lock").read_text().strip()
        assert h["detail"] == f"flock held by pid {holder.pid}"
        assert h["expired"] is False and h["since"] is not None
        assert f": held by {h['owner']}" in text
        # inspecting took nothing: the holder still holds, and the file is unchanged
        assert (table / ".hoodie/.locks/hoodied.lock").read_text().strip() == h["owner"]
    finally:
        holder.release()
    # released: the lock file stays, but no flock is on it
    assert (table / ".hoodie/.locks/hoodied.lock").exists()
    _, lock, _ = inspect(str(table), "--lock", "local")
    assert lock["state"] == "free"


def test_local_holder_query_does_not_take_the_lock(table: Path) -> None:
    storage = LocalStorage(str(table))
    mine = LocalFileLock(storage)
    with mine:
        seen = LocalFileLock(storage).holder()
        assert isinstance(seen, LockHolder)
        assert seen.owner.startswith(f"{socket.gethostname()} {os.getpid()} token ")
        mine.ensure_held()  # still ours after being looked at
    assert LocalFileLock(storage).holder() is None


def test_hudi_lock_files_the_chosen_lock_does_not_take_are_reported(table: Path) -> None:
    (table / ".hoodie/.locks").mkdir(parents=True, exist_ok=True)
    (table / LOCK_FILE).write_text(f'{{"expired":true,"validUntil":1,"owner":"{uuid.uuid4()}"}}')
    (table / ".hoodie/lock").write_text(lock_info("pool-1-thread-1"))
    _, lock, text = inspect(str(table), "--lock", "local")
    assert lock["state"] == "free"
    assert lock["warnings"] == [
        "Hudi's storage-based lock file present: writers may use StorageBasedLockProvider; "
        "use --lock storage",
        "Hudi's file-system lock file .hoodie/lock present: writers may use FileSystemBasedLockProvider; "
        "use --lock filesystem",
    ]
    assert "lock warning   Hudi's storage-based lock file present" in text
    assert "lock warning   Hudi's file-system lock file .hoodie/lock present" in text

    # --lock filesystem takes .hoodie/lock (and sees its holder); the storage lock file still warns
    _, lock, _ = inspect(str(table), "--lock", "filesystem")
    assert lock["state"] == "held" and lock["holder"]["owner"] == "pool-1-thread-1"
    assert [w.split(":")[0] for w in lock["warnings"]] == ["Hudi's storage-based lock file present"]

    # a filesystem lock in .hoodie/.aux only does not take .hoodie/lock
    _, lock, _ = inspect(str(table), "--lock", "filesystem?path=.hoodie/.aux")
    assert lock["state"] == "free"
    assert any(w.startswith("Hudi's file-system lock file .hoodie/lock present") for w in lock["warnings"])


# ---------------------------------------------------------------- filesystem (Hudi's LockInfo files)


def test_filesystem_lock_free_held_by_hoodied_and_by_a_hudi_writer_expired(table: Path) -> None:
    _, lock, text = inspect(str(table), "--lock", "filesystem")
    assert_json_shape(lock)
    assert lock["kind"] == "filesystem" and lock["state"] == "free"
    assert lock["where"] == f"{table}/.hoodie/lock + {table}/.hoodie/.aux/lock"
    assert text.endswith(": free")

    holder = Holder(str(table), "filesystem")
    try:
        _, lock, _ = inspect(str(table), "--lock", "filesystem")
        assert lock["state"] == "held"
        owner = lock["holder"]["owner"]
        assert owner.startswith("hoodied-") and f" {socket.gethostname()} {holder.pid} " in owner
        assert owner == json.loads((table / ".hoodie/lock").read_text())["lockThreadName"]
        assert lock["holder"]["where"] == f"{table}/.hoodie/lock"
    finally:
        holder.release()

    # a Hudi writer's lock file, last touched two minutes ago, with a one-minute expiry
    aux = table / ".hoodie/.aux"
    aux.mkdir(parents=True, exist_ok=True)
    (aux / "lock").write_text(lock_info("pool-3-thread-7"))
    old = time.time() - 120
    os.utime(aux / "lock", (old, old))
    _, lock, text = inspect(str(table), "--lock", "filesystem?expire_minutes=1")
    assert lock["state"] == "expired"
    h = lock["holder"]
    assert h["owner"] == "pool-3-thread-7" and h["expired"] is True
    assert h["where"] == f"{aux}/lock" and h["until"] is not None
    assert "lockCreateTime 2026-01-05 10:11:12.345" in h["detail"]
    assert text.endswith("; expired by filesystem's rule")
    # without an expiry (Hudi's default 0) the same file never expires
    _, lock, text = inspect(str(table), "--lock", "filesystem")
    assert lock["state"] == "held" and lock["holder"]["expired"] is False
    assert "expired" not in text.split(": held by ", 1)[1]


# ---------------------------------------------------------------- storage (Hudi's table_lock.json on S3)


def test_storage_lock_on_s3_free_held_expired_and_released(s3_env: MotoServer, table: Path) -> None:  # noqa: F811
    uri = upload_tree(table, s3_env.new_bucket())
    storage = ObjectStorage.connect(uri)
    _, lock, text = inspect(uri)
    assert_json_shape(lock)
    assert lock["option"] == "auto" and lock["kind"] == "storage"
    assert lock["where"] == f"{uri}/{LOCK_FILE}" and lock["state"] == "free"
    assert text == f"lock           storage {uri}/{LOCK_FILE}: free"

    holder = Holder(uri, "storage")
    try:
        before = storage.read(LOCK_FILE)
        _, lock, text = inspect(uri, "--lock", "storage")
        doc = json.loads(storage.read(LOCK_FILE))
        assert lock["state"] == "held" and lock["holder"]["owner"] == doc["owner"]
        assert lock["holder"]["until"] is not None and lock["holder"]["expired"] is False
        assert lock["warnings"] == []  # the chosen lock takes the storage lock file
        assert storage.read(LOCK_FILE) == before  # looked at, not changed
        assert f"held by {doc['owner']}, until " in text
    finally:
        holder.release()
    # released (expired: true): free
    _, lock, _ = inspect(uri)
    assert lock["state"] == "free"

    # a Hudi writer's lock left dangling: validUntil a minute ago, never released
    owner = str(uuid.uuid4())
    valid_until = int(time.time() * 1000) - 60_000
    storage.put(LOCK_FILE, f'{{"expired":false,"validUntil":{valid_until},"owner":"{owner}"}}'.encode())
    _, lock, text = inspect(uri)
    assert lock["state"] == "expired"
    assert lock["holder"]["owner"] == owner and lock["holder"]["expired"] is True
    assert text.endswith("; expired by storage's rule")


def test_unreadable_storage_lock_file_is_one_line(s3_env: MotoServer, table: Path) -> None:  # noqa: F811
    uri = upload_tree(table, s3_env.new_bucket())
    ObjectStorage.connect(uri).put(LOCK_FILE, b"not json")
    _, lock, text = inspect(uri)
    assert lock["state"] == "unreadable" and "not a Hudi storage lock file" in lock["error"]
    assert len(text.splitlines()) == 1 and " unreadable: " in text


# ---------------------------------------------------------------- redis


def test_redis_lock_free_then_held(redis_server: RedisServer, table: Path) -> None:  # noqa: F811
    _, lock, text = inspect(str(table), "--lock", redis_server.url)
    assert_json_shape(lock)
    key = "hoodied:lock:{" + str(table) + "}"
    assert lock["kind"] == "redis" and lock["where"] == f"{redis_server.url} {key}"
    assert lock["state"] == "free"

    holder = Holder(str(table), redis_server.url)
    try:
        _, lock, text = inspect(str(table), "--lock", redis_server.url)
        stored = redis_server.command("GET", key).decode().split("\r\n")[1]  # RESP bulk string
        assert lock["state"] == "held" and lock["holder"]["owner"] == stored
        assert stored.endswith(f" {socket.gethostname()} {holder.pid}")
        assert lock["holder"]["until"] is not None and "lease ends in" in lock["holder"]["detail"]
        assert f"held by {stored}" in text
    finally:
        holder.release()
    _, lock, _ = inspect(str(table), "--lock", redis_server.url)
    assert lock["state"] == "free"


def test_unreachable_redis_is_one_line(table: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    _, lock, text = inspect(str(table), "--lock", f"redis://127.0.0.1:{port}/0")
    assert lock["state"] == "unreachable" and lock["holder"] is None
    assert text.startswith(f"lock           redis://127.0.0.1:{port}/0 hoodied:lock:")
    assert " unreachable: " in text
    assert len(text.splitlines()) == 1


# ---------------------------------------------------------------- zookeeper (Curator nodes)


def test_zookeeper_lock_free_then_held_by_a_curator_node_and_by_hoodied(
    zookeeper_server: ZooKeeperServer, table: Path
) -> None:
    base = f"/hudi/inspect-{uuid.uuid4().hex[:8]}"
    url = f"zookeeper://{zookeeper_server.hosts}{base}?lock_key=trips"
    where = f"zookeeper://{zookeeper_server.hosts}{base}/trips"
    _, lock, text = inspect(str(table), "--lock", url)
    assert_json_shape(lock)
    assert lock["kind"] == "zookeeper" and lock["where"] == where and lock["state"] == "free"
    assert text == f"lock           {where}: free"

    zk = KazooClient(hosts=zookeeper_server.hosts, timeout=10)
    zk.start(timeout=10)
    try:
        assert zk.exists(f"{base}/trips") is None  # looking created nothing
        # a Hudi writer's holding: a protected ephemeral sequential node with HoodieInterProcessMutex data
        zk.ensure_path(f"{base}/trips")
        node = zk.create(
            f"{base}/trips/_c_{uuid.uuid4()}-lock-",
            b"application_id=spark-writer-7",
            ephemeral=True,
            sequence=True,
        )
        _, lock, text = inspect(str(table), "--lock", url)
        assert lock["state"] == "held" and lock["holder"]["owner"] == "application_id=spark-writer-7"
        assert lock["holder"]["since"] is not None and lock["holder"]["expired"] is False
        assert node.rsplit("/", 1)[1] in lock["holder"]["detail"]
        assert "held by application_id=spark-writer-7, since " in text
        assert zk.get_children(f"{base}/trips") == [node.rsplit("/", 1)[1]]  # nothing added or removed
    finally:
        zk.stop()
        zk.close()
    # that session closed: ZooKeeper removed the node; now hoodied holds it from another process
    holder = Holder(str(table), url)
    try:
        _, lock, _ = inspect(str(table), "--lock", url)
        assert lock["state"] == "held"
        assert lock["holder"]["owner"] == f"application_id=hoodied@{socket.gethostname()}:{holder.pid}"
    finally:
        holder.release()
    _, lock, _ = inspect(str(table), "--lock", url)
    assert lock["state"] == "free"


def test_unreachable_zookeeper_is_one_line_and_exit_0(table: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"zookeeper://127.0.0.1:{port}/hudi/locks?lock_key=trips"
    started = time.monotonic()
    code, lock, text = inspect(str(table), "--lock", url)
    assert code == EXIT_OK
    assert time.monotonic() - started < 30  # two inspects, each bounded by the short look-up timeout
    assert lock["state"] == "unreachable" and lock["holder"] is None and lock["error"]
    assert text.startswith(f"lock           zookeeper://127.0.0.1:{port}/hudi/locks/trips unreachable: ")
    assert len(text.splitlines()) == 1


# ---------------------------------------------------------------- dynamodb (lock-client items on moto)


def test_dynamodb_lock_free_then_held_by_a_hudi_writer_and_by_hoodied(
    s3_env: MotoServer,  # noqa: F811
    table: Path,
) -> None:
    name = f"locks-{uuid.uuid4().hex[:10]}"
    url = f"dynamodb://{name}?region=us-east-1&partition_key=trips&endpoint_url={s3_env.endpoint}"
    client = boto3.session.Session().client("dynamodb", region_name="us-east-1", endpoint_url=s3_env.endpoint)
    # no lock table yet: free, and looking does not create it
    _, lock, text = inspect(str(table), "--lock", url)
    assert_json_shape(lock)
    assert (
        lock["kind"] == "dynamodb" and lock["where"] == f"dynamodb://{name}/trips" and lock["state"] == "free"
    )
    assert name not in client.list_tables()["TableNames"]

    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "key", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "key", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    # a Hudi writer's AWS lock client item
    owner = f"spark-host-3{uuid.uuid4()}"
    client.put_item(
        TableName=name,
        Item={
            "key": {"S": "trips"},
            "ownerName": {"S": owner},
            "leaseDuration": {"S": "60000"},
            "recordVersionNumber": {"S": str(uuid.uuid4())},
        },
        ConditionExpression="attribute_not_exists(#pk)",
        ExpressionAttributeNames={"#pk": "key"},
    )
    _, lock, text = inspect(str(table), "--lock", url)
    assert lock["state"] == "held" and lock["holder"]["owner"] == owner
    assert lock["holder"]["lease_ms"] == 60000 and lock["holder"]["expired"] is False
    assert f"held by {owner}, lease 60000 ms (record version " in text

    # released by the lock client (isReleased, when deleteLockOnRelease is off): free
    client.update_item(
        TableName=name,
        Key={"key": {"S": "trips"}},
        UpdateExpression="SET #ir = :ir",
        ExpressionAttributeNames={"#ir": "isReleased"},
        ExpressionAttributeValues={":ir": {"S": "1"}},
    )
    _, lock, _ = inspect(str(table), "--lock", url)
    assert lock["state"] == "free"

    holder = Holder(str(table), url)
    try:
        _, lock, _ = inspect(str(table), "--lock", url)
        item = client.get_item(TableName=name, Key={"key": {"S": "trips"}}, ConsistentRead=True)["Item"]
        assert lock["state"] == "held" and lock["holder"]["owner"] == item["ownerName"]["S"]
        assert item["ownerName"]["S"].startswith(socket.gethostname())
    finally:
        holder.release()
    _, lock, _ = inspect(str(table), "--lock", url)
    assert lock["state"] == "free"


# ---------------------------------------------------------------- the rest


def test_in_process_lock_holder() -> None:
    mine = InProcessLock("file:///tmp/inspect-lock-in-process")
    other = InProcessLock("file:///tmp/inspect-lock-in-process")
    assert other.holder() is None
    with mine:
        seen = other.holder()
        assert seen is not None and seen.owner == f"process {os.getpid()}"
        assert seen.location.kind == "in-process"
    assert other.holder() is None


def test_bad_lock_option_is_a_usage_error(table: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(table), "--lock", "bogus"])
    assert result.exit_code == EXIT_USAGE
    assert "Invalid value for --lock" in result.stderr


def test_lock_option_is_the_writers_option(table: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", "--help"])
    assert "--lock TEXT" in result.stdout and "[default: auto]" in result.stdout
    assert "--lock-wait-ms" not in result.stdout  # only the choice of lock: inspect takes nothing


@pytest.mark.parametrize(
    "cls",
    [LocalFileLock, RedisTableLock, StorageBasedLock, FileSystemLock, ZooKeeperLock, DynamoDBLock]
    + [InProcessLock],
)
def test_every_backend_implements_its_own_holder(cls: type) -> None:
    assert issubclass(cls, InspectableLock)
    # its own, not inherited from TableLockBase: each backend reads its own record
    assert "holder" in vars(cls) and "location" in vars(cls)
