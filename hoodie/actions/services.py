"""The table services: one owner for which timeline action each is and how it runs.

Hudi names a pending table service by its requested action (``HoodieTimeline.COMPACTION_ACTION``,
``LOG_COMPACTION_ACTION``, ``CLUSTERING_ACTION``, ``CLEAN_ACTION``, ``INDEXING_ACTION``), with one
exception kept from table version 6: a clustering there is requested as a ``replacecommit``
whose plan is a clustering plan (``ClusteringUtils.isClusteringInstant``), which ``service_of``
resolves through the timeline. Every other module asks this one rather than listing actions,
the timeline included (``Timeline.pending_table_services``): this module needs only the
``Action`` vocabulary at run time, so the timeline can import it without a cycle.

Archival is the one service without an action: Hudi's archiver writes no instant (it moves
completed ones into the timeline's history), so ``TableService.ARCHIVAL`` has no ``action`` and
is never pending; ``label`` names every service's jobs alike in logs and metrics.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from hoodied.hoodie.timeline.instant import COMPLETED_ACTION, Action, Instant

if TYPE_CHECKING:  # the timeline imports this module; a type is all this module needs of it
    from hoodied.hoodie.timeline.active import Timeline

__all__ = ["TableService", "is_table_service", "service_of"]


class TableService(StrEnum):
    """A table service hoodied plans and executes; the value is its name in settings and metrics."""

    CLEAN = "clean"
    COMPACTION = "compaction"
    LOG_COMPACTION = "log_compaction"
    CLUSTERING = "clustering"
    INDEXING = "indexing"
    ARCHIVAL = "archival"
    """Moves old completed instants into the timeline's history; writes no instant of its own."""

    @property
    def action(self) -> Action:
        """The action its instants are requested under (table versions 8 and 9; v6 clustering aside).

        ``ValueError`` for archival, which has none (``writes_instants``)."""
        action = _ACTIONS.get(self)
        if action is None:
            raise ValueError(f"{self.value} writes no instant: it has no timeline action")
        return action

    @property
    def writes_instants(self) -> bool:
        """Its work is an instant of its own on the timeline (all but archival)."""
        return self in _ACTIONS

    @property
    def label(self) -> str:
        """Its jobs' name in logs and in the metrics' ``action`` label: its action (``logcompaction``...),
        or ``archival``."""
        action = _ACTIONS.get(self)
        return action.value if action is not None else self.value

    @property
    def completed_action(self) -> Action:
        """The action its instants complete under (a compaction completes as a ``commit``...)."""
        return COMPLETED_ACTION.get(self.action, self.action)

    @property
    def rewrites_data(self) -> bool:
        """Writes data files: a failed attempt is rolled back before it is retried."""
        return self in (TableService.COMPACTION, TableService.LOG_COMPACTION, TableService.CLUSTERING)

    @property
    def runs_on_spark(self) -> bool:
        """Executed as a Spark job (clean and archival run in the driving process alone)."""
        return self not in (TableService.CLEAN, TableService.ARCHIVAL)

    @classmethod
    def of_action(cls, action: Action) -> TableService | None:
        """The service requested under ``action`` (a v6 ``replacecommit`` needs ``service_of``)."""
        return _BY_ACTION.get(action)


_ACTIONS: dict[TableService, Action] = {
    TableService.CLEAN: Action.CLEAN,
    TableService.COMPACTION: Action.COMPACTION,
    TableService.LOG_COMPACTION: Action.LOG_COMPACTION,
    TableService.CLUSTERING: Action.CLUSTERING,
    TableService.INDEXING: Action.INDEXING,
}
_BY_ACTION: dict[Action, TableService] = {a: s for s, a in _ACTIONS.items()}


def service_of(timeline: Timeline, instant: Instant) -> TableService | None:
    """The service of a pending instant (a v6 clustering is a ``replacecommit``), or ``None``."""
    if instant.action is Action.REPLACE_COMMIT:
        return TableService.CLUSTERING if timeline.is_clustering(instant) else None
    return TableService.of_action(instant.action)


def is_table_service(timeline: Timeline, instant: Instant) -> bool:
    """Whether ``instant`` is one of the table services (as opposed to a data write)."""
    return service_of(timeline, instant) is not None
