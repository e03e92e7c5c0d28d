"""What the read-side commands show: timeline rows, the inspect report, snapshot export.

Pure functions over a ``HoodieTable``; the CLI only prints what they return, so the
same data serves ``--json`` and the human-readable text. A pending instant whose plan cannot be
read (``CorruptPlanError``) is shown, marked ``corrupt_plan``, rather than failing the command:
these are the commands that tell what is wrong with a table.

The inspect report's ``lock`` section (``lock_report``) names the lock ``--lock`` chooses and
who holds it, read without taking it (``hoodie.locks.InspectableLock``); a lock service that does
not answer is one line there, not a failed command. It also looks for Apache Hudi's own lock
files that the chosen lock does not take: ``.hoodie/.locks/table_lock.json``
(``StorageBasedLockProvider``; kept after release, so it means "a writer used it") and
``.hoodie/lock`` / ``.hoodie/.aux/lock`` (``FileSystemBasedLockProvider``; removed on release, so
it means "held now, or left by a dead writer"). Either means Hudi writers may lock the table
with something hoodied does not take: the two would not exclude each other.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections import Counter
from datetime import datetime
from typing import Any

import pyarrow.parquet as pq

from hoodied.hoodie.errors import CorruptPlanError, HoodieFormatError, HoodieServiceError
from hoodied.hoodie.filenames import writer_instant
from hoodied.hoodie.locks import InspectableLock, LockBackendError, LockHolder
from hoodied.hoodie.metadata.compaction import deltas_since_last_compaction
from hoodied.hoodie.metadata.reader import ListingDrift, listing_drift
from hoodied.hoodie.table import HoodieTable, Listing
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant
from hoodied.planners.archival import ArchivalSettings, mdt_state, plan_archival
from hoodied.service.cli.terminal import iter_progress
from hoodied.service.fs_lock import FileSystemLock
from hoodied.service.storage_lock import LOCK_FILE as STORAGE_LOCK_FILE
from hoodied.service.storage_lock import StorageBasedLock

__all__ = [
    "committed_listing_drift",
    "inspect_table",
    "lock_report",
    "render_inspect",
    "timeline_rows",
    "write_snapshot",
]


def _plan_summary(timeline: Timeline, instant: Instant) -> tuple[str | None, str | None]:
    """(the plan's summary, why the plan cannot be read): a corrupt plan marks its instant, it does
    not fail the command that shows the table."""
    try:
        plan = timeline.plan(instant)
    except CorruptPlanError as exc:
        return None, exc.reason
    return (plan.summary() if plan is not None else None), None


def timeline_rows(table: HoodieTable) -> list[dict[str, Any]]:
    """One row per instant, oldest first; pending table services carry their plan summary."""
    timeline = table.timeline
    rows: list[dict[str, Any]] = []
    for instant in timeline.instants:
        row: dict[str, Any] = {
            "requested_time": instant.requested_time,
            "completion_time": instant.completion_time,
            "action": instant.action.value,
            "state": instant.state.value,
            "archived": timeline.is_archived(instant),
        }
        if instant.is_pending:
            row["plan"], row["corrupt_plan"] = _plan_summary(timeline, instant)
        rows.append(row)
    return rows


def inspect_table(table: HoodieTable) -> dict[str, Any]:
    """The facts ``hoodied inspect`` shows, as plain data (the ``lock`` section: ``lock_report``).

    A pending instant whose plan cannot be read carries ``corrupt_plan`` (the reason); the file
    counts then cannot be told (``files.error``), as the file slices depend on every pending plan.
    """
    cfg = table.config
    listing: Listing = "metadata" if table.uses_metadata_listing() else "storage"
    pending = []
    for instant in table.timeline.pending():
        entry: dict[str, Any] = {
            "requested_time": instant.requested_time,
            "action": instant.action.value,
            "state": instant.state.value,
        }
        summary, corrupt = _plan_summary(table.timeline, instant)
        if summary:
            entry["plan"] = summary
        if corrupt:
            entry["corrupt_plan"] = corrupt
        pending.append(entry)
    completed = table.timeline.completed()
    report: dict[str, Any] = {
        "table": {
            "base_path": table.storage.base_uri,
            "name": cfg.name,
            "database": cfg.database,
            "type": cfg.table_type.value,
            "version": cfg.version,
            "timeline_layout": cfg.timeline_layout,
            "timezone": cfg.timezone,
            "record_key_fields": list(cfg.record_key_fields),
            "partition_fields": list(cfg.partition_fields),
            "ordering_fields": list(cfg.ordering_fields),
            "merge_mode": cfg.merge_mode.value,
            "payload_class": cfg.payload_class,
            "base_file_format": cfg.base_file_format,
            "populate_meta_fields": cfg.populate_meta_fields,
        },
        "timeline": {
            "instants": len(table.timeline.instants),
            "completed": len(completed),
            "pending": len(pending),
            "latest_completed": completed[-1].requested_time if completed else None,
            "actions": dict(Counter(i.action.value for i in completed)),
        },
        "files": _files_report(table, listing),
        "pending_table_services": pending,
        "metadata_table": _metadata_report(table),
        "archival": _archival_report(table),
    }
    return report


def _files_report(table: HoodieTable, listing: Listing) -> dict[str, Any]:
    try:
        view = table.file_system_view(listing=listing)
        slices = list(view.latest_slices())
        groups = list(view.file_groups())
    except CorruptPlanError as exc:  # which slices are latest depends on what the pending plans hold
        return {"listing": listing, "error": str(exc)}
    partitions = sorted({s.partition for s in slices})
    return {
        "listing": listing,
        "partitions": len(partitions),
        "file_groups": len(groups),
        "file_slices": sum(len(g.slices) for g in groups),
        "latest_file_slices": len(slices),
        "base_files": sum(1 for s in slices if s.base_file is not None),
        "log_files": sum(len(s.log_files) for s in slices),
        "partition_paths": partitions[:50],
    }


# Hudi's lock files hoodied can see on a table: (path, the --lock that takes it, what it means).
_HUDI_LOCK_FILES = (
    (
        STORAGE_LOCK_FILE,
        "storage",
        "Hudi's storage-based lock file present: writers may use StorageBasedLockProvider; "
        "use --lock storage",
    ),
    (
        ".hoodie/lock",
        "filesystem",
        "Hudi's file-system lock file .hoodie/lock present: writers may use FileSystemBasedLockProvider; "
        "use --lock filesystem",
    ),
    (
        ".hoodie/.aux/lock",
        "filesystem",
        "Hudi's file-system lock file .hoodie/.aux/lock present: "
        "writers may use FileSystemBasedLockProvider; use --lock filesystem",
    ),
)


def lock_report(table: HoodieTable, lock_option: str) -> dict[str, Any]:
    """The ``lock`` section: which lock ``lock_option`` chooses, who holds it, Hudi lock files it
    does not take. Read-only. A bad ``lock_option`` raises (``ValueError``, ``LockConfigError``);
    a lock service that does not answer is reported in the section (``state: unreachable``)."""
    # the lock clients (redis, kazoo) load only for the command that looks at a lock
    from hoodied.service.locks import lock_from_option

    lock, factory = lock_from_option(lock_option, table.storage)
    try:
        if not isinstance(lock, InspectableLock):
            raise TypeError(f"{type(lock).__name__} cannot be inspected")  # every --lock backend can
        location = lock.location()
        out: dict[str, Any] = {
            "option": lock_option,
            "kind": location.kind,
            "where": location.where,
            "state": "free",
            "holder": None,
            "error": None,
            "warnings": _untaken_hudi_lock_files(table, lock),
        }
        try:
            holder = lock.holder()
        except LockBackendError as exc:
            out["state"], out["error"] = "unreachable", str(exc)
            return out
        except HoodieFormatError as exc:
            out["state"], out["error"] = "unreadable", str(exc)
            return out
        if holder is not None:
            out["state"] = "expired" if holder.expired else "held"
            out["holder"] = _holder_dict(holder)
        return out
    finally:
        if factory is not None:
            factory.close()


def _untaken_hudi_lock_files(table: HoodieTable, lock: object) -> list[str]:
    """Warnings for Hudi lock files present on the table that ``lock`` does not take."""
    taken: set[str] = set()
    if isinstance(lock, FileSystemLock):
        paths = {os.path.abspath(p) for p in lock.paths}
        for rel, kind, _ in _HUDI_LOCK_FILES:
            local = table.storage.local_path(rel)
            if kind == "filesystem" and local is not None and os.path.abspath(local) in paths:
                taken.add(rel)
    elif isinstance(lock, StorageBasedLock):
        taken = {STORAGE_LOCK_FILE}
    return [message for rel, _, message in _HUDI_LOCK_FILES if rel not in taken and table.storage.exists(rel)]


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat(timespec="milliseconds") if moment is not None else None


def _holder_dict(holder: LockHolder) -> dict[str, Any]:
    return {
        "owner": holder.owner,
        "where": holder.location.where,
        "since": _iso(holder.since),
        "until": _iso(holder.until),
        "lease_ms": holder.lease_ms,
        "expired": holder.expired,
        "detail": holder.detail,
    }


def _render_lock(lock: dict[str, Any]) -> list[str]:
    kind, where = lock["kind"], lock["where"]
    label = where if where.startswith(f"{kind}://") else f"{kind} {where}"
    if lock["state"] in ("unreachable", "unreadable"):
        lines = [f"lock           {label} {lock['state']}: {lock['error']}"]
    elif lock["holder"] is None:
        lines = [f"lock           {label}: free"]
    else:
        h = lock["holder"]
        parts = [f"held by {' '.join(str(h['owner']).split())}"]
        if h["where"] != where:
            parts.append(f"in {h['where']}")
        if h["since"]:
            parts.append(f"since {h['since']}")
        if h["until"]:
            parts.append(f"until {h['until']}")
        if h["lease_ms"] is not None:
            parts.append(f"lease {h['lease_ms']} ms")
        text = ", ".join(parts)
        if h["detail"]:
            text += f" ({h['detail']})"
        if h["expired"]:
            text += f"; expired by {kind}'s rule"
        lines = [f"lock           {label}: {text}"]
    lines.extend(f"lock warning   {w}" for w in lock["warnings"])
    return lines


def _metadata_report(table: HoodieTable) -> dict[str, Any]:
    cfg = table.config
    if not cfg.metadata_partitions:
        return {"enabled": False}
    out: dict[str, Any] = {
        "enabled": cfg.metadata_table_available,
        "partitions": list(cfg.metadata_partitions),
        "partitions_inflight": list(cfg.metadata_partitions_inflight),
    }
    if cfg.metadata_table_available:
        mdt = table.metadata
        if mdt is not None:
            out["timeline"] = _mdt_timeline_health(mdt.timeline)
        drift = committed_listing_drift(table)
        out["drift"] = {
            "total": drift.count,
            "summary": drift.summary() if drift else "none",
            "partitions": [
                {
                    "partition": p.partition,
                    "missing_in_metadata": list(p.missing_in_mdt),
                    "missing_in_storage": list(p.missing_in_storage),
                    "size_mismatch": [list(m) for m in p.size_mismatch],
                }
                for p in drift.partitions
            ],
        }
    return out


def _mdt_timeline_health(timeline: Timeline) -> dict[str, Any]:
    """The metadata table's own upkeep: its last compaction and what has piled up since."""
    # counted as the MDT compaction trigger counts them (by requested time, pending ones too)
    since, last = deltas_since_last_compaction(timeline)
    cleans = timeline.completed((Action.CLEAN,))
    return {
        "last_compaction": last,
        "delta_commits_since_compaction": since,
        "last_clean": cleans[-1].requested_time if cleans else None,
        "pending": [f"{i.requested_time} {i.action.value} {i.state.value}" for i in timeline.pending()],
    }


def committed_listing_drift(table: HoodieTable) -> ListingDrift:
    """MDT ``files`` listing vs the committed files found on storage.

    Storage also holds files of writes that never completed (or are still running); the
    metadata table only ever records committed ones, so those are left out of the storage
    side before comparing.
    """
    commits = table.commit_state()
    storage_side: dict[str, list[tuple[str, int]]] = {}
    for partition, files in table.list_files("storage").items():
        kept = []
        for name, size in files:
            writer = writer_instant(name, table.config.version)
            if writer is None or commits.is_committed(writer):
                kept.append((name, size))
        if kept:
            storage_side[partition] = kept
    return listing_drift(storage_side, table.list_files("metadata"))


def _archival_report(table: HoodieTable) -> dict[str, Any]:
    """What ``hoodied archive`` would do now with Hudi's default settings (reads only): how many
    instants would move, and the boundary that stops archival there, with its reason."""
    try:
        plan = plan_archival(table.timeline, table.config, ArchivalSettings(),
                             mdt_state(table.storage, table.config))
    except HoodieServiceError as exc:
        return {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    return {
        "active_instants": len(table.timeline.instants),
        "instants_to_archive": len(plan.instants),
        "completed_commits": plan.completed_commits,
        "keep": [plan.min_to_keep, plan.max_to_keep],
        "stops_at": plan.stop.instant,
        "reason": plan.stop.reason.value,
        "detail": plan.stop.detail,
    }


def render_inspect(report: dict[str, Any]) -> str:
    t, tl, f, mdt = report["table"], report["timeline"], report["files"], report["metadata_table"]
    lines = [
        f"table          {t['name']} ({t['type']}, version {t['version']}, "
        f"timeline layout {t['timeline_layout']})",
        f"base path      {t['base_path']}",
        f"record key     {', '.join(t['record_key_fields']) or '-'}",
        f"partitioned by {', '.join(t['partition_fields']) or '(not partitioned)'}",
        f"ordering       {', '.join(t['ordering_fields']) or '-'} ({t['merge_mode']})",
        f"timezone       {t['timezone']}",
        f"timeline       {tl['instants']} instants, {tl['completed']} completed, {tl['pending']} pending; "
        f"latest completed {tl['latest_completed'] or '-'}",
        _render_files(f),
    ]
    arch = report["archival"]
    if "error" in arch:
        lines.append(f"archival       cannot tell: {arch['error']}")
    else:
        at = f" at {arch['stops_at']}" if arch["stops_at"] else ""
        lines.append(
            f"archival       {arch['instants_to_archive']} of {arch['active_instants']} active instants "
            f"would move with Hudi's defaults (keep {arch['keep'][0]}..{arch['keep'][1]} commits); "
            f"stops{at}: {arch['reason']} ({arch['detail']})"
        )
    if report["pending_table_services"]:
        lines.append("pending")
        for p in report["pending_table_services"]:
            plan = f": {p['plan']}" if p.get("plan") else ""
            if p.get("corrupt_plan"):
                plan = f": corrupt plan: {p['corrupt_plan']}"
            lines.append(f"  {p['requested_time']} {p['action']} {p['state']}{plan}")
    else:
        lines.append("pending        none")
    if not mdt["enabled"] and not mdt.get("partitions"):
        lines.append("metadata table none")
    else:
        inflight = mdt.get("partitions_inflight")
        suffix = f" (inflight: {', '.join(inflight)})" if inflight else ""
        lines.append(f"metadata table {', '.join(mdt['partitions'])}{suffix}")
        if "timeline" in mdt:
            h = mdt["timeline"]
            pending = f"; pending: {', '.join(h['pending'])}" if h["pending"] else ""
            lines.append(
                f"metadata upkeep last compaction {h['last_compaction'] or '-'}, "
                f"{h['delta_commits_since_compaction']} delta commits since, "
                f"last clean {h['last_clean'] or '-'}{pending}"
            )
        if "drift" in mdt:
            d = mdt["drift"]
            lines.append(f"listing drift  {d['summary']}")
    if "lock" in report:
        lines.extend(_render_lock(report["lock"]))
    return "\n".join(lines)


def _render_files(f: dict[str, Any]) -> str:
    if "error" in f:
        return f"files          cannot tell: {f['error']}"
    return (
        f"files          {f['partitions']} partitions, {f['file_groups']} file groups, "
        f"{f['file_slices']} file slices ({f['latest_file_slices']} latest), "
        f"{f['base_files']} base files and {f['log_files']} log files in latest slices "
        f"(listed from {f['listing']})"
    )


def write_snapshot(
    table: HoodieTable,
    output: str,
    *,
    as_of: str | None,
    read_optimized: bool,
    listing: Listing,
    skip_corrupt_blocks: bool,
    progress: bool,
) -> dict[str, Any]:
    """Write the snapshot to ``output`` atomically: a temp file beside it, renamed when complete.

    A failure part-way (a corrupt block in the last slice) leaves no output file behind.
    """
    view = table.file_system_view(as_of, listing)
    slices = list(view.read_slices())
    schema = table.schema()
    folder = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(output)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    rows = 0
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            for file_slice in iter_progress(slices, "reading file slices", progress):
                for batch in table.read_slices(
                    [file_slice], as_of, read_optimized, skip_corrupt=skip_corrupt_blocks
                ):
                    writer.write_batch(batch)
                    rows += batch.num_rows
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it owner-only; an export is an ordinary file
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return {"rows": rows, "file_slices": len(slices)}
