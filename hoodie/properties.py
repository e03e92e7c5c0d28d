"""``hoodie.properties``: the Java-properties grammar and the typed, frozen table config.

This module owns reading a table's ``.hoodie/hoodie.properties`` (with Hudi's fallback to
``hoodie.properties.backup``), its checksum, and turning the raw keys into ``TableConfig``
through one key registry (``KEYS``: each key with the other names Hudi reads it under,
``hoodied.hoodie.config_keys.ConfigKey``). Table versions are data: only 6, 8 and 9 load, and a
base file format other than PARQUET is refused (the metadata table, HFILE, is loaded with
``metadata_table=True``).

Grammar of the file (``java.util.Properties.load``)::

    file     = { line }
    line     = blank | comment | entry
    comment  = ws ("#" | "!") rest-of-line          (never continued)
    entry    = ws key [ws] [("=" | ":") ] [ws] value  (a line ending in an odd number of
               backslashes continues on the next line, whose leading whitespace is dropped)
    escapes  = \\t \\n \\r \\f \\uXXXX, and "\\" + any other char = that char
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hoodied.hoodie.config_keys import ConfigKey
from hoodied.hoodie.errors import HoodieFormatError, TableNotFoundError, UnsupportedTableError
from hoodied.hoodie.storage import Storage

__all__ = [
    "KEYS",
    "PROPERTIES_BACKUP_FILE",
    "PROPERTIES_FILE",
    "SUPPORTED_VERSIONS",
    "ConfigKey",
    "MergeMode",
    "TableConfig",
    "TableType",
    "format_java_properties",
    "java_date",
    "load_table_config",
    "parse_java_properties",
    "partition_metadata_text",
    "properties_text",
    "read_table_name",
    "read_table_properties",
    "table_checksum",
]

log = logging.getLogger(__name__)

PROPERTIES_FILE = ".hoodie/hoodie.properties"
PROPERTIES_BACKUP_FILE = ".hoodie/hoodie.properties.backup"
SUPPORTED_VERSIONS = (6, 8, 9)

_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


# --------------------------------------------------------------------------------------
# Java properties grammar
# --------------------------------------------------------------------------------------


def _logical_lines(text: str) -> list[str]:
    """Join continued lines; drop blank and comment lines (comments are never continued)."""
    out: list[str] = []
    pending: str | None = None
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.lstrip(_WS)
        if pending is None:
            if not line or line[0] in "#!":
                continue
        trailing = len(line) - len(line.rstrip("\\"))
        continued = trailing % 2 == 1
        body = line[:-1] if continued else line
        pending = body if pending is None else pending + body
        if not continued:
            out.append(pending)
            pending = None
    if pending is not None:
        out.append(pending)
    return out


#: The first character that may end a key: a separator, whitespace, or an escape (``_split_entry``).
_KEY_END = re.compile(r"[\\=: \t\f]")
#: One escape: a backslash and the character after it (none at the very end of a line).
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _unescaped(match: re.Match[str]) -> str:
    c = match.group(1)
    return _ESCAPES.get(c, c)


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    if "\\u" not in s:
        # no \\uXXXX: every escape is one character (the same as the loop below, in one C-level pass)
        text = _ESCAPE.sub(_unescaped, s)
        if _SURROGATE.search(text) is not None:
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return text
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= n:
            break
        c = s[i]
        if c == "u":
            digits = s[i + 1 : i + 5]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\uxxxx escape {s[i - 1 : i + 5]!r}")
            out.append(chr(int(digits, 16)))
            i += 5
            continue
        out.append(_ESCAPES.get(c, c))
        i += 1
    text = "".join(out)
    if _SURROGATE.search(text) is not None:
        # Java strings are UTF-16: a \uD83D\uDE00 pair is one character
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _split_entry(line: str) -> tuple[str, str]:
    """Split one logical line at the first unescaped ``=``, ``:`` or whitespace."""
    n = len(line)
    first = _KEY_END.search(line)
    i = n if first is None else first.start()
    if first is not None and line[i] == "\\":  # an escaped key: character by character
        i = 0
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WS:
            break
        i += 1
    key = line[:i]
    # whitespace, then at most one separator, then whitespace
    while i < n and line[i] in _WS:
        i += 1
    if i < n and line[i] in "=:":
        i += 1
    while i < n and line[i] in _WS:
        i += 1
    return key, line[i:]


def parse_java_properties(text: str) -> dict[str, str]:
    """Parse properties text as ``java.util.Properties.load`` does; later keys win.

    Raises ``ValueError`` on a malformed ``\\uXXXX`` escape (Java throws too).
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_entry(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _escape(s: str, *, is_key: bool) -> str:
    out: list[str] = []
    for i, c in enumerate(s):
        if c == " ":
            # Java escapes every space of a key, but only a leading space of a value
            out.append("\\ " if is_key or i == 0 else " ")
        elif c == "\\":
            out.append("\\\\")
        elif c == "\t":
            out.append("\\t")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\f":
            out.append("\\f")
        elif c in "=:#!":
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) > 0x7E:
            out.append(f"\\u{ord(c):04X}" if ord(c) <= 0xFFFF else _surrogates(c))
        else:
            out.append(c)
    return "".join(out)


def _surrogates(c: str) -> str:
    encoded = c.encode("utf-16-be")
    units = (int.from_bytes(encoded[0:2], "big"), int.from_bytes(encoded[2:4], "big"))
    return "".join(f"\\u{u:04X}" for u in units)


def format_java_properties(props: Mapping[str, str], comment_lines: Sequence[str] = ()) -> str:
    """Text as ``java.util.Properties.store`` writes it (``#`` comments, Java escaping, ``\\n``)."""
    lines = []
    for comment in comment_lines:
        for part in comment.splitlines() or [""]:
            lines.append("#" + "".join(c if ord(c) <= 0x7E else f"\\u{ord(c):04X}" for c in part))
    for key, value in props.items():
        lines.append(f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}")
    return "\n".join(lines) + "\n"


def table_checksum(props: Mapping[str, str]) -> int:
    """Hudi's ``hoodie.table.checksum``: CRC32 of ``"<database>.<table name>"`` (database may be empty)."""
    name = props.get(KEYS.NAME.key)
    if name is None:
        raise HoodieFormatError(f"{PROPERTIES_FILE}: {KEYS.NAME.key} is missing")
    database = props.get(KEYS.DATABASE.key, "")
    return zlib.crc32(f"{database}.{name}".encode())


# --------------------------------------------------------------------------------------
# Key registry
# --------------------------------------------------------------------------------------


class KEYS:
    """The table-config keys hoodied reads (names and alternatives as in Hudi's ``HoodieTableConfig``)."""

    NAME = ConfigKey("hoodie.table.name", doc="Table name; part of the checksum.")
    DATABASE = ConfigKey("hoodie.database.name", "", "Database name; part of the checksum.")
    TYPE = ConfigKey("hoodie.table.type", "COPY_ON_WRITE", "COPY_ON_WRITE or MERGE_ON_READ.")
    VERSION = ConfigKey("hoodie.table.version", doc="Table version: 6 (0.14/0.15), 8 (1.0), 9 (1.1).")
    LAYOUT = ConfigKey("hoodie.timeline.layout.version", doc="1: files in .hoodie/; 2: .hoodie/timeline/.")
    TIMELINE_PATH = ConfigKey("hoodie.timeline.path", "timeline", "Active timeline folder under .hoodie.")
    HISTORY_PATH = ConfigKey("hoodie.timeline.history.path", "history", "LSM history folder in the timeline.")
    ARCHIVE_FOLDER = ConfigKey("hoodie.archivelog.folder", "archived", "Layout-1 archived timeline folder.")
    RECORD_KEY = ConfigKey("hoodie.table.recordkey.fields", doc="Comma-separated record key fields.")
    PARTITION = ConfigKey("hoodie.table.partition.fields", doc="Comma-separated, optionally field:TYPE.")
    ORDERING = ConfigKey(
        "hoodie.table.ordering.fields",
        doc="Comma-separated ordering fields (v9); older tables use the precombine field.",
        alternatives=("hoodie.table.precombine.field",),
    )
    MERGE_MODE = ConfigKey("hoodie.record.merge.mode", doc="COMMIT_TIME / EVENT_TIME _ORDERING or CUSTOM.")
    MERGE_STRATEGY = ConfigKey(
        "hoodie.record.merge.strategy.id", alternatives=("hoodie.compaction.record.merger.strategy",)
    )
    PAYLOAD = ConfigKey("hoodie.compaction.payload.class", alternatives=("hoodie.table.payload.class",))
    BASE_FORMAT = ConfigKey(
        "hoodie.table.base.file.format", "PARQUET", alternatives=("hoodie.table.ro.file.format",)
    )
    LOG_FORMAT = ConfigKey(
        "hoodie.table.log.file.format", "HOODIE_LOG", alternatives=("hoodie.table.rt.file.format",)
    )
    POPULATE_META = ConfigKey("hoodie.populate.meta.fields", "true")
    TIMEZONE = ConfigKey("hoodie.table.timeline.timezone", "LOCAL", "Zone of instant times: LOCAL or UTC.")
    HIVE_STYLE = ConfigKey("hoodie.datasource.write.hive_style_partitioning", "false")
    URL_ENCODE = ConfigKey("hoodie.datasource.write.partitionpath.urlencode", "false")
    DROP_PARTITION_COLUMNS = ConfigKey("hoodie.datasource.write.drop.partition.columns", "false")
    MDT_PARTITIONS = ConfigKey("hoodie.table.metadata.partitions", "")
    MDT_PARTITIONS_INFLIGHT = ConfigKey("hoodie.table.metadata.partitions.inflight", "")
    CREATE_SCHEMA = ConfigKey("hoodie.table.create.schema")
    KEYGEN_CLASS = ConfigKey("hoodie.table.keygenerator.class")
    KEYGEN_TYPE = ConfigKey("hoodie.table.keygenerator.type")
    CHECKSUM = ConfigKey("hoodie.table.checksum")


class TableType(StrEnum):
    COPY_ON_WRITE = "COPY_ON_WRITE"
    MERGE_ON_READ = "MERGE_ON_READ"


class MergeMode(StrEnum):
    COMMIT_TIME_ORDERING = "COMMIT_TIME_ORDERING"
    EVENT_TIME_ORDERING = "EVENT_TIME_ORDERING"
    CUSTOM = "CUSTOM"


_OVERWRITE_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
_DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
# The 2024-10 name of COMMIT_TIME_ORDERING, seen in early 1.0 tables.
_MERGE_MODE_ALIASES = {"OVERWRITE_WITH_LATEST": MergeMode.COMMIT_TIME_ORDERING}


def _csv(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _bool(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _local_zone() -> tzinfo:
    """The zone a Java writer on this host would use for LOCAL (``TZ``, else /etc/localtime)."""
    tz_name = os.environ.get("TZ")
    if tz_name:
        try:
            return ZoneInfo(tz_name.lstrip(":"))
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        with open("/etc/localtime", "rb") as f:
            return ZoneInfo.from_file(f, key="localtime")
    except (OSError, ValueError):
        local = datetime.now().astimezone().tzinfo
        return local if local is not None else UTC


@dataclass(frozen=True)
class TableConfig:
    """The typed view of one table's ``hoodie.properties`` (raw keys stay in ``props``)."""

    name: str
    database: str
    table_type: TableType
    version: int
    timeline_layout: int
    timeline_path: str
    history_path: str
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...]
    ordering_fields: tuple[str, ...]
    merge_mode: MergeMode
    payload_class: str | None
    merge_strategy_id: str | None
    base_file_format: str
    log_file_format: str
    populate_meta_fields: bool
    timezone: str
    hive_style_partitioning: bool
    partition_urlencoded: bool
    drop_partition_columns: bool
    metadata_partitions: tuple[str, ...]
    metadata_partitions_inflight: tuple[str, ...]
    create_schema: str | None
    key_generator: str | None
    props: Mapping[str, str] = field(repr=False, compare=False, hash=False, default_factory=dict)

    @property
    def is_mor(self) -> bool:
        return self.table_type is TableType.MERGE_ON_READ

    @property
    def has_completion_time(self) -> bool:
        """Version 8 on: completed timeline files carry their completion time."""
        return self.version >= 8

    @property
    def metadata_table_available(self) -> bool:
        return "files" in self.metadata_partitions

    @property
    def tzinfo(self) -> tzinfo:
        return UTC if self.timezone == "UTC" else _local_zone()

    @classmethod
    def from_props(cls, props: Mapping[str, str], *, where: str = PROPERTIES_FILE) -> TableConfig:
        """Build the config from parsed keys; refuses unknown versions (``UnsupportedTableError``)."""
        name = KEYS.NAME.get(props)
        if not name:
            raise HoodieFormatError(f"{where}: {KEYS.NAME.key} is missing")
        version = _int_key(props, KEYS.VERSION, where, default=None)
        if version not in SUPPORTED_VERSIONS:
            raise UnsupportedTableError(
                f"{where}: table version {version} is not supported (hoodied reads 6, 8, 9)"
            )
        layout = _int_key(props, KEYS.LAYOUT, where, default=2 if version >= 8 else 1)
        if layout not in (1, 2) or (version >= 8) != (layout == 2):
            raise UnsupportedTableError(
                f"{where}: timeline layout {layout} with table version {version} is not supported"
            )
        type_s = (KEYS.TYPE.get(props) or "").strip().upper()
        try:
            table_type = TableType(type_s)
        except ValueError:
            raise HoodieFormatError(f"{where}: unknown {KEYS.TYPE.key} {type_s!r}") from None
        if layout == 2:
            timeline_path = f".hoodie/{KEYS.TIMELINE_PATH.get(props)}"
            history_path = f"{timeline_path}/{KEYS.HISTORY_PATH.get(props)}"
        else:
            timeline_path = ".hoodie"
            history_path = f".hoodie/{KEYS.ARCHIVE_FOLDER.get(props)}"
        ordering = _csv(KEYS.ORDERING.get(props))
        payload = KEYS.PAYLOAD.get(props)
        timezone = (KEYS.TIMEZONE.get(props) or "LOCAL").strip().upper()
        if timezone not in ("LOCAL", "UTC"):
            raise HoodieFormatError(f"{where}: unknown {KEYS.TIMEZONE.key} {timezone!r} (LOCAL or UTC)")
        return cls(
            name=name,
            database=KEYS.DATABASE.get(props) or "",
            table_type=table_type,
            version=version,
            timeline_layout=layout,
            timeline_path=timeline_path,
            history_path=history_path,
            record_key_fields=_csv(KEYS.RECORD_KEY.get(props)),
            # "field:TYPE" (custom key generator) names the field before the colon
            partition_fields=tuple(p.split(":", 1)[0] for p in _csv(KEYS.PARTITION.get(props))),
            ordering_fields=ordering,
            merge_mode=_merge_mode(props, version, ordering, payload, where),
            payload_class=payload,
            merge_strategy_id=KEYS.MERGE_STRATEGY.get(props),
            base_file_format=(KEYS.BASE_FORMAT.get(props) or "PARQUET").strip().upper(),
            log_file_format=(KEYS.LOG_FORMAT.get(props) or "HOODIE_LOG").strip().upper(),
            populate_meta_fields=_bool(KEYS.POPULATE_META.get(props)),
            timezone=timezone,
            hive_style_partitioning=_bool(KEYS.HIVE_STYLE.get(props)),
            partition_urlencoded=_bool(KEYS.URL_ENCODE.get(props)),
            drop_partition_columns=_bool(KEYS.DROP_PARTITION_COLUMNS.get(props)),
            metadata_partitions=_csv(KEYS.MDT_PARTITIONS.get(props)),
            metadata_partitions_inflight=_csv(KEYS.MDT_PARTITIONS_INFLIGHT.get(props)),
            create_schema=KEYS.CREATE_SCHEMA.get(props),
            key_generator=KEYS.KEYGEN_TYPE.get(props) or KEYS.KEYGEN_CLASS.get(props),
            props=dict(props),  # a plain dict so the config pickles (Spark workers)
        )


def _int_key(props: Mapping[str, str], key: ConfigKey, where: str, *, default: int | None) -> int:
    raw = key.get(props)
    if raw is None:
        if default is None:
            raise HoodieFormatError(f"{where}: {key.key} is missing")
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise HoodieFormatError(f"{where}: {key.key} is not a number ({raw!r})") from None


def _merge_mode(
    props: Mapping[str, str], version: int, ordering: tuple[str, ...], payload: str | None, where: str
) -> MergeMode:
    raw = KEYS.MERGE_MODE.get(props)
    if raw:
        value = raw.strip().upper()
        if value in _MERGE_MODE_ALIASES:
            return _MERGE_MODE_ALIASES[value]
        try:
            return MergeMode(value)
        except ValueError:
            raise HoodieFormatError(f"{where}: unknown {KEYS.MERGE_MODE.key} {raw!r}") from None
    if version == 6:
        if payload is None or payload == _OVERWRITE_PAYLOAD:
            return MergeMode.COMMIT_TIME_ORDERING
        if payload == _DEFAULT_PAYLOAD:
            return MergeMode.EVENT_TIME_ORDERING
        return MergeMode.CUSTOM
    # 1.x infers event-time ordering whenever an ordering field is configured
    return MergeMode.EVENT_TIME_ORDERING if ordering else MergeMode.COMMIT_TIME_ORDERING


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def _read_candidate(storage: Storage, path: str) -> dict[str, str]:
    """Parse one properties file; HoodieFormatError when it is unparsable or its checksum is wrong."""
    data = storage.read(path)
    try:
        # Properties.load(InputStream) reads ISO-8859-1; other chars arrive as \\uXXXX escapes
        props = parse_java_properties(data.decode("latin-1"))
    except ValueError as exc:
        raise HoodieFormatError(f"{path}: not a valid properties file ({exc})") from None
    if not props:
        raise HoodieFormatError(f"{path}: empty properties file")
    if KEYS.NAME.key not in props or KEYS.TYPE.key not in props:
        missing = KEYS.NAME.key if KEYS.NAME.key not in props else KEYS.TYPE.key
        raise HoodieFormatError(f"{path}: {missing} is missing (not a valid hoodie.properties)")
    stored = props.get(KEYS.CHECKSUM.key)
    if stored is not None:
        computed = table_checksum(props)
        try:
            ok = int(stored.strip()) == computed
        except ValueError:
            ok = False
        if not ok:
            raise HoodieFormatError(
                f"{path}: checksum mismatch (hoodie.table.checksum={stored}, "
                f"CRC32 of {props.get(KEYS.DATABASE.key, '')}.{props[KEYS.NAME.key]} is {computed})"
            )
    return props


def read_table_properties(storage: Storage) -> tuple[dict[str, str], str]:
    """The raw properties and the file they came from, as Hudi reads them.

    Hudi tries ``hoodie.properties`` then ``hoodie.properties.backup`` (a writer may be in the
    middle of an update) and accepts the first that parses and whose checksum, when present,
    matches. Absent both -> TableNotFoundError; present but invalid -> HoodieFormatError.
    """
    first_error: HoodieFormatError | None = None
    found = False
    for path in (PROPERTIES_FILE, PROPERTIES_BACKUP_FILE):
        if not storage.exists(path):
            continue
        found = True
        try:
            props = _read_candidate(storage, path)
        except HoodieFormatError as exc:
            # Raised below unless the backup copy is good; then it is worth a warning.
            log.debug("%s", exc)
            first_error = first_error or exc
            continue
        if first_error is not None:
            log.warning("%s; read %s instead", first_error, path)
        return props, path
    if not found:
        raise TableNotFoundError(f"{storage.base_uri}: not a Hudi table (no {PROPERTIES_FILE})")
    assert first_error is not None
    raise first_error


def read_table_name(storage: Storage) -> str | None:
    """The table's ``hoodie.table.name`` as written, without validating the rest of the config: what
    Hudi's ZooKeeper and DynamoDB lock providers infer their lock key from."""
    return read_table_properties(storage)[0].get("hoodie.table.name")


def load_table_config(storage: Storage, *, metadata_table: bool = False) -> TableConfig:
    """Load and validate the table config; refuses what hoodied cannot serve.

    ``metadata_table=True`` is for ``.hoodie/metadata`` (HFILE base files, a MOR table).
    """
    props, path = read_table_properties(storage)
    config = TableConfig.from_props(props, where=path)
    if metadata_table:
        if config.base_file_format != "HFILE":
            raise HoodieFormatError(
                f"{path}: metadata table base file format is {config.base_file_format}, expected HFILE"
            )
    elif config.base_file_format != "PARQUET":
        raise UnsupportedTableError(
            f"{path}: base file format {config.base_file_format} is not supported (hoodied reads PARQUET)"
        )
    return config


# ---------------------------------------------------------------- files written as java.util.Properties


def java_date(dt: datetime) -> str:
    """``java.util.Date.toString()`` of ``dt`` in UTC, e.g. ``Sat Mar 07 19:58:26 UTC 2026``."""
    dt = dt.astimezone(UTC)
    days = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    months = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    return f"{days[dt.weekday()]} {months[dt.month - 1]} {dt:%d %H:%M:%S} UTC {dt.year}"


def properties_text(props: Mapping[str, str], now: datetime) -> str:
    """``hoodie.properties`` text with the two comment lines ``Properties.store`` writes."""
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
    return format_java_properties(props, [f"Updated at {stamp}", java_date(now)])


def partition_metadata_text(commit_time: str, depth: int, now: datetime) -> str:
    props = {"commitTime": commit_time, "partitionDepth": str(depth)}
    return format_java_properties(props, ["partition metadata", java_date(now)])
