"""``hoodied rollback``, ``hoodied unschedule`` and ``hoodied execute``: the commands that run or undo
table-service work.

``rollback TABLE --instant T``: roll back a failed attempt of a pending table service
(compaction, log compaction, clustering; indexing is aborted instead, as Hudi's
``RunIndexActionExecutor.abort`` does): ``service.operations.rollback_failed_attempt``. A live
attempt (heartbeat not expired, judged with ``--heartbeat-interval-ms`` as ``execute`` does) is
refused unless ``--force``. When T is a failed data write (a pending commit, delta commit or
replace commit that is not a clustering, or the target of a pending rollback of one):
``service.failed_writes.rollback_failed_write``, only on a table whose writers use
``hoodie.cleaner.policy.failed.writes=LAZY`` (its ``hoodie.properties`` or ``-o KEY=VALUE``, with
``hoodie.client.heartbeat.interval_in_ms`` and ``hoodie.client.heartbeat.tolerable.misses``); a
live heartbeat is refused, ``--force`` or not.

``unschedule clustering|compaction TABLE --instant T``: remove a requested plan nobody started
(``service.operations.unschedule``): a clustering is rolled back and removed, a compaction's
requested file deleted, as Hudi does; an inflight plan is refused.

``execute TABLE [--instant T]``: run pending instants, whoever requested them (a plan written by
Apache Hudi included): all of them, oldest first, or the one given
(``service.operations.execute_pending``). Cleans run here; compactions, log compactions,
clusterings and indexings run on Spark (``--spark``, ``--spark-conf``; ``service.spark_jobs``,
which starts Spark only when one of them is pending), a failed attempt rolled back first. Other
pending instants (a data write in progress, its writer's rollback) are listed and left untouched;
a clean whose heartbeat is alive belongs to another executor and is skipped. Before it runs a
clean on a table whose writers use ``hoodie.cleaner.policy.failed.writes=LAZY`` (its
``hoodie.properties`` or ``-o KEY=VALUE``), it rolls back the failed data writes first, as Hudi's
clean does (``service.failed_writes.rollback_failed_writes``).

Both take the lock options of ``service.cli.options.lock_options``, and a TABLE on a local file
system or an object store (``hoodie.storage_factory.storage_for``: ``s3://``, ``az://``, ...; a missing
bucket or refused credentials are a ``StorageError``, one line and exit code 6). A Spark engine that
cannot be reached or started within ``--spark-start-timeout``, or is lost mid-job, is an
``EngineUnavailableError``: one line and exit code 6 too; the session starts before a pending instant
is touched, and an attempt the lost engine was running stays inflight, rolled back by the next run.
On a terminal, ``execute`` turns a spinner while the session starts (a plan is checked before) and
draws a bar while a job runs; ``--spark-log-level`` (ERROR by default) holds a local Spark's own log
lines (``service.spark_jobs.spark_log_conf``). Both commands take ``--json`` (one document on standard
output) and ``--detailed-exit-code`` (exit 7 when there was nothing to run or roll back).
"""

from __future__ import annotations

import click

from hoodied.executors.clean import DEFAULT_PARALLELISM
from hoodied.executors.rollback import RollbackResult
from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.heartbeat import DEFAULT_INTERVAL_MS
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.failed_writes import HEARTBEAT_INTERVAL_KEY
from hoodied.service.cli.options import (
    INSTANT_TIME,
    detailed_exit_code_option,
    echo_json,
    finish,
    json_option,
    lock_options,
    parse_key_values,
)
from hoodied.service.cli.terminal import interactive, progress_bar, spinner
from hoodied.service.failed_writes import (
    is_failed_write_target,
    rollback_failed_write,
    rollback_failed_writes,
)
from hoodied.service.locks import lock_from_option
from hoodied.service.operations import ExecuteStatus, execute_pending, rollback_failed_attempt
from hoodied.service.operations import unschedule as unschedule_plan
from hoodied.service.spark_jobs import (
    DEFAULT_SPARK_LOG_LEVEL,
    DEFAULT_START_TIMEOUT_S,
    SPARK_LOG_LEVELS,
    SPARK_SERVICES,
    SparkRunner,
)

__all__ = ["execute", "rollback", "unschedule"]


@click.command()
@click.argument("table")
@click.option("--instant", "instant_time", required=True, type=INSTANT_TIME,
              help="Requested time of the failed table service or data write.")
@click.option("--force", is_flag=True,
              help="Roll back a table service even when its heartbeat is still alive (never a data write).")
@click.option("--heartbeat-interval-ms", type=click.IntRange(min=10), default=DEFAULT_INTERVAL_MS,
              show_default=True,
              help="hoodie.client.heartbeat.interval_in_ms of the failed attempt's executor.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="A Hudi writer setting for failed data writes, repeatable: "
                   "hoodie.cleaner.policy.failed.writes, hoodie.client.heartbeat.interval_in_ms, "
                   "hoodie.client.heartbeat.tolerable.misses (over the table's hoodie.properties).")
@json_option
@detailed_exit_code_option
@lock_options
@click.pass_context
def rollback(
    ctx: click.Context,
    table: str,
    instant_time: str,
    force: bool,
    heartbeat_interval_ms: int,
    options: tuple[str, ...],
    as_json: bool,
    detailed_exit_code: bool,
    lock_option: str,
    lock_wait_ms: int,
    lock_retries: int,
    clock_skew_ms: int,
) -> None:
    """Roll back a failed table-service attempt or a failed data write.

    As Apache Hudi does before a retry: a compaction, log compaction or clustering gets a
    rollback instant that deletes the attempt's files; a failed indexing attempt is aborted
    (its metadata-table partition is dropped). The service is then requested again with its
    unchanged plan. A failed data write (commit, delta commit, insert overwrite, delete
    partition) on a table with hoodie.cleaner.policy.failed.writes=LAZY whose heartbeat expired
    is rolled back as Hudi's clean does it: its files and its instant are gone."""
    writer_options = parse_key_values(options, "--option")
    if ctx.get_parameter_source("heartbeat_interval_ms") is not click.core.ParameterSource.DEFAULT:
        writer_options.setdefault(HEARTBEAT_INTERVAL_KEY, str(heartbeat_interval_ms))
    storage = storage_for(table)
    settings = LockSettings(wait_ms=lock_wait_ms, retries=lock_retries)
    lock, factory = lock_from_option(lock_option, storage, settings)
    times = TimeSettings(max_expected_clock_skew_ms=clock_skew_ms)
    try:
        if is_failed_write_target(storage, instant_time):
            try:
                data = rollback_failed_write(storage, instant_time, lock, writer_options, time_settings=times)
            except ValueError as exc:  # a bad -o value
                raise click.BadParameter(str(exc), param_hint="--option") from None
            _rolled_back(storage, instant_time, "failed_write", data.summary(), as_json)
            return
        result = rollback_failed_attempt(
            storage,
            instant_time,
            lock,
            force=force,
            heartbeat_interval_ms=heartbeat_interval_ms,
            time_settings=times,
        )
    finally:
        if factory is not None:
            factory.close()
    if result is None:
        _rolled_back(storage, instant_time, "table_service", None, as_json)
        finish(True, detailed_exit_code)
        return
    _rolled_back(storage, instant_time, "table_service", result.summary(), as_json)


@click.command()
@click.argument("service", type=click.Choice(["clustering", "compaction"]))
@click.argument("table")
@click.option("--instant", "instant_time", required=True, type=INSTANT_TIME,
              help="The requested plan to remove.")
@json_option
@lock_options
def unschedule(service: str, table: str, instant_time: str, as_json: bool, lock_option: str,
               lock_wait_ms: int, lock_retries: int, clock_skew_ms: int) -> None:
    """Remove a requested clustering or compaction plan that nobody started.

    Under the table lock, as Apache Hudi leaves the table: a clustering is rolled back (a
    rollback instant with nothing to delete) and its plan removed from the timeline; a
    compaction's requested file is deleted, as Hudi's `compaction unschedule` does. An inflight
    plan is refused: roll its attempt back first (`hoodied rollback`). The file groups of the
    plan can then be planned again."""
    storage = storage_for(table)
    settings = LockSettings(wait_ms=lock_wait_ms, retries=lock_retries)
    lock, factory = lock_from_option(lock_option, storage, settings)
    times = TimeSettings(max_expected_clock_skew_ms=clock_skew_ms)
    try:
        result = unschedule_plan(storage, TableService(service), instant_time, lock, time_settings=times)
    finally:
        if factory is not None:
            factory.close()
    rollback_time = result.rollback.requested_time if result is not None else None
    how = f"rollback {rollback_time}" if rollback_time else "its requested file deleted"
    text = f"{service} {instant_time}: unscheduled ({how}); its file groups can be planned again"
    if as_json:
        echo_json({"table": storage.base_uri, "instant": instant_time, "service": service,
                   "rollback": rollback_time, "summary": text})
    else:
        click.echo(text)


def _rolled_back(storage: Storage, instant_time: str, kind: str, summary: str | None, as_json: bool) -> None:
    """``rollback``'s result: its summary, or ``--json``'s ``table``, ``instant``, ``kind``
    (``table_service``, ``failed_write``), ``rolled_back`` and ``summary``; ``None``: only requested."""
    text = summary if summary is not None else f"{instant_time}: only requested, nothing to roll back"
    if as_json:
        echo_json({"table": storage.base_uri, "instant": instant_time, "kind": kind,
                   "rolled_back": summary is not None, "summary": text})
    else:
        click.echo(text)


@click.command()
@click.argument("table")
@click.option("--instant", "instant_time", default=None, type=INSTANT_TIME,
              help="Run only this pending instant (default: all).")
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
@click.option("--spark-start-timeout", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_START_TIMEOUT_S, show_default=True, metavar="SECONDS",
              help="Longest Spark session start (a Spark Connect server's connect and handshake, a local "
                   "JVM's start); beyond it, or when the server is unreachable or lost: one line, exit 6.")
@click.option("--spark-log-level", type=click.Choice(SPARK_LOG_LEVELS, case_sensitive=False),
              default=DEFAULT_SPARK_LOG_LEVEL, show_default=True,
              help="Level of a local Spark JVM's own log lines on standard error (from its start); WARN or "
                   "INFO to debug Spark itself. A Spark Connect server logs on its own side.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="A Hudi writer setting, repeatable: hoodie.cleaner.policy.failed.writes=LAZY rolls back "
                   "failed data writes before a clean runs (with hoodie.client.heartbeat.interval_in_ms, "
                   "hoodie.client.heartbeat.tolerable.misses; over the table's hoodie.properties).")
@json_option
@detailed_exit_code_option
@lock_options
def execute(table: str, instant_time: str | None, parallelism: int, heartbeat_interval_ms: int, force: bool,
            spark_master: str, spark_conf: tuple[str, ...], spark_start_timeout: float, spark_log_level: str,
            options: tuple[str, ...], as_json: bool, detailed_exit_code: bool, lock_option: str,
            lock_wait_ms: int, lock_retries: int, clock_skew_ms: int) -> None:
    """Run the pending table services of TABLE.

    Oldest first; the other pending instants are listed. Cleans, compactions, log
    compactions, clusterings and indexing, whoever planned them (Apache Hudi's plans
    included); a failed attempt is rolled back (an indexing aborted) first."""
    spark_settings = parse_key_values(spark_conf, "--spark-conf")
    storage = storage_for(table)
    settings = LockSettings(wait_ms=lock_wait_ms, retries=lock_retries)
    lock, factory = lock_from_option(lock_option, storage, settings)
    times = TimeSettings(max_expected_clock_skew_ms=clock_skew_ms)
    # Spark starts only when a Spark service is pending, after its plan was checked
    shown = interactive(as_json)
    spark = SparkRunner(
        storage, lock, spark=spark_master, spark_conf=spark_settings, time_settings=times,
        heartbeat_interval_ms=heartbeat_interval_ms, force=force,
        progress=lambda label: progress_bar(label, shown), start_timeout_s=spark_start_timeout,
        log_level=spark_log_level.upper(), starting=lambda what: spinner(what, shown),
    )
    rolled: list[RollbackResult] = []
    try:
        if _runs_a_clean(storage, instant_time):
            try:  # as Hudi's clean: failed writes first (LAZY only; nothing otherwise)
                rolled = rollback_failed_writes(storage, lock, parse_key_values(options, "--option"),
                                                time_settings=times)
            except ValueError as exc:  # a bad -o value
                raise click.BadParameter(str(exc), param_hint="--option") from None
            if not as_json:
                for done in rolled:
                    click.echo(f"failed write: {done.summary()}")
        outcomes = execute_pending(
            storage, lock, instant_time, time_settings=times,
            parallelism=parallelism, heartbeat_interval_ms=heartbeat_interval_ms, force=force,
            runners={name: spark for name, spec in SPARK_SERVICES.items() if spec.available()},
        )
    finally:
        spark.close()
        if factory is not None:
            factory.close()
    executed = sum(1 for o in outcomes if o.status is ExecuteStatus.EXECUTED)
    dropped = any(o.status is ExecuteStatus.DROPPED for o in outcomes)  # a rollback was written
    if as_json:
        echo_json({
            "table": storage.base_uri,
            "executed": executed,
            "failed_writes_rolled_back": [done.summary() for done in rolled],
            "instants": [
                {"instant": o.instant.requested_time, "action": o.instant.action.value,
                 "status": o.status.value, "message": o.message}
                for o in outcomes
            ],
        })
    else:
        if not outcomes:
            click.echo("nothing pending")
        for outcome in outcomes:
            click.echo(outcome.message)
    finish(executed == 0 and not rolled and not dropped, detailed_exit_code)


def _runs_a_clean(storage: Storage, instant_time: str | None) -> bool:
    """Whether ``execute`` is about to run a clean (the one asked for, or any pending one)."""
    timeline = Timeline.load(storage, load_table_config(storage))
    if instant_time is not None:
        inst = timeline.get(instant_time)
        return inst is not None and inst.action is Action.CLEAN and inst.is_pending
    return bool(timeline.pending((Action.CLEAN,)))
