"""Hudi's config keys that hoodied honours: one registry entry per Hudi ``ConfigProperty``.

What it owns: the name of every Hudi key hoodied reads from ``hoodie.properties``, from ``-o KEY=VALUE``
options and from the daemon's per-table settings, with the other names Hudi accepts for it
(``ConfigProperty.withAlternatives``), and the one rule that picks a value when a key is given under
more than one name. ``ConfigKey`` is the entry; ``HUDI_KEYS`` the entries of Hudi's writer and
table-service configs (``HoodieArchivalConfig``, ``HoodieCleanConfig``, ``HoodieCompactionConfig``,
``HoodieClusteringConfig``, ``HoodieStorageConfig``, ``HoodieIndexConfig``, ``HoodieMetadataConfig``,
``HoodieWriteConfig``, ``StorageBasedLockConfig``);
``hoodied.hoodie.properties.KEYS`` holds ``HoodieTableConfig``'s.

The rule is Hudi's (``HoodieConfig.getRawValue``, ``ConfigUtils.getRawValueWithAltKeys``): the key's
own name wins; otherwise the first alternative given, in the order the entry lists them. An entry's
``key`` is ``ConfigProperty.key()`` of the newest release hoodied serves (Hudi 1.1; 0.14/0.15 and 1.0
write the other table versions), so a key given twice resolves as its writers resolve it;
``alternatives`` are the older names Hudi still takes (0.14-1.0's ``hoodie.cleaner.*`` and
``hoodie.metadata.record.index.*``) and the newer spellings of Hudi 1.2
(``hoodie.clean.failed.writes.policy``), which 1.1 writers ignore.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["HUDI_KEYS", "ConfigKey", "by_key"]


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One Hudi key: its name, default and meaning, and the other names Hudi reads it under."""

    key: str
    default: str | None = None
    doc: str = ""
    alternatives: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every name of the key, in Hudi's order of precedence (its own name first)."""
        return (self.key, *self.alternatives)

    def given_as(self, props: Mapping[str, str]) -> str | None:
        """The name whose value Hudi reads in ``props`` (``None``: the key is not given)."""
        return next((name for name in self.names if name in props), None)

    def get(self, props: Mapping[str, str]) -> str | None:
        name = self.given_as(props)
        return props[name] if name is not None else self.default


def by_key(options: Mapping[str, str], keys: Iterable[ConfigKey]) -> dict[str, str]:
    """``options`` with each of ``keys`` under its own name, its value picked by Hudi's rule (the key's
    own name, else its first alternative given); the other names given for it are dropped. Names that
    belong to none of ``keys`` are kept as given, for the caller to refuse or pass on."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for entry in keys:
        taken.update(entry.names)
        name = entry.given_as(options)
        if name is not None:
            out[entry.key] = options[name]
    out.update({name: value for name, value in options.items() if name not in taken})
    return out


class HUDI_KEYS:  # noqa: N801 -- a registry of constants, like ``properties.KEYS``
    """The writer and table-service keys hoodied honours; Hudi's class and field in each doc."""

    # HoodieArchivalConfig
    KEEP_MIN_COMMITS = ConfigKey("hoodie.keep.min.commits", "20", "MIN_COMMITS_TO_KEEP")
    KEEP_MAX_COMMITS = ConfigKey("hoodie.keep.max.commits", "30", "MAX_COMMITS_TO_KEEP")
    ARCHIVE_BEYOND_SAVEPOINT = ConfigKey(
        "hoodie.archive.beyond.savepoint", "false", "ARCHIVE_BEYOND_SAVEPOINT")
    TIMELINE_COMPACTION_BATCH_SIZE = ConfigKey(
        "hoodie.timeline.compaction.batch.size", "10", "TIMELINE_COMPACTION_BATCH_SIZE")
    COMMITS_ARCHIVAL_BATCH_SIZE = ConfigKey(
        "hoodie.commits.archival.batch.size", "10", "COMMITS_ARCHIVAL_BATCH_SIZE")
    ARCHIVE_MERGE_ENABLE = ConfigKey("hoodie.archive.merge.enable", "false", "ARCHIVE_MERGE_ENABLE")
    # HoodieCleanConfig (Hudi 1.1 names the cleaner's keys hoodie.clean.*; 0.14-1.0 hoodie.cleaner.*)
    CLEANER_POLICY = ConfigKey(
        "hoodie.clean.policy", "KEEP_LATEST_COMMITS", "CLEANER_POLICY", ("hoodie.cleaner.policy",))
    CLEANER_COMMITS_RETAINED = ConfigKey(
        "hoodie.clean.commits.retained", "10", "CLEANER_COMMITS_RETAINED",
        ("hoodie.cleaner.commits.retained",))
    CLEANER_HOURS_RETAINED = ConfigKey(
        "hoodie.clean.hours.retained", "24", "CLEANER_HOURS_RETAINED", ("hoodie.cleaner.hours.retained",))
    # ... but the failed-writes policy only from Hudi 1.2 on
    FAILED_WRITES_CLEANER_POLICY = ConfigKey(
        "hoodie.cleaner.policy.failed.writes", "EAGER", "FAILED_WRITES_CLEANER_POLICY",
        ("hoodie.clean.failed.writes.policy",))
    # HoodieWriteConfig
    CLIENT_HEARTBEAT_INTERVAL_IN_MS = ConfigKey(
        "hoodie.client.heartbeat.interval_in_ms", "60000", "CLIENT_HEARTBEAT_INTERVAL_IN_MS")
    CLIENT_HEARTBEAT_NUM_TOLERABLE_MISSES = ConfigKey(
        "hoodie.client.heartbeat.tolerable.misses", "2", "CLIENT_HEARTBEAT_NUM_TOLERABLE_MISSES")
    # HoodieCompactionConfig
    INLINE_COMPACT_TRIGGER_STRATEGY = ConfigKey(
        "hoodie.compact.inline.trigger.strategy", "NUM_COMMITS", "INLINE_COMPACT_TRIGGER_STRATEGY")
    INLINE_COMPACT_NUM_DELTA_COMMITS = ConfigKey(
        "hoodie.compact.inline.max.delta.commits", "5", "INLINE_COMPACT_NUM_DELTA_COMMITS")
    INLINE_COMPACT_TIME_DELTA_SECONDS = ConfigKey(
        "hoodie.compact.inline.max.delta.seconds", "3600", "INLINE_COMPACT_TIME_DELTA_SECONDS")
    COMPACTION_STRATEGY = ConfigKey(
        "hoodie.compaction.strategy",
        "org.apache.hudi.table.action.compact.strategy.LogFileSizeBasedCompactionStrategy",
        "COMPACTION_STRATEGY")
    TARGET_IO_PER_COMPACTION_IN_MB = ConfigKey(
        "hoodie.compaction.target.io", "512000", "TARGET_IO_PER_COMPACTION_IN_MB")
    COMPACTION_LOG_FILE_SIZE_THRESHOLD = ConfigKey(
        "hoodie.compaction.logfile.size.threshold", "0", "COMPACTION_LOG_FILE_SIZE_THRESHOLD")
    LOG_COMPACTION_ENABLE = ConfigKey(
        "hoodie.log.compaction.enable", "false", "the daemon's log compaction trigger")
    LOG_COMPACTION_BLOCKS_THRESHOLD = ConfigKey(
        "hoodie.log.compaction.blocks.threshold", "5", "LOG_COMPACTION_BLOCKS_THRESHOLD")
    # HoodieStorageConfig
    PARQUET_MAX_FILE_SIZE = ConfigKey("hoodie.parquet.max.file.size", "125829120", "PARQUET_MAX_FILE_SIZE")
    PARQUET_COMPRESSION_CODEC_NAME = ConfigKey(
        "hoodie.parquet.compression.codec", None, "Parquet codec; default per table version.")
    PARQUET_BLOCK_SIZE = ConfigKey(
        "hoodie.parquet.block.size", str(120 * 1024 * 1024), "Row-group size in bytes.")
    # HoodieIndexConfig: the bloom filter in each base file's footer
    BLOOM_FILTER_TYPE = ConfigKey("hoodie.bloom.index.filter.type", "DYNAMIC_V0", "SIMPLE or DYNAMIC_V0.")
    BLOOM_FILTER_NUM_ENTRIES = ConfigKey("hoodie.index.bloom.num_entries", "60000", "Keys per row.")
    BLOOM_FILTER_FPP = ConfigKey("hoodie.index.bloom.fpp", "0.000000001", "False-positive rate per row.")
    BLOOM_INDEX_FILTER_DYNAMIC_MAX_ENTRIES = ConfigKey(
        "hoodie.bloom.index.filter.dynamic.max.entries", "100000", "DYNAMIC_V0 growth bound.")
    # HoodieMetadataConfig (Hudi 1.1 renames the record index's sizing keys, keeping the old names)
    METADATA_ENABLE = ConfigKey("hoodie.metadata.enable", "true", "ENABLE")
    METADATA_COMPACT_NUM_DELTA_COMMITS = ConfigKey(
        "hoodie.metadata.compact.max.delta.commits", "10", "COMPACT_NUM_DELTA_COMMITS (0.x default: 24)")
    METADATA_INDEX_COLUMN_STATS_FILE_GROUP_COUNT = ConfigKey(
        "hoodie.metadata.index.column.stats.file.group.count", "2",
        "METADATA_INDEX_COLUMN_STATS_FILE_GROUP_COUNT")
    METADATA_INDEX_PARTITION_STATS_FILE_GROUP_COUNT = ConfigKey(
        "hoodie.metadata.index.partition.stats.file.group.count", "1",
        "METADATA_INDEX_PARTITION_STATS_FILE_GROUP_COUNT")
    RECORD_INDEX_MIN_FILE_GROUP_COUNT = ConfigKey(
        "hoodie.metadata.global.record.level.index.min.filegroup.count", "10",
        "GLOBAL_RECORD_LEVEL_INDEX_MIN_FILE_GROUP_COUNT_PROP",
        ("hoodie.metadata.record.index.min.filegroup.count",))
    RECORD_INDEX_MAX_FILE_GROUP_COUNT = ConfigKey(
        "hoodie.metadata.global.record.level.index.max.filegroup.count", "10000",
        "GLOBAL_RECORD_LEVEL_INDEX_MAX_FILE_GROUP_COUNT_PROP",
        ("hoodie.metadata.record.index.max.filegroup.count",))
    RECORD_INDEX_GROWTH_FACTOR = ConfigKey(
        "hoodie.metadata.record.index.growth.factor", "2.0", "RECORD_INDEX_GROWTH_FACTOR_PROP")
    RECORD_INDEX_MAX_FILE_GROUP_SIZE_BYTES = ConfigKey(
        "hoodie.metadata.record.index.max.filegroup.size", str(1024 * 1024 * 1024),
        "RECORD_INDEX_MAX_FILE_GROUP_SIZE_BYTES_PROP")
    # HoodieClusteringConfig
    PLAN_STRATEGY_SMALL_FILE_LIMIT = ConfigKey(
        "hoodie.clustering.plan.strategy.small.file.limit", "314572800", "PLAN_STRATEGY_SMALL_FILE_LIMIT")
    PLAN_STRATEGY_MAX_BYTES_PER_OUTPUT_FILEGROUP = ConfigKey(
        "hoodie.clustering.plan.strategy.max.bytes.per.group", "2147483648",
        "PLAN_STRATEGY_MAX_BYTES_PER_OUTPUT_FILEGROUP")
    PLAN_STRATEGY_TARGET_FILE_MAX_BYTES = ConfigKey(
        "hoodie.clustering.plan.strategy.target.file.max.bytes", "1073741824",
        "PLAN_STRATEGY_TARGET_FILE_MAX_BYTES")
    PLAN_STRATEGY_MAX_GROUPS = ConfigKey(
        "hoodie.clustering.plan.strategy.max.num.groups", "30", "PLAN_STRATEGY_MAX_GROUPS")
    PLAN_STRATEGY_SORT_COLUMNS = ConfigKey(
        "hoodie.clustering.plan.strategy.sort.columns", None, "PLAN_STRATEGY_SORT_COLUMNS")
    PLAN_STRATEGY_SINGLE_GROUP_CLUSTERING_ENABLED = ConfigKey(
        "hoodie.clustering.plan.strategy.single.group.clustering.enabled", "true",
        "PLAN_STRATEGY_SINGLE_GROUP_CLUSTERING_ENABLED")
    # StorageBasedLockConfig (the 0.x backport names the renewal ...heartbeat.poll.secs)
    STORAGE_LOCK_VALIDITY_TIMEOUT = ConfigKey(
        "hoodie.write.lock.storage.validity.timeout.secs", "300", "VALIDITY_TIMEOUT_SECONDS")
    STORAGE_LOCK_RENEW_INTERVAL = ConfigKey(
        "hoodie.write.lock.storage.renew.interval.secs", "30", "RENEW_INTERVAL_SECS",
        ("hoodie.write.lock.storage.heartbeat.poll.secs",))
