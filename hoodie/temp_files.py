"""Finding and removing the temp files a killed hoodied process left inside a table.

Every local write of hoodied goes through a temp file beside its target (``hoodie.storage``):
``LocalStorage.put_if_absent`` / ``put`` (``_write_temp``: timeline instants, plans, heartbeats,
markers, ``hoodie.properties``, MDT files...) write the bytes to it, then link it into place
without replacing anything (or rename it over the target); ``LocalWriteOnceFile``
(``create_if_absent``: the streamed parquet base files and MDT HFiles) lets a writer stream into it,
then links it. Every exception removes the temp (``hoodie.storage``), but a process killed
meanwhile (SIGKILL, the OOM killer, a machine that goes down) cannot: its temp stays in the
folder of its target, and nothing in Hudi or hoodied would ever remove it. ``sweep_temp_files``
does: ``executors.clean`` runs it at every clean (a table service that runs regularly and holds
the table lock where it ends), and ``executors.rollback`` for the data files of the attempt it
rolls back, whatever their age (the attempt's writer is dead or fenced off: ``hoodie.fence``).

The name, and why nothing else matches it: ``.<target name>.<32 hex>.tmp``, where the hex is
``uuid.uuid4().hex`` (lower case; version nibble ``4`` at position 13, variant ``8``-``b`` at 17) and
``<target name>`` is a non-empty file name. ``TEMP_NAME`` matches exactly that. Hudi's files do not
take it: data files are ``<file id>_<token>_<instant>.<ext>`` (no leading dot), log files
``.<file id>_<instant>.log.<version>_<token>`` (a leading dot, but they end with the write token or
``.cdc``), ``.hoodie_partition_metadata[.parquet|.orc]``, timeline files ``<instant>[_<completion>].
<action>[.<state>]``, Hadoop checksums ``.<name>.crc``, and Hudi's own temps
(``HoodieStorage.createImmutableFileInPath``) ``<name>.<UUID with dashes>`` with no leading dot and
no ``.tmp``. Other hoodied temps are not of this shape and not swept: the object-store writes
(``hoodie.object_storage.ObjectWriteOnceFile``) stream to ``hoodied-*.tmp`` in the *system* temp
folder (``TMPDIR``), never inside the table, and upload from there (a killed process leaves that
file to the temp folder's own cleanup: ``systemd-tmpfiles``, a reboot, a container that goes);
the local lock's fence counter (``service.locks``) is rewritten through
``.hoodie/.locks/hoodied.fence.<hex>.tmp`` (no leading dot) and the file lock of ``service.fs_lock``
through ``<lock file>.<hex>.hoodied-new`` / ``.hoodied-aside``: those belong to the lock backends,
inside ``.hoodie/.locks``, which this module does not touch. Spark's temp folders
(``hoodied-clustering-*``, ``hoodied-artifacts-*``) live in the system temp folder too.

Age: a temp is removed only when its modification time is at least ``min_age_s`` before now
(default one hour, ``DEFAULT_MIN_AGE_S``), so a live writer's temp is left alone: ``put`` and
``put_if_absent`` hold their temp for one write + fsync, and a streamed base file or HFile moves
its mtime with every row group or block it writes. A writer silent on its temp for longer than
the bound would find it gone at its commit and fail (a Spark task is then retried), never publish
a partial file: the bound must stay well above the longest pause between two writes of one file
(one hour is; a test may use 0 on a table nothing else writes). A file dated in the future
(clock skew) is kept.

Where: every folder of the table, walked without following links: the partitions (and their
parent folders), ``.hoodie/`` and its folders (``timeline/``, ``timeline/history/``, ``archived/``,
``.heartbeat/``, ``.temp/`` markers, ``.aux/``, ``.index_defs/``), ``.hoodie/metadata/`` with its
partitions and its own ``.hoodie/``; ``.hoodie/.locks`` is left to the lock backends. Only regular
files are taken (a link or a folder of that name is left). Local storage only: on an object store
a write is one PUT of a file that lives outside the table, so nothing of hoodied's can be left in
it (``skipped`` says so).
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from dataclasses import dataclass, field

from hoodied.hoodie.errors import StorageError
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.storage import Storage

__all__ = [
    "DEFAULT_MIN_AGE_S",
    "TEMP_NAME",
    "TempSweep",
    "is_hoodied_temp_name",
    "remove_leftover_temps",
    "sweep_temp_files",
]

log = logging.getLogger(__name__)

#: Temps younger than this are a live writer's (one hour).
DEFAULT_MIN_AGE_S = 3600.0
#: ``.<target name>.<uuid4 hex>.tmp``: the temps of ``hoodie.storage.LocalStorage``.
TEMP_NAME = re.compile(r"\.(?P<target>[^/]+)\.[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}\.tmp")
#: Folders (relative to the table) the sweep leaves alone: the lock backends' own state.
_SKIPPED = frozenset({".hoodie/.locks"})


def is_hoodied_temp_name(name: str) -> bool:
    """Whether a file name is exactly the shape of a ``LocalStorage`` temp file."""
    return TEMP_NAME.fullmatch(name) is not None


@dataclass(slots=True)
class TempSweep:
    """What one sweep found: removed temps (relative paths), younger temps kept, deletes that failed."""

    removed: list[str] = field(default_factory=list)
    kept_young: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: str = ""
    """Why nothing was looked at (an object store), else empty."""

    def summary(self) -> str:
        if self.skipped:
            return f"temp files: not swept ({self.skipped})"
        failed = f", {len(self.errors)} could not be removed (first: {self.errors[0]})" if self.errors else ""
        return (
            f"temp files: {len(self.removed)} leftover removed, {len(self.kept_young)} younger "
            f"than the bound kept{failed}"
        )


def _candidates(root: str) -> list[tuple[str, float]]:
    """(relative path, mtime) of every regular file of the table named like a hoodied temp."""
    out: list[tuple[str, float]] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        rel_folder = os.path.relpath(folder, root)
        rel_folder = "" if rel_folder == "." else rel_folder.replace(os.sep, "/")
        dirs[:] = [d for d in dirs if f"{rel_folder}/{d}".lstrip("/") not in _SKIPPED]
        for name in files:
            if not is_hoodied_temp_name(name):
                continue
            try:
                st = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:  # its writer linked and removed it meanwhile
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((f"{rel_folder}/{name}".lstrip("/"), st.st_mtime))
    return sorted(out)


def _of_instant(rel: str, instant_time: str) -> bool:
    """Whether the temp at ``rel`` is that of a data file (base or log) of ``instant_time``."""
    m = TEMP_NAME.fullmatch(rel.rsplit("/", 1)[-1])
    target = m.group("target") if m else ""
    name = BaseFileName.parse(target) or LogFileName.parse(f".{target}")
    return name is not None and name.instant_time == instant_time


def sweep_temp_files(
    storage: Storage,
    *,
    min_age_s: float = DEFAULT_MIN_AGE_S,
    now: float | None = None,
    instant_time: str | None = None,
) -> TempSweep:
    """Remove the hoodied temp files of the table older than ``min_age_s`` (by modification time,
    against ``now``, default the current time); with ``instant_time``, only the temps of that
    instant's data files (a rollback of its failed attempt: its writer is known dead, so no age
    is needed). Deletes go through ``storage`` (a fenced storage refuses them once its attempt is
    superseded); a delete that fails is recorded, not raised. Raises ``StorageError`` when the
    table cannot be listed."""
    if min_age_s < 0:
        raise ValueError("the temp file age bound cannot be negative")
    result = TempSweep()
    root = storage.local_path("")
    if root is None:
        result.skipped = "object store: hoodied's temp files live in the local temp folder, not in the table"
        return result
    if not os.path.isdir(root):
        raise StorageError(f"{root}: the table folder is gone")
    current = time.time() if now is None else now
    for rel, mtime in _candidates(root):
        if instant_time is not None and not _of_instant(rel, instant_time):
            continue
        if current - mtime < min_age_s:
            result.kept_young.append(rel)
            continue
        try:
            if storage.delete(rel):
                result.removed.append(rel)
        except (OSError, StorageError) as exc:
            result.errors.append(f"{rel}: {exc}")
    if result.removed:
        log.info(
            "%s: removed %d leftover temp files (first: %s)",
            storage.base_uri,
            len(result.removed),
            result.removed[0],
        )
    return result


def remove_leftover_temps(
    storage: Storage, *, min_age_s: float = DEFAULT_MIN_AGE_S, instant_time: str | None = None
) -> list[str]:
    """``sweep_temp_files`` for a table service that must not fail on it: the temps removed;
    whatever goes wrong is logged in one line and never raised (the temps only waste space, the
    next run tries again)."""
    try:
        swept = sweep_temp_files(storage, min_age_s=min_age_s, instant_time=instant_time)
    except Exception as exc:  # noqa: BLE001 - the service's own work is done; it goes on
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        log.warning("%s: leftover temp files not swept: %s", storage.base_uri, first)
        return []
    if swept.errors:
        log.warning("%s: %s", storage.base_uri, swept.summary())
    return swept.removed
