"""Service commands of ``hoodied`` (to be registered on the main group by ``service.cli.main``).

``rollback TABLE --instant T``: roll back a failed attempt of a pending table service
(compaction, log compaction, clustering; indexing is aborted instead, as Hudi's
``RunIndexActionExecutor.abort`` does) exactly as Apache Hudi does before it retries one:
a rollback instant whose plan deletes the attempt's files, then the service's inflight file
goes and the service can be re-executed from its unchanged plan. A live attempt (heartbeat
not expired) is refused unless ``--force``. On a table with a metadata table the attempt's
MDT delta commit is rolled back too, by an MDT rollback with the same instant time
(``hoodie.metadata.rollback``); one that an MDT compaction already folded in is refused, as Hudi
refuses it.

``schedule clean TABLE``: plan a clean (``planners.clean``) under the table lock and write
``<T>.clean.requested``; prints the new instant and a summary, or why nothing is due. A
pending clean blocks a new plan, so concurrent schedulers produce exactly one.

``execute TABLE [--instant T]``: run pending clean instants (``executors.clean``), whoever
requested them (a plan written by Apache Hudi included): all of them, oldest first, or the
one given. Other pending instants (a data write in progress, its writer's rollback) are listed
and left untouched; a clean whose heartbeat is alive belongs to another executor and is skipped. Pending
compactions, log compactions, clusterings and indexings run on Spark (``--spark``, ``--spark-conf``;
``service.spark_jobs``), a failed attempt rolled back first.

The lock options are shared by every command that writes the timeline: ``--lock local``
(a file lock under ``.hoodie/.locks``, one host) or ``--lock redis://HOST:PORT/DB``.
Apache Hudi writers running beside hoodied must use the same lock for plans and completions
to be serialized with theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click

from hoodied.executors.clean import DEFAULT_PARALLELISM, CleanResult, execute_clean
from hoodied.executors.rollback import RollbackResult, execute_rollback
from hoodied.hoodie.errors import HoodieFormatError, InstantStateError, UnsupportedTableError
from hoodied.hoodie.fsview import list_storage
from hoodied.hoodie.heartbeat import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TOLERABLE_MISSES,
    is_heartbeat_expired,
    last_heartbeat_ms,
)
from hoodied.hoodie.locks import LockSettings, TableLock
from hoodied.hoodie.metadata.clean import require_clean_maintainable
from hoodied.hoodie.metadata.index_rollback import IndexingAbort, rollback_failed_indexing
from hoodied.hoodie.metadata.rollback import require_rollback_supported
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import Storage, storage_for
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, Action, Instant, State, require_instant_time
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.hoodie.timeline.writer import TimelineWriter
from hoodied.planners.clean import CleanPlanResult, CleanPolicy, CleanSettings, plan_clean
from hoodied.planners.rollback import is_table_service, pending_rollback_for, schedule_rollback
from hoodied.service.config import service_of
from hoodied.service.locks import lock_from_option

__all__ = [
    "COMMANDS",
    "ExecuteOutcome",
    "execute",
    "execute_pending",
    "lock_options",
    "rollback",
    "rollback_failed_attempt",
    "schedule",
    "schedule_and_report",
    "schedule_clean",
]


def rollback_failed_attempt(
    storage: Storage,
    instant_time: str,
    lock: TableLock,
    *,
    force: bool = False,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    time_settings: TimeSettings | None = None,
) -> RollbackResult | IndexingAbort | None:
    """Roll back the failed attempt of the pending table service ``instant_time``.

    ``None`` when there is nothing to roll back (the service is only requested and no
    rollback of it is pending). A failed ``indexing`` attempt is aborted as Hudi aborts one
    (Hudi writes no rollback instant for indexing): ``hoodie.metadata.index_rollback``.
    """
    config = load_table_config(storage)
    target = Timeline.load(storage, config).get(instant_time)
    if target is not None and target.action is Action.INDEXING:
        return rollback_failed_indexing(
            storage, lock, instant_time, force=force, heartbeat_interval_ms=heartbeat_interval_ms,
            tolerable_misses=tolerable_misses, time_settings=time_settings,
        )
    require_rollback_supported(storage, config)
    with lock:
        timeline = Timeline.load(storage, config)
        target = timeline.get(instant_time)
        if target is None:
            raise InstantStateError(f"{storage.base_uri}: no instant {instant_time} on the active timeline")
        if target.is_completed:
            raise InstantStateError(f"{instant_time}: {target.action.value} is completed, nothing to undo")
        if not is_table_service(timeline, target):
            raise UnsupportedTableError(
                f"{instant_time}: {target.action.value} is a regular write, not a table service; "
                "hoodied rolls back failed table-service attempts only"
            )
        pending = pending_rollback_for(timeline, instant_time)
        if target.state is State.REQUESTED and pending is None:
            return None
        expired = is_heartbeat_expired(
            storage, instant_time, interval_ms=heartbeat_interval_ms, tolerable_misses=tolerable_misses
        )
        if not expired and not force:
            raise InstantStateError(
                f"{instant_time}: {target.action.value} has a live heartbeat (last beat at "
                f"{last_heartbeat_ms(storage, instant_time)} ms since the epoch); another executor is "
                "working on it (use --force only if you know it is dead)"
            )
        writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
        rollback_instant = schedule_rollback(writer, timeline, target)
        return execute_rollback(writer, rollback_instant.requested_time)


def schedule_clean(
    storage: Storage,
    lock: TableLock,
    settings: CleanSettings | None = None,
    *,
    dry_run: bool = False,
    time_settings: TimeSettings | None = None,
) -> tuple[Instant | None, CleanPlanResult]:
    """Plan a clean under the table lock and write ``<T>.clean.requested`` (unless ``dry_run``).

    Returns the new instant (``None`` when nothing is due or on a dry run) and the plan result.
    A clean already pending blocks a new one, so two schedulers racing for the lock produce
    exactly one plan.
    """
    config = load_table_config(storage)
    require_clean_maintainable(storage, config, "clean")
    with lock:
        timeline = Timeline.load(storage, config)
        result = plan_clean(storage, config, timeline, list_storage(storage, config), settings)
        if result.plan is None or dry_run:
            return None, result
        writer = TimelineWriter(storage, config, lock, time_settings=time_settings)
        return writer.schedule(Action.CLEAN, result.plan), result


@dataclass(slots=True)
class ExecuteOutcome:
    """One pending instant ``execute`` looked at: what happened to it, in one line."""

    instant: Instant
    status: str
    """``executed``, ``skipped`` (live executor) or ``no-executor``."""
    message: str
    clean: CleanResult | None = None


def _no_executor(timeline: Timeline, inst: Instant) -> str:
    t, action = inst.requested_time, inst.action.value
    if inst.action is Action.ROLLBACK:
        try:
            target = ((timeline.read_plan(inst) or {}).get("instantToRollback") or {}).get("commitTime")
        except HoodieFormatError:
            target = None  # reported as it is; `hoodied rollback` gives the error
        undone = timeline.get(target) if target else None
        if undone is not None and is_table_service(timeline, undone):
            return f"{t} rollback: pending; finish it with `hoodied rollback TABLE --instant {target}`"
        if target:
            return (f"{t} rollback: pending rollback of the data write {target}; hoodied rolls back table "
                    "services only, the table's writer finishes it; left untouched")
    if inst.action in WRITE_ACTIONS and not is_table_service(timeline, inst):
        return f"{t} {action} ({inst.state.value}): a data write, not a table service; left untouched"
    return f"{t} {action} ({inst.state.value}): no executor yet, left untouched"


def execute_pending(
    storage: Storage,
    lock: TableLock,
    instant_time: str | None = None,
    *,
    time_settings: TimeSettings | None = None,
    parallelism: int = DEFAULT_PARALLELISM,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    force: bool = False,
    runners: Mapping[str, Callable[[Instant, str], ExecuteOutcome]] | None = None,
) -> list[ExecuteOutcome]:
    """Run pending cleans (all, oldest first, or ``instant_time``); report every other pending instant.

    With ``instant_time``: a completed clean is reported as such, a pending instant of
    another action raises ``UnsupportedTableError`` (no executor yet; left untouched) and a
    clean owned by a live executor raises ``InstantStateError``. ``runners`` execute pending
    instants of other services, by service name (``service.config.service_of``; the Spark
    services: ``service.spark_jobs.SparkRunner``), called with the instant and its service.
    """
    runners = runners or {}
    config = load_table_config(storage)
    require_clean_maintainable(storage, config, "execute")
    timeline = Timeline.load(storage, config)
    if instant_time is not None:
        inst = timeline.get(instant_time)
        if inst is None:
            raise InstantStateError(f"{storage.base_uri}: no instant {instant_time} on the active timeline")
        if inst.action is not Action.CLEAN and service_of(timeline, inst) not in runners:
            if inst.is_completed:
                raise InstantStateError(
                    f"{instant_time}: {inst.action.value} is completed, nothing to execute"
                )
            raise UnsupportedTableError(_no_executor(timeline, inst))
        targets = [inst]
    else:
        targets = timeline.pending()  # sorted by requested time
    outcomes: list[ExecuteOutcome] = []
    for n, inst in enumerate(targets):
        if n and outcomes[-1].status == "executed":  # a job may have finished later instants (a rollback)
            timeline = Timeline.load(storage, config)
            current = timeline.get(inst.requested_time)
            if current is None or current.is_completed:
                continue
        service = service_of(timeline, inst)
        runner = runners.get(service) if service is not None else None
        if inst.action is not Action.CLEAN and runner is None:
            outcomes.append(ExecuteOutcome(inst, "no-executor", _no_executor(timeline, inst)))
            continue
        try:
            if runner is not None and service is not None:
                outcomes.append(runner(inst, service))
                continue
            result = execute_clean(
                storage, config, lock, inst.requested_time, time_settings=time_settings,
                parallelism=parallelism, heartbeat_interval_ms=heartbeat_interval_ms,
                tolerable_misses=tolerable_misses, force=force,
            )
        except InstantStateError as exc:
            if instant_time is not None or "live heartbeat" not in str(exc):
                raise
            what = f"{inst.requested_time} {inst.action.value}"
            outcomes.append(ExecuteOutcome(inst, "skipped", f"{what}: skipped, {exc}"))
            continue
        outcomes.append(ExecuteOutcome(result.instant, "executed", result.summary(), result))
    return outcomes


def lock_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--lock``, ``--lock-wait-ms``, ``--lock-retries``, ``--clock-skew-ms`` for timeline writers."""
    options = [
        click.option(
            "--lock",
            "lock_option",
            default="local",
            show_default=True,
            help="Table lock: 'local' (file lock in .hoodie/.locks) or redis://HOST:PORT/DB.",
        ),
        click.option(
            "--lock-wait-ms",
            default=60_000,
            show_default=True,
            type=click.IntRange(min=0),
            help="How long one attempt waits for the lock.",
        ),
        click.option(
            "--lock-retries",
            default=3,
            show_default=True,
            type=click.IntRange(min=0),
            help="Further attempts when the lock is busy or the lock service is unreachable.",
        ),
        click.option(
            "--clock-skew-ms",
            default=200,
            show_default=True,
            type=click.IntRange(min=0),
            help="hoodie.time.generator.max_expected_clock_skew_ms of the table's writers.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.command()
@click.argument("table")
@click.option("--instant", "instant_time", required=True, help="Requested time of the failed table service.")
@click.option("--force", is_flag=True, help="Roll back even when its heartbeat is still alive.")
@lock_options
def rollback(
    table: str,
    instant_time: str,
    force: bool,
    lock_option: str,
    lock_wait_ms: int,
    lock_retries: int,
    clock_skew_ms: int,
) -> None:
    """Roll back a failed table-service attempt.

    As Apache Hudi does before a retry: a compaction, log compaction or clustering gets a
    rollback instant that deletes the attempt's files; a failed indexing attempt is aborted
    (its metadata-table partition is dropped). The service is then requested again with its
    unchanged plan."""
    require_instant_time(instant_time)
    storage = storage_for(table)
    settings = LockSettings(wait_ms=lock_wait_ms, retries=lock_retries)
    lock, factory = lock_from_option(lock_option, storage, settings)
    try:
        result = rollback_failed_attempt(
            storage,
            instant_time,
            lock,
            force=force,
            time_settings=TimeSettings(max_expected_clock_skew_ms=clock_skew_ms),
        )
    finally:
        if factory is not None:
            factory.close()
    if result is None:
        click.echo(f"{instant_time}: only requested, nothing to roll back")
        return
    click.echo(result.summary())


@click.group()
def schedule() -> None:
    """Plan a table service and write its requested instant."""


@schedule.command("clean")
@click.argument("table")
@click.option("--policy", type=click.Choice([p.value for p in CleanPolicy]),
              default=CleanPolicy.KEEP_LATEST_COMMITS.value, show_default=True, help="hoodie.clean.policy")
@click.option("--retained", type=click.IntRange(min=1), default=None,
              help="Commits retained (default 10), file versions (default 3) or hours (default 24).")
@click.option("--dry-run", is_flag=True, help="Print the plan summary, write nothing.")
@lock_options
def schedule_clean_command(table: str, policy: str, retained: int | None, dry_run: bool, lock_option: str,
                           lock_wait_ms: int, lock_retries: int, clock_skew_ms: int) -> None:
    """Plan a clean (HoodieCleanerPlan) and print the new instant and a summary, or why nothing is due."""
    chosen = CleanPolicy(policy)
    kw: dict[str, int] = {}
    if retained is not None:
        kw = {
            CleanPolicy.KEEP_LATEST_COMMITS: {"commits_retained": retained},
            CleanPolicy.KEEP_LATEST_FILE_VERSIONS: {"file_versions_retained": retained},
            CleanPolicy.KEEP_LATEST_BY_HOURS: {"hours_retained": retained},
        }[chosen]
    settings = CleanSettings(policy=chosen, **kw)  # type: ignore[arg-type]
    schedule_and_report("clean", schedule_clean, settings, table, dry_run, lock_option, lock_wait_ms,
                        lock_retries, clock_skew_ms)


def schedule_and_report(
    label: str,
    scheduler: Callable[..., tuple[Instant | None, Any]],
    settings: Any,
    table: str,
    dry_run: bool,
    lock_option: str,
    lock_wait_ms: int,
    lock_retries: int,
    clock_skew_ms: int,
) -> None:
    """Run a ``schedule`` command: ``scheduler(storage, lock, settings, *, dry_run, time_settings)``
    under the ``--lock`` options, then print the new instant and the plan's summary (a dry run:
    the summary; nothing due: why)."""
    storage = storage_for(table)
    lock, factory = lock_from_option(lock_option, storage, LockSettings(wait_ms=lock_wait_ms,
                                                                         retries=lock_retries))
    try:
        instant, result = scheduler(storage, lock, settings, dry_run=dry_run,
                                    time_settings=TimeSettings(max_expected_clock_skew_ms=clock_skew_ms))
    finally:
        if factory is not None:
            factory.close()
    if instant is not None:
        click.echo(f"{instant.requested_time} {label} requested: {result.summary()}")
    elif result.plan is not None:
        click.echo(f"dry run: {result.summary()}")
    else:
        click.echo(result.summary())


@click.command()
@click.argument("table")
@click.option("--instant", "instant_time", default=None, help="Run only this pending instant (default: all).")
@click.option("--parallelism", type=click.IntRange(min=1), default=DEFAULT_PARALLELISM, show_default=True,
              help="Files deleted at the same time.")
@click.option("--heartbeat-interval-ms", type=click.IntRange(min=10), default=DEFAULT_INTERVAL_MS,
              show_default=True, help="hoodie.client.heartbeat.interval_in_ms (same for every executor).")
@click.option("--force", is_flag=True,
              help="Run a clean even when its heartbeat says another executor is alive.")
@click.option("--spark", "spark_master", default="local", show_default=True,
              help="Spark for compactions, log compactions, clusterings and indexing: local, local[N] "
                   "or sc://HOST:PORT (Spark Connect).")
@click.option("--spark-conf", multiple=True, metavar="KEY=VALUE", help="A Spark setting, repeatable.")
@lock_options
def execute(table: str, instant_time: str | None, parallelism: int, heartbeat_interval_ms: int, force: bool,
            spark_master: str, spark_conf: tuple[str, ...],
            lock_option: str, lock_wait_ms: int, lock_retries: int, clock_skew_ms: int) -> None:
    """Run the pending table services of TABLE.

    Oldest first; the other pending instants are listed. Cleans, compactions, log
    compactions, clusterings and indexing, whoever planned them (Apache Hudi's plans
    included); a failed attempt is rolled back (an indexing aborted) first."""
    # service.compaction and service.spark_jobs import this module
    from hoodied.service.cli.schedule import parse_key_values, terminal_progress
    from hoodied.service.spark_jobs import SPARK_SERVICES, SparkRunner

    if instant_time is not None:
        require_instant_time(instant_time)
    spark_settings = parse_key_values(spark_conf, "--spark-conf")
    storage = storage_for(table)
    settings = LockSettings(wait_ms=lock_wait_ms, retries=lock_retries)
    lock, factory = lock_from_option(lock_option, storage, settings)
    times = TimeSettings(max_expected_clock_skew_ms=clock_skew_ms)
    # Spark starts only when a Spark service is pending
    spark = SparkRunner(
        storage, lock, spark=spark_master, spark_conf=spark_settings, time_settings=times,
        heartbeat_interval_ms=heartbeat_interval_ms, force=force, progress=terminal_progress,
    )
    try:
        outcomes = execute_pending(
            storage, lock, instant_time, time_settings=times,
            parallelism=parallelism, heartbeat_interval_ms=heartbeat_interval_ms, force=force,
            runners={name: spark for name, spec in SPARK_SERVICES.items() if spec.available()},
        )
    finally:
        spark.close()
        if factory is not None:
            factory.close()
    if not outcomes:
        click.echo("nothing pending")
    for outcome in outcomes:
        click.echo(outcome.message)


#: Commands for ``service.cli.main`` to add to its group.
COMMANDS = [execute, rollback, schedule]
