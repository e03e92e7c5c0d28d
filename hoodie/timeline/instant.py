"""Instants: the value types of the timeline and the grammar of timeline file names.

Grammar (``InstantFileNameParserV2``; layout 1 is the same without ``_completion``)::

    file      = requested ["_" completion] "." action [ "." state ]
    requested = 17 digits (legacy: 14 digits; longer MDT instants are cut to 17)
    state     = "requested" | "inflight"          (absent: completed)

with one quirk in every layout: the inflight of a plain ``commit`` is ``<T>.inflight``.
Ordering of instant times is plain string order, as in Hudi.

Instant times (``HoodieInstantTimeGenerator``): ``yyyyMMddHHmmssSSS`` (17 digits) in the table's
timeline time zone, legacy ``yyyyMMddHHmmss`` (14 digits, read as millisecond 999). This module
is their one parser and formatter (``instant_time_to_datetime``, ``datetime_to_instant_time``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from enum import StrEnum

from hoodied.hoodie.errors import HoodieFormatError

__all__ = [
    "COMPLETED_ACTION",
    "WRITE_ACTIONS",
    "Action",
    "Instant",
    "State",
    "datetime_to_instant_time",
    "epoch_to_instant_time",
    "instant_time_to_datetime",
    "instant_time_to_epoch_ms",
    "is_instant_time",
    "latest_commits_to_retain",
    "normalize_time",
    "parse_instant_file_name",
    "require_instant_time",
]


class Action(StrEnum):
    COMMIT = "commit"
    DELTA_COMMIT = "deltacommit"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    REPLACE_COMMIT = "replacecommit"
    CLUSTERING = "clustering"
    COMPACTION = "compaction"
    LOG_COMPACTION = "logcompaction"
    RESTORE = "restore"
    INDEXING = "indexing"
    SCHEMA_COMMIT = "schemacommit"


class State(StrEnum):
    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"


#: A pending table-service action completes under another action's name.
COMPLETED_ACTION: dict[Action, Action] = {
    Action.COMPACTION: Action.COMMIT,
    Action.LOG_COMPACTION: Action.DELTA_COMMIT,
    Action.CLUSTERING: Action.REPLACE_COMMIT,
}

#: Actions that write data files (the "commits and compaction" timeline of Hudi).
WRITE_ACTIONS = frozenset(
    {
        Action.COMMIT,
        Action.DELTA_COMMIT,
        Action.REPLACE_COMMIT,
        Action.CLUSTERING,
        Action.COMPACTION,
        Action.LOG_COMPACTION,
    }
)

_FILE_RE = re.compile(r"^(\d+)(?:_(\d+))?\.([a-z]+)(?:\.([a-z]+))?$")
_ACTIONS = {a.value: a for a in Action}


def instant_time_to_datetime(value: str, tz: tzinfo) -> datetime:
    """Parse a 17-digit (or legacy 14-digit, millisecond 999) instant time in zone ``tz``."""
    if not value.isdigit() or len(value) not in (14, 17):
        raise HoodieFormatError(f"{value!r}: not an instant time (yyyyMMddHHmmssSSS)")
    millis = int(value[14:17]) if len(value) == 17 else 999
    try:
        base = datetime.strptime(value[:14], "%Y%m%d%H%M%S")
    except ValueError:
        raise HoodieFormatError(f"{value!r}: not a valid date-time instant") from None
    return base.replace(microsecond=millis * 1000, tzinfo=tz)


def datetime_to_instant_time(dt: datetime, tz: tzinfo) -> str:
    """Format ``dt`` (naive = already in ``tz``) as a 17-digit instant time in zone ``tz``."""
    local = dt.astimezone(tz) if dt.tzinfo is not None else dt
    return local.strftime("%Y%m%d%H%M%S") + f"{local.microsecond // 1000:03d}"


def epoch_to_instant_time(epoch_s: float, tz: tzinfo) -> str:
    """The instant time of the moment ``epoch_s`` (seconds since the epoch) in zone ``tz``."""
    return datetime_to_instant_time(datetime.fromtimestamp(epoch_s, tz), tz)


def instant_time_to_epoch_ms(value: str, tz: tzinfo) -> int:
    """Milliseconds since the epoch of the instant time ``value`` in zone ``tz``."""
    return int(instant_time_to_datetime(value, tz).timestamp() * 1000)


def normalize_time(value: str) -> str:
    """Hudi truncates instants longer than 17 digits (old MDT suffixes)."""
    return value[:17] if len(value) > 17 else value


def is_instant_time(value: str) -> bool:
    return value.isdigit() and len(value) in (14, 17)


@dataclass(frozen=True, slots=True, order=False)
class Instant:
    """One state of one instant: ``requested_time``, ``action`` and ``state``.

    ``completion_time`` is known for completed instants of layout 2 (from the file name) and,
    for layout 1, backfilled from the completed file's modification time, as Hudi does.
    ``file_action`` is the action in the file name; for a completed compaction it is ``commit``.
    """

    requested_time: str
    action: Action
    state: State
    completion_time: str | None = None
    legacy: bool = False

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def is_pending(self) -> bool:
        return self.state is not State.COMPLETED

    @property
    def file_action(self) -> Action:
        if self.state is State.COMPLETED:
            return COMPLETED_ACTION.get(self.action, self.action)
        return self.action

    def sort_key(self) -> tuple[str, int]:
        return (self.requested_time, _STATE_ORDER[self.state])

    def file_name(self, layout: int) -> str:
        """The timeline file name of this state, for timeline layout 1 or 2."""
        t = self.requested_time
        if self.state is State.COMPLETED:
            act = self.file_action.value
            if layout >= 2 and self.completion_time and not self.legacy:
                return f"{t}_{self.completion_time}.{act}"
            return f"{t}.{act}"
        if self.action is Action.COMMIT and self.state is State.INFLIGHT:
            return f"{t}.inflight"
        return f"{t}.{self.action.value}.{self.state.value}"

    def with_state(self, state: State, completion_time: str | None = None) -> Instant:
        return Instant(self.requested_time, self.action, state, completion_time, self.legacy)

    def __str__(self) -> str:
        done = f" -> {self.completion_time}" if self.completion_time else ""
        return f"{self.requested_time}{done} {self.action.value} {self.state.value}"


_STATE_ORDER = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}


def parse_instant_file_name(name: str) -> Instant | None:
    """Parse a timeline file name; ``None`` when it is not one (folders, temp files, unknown actions).

    The action of a completed file is the *file* action (``commit`` for a finished
    compaction); the timeline resolves it to the table-service action by looking at the
    requested/inflight files of the same instant.
    """
    m = _FILE_RE.match(name)
    if not m:
        return None
    requested, completion, action_s, state_s = m.groups()
    if not is_instant_time(normalize_time(requested)) and len(requested) < 14:
        return None
    requested = normalize_time(requested)
    if state_s is None and action_s == "inflight":
        return Instant(requested, Action.COMMIT, State.INFLIGHT)
    action = _ACTIONS.get(action_s)
    if action is None:
        return None
    if state_s is None:
        return Instant(
            requested,
            action,
            State.COMPLETED,
            normalize_time(completion) if completion else None,
            legacy=completion is None,
        )
    if completion is not None:
        return None
    if state_s == "requested":
        return Instant(requested, action, State.REQUESTED)
    if state_s == "inflight":
        return Instant(requested, action, State.INFLIGHT)
    return None


def require_instant_time(value: str, what: str = "instant") -> str:
    """Validate a user-given instant time (17 digits, or 14 for legacy tables)."""
    if not is_instant_time(value):
        raise HoodieFormatError(f"{value!r}: not a valid {what} time (expected 17 digits, yyyyMMddHHmmssSSS)")
    return value


def latest_commits_to_retain(writes: Sequence[Instant], retained: int) -> Instant | None:
    """The earliest commit to retain of a KEEP_LATEST_COMMITS clean keeping ``retained`` commits.

    ``writes``: the write instants, completed and pending, in requested-time order. The
    ``retained``-th latest completed one, but never one after the earliest pending write (its
    files must stay readable): then the last completed one before it (Hudi's
    ``CleanerUtils.getEarliestCommitToRetain``). ``None`` when nothing falls outside retention.
    """
    completed = [i for i in writes if i.is_completed]
    if len(completed) <= retained:
        return None
    nth = completed[len(completed) - retained]
    pending = [i for i in writes if i.is_pending]
    if pending and nth.requested_time > pending[0].requested_time:
        before = [i for i in completed if i.requested_time < pending[0].requested_time]
        return before[-1] if before else None
    return nth
