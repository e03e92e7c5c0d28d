"""``Storage`` on object stores: S3 (``s3://``, ``s3a://``), GCS (``gs://``) and Azure Blob /
ADLS Gen2 (``az://``, ``abfs://``, ``abfss://``), through obstore (the Rust ``object_store``
crate hudi-rs uses).

What it owns: turning a table URI into a bucket and a key prefix, the store's client settings,
the Hudi write rules on object stores, and mapping the store's errors to the project's tree.

- Write-once: ``put_if_absent`` is a conditional create (S3 and Azure ``If-None-Match: *``,
  GCS generation 0); "already exists" -> ``FileAlreadyExistsError``. A create whose response
  was lost is retried by the client and then finds our own object: an existing object with
  exactly our bytes counts as our create (so creates of identical bytes are idempotent; mutual
  exclusion between writers of identical bytes comes from the table lock, not from here).
- Replace: ``put`` is one PUT, which object stores apply atomically.
- Conditional overwrite: ``read_versioned`` returns an object's bytes with the version they
  are (``ObjectVersion``: the ETag of S3 and Azure, and on GCS the generation, which obstore
  reports as the version); ``put_if_version`` writes only while the object is still at that
  version (S3 and Azure ``If-Match: <etag>``, GCS ``ifGenerationMatch``), or only while it is
  absent (version ``None``: the conditional create). A changed, removed or (for a create)
  present object -> ``PreconditionFailedError``. Checked against real servers: moto and Azurite
  answer a stale ``If-Match`` with 412, and so does obstore's in-memory store (GCS-shaped); an
  ``If-Match`` on a missing object is refused too (moto 404, Azurite 412).
- Streamed files (``create_if_absent``) go to a local temp file; ``commit`` uploads it with a
  conditional create up to ``ObjectStoreSettings.conditional_put_limit`` bytes (such a create is
  a single request held in memory), larger files after a lookup in parts (data files have unique
  names). A failed upload leaves no object under the final name; the temp file is always removed.
- ``delete``: a lookup then a delete (a DELETE of a missing key succeeds on S3 and GCS).
- ``list_after``: a flat listing from an offset (S3 ``start-after``, obstore's ``offset``) read
  lazily and left at an upper bound, so polling a folder for names after the last one seen is
  one request; names at or before the offset are dropped here too, for endpoints that ignore it.
- Every request sent is counted in ``hoodie.storage.STORAGE_REQUESTS`` by operation (``list``
  per page of up to 1,000 entries, ``get``, ``head``, ``put``, ``delete``).
- ``base_uri`` is the URI as given, scheme included (``s3a://b/t`` stays ``s3a://b/t``), without
  a trailing ``/``: it is what a plan's full paths start with when this writer names them.

Credentials come from the standard environment (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``) and
instance or workload identity, never from this module's state: a pickled storage carries the
URI and ``ObjectStoreSettings`` only, and rebuilds its client from the worker's environment.
"""

from __future__ import annotations

import builtins
import io
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import AzureStore, GCSStore, ObjectStore, S3Store

from hoodied.hoodie.errors import (
    FileAlreadyExistsError,
    PreconditionFailedError,
    StorageError,
    StorageFileNotFoundError,
    TableNotFoundError,
)
from hoodied.hoodie.storage import OBJECT_STORE_SCHEMES, STORAGE_REQUESTS, FileInfo, WriteOnceFile

if TYPE_CHECKING:
    from obstore import PutMode, UpdateVersion
    from obstore.store import ClientConfig, RetryConfig

__all__ = [
    "ObjectLocation",
    "ObjectStorage",
    "ObjectStoreSettings",
    "ObjectVersion",
    "ObjectWriteOnceFile",
    "open_object_storage",
]

#: Which store serves each scheme.
_KINDS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure"}
assert set(_KINDS) == set(OBJECT_STORE_SCHEMES)

#: Read-ahead of ``open()``'s file objects: one ranged GET per this many bytes at most when a
#: reader asks for small pieces (parquet footers); large reads go to the store in one request.
_READ_BUFFER = 1 << 20


@dataclass(frozen=True, slots=True)
class ObjectStoreSettings:
    """Client settings the daemon's config may add to the standard environment. No secrets:
    these travel with a pickled storage to Spark workers."""

    #: the store's endpoint (a local S3 server, an Azure endpoint); ``None`` = environment/default
    endpoint: str | None = None
    #: the S3 region; ``None`` = environment/default
    region: str | None = None
    #: allow plain ``http://`` endpoints (local servers); ``None`` = environment (``AWS_ALLOW_HTTP``)
    allow_http: bool | None = None
    #: retries of a failed request (throttling, 5xx, network) before it counts as failed
    max_retries: int | None = None
    #: the longest time, in seconds, a request is retried for
    retry_timeout_s: float | None = None
    #: streamed files up to this many bytes are uploaded by one conditional create (held in memory)
    conditional_put_limit: int = 64 << 20


@dataclass(frozen=True, slots=True)
class ObjectLocation:
    """A table URI split into what the store needs: ``scheme://bucket/prefix``.

    ``bucket`` is the URI's authority as written (``container@account.dfs.core.windows.net``
    for ``abfss://``); ``prefix`` has no leading or trailing ``/`` ("" = the bucket's root).
    """

    scheme: str
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, uri: str) -> ObjectLocation:
        scheme, sep, rest = uri.partition("://")
        if not sep or scheme.lower() not in _KINDS:
            raise StorageError(f"{uri}: not an object store URI ({', '.join(s + '://' for s in _KINDS)})")
        bucket, _, prefix = rest.partition("/")
        prefix = prefix.strip("/")
        if not bucket or "?" in uri or "#" in uri:
            raise StorageError(f"{uri}: expected {scheme}://bucket/path, without a query or fragment")
        parts = prefix.split("/") if prefix else []
        if any(p in ("", ".", "..") for p in parts):
            raise StorageError(f"{uri}: the path has empty, '.' or '..' segments")
        return cls(scheme.lower(), bucket, prefix)

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}" if self.prefix else f"{self.scheme}://{self.bucket}"

    @property
    def kind(self) -> str:
        return _KINDS[self.scheme]

    def key(self, path: str) -> str:
        """The object key of the table-relative ``path``."""
        if path and (path.startswith("/") or path.endswith("/") or any(
            p in ("", ".", "..") for p in path.split("/")
        )):
            raise StorageError(f"{path}: not a relative path inside the table")
        if not path:
            return self.prefix
        return f"{self.prefix}/{path}" if self.prefix else path

    def file_key(self, path: str) -> str:
        """The object key of the table-relative file ``path`` (the root is not a file)."""
        if not path:
            raise StorageError(f"{self.uri}: the table's folder is not a file")
        return self.key(path)

    def relative(self, key: str) -> str:
        """The table-relative path of an object key listed under this location."""
        return key[len(self.prefix) + 1:] if self.prefix else key

    def child(self, path: str) -> ObjectLocation:
        return ObjectLocation(self.scheme, self.bucket, self.key(path))

    def display(self, key: str) -> str:
        return f"{self.scheme}://{self.bucket}/{key}"


@dataclass(frozen=True, slots=True)
class ObjectVersion:
    """The version of an object a conditional overwrite names: its ETag (S3, Azure, in-memory
    stores; quoted, as the server sent it) and its version (GCS: the generation). Both are kept
    because each store checks a different one."""

    e_tag: str | None
    version: str | None

    def __post_init__(self) -> None:
        if not self.e_tag and not self.version:
            raise StorageError("the store reported neither an ETag nor a version for a conditional write")

    def __str__(self) -> str:
        return self.e_tag or self.version or ""

    def as_update(self) -> UpdateVersion:
        update: UpdateVersion = {}
        if self.e_tag:
            update["e_tag"] = self.e_tag
        if self.version:
            update["version"] = self.version
        return update


def _build_store(loc: ObjectLocation, settings: ObjectStoreSettings) -> ObjectStore:
    """The obstore client of ``loc``'s bucket; credentials from the environment."""
    retry: RetryConfig = {}
    if settings.max_retries is not None:
        retry["max_retries"] = settings.max_retries
        retry["backoff"] = {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=15),
                            "base": 2}
    if settings.retry_timeout_s is not None:
        retry["retry_timeout"] = timedelta(seconds=settings.retry_timeout_s)
    # allow_http must go through client_options: in the store config it panics inside obstore.
    client: ClientConfig = {"allow_http": True} if settings.allow_http else {}
    extra: dict[str, Any] = {}
    if settings.endpoint is not None:
        extra["endpoint"] = settings.endpoint
    if settings.region is not None:
        if loc.kind != "s3":
            raise StorageError(f"{loc.uri}: a region applies to S3 only")
        extra["region"] = settings.region
    bucket_uri = f"{loc.scheme}://{loc.bucket}"
    options = client or None
    retries = retry or None
    try:
        if loc.kind == "s3":
            return S3Store.from_url(bucket_uri, client_options=options, retry_config=retries, **extra)
        if loc.kind == "azure":
            return AzureStore.from_url(bucket_uri, client_options=options, retry_config=retries, **extra)
        if settings.endpoint is not None:
            raise StorageError(f"{loc.uri}: a custom endpoint is not supported for GCS")
        return GCSStore.from_url(bucket_uri, client_options=options, retry_config=retries)
    except BaseError as exc:
        raise StorageError(f"{loc.uri}: cannot configure the {loc.kind} client: {_reason(exc)}") from None


#: Entries in one listing page (S3 and GCS; Azure pages hold up to 5,000, so its counts are an upper bound).
_PAGE = 1000
#: Sorts after every character a key can hold: ``folder/sub/`` + this is past every key under ``sub``.
_LAST_CHAR = "\U0010ffff"


def _pages(entries: int) -> int:
    """Listing requests that returned ``entries`` entries (an empty listing is one request)."""
    return max(1, -(-entries // _PAGE))


# A query string may carry a SAS token or a signature: never put one in a message.
_QUERY = re.compile(r"(https?://[^\s?]+)\?\S*")
_CODE = re.compile(r"<Code>(\w+)</Code>")


def _reason(exc: BaseException) -> str:
    """One line from a store error: its first line, without query strings or the XML body, and
    the server's error code when it sent one (``NoSuchBucket``, ``AuthenticationFailed``)."""
    text = str(exc)
    line = _QUERY.sub(r"\1", text.splitlines()[0] if text else type(exc).__name__)
    line = line.split(": <?xml", 1)[0].rstrip(": ")
    code = _CODE.search(text)
    return f"{line} ({code.group(1)})" if code and code.group(1) not in line else line


class ObjectStorage:
    """``Storage`` on one prefix of an object store bucket (see the module docstring)."""

    def __init__(
        self,
        location: ObjectLocation,
        store: ObjectStore,
        settings: ObjectStoreSettings,
        *,
        rebuildable: bool,
    ) -> None:
        self._loc = location
        self._store = store
        self._settings = settings
        self._rebuildable = rebuildable

    @classmethod
    def connect(cls, uri: str, settings: ObjectStoreSettings | None = None) -> ObjectStorage:
        """The storage of ``uri`` with a client built from the environment and ``settings``."""
        loc = ObjectLocation.parse(uri)
        settings = settings or ObjectStoreSettings()
        return cls(loc, _build_store(loc, settings), settings, rebuildable=True)

    @classmethod
    def over(cls, store: ObjectStore, uri: str, settings: ObjectStoreSettings | None = None) -> ObjectStorage:
        """The storage of ``uri`` on a given client (an in-memory store in tests); does not pickle."""
        return cls(ObjectLocation.parse(uri), store, settings or ObjectStoreSettings(), rebuildable=False)

    def __getstate__(self) -> dict[str, Any]:
        if not self._rebuildable:
            kind = type(self._store).__name__
            raise TypeError(f"{self._loc.uri}: a storage over a given {kind} does not pickle")
        return {"uri": self._loc.uri, "settings": self._settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._loc = ObjectLocation.parse(state["uri"])
        self._settings = state["settings"]
        self._store = _build_store(self._loc, self._settings)
        self._rebuildable = True

    def __repr__(self) -> str:
        return f"ObjectStorage({self._loc.uri!r})"

    @property
    def base_uri(self) -> str:
        return self._loc.uri

    @property
    def settings(self) -> ObjectStoreSettings:
        return self._settings

    def local_path(self, path: str = "") -> str | None:
        return None

    def child(self, path: str) -> ObjectStorage:
        # The child shares the client (and its connection pool) with its parent.
        loc = self._loc.child(path)
        return ObjectStorage(loc, self._store, self._settings, rebuildable=self._rebuildable)

    # ---------------------------------------------------------------- errors

    def _fail(self, operation: str, key: str, exc: BaseException) -> NoReturn:
        where = self._loc.display(key)
        if isinstance(exc, AlreadyExistsError):
            raise FileAlreadyExistsError(f"{where}: already exists") from None
        if isinstance(exc, FileNotFoundError):
            raise StorageFileNotFoundError(f"{where}: file not found ({operation})") from None
        if isinstance(exc, PermissionDeniedError | UnauthenticatedError):
            raise StorageError(
                f"{where}: {operation} refused: permission denied on bucket {self._loc.bucket!r} "
                f"(check the credentials): {_reason(exc)}"
            ) from None
        bucket = self._loc.bucket
        raise StorageError(f"{where}: {operation} failed on bucket {bucket!r}: {_reason(exc)}") from None

    # ---------------------------------------------------------------- reads

    def read(self, path: str) -> bytes:
        key = self._loc.file_key(path)
        STORAGE_REQUESTS.add("get")
        try:
            return obstore.get(self._store, key).bytes().to_bytes()
        except (BaseError, OSError) as exc:
            self._fail("read", key, exc)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        key = self._loc.file_key(path)
        if length <= 0:
            return b""
        STORAGE_REQUESTS.add("get")
        try:
            # One GET; a range that ends past the end comes back short, as a local read does.
            return obstore.get_range(self._store, key, start=offset, length=length).to_bytes()
        except (BaseError, OSError) as exc:
            error = exc
        # A range starting at or past the end is refused by the store: empty, as a local read.
        if self.size(path) <= offset:
            return b""
        self._fail("ranged read", key, error)

    def open(self, path: str) -> BinaryIO:
        """A seekable file object that reads by ranged GETs (a parquet reader fetches only the
        footer and the row groups it reads)."""
        key = self._loc.file_key(path)
        try:
            size = self._head(key)["size"]
        except (BaseError, OSError) as exc:
            self._fail("open", key, exc)
        return io.BufferedReader(_RangedReader(self, key, size), buffer_size=_READ_BUFFER)

    def _head(self, key: str) -> dict[str, Any]:
        STORAGE_REQUESTS.add("head")
        return dict(obstore.head(self._store, key))

    def size(self, path: str) -> int:
        key = self._loc.file_key(path)
        try:
            return int(self._head(key)["size"])
        except (BaseError, OSError) as exc:
            self._fail("size lookup", key, exc)

    def exists(self, path: str) -> bool:
        """A file, or a folder (some object under ``path/``): a HEAD, then a LIST when it misses."""
        key = self._loc.key(path)
        if not path:
            return self._any_under(key)
        try:
            self._head(key)
            return True
        except FileNotFoundError:
            pass
        except (BaseError, OSError) as exc:
            self._fail("lookup", key, exc)
        return self._any_under(key)

    def _any_under(self, key: str) -> bool:
        STORAGE_REQUESTS.add("list")  # chunk_size=1: the first page answers
        try:
            for batch in obstore.list(self._store, prefix=key or None, chunk_size=1):
                if batch:
                    return True
            return False
        except (BaseError, OSError) as exc:
            self._fail("list", key, exc)

    def list(self, path: str = "") -> list[FileInfo]:
        """Files and folders directly under ``path`` (one delimiter listing); an absent folder or
        a file lists as empty."""
        key = self._loc.key(path)
        try:
            found = obstore.list_with_delimiter(self._store, key or None)
        except (BaseError, OSError) as exc:
            STORAGE_REQUESTS.add("list")
            self._fail("list", key, exc)
        STORAGE_REQUESTS.add("list", _pages(len(found["common_prefixes"]) + len(found["objects"])))
        out = [FileInfo(self._loc.relative(p), 0, 0, True) for p in found["common_prefixes"]]
        out.extend(self._info(o) for o in found["objects"])
        return [i for i in out if i.path]

    def walk(self, path: str = "") -> Iterator[FileInfo]:
        """Every file (not folder) below ``path``, in key order (a flat listing, 1,000 per request)."""
        key = self._loc.key(path)
        seen = 0
        try:
            for batch in obstore.list(self._store, prefix=key or None):
                for o in batch:
                    seen += 1
                    info = self._info(o)
                    if info.path:
                        yield info
        except (BaseError, OSError) as exc:
            self._fail("list", key, exc)
        finally:
            STORAGE_REQUESTS.add("list", _pages(seen))

    def list_after(
        self, path: str, after: str | None = None, before: str | None = None
    ) -> builtins.list[FileInfo]:
        """See ``Storage.list_after``: a flat listing of ``path/`` from the key after ``after``
        (S3 ``start-after``, obstore's ``offset``), read lazily and left as soon as a name reaches
        ``before``, so a bounded listing of an unchanged folder is one request.

        Names ``<= after`` are dropped here too: some stores (Azure-compatible endpoints) ignore
        the offset and list from the start. A sub-folder met on the way is skipped by listing
        again from past its last key (one more request) when the store has honoured offsets so
        far, else by reading on.
        """
        key = self._loc.key(path)
        folder = f"{key}/" if key else ""
        out: builtins.list[FileInfo] = []
        floor = after  # names <= floor are known or skipped
        honoured = True  # the store started every listing after its offset so far
        while True:
            # "", "." and ".." are not key segments (obstore refuses them): those list from the start
            sendable = floor is not None and floor not in ("", ".", "..") and "/" not in floor
            offset = folder + floor if sendable and floor is not None else None
            restart: str | None = None
            seen = 0
            try:
                pages = obstore.list(self._store, prefix=folder or None, offset=offset, chunk_size=_PAGE)
                for batch in pages:
                    for o in batch:
                        seen += 1
                        name = str(o["path"])[len(folder):]
                        if floor is not None and name <= floor:
                            honoured = honoured and offset is None
                            continue
                        head, slash, _ = name.partition("/")
                        if before is not None and head >= before:
                            return out
                        if not slash:
                            out.append(self._info(o))
                        elif honoured:
                            restart = head + "/" + _LAST_CHAR
                            break
                    if restart is not None:
                        break
            except (BaseError, OSError) as exc:
                self._fail("list", key, exc)
            finally:
                STORAGE_REQUESTS.add("list", _pages(seen))
            if restart is None:
                return out
            floor = restart

    def _info(self, o: Any) -> FileInfo:
        modified: datetime = o["last_modified"]
        mtime_ms = int(modified.timestamp() * 1000)
        return FileInfo(self._loc.relative(o["path"]), int(o["size"]), mtime_ms, False)

    # ---------------------------------------------------------------- writes

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Write-once create (see the module docstring for a create whose response was lost)."""
        key = self._loc.file_key(path)
        STORAGE_REQUESTS.add("put")
        try:
            obstore.put(self._store, key, data, mode="create")
        except AlreadyExistsError as exc:
            if not self._holds(key, data):
                self._fail("create", key, exc)
        except (BaseError, OSError) as exc:
            self._fail("create", key, exc)

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether the object at ``key`` holds exactly ``data``."""
        try:
            if self._head(key)["size"] != len(data):
                return False
            STORAGE_REQUESTS.add("get")
            return bool(obstore.get(self._store, key).bytes().to_bytes() == data)
        except FileNotFoundError:
            return False
        except (BaseError, OSError) as exc:
            self._fail("read-back", key, exc)

    def put(self, path: str, data: bytes) -> None:
        """Atomic create-or-replace: one PUT (readers see the old object or the new one)."""
        key = self._loc.file_key(path)
        STORAGE_REQUESTS.add("put")
        try:
            obstore.put(self._store, key, data)
        except (BaseError, OSError) as exc:
            self._fail("write", key, exc)

    def read_versioned(self, path: str) -> tuple[bytes, ObjectVersion] | None:
        """The object's bytes and the version they are (one GET, so both come from the same
        response); ``None`` when the object is absent."""
        key = self._loc.file_key(path)
        STORAGE_REQUESTS.add("get")
        try:
            got = obstore.get(self._store, key)
            data = got.bytes().to_bytes()
            meta = got.meta
        except FileNotFoundError:
            return None
        except (BaseError, OSError) as exc:
            self._fail("read", key, exc)
        return data, self._version_of(key, meta)

    def _version_of(self, key: str, meta: Any) -> ObjectVersion:
        try:
            return ObjectVersion(meta["e_tag"], meta["version"])
        except StorageError:
            raise StorageError(f"{self._loc.display(key)}: the store gave no ETag or version") from None

    def put_if_version(self, path: str, data: bytes, version: ObjectVersion | None) -> ObjectVersion:
        """Write ``data`` only while the object is at ``version`` (``None``: only while absent);
        the new version. ``PreconditionFailedError`` when the object changed, was removed or
        (for ``None``) exists.

        A write whose response was lost and that the client retried finds our own bytes and
        counts as ours (as in ``put_if_absent``): callers make ``data`` unique to the writer
        (the lock file names its owner) so that equal bytes cannot be someone else's write.
        """
        key = self._loc.file_key(path)
        mode: PutMode = "create" if version is None else version.as_update()
        STORAGE_REQUESTS.add("put")
        try:
            result = obstore.put(self._store, key, data, mode=mode)
        except (AlreadyExistsError, PreconditionError):
            current = self.read_versioned(path)
            if current is not None and current[0] == data:
                return current[1]
            expected = "absent" if version is None else f"at version {version}"
            raise PreconditionFailedError(
                f"{self._loc.display(key)}: conditional write refused: the object is no longer {expected}"
            ) from None
        except (BaseError, OSError) as exc:
            self._fail("conditional write", key, exc)
        return self._version_of(key, result)

    def create_if_absent(self, path: str) -> ObjectWriteOnceFile:
        """Stream a write-once file through a local temp file (see ``ObjectWriteOnceFile``)."""
        return ObjectWriteOnceFile(self, path)

    def _upload(self, path: str, temp: str) -> int:
        key = self._loc.key(path)
        size = os.stat(temp).st_size
        if size <= self._settings.conditional_put_limit:
            data = Path(temp).read_bytes()
            self.put_if_absent(path, data)
            return size
        # Too large to hold for a single conditional PUT: data files have unique names, so a
        # lookup, then a multipart upload (an upload that fails leaves no object behind).
        if self.exists(path):
            raise FileAlreadyExistsError(f"{self._loc.display(key)}: already exists")
        STORAGE_REQUESTS.add("put")  # a multipart upload: its requests count as one
        try:
            obstore.put(self._store, key, Path(temp))
        except (BaseError, OSError) as exc:
            self._fail("upload", key, exc)
        return size

    def delete(self, path: str) -> bool:
        """Delete a file; ``False`` when it was already gone (a lookup first: see ``Storage``)."""
        key = self._loc.file_key(path)
        try:
            self._head(key)
        except FileNotFoundError:
            return False
        except (BaseError, OSError) as exc:
            self._fail("lookup", key, exc)
        STORAGE_REQUESTS.add("delete")
        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            return False  # Azure answers 404 for a missing blob: gone meanwhile
        except (BaseError, OSError) as exc:
            self._fail("delete", key, exc)
        return True

    def _read_at(self, key: str, offset: int, length: int) -> bytes:
        STORAGE_REQUESTS.add("get")
        try:
            return obstore.get_range(self._store, key, start=offset, length=length).to_bytes()
        except (BaseError, OSError) as exc:
            self._fail("ranged read", key, exc)


class ObjectWriteOnceFile(WriteOnceFile):
    """``WriteOnceFile`` on an object store: a local temp file (in the system temp folder,
    ``TMPDIR``), uploaded by ``commit()``."""

    def __init__(self, storage: ObjectStorage, relative: str) -> None:
        self._storage = storage
        self._relative = relative
        storage._loc.file_key(relative)  # refuse a bad path before anything is written
        fd, temp = tempfile.mkstemp(prefix="hoodied-", suffix=".tmp")
        os.close(fd)
        super().__init__(temp)

    def commit(self) -> int:
        try:
            return self._storage._upload(self._relative, self.path)
        except OSError as exc:
            reason = exc.strerror or exc
            raise StorageError(f"{self.path}: cannot read the temp file to upload: {reason}") from None
        finally:
            self.abort()


class _RangedReader(io.RawIOBase):
    """The raw file under ``ObjectStorage.open``'s buffered reader: ranged GETs at the position."""

    def __init__(self, storage: ObjectStorage, key: str, size: int) -> None:
        self._storage = storage
        self._key = key
        self._size = size
        self._pos = 0
        #: bytes fetched from the store so far (what a reader really downloaded)
        self.fetched = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self._size - self._pos)
        if n <= 0:
            return 0
        data = self._storage._read_at(self._key, self._pos, n)
        self.fetched += len(data)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def readall(self) -> bytes:
        n = self._size - self._pos
        if n <= 0:
            return b""
        data = self._storage._read_at(self._key, self._pos, n)
        self.fetched += len(data)
        self._pos += len(data)
        return data


def open_object_storage(uri: str, settings: ObjectStoreSettings | None = None) -> ObjectStorage:
    """``storage_for`` on an object store: the table's folder must hold at least one object
    (one LIST request, which also surfaces a missing bucket or wrong credentials)."""
    storage = ObjectStorage.connect(uri, settings)
    key = storage._loc.prefix
    if not storage._any_under(key):
        raise TableNotFoundError(f"{storage.base_uri}: no such path (no object under it)")
    return storage
