"""``HoodieTable``: one Hudi table opened for reading — config, timeline, listing, schema, snapshot.

Owns the choices a reader makes around the file-system view and the slice reader:

* Listing (``listing=``): ``"metadata"`` reads the metadata table's ``files`` partition,
  ``"storage"`` walks the partition folders, ``"auto"`` uses the metadata table when the table
  lists it as available (table version 8+, as hudi-rs does) and falls back to storage with a
  warning when it is missing.
* Schema (``schema()``): the Avro schema in the ``extraMetadata.schema`` of the latest
  completed write that has one, else ``hoodie.table.create.schema``, else the schema of a base
  file; mapped to Arrow with ``hoodie.avro.arrow`` and preceded by the five Hudi meta columns
  when the table populates them. Every column is nullable.
* Snapshot reads, read-optimized reads and time travel (``as_of``: the timeline cut at
  requested time <= ``as_of``) stream ``pyarrow.RecordBatch``es slice by slice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from hoodied.hoodie.avro.arrow import avro_schema_to_arrow
from hoodied.hoodie.errors import HoodieFormatError, UnsupportedTableError
from hoodied.hoodie.fsview import CommitState, FileSlice, FileSystemView, list_storage
from hoodied.hoodie.merge import MergeSpec
from hoodied.hoodie.metadata.reader import MetadataTable
from hoodied.hoodie.properties import TableConfig, load_table_config
from hoodied.hoodie.reader import DEFAULT_BATCH_SIZE, read_file_slice
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.storage_factory import storage_for
from hoodied.hoodie.timeline.active import Timeline
from hoodied.hoodie.timeline.instant import WRITE_ACTIONS, require_instant_time

__all__ = ["HoodieTable", "META_FIELDS", "Listing"]

log = logging.getLogger(__name__)

META_FIELDS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)

Listing = Literal["auto", "storage", "metadata"]
_LISTINGS = ("auto", "storage", "metadata")


class HoodieTable:
    """A Hudi table opened for reading."""

    def __init__(self, storage: Storage, config: TableConfig, timeline: Timeline) -> None:
        self.storage = storage
        self.config = config
        self.timeline = timeline
        self._metadata: MetadataTable | None = None
        self._metadata_loaded = False
        self._schema: pa.Schema | None = None
        self._commits: CommitState | None = None

    @classmethod
    def open(cls, uri: str | Storage, *, include_history: bool = False) -> HoodieTable:
        """Open a table by path / URI (or an existing ``Storage``); reads config and timeline."""
        storage = storage_for(uri) if isinstance(uri, str) else uri
        config = load_table_config(storage)
        return cls(storage, config, Timeline.load(storage, config, include_history=include_history))

    # ---------------------------------------------------------------- listing

    @property
    def metadata(self) -> MetadataTable | None:
        """The metadata table, or None when the table has none (``files`` not available)."""
        if not self._metadata_loaded:
            self._metadata = MetadataTable.open(self.storage, self.config, self.timeline)
            self._metadata_loaded = True
        return self._metadata

    def list_files(self, listing: Listing = "auto") -> dict[str, list[tuple[str, int]]]:
        """``{partition: [(file name, size), ...]}`` from the chosen listing source."""
        if listing not in _LISTINGS:
            raise ValueError(f"listing must be one of {', '.join(_LISTINGS)}, not {listing!r}")
        if listing == "storage" or (listing == "auto" and not self.uses_metadata_listing()):
            return list_storage(self.storage, self.config)
        try:
            mdt = self.metadata
        except HoodieFormatError as exc:
            if listing == "metadata":
                raise
            log.warning("%s; listing storage instead", exc)
            return list_storage(self.storage, self.config)
        if mdt is None:
            if listing == "metadata":
                raise UnsupportedTableError(f"{self.config.name}: the table has no metadata table to list")
            return list_storage(self.storage, self.config)
        return {p: sorted(files.items()) for p, files in mdt.all_files().items()}

    def uses_metadata_listing(self) -> bool:
        """Whether ``listing="auto"`` lists from the metadata table (v8+ with ``files``, as hudi-rs)."""
        return self.config.version >= 8 and self.config.metadata_table_available

    def file_system_view(
        self, as_of: str | None = None, listing: Listing = "auto", *, include_pending: bool = False
    ) -> FileSystemView:
        """The file groups and slices of the table (as of ``as_of``; see ``hoodie.fsview``)."""
        if as_of is not None:
            require_instant_time(as_of, "as-of")
        return FileSystemView.build(
            self.list_files(listing), self.timeline, self.config, as_of=as_of, include_pending=include_pending
        )

    # ---------------------------------------------------------------- schema

    def avro_schema(self) -> str | None:
        """The table's Avro schema JSON without meta fields (latest commit, else the create schema)."""
        for inst in reversed(self.timeline.completed(WRITE_ACTIONS)):
            try:
                metadata = self.timeline.read_commit_metadata(inst)
            except LookupError:
                continue
            schema = (metadata.get("extraMetadata") or {}).get("schema")
            if schema:
                return str(schema)
        return self.config.create_schema

    def schema(self) -> pa.Schema:
        """The Arrow schema of snapshot reads: meta columns (if populated) + data columns, all nullable."""
        if self._schema is None:
            text = self.avro_schema()
            data = avro_schema_to_arrow(text) if text else self._base_file_schema()
            fields = [pa.field(f.name, f.type, True) for f in data]
            names = {f.name for f in fields}
            if self.config.populate_meta_fields:
                meta = [pa.field(n, pa.string(), True) for n in META_FIELDS if n not in names]
                fields = meta + fields
            self._schema = pa.schema(fields)
        return self._schema

    def _base_file_schema(self) -> pa.Schema:
        for s in self.file_system_view(listing="storage").latest_slices():
            if s.base_file is not None:
                with self.storage.open(s.base_file.path) as f:
                    schema = pq.read_schema(f)
                return pa.schema([f for f in schema if f.name not in META_FIELDS])
        return pa.schema([])

    # ---------------------------------------------------------------- reading

    def commit_state(self) -> CommitState:
        if self._commits is None:
            self._commits = CommitState(self.timeline, self.config)
        return self._commits

    def read_snapshot(
        self,
        as_of: str | None = None,
        read_optimized: bool = False,
        listing: Listing = "auto",
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        skip_corrupt: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """The table's records (snapshot, read-optimized, or as of an instant) as Arrow batches."""
        view = self.file_system_view(as_of, listing)
        yield from self.read_slices(
            view.read_slices(), as_of, read_optimized, skip_corrupt=skip_corrupt, batch_size=batch_size
        )

    def read_slices(
        self,
        slices: Iterable[FileSlice],
        as_of: str | None = None,
        read_optimized: bool = False,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        skip_corrupt: bool = False,
    ) -> Iterator[pa.RecordBatch]:
        """The records of the given file slices (from ``file_system_view(...).read_slices()``)."""
        schema = self.schema()
        spec = None
        if self.config.is_mor and not read_optimized:
            try:
                spec = MergeSpec.for_table(self.config)
            except UnsupportedTableError:
                spec = None  # raised again by the first slice that has log files to merge
        commits = self.commit_state()
        for file_slice in slices:
            yield from read_file_slice(
                self.storage,
                file_slice,
                self.config,
                self.timeline,
                schema,
                read_optimized=read_optimized,
                as_of=as_of,
                commits=commits,
                spec=spec,
                batch_size=batch_size,
                skip_corrupt=skip_corrupt,
            )

    def to_arrow(
        self, as_of: str | None = None, read_optimized: bool = False, listing: Listing = "auto"
    ) -> pa.Table:
        """The whole snapshot as one ``pyarrow.Table`` (for small tables and tests)."""
        batches = list(self.read_snapshot(as_of, read_optimized, listing))
        return pa.Table.from_batches(batches, schema=self.schema())

    def to_parquet(
        self,
        path: str,
        as_of: str | None = None,
        read_optimized: bool = False,
        listing: Listing = "auto",
        **writer_options: Any,
    ) -> int:
        """Write the snapshot to a local parquet file, batch by batch; returns the number of rows."""
        rows = 0
        schema = self.schema()
        with pq.ParquetWriter(path, schema, **writer_options) as writer:
            for batch in self.read_snapshot(as_of, read_optimized, listing):
                writer.write_batch(batch)
                rows += batch.num_rows
        return rows

    def __repr__(self) -> str:
        return (
            f"HoodieTable({self.config.name!r}, v{self.config.version} {self.config.table_type.value}, "
            f"{len(self.timeline.completed())} completed instants)"
        )
