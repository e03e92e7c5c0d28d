"""The active timeline of a table (layout 1: ``.hoodie/``, layout 2: ``.hoodie/timeline/``).

Loading lists the timeline folder once and parses file names only; file contents (plans,
commit metadata) are decoded on demand. Each instant appears once, with its latest state and
its action resolved to the table-service action: a pending ``compaction`` completes as
``commit``, ``logcompaction`` as ``deltacommit``, ``clustering`` as ``replacecommit``
(``InstantComparatorV2``), and the completed instant keeps the pending action's name.
Layout 1 has no ``clustering`` action: a v6 clustering is a ``replacecommit`` whose requested
metadata says ``operationType`` CLUSTER (``is_clustering``).

Completion times come from the file name (layout 2) or, for layout 1 and legacy layout-2
files, from the completed file's modification time in the table timezone, as Hudi backfills
them. With ``include_history=True`` the archived timeline adds the completed instants that left the
active one: the LSM history of layout 2 (``hoodie.timeline.history``) or the ``.hoodie/archived``
log files of layout 1 (``hoodie.timeline.archived_v6``), both behind ``ArchivedPart``; an archived
instant answers ``read_commit_metadata`` and ``read_plan`` from its archived record.

Instant times (``HoodieInstantTimeGenerator``) are parsed and formatted by ``hoodie.timeline.instant``;
``instant_time_to_datetime`` and ``datetime_to_instant_time`` are re-exported here for the
timeline's callers.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any, Protocol

from hoodied.hoodie.actions.services import service_of
from hoodied.hoodie.avro.container import is_avro_container, read_single_record
from hoodied.hoodie.errors import CorruptPlanError, HoodieFormatError
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.archived_v6 import ArchivedTimelineV6
from hoodied.hoodie.timeline.history import History
from hoodied.hoodie.timeline.instant import (
    COMPLETED_ACTION,
    Action,
    Instant,
    State,
    datetime_to_instant_time,
    instant_time_to_datetime,
    parse_instant_file_name,
)
from hoodied.hoodie.timeline.plans import Plan, decode_plan

__all__ = [
    "PLAN_ACTIONS",
    "ArchivedPart",
    "Timeline",
    "datetime_to_instant_time",
    "decode_metadata",
    "instant_time_to_datetime",
    "load_archived",
    "parse_timeline_file_name",
]

log = logging.getLogger(__name__)

# Names that look like a timeline file but did not parse (unknown action or state).
_LOOKS_LIKE_INSTANT = re.compile(r"^\d{14,}(?:_\d+)?\.[A-Za-z]")

#: Actions whose requested file holds an Avro plan.
PLAN_ACTIONS = frozenset(
    {
        Action.COMPACTION,
        Action.LOG_COMPACTION,
        Action.CLUSTERING,
        Action.REPLACE_COMMIT,
        Action.CLEAN,
        Action.ROLLBACK,
        Action.RESTORE,
        Action.INDEXING,
    }
)


def parse_timeline_file_name(folder: str, name: str) -> Instant | None:
    """The instant a timeline file name stands for, or ``None`` for other files (a look-alike is logged)."""
    inst = parse_instant_file_name(name)
    if inst is None and _LOOKS_LIKE_INSTANT.match(name):
        log.warning("%s/%s: unknown timeline action or state, ignored", folder, name)
    return inst


class ArchivedPart(Protocol):
    """The archived completed instants of a table, as the ``Timeline`` reads them."""

    def instants(self) -> list[Instant]: ...

    def file_of(self, instant: Instant) -> str | None:
        """The archive file holding the instant (``None``: not archived)."""

    def commit_metadata(self, instant: Instant) -> dict[str, Any]:
        """The completed instant's metadata record (``{}`` for an empty one)."""

    def plan(self, instant: Instant) -> dict[str, Any] | None:
        """The instant's plan record, when it had one."""


class _LsmPart:
    """Layout 2: the LSM history, whose rows keep the timeline files' bytes."""

    def __init__(self, history: History) -> None:
        self.history = history

    def instants(self) -> list[Instant]:
        return self.history.instants()

    def file_of(self, instant: Instant) -> str | None:
        entry = self.history.get(instant.requested_time)
        return entry.file if entry is not None else None

    def commit_metadata(self, instant: Instant) -> dict[str, Any]:
        where = f"{self.file_of(instant)} ({instant.requested_time} metadata)"
        return decode_metadata(self.history.metadata_bytes(instant.requested_time) or b"", where)

    def plan(self, instant: Instant) -> dict[str, Any] | None:
        data = self.history.plan_bytes(instant.requested_time)
        if not data:
            return None
        record = read_single_record(data, f"{self.file_of(instant)} ({instant.requested_time} plan)")
        # an archived replacecommit keeps its inflight commit metadata as "plan" when that was not empty
        if instant.action in (Action.REPLACE_COMMIT, Action.CLUSTERING) and "partitionToWriteStats" in record:
            return None
        return record


#: The ``HoodieArchivedMetaEntry`` field of a layout-1 archived requested record that holds its plan.
_V6_PLAN_FIELD = {
    Action.COMPACTION: "hoodieCompactionPlan",
    Action.LOG_COMPACTION: "hoodieCompactionPlan",
    Action.REPLACE_COMMIT: "hoodieRequestedReplaceMetadata",
    Action.CLEAN: "hoodieCleanerPlan",
}


class _V6Part:
    """Layout 1: ``.hoodie/archived``, whose records hold the files' contents as Avro records."""

    def __init__(self, archived: ArchivedTimelineV6) -> None:
        self.archived = archived
        self._instants = archived.instants()

    def instants(self) -> list[Instant]:
        return list(self._instants)

    def file_of(self, instant: Instant) -> str | None:
        done = [r for r in self.archived.entries(instant) if r.state is State.COMPLETED]
        return done[0].file if done else None

    def commit_metadata(self, instant: Instant) -> dict[str, Any]:
        return self.archived.metadata(instant) or {}

    def plan(self, instant: Instant) -> dict[str, Any] | None:
        key = _V6_PLAN_FIELD.get(instant.action)
        if key is None:
            return None  # Hudi 0.x archives no rollback, restore or indexing plan
        for state in (State.REQUESTED, State.INFLIGHT):  # 0.x cleans copied the plan into the inflight file
            for r in self.archived.entries(instant):
                value = r.record.get(key)
                if r.state is state and isinstance(value, dict):
                    return value
        return None


def load_archived(storage: Storage, config: TableConfig) -> ArchivedPart:
    """The table's archived timeline in its layout's format (empty when nothing was archived)."""
    if config.timeline_layout < 2:
        return _V6Part(ArchivedTimelineV6.load(storage, config))
    return _LsmPart(History.load(storage, config))


@dataclass(slots=True)
class _Group:
    """The state files of one instant while loading."""

    pending_action: Action | None = None
    files: dict[State, str] = field(default_factory=dict)
    completed: Instant | None = None
    completed_mtime_ms: int = 0
    long_time: str | None = None
    """The time as the file names it when longer than 17 digits (a 0.x metadata table's ``<T>001``)."""


class Timeline:
    """The instants of a table, one per requested time, sorted by requested time."""

    def __init__(
        self,
        storage: Storage,
        config: TableConfig,
        instants: list[Instant],
        files: dict[tuple[str, Action], dict[State, str]],
        history: ArchivedPart | None = None,
    ) -> None:
        self.storage = storage
        self.config = config
        self.instants = instants
        self._files = files
        self._history = history
        self._by_time: dict[str, Instant] = {}
        for inst in instants:
            self._by_time.setdefault(inst.requested_time, inst)
        self._clustering: dict[str, bool] = {}
        self._replaced: dict[str, dict[str, list[str]]] = {}
        self._rolled_back: set[str] | None = None

    # ---------------------------------------------------------------- loading

    @classmethod
    def load(cls, storage: Storage, config: TableConfig, *, include_history: bool = False) -> Timeline:
        """List the timeline folder once and build the instants from the file names."""
        folder = config.timeline_path
        files: list[tuple[str, Instant, int]] = []
        for info in storage.list(folder):
            if info.is_dir:
                continue
            inst = parse_timeline_file_name(folder, info.name)
            if inst is not None:
                files.append((info.name, inst, info.mtime_ms))
        return cls.from_files(storage, config, files, include_history=include_history)

    @classmethod
    def from_files(
        cls,
        storage: Storage,
        config: TableConfig,
        files: Iterable[tuple[str, Instant, int]],
        *,
        include_history: bool = False,
    ) -> Timeline:
        """The timeline of already-parsed timeline files: (name, ``parse_timeline_file_name``, mtime ms).

        The mtime is used only for completed files without a completion time (layout 1 and
        legacy names), so callers that parse incrementally need to ``stat`` only those.
        """
        groups: dict[tuple[str, Action], _Group] = {}
        for name, inst, mtime_ms in files:
            if inst.action is Action.SCHEMA_COMMIT:
                continue  # schema commits live in .hoodie/.schema and carry no data
            # group the states of one instant under the action its completed file carries
            family: Action = inst.action
            if not inst.is_completed:
                family = COMPLETED_ACTION.get(inst.action, inst.action)
            key = (inst.requested_time, family)
            group = groups.get(key)
            long_time = name[:name.index(".")].split("_", 1)[0] if name[17:18].isdigit() else None
            if group is None:
                group = groups[key] = _Group(long_time=long_time)
            elif group.long_time != long_time:
                # two instants once their times are cut to 17 digits (a 0.x metadata table's log
                # compaction <T>005 beside its delta commit T): one of them would be lost
                other = next(iter(group.files.values()))
                raise HoodieFormatError(
                    f"{config.timeline_path}/{name}: its instant and that of {other} are one instant in "
                    "hoodied's timeline (times longer than 17 digits are cut); such a timeline is not "
                    "supported"
                )
            if inst.is_completed:
                # a completion-time name wins over a legacy one for the same instant
                prev = group.completed
                if prev is None or (prev.completion_time is None and inst.completion_time):
                    group.completed = inst
                    group.completed_mtime_ms = mtime_ms
                    group.files[State.COMPLETED] = name
            else:
                group.pending_action = inst.action
                group.files[inst.state] = name
        instants: list[Instant] = []
        by_instant: dict[tuple[str, Action], dict[State, str]] = {}
        tz = config.tzinfo if groups else None
        for (requested, _family), group in groups.items():
            inst = cls._resolve(requested, group, config, tz)
            instants.append(inst)
            by_instant[(requested, inst.action)] = group.files
        history = load_archived(storage, config) if include_history else None
        if history is not None:
            active = {i.requested_time for i in instants}
            instants.extend(i for i in history.instants() if i.requested_time not in active)
        instants.sort(key=lambda i: (i.requested_time, i.action.value))
        return cls(storage, config, instants, by_instant, history)

    @staticmethod
    def _resolve(requested: str, group: _Group, config: TableConfig, tz: tzinfo | None) -> Instant:
        if group.completed is None:
            state = State.INFLIGHT if State.INFLIGHT in group.files else State.REQUESTED
            assert group.pending_action is not None
            return Instant(requested, group.pending_action, state)
        done = group.completed
        action = done.action
        if group.pending_action is not None and COMPLETED_ACTION.get(group.pending_action) is action:
            action = group.pending_action
        completion = done.completion_time
        legacy = False
        if completion is None:
            # Hudi backfills the completion time of layout-1 / legacy files from their mtime
            assert tz is not None
            mtime = datetime.fromtimestamp(group.completed_mtime_ms / 1000, tz)
            completion = datetime_to_instant_time(mtime, tz)
            legacy = config.timeline_layout >= 2
        return Instant(requested, action, State.COMPLETED, completion, legacy)

    # ---------------------------------------------------------------- queries

    def __len__(self) -> int:
        return len(self.instants)

    def __iter__(self) -> Iterator[Instant]:
        return iter(self.instants)

    def completed(self, actions: Collection[Action] | None = None) -> list[Instant]:
        return [i for i in self.instants if i.is_completed and (actions is None or i.action in actions)]

    def pending(self, actions: Collection[Action] | None = None) -> list[Instant]:
        return [i for i in self.instants if i.is_pending and (actions is None or i.action in actions)]

    def get(self, requested_time: str) -> Instant | None:
        return self._by_time.get(requested_time)

    def is_completed(self, requested_time: str) -> bool:
        inst = self._by_time.get(requested_time)
        return inst is not None and inst.is_completed

    def completion_time(self, requested_time: str) -> str | None:
        inst = self._by_time.get(requested_time)
        return inst.completion_time if inst is not None and inst.is_completed else None

    def latest_completed(self, actions: Collection[Action] | None = None) -> Instant | None:
        """The completed instant with the greatest requested time (optionally of ``actions``)."""
        for inst in reversed(self.instants):
            if inst.is_completed and (actions is None or inst.action in actions):
                return inst
        return None

    def is_archived(self, instant: Instant) -> bool:
        """True for instants that come from the archived timeline (no active timeline files)."""
        if (instant.requested_time, instant.action) in self._files:
            return False
        return self._history is not None and self._history.file_of(instant) is not None

    # ---------------------------------------------------------------- files

    def state_files(self, instant: Instant) -> dict[State, str]:
        """Relative paths of the instant's timeline files on the active timeline, by state."""
        names = self._files.get((instant.requested_time, instant.action), {})
        return {state: f"{self.config.timeline_path}/{name}" for state, name in names.items()}

    def state_file(self, instant: Instant, state: State | None = None) -> str:
        """Relative path of the file of ``state`` (default: the instant's own state).

        For an archived instant this is the archive file holding it (a history parquet file of
        layout 2, a ``.commits_.archive`` log file of layout 1).
        """
        wanted = state or instant.state
        names = self._files.get((instant.requested_time, instant.action))
        if names and wanted in names:
            return f"{self.config.timeline_path}/{names[wanted]}"
        if self._history is not None and wanted is State.COMPLETED:
            file = self._history.file_of(instant)
            if file is not None:
                return file
        raise LookupError(f"{instant}: no {wanted.value} file on the timeline")

    # ---------------------------------------------------------------- contents

    def read_plan(self, instant: Instant) -> dict[str, Any] | None:
        """The Avro plan of the instant's requested file (``None`` for actions without one or empty files).

        compaction / logcompaction -> HoodieCompactionPlan; clustering and replacecommit ->
        HoodieRequestedReplaceMetadata; clean -> HoodieCleanerPlan; rollback ->
        HoodieRollbackPlan; indexing -> HoodieIndexPlan; restore -> HoodieRestorePlan. A file that
        does not decode raises ``CorruptPlanError`` (``plan`` too, for a record of another kind): a
        ``HoodieFormatError`` that names the instant, so a diagnostic command can mark it and go on.
        """
        if instant.action not in PLAN_ACTIONS:
            return None
        names = self._files.get((instant.requested_time, instant.action))
        if names is None:
            return self._history.plan(instant) if self._history is not None else None
        candidates = [State.REQUESTED]
        if instant.action is Action.CLEAN:
            candidates.append(State.INFLIGHT)  # 0.x writers copied the clean plan into the inflight file
        for state in candidates:
            name = names.get(state)
            if name is None:
                continue
            path = f"{self.config.timeline_path}/{name}"
            data = self.storage.read(path)
            if data:
                try:
                    return read_single_record(data, path)
                except HoodieFormatError as exc:  # typed, so the diagnostic commands can mark the instant
                    raise _corrupt_plan(instant, exc) from None
        return None

    def plan(self, instant: Instant) -> Plan | None:
        """``read_plan`` decoded into the typed plan of ``hoodie.timeline.plans``."""
        record = self.read_plan(instant)
        try:
            return decode_plan(instant, record)
        except (HoodieFormatError, KeyError, TypeError, ValueError) as exc:  # an Avro record of another kind
            raise _corrupt_plan(instant, exc) from None

    def read_commit_metadata(self, instant: Instant) -> dict[str, Any]:
        """The completed metadata of the instant: Avro (layout 2) or pretty JSON (layout 1, legacy).

        An empty completed file gives ``{}``. Keys are those of the Avro schemas
        (``partitionToWriteStats``, ``partitionToReplaceFileIds``, ``operationType``, ...).
        """
        if not instant.is_completed:
            raise ValueError(f"{instant}: not completed, it has no commit metadata")
        names = self._files.get((instant.requested_time, instant.action))
        if names is not None and State.COMPLETED in names:
            path = f"{self.config.timeline_path}/{names[State.COMPLETED]}"
            return decode_metadata(self.storage.read(path), path)
        if self._history is not None and self._history.file_of(instant) is not None:
            return self._history.commit_metadata(instant)
        raise LookupError(f"{instant}: no completed file on the timeline")

    # ---------------------------------------------------------------- derived views

    def is_clustering(self, instant: Instant) -> bool:
        """Clustering: action ``clustering`` (layout 2), or a replacecommit whose plan says CLUSTER."""
        if instant.action is Action.CLUSTERING:
            return True
        if instant.action is not Action.REPLACE_COMMIT:
            return False
        cached = self._clustering.get(instant.requested_time)
        if cached is None:
            plan = self.read_plan(instant)
            cached = plan is not None and plan.get("operationType") == "CLUSTER"
            if not cached and instant.is_completed:
                cached = self.read_commit_metadata(instant).get("operationType") == "CLUSTER"
            self._clustering[instant.requested_time] = cached
        return cached

    def pending_table_services(self) -> list[Instant]:
        """Pending compaction, log compaction, clustering (v6: clustering replacecommits), clean, indexing:
        the instants of a ``TableService`` (``hoodie.actions.services``)."""
        return [inst for inst in self.pending() if service_of(self, inst) is not None]

    def _replace_map(self, instant: Instant) -> dict[str, list[str]]:
        cached = self._replaced.get(instant.requested_time)
        if cached is None:
            raw = self.read_commit_metadata(instant).get("partitionToReplaceFileIds") or {}
            cached = {str(p): [str(f) for f in ids or ()] for p, ids in raw.items()}
            self._replaced[instant.requested_time] = cached
        return cached

    def replaced_file_groups(self, as_of: str | None = None) -> dict[tuple[str, str], str]:
        """(partition, file id) -> requested time of the completed replacecommit/clustering that replaced it.

        Only replace instants with requested time <= ``as_of`` count (Hudi's time travel
        filters by requested time).
        """
        out: dict[tuple[str, str], str] = {}
        for inst in self.instants:
            if not inst.is_completed or inst.action not in (Action.REPLACE_COMMIT, Action.CLUSTERING):
                continue
            if as_of is not None and inst.requested_time > as_of:
                continue
            for partition, file_ids in self._replace_map(inst).items():
                for file_id in file_ids:
                    out[(partition, file_id)] = inst.requested_time
        return out

    def rolled_back_instants(self) -> set[str]:
        """Requested times rolled back by completed rollbacks and restores."""
        if self._rolled_back is None:
            out: set[str] = set()
            for inst in self.completed((Action.ROLLBACK, Action.RESTORE)):
                md = self.read_commit_metadata(inst)
                out.update(str(t) for t in md.get("commitsRollback") or ())
                out.update(str(t) for t in md.get("instantsToRollback") or ())
                for info in (md.get("instantsRollback") or []) + (md.get("restoreInstantInfo") or []):
                    if isinstance(info, dict) and info.get("commitTime"):
                        out.add(str(info["commitTime"]))
            self._rolled_back = out
        return set(self._rolled_back)

    def __repr__(self) -> str:
        return (
            f"Timeline({self.config.name!r}, {len(self.completed())} completed, "
            f"{len(self.pending())} pending)"
        )


def _corrupt_plan(instant: Instant, exc: Exception) -> CorruptPlanError:
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not isinstance(exc, HoodieFormatError):
        reason = f"not a {instant.action.value} plan ({type(exc).__name__}: {reason})"
    return CorruptPlanError(instant.requested_time, instant.action.value, instant.is_pending, reason)


def decode_metadata(data: bytes, where: str) -> dict[str, Any]:
    """Commit metadata bytes -> dict: Avro container, pretty JSON (v6 / legacy) or empty."""
    if not data.strip():
        return {}
    if is_avro_container(data):
        return read_single_record(data, where)
    if data.lstrip()[:1] == b"{":
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise HoodieFormatError(f"{where}: corrupt JSON commit metadata ({exc})") from None
        if not isinstance(doc, dict):
            raise HoodieFormatError(f"{where}: JSON commit metadata is not an object")
        return doc
    raise HoodieFormatError(f"{where}: neither Avro nor JSON commit metadata (starts with {data[:8]!r})")
