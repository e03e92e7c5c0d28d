"""Hudi's storage-based lock (``service.storage_lock``) on real object stores.

S3 runs on moto's server and Azure Blob on Azurite (both on loopback); GCS is checked on obstore's
in-memory store, which checks versions the way GCS checks generations. The lock file is compared
with the shape Apache Hudi's ``StorageLockData`` has, and a file written the way a Hudi writer
writes it must keep hoodied out. Leases are a second or two long so the tests run quickly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from obstore.store import MemoryStore

from hoodied.hoodie.errors import (
    HoodieFormatError,
    LockConfigError,
    LockLostError,
    LockUnavailableError,
    PreconditionFailedError,
)
from hoodied.hoodie.locks import LockSettings, TableLock
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.cli.main import TROUBLESHOOTING_URL
from hoodied.service.locks import LocalFileLock, lock_from_option
from hoodied.service.storage_lock import (
    FENCE_FILE,
    LOCK_FILE,
    StorageBasedLock,
    StorageLockData,
    StorageLockSettings,
)
from tests.helpers.object_servers import (  # noqa: F401  (fixtures)
    AzuriteServer,
    MotoServer,
    azure_env,
    azurite_server,
    moto_server,
    s3_env,
)

LEASE = StorageLockSettings(validity_ms=1_500, renew_interval_ms=150, poll_ms=20)
NO_WAIT = LockSettings(wait_ms=0, retries=0, retry_interval_ms=0, poll_ms=20)
WAIT = LockSettings(wait_ms=15_000, retries=0, retry_interval_ms=0, poll_ms=20)
UUID_TEXT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
PROJECT = Path(__file__).resolve().parents[2]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture(params=["s3", "azure", "gcs-memory"])
def table(request: pytest.FixtureRequest) -> tuple[ObjectStorage, ObjectStorage]:
    """Two clients of one table folder: two writers, each with its own connection."""
    if request.param == "s3":
        server: MotoServer = request.getfixturevalue("s3_env")
        uri = f"s3a://{server.new_bucket()}/warehouse/t1"
        return ObjectStorage.connect(uri), ObjectStorage.connect(uri)
    if request.param == "azure":
        azure: AzuriteServer = request.getfixturevalue("azure_env")
        uri = f"az://{azure.new_container()}/warehouse/t1"
        return ObjectStorage.connect(uri), ObjectStorage.connect(uri)
    store = MemoryStore()
    return ObjectStorage.over(store, "gs://lake/warehouse/t1"), ObjectStorage.over(store, "gs://lake/warehouse/t1")


def _lock_file(storage: ObjectStorage) -> dict[str, object]:
    doc = json.loads(storage.read(LOCK_FILE))
    assert isinstance(doc, dict)
    return doc


def _hudi_writes(storage: ObjectStorage, expired: bool, valid_until: int, owner: str) -> None:
    """The lock file as Hudi's Jackson mapper writes ``StorageLockData`` (compact, creator order)."""
    body = f'{{"expired":{str(expired).lower()},"validUntil":{valid_until},"owner":"{owner}"}}'
    for _ in range(20):  # a holder's renewal may slip in between the read and the write
        found = storage.read_versioned(LOCK_FILE)
        try:
            storage.put_if_version(LOCK_FILE, body.encode(), None if found is None else found[1])
            return
        except PreconditionFailedError:
            continue
    raise AssertionError("the lock file kept changing")


# ---------------------------------------------------------------- exclusion, hand-over, file shape


def test_two_locks_exclude_each_other_and_hand_over(table: tuple[ObjectStorage, ObjectStorage]) -> None:
    a = StorageBasedLock(table[0], NO_WAIT, LEASE)
    b = StorageBasedLock(table[1], NO_WAIT, LEASE)
    assert isinstance(a, TableLock)
    ta = a.acquire()
    with pytest.raises(LockUnavailableError, match=f"held by owner {a.owner} \\(valid until"):
        b.acquire()
    a.ensure_held()
    a.release()
    with pytest.raises(LockLostError, match="not held"):
        a.ensure_held()
    tb = b.acquire()
    assert tb > ta
    b.ensure_held()
    with pytest.raises(LockUnavailableError):
        a.acquire()
    b.release()


def test_lock_file_is_exactly_hudis_shape(table: tuple[ObjectStorage, ObjectStorage]) -> None:
    storage = table[0]
    lock = StorageBasedLock(storage, NO_WAIT, LEASE)
    before = _now_ms()
    lock.acquire()
    after = _now_ms()
    raw = storage.read(LOCK_FILE)
    # Jackson's compact output of StorageLockData: three properties, in its creator's order
    assert re.fullmatch(rb'\{"expired":false,"validUntil":\d+,"owner":"[0-9a-f-]{36}"\}', raw), raw
    doc = json.loads(raw)
    assert list(doc) == ["expired", "validUntil", "owner"]
    assert doc["expired"] is False
    assert type(doc["validUntil"]) is int and before + 1_500 <= doc["validUntil"] <= after + 1_500
    assert isinstance(doc["owner"], str) and UUID_TEXT.match(doc["owner"]) and doc["owner"] == lock.owner
    held = doc["validUntil"]
    lock.release()
    # release writes expired=true over the same owner and the last validUntil; the file stays
    assert _lock_file(storage) == {"expired": True, "validUntil": held, "owner": lock.owner}


def test_renewal_keeps_the_lock_past_its_validity(table: tuple[ObjectStorage, ObjectStorage]) -> None:
    a = StorageBasedLock(table[0], NO_WAIT, LEASE)
    b = StorageBasedLock(table[1], NO_WAIT, LEASE)
    a.acquire()
    first = _lock_file(table[0])["validUntil"]
    time.sleep(3 * LEASE.validity_ms / 1000)  # three leases: without renewal it would be long gone
    a.ensure_held()
    renewed = _lock_file(table[0])
    assert renewed["owner"] == a.owner and renewed["expired"] is False
    assert isinstance(first, int) and isinstance(renewed["validUntil"], int) and renewed["validUntil"] > first
    with pytest.raises(LockUnavailableError):
        b.acquire()
    a.release()


def test_an_expired_lease_is_taken_over_and_the_old_holder_refused(
    table: tuple[ObjectStorage, ObjectStorage],
) -> None:
    a = StorageBasedLock(table[0], NO_WAIT, LEASE)
    b = StorageBasedLock(table[1], NO_WAIT, LEASE)
    a.acquire()
    # what the file holds when a's process stopped renewing long ago: a's own entry, validUntil past
    _hudi_writes(table[0], False, _now_ms() - 60_000, a.owner)
    b.acquire()
    assert _lock_file(table[1])["owner"] == b.owner
    # a sees it either in ensure_held's read of the file or through its refused renewal
    with pytest.raises(LockLostError, match="table lock lost"):
        a.ensure_held()
    a.release()  # a's release must not undo b's lock
    b.ensure_held()
    doc = _lock_file(table[1])
    assert doc["owner"] == b.owner and doc["expired"] is False
    b.release()


def test_renewal_that_finds_the_lock_taken_marks_it_lost(table: tuple[ObjectStorage, ObjectStorage]) -> None:
    a = StorageBasedLock(table[0], NO_WAIT, LEASE)
    a.acquire()
    _hudi_writes(table[0], False, _now_ms() + 60_000, str(uuid.uuid4()))  # a Hudi writer took it over
    deadline = time.monotonic() + 10
    while a.is_held and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not a.is_held  # the renewal thread saw its conditional overwrite refused
    with pytest.raises(LockLostError, match="changed by another writer"):
        a.ensure_held()
    a.release()


def test_a_holder_that_cannot_renew_stops_writing_before_others_may_take_over(
    table: tuple[ObjectStorage, ObjectStorage],
) -> None:
    lease = StorageLockSettings(validity_ms=4_000, renew_interval_ms=400, poll_ms=20, safety_margin_ms=2_000)
    a = StorageBasedLock(table[0], NO_WAIT, lease)
    b = StorageBasedLock(table[1], NO_WAIT, lease)
    a.acquire()
    a.ensure_held()
    a._stop_renewal()  # as if the renewals could not reach the store any more
    time.sleep(2.2)  # inside the last 2 s of the lease
    with pytest.raises(LockLostError, match="within the 2000 ms margin"):
        a.ensure_held()
    # the lease itself still runs: nobody may take the lock yet, so no two writers overlap
    with pytest.raises(LockUnavailableError):
        b.acquire()
    a.release()
    b.acquire()
    b.release()


# ---------------------------------------------------------------- Hudi writers and hoodied


def test_a_lock_written_by_a_hudi_writer_blocks_hoodied(table: tuple[ObjectStorage, ObjectStorage]) -> None:
    storage = table[0]
    hudi_owner = str(uuid.uuid4())
    _hudi_writes(storage, False, _now_ms() + 60_000, hudi_owner)
    lock = StorageBasedLock(table[1], NO_WAIT, LEASE)
    with pytest.raises(LockUnavailableError, match=f"held by owner {hudi_owner}"):
        lock.acquire()
    # Hudi's unlock: expired=true over its own entry
    _hudi_writes(storage, True, _now_ms() + 60_000, hudi_owner)
    lock.acquire()
    assert _lock_file(storage)["owner"] == lock.owner
    lock.release()


def test_hudis_clock_drift_grace() -> None:
    """``isCurrentTimeCertainlyOlderThanDistributedTime``: held until validUntil + 500 ms."""
    data = StorageLockData(False, 10_000, "x")
    assert data.held_at(9_000) and data.held_at(10_500)
    assert not data.held_at(10_501)
    assert not StorageLockData(True, 10_000, "x").held_at(9_000)


def test_lock_file_parsing_follows_hudis_mapper() -> None:
    # unknown properties are ignored (FAIL_ON_UNKNOWN_PROPERTIES disabled)
    doc = b'{"owner":"o","validUntil":7,"expired":false,"auditVersion":2}'
    assert StorageLockData.parse(doc, "f") == StorageLockData(False, 7, "o")
    for bad, why in [
        (b'{"expired":false,"owner":"o"}', "missing validUntil"),
        (b'{"expired":null,"validUntil":7,"owner":"o"}', "'expired' is None"),
        (b'{"expired":false,"validUntil":null,"owner":"o"}', "'validUntil' is None"),
        (b"[1]", "not a JSON object"),
        (b"\x00garbage", "not JSON"),
    ]:
        with pytest.raises(HoodieFormatError, match=why):
            StorageLockData.parse(bad, "f")


def test_an_unreadable_lock_file_is_never_overwritten(table: tuple[ObjectStorage, ObjectStorage]) -> None:
    table[0].put(LOCK_FILE, b"not json")
    with pytest.raises(HoodieFormatError, match="not a Hudi storage lock file"):
        StorageBasedLock(table[1], NO_WAIT, LEASE).acquire()
    assert table[0].read(LOCK_FILE) == b"not json"


# ---------------------------------------------------------------- fencing


def test_fencing_tokens_strictly_increase_across_holders(table: tuple[ObjectStorage, ObjectStorage]) -> None:
    """Four threads, two clients, 20 holdings: one holder at a time, tokens in holding order."""
    tokens: list[int] = []
    inside = 0
    problems: list[str] = []
    guard = threading.Lock()

    def work(i: int) -> None:
        nonlocal inside
        lock = StorageBasedLock(table[i % 2], WAIT, LEASE)
        for _ in range(5):
            with lock:
                with guard:
                    inside += 1
                    if inside != 1:
                        problems.append(f"{inside} holders at once")
                    tokens.append(lock.fencing_token or 0)
                time.sleep(0.01)
                lock.ensure_held()
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not problems
    assert len(tokens) == 20 and all(x < y for x, y in zip(tokens, tokens[1:], strict=False)), tokens


def test_a_removed_fence_counter_never_hands_out_an_old_token(
    table: tuple[ObjectStorage, ObjectStorage],
) -> None:
    lock = StorageBasedLock(table[0], NO_WAIT, LEASE)
    first = lock.acquire()
    lock.release()
    second = lock.acquire()
    lock.release()
    assert second == first + 1
    assert table[0].delete(FENCE_FILE)
    third = lock.acquire()
    lock.release()
    assert third > second
    table[0].put(FENCE_FILE, b"garbled")
    assert lock.acquire() > third
    lock.release()


# ---------------------------------------------------------------- a holder killed with SIGKILL

_HOLDER = """
import sys, time
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.service.storage_lock import StorageBasedLock, StorageLockSettings

lease = StorageLockSettings(validity_ms=1500, renew_interval_ms=150, poll_ms=20)
lock = StorageBasedLock(ObjectStorage.connect(sys.argv[1]), LockSettings(wait_ms=10000, retries=0), lease)
token = lock.acquire()
print("HELD", token, lock.owner, flush=True)
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize("store", ["s3", "azure"])
def test_a_holder_killed_with_sigkill_is_taken_over_after_its_lease(
    store: str, request: pytest.FixtureRequest
) -> None:
    if store == "s3":
        uri = f"s3://{request.getfixturevalue('s3_env').new_bucket()}/t"
    else:
        uri = f"az://{request.getfixturevalue('azure_env').new_container()}/t"
    storage = ObjectStorage.connect(uri)
    # the fixtures put the store's credentials into os.environ; the holder inherits them
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, uri], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ), cwd=PROJECT)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline().split()
        assert line[:1] == ["HELD"], line
        held_token, held_owner = int(line[1]), line[2]
        time.sleep(2 * LEASE.validity_ms / 1000)  # the holder's renewals keep it alive past its lease
        with pytest.raises(LockUnavailableError, match=f"held by owner {held_owner}"):
            StorageBasedLock(storage, NO_WAIT, LEASE).acquire()
        holder.kill()
        holder.wait(10)
        assert _lock_file(storage)["owner"] == held_owner  # nobody released it: the lease must run out
        taker = StorageBasedLock(storage, WAIT, LEASE)
        token = taker.acquire()
        doc = _lock_file(storage)
        assert doc["owner"] == taker.owner and doc["expired"] is False
        assert token > held_token
        taker.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_lock_still_held_at_exit_is_released(s3_env: MotoServer) -> None:  # noqa: F811
    """Like Hudi's shutdown hook: a process that ends without releasing expires its lock."""
    uri = f"s3://{s3_env.new_bucket()}/t"
    script = _HOLDER.replace("while True:\n    time.sleep(1)\n", "")
    done = subprocess.run([sys.executable, "-c", script, uri], env=dict(os.environ), cwd=PROJECT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    owner = done.stdout.split()[2]
    doc = _lock_file(ObjectStorage.connect(uri))
    assert doc["owner"] == owner and doc["expired"] is True


# ---------------------------------------------------------------- --lock


def test_lock_option_auto_fits_the_table(tmp_path: Path) -> None:
    local = LocalStorage(str(tmp_path))
    on_gcs = ObjectStorage.over(MemoryStore(), "gs://lake/t")
    lock, factory = lock_from_option("auto", local)
    assert isinstance(lock, LocalFileLock) and factory is None
    lock, factory = lock_from_option("auto", on_gcs, NO_WAIT)
    assert isinstance(lock, StorageBasedLock) and factory is None and lock.settings == NO_WAIT
    lock, _ = lock_from_option("storage", on_gcs)
    assert isinstance(lock, StorageBasedLock)
    assert lock.lease == StorageLockSettings() and lock.lease.validity_ms == 300_000  # Hudi's defaults
    with pytest.raises(LockConfigError, match=r"^--lock storage: .* is not on an object store"):
        lock_from_option("storage", local)
    with pytest.raises(LockConfigError, match=r"^--lock local: gs://lake/t is not on a local file system"):
        lock_from_option("local", on_gcs)
    with pytest.raises(ValueError, match="'storage', 'filesystem.*' or 'auto'"):
        lock_from_option("bogus://x", local)


def test_lease_settings_follow_hudis_rules() -> None:
    assert StorageLockSettings().margin_ms == 60_000
    with pytest.raises(ValueError, match="at least 10 x the renew interval"):
        StorageLockSettings(validity_ms=10_000, renew_interval_ms=2_000)
    with pytest.raises(ValueError, match="safety margin"):
        StorageLockSettings(validity_ms=10_000, renew_interval_ms=1_000, safety_margin_ms=9_500)


def test_cli_lock_local_on_an_object_store_table_is_one_line(s3_env: MotoServer) -> None:  # noqa: F811
    bucket = s3_env.new_bucket()
    uri = f"s3://{bucket}/t"
    ObjectStorage.connect(uri).put(".hoodie/hoodie.properties", b"hoodie.table.name=t\n")
    command = [sys.executable, "-m", "hoodied.service.cli", "schedule", "clean", uri, "--lock", "local"]
    done = subprocess.run(command, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"hoodied: error: --lock local: {uri} is not on a local file system, where a file lock works; "
        "use --lock storage (Hudi's StorageBasedLockProvider), a redis:// URL or auto"
        f" (see: {TROUBLESHOOTING_URL}#lockconfigerror)\n"
    )
