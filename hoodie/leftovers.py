"""What a writer leaves in the table after its instant completed, and removing it.

Right after an instant completes, Hudi's write client deletes its marker folder
(``BaseHoodieWriteClient.postCommit`` and the table-service client's completions:
``WriteMarkers.quietDeleteMarkerDir``, ``.hoodie/.temp/<T>``) and stops its heartbeat
(``HoodieHeartbeatClient.stop``, which deletes ``.hoodie/.heartbeat/<T>``). hoodied's attempts do the
same and then release their identity (``hoodie.fence``: ``.hoodie/.locks/attempts/<T>``). A writer
killed between its completed file and those deletions leaves them behind for good: nothing looks
at a completed instant's markers, heartbeat or identity again (re-running the instant deletes
them, but the daemon never re-runs a completed instant).

``find_leftovers`` lists the three folders (three listings) and keeps the instants that
``completed`` says are completed and whose heartbeat is absent or expired by Hudi's rule
(``hoodie.heartbeat``): a fresh heartbeat of a completed instant is a live writer between its
completion and its own clean-up, left to finish it. Pending instants are never touched: their
markers are what their rollback deletes by, their heartbeat says whether they are alive.
``remove_leftovers`` deletes what was found; every delete tolerates a file already gone, so two
replicas tidying the same table at once is harmless. A local marker folder left empty (the
local storage deletes files, not folders) is removed too, so it is not listed again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from hoodied.hoodie.fence import ATTEMPTS_FOLDER, attempt_path
from hoodied.hoodie.heartbeat import delete_heartbeat, heartbeat_times
from hoodied.hoodie.markers import MARKER_FOLDER, WriteMarkers
from hoodied.hoodie.storage import Storage

log = logging.getLogger(__name__)

__all__ = ["Leftovers", "find_leftovers", "remove_leftovers"]


@dataclass(frozen=True, slots=True)
class Leftovers:
    """What a completed instant still has of its writer."""

    instant_time: str
    markers: bool
    """Its marker folder (``.hoodie/.temp/<T>``), with markers in it or left empty."""
    heartbeat: bool
    """Its heartbeat file, expired (``.hoodie/.heartbeat/<T>``)."""
    attempt: bool
    """The identity of a hoodied attempt (``.hoodie/.locks/attempts/<T>``): hoodied's own writer
    died after the completion, before its job could report it."""

    def describe(self) -> str:
        parts = [name for name, there in (("markers", self.markers), ("heartbeat", self.heartbeat),
                                          ("attempt identity", self.attempt)) if there]
        return ", ".join(parts)


def _instant_names(storage: Storage, folder: str, *, dirs: bool) -> set[str]:
    """The instant-time names directly in ``folder`` (folders or files); anything else is not ours."""
    prefix = folder + "/"
    return {info.path[len(prefix):] for info in storage.list(folder)
            if info.is_dir == dirs and info.path.startswith(prefix) and info.path[len(prefix):].isdigit()}


def find_leftovers(
    storage: Storage,
    completed: Callable[[set[str]], set[str]],
    *,
    expiry_ms: int,
    now_ms: int | None = None,
) -> list[Leftovers]:
    """The completed instants that still have markers, an expired heartbeat or an attempt identity,
    oldest first. ``completed(times)`` answers which of ``times`` are completed instants of the table
    (called once, only when some instant has any of the three); ``expiry_ms``: Hudi's heartbeat
    interval times its tolerable misses."""
    markers = _instant_names(storage, MARKER_FOLDER, dirs=True)
    beats = {t: ms for t, ms in heartbeat_times(storage).items() if t.isdigit()}  # not a killed beat's temp
    attempts = _instant_names(storage, ATTEMPTS_FOLDER, dirs=False)
    candidates = markers | set(beats) | attempts
    if not candidates:
        return []
    done = completed(candidates)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    found = []
    for t in sorted(done & candidates):
        if t in beats and now - beats[t] <= expiry_ms:
            continue  # a live writer finishing its own clean-up
        found.append(Leftovers(t, t in markers, t in beats, t in attempts))
    return found


def _remove_empty_folders(folder: str) -> None:
    """``folder`` and its sub-folders (a marker folder has one per partition), deepest first; one
    that is not empty after all (a writer we cannot see) is kept."""
    for path, _, _ in os.walk(folder, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(path)


def remove_leftovers(storage: Storage, left: Leftovers) -> None:
    """Delete a completed instant's leftovers (markers first and the identity last, as its writer
    would have); a file already gone is fine."""
    t = left.instant_time
    if left.markers:
        markers = WriteMarkers(storage, t)
        markers.delete_all()
        folder = storage.local_path(markers.folder)
        if folder is not None:
            _remove_empty_folders(folder)
    if left.heartbeat:
        delete_heartbeat(storage, t)
    if left.attempt:
        storage.delete(attempt_path(t))
    log.info("%s: instant %s completed; its writer's leftovers removed: %s", storage.base_uri, t,
             left.describe())
