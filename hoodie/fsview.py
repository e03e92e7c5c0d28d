"""The file-system view: which base and log files make up each file group and file slice.

Owns the slicing rules of Hudi's ``HoodieFileGroup`` / ``AbstractTableFileSystemView``:

* A *file group* is every data file of one ``(partition, file id)``. It is cut into *file
  slices*, each keyed by a base instant: the instant of its base file, or of a pending
  compaction (which opens a new, still empty slice), or — with no base file at all — the
  instant of its first log file.
* Layout 2 (table version 8+): a log file's name carries its delta commit's own instant. It
  belongs to the slice with the largest base instant <= the delta commit's *completion* time;
  when no slice starts that early, to a slice keyed by its own instant; a pending log file to
  the latest slice (only kept with ``include_pending``).
* Layout 1 (table version 6): a log file's name carries the base instant of its slice; it
  belongs to the slice with the largest base instant <= that name instant. Log files written
  after a compaction was scheduled carry the compaction's instant, so a pending compaction
  splits slices here too.
* Files of instants that are not completed (inflight writes, rolled-back writes, pending
  compaction / clustering output) are ignored. Instants older than the active timeline
  (archived) count as completed, as Hudi's ``containsOrBeforeTimelineStarts`` does.
* File groups replaced by a completed replacecommit / clustering are excluded; with ``as_of``
  only replace instants with requested time <= ``as_of`` count.
* Time travel "as of T" selects per file group the latest slice with base instant <= T (the
  timeline is cut by *requested* time, as Hudi and hudi-rs do); log blocks after T are dropped
  by the reader, not here.
* Pending compaction, log compaction and clustering are recorded per file group.

Reading uses ``read_slices``: a slice opened by a pending compaction is merged with the slice
before it (base file of the older slice + the log files of both), as
``getLatestMergedFileSlicesBeforeOrOn`` does, so records written after the compaction was
scheduled are not lost while it runs.

``list_storage`` lists the data files of a table by walking its partition folders.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from hoodied.hoodie.filenames import PARTITION_METAFILE, BaseFileName, LogFileName
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, Instant
from hoodied.hoodie.timeline.plans import ClusteringPlan, CompactionPlan

__all__ = [
    "BaseFile",
    "LogFile",
    "FileSlice",
    "FileGroup",
    "FileSystemView",
    "list_storage",
    "FilesByPartition",
    "CommitState",
]

log = logging.getLogger(__name__)

FilesByPartition = Mapping[str, Iterable[tuple[str, int]]]
_Key = tuple[str, str]


def _join(partition: str, name: str) -> str:
    return f"{partition}/{name}" if partition else name


@dataclass(frozen=True, slots=True)
class BaseFile:
    """A base (parquet) file; ``path`` is relative to the table base path."""

    path: str
    name: BaseFileName
    size: int

    @property
    def file_name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def instant_time(self) -> str:
        return self.name.instant_time


@dataclass(frozen=True, slots=True)
class LogFile:
    """A log file; ``completion_time`` is its delta commit's completion (layout 2, completed only)."""

    path: str
    name: LogFileName
    size: int
    completion_time: str | None = None

    @property
    def file_name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def instant_time(self) -> str:
        return self.name.instant_time

    def sort_key(self) -> tuple[str, int, str]:
        return self.name.sort_key()


@dataclass(slots=True)
class FileSlice:
    """A base file (possibly none) plus the log files written on top of it, oldest log first."""

    partition: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None = None
    log_files: list[LogFile] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return self.base_file is None and not self.log_files

    @property
    def has_log_files(self) -> bool:
        return bool(self.log_files)

    @property
    def total_size(self) -> int:
        return (self.base_file.size if self.base_file else 0) + sum(f.size for f in self.log_files)

    def paths(self) -> list[str]:
        """Relative paths of every file of the slice, base file first."""
        out = [self.base_file.path] if self.base_file else []
        out.extend(f.path for f in self.log_files)
        return out

    def __str__(self) -> str:
        base = self.base_file.file_name if self.base_file else "-"
        where = f"{self.partition or '.'}/{self.file_id}@{self.base_instant}"
        return f"{where} base={base} logs={len(self.log_files)}"


@dataclass(slots=True)
class FileGroup:
    """The slices of one file group, oldest first, plus the table services pending on it."""

    partition: str
    file_id: str
    slices: list[FileSlice] = field(default_factory=list)
    pending_compaction: str | None = None
    pending_log_compaction: str | None = None
    pending_clustering: str | None = None
    replaced_by: str | None = None

    @property
    def latest_slice(self) -> FileSlice | None:
        return self.slices[-1] if self.slices else None

    def slice_as_of(self, as_of: str | None) -> FileSlice | None:
        """The latest slice with base instant <= ``as_of`` (the latest one for ``None``)."""
        if as_of is None:
            return self.latest_slice
        keys = [s.base_instant for s in self.slices]
        i = bisect.bisect_right(keys, as_of)
        return self.slices[i - 1] if i else None

    def merged_slice_as_of(self, as_of: str | None) -> FileSlice | None:
        """The slice to read: a slice opened by the pending compaction is merged with the one before it."""
        current = self.slice_as_of(as_of)
        if current is None or current.base_instant != self.pending_compaction:
            return current
        i = self.slices.index(current)
        if i == 0:
            return FileSlice(
                current.partition, current.file_id, current.base_instant, None, list(current.log_files)
            )
        prev = self.slices[i - 1]
        return FileSlice(
            prev.partition,
            prev.file_id,
            prev.base_instant,
            prev.base_file,
            sorted(prev.log_files + current.log_files, key=LogFile.sort_key),
        )

    def _slice_key_for_log(self, log_file: LogFile, layout: int) -> str:
        """The base instant of the slice a log file belongs to (``HoodieFileGroup.getBaseInstantTime``)."""
        keys = [s.base_instant for s in self.slices]
        if not keys:
            return log_file.instant_time
        if layout >= 2:
            if log_file.completion_time is None:
                return keys[-1]  # pending log files belong to the latest slice
            point = log_file.completion_time
        else:
            point = log_file.instant_time
        i = bisect.bisect_right(keys, point)
        return keys[i - 1] if i else log_file.instant_time

    def _slice(self, key: str) -> FileSlice:
        keys = [s.base_instant for s in self.slices]
        i = bisect.bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            return self.slices[i]
        new = FileSlice(self.partition, self.file_id, key)
        self.slices.insert(i, new)
        return new


class FileSystemView:
    """File groups of a table built from a listing, the timeline and the table config.

    ``build`` takes the listing as ``{partition: [(file name, size), ...]}`` (storage listing or
    the metadata table's ``files`` partition; "" is the non-partitioned root).
    """

    def __init__(
        self,
        config: TableConfig,
        groups: dict[tuple[str, str], FileGroup],
        as_of: str | None,
    ) -> None:
        self.config = config
        self.as_of = as_of
        self._groups = groups

    # ---------------------------------------------------------------- building

    @classmethod
    def build(
        cls,
        files_by_partition: FilesByPartition,
        timeline: Timeline,
        config: TableConfig,
        *,
        as_of: str | None = None,
        include_pending: bool = False,
    ) -> FileSystemView:
        """Group the listed files into file groups and slices (see the module docstring).

        ``include_pending`` keeps files of pending writes (base files in their own slice, log
        files in the latest slice, as Hudi's raw view does); readers leave it off.
        """
        state = CommitState(timeline, config)
        layout = config.timeline_layout
        groups: dict[tuple[str, str], FileGroup] = {}
        logs: dict[tuple[str, str], list[LogFile]] = {}
        for partition, entries in sorted(files_by_partition.items()):
            for name, size in entries:
                cls._add_file(partition, name, int(size), state, layout, include_pending, groups, logs)
        compactions, log_compactions, clusterings = state.pending_operations()
        for key, instant in compactions.items():
            if key in groups or key in logs:
                group = groups.setdefault(key, FileGroup(*key))
                group.pending_compaction = instant
                group._slice(instant)  # a scheduled compaction opens a new slice before logs are placed
        for key, log_files in logs.items():
            group = groups.setdefault(key, FileGroup(*key))
            # Hudi adds log files in its log-file order; the slice choice depends on it
            for lf in sorted(log_files, key=LogFile.sort_key):
                group._slice(group._slice_key_for_log(lf, layout)).log_files.append(lf)
        for key, instant in log_compactions.items():
            if key in groups:
                groups[key].pending_log_compaction = instant
        for key, instant in clusterings.items():
            if key in groups:
                groups[key].pending_clustering = instant
        for key, instant in timeline.replaced_file_groups(as_of).items():
            if key in groups:
                groups[key].replaced_by = instant
        for group in groups.values():
            for s in group.slices:
                s.log_files.sort(key=LogFile.sort_key)
        return cls(config, groups, as_of)

    @staticmethod
    def _add_file(
        partition: str,
        name: str,
        size: int,
        state: CommitState,
        layout: int,
        include_pending: bool,
        groups: dict[tuple[str, str], FileGroup],
        logs: dict[tuple[str, str], list[LogFile]],
    ) -> None:
        if name.startswith(PARTITION_METAFILE):
            return
        path = _join(partition, name)
        if name.startswith("."):
            lname = LogFileName.parse(name)
            if lname is None or lname.cdc or lname.extension != "log":
                return
            if layout >= 2:
                completion = state.completion_time(lname.instant_time)
                if completion is None and not (
                    include_pending and state.is_pending_write(lname.instant_time)
                ):
                    return
            else:
                completion = None
                # v6 names carry the base instant: a completed write or a scheduled compaction
                if not (
                    state.is_committed(lname.instant_time) or state.is_pending_compaction(lname.instant_time)
                ):
                    if not (include_pending and state.is_pending_write(lname.instant_time)):
                        return
            logs.setdefault((partition, lname.file_id), []).append(LogFile(path, lname, size, completion))
            return
        bname = BaseFileName.parse(name)
        if bname is None:
            return
        if bname.extension.upper() != state.base_extension:
            log.debug("%s: not a %s base file, ignored", path, state.base_extension)
            return
        if not state.is_committed(bname.instant_time):
            if not (include_pending and state.is_pending_write(bname.instant_time)):
                return
        key = (partition, bname.file_id)
        group = groups.get(key)
        if group is None:
            group = groups[key] = FileGroup(partition, bname.file_id)
        target = group._slice(bname.instant_time)
        if target.base_file is not None:
            # two attempts wrote the same slice; Hudi keeps the last one it lists
            log.warning(
                "%s: second base file for slice %s, replaces %s",
                path,
                target.base_instant,
                target.base_file.path,
            )
        target.base_file = BaseFile(path, bname, size)

    # ---------------------------------------------------------------- queries

    def partitions(self) -> list[str]:
        """Partitions that hold at least one visible file group (sorted)."""
        return sorted({g.partition for g in self.file_groups()})

    def file_groups(self, partition: str | None = None, *, include_replaced: bool = False) -> list[FileGroup]:
        """File groups (sorted by partition, file id), without replaced ones unless asked."""
        out = [
            g
            for (p, _f), g in sorted(self._groups.items())
            if (partition is None or p == partition) and (include_replaced or g.replaced_by is None)
        ]
        return out

    def file_group(self, partition: str, file_id: str) -> FileGroup | None:
        return self._groups.get((partition, file_id))

    def latest_slices(self, partition: str | None = None) -> list[FileSlice]:
        """Per visible file group the latest slice as of ``as_of`` (a pending compaction's slice as is)."""
        return [s for s in (g.slice_as_of(self.as_of) for g in self.file_groups(partition)) if s is not None]

    def read_slices(self, partition: str | None = None) -> list[FileSlice]:
        """The slices a snapshot read merges: pending-compaction slices merged with the slice before."""
        out = []
        for g in self.file_groups(partition):
            s = g.merged_slice_as_of(self.as_of)
            if s is not None and not s.is_empty:
                out.append(s)
        return out

    def replaced_file_groups(self) -> list[FileGroup]:
        return [g for g in self._groups.values() if g.replaced_by is not None]

    def __iter__(self) -> Iterator[FileGroup]:
        return iter(self.file_groups())

    def __repr__(self) -> str:
        return f"FileSystemView({len(self.file_groups())} file groups, as_of={self.as_of})"


class CommitState:
    """Which instants count as committed writes, and the pending table services (computed once).

    Committed: completed write instants (commit, deltacommit, replacecommit, compaction, log
    compaction, clustering), plus instants older than the first write instant on the timeline
    (archived) that no rollback / restore undid. A completed instant counts even when a
    rollback names it: Hudi deletes the timeline files of what it rolls back, and a table
    service retried after the rollback of a failed attempt completes under the same instant.
    """

    def __init__(self, timeline: Timeline, config: TableConfig) -> None:
        self.timeline = timeline
        self.base_extension = config.base_file_format.upper()
        rolled_back = timeline.rolled_back_instants()
        writes = [i for i in timeline.instants if i.action in WRITE_ACTIONS]
        self._completed: dict[str, str] = {
            i.requested_time: i.completion_time or i.requested_time
            for i in writes
            if i.is_completed
        }
        self._pending_writes = {i.requested_time for i in writes if i.is_pending} - rolled_back
        self._pending_compactions = {
            i.requested_time for i in writes if i.is_pending and i.action is Action.COMPACTION
        }
        # Hudi: instants older than the first one on the write timeline were archived, i.e. committed
        self._first = min((i.requested_time for i in writes), default=None)
        self._rolled_back = rolled_back
        self._pending_instants: list[Instant] = [i for i in writes if i.is_pending]

    def is_committed(self, instant: str) -> bool:
        if instant in self._completed:
            return True
        if self._first is None or instant in self._rolled_back or instant in self._pending_writes:
            return False
        return instant < self._first

    def completion_time(self, instant: str) -> str | None:
        """Completion time of a committed write; archived instants without one use their own time."""
        done = self._completed.get(instant)
        if done is not None:
            return done
        return instant if self.is_committed(instant) else None

    def is_pending_write(self, instant: str) -> bool:
        return instant in self._pending_writes

    def is_pending_compaction(self, instant: str) -> bool:
        return instant in self._pending_compactions

    def pending_operations(self) -> tuple[dict[_Key, str], dict[_Key, str], dict[_Key, str]]:
        """(partition, file id) -> instant of the pending compaction, log compaction and clustering plans."""
        compactions: dict[_Key, str] = {}
        log_compactions: dict[_Key, str] = {}
        clusterings: dict[_Key, str] = {}
        for inst in self._pending_instants:
            if inst.action in (Action.COMPACTION, Action.LOG_COMPACTION):
                plan = self.timeline.plan(inst)
                target = compactions if inst.action is Action.COMPACTION else log_compactions
                if isinstance(plan, CompactionPlan):
                    for key in plan.file_groups:
                        target[key] = inst.requested_time
            elif inst.action is Action.CLUSTERING or (
                inst.action is Action.REPLACE_COMMIT and self.timeline.is_clustering(inst)
            ):
                plan = self.timeline.plan(inst)
                if isinstance(plan, ClusteringPlan):
                    for key in plan.file_groups:
                        clusterings.setdefault(key, inst.requested_time)
        return compactions, log_compactions, clusterings


def list_storage(storage: Storage, config: TableConfig) -> dict[str, list[tuple[str, int]]]:
    """``{partition: [(file name, size), ...]}`` of the data files, by walking the table folders.

    A folder is a partition when it holds a ``.hoodie_partition_metadata`` file (any format
    suffix), as Hudi's listing-based partition discovery does; the table root counts for
    non-partitioned tables. ``.hoodie`` and other hidden folders are skipped.
    """
    out: dict[str, list[tuple[str, int]]] = {}

    def visit(folder: str, depth: int) -> None:
        entries = storage.list(folder)
        files = [e for e in entries if not e.is_dir]
        is_partition = any(e.name.startswith(PARTITION_METAFILE) for e in files)
        if is_partition or (folder == "" and not config.partition_fields):
            out[folder] = [(e.name, e.size) for e in files if not e.name.startswith(PARTITION_METAFILE)]
        for e in entries:
            if e.is_dir and not e.name.startswith(".") and depth < 32:
                visit(e.path, depth + 1)

    visit("", 0)
    if "" in out and config.partition_fields and not out[""]:
        del out[""]
    return out
