"""Table locks: in-process, local file lock and Redis (a real redis-server on loopback)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from hoodied.hoodie.errors import LockLostError, LockUnavailableError
from hoodied.hoodie.locks import InProcessLock, LockSettings, TableLock, lock_key
from hoodied.hoodie.storage import LocalStorage
from hoodied.service.locks import LocalFileLock, RedisLockFactory, lock_from_option
from tests.helpers.redis_server import RedisServer, redis_server  # noqa: F401  (fixture)

FAST = LockSettings(wait_ms=200, retries=1, retry_interval_ms=50, lease_ms=1_000, poll_ms=20)


def _table(tmp_path: Path) -> LocalStorage:
    (tmp_path / "t" / ".hoodie").mkdir(parents=True)
    return LocalStorage(str(tmp_path / "t"))


def test_lock_key_grammar() -> None:
    assert lock_key("/data/t1/") == "hoodied:lock:{/data/t1}"
    assert lock_key("s3://b/t") == "hoodied:lock:{s3://b/t}"


def test_settings_validation() -> None:
    with pytest.raises(ValueError):
        LockSettings(lease_ms=10)
    with pytest.raises(ValueError):
        LockSettings(retries=-1)


# ---------------------------------------------------------------- in-process


def test_in_process_lock_excludes_threads_and_counts_tokens(tmp_path: Path) -> None:
    a = InProcessLock(str(tmp_path), FAST)
    b = InProcessLock(str(tmp_path), FAST)
    assert isinstance(a, TableLock)
    t1 = a.acquire()
    with pytest.raises(LockUnavailableError, match="not acquired after 2 attempt"):
        b.acquire()
    a.ensure_held()
    a.release()
    t2 = b.acquire()
    assert t2 > t1
    b.release()
    with pytest.raises(LockLostError, match="not held"):
        b.ensure_held()


def test_lock_is_not_reentrant(tmp_path: Path) -> None:
    lock = InProcessLock(str(tmp_path / "x"), FAST)
    with lock:
        with pytest.raises(RuntimeError, match="not re-entrant"):
            lock.acquire()
    assert not lock.is_held
    lock.release()  # releasing twice is harmless


# ---------------------------------------------------------------- local file lock


def test_local_lock_excludes_second_holder_and_fences(tmp_path: Path) -> None:
    storage = _table(tmp_path)
    a = LocalFileLock(storage, FAST)
    b = LocalFileLock(storage, FAST)
    with a:
        assert a.fencing_token == 1
        assert os.path.exists(os.path.join(storage.base_uri, ".hoodie/.locks/hoodied.lock"))
        started = time.monotonic()
        with pytest.raises(LockUnavailableError) as err:
            b.acquire()
        assert time.monotonic() - started < 2
        assert "local lock" in str(err.value) and f"{os.getpid()} token 1" in str(err.value)
        a.ensure_held()
    with b:
        assert b.fencing_token == 2


def test_local_lock_waits_for_release(tmp_path: Path) -> None:
    storage = _table(tmp_path)
    a = LocalFileLock(storage, FAST)
    b = LocalFileLock(storage, LockSettings(wait_ms=3_000, retries=0, poll_ms=20))
    a.acquire()
    threading.Timer(0.3, a.release).start()
    started = time.monotonic()
    b.acquire()
    assert 0.2 < time.monotonic() - started < 2.5
    b.release()


def test_local_lock_lost_when_lock_file_replaced(tmp_path: Path) -> None:
    storage = _table(tmp_path)
    a = LocalFileLock(storage, FAST)
    a.acquire()
    os.unlink(a.path)  # someone removed the lock file: a new holder could lock a new file
    b = LocalFileLock(storage, FAST)
    b.acquire()
    with pytest.raises(LockLostError, match="removed or replaced"):
        a.ensure_held()
    with pytest.raises(LockLostError):  # stays lost
        a.ensure_held()
    b.ensure_held()
    a.release()
    b.ensure_held()  # a's release did not free b's lock
    b.release()


def test_lock_from_option(tmp_path: Path) -> None:
    storage = _table(tmp_path)
    lock, factory = lock_from_option("local", storage)
    assert isinstance(lock, LocalFileLock) and factory is None
    with pytest.raises(ValueError, match="expected 'local' or a redis://"):
        lock_from_option("bogus://x", storage)


# ---------------------------------------------------------------- redis


def test_redis_acquire_release_fencing(redis_server: RedisServer) -> None:  # noqa: F811
    with RedisLockFactory(redis_server.url, FAST) as factory:
        a = factory.lock("/tables/t1")
        b = factory.lock("/tables/t1")
        other = factory.lock("/tables/t2")
        assert a.acquire() == 1
        assert other.acquire() == 1  # a different table has its own key and counter
        with pytest.raises(LockUnavailableError) as err:
            b.acquire()
        assert "held by" in str(err.value) and "lease ends in" in str(err.value)
        a.ensure_held()
        a.release()
        assert b.acquire() == 2
        b.release()
        other.release()
        assert redis_server.command("EXISTS", a.key).strip() == b":0"


def test_redis_lease_is_renewed_while_held(redis_server: RedisServer) -> None:  # noqa: F811
    settings = LockSettings(wait_ms=100, retries=0, lease_ms=300, poll_ms=20)
    with RedisLockFactory(redis_server.url, settings) as factory:
        a = factory.lock("/tables/t1")
        a.acquire()
        time.sleep(1.2)  # four leases: only renewal keeps it
        a.ensure_held()
        with pytest.raises(LockUnavailableError):
            factory.lock("/tables/t1").acquire()
        a.release()


def test_redis_takeover_is_detected_and_stale_release_keeps_new_key(
    redis_server: RedisServer,  # noqa: F811
) -> None:
    with RedisLockFactory(redis_server.url, FAST) as factory:
        a = factory.lock("/tables/t1")
        a.acquire()
        # the lease ended and someone else took the key (simulated without waiting)
        redis_server.command("SET", a.key, "someone-else", "PX", "60000")
        with pytest.raises(LockLostError, match="owned by another holder"):
            a.ensure_held()
        assert not a.is_held
        a.release()
        assert redis_server.command("GET", a.key).endswith(b"someone-else\r\n")


def test_redis_down_gives_clear_error_then_recovers(redis_server: RedisServer) -> None:  # noqa: F811
    settings = LockSettings(wait_ms=200, retries=2, retry_interval_ms=100, lease_ms=2_000, poll_ms=20)
    with RedisLockFactory(redis_server.url, settings, socket_timeout_ms=500) as factory:
        lock = factory.lock("/tables/t1")
        redis_server.stop()
        started = time.monotonic()
        with pytest.raises(LockUnavailableError) as err:
            lock.acquire()
        elapsed = time.monotonic() - started
        assert elapsed < 5, f"bounded retries took {elapsed:.1f} s"
        msg = str(err.value)
        assert "after 3 attempt(s)" in msg and "lock service unreachable" in msg and "\n" not in msg
        assert not lock.is_held
        redis_server.start()  # same port
        assert lock.acquire() >= 1
        lock.ensure_held()
        lock.release()


def test_redis_down_while_held_refuses_writes(redis_server: RedisServer) -> None:  # noqa: F811
    with RedisLockFactory(redis_server.url, FAST, socket_timeout_ms=500) as factory:
        lock = factory.lock("/tables/t1")
        lock.acquire()
        redis_server.stop()
        with pytest.raises(LockLostError, match="cannot be confirmed"):
            lock.ensure_held()
        lock.release()  # best effort, logs only
        redis_server.start()
