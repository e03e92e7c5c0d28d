"""The table lock on an object store, shared with Apache Hudi writers: Hudi's storage-based lock.

Mirrors ``org.apache.hudi.client.transaction.lock.StorageBasedLockProvider`` (RFC-91, Hudi
1.0.2+ for S3 and GCS, 1.2.0 for Azure), so a Hudi writer configured with
``hoodie.write.lock.provider=org.apache.hudi.client.transaction.lock.StorageBasedLockProvider``
and hoodied exclude each other on the same table. The facts it relies on, by Hudi class:

- Path (``StorageBasedLockProvider.DEFAULT_TABLE_LOCK_FILE_NAME``,
  ``HoodieTableMetaClient.LOCKS_FOLDER_NAME``): ``<base path>/.hoodie/.locks/table_lock.json``,
  one lock per table.
- Content (``models.StorageLockData``, written by ``models.StorageLockFile``'s Jackson mapper):
  a JSON object ``{"expired": <boolean>, "validUntil": <epoch milliseconds, long>, "owner":
  <string>}``. All three properties are required; unknown properties are ignored on read and a
  null ``expired`` or ``validUntil`` is refused. Each provider instance's owner is
  ``UUID.randomUUID().toString()`` (36 characters, lower-case hex with dashes); hoodied writes
  exactly these three properties, in this order, with a fresh UUID per lock object.
- Version of the file (``S3StorageLockClient``, ``GCSStorageLockClient``, ``AzureStorageLockClient``):
  the S3 / Azure ETag, the GCS generation. ``hoodie.object_storage.ObjectStorage.read_versioned``
  and ``put_if_version`` carry it.
- Held or free (``StorageBasedLockProvider.isLockStillValid`` and
  ``isCurrentTimeCertainlyOlderThanDistributedTime``): a lock file is held while ``expired`` is
  false and the reader's wall clock ``now <= validUntil + 500`` ms (``CLOCK_DRIFT_BUFFER_MS``);
  past that it is a dangling lock anyone may take. Liveness is judged by wall clocks only.
- Acquire (``StorageBasedLockProvider.tryLock``): read the file; when absent, expired or dangling,
  write ``{"expired": false, "validUntil": now + validity, "owner": me}`` with a conditional
  create (S3/Azure ``If-None-Match: *``, GCS generation 0) or a conditional overwrite of the
  version read (``If-Match`` / generation match). A precondition failure means another writer
  won. A blocking attempt tries again every ``DEFAULT_LOCK_ACQUIRE_RETRY_WAIT_TIME_IN_MILLIS``
  (1000 ms).
- Renew (``StorageBasedLockProvider.renewLock``, run by ``LockProviderHeartbeatManager``): every
  ``hoodie.write.lock.storage.renew.interval.secs`` (default 30; ``…heartbeat.poll.secs`` in the
  0.x backport) rewrite ``{"expired": false, "validUntil": now + validity}`` conditional on the
  holder's last version. A precondition failure means the lock was taken: renewal stops.
- Validity (``config.StorageBasedLockConfig``): ``hoodie.write.lock.storage.validity.timeout.secs``,
  default 300; Hudi refuses a validity under 10 x the renew interval or under 10 s.
- Release (``StorageBasedLockProvider.unlock`` / ``tryExpireCurrentLock``): stop renewing, then
  write ``{"expired": true, "validUntil": <the last validUntil>, "owner": me}`` conditional on the
  holder's version. The file is never deleted.

hoodied's own additions (Hudi writers neither read nor change them):

- ``ensure_held()`` refuses a write once this holder is within a safety margin of its lease end.
  Others judge the lease by their wall clocks, so the check uses both this host's wall clock
  against ``validUntil`` and a monotonic deadline (request sent + validity), which a paused
  process or a clock step cannot stretch; then it reads the lock file and checks the owner is
  still this holder. The margin defaults to a fifth of the validity: Hudi gives one storage call
  a fifth of the validity (``S3StorageLockClient``'s call timeout), and the timeline write that
  follows the check is such a call. Two writers therefore never overlap while their wall clocks
  differ by less than the margin plus Hudi's 500 ms buffer minus the write's own duration (keep
  NTP on every writer, as Hudi requires).
- Fencing token: ETags are not ordered, so each new holder bumps a counter object next to the
  lock, ``.hoodie/.locks/hoodied.fence`` (``<n> <owner>``), with a conditional overwrite of the
  version read; a lost race reads again and bumps again, so each token is handed out once and
  tokens only grow. An absent or unreadable counter restarts at the wall clock in microseconds:
  a counter started at the clock and bumped once per holding stays below the clock, because no
  two holdings are a microsecond apart (each takes several storage round trips), so a removed
  counter never hands out an old token (milliseconds would not do: a fast store, or the
  in-memory one, hands over the lock more than once per millisecond).
- A lock file hoodied cannot parse is neither taken over nor overwritten: ``HoodieFormatError``.
- ``holder()`` (``hoodied inspect``) only reads the lock file: a file marked ``expired`` was
  released and counts as free; otherwise its owner and ``validUntil``, expired by Hudi's rule above
  when the reader's clock is past ``validUntil`` + 500 ms (a dangling lock).
- At interpreter exit, locks still held are released (Hudi's provider registers a JVM shutdown
  hook that expires its lock), so a command that ends without releasing does not keep Hudi
  writers out for a whole validity period. A killed process leaves its lock to run out.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from hoodied.hoodie import config_keys
from hoodied.hoodie.errors import HoodieFormatError, PreconditionFailedError, StorageError
from hoodied.hoodie.locks import (
    DEFAULT_INSPECT_TIMEOUT_S,
    LockBackendError,
    LockHolder,
    LockLocation,
    LockSettings,
    TableLockBase,
    lock_key,
    utc_from_ms,
)
from hoodied.hoodie.object_storage import ObjectStorage, ObjectVersion

log = logging.getLogger(__name__)

__all__ = [
    "CLOCK_DRIFT_BUFFER_MS",
    "FENCE_FILE",
    "HUDI_KEYS",
    "LOCK_FILE",
    "RENEW_INTERVAL_KEYS",
    "VALIDITY_KEY",
    "StorageBasedLock",
    "StorageLockData",
    "StorageLockSettings",
]

#: Hudi's lock file, relative to the table's base path.
LOCK_FILE = ".hoodie/.locks/table_lock.json"
#: hoodied's fencing counter, next to it.
FENCE_FILE = ".hoodie/.locks/hoodied.fence"
#: ``StorageBasedLockConfig``: the lease's validity and renewal period, in whole seconds (the
#: 0.x backport names the renewal ``…heartbeat.poll.secs``; the first name given is read, as Hudi does).
VALIDITY_KEY = config_keys.HUDI_KEYS.STORAGE_LOCK_VALIDITY_TIMEOUT.key
RENEW_INTERVAL_KEYS = config_keys.HUDI_KEYS.STORAGE_LOCK_RENEW_INTERVAL.names
#: Every key of ``StorageBasedLockProvider`` hoodied reads.
HUDI_KEYS = (VALIDITY_KEY, *RENEW_INTERVAL_KEYS)
#: A lock is dangling once the reader's wall clock is this far past its ``validUntil``.
CLOCK_DRIFT_BUFFER_MS = 500


@dataclass(frozen=True, slots=True)
class StorageLockSettings:
    """The lease of a storage-based lock; defaults are Hudi's."""

    validity_ms: int = 300_000
    """``hoodie.write.lock.storage.validity.timeout.secs`` (300 s)."""
    renew_interval_ms: int = 30_000
    """``hoodie.write.lock.storage.renew.interval.secs`` (30 s)."""
    poll_ms: int = 1_000
    """How often a waiting attempt reads the lock file again (Hudi: 1000 ms)."""
    safety_margin_ms: int | None = None
    """``ensure_held()`` refuses writes this long before the lease ends; ``None`` = validity / 5."""

    def __post_init__(self) -> None:
        if self.renew_interval_ms <= 0 or self.poll_ms <= 0:
            raise ValueError("storage lock renew interval and poll interval must be positive")
        # Hudi's own rule (StorageBasedLockConfig): a lease survives nine missed renewals.
        if self.validity_ms < 10 * self.renew_interval_ms:
            raise ValueError(
                f"storage lock validity {self.validity_ms} ms must be at least 10 x the renew interval "
                f"({self.renew_interval_ms} ms)"
            )
        # right before a renewal a healthy holder has validity - renew interval left: that must stay
        # above the margin, or ensure_held() would refuse writes between every two renewals
        if not 0 <= self.margin_ms < self.validity_ms - self.renew_interval_ms:
            raise ValueError(
                f"storage lock safety margin {self.margin_ms} ms must leave more than one renew interval "
                f"of the {self.validity_ms} ms validity"
            )

    @property
    def margin_ms(self) -> int:
        return self.validity_ms // 5 if self.safety_margin_ms is None else self.safety_margin_ms

    @classmethod
    def from_hudi_keys(cls, keys: Mapping[str, str]) -> StorageLockSettings:
        """The lease of Hudi's keys (``VALIDITY_KEY``, ``RENEW_INTERVAL_KEYS``; whole seconds), Hudi's
        defaults for the keys not given. A bad value is a ``ValueError`` that names its key."""

        def seconds(key: str) -> int | None:
            text = keys.get(key)
            if text is None:
                return None
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"{key}={text!r} is not a whole number of seconds") from None
            if value <= 0:
                raise ValueError(f"{key}={text!r} must be positive")
            return value * 1000

        given: dict[str, int] = {}
        validity = seconds(VALIDITY_KEY)
        if validity is not None:
            given["validity_ms"] = validity
        renew = next((ms for ms in map(seconds, RENEW_INTERVAL_KEYS) if ms is not None), None)
        if renew is not None:
            given["renew_interval_ms"] = renew
        return cls(**given)


@dataclass(frozen=True, slots=True)
class StorageLockData:
    """The content of Hudi's lock file (``StorageLockData``)."""

    expired: bool
    valid_until_ms: int
    owner: str | None

    def to_json(self) -> bytes:
        doc = {"expired": self.expired, "validUntil": self.valid_until_ms, "owner": self.owner}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, data: bytes, where: str) -> StorageLockData:
        """Read as Hudi's Jackson mapper does: the three properties required, others ignored."""
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise HoodieFormatError(f"{where}: not a Hudi storage lock file (not JSON: {exc})") from None
        if not isinstance(doc, dict):
            raise HoodieFormatError(f"{where}: not a Hudi storage lock file (not a JSON object)")
        missing = [k for k in ("expired", "validUntil", "owner") if k not in doc]
        if missing:
            raise HoodieFormatError(f"{where}: not a Hudi storage lock file (missing {', '.join(missing)})")
        expired, valid_until, owner = doc["expired"], doc["validUntil"], doc["owner"]
        if not isinstance(expired, bool):
            raise HoodieFormatError(f"{where}: lock file 'expired' is {expired!r}, not a boolean")
        if isinstance(valid_until, bool) or not isinstance(valid_until, int):
            raise HoodieFormatError(f"{where}: lock file 'validUntil' is {valid_until!r}, not epoch ms")
        if owner is not None and not isinstance(owner, str):
            raise HoodieFormatError(f"{where}: lock file 'owner' is {owner!r}, not a string")
        return cls(expired, valid_until, owner)

    def held_at(self, now_ms: int) -> bool:
        """Whether a reader whose wall clock says ``now_ms`` must treat the lock as held (Hudi's rule)."""
        return not self.expired and now_ms <= self.valid_until_ms + CLOCK_DRIFT_BUFFER_MS


# Locks held by this process, released at interpreter exit (Hudi's shutdown hook).
_HELD: weakref.WeakSet[StorageBasedLock] = weakref.WeakSet()


@atexit.register
def _release_held_locks() -> None:
    for lock in list(_HELD):
        lock.release()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


class StorageBasedLock(TableLockBase):
    """Hudi's storage-based lock of one table on an object store (see the module docstring).

    ``settings`` decide how long and how often to try (wait, retries, retry interval); the lease,
    its renewal and how often a waiting attempt looks again come from ``lease`` (Hudi's defaults),
    not from ``LockSettings.lease_ms`` / ``poll_ms``: Hudi writers on the same table renew on
    their own schedule, and only ``validUntil`` in the file is shared.
    """

    def __init__(
        self,
        storage: ObjectStorage,
        settings: LockSettings | None = None,
        lease: StorageLockSettings | None = None,
    ) -> None:
        super().__init__(lock_key(storage.base_uri), settings)
        self.storage = storage
        self.lease = lease or StorageLockSettings()
        self.owner = ""
        self._where = f"{storage.base_uri}/{LOCK_FILE}"
        # what this holder last wrote; guarded by _io, which also keeps renewal and release apart
        self._io = threading.Lock()
        self._version: ObjectVersion | None = None
        self._valid_until_ms = 0
        self._lease_end = 0.0  # time.monotonic() at which our lease may have ended
        self._stop = threading.Event()
        self._renewal: threading.Thread | None = None

    def _describe(self) -> str:
        return f"storage lock {self._where}"

    def location(self) -> LockLocation:
        return LockLocation("storage", self._where)

    def holder(self, timeout_s: float = DEFAULT_INSPECT_TIMEOUT_S) -> LockHolder | None:
        """The lock file's owner, read-only; the object store's own timeouts bound the read."""
        current = self._read()
        if current is None:
            return None
        data = current[0]
        if data.expired:
            return None  # released (Hudi's unlock writes expired: true and keeps the file)
        dangling = not data.held_at(_now_ms())
        return LockHolder(
            owner=data.owner or "",
            location=self.location(),
            until=utc_from_ms(data.valid_until_ms),
            expired=dangling,
            detail=f"past validUntil + {CLOCK_DRIFT_BUFFER_MS} ms: anyone may take it" if dangling else None,
        )

    # ------------------------------------------------------------ acquire

    def _read(self) -> tuple[StorageLockData, ObjectVersion] | None:
        try:
            found = self.storage.read_versioned(LOCK_FILE)
        except StorageError as exc:
            raise LockBackendError(str(exc)) from None
        if found is None:
            return None
        data, version = found
        return StorageLockData.parse(data, self._where), version

    def _try_acquire(self, wait_s: float) -> int | None:
        deadline = time.monotonic() + wait_s
        owner = str(uuid.uuid4())  # a fresh owner per holding, as each Hudi provider instance has
        while True:
            current = self._read()
            if current is None or not current[0].held_at(_now_ms()):
                sent = time.monotonic()
                valid_until = _now_ms() + self.lease.validity_ms
                mine = StorageLockData(False, valid_until, owner)
                try:
                    version = self.storage.put_if_version(
                        LOCK_FILE, mine.to_json(), None if current is None else current[1]
                    )
                except PreconditionFailedError:
                    version = None  # another writer won the race: busy, look again
                except StorageError as exc:
                    raise LockBackendError(str(exc)) from None
                if version is not None:
                    with self._io:
                        self.owner, self._version = owner, version
                        self._valid_until_ms = valid_until
                        self._lease_end = sent + self.lease.validity_ms / 1000
                    return self._fence_or_give_back()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(self.lease.poll_ms / 1000, left))

    def _fence_or_give_back(self) -> int:
        """Bump the fencing counter and start renewing; on a failure expire the lock just taken."""
        try:
            token = self._bump_fence()
        except StorageError as exc:
            try:
                self._expire()
            except StorageError as expire_exc:  # the lease frees it anyway
                log.warning("%s: giving the lock back failed: %s", self._describe(), expire_exc)
            raise LockBackendError(f"fencing counter: {exc}") from None
        self._stop = threading.Event()
        self._renewal = threading.Thread(
            target=self._renew_forever,
            args=(self._stop,),
            name=f"hoodied-storage-lock {self.storage.base_uri}",
            daemon=True,
        )
        self._renewal.start()
        _HELD.add(self)
        return token

    def _bump_fence(self) -> int:
        for _ in range(10):
            found = self.storage.read_versioned(FENCE_FILE)
            token = time.time_ns() // 1_000
            if found is not None:
                try:
                    token = max(int(found[0].split()[0]) + 1, 1)
                except (ValueError, IndexError):
                    log.warning("%s: unreadable fencing counter, restarted at the clock", self._describe())
            try:
                # the owner in the content makes it ours alone (see ObjectStorage.put_if_version)
                self.storage.put_if_version(
                    FENCE_FILE, f"{token} {self.owner}\n".encode(), None if found is None else found[1]
                )
            except PreconditionFailedError:
                continue  # a stale holder bumped it meanwhile: read again and go above it
            return token
        raise StorageError(f"{self.storage.base_uri}/{FENCE_FILE}: changed by others on 10 attempts in a row")

    def _holder(self) -> str | None:
        try:
            current = self._read()
        except (LockBackendError, HoodieFormatError):
            return None
        if current is None:
            return None
        data = current[0]
        state = "released" if data.expired else f"valid until {_iso(data.valid_until_ms)}"
        return f"owner {data.owner} ({state})"

    # ------------------------------------------------------------ keep and check

    def _renew_once(self) -> str | None:
        """One conditional renewal; why the lock is lost, or ``None`` (renewed, or to be retried)."""
        with self._io:
            if self._version is None:
                return "not held"
            if time.monotonic() >= self._lease_end:
                return "lease ran out before it could be renewed (process paused or store unreachable)"
            sent = time.monotonic()
            valid_until = _now_ms() + self.lease.validity_ms
            data = StorageLockData(False, valid_until, self.owner).to_json()
            try:
                self._version = self.storage.put_if_version(LOCK_FILE, data, self._version)
            except PreconditionFailedError:
                return "the lock file was changed by another writer (lock taken over)"
            except StorageError as exc:
                # as Hudi does on an unknown error: retry at the next interval, the lease still runs
                log.warning("%s: lease renewal failed (%s), will retry", self._describe(), exc)
                return None
            self._valid_until_ms, self._lease_end = valid_until, sent + self.lease.validity_ms / 1000
            return None

    def _renew_forever(self, stop: threading.Event) -> None:
        while not stop.wait(self.lease.renew_interval_ms / 1000):
            if self._lost is not None:
                return
            why = self._renew_once()
            if why is not None:
                if not stop.is_set():
                    self._mark_lost(why)
                return

    def _check_held(self) -> str | None:
        margin_ms = self.lease.margin_ms
        with self._io:
            valid_until, lease_end, owner = self._valid_until_ms, self._lease_end, self.owner
        left_ms = valid_until - _now_ms()
        if left_ms < margin_ms:
            return f"lease ends at {_iso(valid_until)}, in {left_ms} ms, within the {margin_ms} ms margin"
        left_ms = int((lease_end - time.monotonic()) * 1000)
        if left_ms < margin_ms:
            return f"lease not renewed in time ({left_ms} ms left by this host's monotonic clock)"
        try:
            current = self._read()
        except LockBackendError as exc:
            # the lease itself excludes every other writer until it ends, and the checks above hold
            log.warning("%s: cannot read the lock file to confirm ownership (%s)", self._describe(), exc)
            return None
        except HoodieFormatError as exc:
            return str(exc)
        if current is None:
            return "the lock file is gone"
        data = current[0]
        if data.owner != owner or data.expired:
            return f"the lock file now names owner {data.owner} (expired={str(data.expired).lower()})"
        return None

    # ------------------------------------------------------------ release

    def _stop_renewal(self) -> None:
        self._stop.set()
        thread, self._renewal = self._renewal, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.lease.validity_ms / 1000)

    def _expire(self) -> None:
        """Write ``expired: true`` over our own version (Hudi's release); never deletes the file."""
        with self._io:
            version, self._version = self._version, None
            if version is None:
                return
            data = StorageLockData(True, self._valid_until_ms, self.owner).to_json()
            try:
                self.storage.put_if_version(LOCK_FILE, data, version)
            except PreconditionFailedError:
                log.warning("%s: released a lock that was no longer ours (taken over)", self._describe())

    def _release(self) -> None:
        _HELD.discard(self)
        self._stop_renewal()
        self._expire()
