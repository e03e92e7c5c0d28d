"""``hoodied archive TABLE [-o KEY=VALUE ...] [--dry-run]``: archive the active timeline.

Moves the completed instants Apache Hudi's archiver would move into the table's LSM timeline
history (table versions 8 and 9) or, for table version 6, into a new ``.hoodie/archived``
log file as Hudi 0.14 / 0.15 writes it (``executors.archival``), under the table lock of
``--lock``. ``-o`` takes Hudi's archival keys (``planners.archival.ArchivalSettings``):
``hoodie.keep.min.commits`` (20), ``hoodie.keep.max.commits`` (30),
``hoodie.archive.beyond.savepoint`` (false), ``hoodie.timeline.compaction.batch.size`` (10), and the
cleaner and compaction-trigger keys that bound it; ``hoodie.commits.archival.batch.size`` (10)
sets the records per block of a version-6 archive file, and ``hoodie.archive.merge.enable=true``
is refused (merging small archive files is not supported). On a table with a metadata table
(and ``hoodie.metadata.enable`` not false), the metadata table's own timeline is archived right
after, under the same lock, with the MDT writer's settings Hudi derives from these
(``planners.archival.mdt_archival_settings``; for table version 6 Hudi 0.15's,
``mdt_archival_settings_v6``, into ``.hoodie/metadata/.hoodie/archived``). ``--dry-run`` prints
what would be archived and where archival stops and why, for both, writing nothing. ``--json``
prints one document instead, and ``--detailed-exit-code`` exits 7 when nothing was (or would be)
archived.
"""

from __future__ import annotations

from typing import Any

import click

from hoodied.executors.archival import ArchivalResult, MdtArchival, execute_archival
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.properties import load_table_config
from hoodied.hoodie.storage_factory import storage_for
from hoodied.planners.archival import (
    ArchivalPlan,
    ArchivalSettings,
    archival_planner,
    mdt_archival_planner,
    mdt_archival_target,
)
from hoodied.service.cli.options import (
    detailed_exit_code_option,
    echo_json,
    finish,
    json_option,
    lock_options,
    parse_key_values,
)
from hoodied.service.locks import lock_from_option

__all__ = ["archive"]

_OPTION_HELP = (
    "A Hudi archival option, repeatable: hoodie.keep.min.commits (20), hoodie.keep.max.commits (30), "
    "hoodie.archive.beyond.savepoint (false), hoodie.timeline.compaction.batch.size (10), "
    "hoodie.clean.policy, hoodie.clean.commits.retained, hoodie.clean.hours.retained, "
    "hoodie.compact.inline.trigger.strategy, hoodie.compact.inline.max.delta.commits, "
    "hoodie.metadata.enable, hoodie.commits.archival.batch.size (10, table version 6); "
    "each also under the other names Hudi takes for it (hoodie.cleaner.commits.retained ...)."
)


@click.command()
@click.argument("table")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help=_OPTION_HELP)
@click.option(
    "--dry-run", is_flag=True, help="Print what would be archived and where it stops, write nothing."
)
@json_option
@detailed_exit_code_option
@lock_options
def archive(
    table: str,
    options: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
    detailed_exit_code: bool,
    lock_option: str,
    lock_wait_ms: int,
    lock_retries: int,
    clock_skew_ms: int,
) -> None:
    """Archive old completed instants of TABLE (versions 8 and 9: LSM history; 6: .hoodie/archived).

    Keeps what Apache Hudi's archiver keeps (hoodie.keep.min/max.commits, pending instants,
    savepoints, the cleaner's retention, the compaction trigger, the metadata table's latest
    compaction); then, as Hudi's metadata-table writer does, the metadata table's own timeline.
    Prints the instants archived and the boundary it stopped at. Archival writes no new instant,
    so --clock-skew-ms has no effect here."""
    try:
        settings = ArchivalSettings.from_options(parse_key_values(options, "--option"))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--option") from None
    storage = storage_for(table)
    config = load_table_config(storage)
    target = mdt_archival_target(storage, config, settings)
    mdt = (
        MdtArchival(target[0], target[1], mdt_archival_planner(settings, storage, config))
        if target is not None
        else None
    )
    lock, factory = lock_from_option(
        lock_option, storage, LockSettings(wait_ms=lock_wait_ms, retries=lock_retries)
    )
    try:
        result = execute_archival(
            storage,
            config,
            lock,
            archival_planner(settings),
            compaction_batch_size=settings.compaction_batch_size,
            archival_batch_size=settings.archival_batch_size,
            dry_run=dry_run,
            mdt=mdt,
        )
    finally:
        if factory is not None:
            factory.close()
    if as_json:
        echo_json({"table": storage.base_uri, **_document(result)})
    else:
        click.echo(result.summary())
        if dry_run:
            _details(result)
            if result.mdt is not None:
                click.echo("metadata table:")
                _details(result.mdt)
    finish(_nothing_done(result) and (result.mdt is None or _nothing_done(result.mdt)), detailed_exit_code)


def _nothing_done(result: ArchivalResult[ArchivalPlan]) -> bool:
    return not result.plan.instants and not result.recovered


def _document(result: ArchivalResult[ArchivalPlan]) -> dict[str, Any]:
    """``--json``: what was (``dry_run``: would be) archived, where archival stopped, and the
    metadata table's archival (``null`` when none ran)."""
    plan = result.plan
    return {
        "dry_run": result.dry_run,
        "summary": result.summary().splitlines()[0],
        "archived": [{"instant": i.requested_time, "action": i.action.value} for i in plan.instants],
        "recovered": list(result.recovered),
        "stops_at": {"reason": plan.stop.reason.value, "instant": plan.stop.instant,
                     "detail": plan.stop.detail},
        "boundaries": [str(b) for b in plan.boundaries],
        "history_file": result.layer,
        "deleted": len(result.deleted),
        "compacted": list(result.compacted),
        "metadata_table": _document(result.mdt) if result.mdt is not None else None,
    }


def _details(result: ArchivalResult[ArchivalPlan]) -> None:
    for inst in result.plan.instants:
        click.echo(f"  {inst.requested_time} {inst.action.value}")
    for boundary in result.plan.boundaries:
        click.echo(f"  boundary {boundary}")
