"""Updating a table's ``hoodie.properties`` the way Hudi does, so a crash at any step is safe.

Hudi changes ``hoodie.properties`` in place (``HoodieTableConfig.update`` / ``modify``) with a
backup file, and every step can be interrupted:

0. recover: when ``hoodie.properties`` is missing (an earlier update died after step 2), it is
   re-created from ``hoodie.properties.backup``; the backup is then deleted in any case;
1. read the current properties;
2. write them to ``hoodie.properties.backup`` (readers fall back to it, see
   ``hoodie.properties.read_table_properties``);
3. delete ``hoodie.properties``;
4. write the changed properties (with ``hoodie.table.checksum``) and read them back;
5. delete the backup.

Here each file is written whole and atomically (``Storage.put_if_absent``), so a reader sees
either the old text (original or backup) or the new one, never a torn file, and a re-run after
a crash converges on the new text. ``set_metadata_partition_state`` is Hudi's
``setMetadataPartitionState`` / ``setMetadataPartitionsInflight``: the comma-separated lists
``hoodie.table.metadata.partitions`` and ``...partitions.inflight`` are kept sorted, and a
partition is never in both. The caller holds the table lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.locks import TableLock
from hoodied.hoodie.properties import (
    KEYS,
    PROPERTIES_BACKUP_FILE,
    PROPERTIES_FILE,
    parse_java_properties,
    properties_text,
    read_table_properties,
    table_checksum,
)
from hoodied.hoodie.storage import Storage

log = logging.getLogger(__name__)

__all__ = ["modify_table_properties", "recover_table_properties", "set_metadata_partition_state"]

Change = Callable[[dict[str, str]], dict[str, str]]


def recover_table_properties(storage: Storage, lock: TableLock) -> None:
    """Step 0: finish what an interrupted update left (``recoverIfNeeded``)."""
    if not storage.exists(PROPERTIES_BACKUP_FILE):
        return
    lock.ensure_held()
    if not storage.exists(PROPERTIES_FILE):
        storage.put_if_absent(PROPERTIES_FILE, storage.read(PROPERTIES_BACKUP_FILE))
        log.warning("%s: restored from %s (an update was interrupted)", PROPERTIES_FILE,
                    PROPERTIES_BACKUP_FILE)
    storage.delete(PROPERTIES_BACKUP_FILE)


def modify_table_properties(storage: Storage, lock: TableLock, change: Change) -> dict[str, str]:
    """Apply ``change`` (old properties -> new properties) to ``hoodie.properties``; returns the new ones.

    Nothing is written when ``change`` returns the properties unchanged.
    """
    recover_table_properties(storage, lock)
    current, _ = read_table_properties(storage)
    updated = change(dict(current))
    updated[KEYS.CHECKSUM.key] = str(table_checksum(updated))
    if updated == current:
        return current
    now = datetime.now(UTC)
    lock.ensure_held()
    storage.put_if_absent(PROPERTIES_BACKUP_FILE, properties_text(current, now).encode("latin-1"))
    storage.delete(PROPERTIES_FILE)
    text = properties_text(updated, now)
    lock.ensure_held()
    storage.put_if_absent(PROPERTIES_FILE, text.encode("latin-1"))
    written = parse_java_properties(storage.read(PROPERTIES_FILE).decode("latin-1"))
    if written.get(KEYS.CHECKSUM.key) != updated[KEYS.CHECKSUM.key]:
        # as Hudi: leave the backup for readers and the next writer's recovery
        storage.delete(PROPERTIES_FILE)
        raise HoodieFormatError(f"{PROPERTIES_FILE}: checksum missing or wrong after the update")
    storage.delete(PROPERTIES_BACKUP_FILE)
    log.info("%s: updated", PROPERTIES_FILE)
    return updated


def _csv(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def set_metadata_partition_state(
    storage: Storage, lock: TableLock, partitions: Iterable[str], *, state: str
) -> dict[str, str]:
    """Move MDT ``partitions`` to ``state``: ``"completed"``, ``"inflight"`` or ``"absent"``.

    ``completed`` (``setMetadataPartitionState(.., true)``) adds them to
    ``hoodie.table.metadata.partitions`` and drops them from the inflight list; ``inflight``
    (``setMetadataPartitionsInflight``) the reverse; ``absent`` drops them from both (Hudi's
    abort of a failed indexing).
    """
    if state not in ("completed", "inflight", "absent"):
        raise ValueError(f"unknown MDT partition state {state!r}")
    names = set(partitions)

    def change(props: dict[str, str]) -> dict[str, str]:
        done = set(_csv(props.get(KEYS.MDT_PARTITIONS.key))) - names
        inflight = set(_csv(props.get(KEYS.MDT_PARTITIONS_INFLIGHT.key))) - names
        if state == "completed":
            done |= names
        elif state == "inflight":
            inflight |= names
        props[KEYS.MDT_PARTITIONS.key] = ",".join(sorted(done))
        props[KEYS.MDT_PARTITIONS_INFLIGHT.key] = ",".join(sorted(inflight))
        return props

    return modify_table_properties(storage, lock, change)
