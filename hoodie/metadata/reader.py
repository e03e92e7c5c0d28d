"""Metadata table (MDT) read side: the file listing held by the ``files`` partition.

The MDT (``.hoodie/metadata``) is a MOR Hudi table of HFiles. This module owns the rules a
reader must apply to it, as Hudi's ``HoodieBackedTableMetadata`` does:

1. Which MDT instants count (``valid_instant_times``, Hudi's ``getValidInstantTimestamps``):
   the requested times of completed data instants; completed MDT delta commits whose data
   instant is not pending (MDT-only ones: ``0000000000000000x`` initialisations, indexing,
   log compaction...); instants rolled back by data rollbacks/restores; MDT rollbacks/restores.
2. Which MDT files make up the latest slice of each file group: the newest base HFile written
   by a completed MDT instant, plus the log files whose delta commit completed at or after that
   base instant (completion-time slicing, layout 2; layout 1: log name instant >= base
   instant). A pending MDT compaction therefore merges into the slice before it.
3. How records merge: log blocks in order (only blocks of valid, MDT-completed instants), then
   the base file under them (``metadata.records.combine_listings``), tombstones dropped at the end.

One guard goes beyond Hudi: files named after an instant that is *pending* on the data
timeline are left out of the listing. Hudi never lets such records reach an MDT base file (it
times MDT compactions before pending data instants), so they only appear when a data
completion file was lost or removed after the fact; listing them would expose uncommitted
files. Base files always carry their writer's instant; log names do from table version 8 on.

``listing_drift`` compares two listings (storage vs. MDT); computing the storage side belongs to
the caller (``hoodie.fsview.list_storage``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hoodied.hoodie.errors import HoodieFormatError, TableNotFoundError, UnsupportedTableError
from hoodied.hoodie.filenames import BaseFileName, LogFileName, writer_instant
from hoodied.hoodie.hfile.reader import HFileReader
from hoodied.hoodie.log import (
    BlockType,
    LogBlock,
    delete_block_records,
    hfile_block_content,
    is_rollback_command,
    read_log_blocks,
)
from hoodied.hoodie.metadata.records import (
    ALL_PARTITIONS_KEY,
    FILES_PARTITION,
    FileListing,
    combine_listings,
    file_listing,
    key_to_partition,
    live_files,
    partition_to_key,
)
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant

__all__ = [
    "INIT_INSTANT_PREFIX",
    "METADATA_FOLDER",
    "FilesByPartition",
    "ListingDrift",
    "MdtFileSlice",
    "MetadataTable",
    "PartitionDrift",
    "listing_drift",
    "metadata_table_in_use",
    "require_no_metadata_table",
    "valid_instant_times",
]

log = logging.getLogger(__name__)

METADATA_FOLDER = ".hoodie/metadata"
#: Prefix of the MDT initialisation instants (``SOLO_COMMIT_TIMESTAMP``): 00000000000000000, ...001.
INIT_INSTANT_PREFIX = "00000000000000"

_DELTA_ACTIONS = (Action.DELTA_COMMIT, Action.LOG_COMPACTION)
_ROLLBACK_ACTIONS = (Action.ROLLBACK, Action.RESTORE)


def metadata_table_in_use(storage: Storage, config: TableConfig) -> str | None:
    """Why writers of this table must keep a metadata table in step, or ``None`` when it has none.

    A table has a metadata table when ``hoodie.table.metadata.partitions`` (or its
    ``.inflight`` twin, a partition being built) lists anything, or when the metadata table's
    own ``hoodie.properties`` exists (written before the data table's properties say so).
    Every change to the data files (a clean, a rollback, a compaction) must then be applied
    to the metadata table too, or readers that list files through it see files that are gone.
    """
    if config.metadata_partitions:
        return f"hoodie.table.metadata.partitions={','.join(config.metadata_partitions)}"
    if config.metadata_partitions_inflight:
        return f"hoodie.table.metadata.partitions.inflight={','.join(config.metadata_partitions_inflight)}"
    if storage.exists(f"{METADATA_FOLDER}/.hoodie/hoodie.properties"):
        return f"{METADATA_FOLDER}/.hoodie/hoodie.properties exists"
    return None


def require_no_metadata_table(storage: Storage, config: TableConfig, what: str) -> None:
    """Refuse ``what`` (a rollback...) on a table with a metadata table.

    For services that do not write their metadata-table commit yet (cleans, compactions and
    log compactions do: ``hoodie.metadata.clean``, ``hoodie.metadata.commit``); changing data
    files without the matching metadata-table commit would corrupt what readers see, so nothing is changed.
    """
    why = metadata_table_in_use(storage, config)
    if why is not None:
        raise UnsupportedTableError(
            f"{storage.base_uri}: the table has a metadata table ({why}); {what} needs the "
            "metadata-table writer, which hoodied does not have yet (nothing was changed)"
        )


def valid_instant_times(data_timeline: Timeline, mdt_timeline: Timeline) -> frozenset[str]:
    """The MDT instants whose log blocks a reader may apply (``getValidInstantTimestamps``)."""
    data_pending = {i.requested_time for i in data_timeline.pending()}
    valid = {i.requested_time for i in data_timeline.completed()}
    # MDT-only delta commits (async indexing, log compaction, ...) have no data twin; a delta
    # commit whose data instant is still pending is the "MDT written, data failed" case.
    valid.update(
        i.requested_time
        for i in mdt_timeline.completed(_DELTA_ACTIONS)
        if i.requested_time not in data_pending
    )
    earliest = min(valid) if valid else INIT_INSTANT_PREFIX
    for inst in data_timeline.completed(_ROLLBACK_ACTIONS):
        if inst.requested_time > earliest:
            valid.update(_rolled_back_by(data_timeline, inst))
    valid.update(i.requested_time for i in mdt_timeline.completed(_ROLLBACK_ACTIONS))
    valid.update(
        i.requested_time
        for i in mdt_timeline.completed(_DELTA_ACTIONS)
        if i.requested_time.startswith(INIT_INSTANT_PREFIX)
    )
    return frozenset(valid)


def _rolled_back_by(timeline: Timeline, inst: Instant) -> set[str]:
    md = timeline.read_commit_metadata(inst)
    out = {str(t) for t in md.get("commitsRollback") or ()}
    for rollbacks in (md.get("hoodieRestoreMetadata") or {}).values():
        for rb in rollbacks or ():
            out.update(str(t) for t in rb.get("commitsRollback") or ())
    if not out and inst.action is Action.ROLLBACK:
        plan = timeline.read_plan(inst) or {}
        target = (plan.get("instantToRollback") or {}).get("commitTime")
        if target:
            out.add(str(target))
    return out


@dataclass(frozen=True)
class MdtFileSlice:
    """The MDT files read for one file group: base HFile (or None) and log files in merge order."""

    partition: str
    file_id: str
    base_instant: str | None
    base_file: str | None
    log_files: tuple[str, ...]


class MetadataTable:
    """The metadata table of one data table, read side (``files`` partition)."""

    def __init__(
        self,
        data_config: TableConfig,
        data_timeline: Timeline,
        mdt_storage: Storage,
        mdt_config: TableConfig,
        mdt_timeline: Timeline,
    ) -> None:
        self.data_config = data_config
        self.data_timeline = data_timeline
        self.storage = mdt_storage
        self.config = mdt_config
        self.timeline = mdt_timeline
        self.valid_instants = valid_instant_times(data_timeline, mdt_timeline)
        self._listings: dict[str, FileListing] | None = None

    @classmethod
    def open(
        cls, data_storage: Storage, data_config: TableConfig, data_timeline: Timeline
    ) -> MetadataTable | None:
        """The MDT of a table, or None when ``hoodie.table.metadata.partitions`` lacks ``files``."""
        if not data_config.metadata_table_available:
            return None
        mdt_storage = data_storage.child(METADATA_FOLDER)
        try:
            mdt_config = load_table_config(mdt_storage, metadata_table=True)
        except TableNotFoundError:
            raise HoodieFormatError(
                f"{METADATA_FOLDER}: hoodie.table.metadata.partitions lists 'files' "
                "but the metadata table is missing"
            ) from None
        return cls(
            data_config, data_timeline, mdt_storage, mdt_config, Timeline.load(mdt_storage, mdt_config)
        )

    # ------------------------------------------------------------------ public listing

    def partitions(self) -> list[str]:
        """Data partitions (relative paths; "" for a non-partitioned table), sorted."""
        listing = self._load().get(ALL_PARTITIONS_KEY, {})
        return sorted(key_to_partition(k) for k in live_files(listing))

    def files(self, partition: str) -> dict[str, int]:
        """Committed files of one data partition: file name -> size in bytes."""
        listing = self._load().get(partition_to_key(partition), {})
        return self._drop_pending(partition, live_files(listing))

    def all_files(self) -> dict[str, dict[str, int]]:
        return {p: self.files(p) for p in self.partitions()}

    def file_slices(self, mdt_partition: str = FILES_PARTITION) -> list[MdtFileSlice]:
        """The latest merged slice of every file group of an MDT partition, sorted by file id."""
        bases: dict[str, list[tuple[str, str]]] = {}
        logs: dict[str, list[tuple[LogFileName, str]]] = {}
        for info in self.storage.list(mdt_partition):
            if info.is_dir:
                continue
            if (base := BaseFileName.parse(info.name)) is not None:
                if self._committed_in_mdt(base.instant_time):
                    bases.setdefault(base.file_id, []).append((base.instant_time, info.name))
            elif (lf := LogFileName.parse(info.name)) is not None and not lf.cdc:
                logs.setdefault(lf.file_id, []).append((lf, info.name))
        slices = []
        for file_id in sorted(set(bases) | set(logs)):
            base_instant, base_name = max(bases.get(file_id, []), default=(None, None))
            members = sorted(
                (lf for lf in logs.get(file_id, []) if self._log_in_slice(lf[0], base_instant)),
                key=lambda item: item[0].sort_key(),
            )
            slices.append(
                MdtFileSlice(
                    mdt_partition,
                    file_id,
                    base_instant,
                    f"{mdt_partition}/{base_name}" if base_name else None,
                    tuple(f"{mdt_partition}/{name}" for _, name in members),
                )
            )
        return slices

    # ------------------------------------------------------------------ slicing rules

    def _committed_in_mdt(self, instant: str) -> bool:
        """Completed on the MDT timeline, or older than its first instant (archived)."""
        if self.timeline.is_completed(instant):
            return True
        first = self.timeline.instants[0].requested_time if self.timeline.instants else None
        return first is not None and instant < first and self.timeline.get(instant) is None

    def _log_in_slice(self, name: LogFileName, base_instant: str | None) -> bool:
        instant = name.instant_time
        if not self._committed_in_mdt(instant):
            return False  # pending or failed MDT write: Hudi skips its blocks anyway
        if base_instant is None:
            return True
        if self.config.timeline_layout >= 2:
            # an archived delta commit's completion time is unknown; it is older than the base
            completion = self.timeline.completion_time(instant) or instant
            return completion >= base_instant
        return instant >= base_instant  # layout 1: log names carry the slice's base instant

    # ------------------------------------------------------------------ merging

    def _load(self) -> dict[str, FileListing]:
        if self._listings is None:
            merged: dict[str, FileListing] = {}
            for fs in self.file_slices(FILES_PARTITION):
                merged.update(self._merge_slice(fs))
            self._listings = merged
        return self._listings

    def _merge_slice(self, fs: MdtFileSlice) -> dict[str, FileListing]:
        # Stage 1: log records merged in order; None marks a key deleted by a DELETE block.
        from_logs: dict[str, FileListing | None] = {}
        for block in self._valid_blocks(fs):
            if block.block_type is BlockType.HFILE_DATA:
                reader = HFileReader(hfile_block_content(block), f"{METADATA_FOLDER}/{block.where}")
                for key, record in reader.records(block.schema_json):
                    prev = from_logs.get(key)
                    listing = file_listing(record)
                    from_logs[key] = listing if prev is None else combine_listings(prev, listing)
            elif block.block_type is BlockType.DELETE:
                for rec in delete_block_records(block):
                    if rec.record_key is not None:
                        from_logs[rec.record_key] = None
        # Stage 2: the base file under the merged log records.
        out: dict[str, FileListing] = {}
        if fs.base_file is not None:
            reader = HFileReader(self.storage.read(fs.base_file), f"{METADATA_FOLDER}/{fs.base_file}")
            for key, record in reader.records():
                out[key] = file_listing(record)
        for key, newer in from_logs.items():
            if newer is None:
                out.pop(key, None)
            else:
                out[key] = combine_listings(out[key], newer) if key in out else newer
        return out

    def _valid_blocks(self, fs: MdtFileSlice) -> list[LogBlock]:
        """Blocks of valid, MDT-completed instants, minus rolled-back and log-compacted ones."""
        blocks: list[LogBlock] = []

        def invalid(instant: str) -> bool:
            return instant not in self.valid_instants or not self._committed_in_mdt(instant)

        for path in fs.log_files:
            for block in read_log_blocks(self.storage, path, ignorable=invalid):
                if block.block_type is BlockType.COMMAND:
                    if is_rollback_command(block):
                        target = block.target_instant_time
                        blocks = [b for b in blocks if b.instant_time != target]
                    continue
                instant = block.instant_time or ""
                if invalid(instant):
                    log.debug("%s@%d: block of instant %s is not valid, skipped", path, block.offset, instant)
                    continue
                blocks.append(block)
        # A log-compacted block replaces the blocks whose instants it lists.
        compacted = {t for b in blocks for t in b.compacted_block_times}
        return [b for b in blocks if b.compacted_block_times or b.instant_time not in compacted]

    def _drop_pending(self, partition: str, files: dict[str, int]) -> dict[str, int]:
        pending = {i.requested_time for i in self.data_timeline.pending()}
        if not pending:
            return files
        out = {}
        for name, size in files.items():
            instant = writer_instant(name, self.data_config.version)
            if instant is not None and instant in pending:
                log.debug(
                    "%s: MDT lists %s/%s written by instant %s, pending on the data timeline; ignored",
                    METADATA_FOLDER,
                    partition,
                    name,
                    instant,
                )
                continue
            out[name] = size
        return out


# ---------------------------------------------------------------------- drift


@dataclass(frozen=True)
class PartitionDrift:
    """Differences in one partition between the storage listing and the MDT listing."""

    partition: str
    missing_in_mdt: tuple[str, ...] = ()
    missing_in_storage: tuple[str, ...] = ()
    size_mismatch: tuple[tuple[str, int, int], ...] = ()  # (name, storage size, MDT size)

    @property
    def count(self) -> int:
        return len(self.missing_in_mdt) + len(self.missing_in_storage) + len(self.size_mismatch)


@dataclass(frozen=True)
class ListingDrift:
    """Per-partition drift; empty when the two listings agree on names and sizes."""

    partitions: tuple[PartitionDrift, ...] = field(default=())

    @property
    def count(self) -> int:
        return sum(p.count for p in self.partitions)

    def __bool__(self) -> bool:
        return self.count > 0

    def summary(self) -> str:
        if not self:
            return "MDT listing matches storage"
        parts = [
            f"{p.partition or '(root)'}: {len(p.missing_in_mdt)} missing in MDT, "
            f"{len(p.missing_in_storage)} missing in storage, {len(p.size_mismatch)} size mismatches"
            for p in self.partitions
        ]
        return "; ".join(parts)


FilesByPartition = Mapping[str, Mapping[str, int] | Iterable[tuple[str, int]]]


def listing_drift(storage_files: FilesByPartition, mdt_files: FilesByPartition) -> ListingDrift:
    """Compare two listings (partition -> {name: size} or [(name, size)]) file by file."""
    left = {p: dict(v.items() if isinstance(v, Mapping) else v) for p, v in storage_files.items()}
    right = {p: dict(v.items() if isinstance(v, Mapping) else v) for p, v in mdt_files.items()}
    out = []
    for partition in sorted(set(left) | set(right)):
        s, m = left.get(partition, {}), right.get(partition, {})
        drift = PartitionDrift(
            partition,
            tuple(sorted(set(s) - set(m))),
            tuple(sorted(set(m) - set(s))),
            tuple((n, s[n], m[n]) for n in sorted(set(s) & set(m)) if s[n] != m[n]),
        )
        if drift.count:
            out.append(drift)
    return ListingDrift(tuple(out))
