"""The daemon: the loop, its jobs, and what it serves over HTTP.

``loop.Daemon`` runs the anyio task group; ``poll`` reads a table's timeline, ``table_state`` keeps
each table's books, ``jobs`` runs one job in a worker thread, ``registry`` says what can be
executed and planned (``build_registry``), ``leases`` keeps replicas apart, ``status``/``http``/
``metrics`` are the views (typed against ``status.DaemonView``, not the loop).
"""

from hoodied.service.daemon.jobs import JobKind, Outcome
from hoodied.service.daemon.loop import Daemon
from hoodied.service.daemon.registry import (
    JobContext,
    PlanContext,
    PlanOutcome,
    Registry,
    build_registry,
    register_executor,
    register_planner,
)
from hoodied.service.daemon.status import DaemonView

__all__ = [
    "Daemon",
    "DaemonView",
    "JobContext",
    "JobKind",
    "Outcome",
    "PlanContext",
    "PlanOutcome",
    "Registry",
    "build_registry",
    "register_executor",
    "register_planner",
]
