"""The Spark table services (compaction, log compaction, clustering, indexing): one runner with retries.

``SPARK_SERVICES`` maps each ``TableService`` that runs on Spark to its executor function, which
has the signature of ``executors.compaction.execute_compaction`` (``execute_log_compaction``,
``execute_clustering``, ``execute_indexing``). Executor modules are imported by name when a job
needs them, so the service layer works while one of them is not installed, and a process that
runs no Spark job (``hoodied --help``, ``inspect``, a poll-only daemon) never imports pyspark.

``run_spark_service`` is what both ``hoodied execute`` (through ``SparkRunner``) and the daemon
(``service.daemon.registry``) call for a pending instant:

1. the pending instant's inputs are checked before anything is changed, by the executor's own
   check (``SparkService.check``: ``check_compaction``, ``check_log_compaction``,
   ``check_clustering``, ``check_indexing``, which the executor calls again right before its
   inflight transition): the plan decodes and is supported, the table is supported, every file
   the plan reads exists, the schemas resolve. A failure raises its typed error
   (``HoodieFormatError``, ``UnsupportedTableError``) with the table as it was: a failed attempt
   of a corrupt plan is not rolled back, so nothing of it is deleted before the table is
   quarantined;
2. a failed attempt is rolled back (``service.operations.recover_failed_attempt``, the one
   owner of that decision: an inflight instant, or one a pending rollback targets, unless its
   heartbeat is alive; an ``indexing`` attempt is aborted instead);
3. the instant is executed from its unchanged plan;
4. a clustering that meets a write conflict (``WriteConflictError``: a write completed since it was
   planned touched its file groups) can never complete: it is rolled back and removed
   (``service.operations.drop_conflicting_clustering``), as Hudi's writer does with a pending
   clustering it conflicts with, and the result says so once (``ClusteringDropped``).

A live attempt (fresh heartbeat) is left alone: ``InstantStateError``. The completed instant
keeps Hudi's names: a compaction completes as ``commit``, a log compaction as ``deltacommit``,
a clustering as ``replacecommit`` (on table version 6 a pending clustering is itself a
``replacecommit`` whose plan says CLUSTER; ``hoodie.actions.services.service_of`` tells them
from insert-overwrites). An indexing instant completes as ``indexing``.

``SparkEngine`` owns one Spark session, started by the first job that needs it, or ahead of it in a
thread of its own (``start_in_background``: the daemon at start-up, ``spark.start_at_startup``); a
job that comes while it starts waits for that start. Its owner (the daemon, a ``SparkRunner``)
closes it. An engine that cannot be reached or is lost mid-job raises
``EngineUnavailableError`` (``executors.engine``: bounded start, bounded client retries) before the
instant is touched, or leaves the running attempt inflight for the rollback before its retry; the
engine discards its session then and starts a new one for the next job.

A local Spark JVM writes its own log lines to its standard error: the engine starts it with
``spark_log_conf`` (a log4j2 file shipped in the package, at ``log_level``, ``ERROR`` by default) and
with that standard error read into hoodied's logging (``service.logs.child_stderr_logged``), so what
is left of its lines reaches the terminal or the JSON log stream as hoodied's own log records.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.resources
import importlib.util
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, cast

from hoodied.executors.rollback import RollbackResult
from hoodied.hoodie.actions.clustering import WriteConflictError, require_no_conflict
from hoodied.hoodie.actions.services import TableService, service_of
from hoodied.hoodie.errors import EngineUnavailableError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.heartbeat import DEFAULT_INTERVAL_MS, DEFAULT_TOLERABLE_MISSES
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.secrets import mask_secrets
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant
from hoodied.hoodie.timeline.plans import ClusteringPlan
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.service.logs import child_stderr_logged
from hoodied.service.operations import (
    ExecuteOutcome,
    ExecuteStatus,
    drop_conflicting_clustering,
    executed_status,
    recover_failed_attempt,
)

if TYPE_CHECKING:  # the executors import pyspark: types only
    from hoodied.executors.compaction import CompactionResult

log = logging.getLogger("hoodied.engine")

__all__ = [
    "DEFAULT_RETRY_S",
    "DEFAULT_SPARK_LOG_LEVEL",
    "DEFAULT_START_TIMEOUT_S",
    "ENGINE_MODULE",
    "ClusteringDropped",
    "EngineState",
    "SPARK_LOG_LEVELS",
    "SPARK_SERVICES",
    "InputCheck",
    "Progress",
    "ServiceResult",
    "SparkEngine",
    "SparkRunner",
    "SparkService",
    "check_spark_instant",
    "run_compaction",
    "run_spark_service",
    "spark_log_conf",
]

#: ``check(storage, config, timeline, instant)``: an executor's input check (``SparkService.check``).
InputCheck = Callable[[Storage, TableConfig, Timeline, Instant], object]

#: ``progress(done, total)``: operations of the job completed so far (``executors.engine.Progress``).
Progress = Callable[[int, int], None]


_IMPORTS = threading.Lock()


def _import_spark_module(name: str) -> Any:
    """``importlib.import_module(name)`` for the modules that import pyspark, one thread at a time.

    The start ahead (``SparkEngine.start_in_background``) imports pyspark while a job may import an
    executor in another thread: pyspark's own modules import each other in a circle, and two threads
    importing them at once can meet a partly initialised module (``cannot import name ...``)."""
    with _IMPORTS:
        return importlib.import_module(name)


class ServiceResult(Protocol):
    """What every Spark executor returns (``CompactionResult``, ``LogCompactionResult``, ...)."""

    @property
    def instant(self) -> Instant: ...

    @property
    def was_completed(self) -> bool:
        """The instant was completed already when the executor looked under the lock: nothing done."""
        ...

    def summary(self) -> str: ...


@dataclass(frozen=True, slots=True)
class SparkService:
    """A Spark table service and where its executor function and its input check are (imported by
    name when a job runs). ``check(storage, config, timeline, instant)`` changes nothing and
    raises what the executor would raise for the same inputs."""

    name: TableService
    module: str
    function: str
    checker: str

    @property
    def action(self) -> Action:
        """The pending action on table versions 8+ (version 6 clustering: a replacecommit)."""
        return TableService(self.name).action

    def available(self) -> bool:
        """The executor module is installed (it may still fail to import: then the job fails)."""
        return importlib.util.find_spec(self.module) is not None

    def executor(self) -> Callable[..., ServiceResult]:
        fn: Callable[..., ServiceResult] = getattr(self._module(), self.function)
        return fn

    def check(self) -> InputCheck:
        fn: InputCheck = getattr(self._module(), self.checker)
        return fn

    def _module(self) -> Any:
        try:
            return _import_spark_module(self.module)
        except ModuleNotFoundError as exc:
            if exc.name != self.module:
                raise
            raise UnsupportedTableError(f"{self.name}: no executor in this build of hoodied") from None


#: The module that starts Spark sessions (``executors.engine.spark_session``).
ENGINE_MODULE = "hoodied.executors.engine"

SPARK_SERVICES: dict[TableService, SparkService] = {
    s.name: s
    for s in (
        SparkService(TableService.COMPACTION, "hoodied.executors.compaction", "execute_compaction",
                     "check_compaction"),
        SparkService(TableService.LOG_COMPACTION, "hoodied.executors.log_compaction",
                     "execute_log_compaction", "check_log_compaction"),
        SparkService(TableService.CLUSTERING, "hoodied.executors.clustering", "execute_clustering",
                     "check_clustering"),
        SparkService(TableService.INDEXING, "hoodied.executors.indexing", "execute_indexing",
                     "check_indexing"),
    )
}


def check_spark_instant(
    storage: Storage, instant_time: str, service: TableService | None = None
) -> tuple[TableConfig, Timeline, Instant, TableService]:
    """Step 1 of ``run_spark_service``, reads only: the instant, its service, and (when pending) its
    inputs checked by the service's own check. Called before a Spark session is even started
    (``SparkRunner``, the daemon), so a corrupt plan or an unsupported table is refused in a
    second, not after Spark's start-up; ``run_spark_service`` calls it again on a fresh timeline."""
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    inst = timeline.get(instant_time)
    found = service_of(timeline, inst) if inst is not None else None
    if inst is None or found not in SPARK_SERVICES or (service is not None and found != service):
        what = (service or "Spark table service").replace("_", " ")
        raise InstantStateError(
            f"{storage.base_uri}: no {what} instant {instant_time} on the active timeline"
        )
    assert found is not None
    if inst.is_pending:
        # before the rollback of a failed attempt, the first step that deletes anything: a bad
        # input must leave the table exactly as it was (the daemon quarantines it)
        SPARK_SERVICES[found].check()(storage, config, timeline, inst)
    return config, timeline, inst, found


def run_spark_service(
    storage: Storage,
    lock: TableLock,
    instant_time: str,
    session: Any,
    *,
    service: TableService | None = None,
    time_settings: TimeSettings | None = None,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    force: bool = False,
    progress: Progress | None = None,
) -> ServiceResult:
    """Execute the pending Spark service ``instant_time``: check its inputs, roll back a failed
    attempt, run it (the module docstring's steps).

    ``service`` (a key of ``SPARK_SERVICES``) is checked against the instant when given, else
    taken from it. ``force`` rolls back an inflight attempt even when
    its heartbeat looks alive; ``progress(done, total)`` hears of completed operations.
    """
    config, timeline, inst, found = check_spark_instant(storage, instant_time, service)
    spark_service = SPARK_SERVICES[found]
    conflict = _conflict(timeline, inst) if found is TableService.CLUSTERING else None
    rolled = recover_failed_attempt(
        storage, timeline, inst, found, lock, force=force, heartbeat_interval_ms=heartbeat_interval_ms,
        tolerable_misses=tolerable_misses, time_settings=time_settings,
    )
    if isinstance(rolled, RollbackResult) and rolled.target_deleted:  # a conflicting clustering's rollback
        reason = conflict or "a rollback removing it (an unschedule that stopped midway) was pending"
        return ClusteringDropped(inst, reason, rolled)
    try:
        result: ServiceResult = spark_service.executor()(
            storage, config, lock, instant_time, session, time_settings=time_settings,
            heartbeat_interval_ms=heartbeat_interval_ms, tolerable_misses=tolerable_misses, progress=progress,
        )
    except WriteConflictError as exc:
        # it can never complete: rolled back and removed, so the next planning pass plans its file
        # groups again (step 4 of the module docstring)
        dropped = drop_conflicting_clustering(
            storage, instant_time, lock, heartbeat_interval_ms=heartbeat_interval_ms,
            tolerable_misses=tolerable_misses, time_settings=time_settings,
        )
        if dropped is None:
            raise
        log.warning("clustering %s lost a write conflict and was removed: %s", instant_time, exc)
        return ClusteringDropped(inst, str(exc), dropped)
    return result


def _conflict(timeline: Timeline, inst: Instant) -> str | None:
    """The write conflict of the pending clustering ``inst``, in one line; ``None`` without one."""
    plan = timeline.plan(inst) if inst.is_pending else None
    if not isinstance(plan, ClusteringPlan):
        return None
    try:
        require_no_conflict(timeline, inst, plan)
    except WriteConflictError as exc:
        return str(exc)
    return None


@dataclass(frozen=True, slots=True)
class ClusteringDropped:
    """What ``run_spark_service`` returns for a clustering that lost a write conflict: rolled back
    and removed from the timeline (``service.operations.drop_conflicting_clustering``)."""

    instant: Instant
    conflict: str
    rollback: RollbackResult
    was_completed: bool = False

    def summary(self) -> str:
        t = self.instant.requested_time
        return (f"clustering {t} dropped: {self.conflict.split('; ', 1)[0]}; rolled back with rollback "
                f"{self.rollback.rollback.requested_time} and removed from the timeline, its file groups "
                "can be planned again")


def run_compaction(
    storage: Storage,
    lock: TableLock,
    instant_time: str,
    session: Any,
    *,
    time_settings: TimeSettings | None = None,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    force: bool = False,
    progress: Progress | None = None,
) -> CompactionResult:
    """Execute the pending compaction ``instant_time`` (``run_spark_service`` for one compaction)."""
    return cast("CompactionResult", run_spark_service(
        storage, lock, instant_time, session, service=TableService.COMPACTION, time_settings=time_settings,
        heartbeat_interval_ms=heartbeat_interval_ms, tolerable_misses=tolerable_misses, force=force,
        progress=progress,
    ))


#: Defaults of ``SparkEngine`` (``executors.engine.DEFAULT_START_TIMEOUT_S`` / ``DEFAULT_RETRY_S``,
#: repeated here so the service layer reads them without importing pyspark).
DEFAULT_START_TIMEOUT_S = 120.0
DEFAULT_RETRY_S = 30.0
#: The level of a local Spark JVM's own log lines (``spark_log_conf``; ``SparkConfig.log_level``).
DEFAULT_SPARK_LOG_LEVEL = "ERROR"
#: Spark's log levels hoodied passes on (log4j's, as ``SparkContext.setLogLevel`` takes them).
SPARK_LOG_LEVELS = ("DEBUG", "INFO", "WARN", "ERROR", "OFF")
#: The log4j2 configuration a local Spark JVM starts with (package data of ``hoodied.service``): every
#: line to standard error at the level of the system property ``LOG_LEVEL_PROPERTY``.
LOG4J2_FILE = "spark-log4j2.properties"
LOG_LEVEL_PROPERTY = "hoodied.spark.log.level"
_DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def spark_log_conf(
    master: str, conf: Mapping[str, str], level: str = DEFAULT_SPARK_LOG_LEVEL
) -> dict[str, str]:
    """``conf`` with the settings that hold a local Spark's JVM log lines at ``level`` from its start.

    ``spark.log.level`` alone acts only once the context is up: the JVM's start-up lines ("Using
    Spark's default log4j profile", "Setting default log level", WARN lines of its first seconds)
    come before. So the driver JVM starts with ``LOG4J2_FILE`` (``-Dlog4j2.configurationFile``),
    which also configures ``org.apache.spark`` itself, so Spark's shell logic finds its level set and
    prints no note about it. A setting the user gave (a log4j2 file of their own, ``spark.log.level``)
    is kept. A Spark Connect server logs on its own side: ``conf`` is returned unchanged for it.
    """
    out = dict(conf)
    if master.startswith("sc://"):
        return out
    level = level.upper()
    out.setdefault("spark.log.level", level)
    java = out.get(_DRIVER_JAVA_OPTIONS, "")
    if "log4j2.configurationFile" not in java and "log4j.configuration" not in java:
        path = str(importlib.resources.files("hoodied.service").joinpath(LOG4J2_FILE))
        # Spark splits these options as a shell would: a path with a space is quoted
        quoted = f'"{path}"' if " " in path else path
        ours = f"-Dlog4j2.configurationFile={quoted} -D{LOG_LEVEL_PROPERTY}={level}"
        out[_DRIVER_JAVA_OPTIONS] = f"{ours} {java}".strip()
    return out
#: A failed start is not tried again by the next job for this long (unless the server answers
#: again, ``SparkEngine.reachable``): jobs of many tables do not each wait out a dead engine.
RETRY_START_AFTER_S = 5.0


_jvm_started = False
"""Whether this process started a local Spark JVM (pyspark keeps one for the life of the process)."""


@contextlib.contextmanager
def _jvm_stderr_logged(master: str) -> Iterator[None]:
    """Around the first local session's start: the JVM launched then writes its standard error into
    hoodied's logging (``service.logs.child_stderr_logged``, logger ``hoodied.spark``)."""
    global _jvm_started
    if master.startswith("sc://") or _jvm_started:
        yield
        return
    with child_stderr_logged("hoodied.spark"):
        yield
    _jvm_started = True


class EngineState(StrEnum):
    """Where a ``SparkEngine`` is (``/status``'s ``engine.state``)."""

    NOT_STARTED = "not_started"
    """No session was started yet: the first Spark job starts it."""
    STARTING = "starting"
    """A session is starting (in the background, or for a job); jobs wait for it."""
    UP = "up"
    """The last start or job found the engine."""
    DOWN = "down"
    """The last start failed or a job lost the engine (``SparkEngine.problem`` says why)."""


class SparkEngine:
    """One Spark session, started by the first job that needs it (or ahead of it,
    ``start_in_background``) and stopped by ``close()``.

    pyspark is imported only then: ``service`` modules must not import it directly, and a
    daemon with nothing to compact or cluster should not pay for it. Not shared between owners:
    the daemon has one for every table's jobs, each ``SparkRunner`` its own.

    Engine outages: a start that fails (``EngineUnavailableError``: unreachable, no answer within
    ``start_timeout_s``) or a job that loses the engine (``job``) marks the engine down and
    discards the session, so the next job starts a new one once the engine is back. ``up`` is
    ``None`` before the first start, then whether the last start or job found the engine;
    ``problem`` says why it is down; ``state`` adds whether a session is starting. With ``log_changes``
    each change is logged once (not once per job), and each start.
    """

    def __init__(
        self, *, start_timeout_s: float = DEFAULT_START_TIMEOUT_S, retry_s: float = DEFAULT_RETRY_S,
        log_changes: bool = False, log_level: str = DEFAULT_SPARK_LOG_LEVEL,
    ) -> None:
        self.start_timeout_s = start_timeout_s
        self.log_level = log_level
        """A local Spark JVM's own log level (``spark_log_conf``)."""
        self.log_changes = log_changes
        """Log each change of ``up`` (the daemon; a command prints its one error line instead)."""
        self.retry_s = retry_s
        self._guard = threading.Lock()
        self._stack = ExitStack()
        self._session: Any = None
        self._master: str | None = None
        self.up: bool | None = None
        self.problem: str | None = None
        self._down_error: EngineUnavailableError | None = None
        self._retry_start_at = 0.0
        self._starting = False
        self._ahead: threading.Thread | None = None
        """The thread of ``start_in_background``'s start, once called (``running_session`` waits for it)."""
        self._generation = 0
        """Counts ``close()`` calls: a start begun before one stops its session as soon as it is up."""

    def session(self, master: str, conf: Mapping[str, str] | None = None) -> Any:
        """The running session, started first when there is none (``EngineUnavailableError`` if it
        cannot be); while one starts (``start_in_background``), the one it starts."""
        return self._start(master, conf, self._generation, ahead=False)

    def start_in_background(self, master: str, conf: Mapping[str, str] | None = None) -> threading.Thread:
        """Start the session now, in a daemon thread, so the first job finds it started instead of
        paying Spark's start-up; a job that comes meanwhile waits for this start (never a second one).

        A start that fails marks the engine down exactly as a job's failed start does (``problem``;
        the next job tries again after ``RETRY_START_AFTER_S``). ``close()`` during the start does not
        wait past its own deadline: the session is stopped as soon as it is up (``_start``)."""
        if self.log_changes:  # before the thread runs: the log shows it ahead of any job it serves
            log.info("starting a Spark session on %s in the background", mask_secrets(master))
        thread = threading.Thread(target=self._start_ahead, args=(master, dict(conf or {}), self._generation),
                                  name="hoodied-engine-start", daemon=True)
        self._ahead = thread
        thread.start()
        return thread

    def running_session(self) -> Any:
        """The running session, or ``None``; never starts one (work that can run without Spark, a
        clean's MDT compaction, uses Spark only when it is up anyway).

        A start under way (``start_in_background``'s, or a job's) is waited for, at most about
        ``start_timeout_s``, and its session returned if it came up. ``None`` when no session was
        started, while the engine is down (``state``, ``problem``), after ``close()``, or when the
        start is still going after that wait."""
        deadline = time.monotonic() + self.start_timeout_s
        ahead = self._ahead
        if ahead is not None:
            ahead.join(self.start_timeout_s)  # from before its thread takes the guard
        if not self._guard.acquire(timeout=max(deadline - time.monotonic(), 0.0)):  # a job's start
            return None
        try:
            return self._session
        finally:
            self._guard.release()

    def _start_ahead(self, master: str, conf: Mapping[str, str], generation: int) -> None:
        try:
            self._start(master, conf, generation, ahead=True)
        except EngineUnavailableError:
            pass  # down with its problem (logged once by ``_set_down``): the next job tries again
        except Exception as exc:
            # not an outage (pyspark missing, a setting Spark refuses): the first Spark job meets it
            # again and fails as it would have without this start
            log.warning("Spark session not started in the background: %s",
                        mask_secrets(f"{type(exc).__name__}: {exc}"))

    def _start(self, master: str, conf: Mapping[str, str] | None, generation: int, *, ahead: bool) -> Any:
        with self._guard:  # two first jobs at once (or a job and the start ahead) must not start two
            if generation != self._generation:
                raise EngineUnavailableError("Spark engine closed: no session is started")
            if self._session is None:
                self._master = master
                if self._down_error is not None and time.monotonic() < self._retry_start_at:
                    # tried a moment ago: the next job does not wait for it again (a new error each
                    # time: raising the same one would grow its traceback for as long as the outage lasts)
                    raise EngineUnavailableError(str(self._down_error))
                if self.log_changes and not ahead and self.up is not False:  # an outage's retries: quiet
                    log.info("starting a Spark session on %s for a job", mask_secrets(master))
                self._starting = True
                try:
                    # by name, as SPARK_SERVICES' executors: the module imports pyspark
                    spark_session = _import_spark_module(ENGINE_MODULE).spark_session
                    with _jvm_stderr_logged(master):
                        self._session = self._stack.enter_context(spark_session(
                            master, spark_log_conf(master, conf or {}, self.log_level),
                            start_timeout_s=self.start_timeout_s, retry_s=self.retry_s,
                        ))
                except EngineUnavailableError as exc:
                    self._set_down(exc)
                    raise
                finally:
                    self._starting = False
                if generation != self._generation:
                    # ``close()`` came during the start and stopped waiting for it: a session nobody
                    # will use is stopped now rather than left to the exiting process
                    stack, self._stack, self._session = self._stack, ExitStack(), None
                    stack.close()
                    log.info("Spark session stopped: the engine was closed while it started")
                    raise EngineUnavailableError("Spark engine closed while its session started")
                self._set_up()
            return self._session

    @contextlib.contextmanager
    def job(self, master: str, conf: Mapping[str, str] | None = None) -> Iterator[Any]:
        """The session for one job; a job that loses the engine marks it down and discards the session."""
        session = self.session(master, conf)
        try:
            yield session
        except EngineUnavailableError as exc:
            self.lost(session, exc)
            raise
        except Exception as exc:
            # a Spark call outside the job's own (``run_operations`` words its errors): asked of
            # the engine whether it is still there
            lost = _import_spark_module(ENGINE_MODULE).lost_error(exc, session)
            if lost is None:
                raise
            self.lost(session, lost)
            raise lost from exc

    def lost(self, session: Any, exc: EngineUnavailableError) -> None:
        """The engine of ``session`` is gone: down, and the session stopped (bounded) and forgotten."""
        with self._guard:
            self._set_down(exc)
            if session is not self._session:  # another job discarded it already
                return
            stack, self._stack, self._session = self._stack, ExitStack(), None
        stack.close()  # outside the guard: a stop never holds up the next start

    def reachable(self) -> bool:
        """While the engine is down: whether a Spark Connect server answers a TCP connect again (then
        the next job may try at once). Always ``False`` for a local engine (nothing to ask)."""
        master = self._master
        if self.up is not False or master is None or not master.startswith("sc://"):
            return False
        problem = _import_spark_module(ENGINE_MODULE).connect_problem(master, 1.0)
        if problem is None:
            self._retry_start_at = 0.0
        return problem is None

    def _set_down(self, exc: EngineUnavailableError) -> None:
        self._down_error = exc
        self._retry_start_at = time.monotonic() + min(RETRY_START_AFTER_S, self.start_timeout_s)
        if self.up is not False and self.log_changes:
            log.warning("Spark engine unavailable: %s", exc)
        self.up, self.problem = False, str(exc)

    def _set_up(self) -> None:
        if self.up is False and self.log_changes:
            log.info("Spark engine available again: %s", mask_secrets(self._master or ""))
        self.up, self.problem, self._down_error = True, None, None

    @property
    def started(self) -> bool:
        return self._session is not None

    @property
    def state(self) -> EngineState:
        """``up`` and ``problem`` in one word, with ``starting`` while a session starts."""
        if self._starting:
            return EngineState.STARTING
        if self.up is None:
            return EngineState.NOT_STARTED
        return EngineState.UP if self.up else EngineState.DOWN

    def close(self, timeout_s: float | None = None) -> None:
        """Stop the session. With ``timeout_s``, return within about that long whatever the engine
        does: a session still starting then is stopped by its own start as soon as it is up (or goes
        with the exiting process: a local JVM ends with its parent), and a stop that takes longer goes
        on in a daemon thread with the client's retries switched off. A start begun before the close
        (``start_in_background``) starts no session after it."""
        deadline = None if timeout_s is None else time.monotonic() + max(timeout_s, 0.0)
        self._generation += 1
        if not self._guard.acquire(timeout=-1 if deadline is None else max(timeout_s or 0.0, 0.0)):
            log.warning("Spark session still starting: stopped once it is up, or with the exiting process")
            return
        try:
            session, stack, self._stack, self._session = self._session, self._stack, ExitStack(), None
        finally:
            self._guard.release()
        if deadline is None or session is None:
            stack.close()
            return
        stopper = threading.Thread(target=stack.close, name="hoodied-engine-stop", daemon=True)
        stopper.start()
        stopper.join(max(deadline - time.monotonic(), 0.0))
        if stopper.is_alive():
            # the engine does not answer: nothing it could still do for this process is waited for
            _import_spark_module(ENGINE_MODULE).mark_lost(session)
            log.warning("Spark session not stopped within %.1f s: left to the engine", timeout_s)


@contextlib.contextmanager
def _no_progress(label: str) -> Iterator[Progress | None]:
    yield None


@contextlib.contextmanager
def _quietly(what: str) -> Iterator[None]:
    yield


class SparkRunner:
    """Runs pending Spark-service instants for ``hoodied execute``; Spark starts at the first one.

    Call it with a pending instant of any service in ``SPARK_SERVICES``; ``close()`` stops the
    session it started. ``progress(label)`` is a context manager yielding a progress callback
    (a progress bar on a terminal) or ``None``; ``starting(what)`` is a context manager held while
    the session starts (a spinner on a terminal), after the instant's inputs were checked.
    """

    def __init__(
        self,
        storage: Storage,
        lock: TableLock,
        *,
        spark: str = "local",
        spark_conf: Mapping[str, str] | None = None,
        time_settings: TimeSettings | None = None,
        heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
        tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
        force: bool = False,
        progress: Callable[[str], AbstractContextManager[Progress | None]] = _no_progress,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        retry_s: float = DEFAULT_RETRY_S,
        log_level: str = DEFAULT_SPARK_LOG_LEVEL,
        starting: Callable[[str], AbstractContextManager[None]] = _quietly,
    ) -> None:
        self.storage = storage
        self.lock = lock
        self.spark = spark
        self.spark_conf = dict(spark_conf or {})
        self.time_settings = time_settings
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.tolerable_misses = tolerable_misses
        self.force = force
        self.progress = progress
        self.starting = starting
        self._engine = SparkEngine(start_timeout_s=start_timeout_s, retry_s=retry_s, log_level=log_level)

    def __call__(self, inst: Instant, service: TableService) -> ExecuteOutcome:
        label = f"{service.replace('_', ' ')} {inst.requested_time}"
        # the plan and the table are checked before Spark starts (a bad input costs no start-up),
        # and the session starts before the instant is touched: an engine that is down changes nothing
        check_spark_instant(self.storage, inst.requested_time, service)
        if not self._engine.started:
            with self.starting(f"starting Spark ({self.spark})"):
                self._engine.session(self.spark, self.spark_conf)
        with self._engine.job(self.spark, self.spark_conf) as session, self.progress(label) as progress:
            result = run_spark_service(
                self.storage, self.lock, inst.requested_time, session, service=service,
                time_settings=self.time_settings, heartbeat_interval_ms=self.heartbeat_interval_ms,
                tolerable_misses=self.tolerable_misses, force=self.force, progress=progress,
            )
        if isinstance(result, ClusteringDropped):
            return ExecuteOutcome(result.instant, ExecuteStatus.DROPPED, result.summary())
        return ExecuteOutcome(result.instant, executed_status(result.was_completed), result.summary())

    def close(self) -> None:
        self._engine.close()
