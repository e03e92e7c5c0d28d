"""``hoodied rollback`` and ``hoodied execute``: the commands that run or undo table-service work.

``rollback TABLE --instant T``: roll back a failed attempt of a pending table service
(compaction, log compaction, clustering; indexing is aborted instead, as Hudi's
``RunIndexActionExecutor.abort`` does): ``service.operations.rollback_failed_attempt``. A live
attempt (heartbeat not expired, judged with ``--heartbeat-interval-ms`` as ``execute`` does) is
refused unless ``--force``.

``execute TABLE [--instant T]``: run pending instants, whoever requested them (a plan written by
Apache Hudi included): all of them, oldest first, or the one given
(``service.operations.execute_pending``). Cleans run here; compactions, log compactions,
clusterings and indexings run on Spark (``--spark``, ``--spark-conf``; ``service.spark_jobs``,
which starts Spark only when one of them is pending), a failed attempt rolled back first. Other
pending instants (a data write in progress, its writer's rollback) are listed and left untouched;
a clean whose heartbeat is alive belongs to another executor and is skipped.

Both take the lock options of ``service.cli.options.lock_options``, and a TABLE on a local file
system or an object store (``hoodie.storage.storage_for``: ``s3://``, ``az://``, ...; a missing
bucket or refused credentials are a ``StorageError``, one line and exit code 6).
"""

from __future__ import annotations

import click

from hoodied.executors.clean import DEFAULT_PARALLELISM
from hoodied.hoodie.heartbeat import DEFAULT_INTERVAL_MS
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.storage import storage_for
from hoodied.hoodie.timeline.instant import require_instant_time
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.service.cli.options import lock_options, parse_key_values, terminal_progress
from hoodied.service.locks import lock_from_option
from hoodied.service.operations import execute_pending, rollback_failed_attempt
from hoodied.service.spark_jobs import SPARK_SERVICES, SparkRunner

__all__ = ["execute", "rollback"]


@click.command()
@click.argument("table")
@click.option("--instant", "instant_time", required=True, help="Requested time of the failed table service.")
@click.option("--force", is_flag=True, help="Roll back even when its heartbeat is still alive.")
@click.option("--heartbeat-interval-ms", type=click.IntRange(min=10), default=DEFAULT_INTERVAL_MS,
              show_default=True,
              help="hoodie.client.heartbeat.interval_in_ms of the failed attempt's executor.")
@lock_options
def rollback(
    table: str,
    instant_time: str,
    force: bool,
    heartbeat_interval_ms: int,
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
            heartbeat_interval_ms=heartbeat_interval_ms,
            time_settings=TimeSettings(max_expected_clock_skew_ms=clock_skew_ms),
        )
    finally:
        if factory is not None:
            factory.close()
    if result is None:
        click.echo(f"{instant_time}: only requested, nothing to roll back")
        return
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

