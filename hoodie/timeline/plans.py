"""Typed table-service plans, decoded from the Avro plan records of the timeline.

Each plan is a frozen dataclass with ``from_avro(record)`` (the dict ``hoodie.avro.container`` decodes,
with the field names of Hudi's schemas) and ``summary()`` (one line for logs and the CLI).
Fields absent from older writer schemas take the schema defaults. ``decode_plan`` picks the
type from the instant's action. File references are kept as Hudi wrote them (compaction
plans version 2: file names; clustering slices: full URIs); ``*_name`` properties give the
bare file names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.human import format_size
from hoodied.hoodie.timeline.instant import Action, Instant

__all__ = [
    "CleanFileInfo",
    "CleanerPlan",
    "ClusteringGroup",
    "ClusteringPlan",
    "CompactionOperation",
    "CompactionPlan",
    "IndexPartitionInfo",
    "IndexPlan",
    "InstantInfo",
    "Plan",
    "RestorePlan",
    "RollbackPlan",
    "RollbackRequest",
    "SliceInfo",
    "compaction_operation",
    "decode_plan",
]


def _name(path: str | None) -> str | None:
    """Bare file name of a file name, relative path or URI."""
    if not path:
        return None
    return path.rstrip("/").rsplit("/", 1)[-1]


def _map(value: Mapping[str, Any] | None) -> dict[str, Any]:
    # plain dicts (not MappingProxyType): plans travel to Spark workers and must pickle
    return dict(value or {})


def _strs(value: list[str] | None) -> tuple[str, ...]:
    return tuple(value or ())


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --------------------------------------------------------------------------------------
# Compaction / log compaction (HoodieCompactionPlan)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionOperation:
    """One file group to compact: its base file (may be absent) and the log files to merge."""

    partition_path: str
    file_id: str
    base_instant_time: str | None
    data_file_path: str | None
    delta_file_paths: tuple[str, ...]
    metrics: Mapping[str, float] = field(default_factory=dict, hash=False)
    bootstrap_file_path: str | None = None

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> CompactionOperation:
        return cls(
            partition_path=d.get("partitionPath") or "",
            file_id=d.get("fileId") or "",
            base_instant_time=d.get("baseInstantTime"),
            data_file_path=d.get("dataFilePath") or None,
            delta_file_paths=_strs(d.get("deltaFilePaths")),
            metrics=_map(d.get("metrics")),
            bootstrap_file_path=d.get("bootstrapFilePath") or None,
        )

    @property
    def base_file_name(self) -> str | None:
        return _name(self.data_file_path)

    @property
    def log_file_names(self) -> tuple[str, ...]:
        return tuple(n for n in (_name(p) for p in self.delta_file_paths) if n)

    @property
    def log_files_size(self) -> float:
        return float(self.metrics.get("TOTAL_LOG_FILES_SIZE", 0.0))


@dataclass(frozen=True)
class CompactionPlan:
    """``HoodieCompactionPlan`` of a compaction or log compaction (same Avro type)."""

    operations: tuple[CompactionOperation, ...]
    extra_metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    version: int | None = None
    compactor_class_name: str | None = None
    strategy_params: Mapping[str, str] = field(default_factory=dict, hash=False)
    preserve_hoodie_metadata: bool = False
    missing_schedule_partitions: tuple[str, ...] = ()

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> CompactionPlan:
        strategy = d.get("strategy") or {}
        return cls(
            operations=tuple(CompactionOperation.from_avro(op) for op in d.get("operations") or ()),
            extra_metadata=_map(d.get("extraMetadata")),
            version=d.get("version"),
            compactor_class_name=strategy.get("compactorClassName"),
            strategy_params=_map(strategy.get("strategyParams")),
            preserve_hoodie_metadata=bool(d.get("preserveHoodieMetadata")),
            missing_schedule_partitions=_strs(d.get("missingSchedulePartitions")),
        )

    @property
    def file_groups(self) -> frozenset[tuple[str, str]]:
        """(partition, file id) of every operation."""
        return frozenset((op.partition_path, op.file_id) for op in self.operations)

    def summary(self) -> str:
        logs = sum(len(op.delta_file_paths) for op in self.operations)
        size = sum(op.log_files_size for op in self.operations)
        parts = {op.partition_path for op in self.operations}
        return (
            f"{_plural(len(self.operations), 'file group')} in {_plural(len(parts), 'partition')}, "
            f"{_plural(logs, 'log file')}, {format_size(size)}"
        )


# --------------------------------------------------------------------------------------
# Clustering (HoodieRequestedReplaceMetadata.clusteringPlan)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SliceInfo:
    """One input file slice of a clustering group."""

    partition_path: str
    file_id: str
    data_file_path: str | None
    delta_file_paths: tuple[str, ...] = ()
    bootstrap_file_path: str | None = None
    version: int | None = None

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> SliceInfo:
        return cls(
            partition_path=d.get("partitionPath") or "",
            file_id=d.get("fileId") or "",
            data_file_path=d.get("dataFilePath") or None,
            delta_file_paths=_strs(d.get("deltaFilePaths")),
            bootstrap_file_path=d.get("bootstrapFilePath") or None,
            version=d.get("version"),
        )

    @property
    def base_file_name(self) -> str | None:
        return _name(self.data_file_path)

    @property
    def log_file_names(self) -> tuple[str, ...]:
        return tuple(n for n in (_name(p) for p in self.delta_file_paths) if n)


@dataclass(frozen=True)
class ClusteringGroup:
    """Slices rewritten together into ``num_output_file_groups`` new file groups."""

    slices: tuple[SliceInfo, ...]
    metrics: Mapping[str, float] = field(default_factory=dict, hash=False)
    num_output_file_groups: int = 1
    extra_metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    version: int | None = None

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> ClusteringGroup:
        n_out = d.get("numOutputFileGroups")
        return cls(
            slices=tuple(SliceInfo.from_avro(s) for s in d.get("slices") or ()),
            metrics=_map(d.get("metrics")),
            num_output_file_groups=1 if n_out is None else int(n_out),
            extra_metadata=_map(d.get("extraMetadata")),
            version=d.get("version"),
        )


@dataclass(frozen=True)
class ClusteringPlan:
    """``HoodieClusteringPlan`` (with the ``operationType`` of its requested-replace wrapper)."""

    input_groups: tuple[ClusteringGroup, ...]
    strategy_class_name: str | None = None
    strategy_params: Mapping[str, str] = field(default_factory=dict, hash=False)
    extra_metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    version: int | None = None
    preserve_hoodie_metadata: bool | None = None
    missing_schedule_partitions: tuple[str, ...] = ()
    operation_type: str | None = "CLUSTER"

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> ClusteringPlan:
        """Accepts a ``HoodieRequestedReplaceMetadata`` or a bare ``HoodieClusteringPlan``."""
        operation_type: str | None = "CLUSTER"
        if "clusteringPlan" in d or "operationType" in d:
            operation_type = d.get("operationType")
            d = d.get("clusteringPlan") or {}
        strategy = d.get("strategy") or {}
        return cls(
            input_groups=tuple(ClusteringGroup.from_avro(g) for g in d.get("inputGroups") or ()),
            strategy_class_name=strategy.get("strategyClassName"),
            strategy_params=_map(strategy.get("strategyParams")),
            extra_metadata=_map(d.get("extraMetadata")),
            version=d.get("version"),
            preserve_hoodie_metadata=d.get("preserveHoodieMetadata"),
            missing_schedule_partitions=_strs(d.get("missingSchedulePartitions")),
            operation_type=operation_type,
        )

    @property
    def file_groups(self) -> frozenset[tuple[str, str]]:
        return frozenset((s.partition_path, s.file_id) for g in self.input_groups for s in g.slices)

    def summary(self) -> str:
        slices = sum(len(g.slices) for g in self.input_groups)
        outputs = sum(g.num_output_file_groups for g in self.input_groups)
        logs = sum(len(s.delta_file_paths) for g in self.input_groups for s in g.slices)
        return (
            f"{_plural(len(self.input_groups), 'group')}, {_plural(slices, 'file group')} -> "
            f"{_plural(outputs, 'output file group')}, {_plural(logs, 'log file')}"
        )


# --------------------------------------------------------------------------------------
# Clean, rollback, restore, indexing
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstantInfo:
    """``HoodieInstantInfo`` / ``HoodieActionInstant``: an instant named inside a plan."""

    timestamp: str
    action: str
    state: str | None = None


@dataclass(frozen=True)
class CleanFileInfo:
    file_path: str
    is_bootstrap_base_file: bool = False

    @property
    def file_name(self) -> str:
        return _name(self.file_path) or ""


@dataclass(frozen=True)
class CleanerPlan:
    """``HoodieCleanerPlan``. ``files_to_delete`` merges the v1 (names) and v2 (paths) fields."""

    earliest_instant_to_retain: InstantInfo | None
    last_completed_commit_timestamp: str
    policy: str
    files_to_delete: Mapping[str, tuple[CleanFileInfo, ...]] = field(hash=False)
    partitions_to_delete: tuple[str, ...] = ()
    version: int | None = None
    extra_metadata: Mapping[str, str] = field(default_factory=dict, hash=False)

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> CleanerPlan:
        eitr = d.get("earliestInstantToRetain")
        files: dict[str, tuple[CleanFileInfo, ...]] = {}
        for partition, names in (d.get("filesToBeDeletedPerPartition") or {}).items():
            files[partition] = tuple(CleanFileInfo(n) for n in names)
        for partition, infos in (d.get("filePathsToBeDeletedPerPartition") or {}).items():
            files[partition] = tuple(
                CleanFileInfo(i.get("filePath") or "", bool(i.get("isBootstrapBaseFile"))) for i in infos
            )
        return cls(
            earliest_instant_to_retain=(
                InstantInfo(eitr["timestamp"], eitr["action"], eitr.get("state")) if eitr else None
            ),
            last_completed_commit_timestamp=d.get("lastCompletedCommitTimestamp") or "",
            policy=d.get("policy") or "",
            files_to_delete=files,
            partitions_to_delete=_strs(d.get("partitionsToBeDeleted")),
            version=d.get("version"),
            extra_metadata=_map(d.get("extraMetadata")),
        )

    def summary(self) -> str:
        n = sum(len(v) for v in self.files_to_delete.values())
        retain = self.earliest_instant_to_retain.timestamp if self.earliest_instant_to_retain else "-"
        return (
            f"{_plural(n, 'file')} in {_plural(len(self.files_to_delete), 'partition')}, "
            f"{_plural(len(self.partitions_to_delete), 'partition')} dropped, policy {self.policy or '-'}, "
            f"retain from {retain}"
        )


@dataclass(frozen=True)
class RollbackRequest:
    partition_path: str
    file_id: str | None
    latest_base_instant: str | None
    files_to_be_deleted: tuple[str, ...]
    log_blocks_to_be_deleted: Mapping[str, int] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class RollbackPlan:
    """``HoodieRollbackPlan``: the instant to roll back and the files to delete."""

    instant_to_rollback: InstantInfo | None
    requests: tuple[RollbackRequest, ...]
    version: int | None = None

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> RollbackPlan:
        target = d.get("instantToRollback")
        return cls(
            instant_to_rollback=InstantInfo(target["commitTime"], target["action"]) if target else None,
            requests=tuple(
                RollbackRequest(
                    partition_path=r.get("partitionPath") or "",
                    file_id=r.get("fileId") or None,
                    latest_base_instant=r.get("latestBaseInstant") or None,
                    files_to_be_deleted=_strs(r.get("filesToBeDeleted")),
                    log_blocks_to_be_deleted=_map(r.get("logBlocksToBeDeleted")),
                )
                for r in d.get("RollbackRequests") or ()
            ),
            version=d.get("version"),
        )

    def summary(self) -> str:
        target = self.instant_to_rollback
        what = f"{target.action} {target.timestamp}" if target else "unknown instant"
        files = sum(len(r.files_to_be_deleted) for r in self.requests)
        logs = sum(len(r.log_blocks_to_be_deleted) for r in self.requests)
        return f"roll back {what}: {_plural(files, 'file')} to delete, {_plural(logs, 'log file')} to revert"


@dataclass(frozen=True)
class RestorePlan:
    """``HoodieRestorePlan``: instants rolled back to reach a savepoint."""

    instants_to_rollback: tuple[InstantInfo, ...]
    savepoint_to_restore_timestamp: str | None = None
    version: int | None = None

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> RestorePlan:
        return cls(
            instants_to_rollback=tuple(
                InstantInfo(i["commitTime"], i["action"]) for i in d.get("instantsToRollback") or ()
            ),
            savepoint_to_restore_timestamp=d.get("savepointToRestoreTimestamp"),
            version=d.get("version"),
        )

    def summary(self) -> str:
        return (
            f"restore to {self.savepoint_to_restore_timestamp or '-'}: "
            f"{_plural(len(self.instants_to_rollback), 'instant')} rolled back"
        )


@dataclass(frozen=True)
class IndexPartitionInfo:
    metadata_partition_path: str
    index_upto_instant: str | None
    extra_metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    version: int | None = None


@dataclass(frozen=True)
class IndexPlan:
    """``HoodieIndexPlan``: metadata-table partitions to build, each up to an instant."""

    partition_infos: tuple[IndexPartitionInfo, ...]
    version: int | None = None

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> IndexPlan:
        return cls(
            partition_infos=tuple(
                IndexPartitionInfo(
                    metadata_partition_path=i.get("metadataPartitionPath") or "",
                    index_upto_instant=i.get("indexUptoInstant"),
                    extra_metadata=_map(i.get("extraMetadata")),
                    version=i.get("version"),
                )
                for i in d.get("indexPartitionInfos") or ()
            ),
            version=d.get("version"),
        )

    def summary(self) -> str:
        names = ", ".join(p.metadata_partition_path for p in self.partition_infos) or "-"
        return f"index {_plural(len(self.partition_infos), 'partition')}: {names}"


Plan = CompactionPlan | ClusteringPlan | CleanerPlan | RollbackPlan | RestorePlan | IndexPlan


_MB = 1024 * 1024


def compaction_operation(
    partition: str,
    file_id: str,
    base_instant: str,
    base_file: str | None,
    base_size: int,
    log_files: Sequence[tuple[str, int]],
    write_bytes: int,
) -> dict[str, Any]:
    """A ``HoodieCompactionOperation`` record with the ``FileSliceMetricUtils`` metrics Hudi writes.

    ``log_files``: (file name, size) in plan order; ``write_bytes``: the estimated size of the
    new base file (each planner has its own estimate for a slice without a base file).
    """
    log_size = sum(max(size, 0) for _, size in log_files)
    read_mb = (base_size + log_size) // _MB
    write_mb = write_bytes // _MB
    return {
        "baseInstantTime": base_instant,
        "deltaFilePaths": [name for name, _ in log_files],
        "dataFilePath": base_file,
        "fileId": file_id,
        "partitionPath": partition,
        "metrics": {
            "TOTAL_LOG_FILES": float(len(log_files)),
            "TOTAL_IO_MB": float(read_mb + write_mb),
            "TOTAL_IO_READ_MB": float(read_mb),
            "TOTAL_LOG_FILES_SIZE": float(log_size),
            "TOTAL_IO_WRITE_MB": float(write_mb),
        },
        "bootstrapFilePath": None,
    }


def decode_plan(instant: Instant, plan: Mapping[str, Any] | None) -> Plan | None:
    """The typed plan for ``instant``'s action; ``None`` when there is none.

    A ``replacecommit`` yields a ``ClusteringPlan`` only when its requested metadata carries a
    clustering plan (v6 clustering); an insert-overwrite's requested metadata has none.
    """
    if plan is None:
        return None
    action = instant.action
    if action in (Action.COMPACTION, Action.LOG_COMPACTION):
        return CompactionPlan.from_avro(plan)
    if action is Action.CLUSTERING:
        return ClusteringPlan.from_avro(plan)
    if action is Action.REPLACE_COMMIT:
        if plan.get("clusteringPlan") is None:
            return None
        return ClusteringPlan.from_avro(plan)
    if action is Action.CLEAN:
        return CleanerPlan.from_avro(plan)
    if action is Action.ROLLBACK:
        return RollbackPlan.from_avro(plan)
    if action is Action.RESTORE:
        return RestorePlan.from_avro(plan)
    if action is Action.INDEXING:
        return IndexPlan.from_avro(plan)
    return None
