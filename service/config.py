"""The daemon's settings: one frozen, typed, validated tree, read from a YAML file, the environment and flags.

Precedence (the one place it is defined; ``tests/service/daemon/test_daemon.py`` pins it)::

    built-in defaults  <  YAML file (--config)  <  environment (HOODIED_*)  <  command-line flags

Mappings merge key by key across the sources (``HOODIED_CONCURRENCY__WORKERS=8`` changes only
``concurrency.workers``); every other value, lists included, is replaced whole by the higher
source (``--table`` replaces the file's ``tables``).

Environment names: ``HOODIED_`` + the field path joined with ``__``, case-insensitive, e.g.
``HOODIED_LOCK__URL=redis://redis:6379/0``, ``HOODIED_POLL_INTERVAL_SECONDS=5``,
``HOODIED_DEFAULTS__SERVICES__CLEAN__COMMITS_RETAINED=20``. Lists and mappings are JSON
(``HOODIED_TABLES='["/data/t1"]'``), or the shorthands below (``HOODIED_LOCK=redis://...``).
A ``HOODIED_*`` name that is not a setting is ignored by ``hoodied run`` with a warning in its
start-up log, and is a problem for ``hoodied config check``, both naming the closest setting
(``unknown_environment``); hoodied's test hooks (``HOODIED_TEST_*``), the test suite's folders
(``HOODIED_FIXTURES``, ``HOODIED_REFERENCE``) and the service links Kubernetes adds for a Service
named ``hoodied...`` (``HOODIED_SERVICE_HOST``, ``HOODIED_PORT_9464_TCP``...) are not reported.

Policies: ``defaults`` is the policy of every table; a table listed under ``tables`` or found
under a ``discover`` root may carry a partial ``policy`` that is merged over ``defaults``
(explicit table entries win over discovery). The merge happens before validation, so every
table's effective policy is validated at start and errors name the table entry.

Problems: ``ConfigError`` lists every problem of the settings at once, each once (a bad key of
``defaults`` is one problem, not one per table that inherits it), as ``WHERE: key.path: what`` where
WHERE is the file, the ``HOODIED_*`` variable or ``flags`` that gave the value; an unknown key names
the closest valid one. ``settings_json_schema`` is the same tree as a JSON Schema (``hoodied config
schema``; the Helm chart's ``values.schema.json`` embeds it for its ``config`` value).

Shorthands: ``tables: ["/data/t1"]`` (paths only), ``discover: ["/data/lake"]``,
``lock: redis://HOST:PORT/DB`` (the URL alone), ``http: "0.0.0.0:9464"`` or ``http: off``.

Tables and discover roots may live on object stores (``s3://``, ``s3a://``, ``gs://``, ``az://``,
``abfs://``, ``abfss://``). Credentials come from the standard environment (``AWS_*``,
``GOOGLE_*``, ``AZURE_*``) or the instance's identity and never from these settings;
``object_store`` adds the client settings a deployment may want to keep with the daemon's
(a local S3 endpoint, a region), over the standard variables.

Secrets: the settings that do hold one (a password in ``lock.url``, ``controls.http_token``, a Spark
option named like a password, key or token, a ``;token=`` of a Spark Connect URL) are shown as
``***`` wherever settings are shown: ``config check`` and its ``--print`` (``redacted_settings``),
``/status``, and problem lines, whose echoed values pydantic takes from the input (``mask_secrets``).
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from hoodied.hoodie.actions.services import TableService
from hoodied.hoodie.config_keys import HUDI_KEYS, ConfigKey, by_key
from hoodied.hoodie.errors import HoodieServiceError
from hoodied.hoodie.locks import LockSettings
from hoodied.hoodie.secrets import mask_secrets
from hoodied.hoodie.storage import OBJECT_STORE_SCHEMES
from hoodied.planners.archival import ArchivalSettings
from hoodied.planners.clean import CleanPolicy, CleanSettings
from hoodied.planners.clustering import ClusteringSettings
from hoodied.planners.compaction import CompactionSettings, CompactionStrategy
from hoodied.planners.failed_writes import (
    FAILED_WRITES_POLICY_KEY,
    HEARTBEAT_INTERVAL_KEY,
    HEARTBEAT_MISSES_KEY,
)
from hoodied.planners.log_compaction import LogCompactionSettings

if TYPE_CHECKING:
    from hoodied.hoodie.object_storage import ObjectStoreSettings

__all__ = [
    "CLUSTERING_OPTION_KEYS",
    "ArchivalService",
    "CleanService",
    "ClusteringService",
    "CompactionService",
    "ConfigError",
    "DaemonConfig",
    "DiscoverRoot",
    "HttpConfig",
    "LockConfig",
    "LogCompactionService",
    "ObjectStoreConfig",
    "Policy",
    "Services",
    "TableEntry",
    "TableControlsConfig",
    "UnknownVariable",
    "chart_values_schema",
    "environment_values",
    "load_config",
    "read_settings_text",
    "read_yaml",
    "redacted_settings",
    "settings_json_schema",
    "unknown_environment",
]

class ConfigError(HoodieServiceError):
    """The settings are invalid; ``problems`` has one line per problem (``where: what``)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{problems[0]}{more}")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


# ---------------------------------------------------------------------------- policies


class CleanService(_Frozen):
    """Clean: delete file slices outside retention (Hudi's ``hoodie.clean.*``)."""

    enabled: bool = True
    """Execute pending cleans of the table, whoever planned them."""
    schedule: bool = True
    """Plan new cleans when the trigger fires."""
    trigger_commits: int = Field(1, ge=1)
    """Completed write instants since the last clean before a new one is planned
    (``hoodie.clean.max.commits``)."""
    policy: CleanPolicy = CleanPolicy.KEEP_LATEST_COMMITS
    """``hoodie.clean.policy``."""
    commits_retained: int = Field(10, ge=1)
    """``hoodie.clean.commits.retained``."""
    file_versions_retained: int = Field(3, ge=1)
    """``hoodie.clean.fileversions.retained``."""
    hours_retained: int = Field(24, ge=0)
    """``hoodie.clean.hours.retained``."""
    incremental: bool = True
    """``hoodie.clean.incremental.enabled``: look only at partitions written since the last clean."""
    failed_writes_policy: Literal["EAGER", "LAZY", "NEVER"] | None = None
    """``hoodie.cleaner.policy.failed.writes`` of the table's writers; unset: the table's
    ``hoodie.properties`` (``EAGER`` when absent, as in Hudi). ``LAZY``: before each clean is planned
    or executed, failed data writes whose heartbeat expired are rolled back, as Hudi's clean does
    (``service.failed_writes``; the heartbeat settings are ``heartbeat``'s)."""

    def failed_writes_options(self, interval_ms: int, tolerable_misses: int) -> dict[str, str]:
        """Hudi's keys for ``service.failed_writes``: the policy when set, and the writers' heartbeats."""
        out = {HEARTBEAT_INTERVAL_KEY: str(interval_ms), HEARTBEAT_MISSES_KEY: str(tolerable_misses)}
        if self.failed_writes_policy is not None:
            out[FAILED_WRITES_POLICY_KEY] = self.failed_writes_policy
        return out

    def settings(self) -> CleanSettings:
        return CleanSettings(
            policy=self.policy,
            commits_retained=self.commits_retained,
            file_versions_retained=self.file_versions_retained,
            hours_retained=self.hours_retained,
            incremental=self.incremental,
        )


class CompactionService(_Frozen):
    """Compaction of merge-on-read file slices (Hudi's ``hoodie.compact.*``)."""

    enabled: bool = True
    """Execute pending compactions, whoever planned them."""
    schedule: bool = True
    """Plan new compactions when the trigger fires (merge-on-read tables only)."""
    trigger: Literal["NUM_COMMITS", "TIME_ELAPSED", "NUM_AND_TIME", "NUM_OR_TIME"] = "NUM_COMMITS"
    """``hoodie.compact.inline.trigger.strategy``."""
    delta_commits: int = Field(5, ge=1)
    """Delta commits since the last compaction (``hoodie.compact.inline.max.delta.commits``)."""
    delta_seconds: int = Field(3600, ge=1)
    """Seconds since the last compaction (``hoodie.compact.inline.max.delta.seconds``)."""
    strategy: str = "LogFileSizeBasedCompactionStrategy"
    """Which file slices a plan takes (``hoodie.compaction.strategy``, simple class name)."""
    target_io_mb: int = Field(512_000, ge=1)
    """I/O budget of one plan in MB (``hoodie.compaction.target.io``)."""

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, v: str) -> str:
        CompactionStrategy.parse(v)  # an unknown strategy is a settings error at start, not at planning
        return v

    def settings(self) -> CompactionSettings:
        """The planner's settings (built from Hudi's option keys, as ``hoodied schedule compaction``)."""
        return CompactionSettings.from_options({
            HUDI_KEYS.INLINE_COMPACT_TRIGGER_STRATEGY.key: self.trigger,
            HUDI_KEYS.INLINE_COMPACT_NUM_DELTA_COMMITS.key: str(self.delta_commits),
            HUDI_KEYS.INLINE_COMPACT_TIME_DELTA_SECONDS.key: str(self.delta_seconds),
            HUDI_KEYS.COMPACTION_STRATEGY.key: self.strategy,
            HUDI_KEYS.TARGET_IO_PER_COMPACTION_IN_MB.key: str(self.target_io_mb),
        })


class LogCompactionService(_Frozen):
    """Log compaction (Hudi's ``hoodie.log.compaction.*``); planning is off by default as in Hudi
    (``hoodie.log.compaction.enable`` false)."""

    enabled: bool = True
    """Execute pending log compactions, whoever planned them."""
    schedule: bool = False
    """Plan new log compactions (``hoodie.log.compaction.enable``)."""
    blocks_threshold: int = Field(5, ge=2)
    """Log blocks in a file slice before it is log-compacted (``hoodie.log.compaction.blocks.threshold``)."""

    def options(self) -> dict[str, str]:
        """The planner's settings as Hudi option keys (``LogCompactionSettings.from_options``)."""
        return {
            HUDI_KEYS.LOG_COMPACTION_ENABLE.key: "true" if self.schedule else "false",
            HUDI_KEYS.LOG_COMPACTION_BLOCKS_THRESHOLD.key: str(self.blocks_threshold),
        }

    def settings(self) -> LogCompactionSettings:
        """The planner's settings."""
        return LogCompactionSettings.from_options(self.options())


_CLUSTERING = ClusteringSettings()

#: ClusteringService field -> Hudi key of the clustering plan strategy (``HUDI_KEYS``).
_CLUSTERING_KEYS: dict[str, ConfigKey] = {
    "small_file_limit": HUDI_KEYS.PLAN_STRATEGY_SMALL_FILE_LIMIT,
    "max_bytes_per_group": HUDI_KEYS.PLAN_STRATEGY_MAX_BYTES_PER_OUTPUT_FILEGROUP,
    "target_file_max_bytes": HUDI_KEYS.PLAN_STRATEGY_TARGET_FILE_MAX_BYTES,
    "max_num_groups": HUDI_KEYS.PLAN_STRATEGY_MAX_GROUPS,
    "sort_columns": HUDI_KEYS.PLAN_STRATEGY_SORT_COLUMNS,
    "single_group_clustering": HUDI_KEYS.PLAN_STRATEGY_SINGLE_GROUP_CLUSTERING_ENABLED,
}
#: ClusteringService field -> Hudi option key of the clustering plan strategy.
CLUSTERING_OPTION_KEYS: dict[str, str] = {name: entry.key for name, entry in _CLUSTERING_KEYS.items()}


class ClusteringService(_Frozen):
    """Clustering (Hudi's ``hoodie.clustering.*``); planning is off by default as in Hudi
    (``hoodie.clustering.async.enabled`` false)."""

    enabled: bool = True
    """Execute pending clusterings, whoever planned them."""
    schedule: bool = False
    """Plan new clusterings (``hoodie.clustering.async.enabled``)."""
    trigger_commits: int = Field(4, ge=1)
    """Completed commits since the last clustering before a new one is planned
    (``hoodie.clustering.async.max.commits``)."""
    small_file_limit: int = Field(_CLUSTERING.small_file_limit, ge=1)
    """Base files smaller than this many bytes are clustered
    (``hoodie.clustering.plan.strategy.small.file.limit``)."""
    max_bytes_per_group: int = Field(_CLUSTERING.max_bytes_per_group, ge=1)
    """Bytes of input file slices in one clustering group
    (``hoodie.clustering.plan.strategy.max.bytes.per.group``)."""
    target_file_max_bytes: int = Field(_CLUSTERING.target_file_max_bytes, ge=1)
    """Size of the files a group writes (``hoodie.clustering.plan.strategy.target.file.max.bytes``)."""
    max_num_groups: int = Field(_CLUSTERING.max_num_groups, ge=1)
    """Clustering groups in one plan (``hoodie.clustering.plan.strategy.max.num.groups``)."""
    sort_columns: tuple[str, ...] = _CLUSTERING.sort_columns
    """Columns the rewritten files are sorted by (``hoodie.clustering.plan.strategy.sort.columns``)."""
    single_group_clustering: bool = _CLUSTERING.single_group_clustering
    """Plan a group of a single file slice without log files
    (``hoodie.clustering.plan.strategy.single.group.clustering.enabled``)."""

    @field_validator("sort_columns", mode="before")
    @classmethod
    def _columns(cls, v: Any) -> Any:
        if isinstance(v, str):  # Hudi's form: "a,b"
            return tuple(c.strip() for c in v.split(",") if c.strip())
        return v

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ClusteringService:
        """Hudi's defaults with the plan-strategy options given by Hudi key (or its alternatives).

        An unknown key or a bad value raises ``ValueError`` naming it.
        """
        fields = {key: name for name, key in CLUSTERING_OPTION_KEYS.items()}
        values: dict[str, Any] = {}
        for key, raw in by_key(options, _CLUSTERING_KEYS.values()).items():
            name = fields.get(key)
            if name is None:
                known = ", ".join(sorted(fields))
                raise ValueError(f"{key}: not a clustering plan option (known: {known})")
            values[name] = raw
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = CLUSTERING_OPTION_KEYS.get(str(err["loc"][0]), str(err["loc"][0])) if err["loc"] else "?"
            raise ValueError(f"{key}={values.get(str(err['loc'][0]), '')}: {err['msg']}") from None

    def options(self) -> dict[str, str]:
        """The plan-strategy settings as Hudi option keys."""
        out = {}
        for name, key in CLUSTERING_OPTION_KEYS.items():
            value = getattr(self, name)
            if isinstance(value, bool):
                value = str(value).lower()
            elif isinstance(value, tuple):
                value = ",".join(value)
            out[key] = str(value)
        return out

    def settings(self) -> ClusteringSettings:
        """The planner's settings."""
        return replace(_CLUSTERING, **{name: getattr(self, name) for name in CLUSTERING_OPTION_KEYS})


class IndexingService(_Frozen):
    """Async indexing of the metadata table: executed only, never planned by hoodied."""

    enabled: bool = True
    """Execute pending indexing instants."""


class ArchivalService(_Frozen):
    """Archival of the active timeline into its history, and of the metadata table's after it
    (Hudi's ``hoodie.archive.*`` / ``hoodie.keep.*``); off by default: a table's writers may still
    archive it themselves (``hoodie.archive.automatic``, on in Hudi while their table services run).
    The cleaner's retention and the compaction trigger that bound it are ``clean``'s and
    ``compaction``'s."""

    enabled: bool = False
    """Archive the table when Hudi's trigger says so (more than ``keep_max_commits`` completed
    commits on the active timeline), after its other work, under the table lock."""
    keep_min_commits: int = Field(20, ge=1)
    """Completed commits archival keeps (``hoodie.keep.min.commits``)."""
    keep_max_commits: int = Field(30, ge=2)
    """Completed commits on the active timeline past which it archives (``hoodie.keep.max.commits``)."""
    archive_beyond_savepoint: bool = False
    """Archive past savepoints, keeping only the savepointed commits (``hoodie.archive.beyond.savepoint``)."""
    timeline_compaction_batch_size: int = Field(10, ge=2)
    """History files of one LSM level compacted at once (``hoodie.timeline.compaction.batch.size``)."""

    @model_validator(mode="after")
    def _bounds(self) -> ArchivalService:
        if self.keep_max_commits <= self.keep_min_commits:
            raise ValueError("keep_max_commits must be greater than keep_min_commits")
        return self

    def options(self, clean: CleanService, compaction: CompactionService) -> dict[str, str]:
        """The archiver's settings as Hudi option keys, with the table's cleaner and compaction trigger."""
        return {
            HUDI_KEYS.KEEP_MIN_COMMITS.key: str(self.keep_min_commits),
            HUDI_KEYS.KEEP_MAX_COMMITS.key: str(self.keep_max_commits),
            HUDI_KEYS.ARCHIVE_BEYOND_SAVEPOINT.key: str(self.archive_beyond_savepoint).lower(),
            HUDI_KEYS.TIMELINE_COMPACTION_BATCH_SIZE.key: str(self.timeline_compaction_batch_size),
            HUDI_KEYS.CLEANER_POLICY.key: clean.policy.value,
            HUDI_KEYS.CLEANER_COMMITS_RETAINED.key: str(clean.commits_retained),
            HUDI_KEYS.CLEANER_HOURS_RETAINED.key: str(clean.hours_retained),
            HUDI_KEYS.INLINE_COMPACT_TRIGGER_STRATEGY.key: compaction.trigger,
            HUDI_KEYS.INLINE_COMPACT_NUM_DELTA_COMMITS.key: str(compaction.delta_commits),
        }


ServicePolicy = (
    CleanService | CompactionService | LogCompactionService | ClusteringService | IndexingService
    | ArchivalService
)
"""The policy group of one service: each has ``enabled``; all but indexing and archival have ``schedule``."""


class Services(_Frozen):
    """One policy group per ``TableService``; the field names are the services' values."""

    clean: CleanService = CleanService()
    compaction: CompactionService = CompactionService()
    log_compaction: LogCompactionService = LogCompactionService()
    clustering: ClusteringService = ClusteringService()
    indexing: IndexingService = IndexingService()
    archival: ArchivalService = ArchivalService()

    def get(self, service: TableService) -> ServicePolicy:
        """The policy of ``service``."""
        policy: ServicePolicy = getattr(self, TableService(service).value)
        return policy

    def schedules(self, service: TableService) -> bool:
        """Whether new instants of ``service`` are planned (indexing never is: executed only), or, for
        archival (which plans and archives in one step), whether it runs."""
        group = self.get(service)
        if isinstance(group, ArchivalService):
            return group.enabled
        return not isinstance(group, IndexingService) and group.schedule

    def archival_settings(self) -> ArchivalSettings:
        """The archiver's settings (from Hudi's keys, as ``hoodied archive -o``): ``archival``'s, bounded by
        ``clean``'s retention and ``compaction``'s trigger."""
        return ArchivalSettings.from_options(self.archival.options(self.clean, self.compaction))


def _hudi_text(value: Any) -> Any:
    """A YAML scalar as a Hudi writer's config would spell it (``true``, ``2181``); other values unchanged."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int | float) else value


class Policy(_Frozen):
    """What the daemon does to one table."""

    paused: bool = False
    """Watch and report only: plan nothing, execute nothing."""
    priority: int = 0
    """Higher first when workers are scarce; within a priority the oldest pending instant goes first."""
    services: Services = Services()
    hudi_lock: dict[str, str] = Field(
        default_factory=dict,
        # YAML scalars are read as text (_hudi_text): ports and timeouts may be written as numbers
        json_schema_extra={"additionalProperties": {"type": ["string", "integer", "number", "boolean"]}},
    )
    """The table's writers' Hudi lock keys, verbatim (``hoodie.write.lock.provider`` and its provider's
    keys; ``service.hudi_lock``): when a provider is named, hoodied takes that lock for planning and
    every timeline write of the table, and ``lock.url`` stays what replicas share among themselves.
    Merged key by key over ``defaults``; an empty provider opts a table out of the default one."""

    @field_validator("hudi_lock", mode="before")
    @classmethod
    def _hudi_lock_text(cls, v: Any) -> Any:
        # YAML reads 2181 as a number and true as a boolean; Hudi's keys are text, as in a writer's config
        if isinstance(v, Mapping):
            return {k: _hudi_text(x) for k, x in v.items()}
        return v

    @field_validator("hudi_lock")
    @classmethod
    def _hudi_lock(cls, v: dict[str, str]) -> dict[str, str]:
        # imported here: the lock backends load only for settings that name a Hudi lock
        from hoodied.service.hudi_lock import hudi_lock_problems

        problems = hudi_lock_problems(v)
        if problems:
            raise ValueError("; ".join(problems))
        return v


# ---------------------------------------------------------------------------- tables


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _normalise_location(value: str) -> str:
    """Local paths become absolute; ``file://`` URIs stay as they are; object-store URIs are
    checked (``scheme://bucket/path``) and written one way (lower-case scheme, no trailing ``/``),
    so one table is one entry however it was typed. Other schemes are refused here, at start-up,
    rather than failing on the first poll."""
    if "://" in value:
        scheme = value.split("://", 1)[0].lower()
        if scheme in OBJECT_STORE_SCHEMES:
            # imported here: obstore loads only for settings that name an object store
            from hoodied.hoodie.errors import StorageError
            from hoodied.hoodie.object_storage import ObjectLocation

            try:
                return ObjectLocation.parse(value).uri
            except StorageError as exc:
                raise ValueError(str(exc)) from None
        if scheme != "file":
            schemes = ", ".join(f"{s}://" for s in OBJECT_STORE_SCHEMES)
            raise ValueError(f"{value}: expected a local path, file:// or an object store URI ({schemes})")
        return value.rstrip("/") or value
    return os.path.abspath(os.path.expanduser(value))


def _check_hudi_lock_location(location: str, policy: Policy) -> None:
    """A file-system lock needs tables on a local file system, a storage lock tables on an object store."""
    if not policy.hudi_lock:
        return
    from hoodied.service.hudi_lock import HudiLockProvider, hudi_lock_provider

    provider = hudi_lock_provider(policy.hudi_lock)  # a bad name was reported by the field already
    on_store = "://" in location and location.split("://", 1)[0] in OBJECT_STORE_SCHEMES
    if provider is HudiLockProvider.FILESYSTEM and on_store:
        raise ValueError(f"{location} is on an object store: FileSystemBasedLockProvider needs a local table")
    if provider is HudiLockProvider.STORAGE and not on_store:
        raise ValueError(f"{location} is not on an object store, where StorageBasedLockProvider works")


class TableEntry(_Frozen):
    """A table watched because it is listed."""

    path: str
    """Local path, ``file://`` or object store URI (``s3://bucket/path``...) of the table's base folder."""
    policy: Policy = Policy()
    """The effective policy (``defaults`` with this entry's ``policy`` merged over it)."""

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return _normalise_location(v)

    @model_validator(mode="after")
    def _hudi_lock_fits(self) -> TableEntry:
        _check_hudi_lock_location(self.path, self.policy)
        return self


class DiscoverRoot(_Frozen):
    """A folder searched for tables (folders holding ``.hoodie/hoodie.properties``)."""

    root: str
    """Local path, ``file://`` or object store URI searched (an object store by delimiter listings)."""
    max_depth: int = Field(4, ge=1, le=32)
    """How many folder levels below the root a table may sit."""
    policy: Policy = Policy()
    """The effective policy of the tables found here (``defaults`` + this entry's ``policy``)."""

    @field_validator("root")
    @classmethod
    def _root(cls, v: str) -> str:
        return _normalise_location(v)

    @model_validator(mode="after")
    def _hudi_lock_fits(self) -> DiscoverRoot:
        _check_hudi_lock_location(self.root, self.policy)
        return self


# ---------------------------------------------------------------------------- daemon-wide groups


class Concurrency(_Frozen):
    """How much work runs at once in this replica (one job per table at any time; ``service.daemon.loop``).
    """

    workers: int = Field(4, ge=1, le=1024)
    """Jobs (plans and executions) at once."""
    per_service: dict[TableService, int] = Field(
        default_factory=lambda: {TableService.COMPACTION: 2, TableService.CLUSTERING: 1}
    )
    """Cap per service, below ``workers`` (Spark-heavy services are kept small)."""
    poll_threads: int = Field(8, ge=1, le=256)
    """Tables polled at once (each poll is one timeline listing)."""

    @field_validator("per_service")
    @classmethod
    def _positive(cls, v: dict[TableService, int]) -> dict[TableService, int]:
        for name, n in v.items():
            if n < 1:
                raise ValueError(f"per_service.{name} must be at least 1 (disable the service instead)")
        return v


class LockConfig(_Frozen):
    """Table lock and per-instant execution leases."""

    url: str = "local"
    """``local`` (one replica: a file lock in each table's ``.hoodie/.locks``, or for a table on an
    object store Hudi's storage-based lock in the bucket, ``service.locks`` ``auto``) or
    ``redis://HOST:PORT/DB`` / ``rediss://`` / ``unix://`` (shared by replicas)."""
    wait_ms: int = Field(10_000, ge=0)
    """How long one attempt waits for a table lock held by another writer."""
    retries: int = Field(2, ge=0)
    """Further attempts when the table lock is busy or Redis is unreachable."""
    lease_ms: int = Field(60_000, ge=1_000)
    """Lease of a table lock held in Redis (renewed every third of it)."""
    instant_lease_ms: int = Field(30_000, ge=1_000)
    """Lease of one instant's execution (at most one executor per instant across replicas);
    renewed every third of it while the job runs, taken over by another replica once it lapses."""

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v != "local" and not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"{v!r}: expected 'local' or a redis://HOST:PORT/DB URL")
        return v

    @property
    def is_redis(self) -> bool:
        return self.url != "local"

    def table_lock_settings(self) -> LockSettings:
        return LockSettings(wait_ms=self.wait_ms, retries=self.retries, lease_ms=self.lease_ms)

    def lease_settings(self) -> LockSettings:
        # one non-blocking try: a busy lease means another replica has the instant
        return LockSettings(wait_ms=0, retries=0, lease_ms=self.instant_lease_ms)


class ObjectStoreConfig(_Frozen):
    """Client settings of object-store tables, over the standard environment (``AWS_ENDPOINT_URL``,
    ``AWS_REGION``, ``AWS_ALLOW_HTTP``...). Credentials are never settings: they come from the
    standard environment or the instance's identity."""

    endpoint: str | None = None
    """The store's endpoint URL (an S3-compatible server, an Azure endpoint); default: environment."""
    region: str | None = None
    """The S3 region; default: environment."""
    allow_http: bool | None = None
    """Allow a plain ``http://`` endpoint (local servers); default: environment (``AWS_ALLOW_HTTP``)."""
    max_retries: int | None = Field(None, ge=0)
    """Retries of a failed request (throttling, 5xx, network) before it counts as failed."""
    retry_timeout_seconds: float | None = Field(None, gt=0)
    """The longest time a request is retried for."""

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not re.fullmatch(r"https?://[^\s/@?#]+(/[^\s?#@]*)?", v):
            # no user:password@ and no query: endpoints carry no secrets, so settings show them freely
            raise ValueError("expected http(s)://HOST[:PORT][/path], without credentials or a query")
        return v.rstrip("/")

    def settings(self) -> ObjectStoreSettings:
        """The settings ``hoodie.storage_factory.storage_for`` takes."""
        from hoodied.hoodie.object_storage import ObjectStoreSettings

        return ObjectStoreSettings(endpoint=self.endpoint, region=self.region, allow_http=self.allow_http,
                                   max_retries=self.max_retries, retry_timeout_s=self.retry_timeout_seconds)


class RetryConfig(_Frozen):
    """Failed jobs: retried with exponential backoff, then the table is quarantined."""

    max_attempts: int = Field(3, ge=1)
    """Attempts of one instant (or of planning one service) before the table is quarantined."""
    backoff_seconds: float = Field(10.0, gt=0)
    """Wait after the first failure; doubled after each further one."""
    backoff_max_seconds: float = Field(600.0, gt=0)
    """Cap of the wait between attempts."""

    def backoff(self, failures: int) -> float:
        return float(min(self.backoff_seconds * 2 ** max(failures - 1, 0), self.backoff_max_seconds))


class SparkConfig(_Frozen):
    """The engine of the data-rewriting services (compaction, clustering)."""

    master: str = "local[*]"
    """``local``, ``local[N]``, ``local[*]`` or a Spark Connect URL ``sc://HOST:PORT``."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Spark configuration passed as is (``spark.executor.memory: 4g``...)."""
    start_timeout_seconds: float = Field(120.0, gt=0)
    """Longest session start: a Spark Connect server's TCP connect, handshake and upload of the
    packages, or a local JVM's start; beyond it the engine is unavailable (``engine_unavailable``)."""
    retry_seconds: float = Field(30.0, gt=0)
    """How long the Spark Connect client retries a call whose server does not answer before the
    engine is unavailable (pyspark's own default is about ten minutes)."""
    start_at_startup: bool = True
    """``hoodied run`` starts the session (a local JVM, a Spark Connect session) in the background as
    it starts, so its first Spark job does not wait for Spark's start-up; polls and probes never wait
    for it, a job that comes meanwhile waits for the same start, and a start that fails is an engine
    outage as a job's failed start is. ``false``: the first Spark job starts it. A ``--once`` pass
    (and ``hoodied execute``) starts Spark only for a job, after its plan was checked."""
    log_level: Literal["DEBUG", "INFO", "WARN", "ERROR", "OFF"] = "ERROR"
    """The level of a local Spark's own JVM log lines on standard error (its log4j root logger,
    ``spark.log.level``): ``ERROR`` keeps Spark's start-up and WARN lines out of hoodied's log
    stream; ``WARN`` or ``INFO`` to debug Spark itself. A Spark Connect server logs on its own side."""

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator("master")
    @classmethod
    def _master(cls, v: str) -> str:
        if not (re.fullmatch(r"local(\[(\*|[1-9]\d*)\])?", v) or re.fullmatch(r"sc://[^\s/]+(/.*)?", v)):
            raise ValueError(f"{v!r}: expected local, local[N], local[*] or sc://HOST:PORT")
        return v


class HttpConfig(_Frozen):
    """The HTTP endpoint: ``/metrics``, ``/healthz``, ``/readyz``, ``/status``."""

    address: str | None = "127.0.0.1:9464"
    """``HOST:PORT`` to listen on (port 0: any free port); ``null`` switches HTTP off."""
    liveness_seconds: float | None = Field(None, gt=0)
    """``/healthz`` fails when no poll cycle ended for this long (default: 3 poll intervals + 60 s)."""

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is None or v.lower() in ("", "off", "none", "false"):
            return None
        host, sep, port = v.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{v!r}: expected HOST:PORT")
        return v

    @property
    def host_port(self) -> tuple[str, int] | None:
        if self.address is None:
            return None
        host, _, port = self.address.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)


class LogConfig(_Frozen):
    format: Literal["json", "console"] = "json"
    """One JSON object per line (for log collectors) or short console lines."""
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v


class HeartbeatConfig(_Frozen):
    """Hudi's writer heartbeats: must match the table's other writers."""

    interval_ms: int = Field(60_000, ge=10)
    """``hoodie.client.heartbeat.interval_in_ms``."""
    tolerable_misses: int = Field(2, ge=1)
    """``hoodie.client.heartbeat.tolerable.misses``: an inflight instant whose heartbeat is older
    than interval x misses is a failed attempt and is recovered."""


class TableControlsConfig(_Frozen):
    """Per-table controls shared by every replica and kept across restarts (``service.table_controls``):
    pause, quarantine and job history, in Redis when ``lock.url`` is Redis, else in ``local_store``."""

    local_store: str | None = None
    """The SQLite file of the controls when the lock is ``local`` (one replica), its folder created at
    start; default ``$XDG_STATE_HOME/hoodied/controls.sqlite`` (``~/.local/state/...``). Unused with Redis."""
    history_size: int = Field(50, ge=1, le=10_000)
    """Jobs kept per table in the history (older ones are dropped)."""
    quarantine_retry_seconds: float = Field(300.0, gt=0)
    """Wait before one replica first retries a quarantined table; doubled after each retry that
    finds the cause still there."""
    quarantine_retry_max_seconds: float = Field(21_600.0, gt=0)
    """Cap of the wait between two retries of a quarantined table."""
    http_writes: bool = False
    """Serve ``POST /tables/<table>/pause|resume|release`` (off: they answer 403)."""
    http_token: SecretStr | None = None
    """The bearer token the write endpoints require (``HOODIED_CONTROLS__HTTP_TOKEN``, from a Secret)."""

    @field_validator("local_store")
    @classmethod
    def _local_store(cls, v: str | None) -> str | None:
        if v is not None and ("://" in v or not v.strip()):
            raise ValueError(f"{v!r}: expected a local file path")
        return None if v is None else os.path.abspath(os.path.expanduser(v))

    @property
    def local_store_path(self) -> str:
        """``local_store``, or the default under ``$XDG_STATE_HOME``."""
        if self.local_store is not None:
            return self.local_store
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        return os.path.join(os.path.abspath(state), "hoodied", "controls.sqlite")

    @model_validator(mode="after")
    def _token(self) -> TableControlsConfig:
        if self.http_writes and not (self.http_token and self.http_token.get_secret_value().strip()):
            raise ValueError("http_writes needs http_token (HOODIED_CONTROLS__HTTP_TOKEN)")
        return self

    def retry_backoff(self, retries: int) -> float:
        """Seconds before the retry after ``retries`` retries of a quarantined table."""
        wait = self.quarantine_retry_seconds * 2 ** max(retries, 0)
        return float(min(wait, self.quarantine_retry_max_seconds))


# ---------------------------------------------------------------------------- the whole


class DaemonConfig(BaseSettings):
    """Everything ``hoodied run`` needs; built by ``load_config`` (see the module docstring)."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
        env_prefix="HOODIED_",
        env_nested_delimiter="__",
        case_sensitive=False,
    )

    tables: list[TableEntry] = Field(default_factory=list)
    """Tables watched by path."""
    discover: list[DiscoverRoot] = Field(default_factory=list)
    """Folders searched for tables, again every ``discover_interval_seconds``."""
    discover_interval_seconds: float = Field(300.0, gt=0)
    """How often the ``discover`` roots are searched again for new and removed tables."""
    defaults: Policy = Policy()
    """The policy of every table unless its entry says otherwise."""
    poll_interval_seconds: float = Field(10.0, gt=0)
    """Pause between two poll cycles (each lists every table's timeline folder once)."""
    concurrency: Concurrency = Concurrency()
    lock: LockConfig = LockConfig()
    object_store: ObjectStoreConfig = ObjectStoreConfig()
    retry: RetryConfig = RetryConfig()
    heartbeat: HeartbeatConfig = HeartbeatConfig()
    spark: SparkConfig = SparkConfig()
    http: HttpConfig = HttpConfig()
    controls: TableControlsConfig = TableControlsConfig()
    log: LogConfig = LogConfig()
    grace_period_seconds: float = Field(25.0, gt=0)
    """On SIGTERM: how long running jobs may take to finish before the process exits anyway
    (keep it below Kubernetes' terminationGracePeriodSeconds, default 30)."""
    clock_skew_ms: int = Field(200, ge=0)
    """``hoodie.time.generator.max_expected_clock_skew_ms`` of the tables' writers; also the bound past
    which a replica whose clock differs from the shared reference (Redis, else the object store) takes
    no work (``service.daemon.clock``)."""

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: Any, init_settings: Any, env_settings: Any, dotenv_settings: Any,
        file_secret_settings: Any,
    ) -> tuple[Any, ...]:
        # load_config merges file, environment and flags itself (the precedence lives in one place)
        return (init_settings,)

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        defaults = data.get("defaults") or {}
        if not isinstance(defaults, Mapping):
            return data  # the field validator reports it
        for key, path_key in (("tables", "path"), ("discover", "root")):
            entries = data.get(key)
            if not isinstance(entries, list):
                continue
            out: list[Any] = []
            for entry in entries:
                if isinstance(entry, str):
                    entry = {path_key: entry}
                if isinstance(entry, Mapping):
                    own = entry.get("policy") or {}
                    if isinstance(own, Mapping):
                        entry = {**entry, "policy": _deep_merge(defaults, own)}
                out.append(entry)
            data[key] = out
        lock, http = data.get("lock"), data.get("http")
        if isinstance(lock, str):
            data["lock"] = {"url": lock}
        if "http" in data and (http is None or http is False or isinstance(http, str)):
            data["http"] = {"address": http or None}  # `http: off` reads as False in YAML
        return data

    @model_validator(mode="after")
    def _one_table_lock_keys(self) -> DaemonConfig:
        if not self.defaults.hudi_lock and not any(r.policy.hudi_lock for r in self.discover):
            return self
        from hoodied.service.hudi_lock import ONE_TABLE_KEYS

        for where, keys in [("defaults", self.defaults.hudi_lock),
                            *((f"discover root {r.root}", r.policy.hudi_lock) for r in self.discover)]:
            named = [k for k in ONE_TABLE_KEYS if k in keys]
            if named:
                raise ValueError(
                    f"{where}: hudi_lock {', '.join(named)} names one table's lock; set it on that table's "
                    "entry (here every table would share one lock while each table's writers take their own)"
                )
        return self

    @model_validator(mode="after")
    def _hudi_skew(self) -> DaemonConfig:
        policies = [("defaults", self.defaults), *((f"table {t.path}", t.policy) for t in self.tables),
                    *((f"discover root {r.root}", r.policy) for r in self.discover)]
        if not any(p.hudi_lock for _, p in policies):
            return self
        from hoodied.service.hudi_lock import SKEW_KEY, table_skew_ms

        for where, policy in policies:
            skew = table_skew_ms(policy.hudi_lock)
            if skew is not None and skew > self.clock_skew_ms:
                # every new instant waits clock_skew_ms under the lock: at least the writers' skew
                raise ValueError(
                    f"{where}: hudi_lock {SKEW_KEY}={skew} is more than clock_skew_ms={self.clock_skew_ms}, "
                    f"which hoodied waits under every table's lock; raise clock_skew_ms to at least {skew}"
                )
        return self

    @field_validator("tables")
    @classmethod
    def _unique(cls, tables: list[TableEntry]) -> list[TableEntry]:
        # a field validator, not a model one: it runs (and is reported) beside other fields' problems
        seen: set[str] = set()
        for t in tables:
            if t.path in seen:
                raise ValueError(f"table {t.path} is listed twice")
            seen.add(t.path)
        return tables

    def liveness_seconds(self) -> float:
        return self.http.liveness_seconds or 3 * self.poll_interval_seconds + 60

    def policy_for(self, path: str, root: DiscoverRoot | None = None) -> Policy:
        for t in self.tables:
            if t.path == path:
                return t.policy
        return root.policy if root is not None else self.defaults


# ---------------------------------------------------------------------------- loading


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def read_settings_text(path: str | Path) -> str:
    """The text of a file the user named as settings (the settings file, a Helm values schema):
    ``ConfigError`` when it cannot be read or is not UTF-8, naming the first byte that is not."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            [f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"]
        ) from None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The settings file as a mapping (an empty file is ``{}``); ``ConfigError`` names the file and line."""
    text = read_settings_text(path)
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([f"{where}: invalid YAML: {problem}"]) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError([f"{path}: the top level must be a mapping of settings, not {type(doc).__name__}"])
    return doc


def environment_values() -> dict[str, Any]:
    """The ``HOODIED_*`` settings of the current environment as a nested mapping (strings, JSON decoded)."""
    return _environment(os.environ)[0]


# ---------------------------------------------------------------------------- the environment

#: ``HOODIED_*`` names that are not settings and are never reported: hoodied's test hooks
#: (``hoodie.crashpoints``), the test suite's folders of Hudi tables and Hudi's reference schemas
#: (``HOODIED_FIXTURES``, ``HOODIED_REFERENCE``) and the service links Kubernetes adds for a Service
#: whose name starts with ``hoodied`` (``HOODIED_SERVICE_HOST``, ``HOODIED_PORT_9464_TCP_ADDR``...).
_NOT_SETTINGS = re.compile(
    r"HOODIED_TEST_.*|HOODIED_FIXTURES|HOODIED_REFERENCE|HOODIED(_[A-Z0-9]+)*_"
    r"(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9]+)*|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)"
)


@dataclass(frozen=True)
class UnknownVariable:
    """A ``HOODIED_*`` environment variable that names no setting: ``run`` logs a warning and ignores it,
    ``config check`` reports it as a problem."""

    name: str
    suggestion: str | None
    """The closest setting's variable, if one is close."""

    def __str__(self) -> str:
        hint = f" (did you mean {self.suggestion}?)" if self.suggestion else ""
        return f"{self.name}: not a setting{hint}"


@dataclass(frozen=True)
class _Variable:
    path: tuple[str, ...]
    structured: bool
    """A group, list or mapping: the value is JSON (or a shorthand string)."""
    open: bool
    """A mapping of free keys (``spark.conf``): ``NAME__KEY`` sets one key."""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings group a field holds (``LockConfig``; the items of ``list[TableEntry]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _structured(annotation: Any) -> bool:
    if _model_of(annotation) is not None or get_origin(annotation) in (list, dict, tuple):
        return True
    return any(_structured(arg) for arg in get_args(annotation))


def _variables_of(model: type[BaseModel], prefix: tuple[str, ...]) -> dict[str, _Variable]:
    out: dict[str, _Variable] = {}
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        annotation = field.annotation
        out["HOODIED_" + "__".join(path).upper()] = _Variable(
            path, _structured(annotation), get_origin(annotation) is dict)
        group = _model_of(annotation)
        if group is not None and get_origin(annotation) is not list:  # list items only as JSON
            out.update(_variables_of(group, path))
    return out


@functools.cache
def _variables() -> dict[str, _Variable]:
    """Every environment variable that is a setting (``HOODIED_`` + the field path joined with ``__``)."""
    return _variables_of(DaemonConfig, ())


def _variable(name: str) -> _Variable | None:
    upper = name.upper()
    known = _variables()
    if upper in known:
        return known[upper]
    for prefix, var in known.items():
        if var.open and upper.startswith(prefix + "__") and len(upper) > len(prefix) + 2:
            return _Variable((*var.path, name[len(prefix) + 2:].lower()), False, False)
    return None


def _environment(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """The settings of the ``HOODIED_*`` variables as a nested mapping, and the variable of each path."""
    found: list[tuple[tuple[str, ...], str, Any]] = []
    for name, raw in environ.items():
        var = _variable(name) if name.upper().startswith("HOODIED_") else None
        if var is None:
            continue  # not a setting: unknown_environment reports it
        value: Any = raw
        if var.structured:
            try:
                value = json.loads(raw)
            except ValueError:
                pass  # a shorthand (HOODIED_LOCK=redis://..., HOODIED_HTTP=off); else validation names it
        found.append((var.path, name, value))
    values: dict[str, Any] = {}
    for path, _, value in sorted(found, key=lambda f: len(f[0])):  # a longer name refines a shorter one
        for key in reversed(path):
            value = {key: value}
        values = _deep_merge(values, value)
    return values, {path: name for path, name, _ in found}


def unknown_environment(environ: Mapping[str, str] | None = None) -> list[UnknownVariable]:
    """The ``HOODIED_*`` variables of ``environ`` (default: this process's) that are not settings, each
    with the closest setting's name."""
    environ = os.environ if environ is None else environ
    names = [name.removeprefix("HOODIED_") for name in _variables()]
    out = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("HOODIED_") or _NOT_SETTINGS.fullmatch(upper) or _variable(name) is not None:
            continue
        close = difflib.get_close_matches(upper.removeprefix("HOODIED_"), names, n=1)
        out.append(UnknownVariable(name, f"HOODIED_{close[0]}" if close else None))
    return out


# ---------------------------------------------------------------------------- secrets

#: A setting whose name says it holds a secret (``controls.http_token``, Spark options such as
#: ``spark.hadoop.fs.s3a.secret.key``): its value is never shown.
_SECRET_NAME = re.compile(r"password|passwd|secret|token|credential|(^|[._-])(key|sas)([._-]|$)", re.I)


def _redacted(value: Any, secret: bool) -> Any:
    if isinstance(value, Mapping):
        return {k: _redacted(v, secret or bool(_SECRET_NAME.search(str(k)))) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, secret) for v in value]
    if secret and value is not None:
        return "***"
    return mask_secrets(value) if isinstance(value, str) else value


def redacted_settings(settings: DaemonConfig) -> dict[str, Any]:
    """The settings as JSON values with every secret shown as ``***`` (``config check --print``): the
    values of settings named like a secret, URL passwords and credential parameters."""
    shown: dict[str, Any] = _redacted(settings.model_dump(mode="json"), False)
    return shown


# ---------------------------------------------------------------------------- problems


def _holds(tree: Any, path: tuple[Any, ...]) -> bool:
    """Whether a source's settings ``tree`` gives the value at ``path`` (or a list or shorthand above it,
    which replaces whatever lower sources had)."""
    if tree is None or (isinstance(tree, Mapping) and not tree):
        return False
    node = tree
    for key in path:
        if not isinstance(node, Mapping):
            return True
        if key not in node:
            return False
        node = node[key]
    return True


def _model_at(path: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = DaemonConfig
    for key in path:
        if isinstance(key, int):
            continue  # an item of a list of groups
        field = model.model_fields.get(str(key))
        group = _model_of(field.annotation) if field is not None else None
        if group is None:
            return None
        model = group
    return model


def _did_you_mean(loc: tuple[Any, ...]) -> str:
    model = _model_at(loc[:-1])
    if model is None or not loc or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


@dataclass(frozen=True)
class _Sources:
    """The sources of the merged settings, to say where a problem's value came from."""

    file: str | None
    doc: Mapping[str, Any]
    variables: Mapping[tuple[str, ...], str]
    flags: Mapping[str, Any]
    merged: Mapping[str, Any]

    def origin(self, loc: tuple[Any, ...]) -> tuple[Any, ...]:
        """``loc``, or the ``defaults`` key a table's effective policy took the value from: ``defaults`` is
        merged into every table's policy before validation, so its problem is one, not one per table."""
        if len(loc) > 2 and loc[0] in ("tables", "discover") and loc[2] == "policy":
            entries, index = self.merged.get(loc[0]), loc[1]
            entry = entries[index] if isinstance(entries, list) and isinstance(index, int) else None
            own = entry.get("policy") if isinstance(entry, Mapping) else None
            if not _holds(own, loc[3:]) and _holds(self.merged.get("defaults"), loc[3:]):
                return ("defaults", *loc[3:])
        return loc

    def where(self, loc: tuple[Any, ...]) -> str:
        """The highest source giving the value at ``loc``: the flags, a ``HOODIED_*`` variable, the file."""
        if _holds(self.flags, loc):
            return "flags"
        names = sorted(name for path, name in self.variables.items() if path[:len(loc)] == loc[:len(path)])
        if names:
            return ", ".join(names)
        return self.file if self.file is not None else "settings"


def _problems(exc: ValidationError, sources: _Sources) -> list[str]:
    """One line per problem (``where: key.path: what``), each once, secrets masked."""
    out: dict[str, None] = {}
    for err in exc.errors():
        loc = sources.origin(tuple(err["loc"]))
        where = sources.where(loc)
        msg, value = err["msg"], err.get("input")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting" + _did_you_mean(loc)
        elif any(_SECRET_NAME.search(str(key)) for key in loc):
            if isinstance(value, str) and value:
                msg = msg.replace(value, "***")  # a validator's message may quote the value
        elif err["type"] != "value_error" and not isinstance(value, dict | list | None):
            msg = f"{msg} (got {value!r})"
        shown = ".".join(str(key) for key in loc) or "(top level)"
        out[mask_secrets(f"{where}: {shown}: {msg}")] = None
    return list(out)


def load_config(file: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> DaemonConfig:
    """File < environment < ``overrides`` (the command-line flags, already shaped like the file).

    ``ConfigError`` lists every problem once, each with where its value came from: the file (and the key
    path in it), the ``HOODIED_*`` variable, or the flags.
    """
    doc: dict[str, Any] = read_yaml(file) if file is not None else {}
    env, variables = _environment(os.environ)
    flags = dict(overrides or {})
    merged = _deep_merge(_deep_merge(doc, env), flags)
    try:
        return DaemonConfig(**merged)
    except ValidationError as exc:
        sources = _Sources(str(file) if file is not None else None, doc, variables, flags, merged)
        raise ConfigError(_problems(exc, sources)) from None


# ---------------------------------------------------------------------------- JSON Schema

#: What ``DaemonConfig._expand`` and the field validators accept beyond the fields' own types.
_SHORTHANDS: dict[str, list[dict[str, Any]]] = {
    "lock": [{"type": "string", "description": "lock.url alone"}],
    "http": [{"type": ["string", "null"], "description": "http.address alone (off: none)"}, {"const": False}],
}
#: Settings whose names a field validator upper-cases (``level: info`` is ``INFO``).
_ANY_CASE = (("LogConfig", "level"), ("SparkConfig", "log_level"))


def _either(schema: dict[str, Any], *alternatives: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or one of ``alternatives``; its description and default stay outside."""
    inner = dict(schema)
    outer: dict[str, Any] = {key: inner.pop(key) for key in ("description", "default") if key in inner}
    return {**outer, "anyOf": [inner, *alternatives]}


def _any_case(words: list[str]) -> str:
    forms = ("".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in w) for w in words)
    return "^(" + "|".join(forms) + ")$"


def _tidy(node: Any, names: bool = False) -> Any:
    """Without pydantic's titles (the field names again), each description on one line; ``names``: a
    mapping of names to schemas (``properties``, ``$defs``)."""
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    if names:
        return {key: _tidy(value) for key, value in node.items()}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key == "default" and isinstance(value, dict) and ("$ref" in node or "anyOf" in node):
            continue  # a group's defaults: its own properties say them
        if key == "description" and isinstance(value, str):
            out[key] = " ".join(value.split())
        elif key in ("default", "const", "enum"):
            out[key] = value
        else:
            out[key] = _tidy(value, key in ("properties", "$defs"))
    return out


def settings_json_schema(ref_root: str = "#") -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a settings file as written: ``DaemonConfig``'s, with the
    shorthands it takes (``tables: [PATH]``, ``lock: URL``, ``http: off``, ``sort_columns: "a,b"``) and the
    levels in any case. What only code can check (paths, URL forms, the compaction strategy, a table
    listed twice) stays ``config check``'s. ``ref_root``: where the schema sits in its document."""
    schema = DaemonConfig.model_json_schema(ref_template=f"{ref_root}/$defs/{{model}}")
    top, defs = schema["properties"], schema["$defs"]
    for name in ("tables", "discover"):
        top[name]["items"] = {"anyOf": [{"type": "string"}, top[name]["items"]]}
    for name, alternatives in _SHORTHANDS.items():
        top[name] = _either(top[name], *alternatives)
    clustering = defs["ClusteringService"]["properties"]
    clustering["sort_columns"] = _either(clustering["sort_columns"], {"type": "string"})
    for group, name in _ANY_CASE:
        prop = defs.get(group, {}).get("properties", {}).get(name)
        if prop is not None and "enum" in prop:
            prop["pattern"] = _any_case(prop.pop("enum"))
    schema["description"] = ("hoodied's settings file (deploy/hoodied.yaml lists every key): checked by "
                             "`hoodied config check`, printed by `hoodied config schema`.")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **_tidy(schema)}


def chart_values_schema(values_schema: Mapping[str, Any]) -> dict[str, Any]:
    """A Helm chart's ``values.schema.json`` with ``settings_json_schema`` as the schema of its ``config``
    value; what the chart adds to ``config`` itself (a ``not`` refusing the keys the chart sets) is kept."""
    doc = copy.deepcopy(dict(values_schema))
    properties = doc.setdefault("properties", {})
    generated = settings_json_schema("#/properties/config")
    del generated["$schema"]  # only at a document's root
    own = {key: value for key, value in properties.get("config", {}).items() if key not in generated}
    properties["config"] = {**generated, **own}
    return doc
