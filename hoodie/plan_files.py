"""Files named by table-service plans, resolved to paths of this table, and their file slices.

Plans name files in three ways: a bare file name inside the operation's partition
(``HoodieCompactionPlan`` version 2, as Hudi 1.x writes it), a path relative to the base path,
or a full location (version 1 compaction plans, clustering slices: ``file:/...``,
``s3a://bucket/...``, ``hdfs://nn/...``). A full location under this table's base path is
used as it is. One written on another machine (the table was copied or mounted elsewhere)
is resolved by its partition and file name under this table's base path, and the file must
be there: a plan never makes hoodied read outside the table. Names that are not Hudi data
files, or that belong to another file group than the operation's, are errors.

``operation_slice`` turns one plan operation into the ``FileSlice`` the reader merges
(sizes from storage; a file that is missing fails with a one-line error naming it).

This module is the one owner of plan paths for every table service: ``plan_path`` writes a
table-relative path the way Hudi names it in a plan (the base path + the relative path),
``locate`` reads one back (``file:`` schemes stripped, as Hadoop's ``Path`` does), and each
service applies its own rules on top: ``resolve_file`` (compaction and clustering slices),
``plan_relative_path`` (``HoodieRollbackPlan``; mirrors ``BaseRollbackHelper``) and the clean
executor's resolver (``HoodieCleanerPlan``, which also accepts links to the base path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.filenames import BaseFileName, LogFileName
from hoodied.hoodie.fsview import BaseFile, FileSlice, LogFile
from hoodied.hoodie.storage import Storage

__all__ = [
    "PlanPath",
    "check_partition",
    "locate",
    "operation_slice",
    "plan_path",
    "plan_relative_path",
    "resolve_file",
    "strip_file_scheme",
]

#: The local-file schemes Hudi's paths may carry (``file:///t/p/f`` and ``file:/t/p/f``).
_SCHEMES = ("file://", "file:")


def check_partition(partition: str, where: str) -> str:
    """A plan's partition path, checked to be a relative folder of the table ("" = the root)."""
    p = partition.strip("/")
    parts = p.split("/") if p else []
    if partition.startswith("/") or ".." in parts or (parts and parts[0].startswith(".hoodie")) or "\\" in p:
        raise HoodieFormatError(f"{where}: partition {partition!r} is not a partition of the table")
    return p


def strip_file_scheme(path: str) -> str:
    """``path`` without a leading ``file:`` scheme (other schemes are kept)."""
    for scheme in _SCHEMES:
        if path.startswith(scheme):
            return path[len(scheme):]
    return path


def plan_path(storage: Storage, relative: str) -> str:
    """The full path a plan names for the table-relative ``relative``: base path + it (as Hudi)."""
    return f"{storage.base_uri.rstrip('/')}/{relative}"


@dataclass(frozen=True, slots=True)
class PlanPath:
    """A path named in a plan, as this table sees it."""

    #: the path with its ``file:`` scheme stripped
    path: str
    #: a full location (absolute, or with a scheme such as ``s3a://``), not a table-relative path
    is_location: bool
    #: the path relative to the base path: the location's tail when it is under this table's
    #: base path, the path as written when it is relative; ``None`` for a location elsewhere
    relative: str | None


#: Schemes Hadoop's S3 connectors use for one and the same bucket (a table written by a Spark
#: job through ``s3a://`` and opened here as ``s3://`` is one table).
_S3_SCHEMES = ("s3a://", "s3n://")


def _same_bucket_form(uri: str) -> str:
    for scheme in _S3_SCHEMES:
        if uri.startswith(scheme):
            return "s3://" + uri[len(scheme):]
    return uri


def locate(storage: Storage, planned: str) -> PlanPath:
    """Where a plan's path points: under this table's base path, relative to it, or elsewhere."""
    path = strip_file_scheme(planned)
    if not path.startswith("/") and "://" not in path:
        return PlanPath(path, False, path)
    base = _same_bucket_form(strip_file_scheme(storage.base_uri).rstrip("/"))
    compared = _same_bucket_form(path)
    inside = compared[len(base) + 1:] if compared.startswith(base + "/") else None
    return PlanPath(path, True, inside)


def plan_relative_path(storage: Storage, path: str, where: str, *, in_partition: bool = False) -> str:
    """A rollback plan's full path -> the path inside ``storage`` (``p/f``); refuses paths outside the
    table, under ``.hoodie/`` or climbing out with ``..``. ``in_partition`` also refuses files at the
    table's root (every MDT file lives in an MDT partition folder)."""
    rel = locate(storage, path).relative
    if rel is None:
        raise HoodieFormatError(f"{where}: plan names {path}, which is outside the table {storage.base_uri}")
    if not rel or ".." in rel.split("/") or rel.startswith(".hoodie/") or (in_partition and "/" not in rel):
        raise HoodieFormatError(f"{where}: plan names {path}, which is not a data file of the table")
    return rel


def resolve_file(storage: Storage, partition: str, planned: str, where: str) -> str:
    """The path (relative to the base path) of a file a plan names in ``partition``."""
    if not planned or planned.endswith("/"):
        raise HoodieFormatError(f"{where}: plan names an empty file path in partition {partition!r}")
    name = planned.rsplit("/", 1)[-1]
    rel = f"{partition}/{name}" if partition else name
    if ".." in planned.split("/"):
        raise HoodieFormatError(f"{where}: plan names {planned}, which is not a file of the table")
    if "/" not in planned:
        return rel
    loc = locate(storage, planned)
    if loc.relative is not None:  # under our base path, or relative to it
        if loc.relative != rel:
            raise HoodieFormatError(f"{where}: plan names {planned}, which is not in partition {partition!r}")
        return rel
    # another machine's base path: the same partition and file name under ours
    if not loc.path.endswith("/" + rel):
        raise HoodieFormatError(
            f"{where}: plan names {planned}, outside the table {storage.base_uri} and not "
            f"ending in .../{rel}"
        )
    return rel


def _size(storage: Storage, rel: str, planned: str, where: str, kind: str) -> int:
    if not storage.exists(rel):
        raise HoodieFormatError(
            f"{where}: plan names {kind} file {planned}, which is missing ({rel} is not in the table)"
        )
    return storage.size(rel)


def operation_slice(
    storage: Storage,
    partition: str,
    file_id: str,
    base_instant: str | None,
    base_file: str | None,
    log_files: Sequence[str],
    where: str,
) -> FileSlice:
    """The file slice of one plan operation (base file optional; log files in Hudi's order)."""
    partition = check_partition(partition, where)
    if not file_id:
        raise HoodieFormatError(f"{where}: an operation in partition {partition!r} has no file id")
    base: BaseFile | None = None
    if base_file:
        rel = resolve_file(storage, partition, base_file, where)
        name = BaseFileName.parse(rel.rsplit("/", 1)[-1])
        if name is None or name.file_id != file_id:
            raise HoodieFormatError(f"{where}: {base_file} is not a base file of file group {file_id}")
        base = BaseFile(rel, name, _size(storage, rel, base_file, where, "base"))
    logs: list[LogFile] = []
    for planned in log_files:
        rel = resolve_file(storage, partition, planned, where)
        lname = LogFileName.parse(rel.rsplit("/", 1)[-1])
        if lname is None or lname.file_id != file_id:
            raise HoodieFormatError(f"{where}: {planned} is not a log file of file group {file_id}")
        logs.append(LogFile(rel, lname, _size(storage, rel, planned, where, "log")))
    logs.sort(key=LogFile.sort_key)
    instant = base_instant or (base.instant_time if base else (logs[0].instant_time if logs else ""))
    return FileSlice(partition, file_id, instant, base, logs)
