"""Timeline writes: new instants and their state transitions, write-once, under the table lock.

Every action hoodied writes goes through ``TimelineWriter``, in both layouts (layout 1:
files in ``.hoodie/``; layout 2: ``.hoodie/timeline/`` with completed files named
``<requested>_<completion>.<action>``). The rules it keeps:

- Each state is its own file, created with ``storage.put_if_absent`` (temp file + atomic
  no-replace link). An existing file is never overwritten; requested and inflight files stay
  after completion (no renames since layout 1).
- Re-running a transition that already happened is a no-op: the writer looks at the
  instant's files (one listing, under the lock) and returns the state already there. This is
  what makes a crashed service safe to re-run from the start.
- The caller holds the table lock; the writer calls ``lock.ensure_held()`` when a transition
  starts (even one that turns out to be a no-op) and right before every file it creates or
  deletes, so a holder that lost its lock writes nothing more and learns it at once.
- New requested times and layout-2 completion times come from ``TrueTime`` while the lock
  is held, and the file that uses the time is written before the caller releases the lock.
  A layout-1 completion runs ``TrueTime.check_clock`` first, as a new time does.

File contents (requested / inflight / completed), as Apache Hudi writes them:

=================  ==============================  ======================  ==========================
action             requested                       inflight                completed
=================  ==============================  ======================  ==========================
compaction         HoodieCompactionPlan            empty                   commit: commit metadata
logcompaction      HoodieCompactionPlan            empty                   deltacommit: commit metadata
clustering         HoodieRequestedReplaceMetadata  empty                   replacecommit: replace metadata
replacecommit      HoodieRequestedReplaceMetadata  commit metadata         replace metadata
commit/deltacommit empty                           commit metadata         commit metadata
clean              HoodieCleanerPlan               empty (layout 1: plan)  HoodieCleanMetadata
rollback           HoodieRollbackPlan              empty                   HoodieRollbackMetadata
restore            HoodieRestorePlan               empty                   HoodieRestoreMetadata
indexing           HoodieIndexPlan                 empty                   HoodieIndexCommitMetadata
savepoint          (none)                          empty                   HoodieSavepointMetadata
=================  ==============================  ======================  ==========================

Plans are Avro object containers with one record and no codec. Commit and replace metadata
are Avro in table versions 8/9 and Jackson-style pretty JSON in version 6 (where the Avro-only
``version`` field is left out); every other completed file is Avro. Layout 1 has no
``clustering`` action: a v6 clustering is written as a ``replacecommit``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from hoodied.hoodie.avro.container import write_single_record
from hoodied.hoodie.errors import FileAlreadyExistsError, InstantStateError
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.instant import COMPLETED_ACTION, Action, Instant, State, parse_instant_file_name
from hoodied.hoodie.timeline.truetime import TimeSettings, TrueTime, timeline_floor

log = logging.getLogger(__name__)

__all__ = ["InstantFiles", "TimelineWriter", "jackson_json"]

#: Schema of the requested file's plan, per pending action.
PLAN_SCHEMA: dict[Action, str] = {
    Action.COMPACTION: "HoodieCompactionPlan",
    Action.LOG_COMPACTION: "HoodieCompactionPlan",
    Action.CLUSTERING: "HoodieRequestedReplaceMetadata",
    Action.REPLACE_COMMIT: "HoodieRequestedReplaceMetadata",
    Action.CLEAN: "HoodieCleanerPlan",
    Action.ROLLBACK: "HoodieRollbackPlan",
    Action.RESTORE: "HoodieRestorePlan",
    Action.INDEXING: "HoodieIndexPlan",
}

#: Schema of the completed file, per pending action.
METADATA_SCHEMA: dict[Action, str] = {
    Action.COMMIT: "HoodieCommitMetadata",
    Action.DELTA_COMMIT: "HoodieCommitMetadata",
    Action.COMPACTION: "HoodieCommitMetadata",
    Action.LOG_COMPACTION: "HoodieCommitMetadata",
    Action.REPLACE_COMMIT: "HoodieReplaceCommitMetadata",
    Action.CLUSTERING: "HoodieReplaceCommitMetadata",
    Action.CLEAN: "HoodieCleanMetadata",
    Action.ROLLBACK: "HoodieRollbackMetadata",
    Action.RESTORE: "HoodieRestoreMetadata",
    Action.SAVEPOINT: "HoodieSavepointMetadata",
    Action.INDEXING: "HoodieIndexCommitMetadata",
}

#: Actions whose commit metadata is pretty JSON in table version 6.
_COMMIT_LIKE = frozenset(
    {
        Action.COMMIT,
        Action.DELTA_COMMIT,
        Action.COMPACTION,
        Action.LOG_COMPACTION,
        Action.REPLACE_COMMIT,
        Action.CLUSTERING,
    }
)

#: Actions whose inflight file carries (workload) commit metadata.
_INFLIGHT_WITH_METADATA = frozenset({Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT})

Content = dict[str, Any] | bytes | None


@dataclass(frozen=True, slots=True)
class InstantFiles:
    """The timeline files of one instant, by state (file names inside the timeline folder)."""

    requested_time: str
    action: Action
    names: dict[State, str]

    @property
    def latest_state(self) -> State | None:
        for state in (State.COMPLETED, State.INFLIGHT, State.REQUESTED):
            if state in self.names:
                return state
        return None

    def instant(self) -> Instant | None:
        """The instant in its latest state (completion time from the completed file name)."""
        state = self.latest_state
        if state is None:
            return None
        completion = None
        if state is State.COMPLETED:
            parsed = parse_instant_file_name(self.names[State.COMPLETED])
            completion = parsed.completion_time if parsed is not None else None
        return Instant(self.requested_time, self.action, state, completion)


class TimelineWriter:
    """Writes timeline files of one table; every method expects the caller to hold ``lock``."""

    def __init__(
        self,
        storage: Storage,
        config: TableConfig,
        lock: TableLock,
        *,
        truetime: TrueTime | None = None,
        time_settings: TimeSettings | None = None,
    ) -> None:
        self.storage = storage
        self.config = config
        self.lock = lock
        self.truetime = truetime or TrueTime.for_table(config, time_settings)
        self.folder = config.timeline_path
        self.layout = config.timeline_layout

    # ------------------------------------------------------------------ reading our own state

    def disk_action(self, action: Action) -> Action:
        """The pending action as named on disk (layout 1 writes clustering as replacecommit)."""
        if action is Action.CLUSTERING and self.layout < 2:
            return Action.REPLACE_COMMIT
        return action

    def files(self, requested_time: str, action: Action) -> InstantFiles:
        """The instant's files as they are now on storage (one listing of the timeline folder)."""
        action = self.disk_action(action)
        family = COMPLETED_ACTION.get(action, action)
        names: dict[State, str] = {}
        for info in self.storage.list(self.folder):
            if info.is_dir or not info.name.startswith(requested_time):
                continue
            inst = parse_instant_file_name(info.name)
            if inst is None or inst.requested_time != requested_time:
                continue
            if inst.is_completed:
                if inst.action is family:
                    names[State.COMPLETED] = info.name
            elif inst.action is action:
                names[inst.state] = info.name
        return InstantFiles(requested_time, action, names)

    def path(self, name: str) -> str:
        return f"{self.folder}/{name}"

    # ------------------------------------------------------------------ times

    def new_instant_time(self) -> str:
        """A new requested time: after everything on the timeline, TrueTime-spaced, under the lock."""
        return self.truetime.generate(self.lock, timeline_floor(self.storage, self.config))

    # ------------------------------------------------------------------ transitions

    def schedule(self, action: Action, plan: Content) -> Instant:
        """New requested time + requested file in one step (the caller holds the lock throughout)."""
        return self.create_requested(action, self.new_instant_time(), plan)

    def create_requested(self, action: Action, requested_time: str, plan: Content) -> Instant:
        """Write ``<T>.<action>.requested``; a no-op when the instant already has any state file."""
        action = self.disk_action(action)
        if action is Action.SAVEPOINT:
            raise ValueError("a savepoint has no requested state; start it with transition_to_inflight")
        self.lock.ensure_held()  # a lost holder may not even decide on a no-op
        existing = self.files(requested_time, action)
        current = existing.instant()
        if current is not None:
            log.info(
                "%s %s: already %s, requested not written again",
                requested_time,
                action.value,
                current.state.value,
            )
            return current
        instant = Instant(requested_time, action, State.REQUESTED)
        name = instant.file_name(self.layout)
        self._put(name, self._encode_plan(action, plan, name))
        return instant

    def transition_to_inflight(self, requested_time: str, action: Action, content: Content = None) -> Instant:
        """Write the inflight file; a no-op when it (or the completed file) is already there."""
        action = self.disk_action(action)
        self.lock.ensure_held()  # a lost holder may not even decide on a no-op
        existing = self.files(requested_time, action)
        inflight = Instant(requested_time, action, State.INFLIGHT)
        current = existing.instant()
        if current is not None and current.state is not State.REQUESTED:
            log.info(
                "%s %s: already %s, inflight not written again",
                requested_time,
                action.value,
                current.state.value,
            )
            return current
        if action is not Action.SAVEPOINT and State.REQUESTED not in existing.names:
            raise InstantStateError(
                f"{self.path(inflight.file_name(self.layout))}: cannot start {action.value} "
                f"{requested_time}, it has no requested file"
            )
        name = inflight.file_name(self.layout)
        self._put(name, self._encode_inflight(action, content, existing, name))
        return inflight

    def complete(self, requested_time: str, action: Action, metadata: Content) -> Instant:
        """Write the completed file; a no-op returning the completed instant when it already exists.

        Layout 2: the completion time is generated now (TrueTime, after the requested time and
        everything on the timeline) and the file is written right after ``ensure_held``.
        """
        action = self.disk_action(action)
        self.lock.ensure_held()  # a lost holder may not even decide on a no-op
        existing = self.files(requested_time, action)
        if existing.latest_state is State.COMPLETED:
            done = existing.instant()
            assert done is not None
            log.info("%s: already completed", self.path(existing.names[State.COMPLETED]))
            return done
        if State.INFLIGHT not in existing.names:
            raise InstantStateError(
                f"{self.folder}: cannot complete {action.value} {requested_time}, it is not inflight"
            )
        probe = Instant(requested_time, action, State.COMPLETED)
        data = self._encode_metadata(action, metadata, probe.file_name(1))
        completion: str | None = None
        if self.layout >= 2:
            floor = max(filter(None, (timeline_floor(self.storage, self.config), requested_time)))
            completion = self.truetime.generate(self.lock, floor)
        else:
            # layout 1 orders completions by the completed file's time: the same clock check first
            self.truetime.check_clock()
        done = Instant(requested_time, action, State.COMPLETED, completion)
        self._put(done.file_name(self.layout), data)
        return done

    def revert_inflight_to_requested(self, requested_time: str, action: Action) -> Instant:
        """Delete the inflight file of a pending instant (Hudi's revert before re-executing a plan).

        A no-op when there is no inflight file; refused when the instant is completed.
        """
        action = self.disk_action(action)
        self.lock.ensure_held()  # a lost holder may not even decide on a no-op
        existing = self.files(requested_time, action)
        if existing.latest_state is State.COMPLETED:
            raise InstantStateError(
                f"{self.folder}: {action.value} {requested_time} is completed; its inflight file stays"
            )
        name = existing.names.get(State.INFLIGHT)
        if name is not None:
            self.storage.delete(self.path(name))
            log.info("%s: deleted, %s %s is requested again", self.path(name), action.value, requested_time)
        return Instant(requested_time, action, State.REQUESTED)

    # ------------------------------------------------------------------ encoding

    def _put(self, name: str, data: bytes) -> None:
        path = self.path(name)
        self.lock.ensure_held()
        try:
            self.storage.put_if_absent(path, data)
        except FileAlreadyExistsError:
            # only a writer that ignores the lock can get here; its file stays, ours is not needed
            log.warning("%s: already exists, left as it is", path)
            return
        log.info("%s: written (%d bytes)", path, len(data))

    def _encode_plan(self, action: Action, plan: Content, where: str) -> bytes:
        if isinstance(plan, bytes):
            return plan
        schema = PLAN_SCHEMA.get(action)
        if schema is None:
            if plan:
                raise ValueError(f"{where}: a {action.value} requested file carries no plan")
            return b""
        if plan is None:
            if action is Action.REPLACE_COMMIT:
                plan = {}  # Hudi writes an (almost) empty HoodieRequestedReplaceMetadata
            else:
                raise ValueError(f"{where}: a {action.value} needs a {schema} plan")
        return _avro(plan, schema, where)

    def _encode_inflight(self, action: Action, content: Content, existing: InstantFiles, where: str) -> bytes:
        if isinstance(content, bytes):
            return content
        if action is Action.CLEAN and self.config.version < 8 and content is None:
            # 0.x copied the clean plan into the inflight file; v6 readers may look there
            return self.storage.read(self.path(existing.names[State.REQUESTED]))
        if action in _INFLIGHT_WITH_METADATA:
            if content is None:
                return b""
            return self._commit_metadata(action, content, where)
        if content:
            raise ValueError(f"{where}: a {action.value} inflight file is empty in Hudi, got content")
        return b""

    def _encode_metadata(self, action: Action, metadata: Content, where: str) -> bytes:
        if isinstance(metadata, bytes):
            return metadata
        if metadata is None:
            raise ValueError(f"{where}: completing a {action.value} needs its metadata")
        if action in _COMMIT_LIKE:
            return self._commit_metadata(action, metadata, where)
        return _avro(metadata, METADATA_SCHEMA[action], where)

    def _commit_metadata(self, action: Action, metadata: dict[str, Any], where: str) -> bytes:
        if self.config.version < 8:
            doc = {k: v for k, v in metadata.items() if k != "version"}
            return jackson_json(doc).encode("utf-8")
        return _avro(metadata, METADATA_SCHEMA[action], where)


def _avro(record: dict[str, Any], schema_name: str, where: str) -> bytes:
    try:
        return write_single_record(record, schema_name)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{where}: {schema_name} record cannot be encoded: {exc}") from None


def jackson_json(value: Any) -> str:
    """JSON as Jackson's default pretty printer writes it (Hudi's v6 commit files).

    Objects put each field on its own line, indented two spaces per enclosing object, with
    ``"key" : value``; arrays stay on one line as ``[ a, b ]`` and add no indentation;
    empties are ``{ }`` / ``[ ]``; no newline at the end.
    """
    out: list[str] = []
    _jackson(value, 0, out)
    return "".join(out)


def _jackson(value: Any, level: int, out: list[str]) -> None:
    if isinstance(value, dict):
        if not value:
            out.append("{ }")
            return
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append("," if i else "")
            out.append("\n" + "  " * (level + 1) + json.dumps(str(key), ensure_ascii=False) + " : ")
            _jackson(item, level + 1, out)
        out.append("\n" + "  " * level + "}")
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[ ]")
            return
        out.append("[ ")
        for i, item in enumerate(value):
            if i:
                out.append(", ")
            _jackson(item, level, out)  # arrays add no indentation level
        out.append(" ]")
    else:
        out.append(json.dumps(value, ensure_ascii=False))
