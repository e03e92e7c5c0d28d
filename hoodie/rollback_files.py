"""The files of a ``HoodieRollbackPlan``, for the data table and its MDT: planning and deleting them.

``rollback_plan`` writes the plan of the files an instant wrote (one rollback request per file
group, full paths as Hudi names them), whoever found those files (markers or a listing for a
data-table attempt, a listing for an MDT delta commit).
A rollback plan names full paths (``/base/p/f``, ``file:/base/p/f``, ``file:///base/p/f``) per
rollback request. ``delete_planned_files`` turns each into a path inside the table
(``hoodie.plan_files.plan_relative_path``, which refuses any that leaves it), deletes it (a file
already gone counts: an earlier run got there first) and builds the ``partitionMetadata`` of
``HoodieRollbackMetadata``; ``rollback_metadata`` completes
that record. Plans with ``logBlocksToBeDeleted`` (table version 6 command blocks) are refused.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.plan_files import plan_path, plan_relative_path
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.instant import Instant

__all__ = [
    "ROLLBACK_METADATA_VERSION",
    "ROLLBACK_PLAN_VERSION",
    "DeletedFiles",
    "delete_planned_files",
    "rollback_metadata",
    "rollback_plan",
]

#: ``HoodieRollbackMetadata.version`` as Hudi 1.x writes it.
ROLLBACK_METADATA_VERSION = 1
#: ``LATEST_ROLLBACK_PLAN_VERSION``.
ROLLBACK_PLAN_VERSION = 1


def _file_id(rel: str) -> str:
    name = rel.rsplit("/", 1)[-1]
    base = BaseFileName.parse(name)
    if base is not None:
        return base.file_id
    log_name = LogFileName.parse(name)
    return log_name.file_id if log_name is not None else ""


def rollback_plan(storage: Storage, target: Instant, files: Mapping[str, Iterable[str]]) -> dict[str, Any]:
    """The ``HoodieRollbackPlan`` deleting ``files`` (partition -> table-relative paths) of ``target``."""
    requests: list[dict[str, Any]] = []
    for partition in sorted(files):
        by_group: dict[str, list[str]] = {}
        for rel in sorted(set(files[partition])):
            by_group.setdefault(_file_id(rel), []).append(rel)
        for file_id, rels in sorted(by_group.items()):
            requests.append({
                "partitionPath": partition,
                "fileId": file_id,
                "latestBaseInstant": target.requested_time,
                "filesToBeDeleted": [plan_path(storage, r) for r in rels],
                "logBlocksToBeDeleted": {},
            })
    return {
        "instantToRollback": {"commitTime": target.requested_time, "action": target.action.value},
        "RollbackRequests": requests,
        "version": ROLLBACK_PLAN_VERSION,
    }


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
