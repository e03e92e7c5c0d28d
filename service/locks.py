"""Table lock implementations: Redis (shared by hosts) and a local file lock (one host).

Both implement ``hoodie.locks.TableLock``, the synchronous interface the timeline writer
takes; ``lock_from_option`` turns the CLI's ``--lock`` value into one of them or into
Hudi's storage-based lock of a table on an object store (``service.storage_lock``):
``auto`` (the default) takes the file lock for a table on a local file system and the
storage-based lock for a table on an object store, where a file lock cannot work.

Redis lock protocol (one key per table, ``hoodie.locks.lock_key``):

- acquire: ``SET key value NX PX lease`` with a value unique to this holder
  (``<uuid> <host> <pid>``); on success the same Lua script ``INCR``s ``<key>:fence`` and
  returns the new fencing token, so "got the lock" and "got a token" are one atomic step.
- while held, a background task renews the lease every third of it with a compare-and-pexpire
  script; a renewal that finds another value (or none) marks the lock lost, and so does a
  local deadline (last renewal sent + lease) passing, which covers a paused process.
- ``ensure_held()`` (right before each timeline write) checks the local deadline, then runs the
  compare-and-pexpire script once more: ownership is confirmed by Redis itself and the lease
  is fresh for the write that follows. An unreachable Redis counts as lost: no write without
  confirmed ownership.
- release: compare-and-delete script, so a stale holder never deletes a newer holder's key.

Sync callers and asyncio: ``hoodie`` is synchronous and the daemon runs its blocking work
(timeline writes, planning) in worker threads (``anyio.to_thread.run_sync``). The Redis client
is redis-py's asyncio client, and it lives on one private event-loop thread owned by a
``RedisLockFactory`` (one per process and Redis URL). A ``RedisTableLock`` method called from
any thread hands a coroutine to that loop (``asyncio.run_coroutine_threadsafe``) and waits for
the result with a bounded timeout. The renewal tasks run on that loop too, so they keep
renewing while the worker thread is busy and do not depend on the daemon's own loop.
Async code must not call the blocking methods on its event loop; it calls them through
``anyio.to_thread.run_sync`` like any other blocking hoodie call.

Local lock: ``fcntl.flock`` on ``.hoodie/.locks/hoodied.lock`` inside the table, so two
hoodied processes on one host exclude each other (and so do two lock objects in one process:
flock locks belong to the open file). The kernel drops the lock when the process dies; the
lock is lost only if someone removes or replaces the lock file, which ``ensure_held`` detects.
The fencing counter is ``.hoodie/.locks/hoodied.fence``, bumped while holding the lock.
These two files are lock state, not table data, and need ``fcntl`` on a real file
descriptor, so they are opened directly rather than through ``hoodie.storage``.

Looking at a lock without taking it (``holder()``, for ``hoodied inspect``): Redis answers ``GET``
and ``PTTL`` of the key. Whether a ``flock`` is held cannot be asked without trying to take it, so
the local lock reads the kernel's lock table, ``/proc/locks`` (Linux: one line per lock, ``FLOCK``,
the holder's pid, ``MAJOR:MINOR:INODE`` of the file with the device numbers in hex; lines with
``->`` are waiters), and matches the lock file's device and inode.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from hoodied.hoodie.errors import LockConfigError, StorageError
from hoodied.hoodie.locks import (
    DEFAULT_INSPECT_TIMEOUT_S,
    LockBackendError,
    LockHolder,
    LockLocation,
    LockSettings,
    TableLockBase,
    bump_fence_file,
    lock_key,
    utc_from_ms,
)
from hoodied.hoodie.object_storage import ObjectStorage
from hoodied.hoodie.secrets import mask_secrets
from hoodied.hoodie.storage import Storage
from hoodied.service.fs_lock import filesystem_lock_from_option
from hoodied.service.storage_lock import StorageBasedLock
from hoodied.service.zookeeper_lock import zookeeper_lock_from_url

log = logging.getLogger(__name__)

__all__ = [
    "LocalFileLock",
    "RedisLockFactory",
    "RedisTableLock",
    "lock_from_option",
]

T = TypeVar("T")

# KEYS[1] lock key, KEYS[2] fencing counter; ARGV[1] holder value, ARGV[2] lease ms.
_ACQUIRE = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('incr', KEYS[2])
end
return 0
"""
# KEYS[1] lock key; ARGV[1] holder value, ARGV[2] lease ms.
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
# KEYS[1] lock key; ARGV[1] holder value.
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class _LoopThread:
    """An asyncio event loop running forever in a daemon thread; blocking callers submit coroutines."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking lock call made on the lock's own event loop")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise LockBackendError(f"no answer within {timeout_s:.1f} s") from None

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


class RedisLockFactory:
    """Owns the Redis client and its event-loop thread; hands out one ``RedisTableLock`` per table.

    ``url`` is a redis-py URL (``redis://HOST:PORT/DB``). Redis-py's own retries are switched
    off: the lock's ``LockSettings`` decide how often to try, so the bound is ours.
    """

    def __init__(
        self, url: str, settings: LockSettings | None = None, *, socket_timeout_ms: int = 2_000
    ) -> None:
        self.url = url
        self.settings = settings or LockSettings()
        self.socket_timeout_s = socket_timeout_ms / 1000
        self._loop = _LoopThread(f"hoodied-redis-lock {mask_secrets(url)}")
        self._client: aioredis.Redis | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"RedisLockFactory({mask_secrets(self.url)!r})"

    @property
    def where(self) -> str:
        return mask_secrets(self.url)

    def lock(self, base_uri: str, settings: LockSettings | None = None) -> RedisTableLock:
        """The lock of the table at ``base_uri`` (not yet acquired)."""
        if self._closed:
            raise RuntimeError("RedisLockFactory is closed")
        return RedisTableLock(self, base_uri, settings or self.settings)

    async def _get_client(self) -> aioredis.Redis:
        # created on the loop thread: redis-py's asyncio connections belong to the loop that made them
        if self._client is None:
            self._client = aioredis.Redis.from_url(
                self.url,
                socket_timeout=self.socket_timeout_s,
                socket_connect_timeout=self.socket_timeout_s,
                retry=Retry(NoBackoff(), 0),
            )
        return self._client

    def call(self, coro: Coroutine[Any, Any, T], extra_s: float = 0.0) -> T:
        """Run ``coro`` on the lock loop and wait (bounded); Redis errors become ``LockBackendError``.

        The wait allows two socket timeouts plus ``extra_s`` (the time the coroutine itself may wait).
        """
        try:
            return self._loop.run(coro, self.socket_timeout_s * 2 + 1 + extra_s)
        except RedisError as exc:
            raise LockBackendError(f"{self.where}: {type(exc).__name__}: {str(exc).rstrip('.')}") from None
        except OSError as exc:
            raise LockBackendError(f"{self.where}: {exc}") from None

    async def _eval(self, script: str, keys: list[str], args: list[Any]) -> Any:
        client = await self._get_client()
        return await client.eval(script, len(keys), *keys, *args)

    def close(self) -> None:
        """Close the client and stop the loop thread; held locks are left to expire."""
        if self._closed:
            return
        self._closed = True
        if self._client is not None:
            try:
                self._loop.run(self._client.aclose(), 5)
            except Exception as exc:  # closing a broken connection may fail; nothing to save
                log.debug("closing redis client: %s", exc)
        self._loop.stop()

    def __enter__(self) -> RedisLockFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RedisTableLock(TableLockBase):
    """A table lock in Redis with a lease, renewal, fencing token and compare-and-delete release."""

    def __init__(self, factory: RedisLockFactory, base_uri: str, settings: LockSettings) -> None:
        super().__init__(lock_key(base_uri), settings)
        self._factory = factory
        self.fence_key = self._key + ":fence"
        self._value = f"{uuid.uuid4().hex} {socket.gethostname()} {os.getpid()}"
        self._valid_until = 0.0  # time.monotonic() after which our lease may have ended
        self._renewal: asyncio.Task[None] | None = None

    def _describe(self) -> str:
        return f"{self._factory.where} {self._key}"

    def location(self) -> LockLocation:
        return LockLocation("redis", f"{self._factory.where} {self._key}")

    def holder(self, timeout_s: float = DEFAULT_INSPECT_TIMEOUT_S) -> LockHolder | None:
        """``GET`` and ``PTTL`` of the key, read-only. The wait is bounded by the factory's socket
        timeout (two of them plus a second), which is shorter than ``timeout_s`` by default."""
        value, pttl = self._factory.call(self._holder_async())
        if value is None:
            return None
        # PTTL: -1 no expiry (not set by hoodied), -2 gone meanwhile
        if pttl == -2:
            return None
        until = utc_from_ms(time.time() * 1000 + pttl) if pttl >= 0 else None
        return LockHolder(
            owner=value.decode(errors="replace"),
            location=self.location(),
            until=until,
            detail=f"lease ends in {pttl} ms" if pttl >= 0 else "key has no expiry",
        )

    # ------------------------------------------------------------ acquire

    def _try_acquire(self, wait_s: float) -> int | None:
        return self._factory.call(self._acquire_async(wait_s), extra_s=wait_s)

    async def _acquire_async(self, wait_s: float) -> int | None:
        lease = self.settings.lease_ms
        deadline = time.monotonic() + wait_s
        while True:
            sent = time.monotonic()
            keys = [self._key, self.fence_key]
            token = int(await self._factory._eval(_ACQUIRE, keys, [self._value, lease]))
            if token:
                self._valid_until = sent + lease / 1000
                self._renewal = asyncio.get_running_loop().create_task(self._renew_forever())
                return token
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await asyncio.sleep(min(self.settings.poll_ms / 1000, left))

    def _holder(self) -> str | None:
        try:
            value, pttl = self._factory.call(self._holder_async())
        except LockBackendError:
            return None
        if value is None:
            return None
        return f"{value.decode(errors='replace')} (lease ends in {pttl} ms)"

    async def _holder_async(self) -> tuple[bytes | None, int]:
        client = await self._factory._get_client()
        value = await client.get(self._key)
        pttl = await client.pttl(self._key)
        # the client is made without decode_responses: values come back as bytes
        return (value.encode() if isinstance(value, str) else value), int(pttl)

    # ------------------------------------------------------------ keep and check

    async def _renew_once(self) -> bool:
        """Compare-and-pexpire; True when the key still holds our value (lease extended)."""
        sent = time.monotonic()
        ok = int(await self._factory._eval(_RENEW, [self._key], [self._value, self.settings.lease_ms]))
        if ok:
            self._valid_until = sent + self.settings.lease_ms / 1000
        return bool(ok)

    async def _renew_forever(self) -> None:
        # runs until release() cancels it or a loss is seen
        interval = self.settings.lease_ms / 3000
        while True:
            await asyncio.sleep(interval)
            if self._lost is not None:
                return
            if time.monotonic() >= self._valid_until:
                self._mark_lost("lease ran out before it could be renewed")
                return
            try:
                if not await self._renew_once():
                    self._mark_lost("lease renewal found the key gone or owned by another holder")
                    return
            except (RedisError, OSError) as exc:
                # keep trying until the local deadline says the lease may be gone
                log.warning("%s: lease renewal failed (%s), will retry", self._describe(), exc)

    def _check_held(self) -> str | None:
        left_ms = (self._valid_until - time.monotonic()) * 1000
        if left_ms <= 0:
            return f"lease ended {-left_ms:.0f} ms ago without renewal: process paused or Redis unreachable"
        try:
            ok = self._factory.call(self._renew_once())
        except LockBackendError as exc:
            return f"ownership cannot be confirmed: {exc}"
        if not ok:
            return "the key is gone or owned by another holder"
        return None

    # ------------------------------------------------------------ release

    def _release(self) -> None:
        self._factory.call(self._release_async())

    async def _release_async(self) -> None:
        task, self._renewal = self._renewal, None
        if task is not None:
            task.cancel()
        deleted = int(await self._factory._eval(_RELEASE, [self._key], [self._value]))
        if not deleted:
            log.warning("%s: released a lock that was no longer ours (lease had ended)", self._describe())


class LocalFileLock(TableLockBase):
    """A ``flock`` on ``.hoodie/.locks/hoodied.lock``: excludes hoodied processes of one host."""

    LOCK_FILE = ".hoodie/.locks/hoodied.lock"
    FENCE_FILE = ".hoodie/.locks/hoodied.fence"

    def __init__(self, storage: Storage, settings: LockSettings | None = None) -> None:
        super().__init__(lock_key(storage.base_uri), settings)
        path = storage.local_path(self.LOCK_FILE)
        fence = storage.local_path(self.FENCE_FILE)
        if path is None or fence is None:
            raise StorageError(f"{storage.base_uri}: the local lock needs a table on a local file system")
        self.path = path
        self.fence_path = fence
        self._fd: int | None = None

    def _describe(self) -> str:
        return f"local lock {self.path}"

    def location(self) -> LockLocation:
        return LockLocation("local", self.path)

    def holder(self, timeout_s: float = DEFAULT_INSPECT_TIMEOUT_S) -> LockHolder | None:
        """The holder per ``/proc/locks`` (see the module docstring); the lock file is only read."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LockBackendError(f"{self.path}: {exc.strerror or exc}") from None
        pids = _flock_holders(st.st_dev, st.st_ino)
        if not pids:
            return None
        return LockHolder(
            owner=self._holder() or "(lock file empty: the holder has not written it yet)",
            location=self.location(),
            since=utc_from_ms(st.st_mtime_ns / 1e6),  # the holder writes the file right after taking it
            detail=f"flock held by pid {', '.join(pids)}",
        )

    def _open_locked(self) -> int | None:
        """Open the lock file and try flock once; the fd when locked (on the file now at ``path``)."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if self._same_file(fd):
            return fd
        # the file was removed or replaced between open and flock: our lock guards nothing
        os.close(fd)
        return None

    def _same_file(self, fd: int) -> bool:
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)

    def _try_acquire(self, wait_s: float) -> int | None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fd = self._open_locked()
            except OSError as exc:
                raise LockBackendError(f"{self.path}: {exc.strerror or exc}") from None
            if fd is not None:
                try:
                    token = self._bump_fence()
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{socket.gethostname()} {os.getpid()} token {token}\n".encode(), 0)
                except OSError as exc:
                    os.close(fd)
                    raise LockBackendError(f"{self.fence_path}: {exc.strerror or exc}") from None
                self._fd = fd
                return token
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(self.settings.poll_ms / 1000, left))

    def _bump_fence(self) -> int:
        return bump_fence_file(self.fence_path)

    def _holder(self) -> str | None:
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                text = f.read().strip()
        except OSError:
            return None
        return text or None

    def _check_held(self) -> str | None:
        fd = self._fd
        if fd is None:
            return "lock file is not open"
        if not self._same_file(fd):
            return f"{self.path} was removed or replaced by someone else"
        return None

    def _release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def _flock_holders(dev: int, ino: int) -> list[str]:
    """Pids holding a ``flock`` on the file (``dev``, ``ino``), from the kernel's ``/proc/locks``."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise LockBackendError(
            f"cannot tell whether the flock is held without taking it: /proc/locks: {exc.strerror or exc}"
        ) from None
    wanted = (os.major(dev), os.minor(dev), ino)
    pids = []
    for line in lines:
        fields = line.split()
        # "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END"; a waiter has "->" after "N:"
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            where = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        if where == wanted:
            pids.append(fields[4])
    return pids


def lock_from_option(
    option: str, storage: Storage, settings: LockSettings | None = None
) -> tuple[TableLockBase, RedisLockFactory | None]:
    """``--lock`` value -> (lock, factory to close afterwards or ``None``).

    ``auto`` is ``local`` for a table on a local file system and ``storage`` for a table on an
    object store; ``local`` is the file lock; ``storage`` Hudi's storage-based lock (the
    ``.hoodie/.locks/table_lock.json`` of ``StorageBasedLockProvider``); ``redis://HOST:PORT/DB``
    (or ``rediss://``) the Redis lock; ``zookeeper://HOST:PORT/BASE_PATH?lock_key=KEY`` Hudi's
    ``ZookeeperBasedLockProvider`` lock (``service.zookeeper_lock``; ``lock_key`` defaults to the
    table name); ``dynamodb://TABLE?region=...&partition_key=...&endpoint_url=...`` Hudi's
    ``DynamoDBBasedLockProvider`` lock (``service.dynamodb_lock``; ``partition_key`` defaults to the
    table name). A lock that cannot work on the table is refused with ``LockConfigError`` before
    anything is locked.
    """
    if option == "auto":
        option = "storage" if isinstance(storage, ObjectStorage) else "local"
    if option == "local":
        if storage.local_path() is None:
            raise LockConfigError(
                f"--lock local: {storage.base_uri} is not on a local file system, where a file lock works; "
                "use --lock storage (Hudi's StorageBasedLockProvider), a redis:// URL or auto"
            )
        return LocalFileLock(storage, settings), None
    if option == "storage":
        if not isinstance(storage, ObjectStorage):
            raise LockConfigError(
                f"--lock storage: {storage.base_uri} is not on an object store (s3://, gs://, az://), "
                "where Hudi's storage-based lock works; use --lock local, a redis:// URL or auto"
            )
        return StorageBasedLock(storage, settings), None
    if option == "filesystem" or option.startswith("filesystem?"):
        # Hudi's FileSystemBasedLockProvider lock file(s); expire_minutes / path as its config keys
        return filesystem_lock_from_option(option, storage, settings), None
    if option.startswith("zookeeper://"):
        # Hudi's ZookeeperBasedLockProvider (Curator InterProcessMutex); a bad URL is a ValueError
        return zookeeper_lock_from_url(option, storage, settings), None
    if option.startswith("dynamodb://"):
        # Hudi's DynamoDBBasedLockProvider (AWS DynamoDB lock client items); a bad URL is a ValueError
        # boto3 takes 0.2 s to import: only the processes that use this lock pay it
        from hoodied.service.dynamodb_lock import dynamodb_lock_from_url

        return dynamodb_lock_from_url(option, storage, settings), None
    if option.startswith(("redis://", "rediss://", "unix://")):
        factory = RedisLockFactory(option, settings)
        return factory.lock(storage.base_uri), factory
    raise ValueError(
        f"--lock {option!r}: expected 'local' or a redis://HOST:PORT/DB URL, "
        "a zookeeper://HOST:PORT/BASE_PATH?lock_key=KEY URL, "
        "a dynamodb://TABLE?region=REGION&partition_key=KEY&endpoint_url=URL URL, or 'storage', "
        "'filesystem[?expire_minutes=N&path=DIR]' or 'auto'"
    )
