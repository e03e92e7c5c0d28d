"""Writing the LSM timeline history of layout-2 tables (``.hoodie/timeline/history``).

The write side of ``hoodie.timeline.history`` (which reads it; the grammar is documented there).
It mirrors Apache Hudi 1.x's ``LSMTimelineWriter`` and ``MetadataConversionUtils``:

- One row per archived instant (``createLSMTimelineInstant``): ``instantTime`` = requested time,
  ``completionTime``, ``action`` = the *completed* file's action (a compaction is ``commit``),
  ``metadata`` = the completed file's bytes (absent when the file is empty), ``plan`` = the
  requested file's bytes for clean, compaction and log compaction; for replacecommit and
  clustering the inflight file's bytes when not empty, else the requested file's when not
  empty; ``version`` = 1 (``LSM_TIMELINE_INSTANT_VERSION_1``).
- A new layer (``write``): all instants of one archival go into one level-0 file
  ``<first>_<last>_0.parquet`` (first/last requested time). When that file exists already and the
  latest manifest lists it, the previous run committed it and nothing is written again; when it
  exists unlisted it is the corrupt leftover of a crash and is replaced.
- Committing a snapshot (``updateManifest``): the latest manifest's files, minus the files a
  compaction replaced, plus the new one, are written to ``manifest_<N+1>`` (a leftover of that
  name from a crash is deleted first), then ``_version_`` is set to ``N+1`` (versions start at 1).
  ``_version_`` is the commit point; Hudi deletes and recreates it, here it is replaced atomically.
  Manifests are Jackson's default pretty JSON (``HoodieLSMTimelineManifest.toJsonString``).
- Layer compaction (``compactAndClean``): for level L = 0, 1, ...: when the latest manifest lists
  at least ``hoodie.timeline.compaction.batch.size`` (10) files of level L, the files sorted by
  name are taken in order, at most batch-size of them, stopping once their total length passes
  1 GiB (a lone file over the limit is skipped); two or more are rewritten, rows in file order,
  into ``<min of mins>_<max of maxes>_<L+1>.parquet``, and a manifest that swaps them for it is
  committed; then level L+1 is looked at. Compaction stops at the first level with nothing to do.
- Cleaning, after compaction: when more than ``3 + (levels compacted)`` manifest versions exist,
  only the newest that many are kept: older manifests are deleted first, then every parquet
  file that no kept manifest lists.

Parquet files hold exactly the ``HoodieLSMTimelineInstant`` Avro schema as parquet-avro maps it
(optional UTF-8 strings and binaries, a required int32 ``version``) with the Avro schema in the
footer (``parquet.avro.schema``), gzip-compressed (Hudi's default codec), no bloom filter (the
archiver writes without meta fields).

Crash safety: a layer or compacted file is invisible until a manifest listing it is the one
``_version_`` names; readers (``History.load``) read only what that manifest lists, so a crash
at any step leaves the previous snapshot readable. Crash points: ``archive-layer-written``,
``archive-manifest-written``, ``archive-compacted-written``, ``archive-clean-manifests-deleted``
(prefixed ``mdt-`` when writing a metadata table's history).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from hoodied.hoodie.avro.container import schema_json
from hoodied.hoodie.crashpoints import crash_point
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.history import (
    VERSION_FILE,
    HistoryFileName,
    latest_version,
    manifest_name,
    parse_manifest_name,
    read_manifest,
)
from hoodied.hoodie.timeline.instant import Action, State
from hoodied.hoodie.timeline.writer import jackson_json

__all__ = [
    "COMPACTION_MAX_BYTES",
    "ArchivalUnsupportedError",
    "DEFAULT_COMPACTION_BATCH",
    "LSM_INSTANT_VERSION",
    "LSM_SCHEMA",
    "HistoryWriter",
    "LsmRow",
    "jackson_manifest",
    "lsm_row",
    "require_lsm_history",
]

log = logging.getLogger(__name__)

#: ``hoodie.timeline.compaction.batch.size`` default: files of one level compacted at once.
DEFAULT_COMPACTION_BATCH = 10
#: The gross size a compaction group stops at (``LSMTimelineWriter.getCandidateFiles``).
COMPACTION_MAX_BYTES = 1024 * 1024 * 1024
#: ``LSMTimeline.LSM_TIMELINE_INSTANT_VERSION_1``.
LSM_INSTANT_VERSION = 1
#: Snapshot versions kept by the cleaning, on top of one per compacted level.
VERSIONS_KEPT = 3

#: The parquet-avro mapping of ``HoodieLSMTimelineInstant``.
LSM_SCHEMA = pa.schema(
    [
        pa.field("instantTime", pa.string()),
        pa.field("completionTime", pa.string()),
        pa.field("action", pa.string()),
        pa.field("metadata", pa.binary()),
        pa.field("plan", pa.binary()),
        pa.field("version", pa.int32(), nullable=False),
    ],
    metadata={"parquet.avro.schema": schema_json("HoodieLSMTimelineInstant"), "writer.model.name": "avro"},
)

_REQUESTED_PLAN = frozenset({Action.CLEAN, Action.COMPACTION, Action.LOG_COMPACTION})
_REPLACE = frozenset({Action.REPLACE_COMMIT, Action.CLUSTERING})


class ArchivalUnsupportedError(UnsupportedTableError):
    """The table's archived timeline is no LSM history (table version 6: ``.hoodie/archived`` logs)."""


def require_lsm_history(config: TableConfig, where: str) -> None:
    """Refuse to archive a table whose archived timeline is not an LSM history (table version 6)."""
    if config.timeline_layout < 2 or config.version < 8:
        raise ArchivalUnsupportedError(
            f"{where}: archival of table version {config.version} is not supported "
            "(hoodied archives into the LSM timeline history of table versions 8 and 9)"
        )


@dataclass(frozen=True, slots=True)
class LsmRow:
    """One ``HoodieLSMTimelineInstant`` row."""

    instant_time: str
    completion_time: str | None
    action: str
    metadata: bytes | None
    plan: bytes | None
    version: int = LSM_INSTANT_VERSION

    def as_dict(self) -> dict[str, object]:
        return {
            "instantTime": self.instant_time,
            "completionTime": self.completion_time,
            "action": self.action,
            "metadata": self.metadata,
            "plan": self.plan,
            "version": self.version,
        }


def lsm_row(
    requested_time: str,
    pending_action: Action,
    completed_action: Action,
    completion_time: str | None,
    contents: dict[State, bytes],
) -> LsmRow:
    """The row of a completed instant from its timeline files' bytes, by state.

    ``pending_action`` is the action of its requested/inflight files (``compaction`` for a
    compaction), ``completed_action`` that of its completed file (``commit``).
    """

    def content(state: State) -> bytes | None:
        data = contents.get(state)
        return data or None  # Hudi stores an empty file as no value

    plan: bytes | None = None
    if pending_action in _REQUESTED_PLAN:
        plan = content(State.REQUESTED)
    elif pending_action in _REPLACE:
        plan = content(State.INFLIGHT) or content(State.REQUESTED)
    return LsmRow(requested_time, completion_time, completed_action.value, content(State.COMPLETED), plan)


def jackson_manifest(files: Sequence[tuple[str, int]]) -> str:
    """``HoodieLSMTimelineManifest.toJsonString()``: Jackson's default pretty printer."""
    return jackson_json({"files": [{"fileName": name, "fileLen": size} for name, size in files]})


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="gzip")
    return sink.getvalue()


class HistoryWriter:
    """Writes layers, manifests and compactions of one table's LSM history folder.

    ``ensure_held`` is called before every file created or deleted (the table lock's
    ``ensure_held``), so a writer that lost its lock stops before touching anything more.
    """

    def __init__(
        self, storage: Storage, path: str, ensure_held: Callable[[], None], *, crash_prefix: str = ""
    ) -> None:
        self.storage = storage
        self.path = path
        self.ensure_held = ensure_held
        # the metadata table's history is written in the same run as the data table's: its
        # crash points carry a prefix ("mdt-") so a test can stop in either
        self.crash_prefix = crash_prefix

    def _crash_point(self, name: str) -> None:
        crash_point(self.crash_prefix + name)

    def _file(self, name: str) -> str:
        return f"{self.path}/{name}"

    # ------------------------------------------------------------------ snapshots

    def latest_version(self) -> int:
        return latest_version(self.storage, self.path)

    def latest_files(self) -> list[tuple[str, int]]:
        """``(name, length)`` of every file of the latest snapshot, in manifest order."""
        version = self.latest_version()
        return read_manifest(self.storage, self.path, version) if version >= 0 else []

    def is_committed(self, name: str) -> bool:
        return any(n == name for n, _ in self.latest_files())

    def _delete(self, name: str) -> bool:
        self.ensure_held()
        return self.storage.delete(self._file(name))

    def update_manifest(self, remove: Sequence[str], add: str) -> int:
        """Commit a snapshot: the latest files minus ``remove`` plus ``add``; returns its version."""
        version = self.latest_version()
        files = [(n, size) for n, size in self.latest_files() if n not in set(remove)]
        files.append((add, self.storage.size(self._file(add))))
        new_version = 1 if version < 0 else version + 1
        manifest = manifest_name(new_version)
        if self.storage.exists(self._file(manifest)):
            # a crash after the manifest and before the version file left it; it was never valid
            log.info("%s: left by an interrupted write, replaced", self._file(manifest))
            self._delete(manifest)
        self.ensure_held()
        self.storage.put_if_absent(self._file(manifest), jackson_manifest(files).encode("utf-8"))
        self._crash_point("archive-manifest-written")
        self.ensure_held()
        self.storage.put(self._file(VERSION_FILE), str(new_version).encode("ascii"))
        log.info("%s: snapshot %d (%d files)", self.path, new_version, len(files))
        return new_version

    # ------------------------------------------------------------------ layers

    def _write_file(self, name: str, table: pa.Table) -> None:
        if self.storage.exists(self._file(name)):
            log.info("%s: left by an interrupted write, replaced", self._file(name))
            self._delete(name)
        data = _parquet_bytes(table)
        self.ensure_held()
        self.storage.put_if_absent(self._file(name), data)

    def write_layer(self, rows: Sequence[LsmRow]) -> str | None:
        """Write ``rows`` (sorted by requested time) as a new level-0 file and commit it.

        Returns the file name, or ``None`` when that file is already committed (a re-run).
        """
        if not rows:
            raise ValueError("an LSM layer needs at least one instant")
        name = HistoryFileName(rows[0].instant_time, rows[-1].instant_time, 0).format()
        if self.storage.exists(self._file(name)) and self.is_committed(name):
            log.info("%s: already committed by an earlier run", self._file(name))
            return None
        table = pa.Table.from_pylist([r.as_dict() for r in rows], schema=LSM_SCHEMA)
        self._write_file(name, table)
        self._crash_point("archive-layer-written")
        self.update_manifest((), name)
        return name

    # ------------------------------------------------------------------ compaction

    def compact_and_clean(self, batch_size: int = DEFAULT_COMPACTION_BATCH) -> list[str]:
        """Compact full levels into the next one, then clean old snapshots; returns the new files."""
        if batch_size < 2:
            raise ValueError("hoodie.timeline.compaction.batch.size must be at least 2")
        files = self.latest_files()
        written: list[str] = []
        level = 0
        while True:
            name = self._compact_level(files, level, batch_size)
            if name is None:
                break
            written.append(name)
            files = self.latest_files()
            level += 1
        self.clean(level)
        return written

    def _compact_level(self, files: Sequence[tuple[str, int]], level: int, batch_size: int) -> str | None:
        in_level = sorted(
            (n, size) for n, size in files if (p := HistoryFileName.parse(n)) is not None and p.level == level
        )
        if len(in_level) < batch_size:
            return None
        candidates: list[str] = []
        total = 0
        for name, size in in_level:
            total += size
            candidates.append(name)
            if len(candidates) >= batch_size:
                break
            if total > COMPACTION_MAX_BYTES:
                if len(candidates) < 2:
                    total = 0
                    candidates.clear()
                else:
                    break
        if len(candidates) < 2:
            return None
        parsed = [HistoryFileName.parse(n) for n in candidates]
        target = HistoryFileName(
            min(p.min_instant for p in parsed if p is not None),
            max(p.max_instant for p in parsed if p is not None),
            level + 1,
        ).format()
        tables = [self._read_layer(n) for n in candidates]
        self._write_file(target, pa.concat_tables(tables))
        self._crash_point("archive-compacted-written")
        self.update_manifest(candidates, target)
        log.info("%s: compacted %d level-%d files into %s", self.path, len(candidates), level, target)
        return target

    def _read_layer(self, name: str) -> pa.Table:
        path = self._file(name)
        try:
            table = pq.read_table(pa.BufferReader(self.storage.read(path)))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise HoodieFormatError(f"{path}: not a readable LSM timeline parquet file ({exc})") from None
        missing = [f.name for f in LSM_SCHEMA if f.name not in table.column_names]
        if missing:
            raise HoodieFormatError(f"{path}: LSM timeline file lacks columns {missing}")
        return table.select(LSM_SCHEMA.names).cast(LSM_SCHEMA)

    # ------------------------------------------------------------------ cleaning

    def manifest_versions(self) -> list[int]:
        return sorted(
            v for v in (parse_manifest_name(i.name) for i in self.storage.list(self.path)) if v is not None
        )

    def clean(self, compacted_levels: int) -> list[str]:
        """Keep the newest ``3 + compacted_levels`` snapshots; delete older manifests, then unlisted files."""
        versions = self.manifest_versions()
        keep = VERSIONS_KEPT + compacted_levels
        if len(versions) <= keep:
            return []
        kept = versions[-keep:]
        listed: set[str] = set()
        for version in kept:
            listed.update(n for n, _ in read_manifest(self.storage, self.path, version))
        deleted: list[str] = []
        for version in versions[:-keep]:
            if self._delete(manifest_name(version)):
                deleted.append(manifest_name(version))
        self._crash_point("archive-clean-manifests-deleted")
        for info in self.storage.list(self.path):
            if info.is_dir or HistoryFileName.parse(info.name) is None or info.name in listed:
                continue
            if self._delete(info.name):
                deleted.append(info.name)
        if deleted:
            log.info("%s: cleaned %d old snapshot files", self.path, len(deleted))
        return deleted
