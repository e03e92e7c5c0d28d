"""What the daemon can run: an executor per timeline action and a planner per service.

The loop (``service.daemon.loop``) looks every pending table-service instant up here. An action
with no executor is reported as *waiting* and left untouched; a service with no planner is
never planned. Services register by calling ``register_executor`` / ``register_planner``
from ``_register_builtins`` below (the ``executors`` and ``planners`` packages cannot import
``service``, so the small adapters from ``JobContext`` to their functions live here).

Executor contract: ``run(ctx) -> str`` runs the pending instant ``ctx.instant`` to
completion in a worker thread and returns a one-line summary. It takes ``ctx.lock`` (the
table lock, not yet acquired) itself around each timeline write, starts the instant's Hudi
heartbeat before its first change and refuses (``InstantStateError`` mentioning
"live heartbeat") an instant whose heartbeat is alive. It checks ``ctx.cancel`` at safe
points and, when it is set, stops and leaves the instant recoverable (the daemon is
stopping). Errors: ``HoodieFormatError`` when the plan is unusable (nothing changed: the
table is quarantined), ``UnsupportedTableError`` when the executor cannot do this instant
(nothing changed: the instant waits), retryable ``HoodieServiceError`` subclasses or other
exceptions for failures worth another attempt. ``resumes_inflight`` says whether an
inflight attempt whose heartbeat expired may simply be run again (clean); otherwise the
loop first rolls the failed attempt back (``service.cli.services.rollback_failed_attempt``).

Planner contract: ``due(timeline, policy) -> str | None`` is called on every poll, must be
cheap (timeline only, no file reads beyond it) and says why planning should be tried now;
``plan(ctx) -> PlanOutcome`` then plans under the table lock and writes the requested
instant (``None`` when nothing is due after all).
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hoodied.executors.clean import execute_clean
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline, datetime_to_instant_time
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, Instant
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.compaction import CompactionSettings, needs_compaction
from hoodied.service.config import SERVICE_ACTIONS, CompactionService, DaemonConfig, Policy, service_of
from hoodied.service.spark_jobs import SPARK_SERVICES, run_spark_service, spark_engine

__all__ = [
    "ExecutorSpec",
    "JobContext",
    "PlanContext",
    "PlanOutcome",
    "PlannerSpec",
    "Registry",
    "default_registry",
    "register_executor",
    "register_planner",
]


@dataclass(frozen=True, slots=True)
class JobContext:
    """Everything an executor gets for one pending instant."""

    storage: Storage
    table: TableConfig
    instant: Instant
    lock: TableLock
    """The table lock, not acquired; the executor takes it around its timeline writes."""
    policy: Policy
    settings: DaemonConfig
    """The daemon's settings (``settings.spark`` for the Spark services, ``settings.heartbeat``)."""
    time_settings: TimeSettings
    cancel: threading.Event
    """Set when the daemon stops: stop at the next safe point, leave the instant recoverable."""


@dataclass(frozen=True, slots=True)
class PlanContext:
    """Everything a planner gets for one table."""

    storage: Storage
    table: TableConfig
    timeline: Timeline
    """The timeline as of the poll that found planning due (reload it under the lock)."""
    lock: TableLock
    policy: Policy
    settings: DaemonConfig
    time_settings: TimeSettings


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    instant: Instant | None
    """The new requested instant, or ``None`` when nothing was due."""
    summary: str


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    action: Action
    service: str
    run: Callable[[JobContext], str]
    resumes_inflight: bool = False
    """Re-running an inflight attempt whose heartbeat expired is safe (no rollback first)."""


@dataclass(frozen=True, slots=True)
class PlannerSpec:
    service: str
    due: Callable[[Timeline, Policy], str | None]
    plan: Callable[[PlanContext], PlanOutcome]


@dataclass(slots=True)
class Registry:
    executors: dict[Action, ExecutorSpec] = field(default_factory=dict)
    planners: dict[str, PlannerSpec] = field(default_factory=dict)

    def executor_for(self, action: Action) -> ExecutorSpec | None:
        return self.executors.get(action)


_DEFAULT = Registry()


def register_executor(
    action: Action,
    run: Callable[[JobContext], str],
    *,
    resumes_inflight: bool = False,
    registry: Registry | None = None,
) -> None:
    """Make ``run`` the executor of pending ``action`` instants (replacing any earlier one)."""
    service = next((s for s, a in SERVICE_ACTIONS.items() if a is action), None)
    if service is None:
        raise ValueError(f"{action.value} is not a table-service action the daemon executes")
    (registry or _DEFAULT).executors[action] = ExecutorSpec(action, service, run, resumes_inflight)


def register_planner(
    service: str,
    due: Callable[[Timeline, Policy], str | None],
    plan: Callable[[PlanContext], PlanOutcome],
    *,
    registry: Registry | None = None,
) -> None:
    """Make ``plan`` the planner of ``service``, tried whenever ``due`` gives a reason."""
    if service not in SERVICE_ACTIONS:
        raise ValueError(f"{service!r} is not a service ({', '.join(SERVICE_ACTIONS)})")
    (registry or _DEFAULT).planners[service] = PlannerSpec(service, due, plan)


def default_registry() -> Registry:
    return _DEFAULT


# ---------------------------------------------------------------------------- clean


def _run_clean(ctx: JobContext) -> str:
    hb = ctx.settings.heartbeat
    result = execute_clean(
        ctx.storage, ctx.table, ctx.lock, ctx.instant.requested_time,
        time_settings=ctx.time_settings, heartbeat_interval_ms=hb.interval_ms,
        tolerable_misses=hb.tolerable_misses,
    )
    return result.summary()


def _completed_writes_after(timeline: Timeline, last: Instant | None) -> int:
    """Completed instants of Hudi's commits timeline requested after ``last`` (all without one)."""
    since = last.requested_time if last is not None else ""
    return sum(
        1 for i in timeline.instants
        if i.is_completed and i.action in WRITE_ACTIONS and i.requested_time > since
    )


def clean_due(timeline: Timeline, policy: Policy) -> str | None:
    """``hoodie.clean.max.commits``: enough completed writes since the last completed clean."""
    if timeline.pending((Action.CLEAN,)):
        return None
    last = timeline.latest_completed((Action.CLEAN,))
    writes = _completed_writes_after(timeline, last)
    need = policy.services.clean.trigger_commits
    return f"{writes} completed writes since the last clean (trigger {need})" if writes >= need else None


def _plan_clean(ctx: PlanContext) -> PlanOutcome:
    # imported here: service.cli_services is a command module and imports click
    from hoodied.service.cli.services import schedule_clean

    instant, result = schedule_clean(
        ctx.storage, ctx.lock, ctx.policy.services.clean.settings(), time_settings=ctx.time_settings
    )
    return PlanOutcome(instant, result.summary())


# ---------------------------------------------------------------------------- Spark services


def _spark_executor(service: str) -> Callable[[JobContext], str]:
    """The daemon's executor of a Spark service: ``service.spark_jobs.run_spark_service``."""

    def run(ctx: JobContext) -> str:
        hb = ctx.settings.heartbeat
        spark = ctx.settings.spark
        session = spark_engine().session(spark.master, spark.conf)
        result = run_spark_service(
            ctx.storage, ctx.lock, ctx.instant.requested_time, session,
            service=service, time_settings=ctx.time_settings, heartbeat_interval_ms=hb.interval_ms,
            tolerable_misses=hb.tolerable_misses,
        )
        return result.summary()

    return run


# ---------------------------------------------------------------------------- compaction


def compaction_settings(service: CompactionService) -> CompactionSettings:
    """A table's compaction policy as the planner's settings (Hudi's option keys)."""
    return CompactionSettings.from_options({
        "hoodie.compact.inline.trigger.strategy": service.trigger,
        "hoodie.compact.inline.max.delta.commits": str(service.delta_commits),
        "hoodie.compact.inline.max.delta.seconds": str(service.delta_seconds),
        "hoodie.compaction.strategy": service.strategy,
        "hoodie.compaction.target.io": str(service.target_io_mb),
    })


def compaction_due(timeline: Timeline, policy: Policy) -> str | None:
    """The table policy's trigger fires (merge-on-read only, no compaction already pending).

    Tables with a metadata table are not excluded here: planning them reports the service
    as unsupported (``UnsupportedTableError``) while the table's other services go on.
    """
    config = timeline.config
    if not config.is_mor or timeline.pending((Action.COMPACTION,)):
        return None
    settings = compaction_settings(policy.services.compaction)
    now = datetime_to_instant_time(datetime.now(UTC), config.tzinfo)
    due, why = needs_compaction(timeline, config, settings, now)
    return why if due else None


def _plan_compaction(ctx: PlanContext) -> PlanOutcome:
    from hoodied.planners.compaction import schedule_compaction

    instant, result = schedule_compaction(
        ctx.storage, ctx.lock, compaction_settings(ctx.policy.services.compaction),
        time_settings=ctx.time_settings,
    )
    return PlanOutcome(instant, result.summary())


# ---------------------------------------------------------------------------- log compaction


def log_compaction_due(timeline: Timeline, policy: Policy) -> str | None:
    """Merge-on-read, no log compaction or compaction pending, and the planner's cheap trigger fires."""
    from hoodied.planners.log_compaction import LogCompactionSettings, needs_log_compaction

    config = timeline.config
    if not config.is_mor or timeline.pending((Action.LOG_COMPACTION, Action.COMPACTION)):
        return None
    settings = LogCompactionSettings.from_options(policy.services.log_compaction.options())
    due, why = needs_log_compaction(timeline, config, settings)
    return why if due else None


def _plan_log_compaction(ctx: PlanContext) -> PlanOutcome:
    from hoodied.planners.log_compaction import LogCompactionSettings, schedule_log_compaction

    settings = LogCompactionSettings.from_options(ctx.policy.services.log_compaction.options())
    instant, result = schedule_log_compaction(
        ctx.storage, ctx.lock, settings, time_settings=ctx.time_settings
    )
    return PlanOutcome(instant, result.summary())


# ---------------------------------------------------------------------------- clustering


def _last_completed_clustering(timeline: Timeline) -> Instant | None:
    # timeline layout 2 (table version 8+) names every clustering `clustering`; before it, a
    # clustering is a replacecommit whose plan says CLUSTER (read once, cached by the timeline)
    actions = (Action.CLUSTERING,) if timeline.config.timeline_layout >= 2 else (Action.REPLACE_COMMIT,)
    for inst in reversed(timeline.instants):
        if inst.is_completed and inst.action in actions and timeline.is_clustering(inst):
            return inst
    return None


def clustering_due(timeline: Timeline, policy: Policy) -> str | None:
    """No clustering pending and ``hoodie.clustering.async.max.commits`` completed commits since
    the last completed clustering (Hudi's ``ClusteringPlanActionExecutor`` check).

    On table version 6 the plans of the replacecommits after the last clustering are read to
    tell a clustering from an insert-overwrite (once per timeline: an unchanged timeline is
    reused between polls); later versions need the timeline only.
    """
    pending = timeline.pending((Action.CLUSTERING, Action.REPLACE_COMMIT))
    if any(service_of(timeline, inst) == "clustering" for inst in pending):
        return None
    commits = _completed_writes_after(timeline, _last_completed_clustering(timeline))
    need = policy.services.clustering.trigger_commits
    if commits < need:
        return None
    return f"{commits} completed commits since the last clustering (trigger {need})"


def _plan_clustering(ctx: PlanContext) -> PlanOutcome:
    from hoodied.planners.clustering import schedule_clustering

    instant, result = schedule_clustering(
        ctx.storage, ctx.lock, ctx.policy.services.clustering.settings(), time_settings=ctx.time_settings
    )
    return PlanOutcome(instant, result.summary())


def _register_builtins() -> None:
    register_executor(Action.CLEAN, _run_clean, resumes_inflight=True)
    register_planner("clean", clean_due, _plan_clean)
    # Spark services: a failed attempt is rolled back before it runs again (service.jobs). A service
    # whose executor module is not installed leaves its instants waiting, untouched, and is not planned.
    planners = {
        "compaction": (compaction_due, _plan_compaction),
        "log_compaction": (log_compaction_due, _plan_log_compaction),
        "clustering": (clustering_due, _plan_clustering),
    }
    for name, spec in SPARK_SERVICES.items():
        if spec.available():
            register_executor(spec.action, _spark_executor(name))
            if importlib.util.find_spec(f"hoodied.planners.{name}") is not None:
                register_planner(name, *planners[name])


_register_builtins()
