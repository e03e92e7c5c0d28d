"""The table lock of Apache Hudi writers configured with the file-system lock provider.

Mirrors ``org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider`` for a table on
a local file system, so a Hudi writer with
``hoodie.write.lock.provider=org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider``
and hoodied (``--lock filesystem``) exclude each other. The facts it relies on, by Hudi class:

- File name (``FileSystemBasedLockProvider.LOCK_FILE_NAME``): ``lock``, in the folder
  ``hoodie.write.lock.filesystem.path`` (``LockConfiguration.FILESYSTEM_LOCK_PATH_PROP_KEY``).
- Folder when that key is unset (``FileSystemBasedLockProvider`` constructor): ``<base>/.hoodie``
  (``HoodieTableMetaClient.METAFOLDER_NAME``) in the 0.x releases and in the 1.x sources built on
  ``HoodieStorage``; the newest source changed it to ``<base>/.hoodie/.aux``
  (``AUXILIARYFOLDER_NAME``) to match ``getLockConfig``. ``getLockConfig(tablePath)`` has always
  used ``<base>/.hoodie/.aux`` with expiry 1 minute, wait 2000 ms and 30 retries, and Hudi
  configures it on its own when no provider is named: Flink writers that need a lock (the Flink
  write-client setup on ``FlinkOptions``), the Spark SQL procedures (``HoodieCLIUtils.getLockOptions``)
  and the hudi-utilities table-service jobs on a table with a metadata table
  (``UtilHelpers.addLockOptions``). The folder is thus not tied to the table
  version but to the Hudi build and the way the writer was configured, so hoodied by default
  takes **both** files, ``.hoodie/lock`` then ``.hoodie/.aux/lock`` (always in that order, so two
  hoodied processes cannot deadlock; a Hudi writer takes only one). ``path=DIR`` names one folder,
  as ``hoodie.write.lock.filesystem.path`` does.
- Content (``LockInfo.toString``, ``FileSystemBasedLockProvider.initLockInfo``): Jackson's
  default pretty printer of ``{"lockCreateTime": "yyyy-MM-dd HH:mm:ss.SSS" (JVM local time),
  "lockThreadName": <thread name>, "lockStacksInfo": ["<class>.<method> (<file>:<line>)", ...]}``.
  Hudi only reads it back as text into ``currentOwnerLockInfo`` for messages; it never parses it.
  hoodied writes the same shape, with a thread name unique to each lock object
  (``hoodied-<uuid> <host> <pid> <thread>``), and recognises its own file by the exact bytes.
- Acquire (``tryLock``, ``acquireLock``): when the file exists and is not expired the attempt
  fails (the wait argument is ignored; ``LockManager`` retries); otherwise the file is created
  with ``create(path, overwrite=false)`` and the content written into it. Hudi's own comment:
  the create is atomic on HDFS, while Hadoop's local file system checks then creates. hoodied's
  create is atomic: it writes the content to a temporary file and publishes it with ``link``,
  which fails when the name exists, so a reader never sees a half-written lock either.
- Expiry (``checkIfExpired``): ``hoodie.write.lock.filesystem.expire`` in minutes
  (``FILESYSTEM_LOCK_EXPIRE_PROP_KEY``, an integer, must be >= 0, default 0 = never). A lock is
  expired when ``now - modificationTime > expire * 60 000`` ms, judged by the taker's wall clock
  against the file's modification time; a stat failure counts as not expired. An expired file
  is deleted by whoever sees it, then created anew (no renewal exists in Hudi: a Hudi writer that
  holds longer than the expiry can lose its lock).
- Release (``unlock``): delete the file if it exists, without looking at whose it is.
  ``close`` deletes it too, held or not, and ``LockManager`` calls it right after every
  ``unlock`` (``closeQuietly``) and when the write client closes, also after a failed acquire.
  So a Hudi writer can remove a lock file hoodied created a moment earlier: ``ensure_held``
  sees the file gone and refuses the next write (``LockLostError``); the window left is a
  removal between that check and the write itself.
- Hadoop's ``LocalFileSystem`` is a ``ChecksumFileSystem``: a Hudi writer on ``file://`` leaves a
  ``.lock.crc`` beside ``lock``, and its delete removes both. hoodied removes a ``.lock.crc``
  together with a lock file it removes, so a later Hudi reader never checks a new lock against
  an old checksum (a missing checksum file is read without a check).

hoodied's additions (a Hudi writer neither sees nor needs them):

- Takeover and release never delete blindly. The file is renamed to a private name first, then
  the renamed file is compared with what was judged (same bytes, same modification time): when it
  is not (someone took or renewed it meanwhile) it is linked back under its name, so two takers of
  one expired lock cannot delete each other's fresh lock, and release removes only our own.
- Renewal: while held, a thread sets the modification time of our lock files to now every
  ``renew_s`` (a sixth of the expiry, at most 10 s; 10 s without an expiry, since other writers
  may use one, 1 minute for ``getLockConfig``), after checking the bytes are still ours.
  Writers judge expiry by that time, so a live hoodied holder is never taken as expired, while a
  dead one (kill -9) expires as a Hudi writer's would. With expiry 0 a dead holder's file stays
  until someone removes it by hand (``FileSystemBasedLockProvider``'s own note says the same).
- ``ensure_held()`` (right before each timeline write): every lock file still has our bytes, and
  when an expiry is configured, each is younger than the expiry minus ``margin_s`` (a quarter of
  the expiry, at most 15 s), both by its modification time and by this process's monotonic clock
  since the last renewal; older, another writer may already have judged it expired. Set
  ``expire_minutes`` to the smallest expiry any writer of the table uses (1 for
  ``getLockConfig``).
- ``holder()`` (``hoodied inspect``) only reads the lock files, in the order taken: the first one
  present names the holder (``lockThreadName``, the raw text when it is not ``LockInfo`` JSON),
  since its modification time; with an expiry configured it is expired by Hudi's rule above.
- Fencing token: the lock file holds no counter, so each new holder bumps
  ``.hoodie/.locks/hoodied.fence`` (the counter ``--lock local`` keeps: one counter per table,
  so tokens keep growing when a table moves between the two local locks), replaced atomically
  while the lock is held; a garbled counter restarts above the wall clock in milliseconds.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qsl

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
from hoodied.hoodie.storage import Storage

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LOCK_DIRS",
    "EXPIRE_KEY",
    "HUDI_KEYS",
    "LOCK_FILE_NAME",
    "PATH_KEY",
    "FileSystemLock",
    "filesystem_lock_args",
    "filesystem_lock_from_keys",
    "filesystem_lock_from_option",
]

#: ``LockConfiguration.FILESYSTEM_LOCK_PATH_PROP_KEY`` and ``FILESYSTEM_LOCK_EXPIRE_PROP_KEY``.
PATH_KEY = "hoodie.write.lock.filesystem.path"
EXPIRE_KEY = "hoodie.write.lock.filesystem.expire"
HUDI_KEYS = (PATH_KEY, EXPIRE_KEY)
# Settings of ``--lock filesystem?...`` and Hudi's keys they stand for.
_OPTION_KEYS = {"expire_minutes": EXPIRE_KEY, "path": PATH_KEY}
LOCK_FILE_NAME = "lock"
DEFAULT_LOCK_DIRS = (".hoodie", ".hoodie/.aux")
FENCE_FILE = ".hoodie/.locks/hoodied.fence"


@dataclass(frozen=True, slots=True)
class _Seen:
    """A lock file as read: its bytes and modification time (nanoseconds)."""

    data: bytes
    mtime_ns: int


def _read(path: str) -> _Seen | None:
    """The lock file at ``path``, or ``None`` when there is none."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            return _Seen(f.read(), st.st_mtime_ns)
    except FileNotFoundError:
        return None


def _remove_crc(path: str) -> None:
    crc = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.crc")
    try:
        os.unlink(crc)
    except FileNotFoundError:
        pass


def _remove_if_same(path: str, seen: _Seen) -> bool:
    """Remove the lock file at ``path`` only if it is still ``seen``; True when removed.

    Rename first (atomic), then compare what was renamed: a file that changed meanwhile is
    linked back under its name (which fails only if a third writer created one since: that
    writer then holds the lock and the file we moved is stale).
    """
    aside = f"{path}.{uuid.uuid4().hex}.hoodied-aside"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    try:
        moved = _read(aside)
        if moved == seen:
            _remove_crc(path)
            return True
        try:
            os.link(aside, path)
        except FileExistsError:
            log.warning("%s: a lock file changed while being removed; a newer holder has it", path)
        return False
    finally:
        os.unlink(aside)


def _lock_info(owner: str) -> bytes:
    """``LockInfo`` JSON as Jackson's default pretty printer lays it out (see the module docstring)."""
    now = datetime.now().astimezone()
    stamp = now.strftime("%Y-%m-%d %H:%M:%S.") + f"{now.microsecond // 1000:03d}"
    frames = []
    for frame in reversed(traceback.extract_stack()):  # innermost first, as Java's getStackTrace
        file = os.path.basename(frame.filename)
        frames.append(f"{file.removesuffix('.py')}.{frame.name} ({file}:{frame.lineno})")
    stacks = "[ " + ", ".join(json.dumps(s) for s in frames) + " ]" if frames else "[ ]"
    text = (
        "{\n"
        f'  "lockCreateTime" : {json.dumps(stamp)},\n'
        f'  "lockThreadName" : {json.dumps(owner)},\n'
        f'  "lockStacksInfo" : {stacks}\n'
        "}"
    )
    return text.encode("utf-8")


class FileSystemLock(TableLockBase):
    """Hudi's ``FileSystemBasedLockProvider`` lock file(s) of a table on a local file system."""

    def __init__(
        self,
        storage: Storage,
        settings: LockSettings | None = None,
        *,
        expire_s: float = 0.0,
        lock_dirs: tuple[str, ...] = DEFAULT_LOCK_DIRS,
    ) -> None:
        super().__init__(lock_key(storage.base_uri), settings)
        if expire_s < 0:
            raise LockConfigError(f"filesystem lock expiry must not be negative, got {expire_s}")
        if not lock_dirs:
            raise LockConfigError("filesystem lock needs at least one lock folder")
        paths = []
        for d in lock_dirs:
            folder = d if os.path.isabs(d) else storage.local_path(d)
            if folder is None:
                raise LockConfigError(
                    f"{storage.base_uri}: Hudi's file-system lock needs a table on a local file system"
                )
            paths.append(os.path.join(os.path.abspath(folder), LOCK_FILE_NAME))
        if len(set(paths)) != len(paths):
            raise LockConfigError(f"filesystem lock folders repeat: {lock_dirs}")
        fence = storage.local_path(FENCE_FILE)
        if fence is None:
            raise LockConfigError(f"{storage.base_uri}: the fencing counter needs a local file system")
        self.paths: tuple[str, ...] = tuple(paths)
        self.fence_path = fence
        self.expire_s = float(expire_s)
        self.margin_s = min(15.0, self.expire_s / 4)
        self.renew_s = min(10.0, self.expire_s / 6) if self.expire_s else 10.0
        self._owner = f"hoodied-{uuid.uuid4().hex} {socket.gethostname()} {os.getpid()}"
        self._mine: dict[str, bytes] = {}  # lock file path -> the bytes we wrote there
        self._renewed = 0.0  # time.monotonic() of the last renewal of every file
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _describe(self) -> str:
        return f"filesystem lock {' + '.join(self.paths)}"

    def location(self) -> LockLocation:
        return LockLocation("filesystem", " + ".join(self.paths))

    def holder(self, timeout_s: float = DEFAULT_INSPECT_TIMEOUT_S) -> LockHolder | None:
        """The first lock file present, read-only (see the module docstring)."""
        for path in self.paths:
            try:
                seen = _read(path)
            except OSError as exc:
                raise LockBackendError(f"{path}: {exc.strerror or exc}") from None
            if seen is None:
                continue
            text = seen.data.decode("utf-8", errors="replace")
            created = None
            try:
                info = json.loads(text)
                owner = info.get("lockThreadName") if isinstance(info, dict) else None
                created = info.get("lockCreateTime") if isinstance(info, dict) else None
            except ValueError:
                owner = None
            if not isinstance(owner, str) or not owner:
                owner = text.strip().splitlines()[0] if text.strip() else "(empty lock file)"
            mtime_ms = seen.mtime_ns / 1e6
            expired = bool(self.expire_s) and time.time() - mtime_ms / 1000 > self.expire_s
            notes = [f"lockCreateTime {created} (writer's local time)"] if isinstance(created, str) else []
            if self.expire_s:
                notes.append(f"expiry {self.expire_s / 60:g} min after the modification time")
            return LockHolder(
                owner=owner,
                location=LockLocation("filesystem", path),
                since=utc_from_ms(mtime_ms),
                until=utc_from_ms(mtime_ms + self.expire_s * 1000) if self.expire_s else None,
                expired=expired,
                detail="; ".join(notes) or None,
            )
        return None

    # ------------------------------------------------------------ acquire

    def _try_once(self, path: str) -> bool:
        """``tryLock`` for one file: take an expired file over, then create it exclusively."""
        seen = _read(path)
        if seen is not None:
            if not self.expire_s:
                return False
            age_s = time.time() - seen.mtime_ns / 1e9
            if age_s <= self.expire_s:
                return False
            if _remove_if_same(path, seen):
                log.warning(
                    "%s: removed an expired lock file (%.0f s old, expiry %.0f s)", path, age_s, self.expire_s
                )
            else:
                return False
        data = _lock_info(f"{self._owner} {threading.current_thread().name}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.hoodied-new"
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        _remove_crc(path)  # a checksum left by an earlier Hudi holder does not describe our bytes
        self._mine[path] = data
        return True

    def _try_acquire(self, wait_s: float) -> int | None:
        deadline = time.monotonic() + wait_s
        self._mine.clear()
        try:
            for path in self.paths:  # fixed order: no deadlock between hoodied processes
                while not self._try_once(path):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._remove_mine()
                        return None
                    time.sleep(min(self.settings.poll_ms / 1000, left))
            token = self._bump_fence()
        except OSError as exc:
            self._remove_mine()
            raise LockBackendError(f"{exc.filename or self.paths[0]}: {exc.strerror or exc}") from None
        self._renewed = time.monotonic()
        self._stop.clear()
        self._renewer = threading.Thread(
            target=self._renew_forever, name="hoodied-fs-lock-renew", daemon=True
        )
        self._renewer.start()
        return token

    def _bump_fence(self) -> int:
        return bump_fence_file(self.fence_path)

    def _holder(self) -> str | None:
        for path in self.paths:
            seen = _read(path)
            if seen is not None and seen.data != self._mine.get(path):
                try:
                    owner = json.loads(seen.data).get("lockThreadName")
                except (ValueError, AttributeError):
                    owner = None
                return f"{owner or 'unknown owner'} ({path})"
        return None

    # ------------------------------------------------------------ keep and check

    def _renew_once(self) -> str | None:
        """Set our files' modification time to now; why not, when one is no longer ours."""
        started = time.monotonic()
        for path, data in self._mine.items():
            seen = _read(path)
            if seen is None or seen.data != data:
                return f"{path} was removed or replaced by another owner"
            os.utime(path)
        self._renewed = started
        return None

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.renew_s):
            if self._lost is not None:
                return
            try:
                why = self._renew_once()
            except OSError as exc:  # keep trying: ensure_held judges the age
                log.warning("%s: renewal failed (%s), will retry", self._describe(), exc)
                continue
            if why is not None:
                self._mark_lost(why)
                return

    def _check_held(self) -> str | None:
        limit_s = self.expire_s - self.margin_s
        if self.expire_s and time.monotonic() - self._renewed > limit_s:
            return f"not renewed for {time.monotonic() - self._renewed:.1f} s (expiry {self.expire_s:.0f} s)"
        for path, data in self._mine.items():
            try:
                seen = _read(path)
            except OSError as exc:
                return f"{path}: cannot be read: {exc.strerror or exc}"
            if seen is None or seen.data != data:
                return f"{path} was removed or replaced by another owner"
            age_s = time.time() - seen.mtime_ns / 1e9
            if self.expire_s and age_s > limit_s:
                return f"{path} is {age_s:.1f} s old: others may take it as expired ({self.expire_s:.0f} s)"
        return None

    # ------------------------------------------------------------ release

    def _remove_mine(self) -> None:
        for path in reversed(list(self._mine)):
            data = self._mine.pop(path)
            try:
                seen = _read(path)
            except OSError as exc:
                log.warning("%s: cannot read the lock file to release it: %s", path, exc)
                continue
            if seen is None or seen.data != data or not _remove_if_same(path, seen):
                log.warning("%s: lock file was no longer ours; left in place", path)

    def _release(self) -> None:
        self._stop.set()
        renewer, self._renewer = self._renewer, None
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(timeout=5)
        self._remove_mine()


def filesystem_lock_args(keys: Mapping[str, str]) -> tuple[float, tuple[str, ...]]:
    """(expiry in seconds, lock folders) of Hudi's keys ``EXPIRE_KEY`` (whole minutes >= 0, 0 = never;
    default 0) and ``PATH_KEY`` (absolute, or relative to the table; default both of
    ``DEFAULT_LOCK_DIRS``). A bad value is a ``LockConfigError`` that names its key."""
    expire = keys.get(EXPIRE_KEY, "0")
    if not expire.isdigit():
        raise LockConfigError(f"{EXPIRE_KEY}={expire!r} must be a whole number of minutes >= 0")
    path = keys.get(PATH_KEY)
    if path is not None and not path:
        raise LockConfigError(f"{PATH_KEY} must not be empty")
    return int(expire) * 60.0, (path,) if path else DEFAULT_LOCK_DIRS


def filesystem_lock_from_keys(
    keys: Mapping[str, str], storage: Storage, settings: LockSettings | None = None
) -> FileSystemLock:
    """The lock of Hudi's ``hoodie.write.lock.filesystem.*`` keys (``filesystem_lock_args``), not yet
    acquired; a table not on a local file system is a ``LockConfigError``."""
    if storage.local_path() is None:
        raise LockConfigError(
            f"{storage.base_uri} is not on a local file system, where Hudi's FileSystemBasedLockProvider "
            "works here"
        )
    expire_s, dirs = filesystem_lock_args(keys)
    try:
        return FileSystemLock(storage, settings, expire_s=expire_s, lock_dirs=dirs)
    except StorageError as exc:
        raise LockConfigError(str(exc)) from None


def filesystem_lock_from_option(
    option: str, storage: Storage, settings: LockSettings | None = None
) -> FileSystemLock:
    """``filesystem`` or ``filesystem?expire_minutes=N&path=DIR`` -> the lock (not yet acquired).

    ``expire_minutes`` is ``hoodie.write.lock.filesystem.expire`` (an integer >= 0, 0 = never);
    ``path`` is ``hoodie.write.lock.filesystem.path`` (absolute, or relative to the table).
    """
    name, _, query = option.partition("?")
    if name != "filesystem":
        raise LockConfigError(f"--lock {option!r}: not a filesystem lock")
    if storage.local_path() is None:
        raise LockConfigError(
            f"--lock filesystem: {storage.base_uri} is not on a local file system, where Hudi's "
            "FileSystemBasedLockProvider works here; use --lock storage, a redis:// URL or auto"
        )
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise LockConfigError(f"--lock {option!r}: expected filesystem?expire_minutes=N&path=DIR") from None
    keys: dict[str, str] = {}
    for key, value in pairs:
        if key not in _OPTION_KEYS:
            raise LockConfigError(f"--lock {option!r}: unknown setting {key!r} (expire_minutes, path)")
        keys[_OPTION_KEYS[key]] = value
    try:
        return filesystem_lock_from_keys(keys, storage, settings)
    except LockConfigError as exc:
        raise LockConfigError(f"--lock {option!r}: {exc}") from None
