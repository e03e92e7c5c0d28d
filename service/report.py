"""What the read-side commands show: timeline rows, the inspect report, snapshot export.

Pure functions over a ``HoodieTable``; the CLI only prints what they return, so the
same data serves ``--json`` and the human-readable text.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hoodie.instant import Action, Instant


def _plan_summary(table: Any, instant: Instant) -> str | None:
    from hoodie.plans import decode_plan

    if instant.action not in (
        Action.COMPACTION,
        Action.LOG_COMPACTION,
        Action.CLUSTERING,
        Action.REPLACE_COMMIT,
        Action.CLEAN,
        Action.ROLLBACK,
        Action.INDEXING,
        Action.RESTORE,
    ):
        return None
    raw = table.timeline.read_plan(instant)
    if raw is None:
        return None
    plan = decode_plan(instant, raw)
    return plan.summary() if plan is not None else None


def timeline_rows(table: Any, *, include_history: bool = False) -> list[dict[str, Any]]:
    """One row per instant, oldest first; pending table services carry their plan summary."""
    timeline = table.load_timeline(include_history=True) if include_history else table.timeline
    rows: list[dict[str, Any]] = []
    for instant in timeline.instants:
        row: dict[str, Any] = {
            "requested_time": instant.requested_time,
            "completion_time": instant.completion_time,
            "action": instant.action.value,
            "state": instant.state.value,
        }
        if instant.is_pending:
            row["plan"] = _plan_summary(table, instant)
        rows.append(row)
    return rows


def inspect_table(table: Any) -> dict[str, Any]:
    """The facts ``hoodied inspect`` shows, as plain data."""
    cfg = table.config
    view = table.file_system_view()
    slices = list(view.latest_slices())
    groups = list(view.file_groups())
    partitions = sorted({s.partition for s in slices})
    pending = []
    for instant in table.timeline.pending():
        entry: dict[str, Any] = {
            "requested_time": instant.requested_time,
            "action": instant.action.value,
            "state": instant.state.value,
        }
        summary = _plan_summary(table, instant)
        if summary:
            entry["plan"] = summary
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
        "files": {
            "listing": view.listing,
            "partitions": len(partitions),
            "file_groups": len(groups),
            "file_slices": sum(len(g.slices) for g in groups),
            "latest_file_slices": len(slices),
            "base_files": sum(1 for s in slices if s.base_file is not None),
            "log_files": sum(len(s.log_files) for s in slices),
            "partition_paths": partitions[:50],
        },
        "pending_table_services": pending,
        "metadata_table": _metadata_report(table),
    }
    return report


def _metadata_report(table: Any) -> dict[str, Any]:
    cfg = table.config
    if not cfg.metadata_partitions:
        return {"enabled": False}
    out: dict[str, Any] = {
        "enabled": cfg.metadata_table_available,
        "partitions": list(cfg.metadata_partitions),
        "partitions_inflight": list(cfg.metadata_partitions_inflight),
    }
    if cfg.metadata_table_available:
        drift = table.listing_drift()
        out["drift"] = drift.to_dict()
    return out


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
        f"files          {f['partitions']} partitions, {f['file_groups']} file groups, "
        f"{f['file_slices']} file slices ({f['latest_file_slices']} latest), "
        f"{f['base_files']} base files and {f['log_files']} log files in latest slices "
        f"(listed from {f['listing']})",
    ]
    if report["pending_table_services"]:
        lines.append("pending")
        for p in report["pending_table_services"]:
            plan = f": {p['plan']}" if p.get("plan") else ""
            lines.append(f"  {p['requested_time']} {p['action']} {p['state']}{plan}")
    else:
        lines.append("pending        none")
    if not mdt["enabled"] and not mdt.get("partitions"):
        lines.append("metadata table none")
    else:
        inflight = mdt.get("partitions_inflight")
        suffix = f" (inflight: {', '.join(inflight)})" if inflight else ""
        lines.append(f"metadata table {', '.join(mdt['partitions'])}{suffix}")
        if "drift" in mdt:
            d = mdt["drift"]
            lines.append(f"listing drift  {d['summary']}")
    return "\n".join(lines)


def write_snapshot(
    table: Any,
    output: str,
    *,
    as_of: str | None,
    read_optimized: bool,
    listing: str,
    skip_corrupt_blocks: bool,
    progress: bool,
) -> dict[str, Any]:
    return table.to_parquet(
        output,
        as_of=as_of,
        read_optimized=read_optimized,
        listing=listing,
        skip_corrupt_blocks=skip_corrupt_blocks,
        progress=progress,
    )
