"""``hoodied schedule clean|compaction|log-compaction|clustering``: plan one instant of a service.

Each command plans under the table lock with a TrueTime instant, writes the requested instant and
prints it with a one-line summary (``--dry-run``: the summary only, nothing written; nothing due:
why; ``--json``: one document; ``--detailed-exit-code``: nothing due exits 7). The planners own
the work (``planners.clean.schedule_clean``,
``planners.compaction.schedule_compaction``, ...); this module only turns options into settings.

- clean: ``--policy`` (``hoodie.clean.policy``) and ``--retained``. A pending clean blocks a new
  plan, so concurrent schedulers produce exactly one. On a table whose writers use
  ``hoodie.cleaner.policy.failed.writes=LAZY`` (``hoodie.properties`` or ``-o``), failed data
  writes are rolled back first (``service.failed_writes.schedule_clean_after_failed_writes``).
- compaction, log compaction, clustering: Hudi's keys, repeatable ``--option KEY=VALUE``:
  ``hoodie.compact.inline.max.delta.commits``, ``hoodie.compaction.strategy``, ...;
  ``hoodie.log.compaction.blocks.threshold``; ``hoodie.clustering.plan.strategy.*`` (the keys of
  ``service.config.CLUSTERING_OPTION_KEYS``).

Pending instants are executed by ``hoodied execute`` (``service.cli.services``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import click

from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.timeline.instant import Instant
from hoodied.hoodie.timeline.truetime import TimeSettings
from hoodied.planners.clean import CleanPolicy, CleanSettings
from hoodied.planners.clustering import schedule_clustering
from hoodied.planners.compaction import CompactionSettings, schedule_compaction
from hoodied.planners.failed_writes import FAILED_WRITES_KEYS, FailedWritesSettings
from hoodied.planners.log_compaction import LogCompactionSettings, schedule_log_compaction
from hoodied.service.cli.options import (
    detailed_exit_code_option,
    echo_json,
    finish,
    json_option,
    lock_options,
    parse_key_values,
)
from hoodied.service.config import ClusteringService
from hoodied.service.failed_writes import schedule_clean_after_failed_writes
from hoodied.service.locks import lock_from_option

__all__ = ["schedule", "schedule_and_report"]


#: schedule(storage, lock, settings, *, dry_run, time_settings) -> (Instant | None, plan result)
Scheduler = Callable[..., tuple[Instant | None, Any]]


def schedule_and_report(
    label: str,
    scheduler: Scheduler,
    settings: Any,
    table: str,
    dry_run: bool,
    lock_option: str,
    lock_wait_ms: int,
    lock_retries: int,
    clock_skew_ms: int,
    as_json: bool = False,
    detailed_exit_code: bool = False,
) -> None:
    """Run a ``schedule`` command: ``scheduler(storage, lock, settings, *, dry_run, time_settings)``
    under the ``--lock`` options, then print the new instant and the plan's summary (a dry run:
    the summary; nothing due: why), or with ``as_json`` one document: ``table``, ``service``,
    ``planned`` (an instant was written), ``due`` (a plan was made, dry run included),
    ``dry_run``, ``instant`` (its requested time or null) and ``summary``. Nothing due exits
    ``EXIT_NOTHING_DUE`` with ``detailed_exit_code``."""
    storage = storage_for(table)
    lock, factory = lock_from_option(lock_option, storage, LockSettings(wait_ms=lock_wait_ms,
                                                                         retries=lock_retries))
    try:
        instant, result = scheduler(storage, lock, settings, dry_run=dry_run,
                                    time_settings=TimeSettings(max_expected_clock_skew_ms=clock_skew_ms))
    finally:
        if factory is not None:
            factory.close()
    due = instant is not None or result.plan is not None
    if as_json:
        echo_json({
            "table": storage.base_uri, "service": label, "planned": instant is not None, "due": due,
            "dry_run": dry_run, "instant": instant.requested_time if instant is not None else None,
            "summary": result.summary(),
        })
    elif instant is not None:
        click.echo(f"{instant.requested_time} {label} requested: {result.summary()}")
    elif result.plan is not None:
        click.echo(f"dry run: {result.summary()}")
    else:
        click.echo(result.summary())
    finish(not due, detailed_exit_code)


@click.group()
def schedule() -> None:
    """Plan a table service and write its requested instant."""


@schedule.command("clean")
@click.argument("table")
@click.option("--policy", type=click.Choice([p.value for p in CleanPolicy]),
              default=CleanPolicy.KEEP_LATEST_COMMITS.value, show_default=True, help="hoodie.clean.policy")
@click.option("--retained", type=click.IntRange(min=1), default=None,
              help="Commits retained (default 10), file versions (default 3) or hours (default 24).")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="Hudi's failed-writes keys: hoodie.cleaner.policy.failed.writes (LAZY: roll back failed "
                   "writes first), hoodie.client.heartbeat.interval_in_ms, "
                   "hoodie.client.heartbeat.tolerable.misses (default: the table's hoodie.properties).")
@click.option("--dry-run", is_flag=True, help="Print the plan summary, write nothing.")
@json_option
@detailed_exit_code_option
@lock_options
def schedule_clean_command(table: str, policy: str, retained: int | None, options: tuple[str, ...],
                           dry_run: bool, as_json: bool, detailed_exit_code: bool, lock_option: str,
                           lock_wait_ms: int, lock_retries: int, clock_skew_ms: int) -> None:
    """Plan a clean (HoodieCleanerPlan) and print the new instant and a summary, or why nothing is due.

    On a table whose writers use hoodie.cleaner.policy.failed.writes=LAZY, failed data writes
    (pending, heartbeat expired) are rolled back first, newest first, as Hudi's clean does."""
    failed_writes = parse_key_values(options, "--option")
    # the -o keys of schedule clean: Hudi's failed-writes policy and its writers' heartbeats
    unknown = sorted(set(failed_writes) - {name for key in FAILED_WRITES_KEYS for name in key.names})
    if unknown:
        expected = ", ".join(key.key for key in FAILED_WRITES_KEYS)
        raise click.BadParameter(f"unknown key {unknown[0]} (expected one of {expected})",
                                 param_hint="--option")
    try:
        FailedWritesSettings.from_options(failed_writes)  # a bad value: one line, nothing touched
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--option") from None
    chosen = CleanPolicy(policy)
    kw: dict[str, int] = {}
    if retained is not None:
        kw = {
            CleanPolicy.KEEP_LATEST_COMMITS: {"commits_retained": retained},
            CleanPolicy.KEEP_LATEST_FILE_VERSIONS: {"file_versions_retained": retained},
            CleanPolicy.KEEP_LATEST_BY_HOURS: {"hours_retained": retained},
        }[chosen]
    settings = CleanSettings(policy=chosen, **kw)  # type: ignore[arg-type]
    scheduler = functools.partial(schedule_clean_after_failed_writes, options=failed_writes)
    schedule_and_report("clean", scheduler, settings, table, dry_run, lock_option, lock_wait_ms,
                        lock_retries, clock_skew_ms, as_json, detailed_exit_code)


def _schedule_command(
    name: str,
    help_text: str,
    option_help: str,
    settings_from: Callable[[Mapping[str, str]], Any],
    scheduler: Scheduler,
) -> click.Command:
    """``schedule NAME TABLE [--option KEY=VALUE ...] [--dry-run]`` for one Spark service."""
    label = name.replace("-", " ")

    @click.command(name, help=help_text)
    @click.argument("table")
    @click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help=option_help)
    @click.option("--dry-run", is_flag=True, help="Print the plan summary, write nothing.")
    @json_option
    @detailed_exit_code_option
    @lock_options
    def command(table: str, options: tuple[str, ...], dry_run: bool, as_json: bool, detailed_exit_code: bool,
                lock_option: str, lock_wait_ms: int, lock_retries: int, clock_skew_ms: int) -> None:
        try:
            settings = settings_from(parse_key_values(options, "--option"))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--option") from None
        schedule_and_report(label, scheduler, settings, table, dry_run, lock_option, lock_wait_ms,
                            lock_retries, clock_skew_ms, as_json, detailed_exit_code)

    return command


_COMPACTION = _schedule_command(
    "compaction",
    "Plan a compaction (HoodieCompactionPlan) of a merge-on-read table; print the instant and a summary.",
    "A Hudi compaction option, repeatable: hoodie.compact.inline.max.delta.commits (5), "
    "hoodie.compact.inline.max.delta.seconds (3600), hoodie.compact.inline.trigger.strategy "
    "(NUM_COMMITS), hoodie.compaction.strategy (LogFileSizeBasedCompactionStrategy), "
    "hoodie.compaction.target.io (512000 MB), hoodie.compaction.logfile.size.threshold (0).",
    CompactionSettings.from_options,
    schedule_compaction,
)
_LOG_COMPACTION = _schedule_command(
    "log-compaction",
    "Plan a log compaction of a merge-on-read table (file slices with many log blocks); print the "
    "instant and a summary.",
    "A Hudi log compaction option, repeatable: hoodie.log.compaction.blocks.threshold (5).",
    LogCompactionSettings.from_options,
    schedule_log_compaction,
)
_CLUSTERING = _schedule_command(
    "clustering",
    "Plan a clustering (HoodieRequestedReplaceMetadata, operation CLUSTER) of small base files; print "
    "the instant and a summary.",
    "A Hudi clustering plan option, repeatable: hoodie.clustering.plan.strategy.small.file.limit "
    "(314572800 bytes), .max.bytes.per.group (2147483648), .target.file.max.bytes (1073741824), "
    ".max.num.groups (30), .sort.columns (none), .single.group.clustering.enabled (true).",
    lambda options: ClusteringService.from_options(options).settings(),
    schedule_clustering,
)

for _command in (_COMPACTION, _LOG_COMPACTION, _CLUSTERING):
    schedule.add_command(_command)
