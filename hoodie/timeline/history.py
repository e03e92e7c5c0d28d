"""The LSM timeline history of layout-2 tables (``.hoodie/timeline/history``).

Hudi 1.x archives completed instants that leave the active timeline into parquet files of
``HoodieLSMTimelineInstant`` rows, organised as an LSM tree and versioned by manifests.
This module reads it; ``hoodie.timeline.archive_writer`` writes it (as Hudi's archiver does).

Layout and grammar (``LSMTimeline``, ``LSMTimelineWriter``, ``HoodieLSMTimelineManifest``)::

    history/_version_                 text: the latest snapshot version N (decimal)
    history/manifest_<N>              JSON: {"files": [{"fileName": F, "fileLen": bytes}, ...]}
    history/<min>_<max>_<level>.parquet
        min, max = requested times of the first and last instant in the file; level >= 0
        columns  = instantTime, completionTime, action (strings), metadata, plan (bytes), version (int)

Only the files listed by the latest manifest are valid (others may be left-overs of a
compaction or a failed write). When ``_version_`` is unreadable, the highest ``manifest_<N>``
wins, as in Hudi. ``action`` is the *completed* action: a compaction is a ``commit`` whose
``plan`` holds the compaction plan, a log compaction a ``deltacommit`` with a plan, a
clustering a ``replacecommit`` whose metadata says ``operationType`` CLUSTER; this module
resolves them to ``Action.COMPACTION`` / ``LOG_COMPACTION`` / ``CLUSTERING``. ``metadata`` holds
the bytes of the completed timeline file, ``plan`` those of the requested file (for a
replacecommit, of the inflight file when that was not empty).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from hoodied.hoodie.avro.container import is_avro_container, read_single_record
from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.instant import Action, Instant, State, normalize_time

__all__ = [
    "COLUMNS",
    "MANIFEST_PREFIX",
    "VERSION_FILE",
    "History",
    "HistoryEntry",
    "HistoryFileName",
    "format_manifest",
    "latest_version",
    "manifest_name",
    "parse_manifest_name",
    "read_manifest",
]

log = logging.getLogger(__name__)

VERSION_FILE = "_version_"
MANIFEST_PREFIX = "manifest_"
_MANIFEST_RE = re.compile(r"^manifest_(\d+)$")
_FILE_RE = re.compile(r"^(\d+)_(\d+)_(\d+)\.parquet$")
COLUMNS = ("instantTime", "completionTime", "action", "metadata", "plan", "version")
_ACTIONS = {a.value: a for a in Action}


@dataclass(frozen=True, slots=True)
class HistoryFileName:
    """``<min>_<max>_<level>.parquet``: the requested-time range of a history file and its LSM level."""

    min_instant: str
    max_instant: str
    level: int

    @classmethod
    def parse(cls, name: str) -> HistoryFileName | None:
        m = _FILE_RE.match(name)
        return cls(m.group(1), m.group(2), int(m.group(3))) if m else None

    def format(self) -> str:
        return f"{self.min_instant}_{self.max_instant}_{self.level}.parquet"


def manifest_name(version: int) -> str:
    return f"{MANIFEST_PREFIX}{version}"


def parse_manifest_name(name: str) -> int | None:
    m = _MANIFEST_RE.match(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One archived instant and where its row lives (bytes are read on demand)."""

    instant: Instant
    file: str
    row: int


def latest_version(storage: Storage, path: str) -> int:
    """The latest snapshot version: ``_version_``, else the highest manifest; -1 when none."""
    version_path = f"{path}/{VERSION_FILE}"
    if storage.exists(version_path):
        raw = storage.read(version_path).decode("utf-8", "replace").strip()
        if raw.isdigit():
            return int(raw)
        log.warning("%s: unreadable version %r, falling back to the manifest listing", version_path, raw[:40])
    versions = [v for v in (parse_manifest_name(i.name) for i in storage.list(path)) if v is not None]
    return max(versions, default=-1)


def read_manifest(storage: Storage, path: str, version: int) -> list[tuple[str, int]]:
    """``(file name, length)`` of every valid history file of snapshot ``version``."""
    manifest_path = f"{path}/{manifest_name(version)}"
    data = storage.read(manifest_path)
    if not data.strip():
        return []
    try:
        doc = json.loads(data)
        return [(str(f["fileName"]), int(f.get("fileLen", 0))) for f in doc.get("files") or ()]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise HoodieFormatError(f"{manifest_path}: not a valid LSM timeline manifest ({exc})") from None


def format_manifest(files: Sequence[tuple[str, int]]) -> str:
    """Manifest JSON in the shape Hudi writes (a ``files`` list of ``fileName`` / ``fileLen``)."""
    return json.dumps({"files": [{"fileName": n, "fileLen": size} for n, size in files]}, indent=2)


def _read_parquet(storage: Storage, path: str, columns: Sequence[str]) -> pa.Table:
    try:
        pf = pq.ParquetFile(pa.BufferReader(storage.read(path)))
        present = [c for c in columns if c in pf.schema_arrow.names]
        return pf.read(columns=present)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise HoodieFormatError(f"{path}: not a readable LSM timeline parquet file ({exc})") from None


def _is_clustering(metadata: bytes | None, where: str) -> bool:
    """A completed replacecommit is a clustering when its metadata says operationType CLUSTER."""
    if not metadata:
        return False
    record: dict[str, Any]
    if is_avro_container(metadata):
        record = read_single_record(metadata, where)
    else:
        try:
            record = json.loads(metadata)
        except ValueError:
            raise HoodieFormatError(f"{where}: replacecommit metadata is neither Avro nor JSON") from None
    return record.get("operationType") == "CLUSTER"


class History:
    """The archived (LSM) part of a layout-2 timeline: completed instants only."""

    def __init__(self, storage: Storage, path: str, entries: list[HistoryEntry]) -> None:
        self.storage = storage
        self.path = path
        self.entries = entries
        self._by_time = {e.instant.requested_time: e for e in entries}
        self._cached_file: str | None = None
        self._cached_table: pa.Table | None = None

    @classmethod
    def load(cls, storage: Storage, config: TableConfig) -> History:
        """Read the latest snapshot; empty when the table has no history yet."""
        path = config.history_path
        if config.timeline_layout < 2:  # layout 1 archives into log files: ``archived_v6`` reads them
            return cls(storage, path, [])
        version = latest_version(storage, path)
        if version < 0:
            return cls(storage, path, [])
        entries: list[HistoryEntry] = []
        seen: set[str] = set()
        for name, _size in sorted(read_manifest(storage, path, version)):
            if HistoryFileName.parse(name) is None:
                log.warning("%s/%s: unexpected history file name, ignored", path, name)
                continue
            entries.extend(cls._load_file(storage, f"{path}/{name}", seen))
        entries.sort(key=lambda e: e.instant.requested_time)
        return cls(storage, path, entries)

    @staticmethod
    def _load_file(storage: Storage, file_path: str, seen: set[str]) -> list[HistoryEntry]:
        table = _read_parquet(storage, file_path, ("instantTime", "completionTime", "action", "plan"))
        cols = table.column_names
        if not {"instantTime", "action"} <= set(cols):
            raise HoodieFormatError(f"{file_path}: LSM timeline file lacks instantTime/action columns")
        times = table.column("instantTime").to_pylist()
        completions = (
            table.column("completionTime").to_pylist() if "completionTime" in cols else [None] * len(times)
        )
        actions = table.column("action").to_pylist()
        has_plan = table.column("plan").is_valid().to_pylist() if "plan" in cols else [False] * len(times)
        meta_col: pa.ChunkedArray | None = None  # read only if the file holds replacecommits
        out: list[HistoryEntry] = []
        for row, (t, c, a, planned) in enumerate(zip(times, completions, actions, has_plan, strict=True)):
            if not t or t in seen:
                continue  # Hudi keeps the first row it meets for an instant time
            action = _ACTIONS.get(a or "")
            if action is None:
                log.warning("%s: row %d has unknown action %r, ignored", file_path, row, a)
                continue
            if action is Action.COMMIT and planned:
                action = Action.COMPACTION
            elif action is Action.DELTA_COMMIT and planned:
                action = Action.LOG_COMPACTION
            elif action is Action.REPLACE_COMMIT:
                if meta_col is None:
                    meta_table = _read_parquet(storage, file_path, ("metadata",))
                    meta_col = (
                        meta_table.column("metadata")
                        if meta_table.num_columns
                        else pa.chunked_array([pa.nulls(len(times), pa.binary())])
                    )
                if _is_clustering(meta_col[row].as_py(), f"{file_path} row {row}"):
                    action = Action.CLUSTERING
            seen.add(t)
            t = normalize_time(t)
            completion = normalize_time(c) if c else None
            out.append(HistoryEntry(Instant(t, action, State.COMPLETED, completion), file_path, row))
        return out

    def instants(self) -> list[Instant]:
        return [e.instant for e in self.entries]

    def get(self, requested_time: str) -> HistoryEntry | None:
        return self._by_time.get(requested_time)

    def _cell(self, requested_time: str, column: str) -> bytes | None:
        entry = self._by_time.get(requested_time)
        if entry is None:
            return None
        if self._cached_file != entry.file:
            self._cached_table = _read_parquet(self.storage, entry.file, ("metadata", "plan"))
            self._cached_file = entry.file
        assert self._cached_table is not None
        if column not in self._cached_table.column_names:
            return None
        value = self._cached_table.column(column)[entry.row].as_py()
        return bytes(value) if value is not None else None

    def metadata_bytes(self, requested_time: str) -> bytes | None:
        """Bytes of the instant's completed timeline file (Avro, or JSON for legacy instants)."""
        return self._cell(requested_time, "metadata")

    def plan_bytes(self, requested_time: str) -> bytes | None:
        """Bytes of the instant's plan (requested file), when it had one."""
        return self._cell(requested_time, "plan")
