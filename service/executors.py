"""What the daemon can run: an executor per timeline action and a planner per service.

The loop (``service.loop``) looks every pending table-service instant up here. An action
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
loop first rolls the failed attempt back (``service.cli_services.rollback_failed_attempt``).

Planner contract: ``due(timeline, policy) -> str | None`` is called on every poll, must be
cheap (timeline only, no file reads beyond it) and says why planning should be tried now;
``plan(ctx) -> PlanOutcome`` then plans under the table lock and writes the requested
instant (``None`` when nothing is due after all).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from executors.clean import execute_clean
from hoodie.instant import WRITE_ACTIONS, Action, Instant
from hoodie.locks import TableLock
from hoodie.properties import TableConfig
from hoodie.storage import Storage
from hoodie.timeline import Timeline, datetime_to_instant_time
from hoodie.truetime import TimeSettings
from planners.compaction import CompactionSettings, needs_compaction
from service.config import SERVICE_ACTIONS, CompactionService, DaemonConfig, Policy, SparkConfig

__all__ = [
    "ExecutorSpec",
    "SparkEngine",
    "JobContext",
    "PlanContext",
    "PlanOutcome",
    "PlannerSpec",
    "Registry",
    "default_registry",
    "register_executor",
    "register_planner",
    "service_of",
    "spark_engine",
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


def service_of(timeline: Timeline, instant: Instant) -> str | None:
    """The service of a pending instant (a v6 clustering is a replacecommit), or ``None``."""
    if instant.action is Action.REPLACE_COMMIT:
        return "clustering" if timeline.is_clustering(instant) else None
    return next((s for s, a in SERVICE_ACTIONS.items() if a is instant.action), None)


# ---------------------------------------------------------------------------- clean


def _run_clean(ctx: JobContext) -> str:
    hb = ctx.settings.heartbeat
    result = execute_clean(
        ctx.storage, ctx.table, ctx.lock, ctx.instant.requested_time,
        time_settings=ctx.time_settings, heartbeat_interval_ms=hb.interval_ms,
        tolerable_misses=hb.tolerable_misses,
    )
    return result.summary()


def clean_due(timeline: Timeline, policy: Policy) -> str | None:
    """``hoodie.clean.max.commits``: enough completed writes since the last completed clean."""
    if timeline.pending((Action.CLEAN,)):
        return None
    last = timeline.latest_completed((Action.CLEAN,))
    since = last.requested_time if last is not None else ""
    writes = sum(
        1 for i in timeline.instants
        if i.is_completed and i.action in WRITE_ACTIONS and i.requested_time > since
    )
    need = policy.services.clean.trigger_commits
    return f"{writes} completed writes since the last clean (trigger {need})" if writes >= need else None


def _plan_clean(ctx: PlanContext) -> PlanOutcome:
    # imported here: service.cli_services is a command module and imports click
    from service.cli_services import schedule_clean

    instant, result = schedule_clean(
        ctx.storage, ctx.lock, ctx.policy.services.clean.settings(), time_settings=ctx.time_settings
    )
    return PlanOutcome(instant, result.summary())


# ---------------------------------------------------------------------------- compaction


class SparkEngine:
    """The daemon's one Spark session (``settings.spark``), shared by the jobs of every table.

    It starts with the first job that needs it (a daemon with nothing to compact never starts
    Spark) and ``close()`` stops it when the daemon stops. pyspark is imported only then:
    ``service`` modules must not import it directly, and a poll-only daemon should not pay for it.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._stack = ExitStack()
        self._session: Any = None

    def session(self, spark: SparkConfig) -> Any:
        with self._guard:  # two first jobs at once must not start two sessions
            if self._session is None:
                from executors.engine import spark_session

                self._session = self._stack.enter_context(spark_session(spark.master, spark.conf))
            return self._session

    @property
    def started(self) -> bool:
        return self._session is not None

    def close(self) -> None:
        with self._guard:
            self._stack.close()
            self._session = None


_ENGINE = SparkEngine()


def spark_engine() -> SparkEngine:
    """The process's engine; the loop closes it on shutdown."""
    return _ENGINE


def compaction_settings(service: CompactionService) -> CompactionSettings:
    """A table's compaction policy as the planner's settings (Hudi's option keys)."""
    return CompactionSettings.from_options({
        "hoodie.compact.inline.trigger.strategy": service.trigger,
        "hoodie.compact.inline.max.delta.commits": str(service.delta_commits),
        "hoodie.compact.inline.max.delta.seconds": str(service.delta_seconds),
        "hoodie.compaction.strategy": service.strategy,
        "hoodie.compaction.target.io": str(service.target_io_mb),
    })


def _run_compaction(ctx: JobContext) -> str:
    # imported here: service.compaction is a command module (click) and reaches pyspark
    from service.compaction import run_compaction

    hb = ctx.settings.heartbeat
    result = run_compaction(
        ctx.storage, ctx.lock, ctx.instant.requested_time, _ENGINE.session(ctx.settings.spark),
        time_settings=ctx.time_settings, heartbeat_interval_ms=hb.interval_ms,
        tolerable_misses=hb.tolerable_misses,
    )
    return result.summary()


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
    from planners.compaction import schedule_compaction

    instant, result = schedule_compaction(
        ctx.storage, ctx.lock, compaction_settings(ctx.policy.services.compaction),
        time_settings=ctx.time_settings,
    )
    return PlanOutcome(instant, result.summary())


def _register_builtins() -> None:
    register_executor(Action.CLEAN, _run_clean, resumes_inflight=True)
    register_planner("clean", clean_due, _plan_clean)
    # a failed compaction attempt is rolled back before it runs again (service.jobs)
    register_executor(Action.COMPACTION, _run_compaction)
    register_planner("compaction", compaction_due, _plan_compaction)


_register_builtins()
