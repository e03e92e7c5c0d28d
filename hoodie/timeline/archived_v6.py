"""The archived timeline of table version 6 (``.hoodie/archived``): writing and reading it.

Hudi 0.14 / 0.15 (``HoodieTimelineArchiver``, ``MetadataConversionUtils.createMetaWrapper``,
``HoodieArchivedTimeline``) keep archived instants in Hudi log files of Avro data blocks whose
records are ``HoodieArchivedMetaEntry``. Facts this module relies on:

- Files (``HoodieArchivedTimeline.getArchiveLogPath``, ``HoodieArchivedLogFile``): the folder
  is ``hoodie.archivelog.folder`` (``archived``) under ``.hoodie``; file id ``commits``, empty
  base commit, extension ``.archive``, so names follow the log-file grammar::

      name  = ".commits_.archive." version ["_" token]
      token = task-partition-id "-" stage-id "-" attempt-id      (hoodied writes "1-0-1")

  ``HoodieArchivedTimeline`` reads every file matching ``.commits_.archive*``, whatever its
  version; the order of records does not matter to it.
- Writing (``HoodieLogFormat.WriterBuilder`` and ``HoodieLogFormatWriter``): the archiver
  opens the latest ``.commits_.archive`` file; on storage without append (S3, GCS, local files
  in 0.14/0.15's ``StorageSchemes``) it rolls over to version latest + 1 with the rollover write
  token ``1-0-1`` (``UNKNOWN_WRITE_TOKEN``), and starts at version 1 when there is none. So
  on object stores every archival writes one new file; hoodied does the same, write-once
  (``put_if_absent``): a file is complete or absent, never torn. The writer's default size
  threshold (512 MiB) is far above what one archival writes, so hoodied never rolls mid-run.
- Blocks (``HoodieTimelineArchiver.writeToFile``): one AVRO_DATA block per
  ``hoodie.commits.archival.batch.size`` (10) records, whose only header is SCHEMA (the
  ``HoodieArchivedMetaEntry`` schema as JSON; no INSTANT_TIME), no footer; content version 3.
- Records: one per timeline *file* (requested, inflight, completed) of each archived instant
  (the archiver groups the raw timeline by requested time and comparable action, so a
  compaction's ``.compaction.requested``/``.inflight`` go with its ``.commit``). Fields:
  ``commitTime`` = requested time, ``actionState`` = ``REQUESTED``/``INFLIGHT``/``COMPLETED``,
  ``actionType`` = the file's action, ``stateTransitionTime`` = the file's modification time
  as an instant time in the table's timeline time zone (``HoodieInstant(FileStatus)``),
  ``version`` = null (the generated class's no-argument constructor sets no default), and by
  action:

  * clean: completed -> ``hoodieCleanMetadata``; requested/inflight -> ``hoodieCleanerPlan``;
  * commit, deltacommit: ``hoodieCommitMetadata`` from the JSON file (``convertCommitMetadata``:
    Jackson ``convertValue`` of the JSON into the Avro record, fields it lacks stay null; when
    ``compacted`` is true ``operationType`` becomes ``COMPACT``; ``extraMetadata`` gets
    ``ROLLING_STAT`` = "" so no rolling stats are archived); an empty file reads as an empty
    ``HoodieCommitMetadata`` (operation ``UNKNOWN``);
  * replacecommit: completed -> ``hoodieReplaceCommitMetadata`` (the same conversion);
    inflight, when not empty -> ``HoodieInflightReplaceMetadata`` (as commit metadata);
    requested, when not empty -> ``hoodieRequestedReplaceMetadata``;
  * rollback: completed -> ``hoodieRollbackMetadata``; savepoint -> ``hoodieSavePointMetadata``;
  * compaction, logcompaction: requested -> ``hoodieCompactionPlan``;
  * a completed file that is empty gets only the four identifying fields
    (``createMetaWrapperForEmptyInstant``).

  Clean plans and metadata are archived as the timeline holds them (Hudi upgrades version-1
  clean plans through its migrators first; hoodied's cleans and v6 Hudi cleans are version 2).
- Reading (``HoodieArchivedTimeline``): an instant's details are the field ``getMetadataKey``
  names for its action: ``hoodieCommitMetadata`` (commit, deltacommit), ``hoodieCleanMetadata``,
  ``hoodieRollbackMetadata``, ``hoodieSavePointMetadata``, ``hoodieCompactionPlan`` (compaction,
  logcompaction), ``hoodieReplaceCommitMetadata``, ``hoodieIndexCommitMetadata``. Records
  without ``actionState`` (old archives) are completed instants.

The embedded writer schema is assembled from hoodied's copies of the nested schemas
(``hoodie/avro/schemas``); Hudi readers resolve it against their own ``HoodieArchivedMetaEntry``
by field name, so fields one side lacks are skipped or read as their defaults.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from hoodied.hoodie.avro.container import read_single_record, schema_json
from hoodied.hoodie.errors import HoodieFormatError
from hoodied.hoodie.log.blocks import avro_block_records, encode_avro_data_block
from hoodied.hoodie.log.frame import BlockType, HeaderKey, encode_block, read_log_blocks, write_log_file
from hoodied.hoodie.properties import TableConfig
from hoodied.hoodie.storage import Storage
from hoodied.hoodie.timeline.instant import (
    COMPLETED_ACTION,
    Action,
    Instant,
    State,
    datetime_to_instant_time,
)

__all__ = [
    "ARCHIVE_WRITE_TOKEN",
    "DEFAULT_ARCHIVAL_BATCH",
    "ROLLING_STAT_KEY",
    "ArchiveFileName",
    "ArchivedRecord",
    "ArchivedTimelineV6",
    "archive_file_names",
    "archived_meta_schema_json",
    "convert_commit_metadata",
    "file_instant_time",
    "meta_entries",
    "meta_entry",
    "write_archive_file",
]

log = logging.getLogger(__name__)

#: ``hoodie.commits.archival.batch.size``: records per Avro data block.
DEFAULT_ARCHIVAL_BATCH = 10
#: ``HoodieLogFormat.UNKNOWN_WRITE_TOKEN``, the rollover write token of the archive writer.
ARCHIVE_WRITE_TOKEN = "1-0-1"
#: ``HoodieRollingStatMetadata.ROLLING_STAT_METADATA_KEY``, blanked in archived commit metadata.
ROLLING_STAT_KEY = "ROLLING_STAT"

_NAMESPACE = "org.apache.hudi.avro.model"
_FILE_RE = re.compile(r"^\.commits_\.archive\.(\d+)(?:_(\d+-\d+-\d+))?$")

#: ``HoodieArchivedTimeline.getMetadataKey``.
_METADATA_KEY = {
    "commit": "hoodieCommitMetadata",
    "deltacommit": "hoodieCommitMetadata",
    "clean": "hoodieCleanMetadata",
    "rollback": "hoodieRollbackMetadata",
    "savepoint": "hoodieSavePointMetadata",
    "compaction": "hoodieCompactionPlan",
    "logcompaction": "hoodieCompactionPlan",
    "replacecommit": "hoodieReplaceCommitMetadata",
    "indexing": "hoodieIndexCommitMetadata",
}
#: ``HoodieInstant.getComparableAction``: a pending table service groups with its completed file.
_COMPARABLE = {"compaction": "commit", "logcompaction": "deltacommit", "clustering": "replacecommit"}
_STATES = {"REQUESTED": State.REQUESTED, "INFLIGHT": State.INFLIGHT, "COMPLETED": State.COMPLETED}


# ---------------------------------------------------------------------------- file names


@dataclass(frozen=True, slots=True, order=True)
class ArchiveFileName:
    """``.commits_.archive.<version>[_<token>]``; ordered by version (then token)."""

    version: int
    write_token: str = ""

    @classmethod
    def parse(cls, name: str) -> ArchiveFileName | None:
        m = _FILE_RE.match(name)
        return cls(int(m.group(1)), m.group(2) or "") if m else None

    def format(self) -> str:
        token = f"_{self.write_token}" if self.write_token else ""
        return f".commits_.archive.{self.version}{token}"


def archive_file_names(storage: Storage, archive_path: str) -> list[ArchiveFileName]:
    """The archive files in ``archive_path``, oldest version first (other files are ignored)."""
    names = (ArchiveFileName.parse(i.name) for i in storage.list(archive_path) if not i.is_dir)
    return sorted(n for n in names if n is not None)


# ---------------------------------------------------------------------------- the schema


def _qualify(name: str, namespace: str) -> str:
    return name if "." in name else f"{namespace}.{name}"


def _dedupe(node: Any, namespace: str, defined: dict[str, Any]) -> Any:
    """``node`` with every named type defined once: a repeated definition becomes its full name."""
    if isinstance(node, list):
        return [_dedupe(n, namespace, defined) for n in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind in ("record", "enum", "fixed") and "name" in node:
        ns = node.get("namespace", namespace)
        full = _qualify(node["name"], ns)
        if full in defined:
            return full
        out = dict(node)
        defined[full] = out
        if kind == "record":
            out["fields"] = [{**f, "type": _dedupe(f["type"], ns, defined)} for f in node["fields"]]
        return out
    out = dict(node)
    for key in ("type", "items", "values"):
        if key in out and not isinstance(out[key], str):
            out[key] = _dedupe(out[key], namespace, defined)
    return out


def _nested(name: str) -> dict[str, Any]:
    return dict(json.loads(schema_json(name)))


# The deprecated ``HoodieCompactionMetadata`` (never written since 0.x compactions complete as
# commits) has no copy in ``hoodie/avro/schemas``; its layout (HoodieCompactionMetadata.avsc):
_COMPACTION_METADATA = {
    "type": "record",
    "name": "HoodieCompactionMetadata",
    "namespace": _NAMESPACE,
    "fields": [
        {
            "name": "partitionToCompactionWriteStats",
            "type": [
                "null",
                {
                    "type": "map",
                    "values": {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": "HoodieCompactionWriteStat",
                            "fields": [
                                {"name": "partitionPath", "type": ["null", "string"], "default": None},
                                {"name": "totalLogRecords", "type": ["null", "long"], "default": None},
                                {"name": "totalLogFiles", "type": ["null", "long"], "default": None},
                                {
                                    "name": "totalUpdatedRecordsCompacted",
                                    "type": ["null", "long"],
                                    "default": None,
                                },
                                {
                                    "name": "hoodieWriteStat",
                                    "type": ["null", f"{_NAMESPACE}.HoodieWriteStat"],
                                    "default": None,
                                },
                            ],
                        },
                    },
                },
            ],
        }
    ],
}


def _optional(name: str, schema: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", schema], "default": None}


@cache
def _schema() -> tuple[str, dict[str, Any]]:
    defined: dict[str, Any] = {}
    commit = _dedupe(_nested("HoodieCommitMetadata"), _NAMESPACE, defined)
    fields = [
        _optional("hoodieCommitMetadata", commit),
        _optional("hoodieCleanMetadata", _dedupe(_nested("HoodieCleanMetadata"), _NAMESPACE, defined)),
        _optional("hoodieCompactionMetadata", _dedupe(_COMPACTION_METADATA, _NAMESPACE, defined)),
        _optional("hoodieRollbackMetadata", _dedupe(_nested("HoodieRollbackMetadata"), _NAMESPACE, defined)),
        _optional(
            "hoodieSavePointMetadata", _dedupe(_nested("HoodieSavepointMetadata"), _NAMESPACE, defined)
        ),
        _optional("commitTime", "string"),
        _optional("actionType", "string"),
        {"name": "version", "type": ["int", "null"], "default": 1},
        _optional("hoodieCompactionPlan", _dedupe(_nested("HoodieCompactionPlan"), _NAMESPACE, defined)),
        _optional("hoodieCleanerPlan", _dedupe(_nested("HoodieCleanerPlan"), _NAMESPACE, defined)),
        _optional("actionState", "string"),
        _optional(
            "hoodieReplaceCommitMetadata",
            _dedupe(_nested("HoodieReplaceCommitMetadata"), _NAMESPACE, defined),
        ),
        _optional(
            "hoodieRequestedReplaceMetadata",
            _dedupe(_nested("HoodieRequestedReplaceMetadata"), _NAMESPACE, defined),
        ),
        _optional("HoodieInflightReplaceMetadata", f"{_NAMESPACE}.HoodieCommitMetadata"),
        _optional(
            "hoodieIndexCommitMetadata", _dedupe(_nested("HoodieIndexCommitMetadata"), _NAMESPACE, defined)
        ),
        _optional("stateTransitionTime", "string"),
    ]
    entry = {"type": "record", "name": "HoodieArchivedMetaEntry", "namespace": _NAMESPACE, "fields": fields}
    defined[f"{_NAMESPACE}.HoodieArchivedMetaEntry"] = entry
    return json.dumps(entry, separators=(",", ":")), defined


def archived_meta_schema_json() -> str:
    """The ``HoodieArchivedMetaEntry`` schema hoodied writes in each block's SCHEMA header."""
    return _schema()[0]


def _record_schema(name: str) -> dict[str, Any]:
    return dict(_schema()[1][f"{_NAMESPACE}.{name}"])


# ---------------------------------------------------------------------------- conversion


def _conform(schema: Any, value: Any, named: Mapping[str, Any], where: str) -> Any:
    """``value`` (decoded JSON or Avro) shaped for ``schema``, as Jackson's ``convertValue`` maps
    a JSON tree onto a generated Avro class: known fields by name, missing ones null."""
    if isinstance(schema, str):
        full = schema if schema in named else f"{_NAMESPACE}.{schema}"
        if full in named:
            return _conform(named[full], value, named, where)
        if value is None:
            raise HoodieFormatError(f"{where}: a {schema} value is missing")
        return _primitive(schema, value, where)
    if isinstance(schema, list):
        if value is None:
            if "null" not in schema:
                raise HoodieFormatError(f"{where}: a required value is missing")
            return None
        branch = next(b for b in schema if b != "null")
        return _conform(branch, value, named, where)
    kind = schema["type"]
    if kind == "record":
        return _conform_fields(schema, value, named, where)
    if kind == "map":
        if not isinstance(value, Mapping):
            raise HoodieFormatError(f"{where}: expected a map")
        return {str(k): _conform(schema["values"], v, named, where) for k, v in value.items()}
    if kind == "array":
        if not isinstance(value, list):
            raise HoodieFormatError(f"{where}: expected an array")
        return [_conform(schema["items"], v, named, where) for v in value]
    if kind in ("enum", "fixed"):
        return value
    return _conform(kind, value, named, where)


def _conform_fields(
    schema: Mapping[str, Any], value: Any, named: Mapping[str, Any], where: str
) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise HoodieFormatError(f"{where}: expected an object for {schema['name']}")
    out: dict[str, Any] = {}
    for f in schema["fields"]:
        v = value.get(f["name"])
        if v is None and not _nullable(f["type"]):
            v = f.get("default")
        out[f["name"]] = _conform(f["type"], v, named, f"{where}.{f['name']}")
    return out


def _nullable(schema: Any) -> bool:
    return isinstance(schema, list) and "null" in schema


def _primitive(kind: str, value: Any, where: str) -> Any:
    try:
        if kind in ("int", "long"):
            return int(value)
        if kind in ("float", "double"):
            return float(value)
        if kind == "boolean":
            return bool(value)
        if kind == "string":
            return value if isinstance(value, str) else str(value)
    except (TypeError, ValueError):
        raise HoodieFormatError(f"{where}: {value!r} is not a {kind}") from None
    return value


def _conform_record(name: str, value: Mapping[str, Any], where: str) -> dict[str, Any]:
    named = _schema()[1]
    return dict(_conform(_record_schema(name), value, named, where))


def _json(data: bytes, where: str) -> dict[str, Any]:
    """``HoodieCommitMetadata.fromBytes``: empty bytes are a new, empty ``HoodieCommitMetadata``."""
    if not data.strip():
        return {
            "partitionToWriteStats": {},
            "compacted": False,
            "extraMetadata": {},
            "operationType": "UNKNOWN",
        }
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HoodieFormatError(f"{where}: not JSON commit metadata ({exc})") from None
    if not isinstance(value, dict):
        raise HoodieFormatError(f"{where}: commit metadata is not a JSON object")
    return value


def convert_commit_metadata(data: bytes, where: str, *, replace: bool = False) -> dict[str, Any]:
    """The Avro ``HoodieCommitMetadata`` (or ``HoodieReplaceCommitMetadata``) of a v6 JSON file.

    ``MetadataConversionUtils.convertCommitMetadata``: the JSON fields the Avro record knows,
    ``operationType`` COMPACT when ``compacted``, and ``extraMetadata["ROLLING_STAT"] = ""``.
    """
    value = _json(data, where)
    stats = value.get("partitionToWriteStats")
    if isinstance(stats, dict):
        value["partitionToWriteStats"] = {k: v for k, v in stats.items() if k != "null"}
    record = _conform_record(
        "HoodieReplaceCommitMetadata" if replace else "HoodieCommitMetadata", value, where
    )
    record["version"] = None  # not in the JSON: the generated class leaves it unset
    if value.get("compacted"):
        record["operationType"] = "COMPACT"
    record["extraMetadata"] = {**(record.get("extraMetadata") or {}), ROLLING_STAT_KEY: ""}
    return record


def _avro(data: bytes, name: str, where: str) -> dict[str, Any]:
    return _conform_record(name, read_single_record(data, where), where)


def _file_action(inst: Instant, state: State) -> str:
    action = inst.action if state is not State.COMPLETED else inst.file_action
    # layout 1 has no clustering action: a v6 clustering is a replacecommit throughout
    return Action.REPLACE_COMMIT.value if action is Action.CLUSTERING else action.value


def _commit(data: bytes, where: str) -> dict[str, Any]:
    return convert_commit_metadata(data, where)


def _replace(data: bytes, where: str) -> dict[str, Any]:
    return convert_commit_metadata(data, where, replace=True)


def _avro_of(name: str) -> Callable[[bytes, str], dict[str, Any]]:
    return lambda data, where: _avro(data, name, where)


_R, _I, _C = State.REQUESTED, State.INFLIGHT, State.COMPLETED
#: (file action, state) -> (record field, decoder, whether an empty file leaves the field null).
_DETAILS: dict[tuple[str, State], tuple[str, Callable[[bytes, str], dict[str, Any]], bool]] = {
    ("clean", _C): ("hoodieCleanMetadata", _avro_of("HoodieCleanMetadata"), False),
    ("clean", _R): ("hoodieCleanerPlan", _avro_of("HoodieCleanerPlan"), True),
    ("clean", _I): ("hoodieCleanerPlan", _avro_of("HoodieCleanerPlan"), True),
    **{
        (a, st): ("hoodieCommitMetadata", _commit, False)
        for a in ("commit", "deltacommit")
        for st in (_R, _I, _C)
    },
    ("replacecommit", _C): ("hoodieReplaceCommitMetadata", _replace, False),
    ("replacecommit", _I): ("HoodieInflightReplaceMetadata", _commit, True),
    ("replacecommit", _R): (
        "hoodieRequestedReplaceMetadata",
        _avro_of("HoodieRequestedReplaceMetadata"),
        True,
    ),
    ("rollback", _C): ("hoodieRollbackMetadata", _avro_of("HoodieRollbackMetadata"), False),
    ("savepoint", _C): ("hoodieSavePointMetadata", _avro_of("HoodieSavepointMetadata"), False),
    ("compaction", _R): ("hoodieCompactionPlan", _avro_of("HoodieCompactionPlan"), False),
    ("logcompaction", _R): ("hoodieCompactionPlan", _avro_of("HoodieCompactionPlan"), False),
}
#: Actions Hudi 0.x archives (others make ``createMetaWrapper`` throw).
_ARCHIVABLE = frozenset(a for a, _ in _DETAILS) | {"rollback", "savepoint"}


def meta_entry(
    inst: Instant,
    state: State,
    data: bytes,
    transition_time: str | None,
    where: str,
    *,
    commit_time: str | None = None,
) -> dict[str, Any]:
    """The ``HoodieArchivedMetaEntry`` of one timeline file (``createMetaWrapper``).

    ``commit_time``: the instant time as the file names it, when it differs from the parsed
    ``inst.requested_time`` (``meta_entries`` passes it; see ``file_instant_time``)."""
    action = _file_action(inst, state)
    if action not in _ARCHIVABLE:
        raise HoodieFormatError(f"{where}: Hudi 0.x does not archive {action} instants")
    entry: dict[str, Any] = {
        "commitTime": commit_time or inst.requested_time,
        "actionType": action,
        "actionState": state.name,
        "stateTransitionTime": transition_time,
        "version": None,
    }
    if state is State.COMPLETED and not data:
        return entry  # createMetaWrapperForEmptyInstant
    details = _DETAILS.get((action, state))
    if details is not None:
        name, decode, skip_empty = details
        if data or not skip_empty:
            entry[name] = decode(data, where)
    return entry


_LEADING_DIGITS = re.compile(r"^(\d+)")


def file_instant_time(path: str) -> str:
    """The instant time a timeline file's name starts with, all its digits.

    0.x metadata tables name their compactions and cleans after a delta commit plus a 3-digit
    suffix (``HoodieTableMetadataUtil.createCompactionTimestamp``: ``<T>001``, cleans ``<T>002``).
    Hudi 0.x keeps the 20 digits as the instant's timestamp (``HoodieInstant``; only
    ``parseDateFromInstantTime`` trims them to 17 to read a date) and archives it under them, while
    hoodied's timeline parser trims them to 17."""
    m = _LEADING_DIGITS.match(path.rsplit("/", 1)[-1])
    if m is None:
        raise HoodieFormatError(f"{path}: not a timeline file")
    return m.group(1)


def meta_entries(
    storage: Storage,
    config: TableConfig,
    instants: Iterable[Instant],
    state_files: Callable[[Instant], Mapping[State, str]],
) -> list[dict[str, Any]]:
    """The records of ``instants``: one per timeline file, requested, inflight, completed.

    ``state_files`` is ``Timeline.state_files``; each file's modification time (listed once)
    becomes its ``stateTransitionTime`` in the table's time zone.
    """
    tz = config.tzinfo
    mtimes = {i.path: i.mtime_ms for i in storage.list(config.timeline_path) if not i.is_dir}
    records: list[dict[str, Any]] = []
    for inst in instants:
        files = state_files(inst)
        for state in (State.REQUESTED, State.INFLIGHT, State.COMPLETED):
            path = files.get(state)
            if path is None:
                continue
            mtime = mtimes.get(path)
            moment = datetime_to_instant_time(datetime.fromtimestamp(mtime / 1000, tz), tz) if mtime else None
            records.append(
                meta_entry(inst, state, storage.read(path), moment, path, commit_time=file_instant_time(path))
            )
    return records


def write_archive_file(
    storage: Storage,
    archive_path: str,
    records: Sequence[Mapping[str, Any]],
    *,
    batch_size: int = DEFAULT_ARCHIVAL_BATCH,
    check: Callable[[], None] | None = None,
) -> str:
    """Write ``records`` into a new archive file (latest version + 1), write-once; its name.

    Raises ``FileAlreadyExistsError`` when another writer took that version first.
    """
    if not records:
        raise ValueError("no records to archive")
    if batch_size < 1:
        raise ValueError("hoodie.commits.archival.batch.size must be at least 1")
    schema = archived_meta_schema_json()
    header = {HeaderKey.SCHEMA: schema}
    blocks = [
        encode_block(BlockType.AVRO_DATA, header, encode_avro_data_block(records[i : i + batch_size], schema))
        for i in range(0, len(records), batch_size)
    ]
    existing = archive_file_names(storage, archive_path)
    name = ArchiveFileName((existing[-1].version + 1) if existing else 1, ARCHIVE_WRITE_TOKEN).format()
    if check is not None:
        check()
    write_log_file(storage, f"{archive_path}/{name}", blocks)
    return name


# ---------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class ArchivedRecord:
    """One ``HoodieArchivedMetaEntry``: a timeline file's identity and its decoded record."""

    requested_time: str
    action: str
    state: State
    state_transition_time: str | None
    file: str
    record: dict[str, Any] = field(repr=False, compare=False)

    @property
    def family(self) -> str:
        return _COMPARABLE.get(self.action, self.action)


class ArchivedTimelineV6:
    """Every record of every ``.commits_.archive*`` file (``HoodieArchivedTimeline``)."""

    def __init__(self, path: str, records: list[ArchivedRecord]) -> None:
        self.path = path
        self.records = records
        self._groups: dict[tuple[str, str], list[ArchivedRecord]] = {}
        for r in records:
            self._groups.setdefault((r.requested_time, r.family), []).append(r)

    @classmethod
    def load(cls, storage: Storage, config: TableConfig, *, latest_only: bool = False) -> ArchivedTimelineV6:
        """Read every archive file (``latest_only``: the newest one, what one archival wrote)."""
        path = config.history_path
        records: list[ArchivedRecord] = []
        if config.timeline_layout >= 2:
            return cls(path, records)
        # no ``exists`` check: object stores have no folders, an absent one lists as empty
        names = archive_file_names(storage, path)
        for name in names[-1:] if latest_only else names:
            file = f"{path}/{name.format()}"
            for block in read_log_blocks(storage, file):
                if block.block_type is not BlockType.AVRO_DATA:
                    raise HoodieFormatError(
                        f"{block.where}: {block.block_type.name} block in an archive file"
                    )
                records.extend(_record(r, file) for r in avro_block_records(block))
        return cls(path, records)

    def _completed(self, key: tuple[str, str]) -> ArchivedRecord | None:
        return next((r for r in self._groups.get(key, []) if r.state is State.COMPLETED), None)

    def instants(self) -> list[Instant]:
        """The archived completed instants, resolved as on the active timeline (oldest first)."""
        out: list[Instant] = []
        for key, group in self._groups.items():
            done = self._completed(key)
            if done is None:
                continue
            action = Action(done.action)
            pending = next((Action(r.action) for r in group if r.action != done.action), None)
            if pending is not None and COMPLETED_ACTION.get(pending) is action:
                action = pending
            out.append(Instant(done.requested_time, action, State.COMPLETED, done.state_transition_time))
        out.sort(key=lambda i: (i.requested_time, i.action.value))
        return out

    def holds(self, inst: Instant) -> bool:
        """True when a completed record of ``inst`` (same requested time and action family) exists."""
        family = _COMPARABLE.get(inst.file_action.value, inst.file_action.value)
        return self._completed((inst.requested_time, family)) is not None

    def get(self, requested_time: str) -> Instant | None:
        return next((i for i in self.instants() if i.requested_time == requested_time), None)

    def metadata(self, inst: Instant) -> dict[str, Any] | None:
        """The completed record's details (the field ``getMetadataKey`` names), or ``None``."""
        family = _COMPARABLE.get(inst.file_action.value, inst.file_action.value)
        done = self._completed((inst.requested_time, family))
        if done is None:
            return None
        value = done.record.get(_METADATA_KEY.get(done.action, ""))
        return copy.deepcopy(value) if isinstance(value, dict) else None

    def entries(self, inst: Instant) -> list[ArchivedRecord]:
        """Every record (requested, inflight, completed) of ``inst``."""
        family = _COMPARABLE.get(inst.file_action.value, inst.file_action.value)
        return list(self._groups.get((inst.requested_time, family), []))


def _record(raw: Mapping[str, Any], file: str) -> ArchivedRecord:
    time = raw.get("commitTime")
    action = raw.get("actionType")
    if not isinstance(time, str) or not isinstance(action, str):
        raise HoodieFormatError(f"{file}: archived record without commitTime/actionType")
    state_name = raw.get("actionState") or "COMPLETED"
    state = _STATES.get(state_name)
    if state is None:
        raise HoodieFormatError(f"{file}: archived record of {time} has actionState {state_name!r}")
    if action not in {a.value for a in Action}:
        raise HoodieFormatError(f"{file}: archived record of {time} has unknown action {action!r}")
    return ArchivedRecord(time, action, state, raw.get("stateTransitionTime"), file, dict(raw))
