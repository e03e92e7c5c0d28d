"""A timeline built from file names in one pass, and a compact copy of it to keep between polls.

``timeline_from_names`` gives the instants of parsing every name with ``parse_timeline_file_name``
and grouping them with ``Timeline.from_files``, at a fraction of the cost: the names Hudi writes
today (``T.action``, ``T_C.action``, ``T.action.state`` with 17-digit times) are split with string
methods, and the requested and inflight files of an instant completed under the same action (two
thirds of a timeline's names) are set apart by one set difference before any parsing; a file
costs a tuple, not an ``Instant``, and only the instants are built, one per requested time and
action. Any other name starting with a digit goes through ``parse_timeline_file_name`` (the
whole grammar, look-alikes logged). Completed files without a completion time in their name
(layout 1, legacy layout-2 names) take it from their modification time, asked of the caller for
those names only (a folder listing may already hold it). One difference with ``from_files``: two
pending actions on one requested time beside a completed file (Hudi never writes it) resolve to
the table-service action, where ``from_files`` takes the one listed last.

``CompactTimeline`` keeps what a daemon needs to decide without the ``Timeline`` object: the
instants as one text line each (requested time, completion time, action, state, legacy flag), the
state-file names of the instants whose plan or metadata a decision may read (pending instants,
replacecommits and clusterings: ``service_of``, ``Timeline.is_clustering``) and the clustering
verdicts already read. ``timeline()`` builds a ``Timeline`` from it again, whose other instants
have no file names (their plans and metadata are not reachable through it: reload the timeline
to read them, as every planner and executor does under the table lock).

Why (bench/poll.py): 200 instants held as a ``Timeline`` with their parsed file names cost about
0.3 MB per table, their compact copy about 12 KB; building the timeline from 600 names takes
about 0.8 ms of CPU where parsing each name and ``Timeline.from_files`` took about 4 ms.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter, methodcaller
from typing import Any

from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline, parse_timeline_file_name
from hoodied.hoodie.timeline.instant import (
    COMPLETED_ACTION,
    Action,
    Instant,
    State,
    datetime_to_instant_time,
)

__all__ = ["CompactTimeline", "timeline_from_names"]

_ACTIONS = {a.value: a for a in Action}
_STATES = {"requested": State.REQUESTED, "inflight": State.INFLIGHT}
_ALL_STATES = {s.value: s for s in State}
_STATE_NAMES = ("requested", "inflight")
#: A requested or inflight file (a C-level test: ``filter`` runs it without Python frames).
_IS_STATE_FILE = methodcaller("endswith", (".requested", ".inflight"))
#: The timeline's order (``Timeline.from_files``): requested time, then action (a ``StrEnum``:
#: compared by its value).
_ORDER = attrgetter("requested_time", "action")
#: Instants whose state files a compact timeline keeps by name (besides pending ones).
_FILES_KEPT = frozenset({Action.REPLACE_COMMIT, Action.CLUSTERING})


def timeline_from_names(
    storage: Storage,
    config: TableConfig,
    names: Iterable[str],
    mtimes: Callable[[list[str]], dict[str, int]],
) -> Timeline:
    """The timeline of the timeline folder's ``names`` (other entries are ignored, look-alikes logged).

    ``mtimes(names)``: the modification times (ms) of those completed files that carry no
    completion time; a name missing from the answer is a file gone since the listing (ignored).
    The instants equal ``Timeline.from_files``'s; the state-file names are those a
    ``CompactTimeline`` keeps (pending instants, replacecommits, clusterings).
    """
    names = list(names)
    done, pending = _split(config.timeline_path, names, exact=False)
    timeline = _group(storage, config, done, pending, mtimes, exact=False)
    if timeline is None:  # a legacy completed file went away: its other state files count again
        done, pending = _split(config.timeline_path, names, exact=True)
        timeline = _group(storage, config, done, pending, mtimes, exact=True)
        assert timeline is not None
    return timeline


_Done = tuple[str, str, "str | None", Action]
_Pending = tuple[str, str, Action, State]


def _split(folder: str, names: Iterable[str], *, exact: bool) -> tuple[list[_Done], list[_Pending]]:
    """The timeline files among ``names``: completed (name, requested, completion, action) and
    pending-state ones (name, requested, action, state); ``parse_instant_file_name``'s grammar.

    The names Hudi writes today (17-digit times) are split with string methods; any other name
    starting with a digit goes through ``parse_timeline_file_name`` (14-digit and longer times,
    ``T.inflight``, look-alikes logged). Unless ``exact``, the requested and inflight files of an
    instant completed under the same action are left out before any parsing: two thirds of a
    timeline's names, and they add nothing but their names, which nothing kept needs."""
    names = set(names)
    state_files = set(filter(_IS_STATE_FILE, names))
    done: list[_Done] = []
    pending: list[_Pending] = []
    for name in names - state_files:
        head, dot, rest = name.partition(".")
        if dot and "." not in rest and (action := _ACTIONS.get(rest)) is not None:
            if len(head) == 17 and head.isdigit():
                done.append((name, head, None, action))
                continue
            if len(head) == 35 and head[17] == "_" and head[:17].isdigit() and head[18:].isdigit():
                done.append((name, head[:17], head[18:], action))
                continue
        _parse_slowly(folder, name, done, pending)
    if not exact:
        state_files.difference_update([
            f"{requested}.{action}.{state}" for _, requested, _, action in done if action not in _FILES_KEPT
            for state in _STATE_NAMES
        ])
    for name in state_files:
        head, _, rest = name.partition(".")
        act, _, state_s = rest.partition(".")
        found, state = _ACTIONS.get(act), _STATES.get(state_s)
        if found is not None and state is not None and len(head) == 17 and head.isdigit():
            pending.append((name, head, found, state))
        else:
            _parse_slowly(folder, name, done, pending)
    return done, pending


def _parse_slowly(folder: str, name: str, done: list[_Done], pending: list[_Pending]) -> None:
    if name[:1].isdigit():
        inst = parse_timeline_file_name(folder, name)
        if inst is None:
            return
        if inst.is_completed:
            done.append((name, inst.requested_time, inst.completion_time, inst.action))
        else:
            pending.append((name, inst.requested_time, inst.action, inst.state))


def _group(
    storage: Storage, config: TableConfig, done: list[_Done], pending: list[_Pending],
    mtimes: Callable[[list[str]], dict[str, int]], *, exact: bool,
) -> Timeline | None:
    """``Timeline.from_files`` over split names; ``None`` when a legacy completed file is gone and
    ``exact`` is not set (the state-file names of completed instants were not all kept)."""
    # per (requested time, family): [pending action, {state: name}, completed name, completion, action]
    groups: dict[tuple[str, Action], list[Any]] = {}
    for name, requested, completion, action in done:
        if action is Action.SCHEMA_COMMIT:
            continue  # schema commits live in .hoodie/.schema and carry no data
        key = (requested, action)
        group = groups.get(key)
        if group is None:
            groups[key] = [None, {}, name, completion, action]
        elif group[3] is None and completion:  # a completion-time name wins over a legacy one
            group[2], group[3] = name, completion
    for name, requested, action, state in pending:
        if action is Action.SCHEMA_COMMIT:
            continue
        family = COMPLETED_ACTION.get(action, action)
        group = groups.get((requested, family))
        if group is None:
            groups[(requested, family)] = [action, {state: name}, None, None, None]
            continue
        group[0] = action
        group[1][state] = name
    legacy_names = [g[2] for g in groups.values() if g[2] is not None and g[3] is None]
    known = mtimes(legacy_names) if legacy_names else {}
    if not exact and len(known) < len(legacy_names):
        return None
    instants, by_instant = _instants(config, groups, known, exact)
    instants.sort(key=_ORDER)
    return Timeline(storage, config, instants, by_instant)


def _instants(
    config: TableConfig, groups: dict[tuple[str, Action], list[Any]], known: dict[str, int], exact: bool
) -> tuple[list[Instant], dict[tuple[str, Action], dict[State, str]]]:
    """One instant per group (``Timeline._resolve``'s rules), with the state files kept."""
    tz = config.tzinfo if groups else None
    instants: list[Instant] = []
    by_instant: dict[tuple[str, Action], dict[State, str]] = {}
    for (requested, _family), (pending_action, files, name, completion, action) in groups.items():
        if name is not None and completion is None and name not in known:
            name = None  # gone since the listing
            if not files:
                continue
        if name is None:
            state = State.INFLIGHT if State.INFLIGHT in files else State.REQUESTED
            inst = Instant(requested, pending_action, state)
        else:
            if pending_action is not None and COMPLETED_ACTION.get(pending_action) is action:
                action = pending_action
            legacy = False
            if completion is None:
                # Hudi backfills the completion time of layout-1 / legacy files from their mtime
                assert tz is not None
                completion = datetime_to_instant_time(datetime.fromtimestamp(known[name] / 1000, tz), tz)
                legacy = config.timeline_layout >= 2
            inst = Instant(requested, action, State.COMPLETED, completion, legacy)
            files[State.COMPLETED] = name
        instants.append(inst)
        if exact or inst.is_pending or inst.action in _FILES_KEPT:
            by_instant[(requested, inst.action)] = files
    return instants, by_instant


@dataclass(frozen=True, slots=True)
class CompactTimeline:
    """What a ``Timeline`` holds that decisions read, in a few kilobytes (module docstring)."""

    count: int
    """Instants on the timeline."""
    lines: str
    """One line per instant, in timeline order: ``requested completion|- action state legacy(0|1)``."""
    files: tuple[tuple[str, Action, tuple[tuple[State, str], ...]], ...]
    """The state-file names of pending instants, replacecommits and clusterings."""
    clustering: tuple[tuple[str, bool], ...]
    """``Timeline.is_clustering`` verdicts already read (a v6 replacecommit's plan, read once)."""
    _built: weakref.ref[Timeline] | None = field(default=None, init=False, repr=False, compare=False)
    """The last ``timeline()`` while someone still uses it (weak: the view never keeps it alive)."""

    @classmethod
    def of(cls, timeline: Timeline) -> CompactTimeline:
        instants = timeline.instants
        lines = "\n".join([
            f"{i.requested_time} {i.completion_time or '-'} {i.action} {i.state} {i.legacy:d}"
            for i in instants
        ])
        files = tuple(
            (i.requested_time, i.action, tuple(timeline._files.get((i.requested_time, i.action), {}).items()))
            for i in instants if i.is_pending or i.action in _FILES_KEPT
        )
        return cls(len(instants), lines, files, tuple(timeline._clustering.items()))

    def with_verdicts(self, timeline: Timeline) -> CompactTimeline:
        """This view, with the clustering verdicts ``timeline`` (built from it) read since."""
        if len(timeline._clustering) == len(self.clustering):
            return self
        return CompactTimeline(self.count, self.lines, self.files, tuple(timeline._clustering.items()))

    def timeline(self, storage: Storage, config: TableConfig) -> Timeline:
        """The ``Timeline`` again (only the instants of ``files`` have file names: module docstring);
        the same object as the last call's while that one is still in use (one build, one cache of
        plans read)."""
        built = self._built() if self._built is not None else None
        if built is not None and built.config is config:  # the same table as of the same poll
            return built
        instants: list[Instant] = []
        if self.count:
            for line in self.lines.split("\n"):
                requested, completion, action, state, legacy = line.split(" ")
                instants.append(Instant(requested, _ACTIONS[action], _ALL_STATES[state],
                                        None if completion == "-" else completion, legacy == "1"))
        files = {(t, a): dict(states) for t, a, states in self.files}
        timeline = Timeline(storage, config, instants, files)
        timeline._clustering.update(self.clustering)
        object.__setattr__(self, "_built", weakref.ref(timeline))
        return timeline

    def __len__(self) -> int:
        return self.count
