"""The error tree of the table-format layer.

Every error hoodied raises on bad input derives from ``HoodieServiceError`` and carries a
one-line message that names the file and the problem, so the CLI can print it as is.
Errors are split by what the caller should do next: ``retryable`` ones may succeed on a
later attempt (a lost lock, a flaky store); the rest are fatal for the table until a
person looks at it.
"""

from __future__ import annotations

import errno

__all__ = [
    "OUTAGE_ERRNOS",
    "AttemptSupersededError",
    "ClockOutOfBoundsError",
    "ClockSkewError",
    "CorruptPlanError",
    "EngineUnavailableError",
    "FileAlreadyExistsError",
    "HeartbeatAliveError",
    "HoodieFormatError",
    "HoodieServiceError",
    "InstantNotReadyError",
    "InstantStateError",
    "LockConfigError",
    "LockError",
    "LockLostError",
    "LockServiceDownError",
    "LockUnavailableError",
    "PreconditionFailedError",
    "StorageError",
    "StorageFileNotFoundError",
    "TableBusyError",
    "TableNotFoundError",
    "UnsupportedTableError",
]


class HoodieServiceError(Exception):
    """Root of every error hoodied raises on purpose."""

    retryable: bool = False


class TableNotFoundError(HoodieServiceError):
    """The path does not exist, or holds no ``.hoodie/hoodie.properties``."""


class HoodieFormatError(HoodieServiceError):
    """A file of the table does not follow the Hudi format (corrupt, truncated, garbage)."""


class CorruptPlanError(HoodieFormatError):
    """An instant's plan file (``.compaction.requested``, ``.clustering.requested``, ...) cannot be
    decoded: truncated, garbage, not the Avro record its action needs.

    For a pending table service this means the file groups it holds are unknown: Hudi's file-system
    view fails on it (``CompactionUtils.getCompactionPlan``, ``ClusteringUtils.getClusteringPlan``),
    and so does anything that plans beside it. ``reason`` is the decoder's one line (the file named),
    for the diagnostic commands, which show the table with the instant marked instead of failing.

    Next step: a person restores the file from a backup or removes the pending instant.
    """

    def __init__(self, requested_time: str, action: str, pending: bool, reason: str) -> None:
        self.requested_time = requested_time
        self.action = action
        self.pending = pending
        self.reason = reason
        if pending:
            text = (f"pending {action} {requested_time}: corrupt plan, "
                    f"the file groups it holds are unknown ({reason})")
        else:
            text = f"{action} {requested_time}: corrupt plan ({reason})"
        super().__init__(text)

    def __reduce__(self) -> tuple[type[CorruptPlanError], tuple[str, str, bool, str]]:
        # the message is built from the fields; pickling (a Spark task's error) keeps the fields
        return type(self), (self.requested_time, self.action, self.pending, self.reason)


class UnsupportedTableError(HoodieServiceError):
    """A valid Hudi table (or file) that uses something hoodied does not implement."""


class StorageError(HoodieServiceError):
    """The storage layer failed (permission denied, I/O error)."""

    retryable = True


#: OS errors that say the storage cannot take writes for now (full, over quota, read-only, access
#: denied): an outage to wait out, never a fault of the table. Access denied is one as on an object
#: store (a 403): permissions are the operator's to fix, and the table's files are not at fault.
OUTAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES})


class StorageFileNotFoundError(StorageError):
    """A file the caller needs is not there: the table changed under it, not a storage outage."""

    retryable = False


class FileAlreadyExistsError(StorageError):
    """A write-once create found the file already there."""

    retryable = False


class PreconditionFailedError(StorageError):
    """A conditional overwrite found the object changed (or gone) since the version it named was read.

    Next step: read the object again; another writer changed it in between.
    """

    retryable = False


class LockError(HoodieServiceError):
    """The table lock could not be had or kept; nothing was written after the problem was seen."""

    retryable = True


class LockUnavailableError(LockError):
    """The table lock could not be acquired within the configured wait and retries.

    Next step: try again later (another writer holds the lock, or the lock service is down).
    """


class LockServiceDownError(LockUnavailableError):
    """The table lock could not be acquired because the lock service did not answer (last attempt).

    Next step: try again later; the table is not at fault (never a reason to quarantine it).
    """


class LockLostError(LockError):
    """The holder no longer owns the table lock (lease expired, lock taken over or never held).

    Next step: stop writing, reload the timeline and re-plan; the instant stays where it was
    and the next owner recovers it.
    """


class LockConfigError(HoodieServiceError):
    """The table lock asked for cannot work on this table (a file lock on an object store, a
    storage lock on a local file system); nothing was locked or written.

    Next step: choose another ``--lock`` (``auto`` picks the one that fits the table).
    """


class ClockSkewError(HoodieServiceError):
    """This host's clock is behind the table's timeline by more than hoodied will wait for.

    Next step: fix the host clock (NTP) or the table timezone setting.
    """

    retryable = True


class ClockOutOfBoundsError(ClockSkewError):
    """This host's clock is past the skew bound against the shared reference (or could not be
    checked) right before an instant time was to be taken or a completion written; nothing was
    written with it.

    Next step: none for the instant (it stays as it was, and is retried once the clock is back in
    bounds); fix the host clock (NTP).
    """


class InstantStateError(HoodieServiceError):
    """A timeline transition was asked of an instant that is not in the state it needs.

    Next step: reload the timeline; another writer may have moved or rolled back the instant.
    """


class HeartbeatAliveError(InstantStateError):
    """The instant's Hudi heartbeat is fresh: another executor is working on it; nothing was changed.

    Next step: leave it alone (or ``--force`` when that executor is known to be dead).
    """


class TableBusyError(HeartbeatAliveError):
    """Another attempt on the same table is alive (its attempt identity is present and its
    heartbeat fresh): hoodied runs one table-service job per table at a time; nothing was changed.

    Next step: none; the instant starts once that attempt ends (the daemon retries it).
    """


class AttemptSupersededError(InstantStateError):
    """This attempt of an instant was taken over: another executor changed the instant's attempt
    identity (to roll the attempt back and run it again), so this one may not make a file
    visible, delete one, or complete the instant; nothing more was written.

    Next step: none; the attempt that took over owns the instant.
    """


class InstantNotReadyError(InstantStateError):
    """The instant cannot run yet: an instant it has to wait for is still pending; nothing was changed.

    Next step: try again later (the daemon retries at the next poll, without counting a failure).
    """


class EngineUnavailableError(HoodieServiceError):
    """The Spark engine could not be reached or was lost: a Spark Connect server down at the start or
    stopped mid-job, a local Spark JVM that died or did not start in time. The message names the
    engine's address and the cause; the table is not at fault (a job that was running is left as a
    failed attempt, rolled back before its retry).

    Next step: try again once the engine is back (the daemon retries without counting a failure).
    """

    retryable = True
