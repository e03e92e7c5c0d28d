"""Executing the file deletions of a ``HoodieRollbackPlan``, for the data table and its MDT.

A rollback plan names full paths (``/base/p/f``, ``file:/base/p/f``, ``file:///base/p/f``) per
rollback request. ``delete_planned_files`` turns each into a path inside the table
(``hoodie.plan_files.plan_relative_path``, which refuses any that leaves it), deletes it (a file
already gone counts: an earlier run got there first) and builds the ``partitionMetadata`` of
``HoodieRollbackMetadata``; ``rollback_metadata`` completes
that record. Plans with ``logBlocksToBeDeleted`` (table version 6 command blocks) are refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.plan_files import plan_relative_path
from hoodied.hoodie.storage import Storage

__all__ = ["ROLLBACK_METADATA_VERSION", "DeletedFiles", "delete_planned_files", "rollback_metadata"]

#: ``HoodieRollbackMetadata.version`` as Hudi 1.x writes it.
ROLLBACK_METADATA_VERSION = 1


@dataclass(slots=True)
class DeletedFiles:
    """What executing a plan's deletions did (paths inside the table)."""

    deleted: list[str] = field(default_factory=list)
    already_gone: list[str] = field(default_factory=list)
    partition_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)


def delete_planned_files(
    storage: Storage, lock: TableLock, plan: dict[str, Any], where: str, *, in_partition: bool = False
) -> DeletedFiles:
    """Delete every ``filesToBeDeleted`` of the plan's requests (the caller holds ``lock``).

    Every path is checked before the first deletion, so a bad plan changes nothing.
    """
    requests = plan.get("RollbackRequests") or []
    todo: list[tuple[str, str, str]] = []  # (partition, full path, relative)
    for req in requests:
        if req.get("logBlocksToBeDeleted"):
            raise UnsupportedTableError(
                f"{where}: the plan rolls back log blocks with command blocks (table version 6); "
                "hoodied only executes rollbacks that delete files"
            )
        partition = str(req.get("partitionPath") or "")
        for full in req.get("filesToBeDeleted") or []:
            todo.append((partition, str(full), plan_relative_path(storage, str(full), where,
                                                                  in_partition=in_partition)))
    out = DeletedFiles()
    for req in requests:  # every request's partition gets its entry, even with nothing to delete
        partition = str(req.get("partitionPath") or "")
        out.partition_metadata.setdefault(partition, {
            "partitionPath": partition, "successDeleteFiles": [], "failedDeleteFiles": [],
            "rollbackLogFiles": {}, "logFilesFromFailedCommit": {},
        })
    for partition, full, rel in todo:
        lock.ensure_held()
        (out.deleted if storage.delete(rel) else out.already_gone).append(rel)
        out.partition_metadata[partition]["successDeleteFiles"].append(full)
    return out


def rollback_metadata(
    rollback_time: str, target_time: str, target_action: str, started: float, files: DeletedFiles
) -> dict[str, Any]:
    """``HoodieRollbackMetadata`` of a rollback that started at ``time.monotonic()`` ``started``."""
    return {
        "startRollbackTime": rollback_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(files.deleted) + len(files.already_gone),
        "commitsRollback": [target_time],
        "partitionMetadata": files.partition_metadata,
        "version": ROLLBACK_METADATA_VERSION,
        "instantsRollback": [{"commitTime": target_time, "action": target_action}],
    }
