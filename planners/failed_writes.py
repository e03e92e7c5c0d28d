"""Failed data writes under Hudi's LAZY failed-writes policy: which to roll back, and their rollback plans.

With several writers (optimistic concurrency), Hudi writers cannot roll back each other's
pending instants when they start (``EAGER``, the default, would roll back a live writer's
instant), so the table is configured with ``hoodie.cleaner.policy.failed.writes=LAZY``
(``HoodieFailedWritesCleaningPolicy``: ``EAGER``, ``LAZY``, ``NEVER``) and the *clean* rolls back
the writes whose writer died. Facts, from Apache Hudi 1.x (``BaseHoodieTableServiceClient``) and
0.14/0.15 (the same code in ``BaseHoodieWriteClient``):

- ``CleanerUtils.rollbackFailedWrites(policy, "clean", ...)``: before a clean is scheduled and
  executed (``BaseHoodieTableServiceClient.clean``), failed writes are rolled back only under
  ``LAZY``; ``EAGER`` (each writer rolls back what it finds when it starts) and ``NEVER`` do
  nothing at clean time.
- Candidates (``getInflightTimelineExcludeCompactionAndClustering``): the *pending* instants
  (requested or inflight) of the commits timeline (``HoodieTableMetaClient.getCommitsTimeline``:
  ``commit`` and ``replacecommit``, plus ``deltacommit`` on merge-on-read) other than compactions
  and clustering (``ClusteringUtils.isClusteringInstant``:
  action ``clustering``, or a v6 ``replacecommit`` whose requested plan says ``CLUSTER``). So:
  upserts, inserts, deletes, bulk inserts, insert overwrite and delete partition.
  Log compaction (``logcompaction``), indexing, clean, rollback are not commits-timeline actions.
- ``getInstantsToRollbackForLazyCleanPolicy``: a candidate is failed when its heartbeat expired
  (``HoodieHeartbeatClient.isHeartbeatExpired``: ``now - last beat > interval * tolerable misses``,
  ``hoodie.client.heartbeat.interval_in_ms`` 60000, ``hoodie.client.heartbeat.tolerable.misses``
  2). ``HoodieHeartbeatUtils.getLastHeartbeatTime`` returns 0 when there is no heartbeat file, so
  Hudi counts a pending write without a heartbeat file as expired (its note: a writer upgraded to
  lazy cleaning whose last write failed; under ``LAZY`` every writer starts its heartbeat before
  it requests its instant, ``BaseHoodieWriteClient.startCommit``). **hoodied is stricter: it never
  rolls back a write without a heartbeat file.** It is not the table's writer: a writer of the
  table still configured ``EAGER`` keeps no heartbeat and may be alive; such a write is left to
  its writer (or to ``hoodied rollback --instant T`` by a person who knows it is dead).
  The expired ones are then re-checked against a reloaded timeline and kept only while still
  pending (a write that completed meanwhile has no heartbeat either). hoodied re-checks both the
  timeline and the heartbeat under the table lock, just before it schedules each rollback.
- ``getPendingRollbackInfos(ignoreCompactionAndClusteringInstants=true)``: pending rollbacks
  whose plan targets anything but a compaction or a clustering are finished too, whatever the
  heartbeat (their rollback already started). hoodied leaves table-service targets to their own
  rollback-then-retry (``planners.rollback``); a pending rollback whose plan cannot be read is
  logged and left alone (Hudi deletes a requested one; hoodied does not delete timeline files
  it cannot read).
- ``rollbackFailedWrites``: newest first (reverse requested-time order); an instant at or
  before ``FULL_BOOTSTRAP_INSTANT_TS`` (``00000000000002``) is a failed bootstrap (Hudi rolls the
  bootstrap back and deletes the metadata table), which hoodied refuses.
- The rollback plan (``BaseRollbackPlanActionExecutor.requestRollback``): a target that is only
  *requested* gets a plan with no rollback requests (it wrote nothing); an inflight one gets
  the requests of ``MarkerBasedRollbackStrategy`` (markers under ``.hoodie/.temp/<T>``), or
  listing when there are no markers (``planners.rollback``, ``hoodie.rollback_files``). In table
  version 8+ every file a write creates carries its instant, so deleting files is exact. In
  table version 6 a merge-on-read delta commit appends blocks to existing log files, which Hudi
  0.14/0.15 undoes with rollback command blocks: its ``APPEND`` markers (which name the log file)
  become requests with ``logBlocksToBeDeleted`` (``hoodie.rollback_files``), its ``CREATE`` markers
  requests deleting the new base files. A v6 delta commit without markers, or with an old-style
  ``APPEND`` marker naming a base file, is refused (``UnsupportedTableError``, nothing written):
  Hudi's listing fallback reads the appended files from the inflight commit metadata, which
  hoodied does not do.

Execution is ``executors.rollback.execute_rollback`` (the MDT delta commit T rolled back first,
then T's timeline files deleted, then R completed, as ``BaseRollbackActionExecutor.finishRollback``
with ``deleteInstants``); the heartbeat goes afterwards (``HeartbeatUtils.deleteHeartbeatFile``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from hoodied.hoodie.config_keys import HUDI_KEYS, by_key
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.filenames import LogFileName
from hoodied.hoodie.heartbeat import DEFAULT_INTERVAL_MS, DEFAULT_TOLERABLE_MISSES
from hoodied.hoodie.markers import IOType, WriteMarkers
from hoodied.hoodie.metadata.rollback import check_data_rollback
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.rollback_files import rollback_plan
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.rollback import attempt_files, pending_rollback_for

log = logging.getLogger(__name__)

__all__ = [
    "FAILED_WRITES_KEYS",
    "FAILED_WRITES_POLICY_KEY",
    "FULL_BOOTSTRAP_INSTANT_TS",
    "HEARTBEAT_INTERVAL_KEY",
    "HEARTBEAT_MISSES_KEY",
    "DataWriteRollback",
    "FailedWritesPolicy",
    "FailedWritesSettings",
    "is_data_write",
    "pending_data_write_rollbacks",
    "plan_failed_write_rollback",
    "schedule_failed_write_rollback",
    "select_failed_writes",
]

#: ``HoodieCleanConfig.FAILED_WRITES_CLEANER_POLICY``.
FAILED_WRITES_POLICY_KEY = HUDI_KEYS.FAILED_WRITES_CLEANER_POLICY.key
#: ``HoodieWriteConfig.CLIENT_HEARTBEAT_INTERVAL_IN_MS``.
HEARTBEAT_INTERVAL_KEY = HUDI_KEYS.CLIENT_HEARTBEAT_INTERVAL_IN_MS.key
#: ``HoodieWriteConfig.CLIENT_HEARTBEAT_NUM_TOLERABLE_MISSES``.
HEARTBEAT_MISSES_KEY = HUDI_KEYS.CLIENT_HEARTBEAT_NUM_TOLERABLE_MISSES.key
#: The keys of ``FailedWritesSettings``, each also read under its alternatives.
FAILED_WRITES_KEYS = (HUDI_KEYS.FAILED_WRITES_CLEANER_POLICY, HUDI_KEYS.CLIENT_HEARTBEAT_INTERVAL_IN_MS,
         HUDI_KEYS.CLIENT_HEARTBEAT_NUM_TOLERABLE_MISSES)
#: ``HoodieTimeline.FULL_BOOTSTRAP_INSTANT_TS``: instants at or before it belong to a bootstrap.
FULL_BOOTSTRAP_INSTANT_TS = "00000000000002"

#: The commits-timeline actions a data write is requested under (``HoodieTimeline.getCommitsTimeline``).
_DATA_WRITE_ACTIONS = (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT)


class FailedWritesPolicy(StrEnum):
    """``HoodieFailedWritesCleaningPolicy``."""

    EAGER = "EAGER"
    LAZY = "LAZY"
    NEVER = "NEVER"


@dataclass(frozen=True, slots=True)
class FailedWritesSettings:
    """The policy and the heartbeat settings of the table's writers (Hudi's keys and defaults)."""

    policy: FailedWritesPolicy = FailedWritesPolicy.EAGER
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES

    def __post_init__(self) -> None:
        if self.heartbeat_interval_ms <= 0 or self.tolerable_misses <= 0:
            raise ValueError("the heartbeat interval and the tolerable misses must be positive")

    @property
    def max_gap_ms(self) -> int:
        """``maxAllowableHeartbeatIntervalInMs`` of ``HoodieHeartbeatClient``."""
        return self.heartbeat_interval_ms * self.tolerable_misses

    @classmethod
    def from_options(cls, *layers: Mapping[str, str]) -> FailedWritesSettings:
        """Settings from Hudi's keys; later mappings win (the table's ``hoodie.properties``, then
        ``-o KEY=VALUE``). Within one mapping a key given under several names is read as Hudi reads
        it (``config_keys.by_key``). A bad value raises ``ValueError`` naming the key."""
        merged: dict[str, str] = {}
        for layer in layers:
            merged.update({k: v for k, v in by_key(layer, FAILED_WRITES_KEYS).items()
                           if k in (FAILED_WRITES_POLICY_KEY, HEARTBEAT_INTERVAL_KEY, HEARTBEAT_MISSES_KEY)})
        raw = merged.get(FAILED_WRITES_POLICY_KEY, FailedWritesPolicy.EAGER.value).strip().upper()
        try:
            policy = FailedWritesPolicy(raw)
        except ValueError:
            choices = ", ".join(p.value for p in FailedWritesPolicy)
            raise ValueError(f"{FAILED_WRITES_POLICY_KEY}={raw!r}: expected one of {choices}") from None
        return cls(policy, _positive(merged, HEARTBEAT_INTERVAL_KEY, DEFAULT_INTERVAL_MS),
                   _positive(merged, HEARTBEAT_MISSES_KEY, DEFAULT_TOLERABLE_MISSES))


def _positive(values: Mapping[str, str], key: str, default: int) -> int:
    if key not in values:
        return default
    try:
        n = int(values[key])
    except ValueError:
        raise ValueError(f"{key}={values[key]!r}: not a whole number") from None
    if n <= 0:
        raise ValueError(f"{key}={n}: must be positive")
    return n


@dataclass(frozen=True, slots=True)
class DataWriteRollback:
    """A failed data write to roll back: ``rollback`` is the pending rollback already targeting it
    (to be finished), ``None`` when a new one is to be scheduled."""

    target_time: str
    target_action: str
    rollback: Instant | None
    last_heartbeat_ms: int


def is_data_write(timeline: Timeline, inst: Instant) -> bool:
    """A pending commit, delta commit or replace commit that is not a clustering."""
    return (inst.is_pending and inst.action in _DATA_WRITE_ACTIONS
            and not timeline.is_clustering(inst))


def pending_data_write_rollbacks(timeline: Timeline) -> dict[str, Instant]:
    """Pending rollbacks by the instant they target, table-service targets left out (oldest
    rollback kept per target, as ``putIfAbsent`` over the timeline order does)."""
    out: dict[str, Instant] = {}
    for inst in timeline.pending((Action.ROLLBACK,)):
        try:
            target = (timeline.read_plan(inst) or {}).get("instantToRollback") or {}
        except HoodieFormatError as exc:
            log.warning("%s rollback: plan unreadable, left alone: %s", inst.requested_time, exc)
            continue
        t, action = str(target.get("commitTime") or ""), str(target.get("action") or "")
        if not t or action not in {a.value for a in _DATA_WRITE_ACTIONS}:
            continue
        current = timeline.get(t)
        if current is not None and timeline.is_clustering(current):
            continue
        out.setdefault(t, inst)
    return out


def select_failed_writes(
    timeline: Timeline,
    heartbeats: Mapping[str, int],
    settings: FailedWritesSettings,
    *,
    now_ms: int,
) -> list[DataWriteRollback]:
    """The failed writes Hudi's clean rolls back, newest first (empty unless the policy is LAZY).

    ``heartbeats``: last beat (epoch ms) by instant time; an instant missing from it has no
    heartbeat file and is never selected (see the module docstring). Pending rollbacks of data
    writes are included whatever the heartbeat of their target.
    """
    if settings.policy is not FailedWritesPolicy.LAZY:
        return []
    found: dict[str, DataWriteRollback] = {}
    for inst in timeline.pending(_DATA_WRITE_ACTIONS):
        if not is_data_write(timeline, inst):
            continue
        beat = heartbeats.get(inst.requested_time)
        if beat is not None and now_ms - beat > settings.max_gap_ms:
            found[inst.requested_time] = DataWriteRollback(inst.requested_time, inst.action.value, None, beat)
    for t, rollback in pending_data_write_rollbacks(timeline).items():
        plan = timeline.read_plan(rollback) or {}
        action = str((plan.get("instantToRollback") or {}).get("action") or "")
        found[t] = DataWriteRollback(t, action, rollback, heartbeats.get(t, 0))
    return sorted(found.values(), key=lambda f: f.target_time, reverse=True)


def _v6_delta_commit_files(
    storage: Storage, target: Instant
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Table version 6 delta commit: (files it created, log files it appended to), from its markers
    (``MarkerBasedRollbackStrategy``); without markers nothing tells which log files it touched."""
    markers = WriteMarkers(storage, target.requested_time)
    found = markers.markers() if markers.exists() else []
    if not found:
        raise UnsupportedTableError(
            f"{target.requested_time}: a failed table-version-6 deltacommit without markers; its log "
            "blocks may sit in existing log files and nothing says which (hoodied rolls back v6 "
            "appends from their APPEND markers only)"
        )
    created: dict[str, list[str]] = {}
    appended: dict[str, list[str]] = {}
    for m in found:
        is_log = LogFileName.parse(m.file_name) is not None
        if m.io_type is IOType.APPEND and not is_log:
            raise UnsupportedTableError(
                f"{markers.folder}: an APPEND marker naming the base file {m.data_path} (markers of "
                "writers before HUDI-1517); hoodied does not guess which log file it appended to"
            )
        if is_log and m.io_type is not IOType.APPEND:
            raise HoodieFormatError(
                f"{markers.folder}: a {m.io_type.value} marker for the log file {m.data_path}"
            )
        (appended if is_log else created).setdefault(m.partition, []).append(m.data_path)
    return created, appended


def plan_failed_write_rollback(
    storage: Storage, config: TableConfig, timeline: Timeline, target: Instant
) -> dict[str, Any]:
    """The ``HoodieRollbackPlan`` of the pending data write ``target`` (validated, nothing written)."""
    if not is_data_write(timeline, target):
        what = "completed" if target.is_completed else "not a data write"
        raise InstantStateError(f"{target.requested_time}: {target.action.value} is {what}; "
                                "not a failed data write")
    if target.requested_time <= FULL_BOOTSTRAP_INSTANT_TS:
        raise UnsupportedTableError(
            f"{target.requested_time}: a failed bootstrap; Hudi rolls it back with the bootstrap "
            "index and drops the metadata table, which hoodied does not do"
        )
    if target.state is State.REQUESTED:
        return rollback_plan(storage, target, {})  # it wrote nothing yet
    if config.version < 8 and target.action is Action.DELTA_COMMIT:
        created, appended = _v6_delta_commit_files(storage, target)
        return rollback_plan(storage, target, created, appended)
    return rollback_plan(storage, target, attempt_files(storage, config, target))


def schedule_failed_write_rollback(writer: TimelineWriter, timeline: Timeline, target: Instant) -> Instant:
    """Reuse the pending rollback of ``target`` or schedule a new one (the caller holds the lock
    and has re-checked ``target`` on a timeline loaded under it)."""
    existing = pending_rollback_for(timeline, target.requested_time)
    if existing is not None:
        log.info("%s: reusing pending rollback %s", target.requested_time, existing.requested_time)
        return existing
    plan = plan_failed_write_rollback(writer.storage, writer.config, timeline, target)
    check_data_rollback(writer.storage, writer.config, target.requested_time)
    return writer.schedule(Action.ROLLBACK, plan)
