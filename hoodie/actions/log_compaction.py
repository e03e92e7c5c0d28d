"""What log compaction (Hudi's RFC-48, ``logcompaction`` action) shares between its planner and executor.

``LOG_COMPACTION_COMPACTOR`` is the ``HoodieCompactionStrategy.compactorClassName`` Hudi's
``HoodieLogCompactionPlanGenerator`` writes into a log compaction plan.
``require_log_compaction_supported`` refuses, with nothing written, the tables hoodied cannot
log-compact: copy-on-write tables (no log files); table version 6, whose log files carry the
slice's base instant (a failed attempt could not be undone by deleting its files, and Hudi 0.x
readers honour ``COMPACTED_BLOCK_TIMES`` only with the optimized log-block scan switched on);
tables without meta fields; tables with an MDT partition a log compaction's MDT delta commit
cannot keep exact (``hoodie.metadata.commit.require_commit_maintainable``: ``files``,
``column_stats``, ``partition_stats``, ``bloom_filters``, a global ``record_index`` and the
secondary indexes are kept).
"""

from __future__ import annotations

from hoodied.hoodie.errors import UnsupportedTableError
from hoodied.hoodie.metadata.commit import require_commit_maintainable
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage

__all__ = ["LOG_COMPACTION_COMPACTOR", "LOG_COMPACTION_OPERATION", "require_log_compaction_supported"]

LOG_COMPACTION_COMPACTOR = "org.apache.hudi.table.action.compact.LogCompactionExecutionHelper"
#: ``WriteOperationType`` of the completed delta commit.
LOG_COMPACTION_OPERATION = "LOG_COMPACT"


def require_log_compaction_supported(storage: Storage, config: TableConfig) -> None:
    """Refuse tables hoodied cannot log-compact (``UnsupportedTableError``, nothing written)."""
    where = storage.base_uri
    if not config.is_mor:
        raise UnsupportedTableError(
            f"{where}: log compaction needs a MERGE_ON_READ table, not {config.table_type.value}"
        )
    if config.version < 8:
        raise UnsupportedTableError(
            f"{where}: log compaction of table version {config.version} is not supported (hoodied "
            "log-compacts versions 8 and 9, whose log files carry their own instant)"
        )
    if not config.populate_meta_fields:
        raise UnsupportedTableError(
            f"{where}: log compaction of tables without meta fields (hoodie.populate.meta.fields=false) "
            "is not supported"
        )
    require_commit_maintainable(storage, config, LOG_COMPACTION_OPERATION, "log compaction")
