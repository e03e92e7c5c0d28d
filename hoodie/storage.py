"""Storage: the one small interface through which hoodied touches files.

A ``Storage`` is rooted at a table's base path and speaks in relative paths with ``/``
separators, so models never build absolute paths. Implementations: ``LocalStorage`` here for
local paths, ``hoodied.hoodie.object_storage`` for S3, GCS and Azure (built on this module);
``hoodied.hoodie.storage_factory.storage_for`` picks one by URI scheme, above both, so neither
imports the other's side. Instances pickle (without secrets), so they travel to Spark workers.

Grammar of a relative path: ``segment ("/" segment)*``; the empty string is the root.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol, runtime_checkable

from hoodied.hoodie.errors import (
    FileAlreadyExistsError,
    StorageError,
    StorageFileNotFoundError,
)

__all__ = [
    "OBJECT_STORE_SCHEMES",
    "STORAGE_REQUESTS",
    "FileInfo",
    "LocalStorage",
    "LocalWriteOnceFile",
    "RequestCounter",
    "Storage",
    "WriteOnceFile",
]

#: URI schemes that name a table on an object store (``hoodied.hoodie.object_storage``).
OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss")


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One entry of a listing: ``path`` is relative to the storage root."""

    path: str
    size: int
    mtime_ms: int
    is_dir: bool

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class RequestCounter:
    """Requests sent to object stores, by operation (``list``, ``get``, ``head``, ``put``,
    ``delete``): what a deployment pays for and what throttling counts. Thread-safe; the daemon
    reads it for its metrics.

    Counted where ``hoodied.hoodie.object_storage`` sends a request: one per listing page
    (up to 1,000 entries; a listing that stops early counts the pages it fetched), one per
    GET, ranged GET, HEAD, PUT and DELETE; retries inside the client are not seen. Local
    storage counts nothing: its calls are system calls, nothing is billed or throttled, and
    the local poll path (one ``stat`` per table) stays free of a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def add(self, operation: str, n: int = 1) -> None:
        with self._lock:
            self._counts[operation] = self._counts.get(operation, 0) + n

    def snapshot(self) -> dict[str, int]:
        """The counts so far (a copy), by operation."""
        with self._lock:
            return dict(self._counts)


#: The process's object-store requests (one counter: every table's storage adds to it).
STORAGE_REQUESTS = RequestCounter()


@runtime_checkable
class Storage(Protocol):
    """Relative-path file access rooted at a base path."""

    @property
    def base_uri(self) -> str: ...

    def read(self, path: str) -> bytes: ...

    def read_range(self, path: str, offset: int, length: int) -> bytes: ...

    def open(self, path: str) -> BinaryIO: ...

    def size(self, path: str) -> int: ...

    def exists(self, path: str) -> bool: ...

    def list(self, path: str = "") -> list[FileInfo]: ...

    def walk(self, path: str = "") -> Iterator[FileInfo]: ...

    def list_after(
        self, path: str, after: str | None = None, before: str | None = None
    ) -> builtins.list[FileInfo]:
        """The files (not folders) directly in folder ``path`` whose names sort after ``after``
        and before ``before`` (each bound exclusive, ``None`` = open), in name order; an absent
        folder lists as empty. Names compare as code points, which is the byte order of their
        UTF-8 keys on an object store (one request there for up to 1,000 names)."""
        ...

    def put_if_absent(self, path: str, data: bytes) -> None: ...

    def put(self, path: str, data: bytes) -> None: ...

    def create_if_absent(self, path: str) -> WriteOnceFile: ...

    def delete(self, path: str) -> bool:
        """Delete a file. ``True`` when it was known to be there just before the delete, ``False``
        when it was already gone. Exact on a local file system; on an object store (where a
        DELETE of a missing key succeeds) it is a lookup then a delete, as Hadoop's S3A does, so
        two concurrent deleters of one file may both see ``True``."""
        ...

    def child(self, path: str) -> Storage: ...

    def local_path(self, path: str = "") -> str | None: ...


class WriteOnceFile(ABC):
    """A file being written for a write-once create: streamed to a local temp file, then
    published under its final name by ``commit()`` (``FileAlreadyExistsError`` if the target
    appeared meanwhile); each ``Storage`` has its own way of publishing.

    ``path`` is the temp file's local path, for writers (pyarrow) that write faster to a path
    than to a Python file object. ``abort()`` (or leaving the ``with`` block by an exception)
    removes the temp file; ``commit()`` removes it on every path too.
    """

    path: str

    def __init__(self, temp_path: str) -> None:
        self.path = temp_path
        self._done = False

    @abstractmethod
    def commit(self) -> int:
        """Make the written file durable and visible under its final name; returns its size."""

    def abort(self) -> None:
        if not self._done:
            self._done = True
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def __enter__(self) -> WriteOnceFile:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.abort()


class LocalWriteOnceFile(WriteOnceFile):
    """``WriteOnceFile`` on a local file system: the temp file sits beside the target and is
    hard-linked into place (a link never replaces an existing file)."""

    def __init__(self, storage: LocalStorage, relative: str, target: str) -> None:
        self._storage = storage
        self._relative = relative
        self._target = target
        parent = os.path.dirname(target)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise storage._errors(relative, exc) from exc
        super().__init__(os.path.join(parent, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp"))

    def commit(self) -> int:
        try:
            with open(self.path, "rb+") as f:
                os.fsync(f.fileno())
            size = os.stat(self.path).st_size
            os.link(self.path, self._target)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise FileAlreadyExistsError(f"{self._target}: already exists") from exc
            raise self._storage._errors(self._relative, exc) from exc
        finally:
            # linked or not, the temp goes, whatever stopped the commit (an interrupt too); a
            # process killed meanwhile leaves it to ``hoodie.temp_files``
            self.abort()
        return size


def _join(root: str, path: str) -> str:
    if not path:
        return root
    if path.startswith("/") or ".." in path.split("/"):
        raise StorageError(f"{path}: not a relative path inside the table")
    return os.path.join(root, *path.split("/"))


class LocalStorage:
    """``Storage`` on a local (or mounted) file system."""

    def __init__(self, root: str) -> None:
        self._root = os.path.abspath(root)

    def __getstate__(self) -> dict[str, str]:
        return {"root": self._root}

    def __setstate__(self, state: dict[str, str]) -> None:
        self._root = state["root"]

    def __repr__(self) -> str:
        return f"LocalStorage({self._root!r})"

    @property
    def base_uri(self) -> str:
        return self._root

    def local_path(self, path: str = "") -> str | None:
        return _join(self._root, path)

    def child(self, path: str) -> LocalStorage:
        return LocalStorage(_join(self._root, path))

    def _errors(self, path: str, exc: OSError) -> StorageError:
        if isinstance(exc, FileNotFoundError):
            return StorageFileNotFoundError(f"{_join(self._root, path)}: file not found")
        if isinstance(exc, PermissionError):
            return StorageError(f"{_join(self._root, path)}: permission denied")
        return StorageError(f"{_join(self._root, path)}: {exc.strerror or exc}")

    def read(self, path: str) -> bytes:
        try:
            with open(_join(self._root, path), "rb") as f:
                return f.read()
        except OSError as exc:
            raise self._errors(path, exc) from exc

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            with open(_join(self._root, path), "rb") as f:
                f.seek(offset)
                return f.read(length)
        except OSError as exc:
            raise self._errors(path, exc) from exc

    def open(self, path: str) -> BinaryIO:
        try:
            return open(_join(self._root, path), "rb")
        except OSError as exc:
            raise self._errors(path, exc) from exc

    def size(self, path: str) -> int:
        try:
            return os.stat(_join(self._root, path)).st_size
        except OSError as exc:
            raise self._errors(path, exc) from exc

    def exists(self, path: str) -> bool:
        return os.path.exists(_join(self._root, path))

    def list(self, path: str = "") -> list[FileInfo]:
        """Entries directly under ``path``; an absent folder lists as empty."""
        full = _join(self._root, path)
        prefix = f"{path}/" if path else ""
        out: list[FileInfo] = []
        try:
            with os.scandir(full) as it:
                for entry in it:
                    st = entry.stat()
                    out.append(
                        FileInfo(prefix + entry.name, st.st_size, st.st_mtime_ns // 1_000_000, entry.is_dir())
                    )
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return []
        except OSError as exc:
            raise self._errors(path, exc) from exc
        return out

    def walk(self, path: str = "") -> Iterator[FileInfo]:
        """Every file (not folder) below ``path``, depth first."""
        for info in self.list(path):
            if info.is_dir:
                yield from self.walk(info.path)
            else:
                yield info

    def list_after(
        self, path: str, after: str | None = None, before: str | None = None
    ) -> builtins.list[FileInfo]:
        """See ``Storage.list_after``: one ``scandir``, filtered and sorted here."""
        out = [
            i for i in self.list(path)
            if not i.is_dir and (after is None or i.name > after) and (before is None or i.name < before)
        ]
        out.sort(key=lambda i: i.name)
        return out

    def _write_temp(self, target: str, data: bytes) -> str:
        """``data`` durably in a fresh temp file beside ``target``; returns its path."""
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            # a full disk fails the write or the flush: the partial temp file must not stay behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Write-once create: a temp file, then an atomic no-replace link into place."""
        target = _join(self._root, path)
        tmp = None
        try:
            tmp = self._write_temp(target, data)
            os.link(tmp, target)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise FileAlreadyExistsError(f"{target}: already exists") from exc
            raise self._errors(path, exc) from exc
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def put(self, path: str, data: bytes) -> None:
        """Atomic create-or-replace (temp file + rename); for files Hudi itself overwrites."""
        target = _join(self._root, path)
        tmp = None
        try:
            tmp = self._write_temp(target, data)
            os.replace(tmp, target)
            tmp = None
        except OSError as exc:
            raise self._errors(path, exc) from exc
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def create_if_absent(self, path: str) -> WriteOnceFile:
        """Stream a large write-once file (see ``WriteOnceFile``); memory stays with the writer."""
        return LocalWriteOnceFile(self, path, _join(self._root, path))

    def delete(self, path: str) -> bool:
        """Delete a file; ``False`` when it was already gone."""
        try:
            os.unlink(_join(self._root, path))
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise self._errors(path, exc) from exc
