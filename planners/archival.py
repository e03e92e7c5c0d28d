"""The archival planner: which completed instants leave the active timeline, as Hudi 1.x decides.

Mirrors ``TimelineArchiverV2.getInstantsToArchive`` / ``getCommitInstantsToArchive`` and
``ArchivalUtils.getMinAndMaxInstantsToKeep`` (table versions 8 and 9). It reads the timeline and
writes nothing; ``executors.archival`` writes the history and deletes the archived files.

The *commits timeline* is every completed write instant on the active timeline (commit,
deltacommit, replacecommit, and completed compaction, log compaction and clustering).

1. Min/max to keep: ``hoodie.keep.min.commits`` (20) / ``hoodie.keep.max.commits`` (30). When the
   cleaner's earliest commit to retain (``CleanerUtils.getEarliestCommitToRetain`` with the
   ``hoodie.clean.*`` settings; by hours, counted back from the latest commit) leaves more than
   ``min - 2`` completed commits after it, both are raised: min = (commits after it) + 2, max by
   the same amount.
2. Nothing is archived while the commits timeline holds at most ``max`` instants.
3. The earliest instant to retain is the earliest of these candidates (each a ``StopReason``):
   - the earliest pending write instant (any write action, requested or inflight): the last
     completed commit before it, or the pending instant itself when there is none;
   - MOR with ``hoodie.compact.inline.trigger.strategy`` NUM_COMMITS or NUM_AND_TIME
     (``CompactionUtils.getEarliestInstantToRetainForCompaction``): counting the delta commits
     (``deltacommit`` files: any state, and completed log compactions) after the latest
     completed ``commit`` (a compaction; all of them when there is none):
     fewer than ``hoodie.compact.inline.max.delta.commits`` (5): that latest commit (or the first
     delta commit); otherwise the delta commit that leaves exactly max-1 after it;
   - replacecommits and clusterings (``ClusteringUtils.getEarliestInstantToRetainForClustering``):
     with a completed clean, the first of them at or after the clean plan's earliest instant to
     retain (or the earliest savepoint the clean kept files for, when a completed replacecommit
     lies between that savepoint and the ECTR; or the clean's own time without an ECTR);
     without a clean, the first of them;
   - a data table with a metadata table (``hoodie.metadata.enable``, default on, and ``files``
     in the table's metadata partitions): nothing is archived before the MDT has a completed
     compaction; then the first completed commit that completed after the MDT's latest compaction.
4. Savepoints: archival stops at the first completed savepoint, or with
   ``hoodie.archive.beyond.savepoint`` only the savepointed commits are skipped.
5. Of the commits before the earliest instant to retain, at most (commits - min) oldest are
   archived, with every completed clean and rollback requested before the last one of them.

Every archived instant leaves with all its files (requested, inflight, completed). Savepoint,
restore and indexing instants are never archived (as in Hudi).

Table version 6 (timeline layout 1) follows Hudi 0.14 / 0.15's ``HoodieTimelineArchiver``
(``getCleanInstantsToArchive``, ``getCommitInstantsToArchive``, ``getInstantsToArchive``), which
differs from the above in these points:

- min/max: the same ``ArchivalUtils.getMinAndMaxInstantsToKeep``, but the cleaner's earliest
  commit to retain is taken on the commits timeline (commit, deltacommit, replacecommit), so a
  pending compaction does not hold it back;
- completed cleans and rollbacks are archived on their own, per action: when there are more
  than ``max`` of one action, its oldest (count - ``min``) go, whatever the commits do;
- the compaction trigger counts delta commits after the latest completed ``commit`` *or*
  ``replacecommit`` (0.x's ``getCommitTimeline`` holds both);
- replacecommits (``ClusteringUtils.getOldestInstantToRetainForClustering`` of 0.x): with a
  completed clean, the first replacecommit at or after the clean plan's earliest instant to
  retain (the clean's own time without one); without a clean the first replacecommit; and when a
  replacecommit is inflight, the last completed commit before it if that comes earlier
  (``PENDING_REPLACE``); savepoints kept by the clean play no part;
- a data table with a metadata table: nothing is archived before the MDT has a completed
  compaction; then every instant to archive (cleans and rollbacks too) must have been requested
  before the MDT's latest compaction (``getLatestCompactionTime``), a comparison of requested
  times, not of completion times.

The metadata table's own timeline (table versions 8 and 9, ``.hoodie/metadata/.hoodie/timeline``)
is archived by the MDT's write client with the same ``TimelineArchiverV2`` and the MDT writer
config of ``HoodieMetadataWriteUtils.createMetadataWriteConfig`` (``mdt_archival_settings``):

- ``hoodie.keep.min.commits`` / ``hoodie.keep.max.commits`` are the data table's plus one
  (1.x; the 0.x ``hoodie.metadata.keep.*`` keys are gone), auto archive off;
- the cleaner bound uses the MDT cleaner config, derived from the data table's (HUDI-7402):
  the same ``hoodie.clean.policy``; KEEP_LATEST_COMMITS retains
  max(20 = ``DEFAULT_METADATA_CLEANER_COMMITS_RETAINED``, int(data retained x 1.2)) commits,
  KEEP_LATEST_BY_HOURS ceil(data hours x 1.2) hours (``hoodie.metadata.upkeep.mdt_cleaner_retention``,
  the rule the MDT's own clean uses);
- the compaction trigger is NUM_COMMITS with ``hoodie.metadata.compact.max.delta.commits`` (10);
- ``hoodie.archive.beyond.savepoint`` is never set on the MDT config (false); the MDT has no
  metadata table of its own, so the MDT-compaction boundary does not apply;
- ``HoodieTableMetadata.isMetadataTable``: one more boundary (``DATA_TABLE_TIMELINE``,
  ``TimelineUtils.getEarliestInstantForMetadataArchival``): the earlier of the data table's
  first instant on its commits timeline (commit, deltacommit, replacecommit, clustering, any
  state; a completed compaction is a commit) and its first pending instant of any action. MDT
  instants from there on stay (``processRollbackMetadata`` needs them); completed cleans,
  rollbacks and indexing instants of the data table play no part.

Hudi runs that archival in ``HoodieBackedTableMetadataWriter.performTableServices`` (after the
MDT clean and compaction), which a data-table writer calls when it sets up its MDT writer for
its next instant, i.e. after the data table's own archival of the previous commit
(``autoArchiveOnCommit`` in its post-commit). hoodied keeps that order: data table first, then
its MDT, in one hold of the table lock, the MDT planned against the data timeline the first
step left.

The metadata table of table version 6 (``.hoodie/metadata/.hoodie``, archive in
``.hoodie/metadata/.hoodie/archived``) is archived as Hudi 0.15's MDT write client does
(``plan_mdt_archival_v6``, settings ``mdt_archival_settings_v6``): the same 0.x
``HoodieTimelineArchiver`` as the data table of version 6 above (cleans and rollbacks on their
own, per action; commits by min/max and the boundaries), with the MDT writer config of 0.x's
``HoodieMetadataWriteUtils.createMetadataWriteConfig``:

- ``archiveCommitsWith(hoodie.keep.min.commits, hoodie.keep.max.commits)`` of the data table's
  writer, unchanged (HUDI-5934 removed the ``hoodie.metadata.keep.min/max.commits`` keys before
  0.14.0; 1.x's "+ 1" is not in 0.x), auto archive off;
- MDT cleaner ``KEEP_LATEST_COMMITS`` whatever the data table's policy, retaining
  min(data ``hoodie.cleaner.commits.retained``, 20 = ``DEFAULT_METADATA_CLEANER_COMMITS_RETAINED``)
  commits (HUDI-6256); ``ArchivalUtils.getMinAndMaxInstantsToKeep`` raises min/max with it as
  for any table. 1.x's derivation from the data table's policy x 1.2 (HUDI-7402) was never taken
  into the 0.x branch (its ``HoodieMetadataWriteUtils`` still has the ``Math.min`` rule);
- compaction: MOR, trigger NUM_COMMITS (the MDT config sets no strategy) with
  ``hoodie.metadata.compact.max.delta.commits`` (10); the 0.x rule of the data table above
  (delta commits after the latest ``commit`` or ``replacecommit``);
- ``hoodie.archive.beyond.savepoint`` not set (false); the MDT has no savepoints of its own, and
  its ``hoodie.properties`` lists no metadata partitions, so the MDT-compaction rule for data
  tables (``isMetadataTableAvailable``) does not apply; ``hoodie.commits.archival.batch.size``
  not set (10);
- ``table.isMetadataTable()``: every instant to archive, cleans and rollbacks too, must have
  been requested before ``TimelineUtils.getEarliestInstantForMetadataArchival`` of the data
  table's active timeline (beyond savepoint off): the earlier of the first instant of its
  commits timeline (0.x ``getCommitsTimeline``: commit, deltacommit, replacecommit in any state;
  a completed compaction is a ``commit``) and its first requested or inflight instant of any
  action (``DATA_TABLE_TIMELINE``). A comparison of instant-time strings, as Hudi's
  ``compareTimestamps``: MDT compactions (``<T>001``) and cleans (``<T>002``) of data instant T
  sort after T and stay with it. A data-table savepoint holds the data table's archival, hence
  this boundary, hence the MDT's.

hoodied's timeline parser trims those suffixed times to 17 digits (``<T>001`` reads as T); against
17-digit data-table times every comparison above comes out as on the full string, and the
archived records and ``mdt_state`` take the full time from the file name
(``hoodie.timeline.archived_v6.file_instant_time``), as Hudi 0.x keeps it.

Hudi 0.15 runs it at the end of ``HoodieBackedTableMetadataWriter.performTableServices``
(pending MDT table services, then, once a completed MDT delta commit exists, clean, compaction,
``writeClient.archive()``), which 0.x too calls when a regular data-table writer sets up its MDT
writer, after its own archival of the previous commit; hoodied keeps the order of version 8/9.
Hudi 0.14.x has the same MDT keep/clean settings (HUDI-5934 and HUDI-6256 predate 0.14.0) and
the same ``isMetadataTable`` boundary, but an older ``HoodieTimelineArchiver``: min/max are not
raised by the cleaner, commits stop at the first pending compaction or replacecommit (and, with
the LAZY failed-writes policy, at the first inflight commit or delta commit) instead of at the
last commit before the first pending write; hoodied follows 0.15, as for data tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from enum import StrEnum
from typing import Any

from hoodied.hoodie.config_keys import HUDI_KEYS, ConfigKey, by_key
from hoodied.hoodie.metadata.compaction import max_delta_commits
from hoodied.hoodie.metadata.reader import METADATA_FOLDER
from hoodied.hoodie.metadata.rollback import latest_mdt_compaction
from hoodied.hoodie.metadata.upkeep import mdt_cleaner_retention
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.archive_writer import ArchivalUnsupportedError, require_lsm_history
from hoodied.hoodie.timeline.archived_v6 import file_instant_time
from hoodied.hoodie.timeline.instant import (
    WRITE_ACTIONS,
    Action,
    Instant,
    State,
    datetime_to_instant_time,
    instant_time_to_datetime,
    latest_commits_to_retain,
)
from hoodied.planners.clean import SAVEPOINTED_TIMESTAMPS, CleanPolicy
from hoodied.planners.compaction import TriggerStrategy

__all__ = [
    "ArchivalPlan",
    "ArchivalSettings",
    "ArchivalUnsupportedError",
    "Boundary",
    "MdtState",
    "StopReason",
    "archival_due",
    "archival_planner",
    "data_table_boundary",
    "mdt_archival_planner",
    "mdt_archival_settings",
    "mdt_archival_settings_v6",
    "mdt_archival_target",
    "mdt_state",
    "plan_archival",
    "plan_mdt_archival",
    "plan_mdt_archival_v6",
]


class StopReason(StrEnum):
    """Why archival stops where it does (one per boundary of ``TimelineArchiverV2``)."""

    NOT_ENOUGH_COMMITS = "not-enough-commits"
    """The commits timeline holds at most ``hoodie.keep.max.commits`` instants."""
    MIN_COMMITS_TO_KEEP = "min-commits-to-keep"
    """``hoodie.keep.min.commits`` (raised by the cleaner's retention when needed) are kept."""
    EARLIEST_PENDING_WRITE = "earliest-pending-write"
    """A pending write or table service: the last commit before it stays."""
    COMPACTION_DELTA_COMMITS = "compaction-delta-commits"
    """Delta commits the compaction trigger (NUM_COMMITS) still counts."""
    CLUSTERING_NOT_CLEANED = "replaced-files-not-cleaned"
    """A replacecommit/clustering whose replaced files the latest clean has not removed yet."""
    NO_MDT_COMPACTION = "no-metadata-table-compaction"
    """The metadata table has never been compacted."""
    MDT_COMPACTION = "metadata-table-compaction"
    """Commits that completed after the metadata table's latest compaction."""
    SAVEPOINT = "savepoint"
    """The first savepoint (``hoodie.archive.beyond.savepoint`` off)."""
    PENDING_REPLACE = "pending-replacecommit"
    """Table version 6: an inflight replacecommit; the last completed commit before it stays."""
    DATA_TABLE_TIMELINE = "data-table-active-timeline"
    """A metadata table: instants from the data table's first active commit or pending instant on."""


#: Hudi key -> settings field (each key also read under its alternatives, ``config_keys.by_key``).
_KEYS: dict[ConfigKey, str] = {
    HUDI_KEYS.KEEP_MIN_COMMITS: "min_commits",
    HUDI_KEYS.KEEP_MAX_COMMITS: "max_commits",
    HUDI_KEYS.ARCHIVE_BEYOND_SAVEPOINT: "beyond_savepoint",
    HUDI_KEYS.TIMELINE_COMPACTION_BATCH_SIZE: "compaction_batch_size",
    HUDI_KEYS.CLEANER_POLICY: "clean_policy",
    HUDI_KEYS.CLEANER_COMMITS_RETAINED: "clean_commits_retained",
    HUDI_KEYS.CLEANER_HOURS_RETAINED: "clean_hours_retained",
    HUDI_KEYS.INLINE_COMPACT_TRIGGER_STRATEGY: "compaction_trigger",
    HUDI_KEYS.INLINE_COMPACT_NUM_DELTA_COMMITS: "compaction_max_delta_commits",
    HUDI_KEYS.METADATA_ENABLE: "metadata_enabled",
    HUDI_KEYS.COMMITS_ARCHIVAL_BATCH_SIZE: "archival_batch_size",
    HUDI_KEYS.ARCHIVE_MERGE_ENABLE: "merge_small_files",
}
_OPTION_KEYS = {entry.key: name for entry, name in _KEYS.items()}
_BOOLS = frozenset({"beyond_savepoint", "metadata_enabled", "merge_small_files"})


@dataclass(frozen=True, slots=True)
class ArchivalSettings:
    """The archiver's settings, with Hudi's keys and defaults (``from_options``)."""

    min_commits: int = 20
    """``hoodie.keep.min.commits``."""
    max_commits: int = 30
    """``hoodie.keep.max.commits``."""
    beyond_savepoint: bool = False
    """``hoodie.archive.beyond.savepoint``."""
    compaction_batch_size: int = 10
    """``hoodie.timeline.compaction.batch.size``: LSM files of one level compacted at once."""
    clean_policy: CleanPolicy = CleanPolicy.KEEP_LATEST_COMMITS
    """``hoodie.clean.policy`` (0.14-1.0: ``hoodie.cleaner.policy``) of the table's cleaner (raises
    min/max when needed)."""
    clean_commits_retained: int = 10
    """``hoodie.clean.commits.retained`` (0.14-1.0: ``hoodie.cleaner.commits.retained``)."""
    clean_hours_retained: int = 24
    """``hoodie.clean.hours.retained`` (0.14-1.0: ``hoodie.cleaner.hours.retained``)."""
    compaction_trigger: TriggerStrategy = TriggerStrategy.NUM_COMMITS
    """``hoodie.compact.inline.trigger.strategy``."""
    compaction_max_delta_commits: int = 5
    """``hoodie.compact.inline.max.delta.commits``."""
    metadata_enabled: bool = True
    """``hoodie.metadata.enable``: honour the metadata table's compaction boundary."""
    archival_batch_size: int = 10
    """``hoodie.commits.archival.batch.size``: records per Avro block of a version-6 archive file."""
    merge_small_files: bool = False
    """``hoodie.archive.merge.enable``: merging small version-6 archive files; hoodied refuses it
    (Hudi's default is off, and each hoodied archival writes one complete file)."""

    def __post_init__(self) -> None:
        if self.min_commits < 1 or self.max_commits <= self.min_commits:
            raise ValueError(
                "hoodie.keep.max.commits must be greater than hoodie.keep.min.commits, which must be >= 1"
            )
        if self.compaction_batch_size < 2:
            raise ValueError("hoodie.timeline.compaction.batch.size must be at least 2")
        if self.archival_batch_size < 1:
            raise ValueError("hoodie.commits.archival.batch.size must be at least 1")
        if self.merge_small_files:
            raise ValueError(
                "hoodie.archive.merge.enable=true: merging small archive files is not supported "
                "(Hudi's default is false)"
            )
        if (
            self.clean_commits_retained < 1
            or self.clean_hours_retained < 0
            or self.compaction_max_delta_commits < 1
        ):
            raise ValueError("clean retention and compaction delta commits must be positive")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ArchivalSettings:
        """Settings from Hudi option keys (or their alternatives, ``HUDI_KEYS``); unknown keys and bad
        values raise ``ValueError``."""
        values: dict[str, Any] = {}
        for key, raw in by_key(options, _KEYS).items():
            name = _OPTION_KEYS.get(key)
            if name is None:
                raise ValueError(f"{key}: not an archival option (known: {', '.join(sorted(_OPTION_KEYS))})")
            text = str(raw).strip()
            try:
                if name in _BOOLS:
                    if text.lower() not in ("true", "false"):
                        raise ValueError("expected true or false")
                    values[name] = text.lower() == "true"
                elif name == "clean_policy":
                    values[name] = CleanPolicy(text.upper())
                elif name == "compaction_trigger":
                    values[name] = TriggerStrategy(text.upper())
                else:
                    values[name] = int(text)
            except ValueError as exc:
                raise ValueError(f"{key}={raw}: not a valid value ({exc})") from None
        return replace(cls(), **values)

    def options(self) -> dict[str, str]:
        by_field = {v: k for k, v in _OPTION_KEYS.items()}
        return {by_field[f.name]: str(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class MdtState:
    """What the archiver needs of a data table's metadata table: its latest completed compaction."""

    latest_compaction: str | None


@dataclass(frozen=True, slots=True)
class Boundary:
    """One candidate boundary: archival keeps ``instant`` and everything after it."""

    reason: StopReason
    instant: str | None
    detail: str

    def __str__(self) -> str:
        at = f" at {self.instant}" if self.instant else ""
        return f"{self.reason.value}{at}: {self.detail}"


@dataclass(slots=True)
class ArchivalPlan:
    """The instants to archive (oldest first), the boundaries met, and the one that stopped archival."""

    instants: list[Instant]
    stop: Boundary
    boundaries: list[Boundary] = field(default_factory=list)
    completed_commits: int = 0
    min_to_keep: int = 0
    max_to_keep: int = 0

    @property
    def commits(self) -> list[Instant]:
        return [i for i in self.instants if i.action in WRITE_ACTIONS]

    def summary(self) -> str:
        keep = f"{self.completed_commits} completed commits, keep {self.min_to_keep}..{self.max_to_keep}"
        if not self.instants:
            return f"nothing to archive ({keep}); stops at {self.stop}"
        return (
            f"{len(self.instants)} instants to archive ({len(self.commits)} commits, "
            f"{self.instants[0].requested_time}..{self.instants[-1].requested_time}; {keep}); "
            f"stops at {self.stop}"
        )


# ---------------------------------------------------------------------------- boundaries


def _commits(timeline: Timeline) -> list[Instant]:
    return [i for i in timeline.instants if i.is_completed and i.action in WRITE_ACTIONS]


def _writes(timeline: Timeline, config: TableConfig) -> list[Instant]:
    """The write instants ``CleanerUtils.getEarliestCommitToRetain`` looks at, completed and pending.

    Layout 1 (0.x) passes the commits timeline (commit, deltacommit, replacecommit files): a
    pending compaction or log compaction (``.compaction.*`` files) is not on it.
    """
    writes = [i for i in timeline.instants if i.action in WRITE_ACTIONS]
    if config.timeline_layout >= 2:
        return writes
    return [i for i in writes if i.is_completed or i.action not in _PENDING_SERVICES_V6]


_PENDING_SERVICES_V6 = frozenset({Action.COMPACTION, Action.LOG_COMPACTION})


def _cleaner_ectr(timeline: Timeline, config: TableConfig, settings: ArchivalSettings) -> Instant | None:
    """``CleanerUtils.getEarliestCommitToRetain`` as ``ArchivalUtils`` calls it."""
    writes = _writes(timeline, config)
    if settings.clean_policy is CleanPolicy.KEEP_LATEST_COMMITS:
        return latest_commits_to_retain(writes, settings.clean_commits_retained)
    if settings.clean_policy is CleanPolicy.KEEP_LATEST_BY_HOURS:
        completed = [i for i in writes if i.is_completed]
        if not completed:
            return None
        tz = config.tzinfo
        latest = instant_time_to_datetime(completed[-1].requested_time, tz)
        cutoff = datetime_to_instant_time(latest - timedelta(hours=settings.clean_hours_retained), tz)
        return next((i for i in completed if i.requested_time >= cutoff), None)
    return None


def _keep_bounds(timeline: Timeline, config: TableConfig, settings: ArchivalSettings) -> tuple[int, int]:
    ectr = _cleaner_ectr(timeline, config, settings)
    low, high = settings.min_commits, settings.max_commits
    if ectr is None:
        return low, high
    by_cleaning = sum(1 for i in _commits(timeline) if i.requested_time > ectr.requested_time) + 2
    if low < by_cleaning:
        return by_cleaning, by_cleaning + high - low
    return low, high


def _pending_boundary(timeline: Timeline, commits: list[Instant]) -> Boundary | None:
    pending = [i for i in timeline.instants if i.is_pending and i.action in WRITE_ACTIONS]
    if not pending:
        return None
    first = pending[0]
    before = [c for c in commits if c.requested_time < first.requested_time]
    at = before[-1] if before else first
    return Boundary(
        StopReason.EARLIEST_PENDING_WRITE,
        at.requested_time,
        f"{first.action.value} {first.requested_time} is {first.state.value}",
    )


def _compaction_boundary(
    timeline: Timeline, config: TableConfig, settings: ArchivalSettings
) -> Boundary | None:
    if not config.is_mor or settings.compaction_trigger not in (
        TriggerStrategy.NUM_COMMITS,
        TriggerStrategy.NUM_AND_TIME,
    ):
        return None
    # Hudi 1.x's commit timeline is the ``commit`` action only (a completed compaction); 0.x's
    # holds replacecommits too. The delta commit timeline is the ``deltacommit`` files: delta
    # commits in any state, completed log compactions
    bases = {Action.COMMIT, Action.COMPACTION}
    if config.timeline_layout < 2:
        bases |= {Action.REPLACE_COMMIT, Action.CLUSTERING}
    last = next((i for i in reversed(timeline.instants) if i.is_completed and i.action in bases), None)
    deltas = [
        i
        for i in timeline.instants
        if i.action is Action.DELTA_COMMIT or (i.action is Action.LOG_COMPACTION and i.is_completed)
    ]
    if last is not None:
        deltas = [i for i in deltas if i.requested_time > last.requested_time]
        anchor: Instant | None = last
    else:
        anchor = deltas[0] if deltas else None
    if anchor is None:
        return None
    wanted = settings.compaction_max_delta_commits
    if len(deltas) < wanted:
        return Boundary(
            StopReason.COMPACTION_DELTA_COMMITS,
            anchor.requested_time,
            f"{len(deltas)} delta commits since the latest compaction, the trigger needs {wanted}",
        )
    keep = deltas[len(deltas) - wanted]
    return Boundary(
        StopReason.COMPACTION_DELTA_COMMITS,
        keep.requested_time,
        f"the compaction trigger counts the last {wanted} delta commits",
    )


def _clustering_boundary(timeline: Timeline, settings: ArchivalSettings) -> Boundary | None:
    replaces = [i for i in timeline.instants if i.action in (Action.REPLACE_COMMIT, Action.CLUSTERING)]
    if not replaces:
        return None
    cleans = timeline.completed([Action.CLEAN])
    if not cleans:
        return Boundary(
            StopReason.CLUSTERING_NOT_CLEANED,
            replaces[0].requested_time,
            "no clean has removed the replaced files yet",
        )
    clean = cleans[-1]
    plan = timeline.read_plan(clean) or {}
    ectr = (plan.get("earliestInstantToRetain") or {}).get("timestamp") or None
    lower = ectr or clean.requested_time
    detail = f"clean {clean.requested_time} retains from {lower}"
    savepoints = sorted(
        s for s in ((plan.get("extraMetadata") or {}).get(SAVEPOINTED_TIMESTAMPS) or "").split(",") if s
    )
    if settings.clean_policy is not CleanPolicy.KEEP_LATEST_FILE_VERSIONS and ectr and savepoints:
        earliest_sp = savepoints[0]
        if ectr > earliest_sp and any(
            i.is_completed and earliest_sp <= i.requested_time <= ectr for i in replaces
        ):
            lower = earliest_sp
            detail = f"clean {clean.requested_time} kept files of savepoint {earliest_sp}"
    first = next((i for i in replaces if i.requested_time >= lower), None)
    if first is None:
        return None
    return Boundary(StopReason.CLUSTERING_NOT_CLEANED, first.requested_time, detail)


def _clustering_boundary_v6(timeline: Timeline, commits: list[Instant]) -> list[Boundary]:
    """0.x ``ClusteringUtils.getOldestInstantToRetainForClustering`` (no savepoint exception)."""
    replaces = [i for i in timeline.instants if i.action in (Action.REPLACE_COMMIT, Action.CLUSTERING)]
    if not replaces:
        return []
    out: list[Boundary] = []
    cleans = timeline.completed([Action.CLEAN])
    first: Instant | None
    if cleans:
        clean = cleans[-1]
        plan = timeline.read_plan(clean) or {}
        ectr = (plan.get("earliestInstantToRetain") or {}).get("timestamp") or None
        lower = ectr or clean.requested_time
        first = next((i for i in replaces if i.requested_time >= lower), None)
        detail = f"clean {clean.requested_time} retains from {lower}"
    else:
        first = replaces[0]
        detail = "no clean has removed the replaced files yet"
    if first is not None:
        out.append(Boundary(StopReason.CLUSTERING_NOT_CLEANED, first.requested_time, detail))
    # ``filterInflights``: the inflight state only, a requested replacecommit does not count
    inflight = next((i for i in replaces if i.state is State.INFLIGHT), None)
    if inflight is not None:
        before = [c for c in commits if c.requested_time < inflight.requested_time]
        if before and (first is None or first.requested_time > before[-1].requested_time):
            out.append(
                Boundary(
                    StopReason.PENDING_REPLACE,
                    before[-1].requested_time,
                    f"replacecommit {inflight.requested_time} is inflight",
                )
            )
    return out


def _mdt_boundary(commits: list[Instant], mdt: MdtState) -> Boundary | None:
    if mdt.latest_compaction is None:
        return Boundary(
            StopReason.NO_MDT_COMPACTION, None, "the metadata table has no completed compaction yet"
        )
    t = mdt.latest_compaction
    # ``findInstantsModifiedAfterByCompletionTime``: completed after t, other than t itself
    after = next(
        (
            c
            for c in commits
            if c.completion_time is not None and c.completion_time > t and c.requested_time != t
        ),
        None,
    )
    if after is None:
        return None
    return Boundary(
        StopReason.MDT_COMPACTION,
        after.requested_time,
        f"completed after the metadata table's latest compaction {t}",
    )


# ---------------------------------------------------------------------------- the plan


def plan_archival(
    timeline: Timeline,
    config: TableConfig,
    settings: ArchivalSettings,
    mdt: MdtState | None = None,
    *,
    extra: Sequence[Boundary] = (),
) -> ArchivalPlan:
    """The instants to archive from the active ``timeline`` (loaded without history).

    ``mdt``: the metadata table's state when the table has one (``None``: no metadata table).
    ``extra``: further boundaries (a metadata table's ``data_table_boundary``; layout 2 only).
    """
    if config.timeline_layout < 2:
        return _plan_v6(timeline, config, settings, mdt)
    require_lsm_history(config, timeline.storage.base_uri)
    commits = _commits(timeline)
    low, high = _keep_bounds(timeline, config, settings)

    def result(instants: list[Instant], stop: Boundary, boundaries: list[Boundary]) -> ArchivalPlan:
        return ArchivalPlan(instants, stop, boundaries, len(commits), low, high)

    if len(commits) <= high:
        few = Boundary(
            StopReason.NOT_ENOUGH_COMMITS,
            None,
            f"{len(commits)} completed commits, archival starts above {high}",
        )
        return result([], few, [few])
    boundaries = [
        b
        for b in (
            _pending_boundary(timeline, commits),
            _compaction_boundary(timeline, config, settings),
            _clustering_boundary(timeline, settings),
            _mdt_boundary(commits, mdt) if mdt is not None and settings.metadata_enabled else None,
            *extra,
        )
        if b is not None
    ]
    blocked = next((b for b in boundaries if b.reason is StopReason.NO_MDT_COMPACTION), None)
    if blocked is not None:
        return result([], blocked, boundaries)
    bounded = [b for b in boundaries if b.instant is not None]
    earliest = min(bounded, key=lambda b: b.instant or "", default=None)

    savepoints = [s.requested_time for s in timeline.completed([Action.SAVEPOINT])]
    if savepoints and not settings.beyond_savepoint:
        boundaries.append(
            Boundary(StopReason.SAVEPOINT, savepoints[0], "archival stops at the first savepoint")
        )
    limit = len(commits) - low
    chosen: list[Instant] = []
    stop: Boundary | None = None
    for c in commits:
        if len(chosen) >= limit:
            stop = Boundary(
                StopReason.MIN_COMMITS_TO_KEEP, c.requested_time, f"{low} completed commits are kept"
            )
            break
        if earliest is not None and c.requested_time >= (earliest.instant or ""):
            stop = earliest
            break
        if savepoints and not settings.beyond_savepoint and c.requested_time >= savepoints[0]:
            stop = boundaries[-1]
            break
        if settings.beyond_savepoint and c.requested_time in savepoints:
            continue  # the savepointed commit stays; archival goes on past it
        chosen.append(c)
    if stop is None:
        stop = Boundary(StopReason.MIN_COMMITS_TO_KEEP, None, f"{low} completed commits are kept")
    if chosen:
        last = chosen[-1].requested_time
        chosen.extend(
            i for i in timeline.completed([Action.CLEAN, Action.ROLLBACK]) if i.requested_time < last
        )
        chosen.sort(key=lambda i: i.requested_time)
    return result(chosen, stop, boundaries)


def _commit_instants(
    commits: list[Instant],
    savepoints: list[str],
    earliest: Boundary | None,
    low: int,
    settings: ArchivalSettings,
    boundaries: list[Boundary],
) -> tuple[list[Instant], Boundary]:
    """The oldest commits before every boundary, at most (commits - ``low``) of them."""
    limit = len(commits) - low
    chosen: list[Instant] = []
    for c in commits:
        if len(chosen) >= limit:
            return chosen, Boundary(
                StopReason.MIN_COMMITS_TO_KEEP, c.requested_time, f"{low} completed commits are kept"
            )
        if earliest is not None and c.requested_time >= (earliest.instant or ""):
            return chosen, earliest
        if savepoints and not settings.beyond_savepoint and c.requested_time >= savepoints[0]:
            return chosen, boundaries[-1]
        if settings.beyond_savepoint and c.requested_time in savepoints:
            continue  # the savepointed commit stays; archival goes on past it
        chosen.append(c)
    return chosen, Boundary(StopReason.MIN_COMMITS_TO_KEEP, None, f"{low} completed commits are kept")


def _plan_v6(
    timeline: Timeline, config: TableConfig, settings: ArchivalSettings, mdt: MdtState | None
) -> ArchivalPlan:
    """Hudi 0.14 / 0.15 ``HoodieTimelineArchiver.getInstantsToArchive`` (table version 6)."""
    commits = _commits(timeline)
    low, high = _keep_bounds(timeline, config, settings)
    # getCleanInstantsToArchive: each action on its own, oldest (count - min) when over max
    services: list[Instant] = []
    for action in (Action.CLEAN, Action.ROLLBACK):
        done = timeline.completed([action])
        if len(done) > high:
            services.extend(done[: len(done) - low])
    boundaries: list[Boundary] = []
    chosen: list[Instant] = []
    if len(commits) <= high:
        stop = Boundary(
            StopReason.NOT_ENOUGH_COMMITS,
            None,
            f"{len(commits)} completed commits, archival starts above {high}",
        )
        boundaries.append(stop)
    else:
        boundaries = [
            b
            for b in (_pending_boundary(timeline, commits), _compaction_boundary(timeline, config, settings))
            if b is not None
        ] + _clustering_boundary_v6(timeline, commits)
        earliest = min(boundaries, key=lambda b: b.instant or "", default=None)
        savepoints = [s.requested_time for s in timeline.completed([Action.SAVEPOINT])]
        if savepoints and not settings.beyond_savepoint:
            boundaries.append(
                Boundary(StopReason.SAVEPOINT, savepoints[0], "archival stops at the first savepoint")
            )
        chosen, stop = _commit_instants(commits, savepoints, earliest, low, settings, boundaries)
    instants = sorted(services + chosen, key=lambda i: i.requested_time)
    if mdt is not None and settings.metadata_enabled:
        if mdt.latest_compaction is None:
            blocked = Boundary(
                StopReason.NO_MDT_COMPACTION, None, "the metadata table has no completed compaction yet"
            )
            boundaries.append(blocked)
            return ArchivalPlan([], blocked, boundaries, len(commits), low, high)
        t = mdt.latest_compaction
        kept = [i for i in instants if i.requested_time < t]
        mdt_stop = Boundary(
            StopReason.MDT_COMPACTION, t, f"requested before the metadata table's latest compaction {t}"
        )
        boundaries.append(mdt_stop)
        if any(c.requested_time >= t for c in chosen):
            stop = mdt_stop
        instants = kept
    return ArchivalPlan(instants, stop, boundaries, len(commits), low, high)


def mdt_state(storage: Storage, config: TableConfig) -> MdtState | None:
    """The metadata table's latest compaction, or ``None`` when the table has no usable MDT."""
    if not config.metadata_table_available:
        return None
    if not storage.exists(f"{METADATA_FOLDER}/.hoodie/hoodie.properties"):
        return None
    mdt_storage = storage.child(METADATA_FOLDER)
    timeline = Timeline.load(mdt_storage, load_table_config(mdt_storage, metadata_table=True))
    latest = latest_mdt_compaction(timeline)
    if latest is None:
        return MdtState(None)
    # the time the file names (a 0.x MDT's compaction is ``<T>001``, which Hudi compares whole)
    return MdtState(file_instant_time(timeline.state_files(latest)[State.COMPLETED]))


def archival_due(timeline: Timeline, max_commits: int) -> str | None:
    """Hudi's trigger on the active timeline alone (the daemon's poll), or ``None``: more than
    ``max_commits`` (``hoodie.keep.max.commits``) completed commits; on table version 6 also more
    than that many completed cleans or rollbacks, which it archives on their own. The cleaner's
    retention can only raise the bound, so ``plan_archival`` decides under the lock."""
    bound = f"more than hoodie.keep.max.commits={max_commits}"
    commits = len(_commits(timeline))
    if commits > max_commits:
        return f"{commits} completed commits on the active timeline, {bound}"
    if timeline.config.timeline_layout < 2:
        for action in (Action.CLEAN, Action.ROLLBACK):
            done = len(timeline.completed([action]))
            if done > max_commits:
                return f"{done} completed {action.value} instants, {bound}"
    return None


def archival_planner(settings: ArchivalSettings) -> Callable[[Timeline], ArchivalPlan]:
    """The planner ``executors.archival`` calls under the table lock: reads the MDT state, plans."""

    def planner(timeline: Timeline) -> ArchivalPlan:
        return plan_archival(
            timeline, timeline.config, settings, mdt_state(timeline.storage, timeline.config)
        )

    return planner


# ---------------------------------------------------------------------------- the metadata table


def mdt_archival_settings(data: ArchivalSettings, data_config: TableConfig) -> ArchivalSettings:
    """The MDT archiver's settings (``createMetadataWriteConfig``, module docstring)."""
    retention = mdt_cleaner_retention(data.clean_commits_retained, data.clean_hours_retained)
    return ArchivalSettings(
        min_commits=data.min_commits + 1,
        max_commits=data.max_commits + 1,
        beyond_savepoint=False,
        clean_policy=data.clean_policy,
        clean_commits_retained=retention.commits,
        clean_hours_retained=retention.hours,
        compaction_trigger=TriggerStrategy.NUM_COMMITS,
        compaction_max_delta_commits=max_delta_commits(data_config),
        metadata_enabled=False,
    )


#: ``HoodieMetadataConfig.DEFAULT_METADATA_CLEANER_COMMITS_RETAINED``: 0.x's cap on the MDT cleaner.
_MDT_CLEANER_COMMITS_V6 = 20


def mdt_archival_settings_v6(data: ArchivalSettings, data_config: TableConfig) -> ArchivalSettings:
    """The MDT archiver's settings for table version 6 (0.x ``createMetadataWriteConfig``, module
    docstring): the data table's keep.min/max, cleaner KEEP_LATEST_COMMITS retaining at most 20."""
    return ArchivalSettings(
        min_commits=data.min_commits,
        max_commits=data.max_commits,
        beyond_savepoint=False,
        clean_policy=CleanPolicy.KEEP_LATEST_COMMITS,
        clean_commits_retained=min(data.clean_commits_retained, _MDT_CLEANER_COMMITS_V6),
        compaction_trigger=TriggerStrategy.NUM_COMMITS,
        compaction_max_delta_commits=max_delta_commits(data_config),
        metadata_enabled=False,
    )


def data_table_boundary(data: Sequence[Instant]) -> Boundary | None:
    """``TimelineUtils.getEarliestInstantForMetadataArchival`` (archive beyond savepoint off) on the
    data table's active instants ``data``."""
    first = next(
        (i for i in data if i.is_pending or (i.is_completed and i.action in WRITE_ACTIONS)),
        None,
    )
    if first is None:
        return None
    what = "pending" if first.is_pending else "the first active commit"
    return Boundary(
        StopReason.DATA_TABLE_TIMELINE,
        first.requested_time,
        f"data-table {first.action.value} {first.requested_time} ({what}) and later stay",
    )


def plan_mdt_archival(
    mdt_timeline: Timeline, mdt_config: TableConfig, settings: ArchivalSettings, data: Sequence[Instant]
) -> ArchivalPlan:
    """The MDT instants to archive; ``settings`` from ``mdt_archival_settings``, ``data`` the data
    table's active instants once its own archival is done."""
    boundary = data_table_boundary(data)
    return plan_archival(mdt_timeline, mdt_config, settings, None, extra=(boundary,) if boundary else ())


def plan_mdt_archival_v6(
    mdt_timeline: Timeline, mdt_config: TableConfig, settings: ArchivalSettings, data: Sequence[Instant]
) -> ArchivalPlan:
    """The MDT instants to archive on table version 6 (0.15 ``getInstantsToArchive`` with
    ``isMetadataTable``); ``settings`` from ``mdt_archival_settings_v6``, ``data`` the data table's
    active instants once its own archival is done.

    The data-table boundary filters every instant the 0.x rules chose, cleans and rollbacks too,
    by requested time (``compareTimestamps``, a string comparison)."""
    if mdt_config.timeline_layout >= 2:
        raise ValueError(f"{mdt_timeline.storage.base_uri}: not a metadata table of table version 6")
    plan = _plan_v6(mdt_timeline, mdt_config, settings, None)
    boundary = data_table_boundary(data)
    if boundary is None or boundary.instant is None:
        return plan
    limit = boundary.instant
    plan.boundaries.append(boundary)
    if any(c.requested_time >= limit for c in plan.commits):
        plan.stop = boundary  # it cut the commits short: the binding boundary
    plan.instants = [i for i in plan.instants if i.requested_time < limit]
    return plan


def mdt_archival_planner(
    settings: ArchivalSettings, data_storage: Storage, data_config: TableConfig
) -> Callable[[Timeline, Sequence[Instant]], ArchivalPlan]:
    """The MDT planner ``executors.archival`` calls under the lock after the data table's archival,
    with the data instants that archival took (still on the data timeline in a dry run): it reads
    the data table's active timeline at that moment, without them. Table version 6 plans with
    0.15's rules (``plan_mdt_archival_v6``), 8 and 9 with 1.x's (``plan_mdt_archival``)."""
    v6 = data_config.timeline_layout < 2
    derive = mdt_archival_settings_v6 if v6 else mdt_archival_settings
    mdt_settings = derive(settings, data_config)

    def planner(mdt_timeline: Timeline, data_archived: Sequence[Instant]) -> ArchivalPlan:
        gone = {i.requested_time for i in data_archived}
        data = [i for i in Timeline.load(data_storage, data_config).instants if i.requested_time not in gone]
        if v6:
            return plan_mdt_archival_v6(mdt_timeline, mdt_timeline.config, mdt_settings, data)
        return plan_mdt_archival(mdt_timeline, mdt_timeline.config, mdt_settings, data)

    return planner


def mdt_archival_target(
    storage: Storage, config: TableConfig, settings: ArchivalSettings
) -> tuple[Storage, TableConfig] | None:
    """The metadata table whose timeline Hudi would archive after the data table's, or ``None``:
    no MDT in use or ``hoodie.metadata.enable=false`` (no MDT writer runs)."""
    if not settings.metadata_enabled or not config.metadata_table_available:
        return None
    if not storage.exists(f"{METADATA_FOLDER}/.hoodie/hoodie.properties"):
        return None
    mdt_storage = storage.child(METADATA_FOLDER)
    return mdt_storage, load_table_config(mdt_storage, metadata_table=True)
