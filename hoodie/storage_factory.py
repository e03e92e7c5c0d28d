"""``storage_for``: the one place a table URI becomes a ``Storage``.

What it owns: choosing the implementation by URI scheme, as Hudi's ``HoodieStorageUtils.getStorage``
chooses a ``HoodieStorage`` by the path's scheme: ``LocalStorage`` (``hoodied.hoodie.storage``) for a
local path or ``file://`` URI, ``ObjectStorage`` (``hoodied.hoodie.object_storage``) for ``s3://``,
``s3a://``, ``gs://``, ``az://``, ``abfs://`` and ``abfss://``; refusing HDFS and unknown schemes.

It sits above both implementations, so that neither imports the other: ``object_storage`` builds on
``storage`` (its ``FileInfo``, ``WriteOnceFile``, request counters), and only this module reaches
both (an import-linter contract in ``pyproject.toml`` keeps it so).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from hoodied.hoodie.errors import StorageError, TableNotFoundError
from hoodied.hoodie.storage import OBJECT_STORE_SCHEMES, LocalStorage, Storage

if TYPE_CHECKING:
    from hoodied.hoodie.object_storage import ObjectStoreSettings

__all__ = ["storage_for"]


def storage_for(uri: str, settings: ObjectStoreSettings | None = None) -> Storage:
    """The storage for a table URI: a local path, a ``file://`` URI, or an object store
    (``s3://``, ``s3a://``, ``gs://``, ``az://``, ``abfs://``, ``abfss://``; credentials from the
    standard environment, ``settings`` for what the daemon's config adds). The table's folder
    must exist (``TableNotFoundError``); whether it holds a Hudi table is checked by its reader.
    """
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme == "file" else uri
        if not os.path.exists(path):
            raise TableNotFoundError(f"{path}: no such path")
        if not os.path.isdir(path):
            raise TableNotFoundError(f"{path}: not a folder")
        return LocalStorage(path)
    if parsed.scheme in OBJECT_STORE_SCHEMES:
        # Imported here: obstore loads only for tables that live on an object store.
        from hoodied.hoodie.object_storage import open_object_storage

        return open_object_storage(uri, settings)
    if parsed.scheme in ("hdfs", "viewfs"):
        raise StorageError(
            f"{uri}: HDFS is not supported (hoodied reads local paths, S3, GCS and Azure); "
            "mount the table or copy it to an object store"
        )
    raise StorageError(
        f"{uri}: storage scheme {parsed.scheme!r} is not supported "
        f"(local paths, file://, {', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)})"
    )
