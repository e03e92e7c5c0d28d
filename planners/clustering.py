"""The clustering planner: which small base files to rewrite together (size-based, Hudi's defaults).

As Hudi's ``SparkSizeBasedClusteringPlanStrategy`` / ``PartitionAwareClusteringPlanStrategy``:
per partition (after the partition filter), the latest file slices of file groups that are not
replaced and have no pending compaction, log compaction or clustering, whose base file is smaller
than ``hoodie.clustering.plan.strategy.small.file.limit`` (300 MB), ordered by base size, largest
first, are packed into groups of at most ``...max.bytes.per.group`` (2 GB); each group gets
``ceil(group bytes / ...target.file.max.bytes)`` (1 GB) output file groups; at most
``...max.num.groups`` (30) groups in all. A group of a single slice without log files is kept only
when sort columns are set or ``hoodie.clustering.plan.strategy.single.group.clustering.enabled``
(default true, as Hudi 1.x: the fixtures' real plans hold single-file groups without sorting).

The plan is a ``HoodieRequestedReplaceMetadata`` (operationType ``CLUSTER``) with the shape of
the real plans in the v9 fixtures: slices carry full base/log paths, ``bootstrapFilePath`` "",
``version`` 1, the ``FileSliceMetricUtils`` metrics; strategy
``SparkSortAndSizeExecutionStrategy`` with the sort columns as its only param when set;
``preserveHoodieMetadata`` true. ``schedule_clustering`` writes it as ``<T>.clustering.requested``
(``<T>.replacecommit.requested`` on table version 6, via ``TimelineWriter.disk_action``).

Not done yet: the RECENT_DAYS partition filter. A table whose metadata table has a partition a
clustering's commit cannot keep exact is refused before anything is written
(``hoodie.metadata.commit.require_commit_maintainable``, the executor's rule), and so are the other
plans the executor would refuse: a table without meta fields (``require_meta_fields``; Apache Hudi
clusters those with its key generators, hoodied does not) and sort columns that are not sortable
top-level columns of the table's schema (``check_sort_columns``). Each is an
``UnsupportedTableError`` raised before any file is written: one line for ``hoodied schedule``, and
for the daemon a planning note, the service left waiting rather than planned again at every poll.

Its trigger, ``clustering_due`` (``hoodie.clustering.async.max.commits``), sits beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hoodied.hoodie.actions.clustering import check_sort_columns
from hoodied.hoodie.actions.services import TableService, service_of
from hoodied.hoodie.actions.write_schema import require_meta_fields, write_schemas
from hoodied.hoodie.errors import InstantStateError
from hoodied.hoodie.fsview import FilesByPartition, FileSlice, FileSystemView, LogFile, list_storage
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.metadata.commit import CLUSTER, require_commit_maintainable
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.compact import TimelineCounts
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.clean import completed_writes_after

__all__ = [
    "EXECUTION_STRATEGY",
    "ClusteringPlanResult",
    "ClusteringSettings",
    "clustering_due",
    "clustering_due_counts",
    "plan_clustering",
    "schedule_clustering",
]

_MB = 1024 * 1024
EXECUTION_STRATEGY = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"
SORT_COLUMNS_KEY = "hoodie.clustering.plan.strategy.sort.columns"


@dataclass(frozen=True, slots=True)
class ClusteringSettings:
    """Hudi's clustering plan options and defaults."""

    small_file_limit: int = 300 * _MB
    """``hoodie.clustering.plan.strategy.small.file.limit``."""
    max_bytes_per_group: int = 2048 * _MB
    """``hoodie.clustering.plan.strategy.max.bytes.per.group``."""
    target_file_max_bytes: int = 1024 * _MB
    """``hoodie.clustering.plan.strategy.target.file.max.bytes``."""
    max_num_groups: int = 30
    """``hoodie.clustering.plan.strategy.max.num.groups``."""
    sort_columns: tuple[str, ...] = ()
    """``hoodie.clustering.plan.strategy.sort.columns``."""
    single_group_clustering: bool = True
    """``hoodie.clustering.plan.strategy.single.group.clustering.enabled``."""
    filter_mode: str = "NONE"
    """``hoodie.clustering.plan.partition.filter.mode``: NONE or SELECTED_PARTITIONS."""
    begin_partition: str | None = None
    """``hoodie.clustering.plan.strategy.cluster.begin.partition``."""
    end_partition: str | None = None
    """``hoodie.clustering.plan.strategy.cluster.end.partition``."""
    trigger_commits: int | None = None
    """``hoodie.clustering.async.max.commits``: when set, ``schedule_clustering`` checks under the lock
    that a clustering is still due (``clustering_due``), as Hudi's ``ClusteringPlanActionExecutor``
    does when it schedules: a writer's own scheduler may have planned one since the daemon looked.
    ``None`` (an explicit ``hoodied schedule clustering``) plans whatever the trigger says."""

    def __post_init__(self) -> None:
        if self.filter_mode not in ("NONE", "SELECTED_PARTITIONS"):
            mode = self.filter_mode
            raise ValueError(f"hoodie.clustering.plan.partition.filter.mode={mode}: not supported")
        if min(self.small_file_limit, self.max_bytes_per_group, self.target_file_max_bytes) <= 0:
            raise ValueError("clustering size limits must be > 0")

    def keeps_partition(self, partition: str) -> bool:
        if self.filter_mode == "NONE":
            return True
        return (self.begin_partition is None or partition >= self.begin_partition) and (
            self.end_partition is None or partition <= self.end_partition
        )


@dataclass(slots=True)
class ClusteringPlanResult:
    """The plan (``None`` when nothing qualifies), why, and the file groups skipped as pending."""

    plan: dict[str, Any] | None
    reason: str
    instant_time: str
    skipped_pending: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        """One line: what the plan clusters, or why there is no plan."""
        pending = f"; {len(self.skipped_pending)} file groups skipped (pending services)" \
            if self.skipped_pending else ""
        if self.plan is None:
            return f"nothing to cluster: {self.reason}{pending}"
        groups = self.plan["clusteringPlan"]["inputGroups"]
        slices = [s for g in groups for s in g["slices"]]
        parts = len({s["partitionPath"] for s in slices})
        outputs = sum(int(g["numOutputFileGroups"]) for g in groups)
        read_mb = sum(g["metrics"]["TOTAL_IO_READ_MB"] for g in groups)
        return (f"{len(groups)} clustering groups: {len(slices)} file groups in {parts} partitions "
                f"({read_mb:.0f} MB) into {outputs} new file groups{pending}")


def _full(base_uri: str, rel: str) -> str:
    return f"{base_uri.rstrip('/')}/{rel}"


def _slice_info(s: FileSlice, base_uri: str) -> dict[str, Any]:
    logs = sorted(s.log_files, key=LogFile.sort_key)
    return {
        "dataFilePath": _full(base_uri, s.base_file.path) if s.base_file is not None else None,
        "deltaFilePaths": [_full(base_uri, lf.path) for lf in logs],
        "fileId": s.file_id,
        "partitionPath": s.partition,
        "bootstrapFilePath": "",
        "version": 1,
    }


def _metrics(slices: list[FileSlice], target: int) -> dict[str, float]:
    log_files = [lf for s in slices for lf in s.log_files]
    log_size = sum(max(lf.size, 0) for lf in log_files)
    base = sum(s.base_file.size for s in slices if s.base_file is not None)
    read_mb = (base + log_size) // _MB
    write_mb = (base if base > 0 else target) // _MB
    return {
        "TOTAL_LOG_FILES": float(len(log_files)),
        "TOTAL_IO_MB": float(read_mb + write_mb),
        "TOTAL_IO_READ_MB": float(read_mb),
        "TOTAL_LOG_FILES_SIZE": float(log_size),
        "TOTAL_IO_WRITE_MB": float(write_mb),
    }


def _size(s: FileSlice) -> int:
    return (s.base_file.size if s.base_file is not None else 0) + sum(max(lf.size, 0) for lf in s.log_files)


def plan_clustering(
    config: TableConfig,
    timeline: Timeline,
    files_by_partition: FilesByPartition,
    instant_time: str,
    base_uri: str,
    settings: ClusteringSettings | None = None,
) -> ClusteringPlanResult:
    """Group the small file slices of every kept partition into clustering groups."""
    settings = settings or ClusteringSettings()
    view = FileSystemView.build(files_by_partition, timeline, config)
    result = ClusteringPlanResult(None, "", instant_time)
    by_partition: dict[str, list[FileSlice]] = {}
    for group in view.file_groups():
        if not settings.keeps_partition(group.partition):
            continue
        if group.pending_compaction or group.pending_log_compaction or group.pending_clustering:
            result.skipped_pending.append((group.partition, group.file_id))
            continue
        s = group.latest_slice
        if s is None or s.base_file is None or s.base_file.size >= settings.small_file_limit:
            continue
        by_partition.setdefault(group.partition, []).append(s)
    groups: list[dict[str, Any]] = []
    for partition in sorted(by_partition):
        slices = sorted(by_partition[partition], key=lambda x: -x.base_file.size)  # type: ignore[union-attr]
        current: list[FileSlice] = []
        size = 0
        packed: list[list[FileSlice]] = []
        for s in slices:
            if current and size + _size(s) > settings.max_bytes_per_group:
                packed.append(current)
                current, size = [], 0
            current.append(s)
            size += _size(s)
        if current:
            packed.append(current)
        for members in packed:
            single = len(members) == 1 and not members[0].log_files
            if single and not (settings.sort_columns or settings.single_group_clustering):
                continue
            total = sum(_size(s) for s in members)
            groups.append({
                "slices": [_slice_info(s, base_uri) for s in members],
                "metrics": _metrics(members, settings.target_file_max_bytes),
                "numOutputFileGroups": max(1, math.ceil(total / settings.target_file_max_bytes)),
                "extraMetadata": None,
                "version": 1,
            })
    groups = groups[: settings.max_num_groups]
    if not groups:
        result.reason = "no small file slices to cluster"
        return result
    params: Mapping[str, str] = (
        {SORT_COLUMNS_KEY: ",".join(settings.sort_columns)} if settings.sort_columns else {}
    )
    result.plan = {
        "operationType": "CLUSTER",
        "clusteringPlan": {
            "inputGroups": groups,
            "strategy": {
                "strategyClassName": EXECUTION_STRATEGY, "strategyParams": dict(params), "version": 1
            },
            "extraMetadata": {},
            "version": 1,
            "preserveHoodieMetadata": True,
            "missingSchedulePartitions": [],
        },
        "extraMetadata": {},
        "version": 1,
    }
    result.reason = f"{len(groups)} clustering groups"
    return result


def schedule_clustering(
    storage: Storage,
    lock: TableLock,
    settings: ClusteringSettings | None = None,
    *,
    dry_run: bool = False,
    time_settings: TimeSettings | None = None,
) -> tuple[Instant | None, ClusteringPlanResult]:
    """Plan under the lock with a TrueTime instant and write ``<T>.clustering.requested``."""
    config = load_table_config(storage)
    require_commit_maintainable(storage, config, CLUSTER, "clustering")
    require_meta_fields(config, storage.base_uri, "clustering")
    settings = settings or ClusteringSettings()
    with lock:
        timeline = Timeline.load(storage, config)
        trigger = settings.trigger_commits
        if trigger is not None and clustering_due(timeline, trigger) is None:
            # the timeline read under the lock: a clustering planned meanwhile, or not due any more
            return None, ClusteringPlanResult(None, "no longer due under the table lock (a clustering is "
                                              "pending, or too few commits since the last one)", "")
        writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
        instant_time = writer.new_instant_time()
        result = plan_clustering(
            config, timeline, list_storage(storage, config), instant_time, storage.base_uri, settings
        )
        if result.plan is not None and settings.sort_columns:
            schema = write_schemas(HoodieTable(storage, config, timeline), storage.base_uri).arrow
            check_sort_columns(settings.sort_columns, schema, storage.base_uri)
        if result.plan is None or dry_run:
            return None, result
        instant = writer.create_requested(Action.CLUSTERING, instant_time, result.plan)
        if instant.state is not State.REQUESTED:
            raise InstantStateError(f"{instant_time}: clustering instant already {instant.state.value}")
        return instant, result


# ---------------------------------------------------------------------------- trigger


def _last_completed_clustering(timeline: Timeline) -> Instant | None:
    # timeline layout 2 (table version 8+) names every clustering `clustering`; before it, a
    # clustering is a replacecommit whose plan says CLUSTER (read once, cached by the timeline)
    actions = (Action.CLUSTERING,) if timeline.config.timeline_layout >= 2 else (Action.REPLACE_COMMIT,)
    for inst in reversed(timeline.instants):
        if inst.is_completed and inst.action in actions and timeline.is_clustering(inst):
            return inst
    return None


def clustering_due(timeline: Timeline, trigger_commits: int) -> str | None:
    """No clustering pending and ``trigger_commits`` (``hoodie.clustering.async.max.commits``)
    completed commits since the last completed clustering (Hudi's ``ClusteringPlanActionExecutor``
    check): why a clustering should be planned now, or ``None``.

    On table version 6 the plans of the replacecommits after the last clustering are read to
    tell a clustering from an insert-overwrite (once per timeline: an unchanged timeline is
    reused between polls); later versions need the timeline only.
    """
    pending = timeline.pending((Action.CLUSTERING, Action.REPLACE_COMMIT))
    if any(service_of(timeline, inst) is TableService.CLUSTERING for inst in pending):
        return None
    commits = completed_writes_after(timeline, _last_completed_clustering(timeline))
    if commits < trigger_commits:
        return None
    return f"{commits} completed commits since the last clustering (trigger {trigger_commits})"


def clustering_due_counts(counts: TimelineCounts, trigger_commits: int) -> str | None:
    """``clustering_due`` on the counts of a timeline of layout 2 (table version 8+, where every
    clustering is a ``clustering`` instant) with no pending replacecommit (``scan_names`` leaves
    those to the ``Timeline``: their plan tells a clustering from an insert-overwrite)."""
    config = counts.config
    if config.timeline_layout < 2 or counts.has_pending((Action.REPLACE_COMMIT,)):
        raise ValueError("clustering_due_counts needs a layout-2 timeline without pending replacecommits")
    if counts.has_pending((Action.CLUSTERING,)):
        return None
    last = counts.latest_completed((Action.CLUSTERING,)) or ""
    commits = counts.completed_after(WRITE_ACTIONS, last)
    if commits < trigger_commits:
        return None
    return f"{commits} completed commits since the last clustering (trigger {trigger_commits})"
