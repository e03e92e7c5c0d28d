"""The files a new table starts with, for the demo writer: ``hoodie.properties`` and an instant clock.

Not on any service path: the services never create tables. ``table_properties`` gives the keys
Apache Hudi writes into ``hoodie.properties`` for a new table of version 6, 8 or 9 (keys as in
Hudi-written tables, with the CRC32 checksum); ``InstantClock`` hands out strictly increasing
17-digit instant times in UTC, like Hudi's time generator.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from hoodied.hoodie.properties import MergeMode, TableType, table_checksum
from hoodied.hoodie.timeline.active import datetime_to_instant_time, instant_time_to_datetime

__all__ = ["InstantClock", "table_properties"]

# Record-merge strategy ids of Hudi 1.x (``HoodieRecordMerger``).
EVENT_TIME_STRATEGY_ID = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
COMMIT_TIME_STRATEGY_ID = "ce9acb64-bde0-424c-9b91-f6ebba25356d"
DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
OVERWRITE_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"


# ---------------------------------------------------------------- time


class InstantClock:
    """Hands out strictly increasing 17-digit instant times (UTC), like Hudi's time generator."""

    def __init__(self) -> None:
        self._last: datetime | None = None
        self._lock = threading.Lock()

    def next(self) -> str:
        with self._lock:
            now = datetime.now(UTC)
            now = now.replace(microsecond=now.microsecond // 1000 * 1000)
            if self._last is not None and now <= self._last:
                now = self._last + timedelta(milliseconds=1)
            self._last = now
            return datetime_to_instant_time(now, UTC)

    def observe(self, instant: str) -> None:
        """Make later times exceed ``instant`` (an explicitly chosen or pre-existing instant)."""
        dt = instant_time_to_datetime(instant, UTC)
        with self._lock:
            if self._last is None or dt > self._last:
                self._last = dt


# ---------------------------------------------------------------- hoodie.properties


def table_properties(
    *,
    name: str,
    database: str,
    table_type: TableType,
    version: int,
    record_key: str,
    partition_field: str | None,
    ordering_field: str | None,
    merge_mode: MergeMode,
    hive_style: bool,
    create_schema: str,
) -> dict[str, str]:
    """The keys Hudi writes into ``hoodie.properties`` for a new table of ``version`` (6, 8, 9)."""
    p: dict[str, str] = {
        "hoodie.table.name": name,
        "hoodie.database.name": database,
        "hoodie.table.type": table_type.value,
        "hoodie.table.version": str(version),
        "hoodie.table.recordkey.fields": record_key,
    }
    if partition_field:
        p["hoodie.table.partition.fields"] = partition_field
    p["hoodie.archivelog.folder"] = "archived"
    p["hoodie.table.create.schema"] = create_schema
    p["hoodie.datasource.write.drop.partition.columns"] = "false"
    p["hoodie.datasource.write.hive_style_partitioning"] = "true" if hive_style else "false"
    p["hoodie.datasource.write.partitionpath.urlencode"] = "false"
    p["hoodie.table.timeline.timezone"] = "UTC"
    p["hoodie.table.base.file.format"] = "PARQUET"
    event = merge_mode is MergeMode.EVENT_TIME_ORDERING
    if version >= 8:
        p["hoodie.table.initial.version"] = str(version)
        p["hoodie.timeline.layout.version"] = "2"
        p["hoodie.timeline.path"] = "timeline"
        p["hoodie.timeline.history.path"] = "history"
        p["hoodie.table.keygenerator.type"] = "SIMPLE" if partition_field else "NON_PARTITION"
        p["hoodie.record.merge.mode"] = merge_mode.value
    else:
        p["hoodie.timeline.layout.version"] = "1"
        keygen = "SimpleKeyGenerator" if partition_field else "NonpartitionedKeyGenerator"
        p["hoodie.table.keygenerator.class"] = f"org.apache.hudi.keygen.{keygen}"
        p["hoodie.compaction.record.merger.strategy"] = EVENT_TIME_STRATEGY_ID
    if version == 9:
        if ordering_field:
            p["hoodie.table.ordering.fields"] = ordering_field
        p["hoodie.table.format"] = "native"
    else:
        if ordering_field:
            p["hoodie.table.precombine.field"] = ordering_field
        p["hoodie.compaction.payload.class"] = DEFAULT_PAYLOAD if event else OVERWRITE_PAYLOAD
    if version == 8:
        p["hoodie.record.merge.strategy.id"] = EVENT_TIME_STRATEGY_ID if event else COMMIT_TIME_STRATEGY_ID
    p["hoodie.table.checksum"] = str(table_checksum(p))
    return p
