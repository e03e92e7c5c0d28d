"""Names of data files: base files and log files, and the write token.

Grammar (``FSUtils``)::

    base file  = file_id "_" write_token "_" instant "." extension
    log file   = "." file_id "_" instant ".log." version ["_" write_token] [".cdc"]
    write_token = task_partition "-" stage "-" attempt

In table version 6 a log file's instant is the base instant of its file slice; from
version 8 on it is the delta commit's own instant (see ``hoodie.fsview``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "BASE_FILE_EXTENSIONS",
    "PARTITION_METAFILE",
    "BaseFileName",
    "LogFileName",
    "make_write_token",
    "writer_instant",
]

_BASE_RE = re.compile(r"^(.+)_(\d+-\d+-\d+)_(\d+)\.([A-Za-z]+)$")
_LOG_RE = re.compile(r"^\.(.+)_(\d*)\.(log|archive)\.(\d+)(?:_(\d+-\d+-\d+))?(\.cdc)?$")

BASE_FILE_EXTENSIONS = {"parquet": "PARQUET", "hfile": "HFILE", "orc": "ORC", "lance": "LANCE"}


@dataclass(frozen=True, slots=True)
class BaseFileName:
    file_id: str
    write_token: str
    instant_time: str
    extension: str

    @classmethod
    def parse(cls, name: str) -> BaseFileName | None:
        m = _BASE_RE.match(name)
        if not m or m.group(4).lower() not in BASE_FILE_EXTENSIONS:
            return None
        return cls(m.group(1), m.group(2), m.group(3), m.group(4))

    def format(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant_time}.{self.extension}"

    def __str__(self) -> str:
        return self.format()


@dataclass(frozen=True, slots=True)
class LogFileName:
    file_id: str
    instant_time: str
    version: int
    write_token: str | None = None
    cdc: bool = False
    extension: str = "log"

    @classmethod
    def parse(cls, name: str) -> LogFileName | None:
        m = _LOG_RE.match(name)
        if not m:
            return None
        return cls(m.group(1), m.group(2), int(m.group(4)), m.group(5), bool(m.group(6)), m.group(3))

    def format(self) -> str:
        token = f"_{self.write_token}" if self.write_token else ""
        cdc = ".cdc" if self.cdc else ""
        return f".{self.file_id}_{self.instant_time}.{self.extension}.{self.version}{token}{cdc}"

    def sort_key(self) -> tuple[str, int, str]:
        """Hudi's log file order within a file group: instant, version, write token."""
        return (self.instant_time, self.version, self.write_token or "")

    def __str__(self) -> str:
        return self.format()


def writer_instant(name: str, table_version: int) -> str | None:
    """The instant that wrote a data file, when its name tells it.

    A base file names its writer. A log file names its delta commit from table version 8 on;
    in version 6 it names the file slice's base instant instead, so it tells nothing.
    """
    base = BaseFileName.parse(name)
    if base is not None:
        return base.instant_time
    if table_version >= 8:
        log = LogFileName.parse(name)
        return log.instant_time if log is not None else None
    return None


def make_write_token(task_partition: int, stage: int, attempt: int) -> str:
    return f"{task_partition}-{stage}-{attempt}"


PARTITION_METAFILE = ".hoodie_partition_metadata"
