"""Write markers: one empty file per data file an executor creates, under ``.hoodie/.temp/<instant>/``.

Grammar of a direct marker (Hudi's ``DirectWriteMarkers``), relative to the marker folder::

    marker   = [partition "/"] data_file ".marker." io_type
    io_type  = "CREATE" | "MERGE" | "APPEND"

``CREATE`` marks a new base file, ``MERGE`` a base file written from an older one, ``APPEND``
a log file. The marker is created *before* the data file, so after a crash the markers name
every file the failed attempt may have left behind; rollback deletes exactly those.
hoodied writes direct markers. It also reads the timeline-server-based markers Hudi's Spark
writers use by default (``MARKERS.type`` saying ``TIMELINE_SERVER_BASED``, and
``MARKERS0``, ``MARKERS1``... holding one marker per line), so it can roll back their failed
attempts too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from hoodied.hoodie.errors import FileAlreadyExistsError, HoodieFormatError
from hoodied.hoodie.storage import Storage

log = logging.getLogger(__name__)

__all__ = ["MARKER_FOLDER", "IOType", "Marker", "WriteMarkers"]

MARKER_FOLDER = ".hoodie/.temp"
_MARKER_EXT = ".marker."
_TYPE_FILE = "MARKERS.type"
_SERVER_PREFIX = "MARKERS"


class IOType(StrEnum):
    CREATE = "CREATE"
    MERGE = "MERGE"
    APPEND = "APPEND"


@dataclass(frozen=True, slots=True)
class Marker:
    """One marker: the data file (partition + name) it stands for and how it was written."""

    partition: str
    file_name: str
    io_type: IOType

    @property
    def data_path(self) -> str:
        """The data file's path relative to the table base path."""
        return f"{self.partition}/{self.file_name}" if self.partition else self.file_name

    def format(self) -> str:
        """The marker's path relative to its instant's marker folder."""
        return f"{self.data_path}{_MARKER_EXT}{self.io_type.value}"

    @classmethod
    def parse(cls, relative: str) -> Marker | None:
        """Parse a marker path relative to the marker folder; ``None`` for anything else."""
        head, sep, io = relative.rpartition(_MARKER_EXT)
        if not sep or io not in IOType.__members__ or not head or head.endswith("/"):
            return None
        partition, _, name = head.rpartition("/")
        return cls(partition, name, IOType(io))


class WriteMarkers:
    """The markers of one instant."""

    def __init__(self, storage: Storage, instant_time: str) -> None:
        self.storage = storage
        self.instant_time = instant_time
        self.folder = f"{MARKER_FOLDER}/{instant_time}"

    def marker_path(self, marker: Marker) -> str:
        return f"{self.folder}/{marker.format()}"

    def create(self, partition: str, file_name: str, io_type: IOType) -> Marker:
        """Create the marker for a data file about to be written; an existing marker is fine (re-run)."""
        marker = Marker(partition.strip("/"), file_name, io_type)
        try:
            self.storage.put_if_absent(self.marker_path(marker), b"")
        except FileAlreadyExistsError:
            log.debug("%s: marker already there", self.marker_path(marker))
        return marker

    def exists(self) -> bool:
        """True when the marker folder holds at least one file (empty folders may stay behind)."""
        return next(iter(self.storage.walk(self.folder)), None) is not None

    def markers(self) -> list[Marker]:
        """Every marker of the instant (direct and timeline-server-based), sorted by data path."""
        found: set[Marker] = set()
        prefix = self.folder + "/"
        server_based = self._is_server_based()
        for info in self.storage.walk(self.folder):
            rel = info.path[len(prefix) :]
            if "/" not in rel and rel.startswith(_SERVER_PREFIX):
                if rel != _TYPE_FILE and server_based:
                    found.update(self._read_server_file(info.path))
                continue
            marker = Marker.parse(rel)
            if marker is None:
                log.warning("%s: not a marker file, ignored", info.path)
                continue
            found.add(marker)
        return sorted(found, key=lambda m: (m.data_path, m.io_type.value))

    def data_files(self, io_types: tuple[IOType, ...] = tuple(IOType)) -> list[str]:
        """Relative paths of the data files the markers name (optionally only some IO types)."""
        return sorted({m.data_path for m in self.markers() if m.io_type in io_types})

    def reconcile(self, kept: set[str]) -> list[str]:
        """Delete data files that have markers but are not in ``kept`` (the commit's write stats):
        output of failed or duplicate task attempts (Hudi's ``finalizeWrite``). Returns them."""
        removed = []
        for marker in self.markers():
            if marker.data_path not in kept and self.storage.delete(marker.data_path):
                removed.append(marker.data_path)
        return removed

    def delete_all(self) -> int:
        """Delete every file in the marker folder (done after the instant completes or is rolled back)."""
        count = 0
        for info in list(self.storage.walk(self.folder)):
            if self.storage.delete(info.path):
                count += 1
        return count

    def _is_server_based(self) -> bool:
        path = f"{self.folder}/{_TYPE_FILE}"
        if not self.storage.exists(path):
            return False
        kind = self.storage.read(path).decode("utf-8", errors="replace").strip()
        return kind == "TIMELINE_SERVER_BASED"

    def _read_server_file(self, path: str) -> set[Marker]:
        out: set[Marker] = set()
        for line in self.storage.read(path).decode("utf-8", errors="replace").splitlines():
            line = line.strip()
            if not line:
                continue
            marker = Marker.parse(line)
            if marker is None:
                raise HoodieFormatError(f"{path}: line {line!r} is not a marker")
            out.add(marker)
        return out
