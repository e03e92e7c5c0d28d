"""The Hudi table-format layer of hoodied: a pure library (no Spark, no Redis, no asyncio).

It reads (and, for the services, writes) Apache Hudi tables of table versions 6, 8 and 9
exactly as Apache Hudi lays them out: ``hoodie.properties``, the timeline, file groups and
file slices, log files, base files, HFiles and the metadata table.

This face holds what the other packages reach for first: the read façade ``HoodieTable``
(Hudi's ``HoodieTable``/``HoodieTableMetaClient``), storage, the table config, the timeline's
value types and the error tree. Sub-packages have faces of their own (``timeline``, ``log``,
``hfile``, ``avro``, ``metadata``, ``actions``, ``demo``); the remaining modules are imported
by their module path. Modules inside ``hoodie`` never import this face (it imports them).
"""

from hoodied.hoodie.errors import (
    ClockSkewError,
    FileAlreadyExistsError,
    HeartbeatAliveError,
    HoodieFormatError,
    HoodieServiceError,
    InstantNotReadyError,
    InstantStateError,
    LockError,
    LockLostError,
    LockServiceDownError,
    LockUnavailableError,
    StorageError,
    TableNotFoundError,
    UnsupportedTableError,
)
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.storage import LocalStorage, Storage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.table import HoodieTable
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import Action, Instant, State

__all__ = [
    "Action",
    "ClockSkewError",
    "FileAlreadyExistsError",
    "HeartbeatAliveError",
    "HoodieFormatError",
    "HoodieServiceError",
    "HoodieTable",
    "Instant",
    "InstantNotReadyError",
    "InstantStateError",
    "LocalStorage",
    "LockError",
    "LockLostError",
    "LockServiceDownError",
    "LockUnavailableError",
    "State",
    "Storage",
    "StorageError",
    "TableConfig",
    "TableNotFoundError",
    "Timeline",
    "UnsupportedTableError",
    "load_table_config",
    "storage_for",
]
