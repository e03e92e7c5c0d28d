"""The Spark table services on the command line: ``hoodied schedule compaction|log-compaction|clustering``.

Each ``schedule`` command plans one instant of its service under the table lock with a TrueTime
instant and prints it with a one-line summary (``--dry-run``: the summary only, nothing
written). Options are Hudi's keys, repeatable ``--option KEY=VALUE``:

- compaction (``planners.compaction``): ``hoodie.compact.inline.max.delta.commits``,
  ``hoodie.compact.inline.trigger.strategy``, ``hoodie.compaction.strategy``,
  ``hoodie.compaction.target.io``, ...;
- log compaction (``planners.log_compaction``): ``hoodie.log.compaction.blocks.threshold``;
- clustering (``planners.clustering``): ``hoodie.clustering.plan.strategy.*`` (the keys of
  ``service.config.CLUSTERING_OPTION_KEYS``).

Pending instants of these services are executed by ``hoodied execute`` through
``service.spark_jobs.SparkRunner`` (rollback-then-retry); ``run_compaction`` is that runner's
function for one compaction.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

import click

from hoodied.executors.compaction import CompactionResult
from hoodied.executors.engine import Progress, Session
from hoodied.hoodie.heartbeat import DEFAULT_INTERVAL_MS, DEFAULT_TOLERABLE_MISSES
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.service.cli.services import lock_options, schedule_and_report
from hoodied.service.config import ClusteringService
from hoodied.service.spark_jobs import run_spark_service

__all__ = ["SCHEDULE_COMMANDS", "parse_key_values", "progress_bar", "run_compaction"]


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
    """Execute the pending compaction ``instant_time``, rolling back a failed attempt first
    (``service.spark_jobs.run_spark_service``)."""
    return cast(CompactionResult, run_spark_service(
        storage, lock, instant_time, session, service="compaction", time_settings=time_settings,
        heartbeat_interval_ms=heartbeat_interval_ms, tolerable_misses=tolerable_misses, force=force,
        progress=progress,
    ))


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


def terminal_progress(label: str) -> contextlib.AbstractContextManager[Progress | None]:
    """``SparkRunner``'s progress: a bar when standard error is a terminal."""
    return progress_bar(label, sys.stderr.isatty())


def parse_key_values(values: Iterable[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` -> dict; a value without ``=`` is a usage error naming ``what``."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint=what)
        out[key.strip()] = value.strip()
    return out


#: schedule(storage, lock, settings, *, dry_run, time_settings) -> (Instant | None, plan result)
Scheduler = Callable[..., tuple[Any, Any]]


def _schedule_command(
    name: str,
    help_text: str,
    option_help: str,
    settings_from: Callable[[Mapping[str, str]], Any],
    scheduler: Callable[[], Scheduler],
) -> click.Command:
    """``schedule NAME TABLE [--option KEY=VALUE ...] [--dry-run]`` for one Spark service."""
    label = name.replace("-", " ")

    @click.command(name, help=help_text)
    @click.argument("table")
    @click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help=option_help)
    @click.option("--dry-run", is_flag=True, help="Print the plan summary, write nothing.")
    @lock_options
    def command(table: str, options: tuple[str, ...], dry_run: bool, lock_option: str, lock_wait_ms: int,
                lock_retries: int, clock_skew_ms: int) -> None:
        try:
            settings = settings_from(parse_key_values(options, "--option"))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--option") from None
        schedule_and_report(label, scheduler(), settings, table, dry_run, lock_option, lock_wait_ms,
                            lock_retries, clock_skew_ms)

    return command


def _compaction_settings(options: Mapping[str, str]) -> Any:
    from hoodied.planners.compaction import CompactionSettings

    return CompactionSettings.from_options(options)


def _compaction_scheduler() -> Scheduler:
    from hoodied.planners.compaction import schedule_compaction

    return schedule_compaction


def _log_compaction_settings(options: Mapping[str, str]) -> Any:
    from hoodied.planners.log_compaction import LogCompactionSettings

    return LogCompactionSettings.from_options(options)


def _log_compaction_scheduler() -> Scheduler:
    from hoodied.planners.log_compaction import schedule_log_compaction

    return schedule_log_compaction


def _clustering_scheduler() -> Scheduler:
    from hoodied.planners.clustering import schedule_clustering

    return schedule_clustering


_COMPACTION = _schedule_command(
    "compaction",
    "Plan a compaction (HoodieCompactionPlan) of a merge-on-read table; print the instant and a summary.",
    "A Hudi compaction option, repeatable: hoodie.compact.inline.max.delta.commits (5), "
    "hoodie.compact.inline.max.delta.seconds (3600), hoodie.compact.inline.trigger.strategy "
    "(NUM_COMMITS), hoodie.compaction.strategy (LogFileSizeBasedCompactionStrategy), "
    "hoodie.compaction.target.io (512000 MB), hoodie.compaction.logfile.size.threshold (0).",
    _compaction_settings,
    _compaction_scheduler,
)
_LOG_COMPACTION = _schedule_command(
    "log-compaction",
    "Plan a log compaction of a merge-on-read table (file slices with many log blocks); print the "
    "instant and a summary.",
    "A Hudi log compaction option, repeatable: hoodie.log.compaction.blocks.threshold (5).",
    _log_compaction_settings,
    _log_compaction_scheduler,
)
_CLUSTERING = _schedule_command(
    "clustering",
    "Plan a clustering (HoodieRequestedReplaceMetadata, operation CLUSTER) of small base files; print "
    "the instant and a summary.",
    "A Hudi clustering plan option, repeatable: hoodie.clustering.plan.strategy.small.file.limit "
    "(314572800 bytes), .max.bytes.per.group (2147483648), .target.file.max.bytes (1073741824), "
    ".max.num.groups (30), .sort.columns (none), .single.group.clustering.enabled (true).",
    lambda options: ClusteringService.from_options(options).settings(),
    _clustering_scheduler,
)

#: ``schedule`` sub-commands of the Spark services whose planner is installed
#: (``service.cli.main`` adds them).
SCHEDULE_COMMANDS = [
    command
    for command, planner in (
        (_COMPACTION, "hoodied.planners.compaction"),
        (_LOG_COMPACTION, "hoodied.planners.log_compaction"),
        (_CLUSTERING, "hoodied.planners.clustering"),
    )
    if importlib.util.find_spec(planner) is not None
]
