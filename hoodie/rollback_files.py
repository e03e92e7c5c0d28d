"""The files of a ``HoodieRollbackPlan``, for the data table and its MDT: planning and deleting them.

``rollback_plan`` writes the plan of the files an instant wrote (one rollback request per file
group, full paths as Hudi names them), whoever found those files (markers or a listing for a
data-table attempt, a listing for an MDT delta commit).
A rollback plan names full paths (``/base/p/f``, ``file:/base/p/f``, ``file:///base/p/f``) per
rollback request. ``delete_planned_files`` turns each into a path inside the table
(``hoodie.plan_files.plan_relative_path``, which refuses any that leaves it), deletes it (a file
already gone counts: an earlier run got there first) and builds the ``partitionMetadata`` of
``HoodieRollbackMetadata``; ``rollback_metadata`` completes
that record.

Table version 6 merge-on-read (Hudi 0.14/0.15): a failed delta commit may have *appended* blocks
to an existing log file, which deleting files cannot undo. ``rollback_plan`` then takes the
appended log files too (``appended``) and writes, as ``MarkerBasedRollbackStrategy`` does for an
``APPEND`` marker, a request of that file group with ``latestBaseInstant`` = the log file's base
instant, no ``filesToBeDeleted`` and ``logBlocksToBeDeleted`` = {log file full path: its size}
(``fetchFileSizesForLogFilesToRollback``); requests of one (partition, file id) are merged into
one (``RollbackUtils.mergeRollbackRequest``). ``write_rollback_blocks`` executes them as
``BaseRollbackHelper.maybeDeleteAndCollectStats`` does: a *new* log file of the slice (next
version, ``.<fileId>_<base>.log.<n>_<token>``) holding one command block (``HoodieCommandBlock``,
``ROLLBACK_BLOCK``) with headers ``INSTANT_TIME`` = the rollback instant and
``TARGET_INSTANT_TIME`` = the failed instant, recorded in ``HoodieRollbackPartitionMetadata`` as
``rollbackLogFiles`` {new file: size} and ``logFilesFromFailedCommit`` (the plan's map). A re-run
finds the command block it wrote before (same rollback and target instants) instead of writing
a second one. Table versions 8+ never write command blocks: ``delete_planned_files`` refuses a
plan that has ``logBlocksToBeDeleted`` unless the caller handles them (``with_log_blocks``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, LogFileName, make_write_token
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.log.frame import BlockType, CommandType, HeaderKey, encode_command_block, read_log_blocks
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
    "write_rollback_blocks",
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


def rollback_plan(
    storage: Storage,
    target: Instant,
    files: Mapping[str, Iterable[str]],
    appended: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, Any]:
    """The ``HoodieRollbackPlan`` deleting ``files`` (partition -> table-relative paths) of ``target``
    and, table version 6 only, rolling back its blocks appended to the log files ``appended``."""
    requests: list[dict[str, Any]] = []
    appended = appended or {}
    for partition in sorted(set(files) | set(appended)):
        by_group: dict[str, list[str]] = {}
        for rel in sorted(set(files.get(partition, ()))):
            by_group.setdefault(_file_id(rel), []).append(rel)
        blocks: dict[str, dict[str, int]] = {}
        bases: dict[str, str] = {}
        for rel in sorted(set(appended.get(partition, ()))):
            name = LogFileName.parse(rel.rsplit("/", 1)[-1])
            if name is None:
                raise UnsupportedTableError(f"{rel}: an appended file that is not a log file")
            blocks.setdefault(name.file_id, {})[plan_path(storage, rel)] = storage.size(rel)
            bases.setdefault(name.file_id, name.instant_time)
        for file_id in sorted(set(by_group) | set(blocks)):
            requests.append({
                "partitionPath": partition,
                "fileId": file_id,
                "latestBaseInstant": bases.get(file_id, target.requested_time),
                "filesToBeDeleted": [plan_path(storage, r) for r in by_group.get(file_id, [])],
                "logBlocksToBeDeleted": blocks.get(file_id, {}),
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
    storage: Storage, lock: TableLock, plan: dict[str, Any], where: str, *, in_partition: bool = False,
    with_log_blocks: bool = False,
) -> DeletedFiles:
    """Delete every ``filesToBeDeleted`` of the plan's requests (the caller holds ``lock``).

    Every path is checked before the first deletion, so a bad plan changes nothing. A plan
    with ``logBlocksToBeDeleted`` is refused unless ``with_log_blocks`` (the caller then runs
    ``write_rollback_blocks``).
    """
    requests = plan.get("RollbackRequests") or []
    todo: list[tuple[str, str, str]] = []  # (partition, full path, relative)
    for req in requests:
        for full in (req.get("logBlocksToBeDeleted") or {}) if with_log_blocks else ():
            plan_relative_path(storage, str(full), where, in_partition=in_partition)
        if req.get("logBlocksToBeDeleted") and not with_log_blocks:
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


#: The write token of the command-block log files hoodied writes (one writer, no Spark task).
_ROLLBACK_WRITE_TOKEN = make_write_token(0, 0, 0)


def _is_our_block(storage: Storage, rel: str, rollback_time: str, target_time: str) -> bool:
    for block in read_log_blocks(storage, rel, skip_corrupt=True):
        if (block.block_type is BlockType.COMMAND
                and block.header.get(HeaderKey.COMMAND_BLOCK_TYPE) == str(int(CommandType.ROLLBACK))
                and block.header.get(HeaderKey.INSTANT_TIME) == rollback_time
                and block.header.get(HeaderKey.TARGET_INSTANT_TIME) == target_time):
            return True
    return False


def write_rollback_blocks(
    storage: Storage,
    lock: TableLock,
    plan: dict[str, Any],
    rollback_time: str,
    where: str,
    out: DeletedFiles,
) -> None:
    """Table version 6: one new log file with a rollback command block per request that has
    ``logBlocksToBeDeleted``; fills ``rollbackLogFiles`` and ``logFilesFromFailedCommit`` of ``out``."""
    target_time = str((plan.get("instantToRollback") or {}).get("commitTime") or "")
    for req in plan.get("RollbackRequests") or []:
        blocks = req.get("logBlocksToBeDeleted") or {}
        if not blocks:
            continue
        partition = str(req.get("partitionPath") or "")
        file_id, base = str(req.get("fileId") or ""), str(req.get("latestBaseInstant") or "")
        if not file_id or not base:
            raise UnsupportedTableError(f"{where}: a log-block rollback request names no file group")
        slice_logs = []
        for info in storage.list(partition):
            parsed = LogFileName.parse(info.name)
            if info.is_dir or parsed is None:
                continue
            if (parsed.file_id, parsed.instant_time) == (file_id, base):
                slice_logs.append((parsed, info.path, info.size))
        mine = [(path, size) for _, path, size in slice_logs
                if _is_our_block(storage, path, rollback_time, target_time)]
        if mine:  # an earlier run of this rollback wrote it
            path, size = mine[0]
        else:
            version = max((n.version for n, _, _ in slice_logs), default=0) + 1
            new_name = LogFileName(file_id, base, version, _ROLLBACK_WRITE_TOKEN).format()
            path = f"{partition}/{new_name}" if partition else new_name
            lock.ensure_held()
            data = encode_command_block(rollback_time, target_time)
            storage.put_if_absent(path, data)
            size = len(data)
        meta = out.partition_metadata.setdefault(partition, {
            "partitionPath": partition, "successDeleteFiles": [], "failedDeleteFiles": [],
            "rollbackLogFiles": {}, "logFilesFromFailedCommit": {},
        })
        meta["rollbackLogFiles"][plan_path(storage, path)] = size
        meta["logFilesFromFailedCommit"].update({str(k): int(v) for k, v in blocks.items()})
