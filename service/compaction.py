"""Compaction in the service layer: rollback-then-retry around the Spark executor, and its commands.

``run_compaction`` is what ``hoodied execute`` calls for a pending compaction:

1. a compaction that is inflight (or that a pending rollback targets) is a failed attempt
   unless its heartbeat is alive: it is rolled back exactly as Apache Hudi does before it
   retries one (``service.cli_services.rollback_failed_attempt``: a rollback instant whose
   plan deletes the attempt's files, then the compaction is requested again);
2. the compaction is executed from its unchanged plan (``executors.compaction``).

A live attempt (fresh heartbeat) is left alone: ``InstantStateError``.

``hoodied schedule compaction TABLE [--option KEY=VALUE ...]`` plans one
(``planners.compaction``; option keys are Hudi's, e.g. ``hoodie.compact.inline.max.delta.commits``,
``hoodie.compact.inline.trigger.strategy``, ``hoodie.compaction.strategy``,
``hoodie.compaction.target.io``). ``hoodied execute TABLE --spark local|local[N]|sc://HOST:PORT
[--spark-conf k=v ...]`` runs pending compactions through ``CompactionRunner``, which starts
Spark only when a compaction is actually pending.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack

import click

from executors.compaction import CompactionResult, execute_compaction
from executors.engine import LOCAL, Progress, Session, spark_session
from hoodie.errors import InstantStateError
from hoodie.heartbeat import DEFAULT_INTERVAL_MS, DEFAULT_TOLERABLE_MISSES
from hoodie.instant import Action, Instant, State
from hoodie.locks import LockSettings, TableLock
from hoodie.properties import load_table_config
from hoodie.storage import Storage, storage_for
from hoodie.timeline import Timeline
from hoodie.truetime import TimeSettings
from planners.compaction import CompactionSettings, schedule_compaction
from planners.rollback import pending_rollback_for
from service.cli_services import ExecuteOutcome, lock_options, rollback_failed_attempt
from service.locks import lock_from_option

log = logging.getLogger(__name__)

__all__ = [
    "CompactionRunner", "parse_key_values", "progress_bar", "run_compaction", "schedule_compaction_command",
]


def run_compaction(
    storage: Storage,
    lock: TableLock,
    instant_time: str,
    session: Session,
    *,
    time_settings: TimeSettings | None = None,
    heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    force: bool = False,
    progress: Progress | None = None,
) -> CompactionResult:
    """Execute the pending compaction ``instant_time``, rolling back a failed attempt first.

    ``force`` rolls back an inflight attempt even when its heartbeat looks alive;
    ``progress(done, total)`` hears of completed operations (``executors.engine.run_operations``).
    """
    config = load_table_config(storage)
    timeline = Timeline.load(storage, config)
    inst = timeline.get(instant_time)
    if inst is None or inst.action is not Action.COMPACTION:
        raise InstantStateError(
            f"{storage.base_uri}: no compaction instant {instant_time} on the active timeline"
        )
    if inst.is_pending and (inst.state is State.INFLIGHT or pending_rollback_for(timeline, instant_time)):
        rolled = rollback_failed_attempt(
            storage, instant_time, lock, force=force, heartbeat_interval_ms=heartbeat_interval_ms,
            tolerable_misses=tolerable_misses, time_settings=time_settings,
        )
        if rolled is not None:
            log.info("%s compaction: failed attempt rolled back by %s (%d files deleted)", instant_time,
                     rolled.rollback.requested_time, len(rolled.deleted))
    return execute_compaction(
        storage, config, lock, instant_time, session, time_settings=time_settings,
        heartbeat_interval_ms=heartbeat_interval_ms, tolerable_misses=tolerable_misses, progress=progress,
    )


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool) -> Iterator[Progress | None]:
    """A stderr progress bar of operations done / total (``hoodied read``'s style), or nothing."""
    if not enabled:
        yield None
        return
    with click.progressbar(length=1, label=label, file=sys.stderr, show_pos=True) as bar:

        def update(done: int, total: int) -> None:
            bar.length = max(total, 1)
            bar.update(done - bar.pos)

        yield update


class CompactionRunner:
    """Runs pending compactions for ``execute``; the Spark session starts at the first one.

    Call it with a pending compaction instant; ``close()`` stops the session it started.
    ``show_progress`` draws a progress bar of the operations on stderr (for a terminal).
    """

    def __init__(
        self,
        storage: Storage,
        lock: TableLock,
        *,
        spark: str = LOCAL,
        spark_conf: Mapping[str, str] | None = None,
        time_settings: TimeSettings | None = None,
        heartbeat_interval_ms: int = DEFAULT_INTERVAL_MS,
        tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
        force: bool = False,
        show_progress: bool = False,
    ) -> None:
        self.show_progress = show_progress
        self.storage = storage
        self.lock = lock
        self.spark = spark
        self.spark_conf = dict(spark_conf or {})
        self.time_settings = time_settings
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.tolerable_misses = tolerable_misses
        self.force = force
        self._stack = ExitStack()
        self._session: Session | None = None

    def session(self) -> Session:
        if self._session is None:
            self._session = self._stack.enter_context(spark_session(self.spark, self.spark_conf))
        return self._session

    def __call__(self, inst: Instant) -> ExecuteOutcome:
        session = self.session()
        with progress_bar(f"compaction {inst.requested_time}", self.show_progress) as progress:
            result = run_compaction(
                self.storage, self.lock, inst.requested_time, session, time_settings=self.time_settings,
                heartbeat_interval_ms=self.heartbeat_interval_ms, tolerable_misses=self.tolerable_misses,
                force=self.force, progress=progress,
            )
        return ExecuteOutcome(result.instant, "executed", result.summary())

    def close(self) -> None:
        self._stack.close()
        self._session = None


def parse_key_values(values: Iterable[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` -> dict; a value without ``=`` is a usage error naming ``what``."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint=what)
        out[key.strip()] = value.strip()
    return out


@click.command("compaction")
@click.argument("table")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="A Hudi compaction option, repeatable: hoodie.compact.inline.max.delta.commits (5), "
                   "hoodie.compact.inline.max.delta.seconds (3600), hoodie.compact.inline.trigger.strategy "
                   "(NUM_COMMITS), hoodie.compaction.strategy (LogFileSizeBasedCompactionStrategy), "
                   "hoodie.compaction.target.io (512000 MB), hoodie.compaction.logfile.size.threshold (0).")
@click.option("--dry-run", is_flag=True, help="Print the plan summary, write nothing.")
@lock_options
def schedule_compaction_command(table: str, options: tuple[str, ...], dry_run: bool, lock_option: str,
                                lock_wait_ms: int, lock_retries: int, clock_skew_ms: int) -> None:
    """Plan a compaction (HoodieCompactionPlan) of a merge-on-read table; print the instant and a summary."""
    try:
        settings = CompactionSettings.from_options(parse_key_values(options, "--option"))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--option") from None
    storage = storage_for(table)
    lock_settings = LockSettings(wait_ms=lock_wait_ms, retries=lock_retries)
    lock, factory = lock_from_option(lock_option, storage, lock_settings)
    times = TimeSettings(max_expected_clock_skew_ms=clock_skew_ms)
    try:
        instant, result = schedule_compaction(storage, lock, settings, dry_run=dry_run, time_settings=times)
    finally:
        if factory is not None:
            factory.close()
    if instant is not None:
        click.echo(f"{instant.requested_time} compaction requested: {result.summary()}")
    elif result.plan is not None:
        click.echo(f"dry run: {result.summary()}")
    else:
        click.echo(result.summary())
