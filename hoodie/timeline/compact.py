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

``scan_names`` is the names-only pass before either: the same names counted instead of built
(``TimelineCounts``: the requested times of each action, completed and pending apart, sorted; the
pending instants), for the planners' count-based triggers (``planners.*.*_due_counts``), and a
``CompactTimeline`` holding the names that make the timeline. It declines (``None``) what names
alone cannot settle: layout 1, completion times from mtimes, a pending replacecommit.

Why (bench/poll.py): 200 instants held as a ``Timeline`` with their parsed file names cost about
0.3 MB per table, their compact copy about 12 KB; building the timeline from 600 names takes
about 0.8 ms of CPU where parsing each name and ``Timeline.from_files`` took about 4 ms.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress, repeat
from operator import add, attrgetter, eq, itemgetter, methodcaller
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

__all__ = ["CompactTimeline", "NameScan", "TimelineCounts", "scan_names", "timeline_from_names"]

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
    _split_state_files(folder, state_files, done, pending)
    return done, pending


def _split_state_files(folder: str, names: Iterable[str], done: list[_Done], pending: list[_Pending]) -> None:
    """``T.action.state`` names of 17-digit times into ``pending``, split with string methods; any
    other name through ``_parse_slowly`` (into ``done`` or ``pending``)."""
    for name in names:
        head, _, rest = name.partition(".")
        act, _, state_s = rest.partition(".")
        found, state = _ACTIONS.get(act), _STATES.get(state_s)
        if found is not None and state is not None and len(head) == 17 and head.isdigit():
            pending.append((name, head, found, state))
        else:
            _parse_slowly(folder, name, done, pending)


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
class TimelineCounts:
    """The requested times of a timeline's instants by (resolved) action, completed and pending apart,
    each list sorted: all that the planners' count-based triggers read (``planners.*``
    ``*_due_counts``), without a ``Timeline``. ``of`` takes them from a ``Timeline``; ``scan_names``
    from the timeline folder's names, equal for the same folder (tests/hoodie/timeline check it)."""

    config: TableConfig
    completed: dict[Action, list[str]]
    pending: dict[Action, list[str]]

    @classmethod
    def of(cls, timeline: Timeline) -> TimelineCounts:
        completed: dict[Action, list[str]] = {}
        pending: dict[Action, list[str]] = {}
        for i in timeline.instants:
            (completed if i.state is State.COMPLETED else pending).setdefault(i.action, []).append(
                i.requested_time
            )
        for times in (*completed.values(), *pending.values()):
            times.sort()
        return cls(timeline.config, completed, pending)

    def has_pending(self, actions: Collection[Action]) -> bool:
        return any(a in self.pending for a in actions)

    def latest_completed(self, actions: Collection[Action]) -> str | None:
        """The greatest requested time of the completed ``actions`` (``Timeline.latest_completed``)."""
        latest = None
        for a in actions:
            times = self.completed.get(a)
            if times and (latest is None or times[-1] > latest):
                latest = times[-1]
        return latest

    def latest(self, action: Action) -> str | None:
        """The greatest requested time of an instant of ``action`` in any state."""
        return max((t[-1] for t in (self.completed.get(action), self.pending.get(action)) if t), default=None)

    def first(self, action: Action) -> str | None:
        """The smallest requested time of an instant of ``action`` in any state."""
        return min((t[0] for t in (self.completed.get(action), self.pending.get(action)) if t), default=None)

    def completed_count(self, actions: Collection[Action]) -> int:
        return sum(len(self.completed.get(a, ())) for a in actions)

    def completed_after(self, actions: Collection[Action], since: str) -> int:
        """Completed instants of ``actions`` requested after ``since``."""
        return sum(len(t) - bisect_right(t, since) for a in actions if (t := self.completed.get(a)))

    def count(self, action: Action, since: str = "") -> int:
        """Instants of ``action`` in any state requested after ``since`` (all of them by default)."""
        lists = (self.completed.get(action), self.pending.get(action))
        return sum(len(t) - bisect_right(t, since) for t in lists if t)


@dataclass(frozen=True, slots=True)
class NameScan:
    """A timeline folder's names counted, without a ``Timeline`` (``scan_names``)."""

    counts: TimelineCounts
    pending: list[Instant]
    """The pending instants, in timeline order."""
    view: CompactTimeline
    """The timeline to keep (``CompactTimeline.timeline`` builds the ``Timeline`` of these names again)."""


def scan_names(config: TableConfig, names: Iterable[str]) -> NameScan | None:
    """The names-only pass: what ``timeline_from_names`` would give, counted instead of built
    (no ``Instant`` but the pending ones), or ``None`` when a name needs more than itself: a table
    of timeline layout 1 or a completed file without a completion time (its mtime is read), a pending
    replacecommit (its plan tells a clustering from an insert-overwrite), or names
    ``timeline_from_names`` resolves by listing order (two pending actions, or two completed files,
    of one instant; Hudi never writes them). The caller then builds the ``Timeline``.

    ``_split``'s rules: the completed names of today's grammar checked and split by C-level maps
    over all of them at once (``_completed_names``; otherwise one by one, any odd name through
    ``_parse_slowly``), the state files of completed instants set apart by set differences (the
    plain commit's ``T.inflight`` too: it resolves nothing), and the few names left grouped as
    ``_group`` does."""
    if config.timeline_layout < 2:
        return None
    folder = config.timeline_path
    kept: list[str] = []
    pending_files: list[_Pending] = []
    listed = names if isinstance(names, set | frozenset) else set(names)
    split = _split_completed(folder, listed, kept, pending_files)
    if split is None or not _split_pending(folder, *split, kept, pending_files):
        return None
    completed = split[0]
    groups = _pending_groups(pending_files)
    if groups is None:
        return None
    pending = _resolve(completed, groups)
    if pending is None:
        return None
    pending_times: dict[Action, list[str]] = {}
    for inst in pending:
        pending_times.setdefault(inst.action, []).append(inst.requested_time)
    count = len(pending)
    for action in list(completed):
        times = completed[action]
        if not times:
            del completed[action]
        times.sort()
        count += len(times)
    for times in pending_times.values():
        times.sort()
    pending.sort(key=_ORDER)
    view = CompactTimeline(count, "", (), (), "\n".join(kept))
    return NameScan(TimelineCounts(config, completed, pending_times), pending, view)


#: Parts of ``T_C.action``: ``T_C.``, ``T`` and the action.
_HEAD = itemgetter(slice(0, 36))
_REQUESTED = itemgetter(slice(0, 17))
_ACTION_PART = itemgetter(slice(36, None))


def _completed_names(names: Collection[str]) -> tuple[list[str], dict[Action, list[str]]] | None:
    """The completed files among ``names`` when all of them are of today's grammar (``T_C.action``,
    17-digit times): their names and their requested times by file action (``None`` otherwise, or
    when one instant has two of them). Picked by their ``_`` and then checked and split with C-level
    maps over all of them at once, not step by step per name (bench/poll.py)."""
    done = [name for name in names if "_" in name]  # (no action or state name holds one)
    n = len(done)
    # every name's first 36 characters side by side: ``_`` at 17 and ``.`` at 35 of each, and no
    # other character but ASCII digits (the others go the long way: ``_split`` takes any digit)
    heads = "".join(map(_HEAD, done))
    if len(heads) != 36 * n or heads[17::36] != "_" * n or heads[35::36] != "." * n:
        return None
    digits = heads.replace("_", "").replace(".", "")
    if len(digits) != 34 * n or not digits.isascii() or not (digits.encode().isdigit() or not n):
        return None
    requested = list(map(_REQUESTED, done))
    actions = list(map(_ACTION_PART, done))
    found = set(actions)
    if not found <= _ACTIONS.keys():
        return None
    completed: dict[Action, list[str]] = {}
    for value in found:
        times = requested if len(found) == 1 else list(compress(requested, map(eq, actions, repeat(value))))
        if len(set(times)) != len(times):
            return None  # one instant, two completed files: the listing's order decides (full path)
        completed[_ACTIONS[value]] = times
    return done, completed


def _split_completed(
    folder: str, names: AbstractSet[str], kept: list[str], pending_files: list[_Pending]
) -> tuple[dict[Action, list[str]], set[str]] | None:
    """``scan_names``' first step: the completed instants' requested times by file action, and the
    names left once the state files of those instants are set apart (``None``: see ``scan_names``)."""
    fast = _completed_names(names)
    if fast is None:
        state_files = set(filter(_IS_STATE_FILE, names))
        completed = _scan_completed(folder, names - state_files, state_files, kept, pending_files)
        return None if completed is None else (completed, state_files)
    done, completed = fast
    state_files = set(names)
    state_files.difference_update(done)
    kept.extend(done)
    for action, times in completed.items():
        if action not in _FILES_KEPT:
            inflight = ".inflight" if action is Action.COMMIT else f".{action}.inflight"
            state_files.difference_update(map(add, times, repeat(f".{action}.requested")))
            state_files.difference_update(map(add, times, repeat(inflight)))
    completed.pop(Action.SCHEMA_COMMIT, None)  # schema commits live in .hoodie/.schema
    return completed, state_files


def _split_pending(
    folder: str, completed: dict[Action, list[str]], others: set[str], kept: list[str],
    pending_files: list[_Pending],
) -> bool:
    """``scan_names``' second step: the names left parsed into ``pending_files`` (any completed one
    among them into ``completed``); ``False`` when one needs more than its name."""
    odd_done: list[_Done] = []
    _split_state_files(folder, others, odd_done, pending_files)
    for name, requested, completion, action in odd_done:  # (names outside ``_completed_names``' grammar)
        if action is Action.SCHEMA_COMMIT:
            continue
        times = completed.setdefault(action, [])
        if completion is None or requested in times:
            return False  # a completion time from the file's mtime, or one instant with two files
        kept.append(name)
        times.append(requested)
    kept.extend(p[0] for p in pending_files)
    return True


def _scan_completed(
    folder: str, names: Iterable[str], state_files: set[str], kept: list[str], pending_files: list[_Pending]
) -> dict[Action, list[str]] | None:
    """The completed files among ``names`` by file action (``None``: one needs more than its name);
    the state files they make redundant are taken out of ``state_files``."""
    completed: dict[Action, list[str]] = {}
    dropped: list[str] = []
    odd: list[_Done] = []
    for name in names:
        head, _, rest = name.partition(".")
        action = _ACTIONS.get(rest)
        if action is None or len(head) != 35 or head[17] != "_" or not head[:17].isdigit() \
                or not head[18:].isdigit():
            _parse_slowly(folder, name, odd, pending_files)
            continue
        kept.append(name)
        requested = head[:17]
        times = completed.get(action)
        if times is None:
            completed[action] = [requested]
        else:
            times.append(requested)
        if action not in _FILES_KEPT:
            dropped.append(f"{requested}.{rest}.requested")
            dropped.append(f"{requested}.{rest}.inflight" if action is not Action.COMMIT
                           else f"{requested}.inflight")
    for name, requested, completion, action in odd:
        if completion is None and action is not Action.SCHEMA_COMMIT:
            return None  # its completion time is the file's mtime
        kept.append(name)
        completed.setdefault(action, []).append(requested)
    completed.pop(Action.SCHEMA_COMMIT, None)  # schema commits live in .hoodie/.schema
    for times in completed.values():
        if len(set(times)) != len(times):
            return None
    state_files.difference_update(dropped)
    return completed


#: (requested time, family) -> (pending action, states): ``_group``'s groups without file names.
_Groups = dict[tuple[str, Action], tuple[Action, set[State]]]


def _pending_groups(pending_files: list[_Pending]) -> _Groups | None:
    """The state files by (requested time, family) as ``_group`` makes them: (pending action, states)."""
    groups: _Groups = {}
    for _name, requested, action, state in pending_files:
        if action is Action.SCHEMA_COMMIT:
            continue
        key = (requested, COMPLETED_ACTION.get(action, action))
        group = groups.get(key)
        if group is None:
            groups[key] = (action, {state})
        elif group[0] is not action:
            return None
        else:
            group[1].add(state)
    return groups


def _resolve(completed: dict[Action, list[str]], groups: _Groups) -> list[Instant] | None:
    """The pending instants of ``groups``; a group of a completed instant gives that instant its
    table-service action in ``completed`` (a compaction completes as a ``commit``)."""
    pending: list[Instant] = []
    done_times: dict[Action, set[str]] = {}
    for (requested, family), (action, states) in groups.items():
        if family in completed:
            done = done_times.get(family)
            if done is None:
                done = done_times[family] = set(completed[family])
            if requested in done:
                if COMPLETED_ACTION.get(action) is family:
                    completed[family].remove(requested)
                    completed.setdefault(action, []).append(requested)
                continue
        if action is Action.REPLACE_COMMIT:
            return None  # its plan tells a clustering from an insert-overwrite
        state = State.INFLIGHT if State.INFLIGHT in states else State.REQUESTED
        pending.append(Instant(requested, action, state))
    return pending


def _no_mtimes(names: list[str]) -> dict[str, int]:
    return {}


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
    names: str = ""
    """Instead of ``lines`` and ``files`` (``scan_names``): the timeline file names a
    ``timeline_from_names`` of the whole folder reads, one per line (layout 2 names carry their
    completion times, so they are the timeline: about 10 KB for 200 instants)."""
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
        return CompactTimeline(self.count, self.lines, self.files, tuple(timeline._clustering.items()),
                               self.names)

    def timeline(self, storage: Storage, config: TableConfig) -> Timeline:
        """The ``Timeline`` again (only the instants of ``files`` have file names: module docstring);
        the same object as the last call's while that one is still in use (one build, one cache of
        plans read)."""
        built = self._built() if self._built is not None else None
        if built is not None and built.config is config:  # the same table as of the same poll
            return built
        if self.names:
            timeline = timeline_from_names(storage, config, self.names.split("\n"), _no_mtimes)
            timeline._clustering.update(self.clustering)
            object.__setattr__(self, "_built", weakref.ref(timeline))
            return timeline
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
