"""What the daemon can run: an executor per timeline action and a planner per service.

The loop (``service.daemon.loop``) looks every pending table-service instant up here. An action
with no executor is reported as *waiting* and left untouched; a service with no planner is
never planned. ``build_registry()`` returns a fresh ``Registry`` with the built-in services; a
test or a benchmark builds its own with ``register_executor`` / ``register_planner``. The
``executors`` and ``planners`` packages cannot import ``service``, so the small adapters from
``JobContext`` / ``PlanContext`` to their functions live here; the triggers themselves live
beside their planners (``planners.clean.clean_due``, ...) and take the planner's settings.

Executor contract: ``run(ctx) -> str | AlreadyCompleted`` runs the pending instant
``ctx.instant`` to completion in a worker thread and returns a one-line summary, or
``AlreadyCompleted`` (with its line) when it found the instant completed under the table lock
(another executor finished it since the daemon looked: nothing was done, the job is not a
success). It takes ``ctx.lock`` (the table lock, not yet acquired) itself around each
timeline write, starts the instant's Hudi heartbeat before its first change and refuses
(``HeartbeatAliveError``) an instant whose heartbeat is alive. It checks ``ctx.cancel`` at safe
points and, when it is set, stops and leaves the instant recoverable (the daemon is
stopping). Errors: ``HoodieFormatError`` when the plan is unusable (nothing changed: the
table is quarantined), ``UnsupportedTableError`` when the executor cannot do this instant
(nothing changed: the instant waits), retryable ``HoodieServiceError`` subclasses or other
exceptions for failures worth another attempt. ``resumes_inflight`` says whether an
inflight attempt whose heartbeat expired may simply be run again (clean); otherwise the
executor rolls the failed attempt back first: the Spark services' executor goes through
``service.spark_jobs.run_spark_service``, which asks ``service.operations.recover_failed_attempt``.
The Spark session comes from ``ctx.engine``, the daemon's own ``SparkEngine``.

A clean runs in the daemon's process, but an MDT compaction its MDT delta commit triggers runs its
operations (one per MDT file group) on the engine's session when one is running or being started
(``SparkEngine.running_session``: the start ahead of ``spark.start_at_startup`` is waited for), as
the Spark services' own MDT compactions do; with no session, or the engine down, in the process
(``hoodie.tasks.run_in_process``). A clean never starts Spark.

Planner contract: ``due(timeline, policy) -> str | None`` is called on every poll, must be
cheap (timeline only, no file reads beyond it) and says why planning should be tried now;
``plan(ctx) -> PlanOutcome`` then plans under the table lock and writes the requested
instant (``None`` when nothing is due after all).

Archival writes no instant (``TableService.ARCHIVAL``): its planner is the whole service. Its
``due`` is Hudi's trigger on the poll's timeline (``planners.archival.archival_due``); its
``plan`` runs ``executors.archival.execute_archival`` at once, the data table and then its
metadata table in one hold of the table lock, exactly as ``hoodied archive`` with the same keys
does, and returns ``done`` with an ``ArchivalReport`` (what moved, where it stopped and why).
The table lock alone keeps two replicas apart: the second, once it has the lock, reads the
timeline the first left and finds nothing more to archive.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from hoodied.executors.archival import ArchivalResult, MdtArchival, execute_archival
from hoodied.executors.clean import CleanResult, execute_clean
from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.errors import EngineUnavailableError
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.tasks import OperationRunner, run_in_process
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.compact import TimelineCounts
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, Instant
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.archival import (
    ArchivalPlan,
    StopReason,
    archival_due,
    archival_planner,
    mdt_archival_planner,
    mdt_archival_target,
)
from hoodied.planners.clean import clean_due, clean_due_counts, schedule_clean
from hoodied.planners.clustering import clustering_due, clustering_due_counts, schedule_clustering
from hoodied.planners.compaction import compaction_due, compaction_due_counts, schedule_compaction
from hoodied.planners.log_compaction import (
    log_compaction_due,
    log_compaction_due_counts,
    schedule_log_compaction,
)
from hoodied.service.config import CompactionService, DaemonConfig, LogCompactionService, Policy
from hoodied.service.failed_writes import rollback_failed_writes
from hoodied.service.spark_jobs import (
    ENGINE_MODULE,
    SPARK_SERVICES,
    ClusteringDropped,
    ServiceResult,
    SparkEngine,
    check_spark_instant,
    run_spark_service,
)

log = logging.getLogger(__name__)

__all__ = [
    "FAILED_WRITES_ROLLED_BACK",
    "AlreadyCompleted",
    "Dropped",
    "ArchivalReport",
    "Executed",
    "ExecutorSpec",
    "JobContext",
    "PlanContext",
    "PlanOutcome",
    "PlannerSpec",
    "Registry",
    "build_registry",
    "clean_mdt_runner",
    "register_executor",
    "register_planner",
]

#: ``counts`` key: failed data writes a clean job rolled back first (``service.failed_writes``).
FAILED_WRITES_ROLLED_BACK = "failed_writes_rolled_back"


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
    engine: SparkEngine
    """The daemon's Spark engine (its session starts with the first Spark job)."""
    counts: dict[str, int] = field(default_factory=dict)
    """What the job did besides its instant, for the metrics (``FAILED_WRITES_ROLLED_BACK``)."""


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
    counts: dict[str, int] = field(default_factory=dict)
    """What the planning did besides its plan, for the metrics (``FAILED_WRITES_ROLLED_BACK``)."""


@dataclass(frozen=True, slots=True)
class ArchivalReport:
    """What one archival did on one timeline, for ``/status`` and ``hoodied_instants_archived_total``."""

    archived: int
    """Instants moved from the active timeline into the history."""
    recovered: int
    """Instants an interrupted archival had already moved, whose active files it deleted now."""
    stop: StopReason
    """Why archival stopped where it did."""
    stop_instant: str | None
    """The instant it stopped at (kept, with everything after it), if the boundary has one."""
    detail: str
    metadata_table: ArchivalReport | None = None
    """The metadata table's archival, run right after (``None``: none ran)."""

    @property
    def total(self) -> int:
        """Instants moved off the table's active timelines, the metadata table's included."""
        return self.archived + (self.metadata_table.total if self.metadata_table is not None else 0)

    @classmethod
    def of(cls, result: ArchivalResult[ArchivalPlan]) -> ArchivalReport:
        plan = result.plan
        mdt = cls.of(result.mdt) if result.mdt is not None else None
        return cls(len(plan.instants), len(result.recovered), plan.stop.reason, plan.stop.instant,
                   plan.stop.detail, mdt)


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    instant: Instant | None
    """The new requested instant, or ``None`` when nothing was due."""
    summary: str
    done: bool = False
    """The planner did the service's work itself, writing no instant (archival moved instants)."""
    archival: ArchivalReport | None = None
    """What an archival did (archival only; also when it found nothing to move)."""


@dataclass(frozen=True, slots=True)
class AlreadyCompleted:
    """An executor's answer when its instant was already completed (``was_completed`` of the
    executors' results): it did nothing, and the job ends ``already_done``, not ``success``."""

    summary: str


@dataclass(frozen=True, slots=True)
class Dropped:
    """An executor's answer when its clustering lost a write conflict and was rolled back and
    removed (``service.spark_jobs.ClusteringDropped``): the job ends ``dropped``, once."""

    summary: str


#: What an executor returns: its summary line, ``AlreadyCompleted`` or ``Dropped``.
Executed = str | AlreadyCompleted | Dropped


def _executed(result: CleanResult | ServiceResult) -> Executed:
    if isinstance(result, ClusteringDropped):
        return Dropped(result.summary())
    return AlreadyCompleted(result.summary()) if result.was_completed else result.summary()


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    action: Action
    service: TableService
    run: Callable[[JobContext], Executed]
    resumes_inflight: bool = False
    """Re-running an inflight attempt whose heartbeat expired is safe (no rollback first)."""


def _reads_no_clock(policy: Policy) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class PlannerSpec:
    service: TableService
    due: Callable[[Timeline, Policy], str | None]
    plan: Callable[[PlanContext], PlanOutcome]
    reads_clock: Callable[[Policy], bool] = _reads_no_clock
    """Whether ``due`` can change with the clock alone under ``policy`` (a time-based trigger): only
    then is it asked again while the timeline stays the same (``service.daemon.poll``)."""
    due_counts: Callable[[TimelineCounts, Policy], str | None] | None = None
    """``due`` on the timeline's counts, the same answer without a ``Timeline``: the names-only poll
    (``hoodie.timeline.compact.scan_names``) of a layout-2 table with no pending replacecommit.
    A planner without it has its tables' timelines built on every change (``due``)."""


@dataclass(slots=True)
class Registry:
    executors: dict[Action, ExecutorSpec] = field(default_factory=dict)
    planners: dict[TableService, PlannerSpec] = field(default_factory=dict)

    def executor_for(self, action: Action) -> ExecutorSpec | None:
        return self.executors.get(action)


def register_executor(
    action: Action,
    run: Callable[[JobContext], Executed],
    *,
    registry: Registry,
    resumes_inflight: bool = False,
) -> None:
    """Make ``run`` the executor of pending ``action`` instants in ``registry`` (replacing an earlier one)."""
    service = TableService.of_action(action)
    if service is None:
        raise ValueError(f"{action.value} is not a table-service action the daemon executes")
    registry.executors[action] = ExecutorSpec(action, service, run, resumes_inflight)


def register_planner(
    service: str,
    due: Callable[[Timeline, Policy], str | None],
    plan: Callable[[PlanContext], PlanOutcome],
    *,
    registry: Registry,
    reads_clock: Callable[[Policy], bool] = lambda policy: True,
    due_counts: Callable[[TimelineCounts, Policy], str | None] | None = None,
) -> None:
    """Make ``plan`` the planner of ``service`` in ``registry``, tried whenever ``due`` gives a reason;
    ``reads_clock`` says under which policies ``due`` moves with the clock alone (by default always,
    the safe answer for a trigger nobody described); ``due_counts``, when given, is ``due`` on the
    timeline's counts (``PlannerSpec.due_counts``)."""
    try:
        known = TableService(service)
    except ValueError:
        raise ValueError(f"{service!r} is not a service ({', '.join(TableService)})") from None
    registry.planners[known] = PlannerSpec(known, due, plan, reads_clock, due_counts)


def build_registry() -> Registry:
    """A fresh registry of the built-in services.

    Clean and archival run in the daemon's process; the Spark services run through
    ``run_spark_service`` and are registered only when their executor module is installed (otherwise
    their instants wait, untouched, and they are never planned). Indexing is executed, never planned.
    """
    registry = Registry()
    register_executor(Action.CLEAN, _run_clean, resumes_inflight=True, registry=registry)
    # every trigger counts instants on the timeline, except compaction's time-based strategies
    register_planner(TableService.CLEAN, _clean_due, _plan_clean, registry=registry,
                     reads_clock=_reads_no_clock, due_counts=_clean_due_counts)
    planners: dict[TableService, tuple[Callable[[Timeline, Policy], str | None],
                                       Callable[[PlanContext], PlanOutcome],
                                       Callable[[TimelineCounts, Policy], str | None]]] = {
        TableService.COMPACTION: (_compaction_due, _plan_compaction, _compaction_due_counts),
        TableService.LOG_COMPACTION: (_log_compaction_due, _plan_log_compaction, _log_compaction_due_counts),
        TableService.CLUSTERING: (_clustering_due, _plan_clustering, _clustering_due_counts),
    }
    for service, spec in SPARK_SERVICES.items():
        if spec.available():
            register_executor(spec.action, _spark_executor(service), registry=registry)
            if service in planners:
                due, plan, due_counts = planners[service]
                register_planner(service, due, plan, registry=registry,
                                 reads_clock=_compaction_reads_clock if service is TableService.COMPACTION
                                 else _reads_no_clock, due_counts=due_counts)
    # last: a table's other due plans go first, as Hudi archives after a commit's clean (postCommit)
    register_planner(TableService.ARCHIVAL, _archival_due, _archive, registry=registry,
                     reads_clock=_reads_no_clock, due_counts=_archival_due_counts)
    return registry


# ---------------------------------------------------------------------------- clean


def _failed_writes_options(ctx: JobContext | PlanContext) -> dict[str, str]:
    hb = ctx.settings.heartbeat
    return ctx.policy.services.clean.failed_writes_options(hb.interval_ms, hb.tolerable_misses)


def _run_clean(ctx: JobContext) -> Executed:
    hb = ctx.settings.heartbeat
    # as Hudi's clean: failed data writes first (tables whose writers use LAZY only)
    rolled = rollback_failed_writes(ctx.storage, ctx.lock, _failed_writes_options(ctx),
                                    time_settings=ctx.time_settings)
    ctx.counts[FAILED_WRITES_ROLLED_BACK] = len(rolled)
    session, mdt_runner = clean_mdt_runner(ctx.engine)
    try:
        result = execute_clean(
            ctx.storage, ctx.table, ctx.lock, ctx.instant.requested_time,
            time_settings=ctx.time_settings, heartbeat_interval_ms=hb.interval_ms,
            tolerable_misses=hb.tolerable_misses, mdt_runner=mdt_runner,
        )
    except EngineUnavailableError as exc:
        # the session was lost during the MDT compaction (``run_operations`` words it so): the engine
        # discards it; the clean stays inflight and its retry finishes that compaction (MDT upkeep
        # finishes pending ones first), in the process while the engine is down
        if session is not None:
            ctx.engine.lost(session, exc)
        raise
    return _executed(result)


def clean_mdt_runner(engine: SparkEngine) -> tuple[Any, OperationRunner]:
    """Who runs the operations of an MDT compaction a clean triggers: (the engine's running session,
    ``SparkOperations`` on it) when there is one, else (``None``, ``run_in_process``). Never starts
    a session (the module docstring)."""
    session = engine.running_session()
    if session is None:
        why = f"Spark engine {engine.state}" + (f" ({engine.problem})" if engine.problem else "")
        log.debug("%s: a clean's MDT compaction runs in this process", why)
        return None, run_in_process
    # by name, as ``service.spark_jobs`` reaches the executors: the daemon's modules never import
    # pyspark; with a session up the module is imported already
    runner: OperationRunner = importlib.import_module(ENGINE_MODULE).SparkOperations(session)
    return session, runner


def _clean_due(timeline: Timeline, policy: Policy) -> str | None:
    return clean_due(timeline, policy.services.clean.trigger_commits)


def _clean_due_counts(counts: TimelineCounts, policy: Policy) -> str | None:
    return clean_due_counts(counts, policy.services.clean.trigger_commits)


def _plan_clean(ctx: PlanContext) -> PlanOutcome:
    rolled = rollback_failed_writes(ctx.storage, ctx.lock, _failed_writes_options(ctx),
                                    time_settings=ctx.time_settings)
    ctx.counts[FAILED_WRITES_ROLLED_BACK] = len(rolled)
    instant, result = schedule_clean(
        ctx.storage, ctx.lock, ctx.policy.services.clean.settings(), time_settings=ctx.time_settings
    )
    return PlanOutcome(instant, result.summary())


# ---------------------------------------------------------------------------- Spark services


def _spark_executor(service: TableService) -> Callable[[JobContext], Executed]:
    """The daemon's executor of a Spark service: ``service.spark_jobs.run_spark_service``."""

    def run(ctx: JobContext) -> Executed:
        hb = ctx.settings.heartbeat
        spark = ctx.settings.spark
        # the inputs are checked before Spark starts (a corrupt plan quarantines the table without
        # a Spark start); the session starts before the instant is touched; a job that loses the
        # engine has the engine discard its session (``SparkEngine.job``) and ends ``engine_unavailable``
        check_spark_instant(ctx.storage, ctx.instant.requested_time, service)
        with ctx.engine.job(spark.master, spark.conf) as session:
            result = run_spark_service(
                ctx.storage, ctx.lock, ctx.instant.requested_time, session,
                service=service, time_settings=ctx.time_settings, heartbeat_interval_ms=hb.interval_ms,
                tolerable_misses=hb.tolerable_misses,
            )
        return _executed(result)

    return run


def _compaction_reads_clock(policy: Policy) -> bool:
    return policy.services.compaction.trigger != "NUM_COMMITS"  # TIME_ELAPSED, NUM_AND_TIME, NUM_OR_TIME


def _compaction_due(timeline: Timeline, policy: Policy) -> str | None:
    return compaction_due(timeline, policy.services.compaction.settings())


def _compaction_due_counts(counts: TimelineCounts, policy: Policy) -> str | None:
    return compaction_due_counts(counts, _settings(policy.services.compaction))


def _plan_compaction(ctx: PlanContext) -> PlanOutcome:
    instant, result = schedule_compaction(
        ctx.storage, ctx.lock, ctx.policy.services.compaction.settings(), time_settings=ctx.time_settings
    )
    return PlanOutcome(instant, result.summary())


def _log_compaction_due(timeline: Timeline, policy: Policy) -> str | None:
    return log_compaction_due(timeline, policy.services.log_compaction.settings())


def _log_compaction_due_counts(counts: TimelineCounts, policy: Policy) -> str | None:
    return log_compaction_due_counts(counts, _settings(policy.services.log_compaction))


#: Planner settings by policy group (frozen, compared by value): the tables of one policy share them.
_SETTINGS: dict[object, object] = {}


def _settings(group: CompactionService | LogCompactionService) -> Any:
    """``group.settings()``, built once per distinct group: every poll asks the triggers, and building
    the settings from Hudi's option keys costs more than the trigger itself (bench/poll.py)."""
    try:
        got = _SETTINGS.get(group)
    except TypeError:  # a group holding something unhashable
        return group.settings()
    if got is None:
        if len(_SETTINGS) >= 256:  # policies are few; a bound all the same
            _SETTINGS.clear()
        got = _SETTINGS[group] = group.settings()
    return got


def _plan_log_compaction(ctx: PlanContext) -> PlanOutcome:
    instant, result = schedule_log_compaction(
        ctx.storage, ctx.lock, ctx.policy.services.log_compaction.settings(), time_settings=ctx.time_settings
    )
    return PlanOutcome(instant, result.summary())


def _clustering_due(timeline: Timeline, policy: Policy) -> str | None:
    return clustering_due(timeline, policy.services.clustering.trigger_commits)


def _clustering_due_counts(counts: TimelineCounts, policy: Policy) -> str | None:
    return clustering_due_counts(counts, policy.services.clustering.trigger_commits)


def _plan_clustering(ctx: PlanContext) -> PlanOutcome:
    policy = ctx.policy.services.clustering
    # the trigger is checked again under the lock: a writer's scheduler may have planned one meanwhile
    settings = replace(policy.settings(), trigger_commits=policy.trigger_commits)
    instant, result = schedule_clustering(ctx.storage, ctx.lock, settings, time_settings=ctx.time_settings)
    return PlanOutcome(instant, result.summary())


# ---------------------------------------------------------------------------- archival


def _archival_due(timeline: Timeline, policy: Policy) -> str | None:
    return archival_due(timeline, policy.services.archival.keep_max_commits)


def _archival_due_counts(counts: TimelineCounts, policy: Policy) -> str | None:
    """``archival_due`` on the counts of a layout-2 timeline (the only ones ``scan_names`` counts):
    its completed commits alone decide (tests/service/daemon check both give the same answer)."""
    max_commits = policy.services.archival.keep_max_commits
    if counts.config.timeline_layout < 2:
        raise ValueError("archival counts cover layout-2 timelines only")
    commits = counts.completed_count(WRITE_ACTIONS)
    if commits > max_commits:
        return (f"{commits} completed commits on the active timeline, more than "
                f"hoodie.keep.max.commits={max_commits}")
    return None


def _archive(ctx: PlanContext) -> PlanOutcome:
    """``hoodied archive`` with the policy's keys: the data table, then its metadata table."""
    settings = ctx.policy.services.archival_settings()
    config = load_table_config(ctx.storage)  # the poll's copy may be older than the table's
    target = mdt_archival_target(ctx.storage, config, settings)
    mdt = (
        # the MDT writer's own batch size (Hudi never sets it there), as ``hoodied archive``
        MdtArchival(target[0], target[1], mdt_archival_planner(settings, ctx.storage, config))
        if target is not None else None
    )
    result = execute_archival(
        ctx.storage, config, ctx.lock, archival_planner(settings),
        compaction_batch_size=settings.compaction_batch_size,
        archival_batch_size=settings.archival_batch_size, mdt=mdt,
    )
    report = ArchivalReport.of(result)
    done = report.total > 0 or report.recovered > 0 or (
        report.metadata_table is not None and report.metadata_table.recovered > 0
    )
    return PlanOutcome(None, result.summary().replace("\n", "; "), done=done, archival=report)
