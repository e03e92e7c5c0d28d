"""HoodieMetadataRecord helpers for the metadata table's ``files`` partition.

Owns the record-level rules, not the I/O: record types, the row keys of the ``files``
partition and the merge of two file listings (``HoodieMetadataPayload`` semantics).

Row keys of the ``files`` partition::

    "__all_partitions__"   type 1: filesystemMetadata = {partition: {size 0, isDeleted}}
    partition path         type 2: filesystemMetadata = {file name: {size, isDeleted}}
                           (a non-partitioned table's partition is stored as ".")
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

__all__ = [
    "ALL_PARTITIONS_KEY",
    "FILES_PARTITION",
    "NON_PARTITIONED_KEY",
    "FileListing",
    "RecordType",
    "combine_listings",
    "file_listing",
    "key_to_partition",
    "live_files",
    "partition_to_key",
]

ALL_PARTITIONS_KEY = "__all_partitions__"
NON_PARTITIONED_KEY = "."
FILES_PARTITION = "files"


class RecordType(IntEnum):
    """The ``type`` field of a HoodieMetadataRecord."""

    PARTITION_LIST = 1
    FILE_LIST = 2
    COLUMN_STATS = 3
    BLOOM_FILTER = 4
    RECORD_INDEX = 5
    PARTITION_STATS = 6
    SECONDARY_INDEX = 7


#: One listing: file (or partition) name -> (size, is_deleted). Tombstones are kept while
#: merging because Hudi merges in two stages (logs first, then the base file under them).
FileListing = dict[str, tuple[int, bool]]


def partition_to_key(partition: str) -> str:
    """The row key of a data partition ("" for a non-partitioned table becomes ".")."""
    return partition or NON_PARTITIONED_KEY


def key_to_partition(key: str) -> str:
    return "" if key == NON_PARTITIONED_KEY else key


def file_listing(record: Mapping[str, Any]) -> FileListing:
    """The ``filesystemMetadata`` map of a type 1/2 record (empty when null)."""
    raw = record.get("filesystemMetadata") or {}
    return {name: (int(info["size"]), bool(info["isDeleted"])) for name, info in raw.items()}


def combine_listings(old: FileListing, new: FileListing) -> FileListing:
    """Merge a newer listing over an older one (``combineFileSystemMetadata``).

    A newer tombstone removes the file; two live entries keep the larger size (file sizes only
    grow, and the merge must not depend on the order writers reached the MDT); an entry
    absent from the older listing is carried over as is, tombstones included.
    """
    merged = dict(old)
    for name, (size, deleted) in new.items():
        if name not in merged:
            merged[name] = (size, deleted)
        elif deleted:
            del merged[name]
        else:
            merged[name] = (max(size, merged[name][0]), False)
    return merged


def live_files(listing: FileListing) -> dict[str, int]:
    """The listing without tombstones: name -> size."""
    return {name: size for name, (size, deleted) in listing.items() if not deleted}
